//! Case tables of inputs that must be rejected: a tenant repository ([`Case`], run by
//! [`run_all`]) or a policy file ([`PolicyCase`], run by [`run_policy_cases`]), each with exactly
//! the problems it must get ([`Expected`]: file, 1-based document, field, part of the message).
//! A failing case is reported by its name, and every failing case is reported at once. Used by
//! `bad_input` and `egress`.

use cdtarget::policy::{self, Policy};
use cdtarget::problem::Problem;

use crate::support;

/// One problem a case must report.
pub struct Expected {
    /// The file at fault.
    pub file: &'static str,
    /// `None` when the problem is with the file as a whole (YAML syntax).
    pub document: Option<usize>,
    /// The field path (empty for the document or file as a whole).
    pub field: &'static str,
    /// A substring of the message: what is wrong or what would be accepted.
    pub message: &'static str,
}

/// A problem in document `document` of `file`.
pub fn at(file: &'static str, document: usize, field: &'static str, message: &'static str) -> Expected {
    Expected { file, document: Some(document), field, message }
}

/// A problem in `target.yaml`, the file most cases consist of, document 1.
pub fn target_at(field: &'static str, message: &'static str) -> Expected {
    at("target.yaml", 1, field, message)
}

/// A tenant repository that must be rejected with exactly the `expected` problems.
pub struct Case {
    /// What the case is about, as a test name would say it.
    pub name: &'static str,
    /// The repository: `(path, text)` of each file.
    pub files: Vec<(&'static str, String)>,
    /// Every problem it must get, and no other.
    pub expected: Vec<Expected>,
}

/// A case with one file, `target.yaml`.
pub fn one_file(name: &'static str, text: String, expected: Vec<Expected>) -> Case {
    Case { name, files: vec![("target.yaml", text)], expected }
}

/// Every problem, one per line, for a failure message.
pub fn describe(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("\n      {:?}:{:?} {:?}: {}", p.file, p.document, p.field, p.message)).collect()
}

/// Matches `problems` against `expected`, one to one, in any order.
pub fn check_problems(problems: &[Problem], expected: &[Expected]) -> Result<(), String> {
    let mut unmatched: Vec<&Problem> = problems.iter().collect();
    let mut missing = Vec::new();
    for e in expected {
        let found = unmatched.iter().position(|p| {
            p.file.as_deref() == Some(e.file)
                && p.document == e.document
                && p.field == e.field
                && p.message.contains(e.message)
        });
        match found {
            Some(i) => {
                unmatched.remove(i);
            }
            None => missing.push(format!("\n      {}:{:?} {:?}: …{}…", e.file, e.document, e.field, e.message)),
        }
    }
    if missing.is_empty() && unmatched.is_empty() {
        Ok(())
    } else {
        let unexpected: Vec<Problem> = unmatched.into_iter().cloned().collect();
        Err(format!(
            "expected but not reported:{}\n    reported but not expected:{}\n    all reported:{}",
            missing.concat(),
            describe(&unexpected),
            describe(problems)
        ))
    }
}

/// Runs every case; panics naming every case that failed.
pub fn run_all(cases: &[Case], policy: &Policy) {
    let mut names = std::collections::BTreeSet::new();
    for case in cases {
        assert!(names.insert(case.name), "two cases are named {}", case.name);
    }
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let files: Vec<(&str, &str)> = case.files.iter().map(|(path, text)| (*path, text.as_str())).collect();
            let outcome = match support::load(&files, policy) {
                Ok(set) => Err(format!("was accepted (and would be rendered): {} documents", set.documents.len())),
                Err(problems) => check_problems(&problems, &case.expected),
            };
            outcome.err().map(|why| format!("case `{}`:\n    {why}", case.name))
        })
        .collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// A policy file that must be rejected with exactly the `expected` problems.
pub struct PolicyCase {
    name: &'static str,
    text: &'static str,
    expected: Vec<Expected>,
}

/// A policy case named `name`: `text` as `policy.yaml`.
pub fn policy_case(name: &'static str, text: &'static str, expected: Vec<Expected>) -> PolicyCase {
    PolicyCase { name, text, expected }
}

/// A problem in the only document of `policy.yaml`.
pub fn policy_at(field: &'static str, message: &'static str) -> Expected {
    at("policy.yaml", 1, field, message)
}

/// Runs every policy case; panics naming every case that failed.
pub fn run_policy_cases(cases: &[PolicyCase]) {
    let mut names = std::collections::BTreeSet::new();
    let failures: Vec<String> = cases
        .iter()
        .inspect(|case| assert!(names.insert(case.name), "two cases are named {}", case.name))
        .filter_map(|case| {
            let outcome = match policy::parse(case.text, "policy.yaml") {
                Ok(_) => Err("was accepted".to_owned()),
                Err(problems) => check_problems(&problems, &case.expected),
            };
            outcome.err().map(|why| format!("case `{}`:\n    {why}", case.name))
        })
        .collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
