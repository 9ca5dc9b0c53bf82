//! What a build may read: the files beneath one root (the repository), named by `/`-separated
//! paths relative to it.
//!
//! The builder only ever reads through [`Files`]; the loader gives it a reader that stays inside
//! the snapshot (no symlink out, bounded sizes), tests give it [`MemoryFiles`].
//!
//! `.git` is never read: not by a path naming it, not through a link into it, in any letter case
//! ([`is_git_name`]). A checkout's `.git/config` may hold a CI job's token in its remote URL.

use std::collections::BTreeMap;

/// Why a path through `.git` is refused, and what would be accepted (for paths a file names).
pub(crate) const GIT_PATH_REFUSED: &str = "passes through `.git`, which is never read (Git's own data: a checkout's \
     `.git/config` may hold credentials); name a file or directory outside `.git`";

/// Why a link into `.git` is refused, and what would be accepted.
pub(crate) const GIT_LINK_REFUSED: &str = "is a symlink into `.git`, which is never read (Git's own data: a checkout's \
     `.git/config` may hold credentials); point it at a file outside `.git`";

/// Whether a path component is `.git`, in any letter case (`.GIT` is the same directory on a
/// case-insensitive file system, as on a Mac).
pub(crate) fn is_git_name(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b".git")
}

/// Whether a `/`-separated path has a `.git` component, in any letter case.
pub(crate) fn passes_through_git(path: &str) -> bool {
    path.split('/').any(|c| is_git_name(c.as_bytes()))
}

/// What is at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (or a link to one inside the root).
    File,
    /// A directory (or a link to one inside the root).
    Directory,
}

/// Read access to the files beneath one root. Paths are relative to the root, `/`-separated,
/// normalised by the caller (no `.`, `..` or empty components); `""` is the root itself.
/// Every reader refuses a path through `.git` (any letter case, links included) and lists no
/// `.git` entry.
pub trait Files {
    /// What is at `path`, `Ok(None)` when nothing is; `Err` names why it cannot be looked at
    /// (it leaves the root through a link, it is a FIFO, ...).
    fn stat(&self, path: &str) -> Result<Option<Kind>, String>;
    /// The entry names of the directory at `path`, sorted.
    fn list(&self, path: &str) -> Result<Vec<String>, String>;
    /// The bytes of the file at `path`, within the reader's bounds.
    fn read(&self, path: &str) -> Result<Vec<u8>, String>;
}

/// Files held in memory, for tests and benches; directories are implied by the paths. As the
/// disk reader, it refuses and never lists `.git`, whatever was inserted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryFiles {
    files: BTreeMap<String, Vec<u8>>,
}

impl MemoryFiles {
    /// No files.
    pub fn new() -> Self {
        MemoryFiles::default()
    }

    /// Adds (or replaces) the file at `path`.
    pub fn insert(&mut self, path: impl Into<String>, bytes: impl Into<Vec<u8>>) -> &mut Self {
        self.files.insert(path.into(), bytes.into());
        self
    }

    fn is_directory(&self, path: &str) -> bool {
        if path.is_empty() {
            return true;
        }
        let prefix = format!("{path}/");
        self.files.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix))
    }
}

/// `Err` when `path` passes through `.git`.
fn refuse_git(path: &str) -> Result<(), String> {
    if passes_through_git(path) { Err(GIT_PATH_REFUSED.to_owned()) } else { Ok(()) }
}

impl Files for MemoryFiles {
    fn stat(&self, path: &str) -> Result<Option<Kind>, String> {
        refuse_git(path)?;
        if self.files.contains_key(path) {
            Ok(Some(Kind::File))
        } else if self.is_directory(path) {
            Ok(Some(Kind::Directory))
        } else {
            Ok(None)
        }
    }

    fn list(&self, path: &str) -> Result<Vec<String>, String> {
        refuse_git(path)?;
        if !self.is_directory(path) {
            return Err("is not a directory".into());
        }
        let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or_default().to_owned())
            .filter(|name| !is_git_name(name.as_bytes()))
            .collect();
        names.dedup();
        Ok(names)
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        refuse_git(path)?;
        self.files.get(path).cloned().ok_or_else(|| "no such file".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_files_imply_their_directories() {
        let mut files = MemoryFiles::new();
        files.insert("base/kustomization.yaml", "resources: []").insert("base/cm/a.yaml", "a").insert("top.yaml", "");
        assert_eq!(files.stat("base").unwrap(), Some(Kind::Directory));
        assert_eq!(files.stat("base/cm/a.yaml").unwrap(), Some(Kind::File));
        assert_eq!(files.stat("bas").unwrap(), None);
        assert_eq!(files.list("").unwrap(), ["base", "top.yaml"]);
        assert_eq!(files.list("base").unwrap(), ["cm", "kustomization.yaml"]);
        assert!(files.list("top.yaml").is_err());
        assert_eq!(files.read("base/cm/a.yaml").unwrap(), b"a");
    }

    #[test]
    fn memory_files_never_list_or_read_git_in_any_case() {
        let mut files = MemoryFiles::new();
        files.insert(".git/config", "url = https://gitlab-ci-token:glcbt-FAKE-TOKEN@example.com/x.git");
        files.insert("sub/.GIT/config", "glcbt-FAKE-TOKEN").insert(".gitignore", "").insert("sub/a.yaml", "a");
        for path in [".git", ".git/config", ".GIT/config", "sub/.Git/config", "sub/.GIT"] {
            for result in [files.stat(path).map(|_| Vec::new()), files.read(path), files.list(path).map(|_| Vec::new())]
            {
                let refused = result.expect_err(path);
                assert!(refused.contains("passes through `.git`") && !refused.contains("FAKE-TOKEN"), "{refused}");
            }
        }
        assert_eq!(files.list("").unwrap(), [".gitignore", "sub"]);
        assert_eq!(files.list("sub").unwrap(), ["a.yaml"]);
        assert_eq!(files.stat(".gitignore").unwrap(), Some(Kind::File));
        assert!(is_git_name(b".gIT") && !is_git_name(b".github") && !is_git_name(b"git"));
    }
}
