//! One problem found in a tenant's or an admin's input, located by file, document and field.
//!
//! Every check in cdtarget reports `Problem`s instead of failing on the first one, so a tenant
//! sees everything that is wrong with a push at once.

use std::fmt;

use serde::Serialize;

/// A problem with one field of one document, and what would be accepted instead.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Problem {
    /// The file the document came from, relative to the repository root (or as given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The 1-based position of the document in its file (empty documents are not counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<usize>,
    /// The 1-based line where the document starts, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The field path inside the document, such as `spec.ip[2]`; empty for the whole document.
    pub field: String,
    /// What is wrong, and what would be accepted.
    pub message: String,
}

impl Problem {
    /// A problem with `field`, not yet located in a file.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem { file: None, document: None, line: None, field: field.into(), message: message.into() }
    }

    /// Places the problem in a file (and, when known, a document and its starting line).
    pub fn located(mut self, file: &str, document: Option<usize>, line: Option<usize>) -> Self {
        self.file = Some(file.to_owned());
        self.document = document;
        self.line = line;
        self
    }

    /// Prefixes the field path, turning `ip[0]` into `spec.ip[0]`.
    pub fn under(mut self, parent: &str) -> Self {
        self.field = join_path(parent, &self.field);
        self
    }
}

/// Joins two field paths, keeping list indices attached (`spec` + `[0]` = `spec[0]`).
pub fn join_path(parent: &str, child: &str) -> String {
    match (parent.is_empty(), child.is_empty()) {
        (true, _) => child.to_owned(),
        (_, true) => parent.to_owned(),
        _ if child.starts_with('[') => format!("{parent}{child}"),
        _ => format!("{parent}.{child}"),
    }
}

impl fmt::Display for Problem {
    /// `path/to/file.yaml:DOC: field.path: message`, leaving out the parts that are unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
            if let Some(document) = self.document {
                write!(f, "{document}:")?;
            }
            f.write_str(" ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Collects problems under a common field prefix.
#[derive(Debug, Default)]
pub struct Problems(Vec<Problem>);

impl Problems {
    /// Records that `field` is wrong.
    pub fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem::field(field, message));
    }

    /// Records problems found by a nested check, under `parent`.
    pub fn extend_under(&mut self, parent: &str, problems: impl IntoIterator<Item = Problem>) {
        self.0.extend(problems.into_iter().map(|p| p.under(parent)));
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, in the order they were found.
    pub fn into_vec(self) -> Vec<Problem> {
        self.0
    }

    /// `Ok(value)` when nothing was recorded, otherwise every problem.
    pub fn finish<T>(self, value: T) -> Result<T, Vec<Problem>> {
        if self.0.is_empty() { Ok(value) } else { Err(self.0) }
    }
}

/// Longest message kept of one problem (tenant values quoted in it included).
pub const MAX_MESSAGE: usize = 2_048;
/// Longest field path kept of one problem.
pub const MAX_FIELD: usize = 512;

/// Problems kept up to a limit and the rest only counted, each cut to [`MAX_MESSAGE`] and
/// [`MAX_FIELD`]: what a revision can make a tenant's status hold is bounded whatever it holds.
#[derive(Debug)]
pub struct Bounded {
    kept: Vec<Problem>,
    more: usize,
    limit: usize,
}

impl Bounded {
    /// Keeps at most `limit` problems.
    pub fn new(limit: usize) -> Self {
        Bounded { kept: Vec::new(), more: 0, limit }
    }

    /// Records one problem.
    pub fn push(&mut self, problem: Problem) {
        if self.kept.len() < self.limit {
            self.kept.push(problem.cut());
        } else {
            self.more += 1;
        }
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.more == 0
    }

    /// The problems kept, in the order they were found, then one saying how many more there were.
    pub fn into_vec(self) -> Vec<Problem> {
        let mut problems = self.kept;
        if self.more > 0 {
            problems.push(Problem::field(
                "",
                format!("and {} more problems (only the first {} are reported)", self.more, self.limit),
            ));
        }
        problems
    }
}

impl Extend<Problem> for Bounded {
    fn extend<I: IntoIterator<Item = Problem>>(&mut self, problems: I) {
        for problem in problems {
            self.push(problem);
        }
    }
}

impl Problem {
    /// The problem with its message and field cut to [`MAX_MESSAGE`] and [`MAX_FIELD`] bytes
    /// (at a character boundary, `…` marking the cut).
    pub fn cut(mut self) -> Self {
        crate::text::cut(&mut self.message, MAX_MESSAGE);
        crate::text::cut(&mut self.field, MAX_FIELD);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_the_first_problems_cut_and_counts_the_rest() {
        let mut problems = Bounded::new(2);
        problems.extend((0..5).map(|i| Problem::field(format!("f{i}"), "é".repeat(MAX_MESSAGE))));
        let problems = problems.into_vec();
        assert_eq!(problems.len(), 3);
        assert_eq!((problems[0].field.as_str(), problems[1].field.as_str()), ("f0", "f1"));
        assert!(problems[0].message.len() <= MAX_MESSAGE + '…'.len_utf8() && problems[0].message.ends_with('…'));
        assert_eq!(problems[2].message, "and 3 more problems (only the first 2 are reported)");
    }

    #[test]
    fn display_names_file_document_and_field() {
        let p = Problem::field("spec.ip[0]", "not an address").located("a/b.yaml", Some(2), Some(9));
        assert_eq!(p.to_string(), "a/b.yaml:2: spec.ip[0]: not an address");
    }

    #[test]
    fn join_path_keeps_indices_attached() {
        assert_eq!(join_path("spec", "[0]"), "spec[0]");
        assert_eq!(join_path("spec", "ip"), "spec.ip");
        assert_eq!(join_path("", "ip"), "ip");
        assert_eq!(join_path("spec", ""), "spec");
    }
}
