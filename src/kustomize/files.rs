//! What a build may read: the files beneath one root (the repository), named by `/`-separated
//! paths relative to it.
//!
//! The builder only ever reads through [`Files`]; the loader gives it a reader that stays inside
//! the snapshot (no symlink out, bounded sizes), tests give it [`MemoryFiles`].

use std::collections::BTreeMap;

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
pub trait Files {
    /// What is at `path`, `Ok(None)` when nothing is; `Err` names why it cannot be looked at
    /// (it leaves the root through a link, it is a FIFO, ...).
    fn stat(&self, path: &str) -> Result<Option<Kind>, String>;
    /// The entry names of the directory at `path`, sorted.
    fn list(&self, path: &str) -> Result<Vec<String>, String>;
    /// The bytes of the file at `path`, within the reader's bounds.
    fn read(&self, path: &str) -> Result<Vec<u8>, String>;
}

/// Files held in memory, for tests and benches; directories are implied by the paths.
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

impl Files for MemoryFiles {
    fn stat(&self, path: &str) -> Result<Option<Kind>, String> {
        if self.files.contains_key(path) {
            Ok(Some(Kind::File))
        } else if self.is_directory(path) {
            Ok(Some(Kind::Directory))
        } else {
            Ok(None)
        }
    }

    fn list(&self, path: &str) -> Result<Vec<String>, String> {
        if !self.is_directory(path) {
            return Err("is not a directory".into());
        }
        let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or_default().to_owned())
            .collect();
        names.dedup();
        Ok(names)
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
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
}
