//! The snapshot writer: a commit's tree written into a directory that nothing in the tree can
//! leave.
//!
//! A tenant controls every byte of the tree, and a raw tree object can hold what `git` itself
//! never writes: two entries of one name (a symlink `x -> /root`, then a directory `x`), `..`,
//! names with `/`, odd modes. The writer therefore works in two steps:
//!
//! 1. `plan` reads the tree objects and checks every entry — name, mode, object type, depth,
//!    sizes, counts, duplicates — before anything touches the disk. A tree that breaks a rule is
//!    refused as a whole with an error naming the path ([`FailureKind::UnsafeTree`] or
//!    [`FailureKind::SnapshotTooLarge`]).
//! 2. The plan is written relative to directory descriptors: every directory is created with
//!    `mkdirat` and opened with `O_NOFOLLOW | O_DIRECTORY`, every file is created with
//!    `O_CREAT | O_EXCL | O_NOFOLLOW`, every symlink with `symlinkat`. Nothing is ever resolved
//!    through a path, so no symlink — written earlier or swapped in — is followed, and an entry
//!    that already exists is an error, never an overwrite.
//!
//! Symlinks are written as links; the manifests reader decides about them (it reads a link only
//! when it resolves to a file inside the tree). Submodule entries are skipped.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

use git2::{ErrorCode, ObjectType, Oid, Repository, Tree};
use rustix::fs::{CWD, Mode, OFlags};

use super::Limits;
use super::error::{FailureKind, SourceError};

/// Deepest directory nesting written (the writer recurses once per level).
pub const MAX_DEPTH: usize = 64;
/// Longest path inside a snapshot, in bytes; keeps every snapshot path well below `PATH_MAX`.
pub(crate) const MAX_PATH_BYTES: usize = 1024;
/// Longest file name (`NAME_MAX` of Linux file systems).
pub(crate) const MAX_NAME_BYTES: usize = 255;
/// Longest symlink target, in bytes (`PATH_MAX` less the terminating NUL).
pub(crate) const MAX_LINK_TARGET_BYTES: usize = 4095;
/// Largest tree entry that passes the checks: mode, space, a 255-byte name, NUL, SHA-256 id.
const MAX_TREE_ENTRY_BYTES: u64 = 6 + 1 + MAX_NAME_BYTES as u64 + 1 + 32;

/// Git's file modes, as stored in tree objects.
const MODE_TREE: i32 = 0o040000;
const MODE_FILE: i32 = 0o100644;
const MODE_EXECUTABLE: i32 = 0o100755;
/// Group-writable files, written by git before 2005 and still accepted by `git fsck`.
const MODE_GROUP_WRITABLE: i32 = 0o100664;
const MODE_SYMLINK: i32 = 0o120000;
const MODE_SUBMODULE: i32 = 0o160000;

/// Writes `tree` into `dir`, which is created when absent (its parent must exist). The tree is
/// checked as a whole first; when it breaks a rule nothing is written. When writing fails midway
/// the caller removes `dir` (the controller writes into a `.partial` directory it discards).
pub fn write_tree(repo: &Repository, tree: &Tree<'_>, dir: &Path, limits: &Limits) -> Result<(), SourceError> {
    let plan = plan(repo, tree, limits)?;
    write_plan(repo, &plan, dir)
}

/// What a tree writes, checked entry by entry, in the order written (parents before children).
#[derive(Debug)]
pub(crate) struct Plan {
    entries: Vec<Planned>,
    /// Bytes of all files and symlink targets.
    pub(crate) bytes: u64,
}

#[derive(Debug)]
struct Planned {
    /// 0 for entries of the root tree.
    depth: usize,
    name: String,
    /// `/`-separated path from the root, for messages.
    path: String,
    what: What,
}

#[derive(Debug)]
enum What {
    Directory,
    File(Oid),
    Symlink(String),
}

/// Reads and checks every entry of `tree` without writing anything.
pub(crate) fn plan(repo: &Repository, tree: &Tree<'_>, limits: &Limits) -> Result<Plan, SourceError> {
    let odb = repo.odb().map_err(|e| corrupt("opening the object database", &e))?;
    let mut planner = Planner { repo, odb, limits, plan: Plan { entries: Vec::new(), bytes: 0 } };
    planner.tree(tree, 0, "")?;
    Ok(planner.plan)
}

struct Planner<'r> {
    repo: &'r Repository,
    odb: git2::Odb<'r>,
    limits: &'r Limits,
    plan: Plan,
}

impl<'r> Planner<'r> {
    fn tree(&mut self, tree: &Tree<'_>, depth: usize, prefix: &str) -> Result<(), SourceError> {
        let mut seen: HashSet<Vec<u8>> = HashSet::with_capacity(tree.len());
        for entry in tree.iter() {
            let raw_name = entry.name_bytes();
            let name = checked_name(raw_name).map_err(|why| {
                unsafe_tree(format!(
                    "`{}` has a name that cannot be checked out: {why}",
                    join(prefix, &shown(raw_name))
                ))
            })?;
            let path = join(prefix, name);
            if !seen.insert(raw_name.to_vec()) {
                return Err(unsafe_tree(format!(
                    "`{path}` appears more than once in its directory (for example a symlink and a file of the same name); a tree names each entry once"
                )));
            }
            if path.len() > MAX_PATH_BYTES {
                return Err(unsafe_tree(format!(
                    "`{}…` is longer than {MAX_PATH_BYTES} bytes; shorten the path",
                    truncated(&path, 120)
                )));
            }
            let mode = entry.filemode_raw();
            let what = match mode {
                MODE_SUBMODULE => continue,
                MODE_TREE => What::Directory,
                MODE_FILE | MODE_EXECUTABLE | MODE_GROUP_WRITABLE => What::File(entry.id()),
                MODE_SYMLINK => What::Symlink(self.link_target(entry.id(), &path)?),
                other => {
                    return Err(unsafe_tree(format!(
                        "`{path}` has file mode {other:o}, which is none of file (100644, 100755), directory (40000), symlink (120000) or submodule (160000)"
                    )));
                }
            };
            self.count(&path)?;
            match what {
                What::Directory => {
                    if depth + 1 >= MAX_DEPTH {
                        return Err(unsafe_tree(format!("`{path}` is nested more than {MAX_DEPTH} directories deep")));
                    }
                    let subtree = self.subtree(entry.id(), &path)?;
                    self.plan.entries.push(Planned { depth, name: name.to_owned(), path: path.clone(), what });
                    self.tree(&subtree, depth + 1, &path)?;
                }
                What::File(id) => {
                    let size = self.object_size(id, ObjectType::Blob, &path, "a file")?;
                    if size > self.limits.max_file_bytes {
                        return Err(SourceError::new(
                            FailureKind::SnapshotTooLarge,
                            format!(
                                "`{path}` is {size} bytes; files of at most {} bytes are checked out",
                                self.limits.max_file_bytes
                            ),
                        ));
                    }
                    self.add_bytes(size, &path)?;
                    self.plan.entries.push(Planned { depth, name: name.to_owned(), path, what });
                }
                What::Symlink(ref target) => {
                    self.add_bytes(target.len() as u64, &path)?;
                    self.plan.entries.push(Planned { depth, name: name.to_owned(), path, what });
                }
            }
        }
        Ok(())
    }

    fn count(&self, path: &str) -> Result<(), SourceError> {
        if self.plan.entries.len() as u64 >= self.limits.max_tree_entries {
            return Err(SourceError::new(
                FailureKind::SnapshotTooLarge,
                format!(
                    "the tree holds more than {} entries (files, directories and symlinks; reached at `{path}`)",
                    self.limits.max_tree_entries
                ),
            ));
        }
        Ok(())
    }

    fn add_bytes(&mut self, size: u64, path: &str) -> Result<(), SourceError> {
        self.plan.bytes = self.plan.bytes.saturating_add(size);
        if self.plan.bytes > self.limits.max_tree_bytes {
            return Err(SourceError::new(
                FailureKind::SnapshotTooLarge,
                format!(
                    "the checked-out tree exceeds the limit of {} bytes (reached at `{path}`)",
                    self.limits.max_tree_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The size of object `id`, which the entry at `path` (`as_what`) says is of type `expected`.
    fn object_size(&self, id: Oid, expected: ObjectType, path: &str, as_what: &str) -> Result<u64, SourceError> {
        let (size, kind) = self.odb.read_header(id).map_err(|e| missing_or_invalid(&e, path))?;
        if kind != expected {
            return Err(unsafe_tree(format!("`{path}` is listed as {as_what}, but its object is a {kind}")));
        }
        Ok(size as u64)
    }

    fn subtree(&self, id: Oid, path: &str) -> Result<Tree<'r>, SourceError> {
        let size = self.object_size(id, ObjectType::Tree, path, "a directory")?;
        check_tree_object_size(size, self.limits, path)?;
        self.repo.find_tree(id).map_err(|e| missing_or_invalid(&e, path))
    }

    fn link_target(&self, id: Oid, path: &str) -> Result<String, SourceError> {
        let size = self.object_size(id, ObjectType::Blob, path, "a symlink")?;
        if size as usize > MAX_LINK_TARGET_BYTES {
            return Err(unsafe_tree(format!(
                "`{path}` is a symlink whose target is longer than {MAX_LINK_TARGET_BYTES} bytes"
            )));
        }
        let blob = self.repo.find_blob(id).map_err(|e| missing_or_invalid(&e, path))?;
        checked_link_target(blob.content())
            .map(str::to_owned)
            .map_err(|why| unsafe_tree(format!("`{path}` is a symlink whose target {why}")))
    }
}

/// Refuses a tree object too large to hold `max_tree_entries` entries before libgit2 parses it
/// into memory: a few bytes of a pack can inflate to a tree of millions of entries.
pub(crate) fn check_tree_object_size(size: u64, limits: &Limits, path: &str) -> Result<(), SourceError> {
    let most = limits.max_tree_entries.saturating_mul(MAX_TREE_ENTRY_BYTES);
    if size > most {
        let shown = if path.is_empty() { "the root directory".to_owned() } else { format!("`{path}`") };
        return Err(SourceError::new(
            FailureKind::SnapshotTooLarge,
            format!(
                "{shown} is a tree object of {size} bytes, more than {} entries can take (at most {most} bytes)",
                limits.max_tree_entries
            ),
        ));
    }
    Ok(())
}

/// The name of a tree entry as it may be written, or why it may not.
pub(crate) fn checked_name(name: &[u8]) -> Result<&str, &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name == b"." || name == b".." {
        return Err("`.` and `..` are not file names");
    }
    if name.eq_ignore_ascii_case(b".git") {
        return Err("`.git` is reserved for Git's own data");
    }
    if name.contains(&b'/') {
        return Err("it holds a `/`");
    }
    if name.len() > MAX_NAME_BYTES {
        return Err("it is longer than 255 bytes");
    }
    let name = std::str::from_utf8(name).map_err(|_| "it is not UTF-8")?;
    if name.chars().any(char::is_control) {
        return Err("it holds a control character");
    }
    Ok(name)
}

/// A symlink target as it may be written, or why it may not. Where it points is the manifests
/// reader's business; the writer only needs something `symlinkat` takes verbatim.
pub(crate) fn checked_link_target(target: &[u8]) -> Result<&str, &'static str> {
    if target.is_empty() {
        return Err("is empty");
    }
    if target.contains(&0) {
        return Err("holds a NUL byte");
    }
    if target.len() > MAX_LINK_TARGET_BYTES {
        return Err("is longer than 4095 bytes");
    }
    let target = std::str::from_utf8(target).map_err(|_| "is not UTF-8")?;
    if target.chars().any(char::is_control) {
        return Err("holds a control character");
    }
    Ok(target)
}

/// Writes a checked plan below `dir`, relative to directory descriptors only.
pub(crate) fn write_plan(repo: &Repository, plan: &Plan, dir: &Path) -> Result<(), SourceError> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(write_failure(&dir.display().to_string(), e)),
    }
    let root = rustix::fs::openat(CWD, dir, directory_flags(), Mode::empty())
        .map_err(|e| write_failure(&dir.display().to_string(), e.into()))?;
    // stack[d] is the directory holding the entries of depth d.
    let mut stack: Vec<OwnedFd> = vec![root];
    for entry in &plan.entries {
        stack.truncate(entry.depth + 1);
        let Some(parent) = stack.last() else {
            return Err(SourceError::new(FailureKind::Other, "the snapshot plan is out of order"));
        };
        let created = match &entry.what {
            What::Directory => rustix::fs::mkdirat(parent, entry.name.as_str(), Mode::from_raw_mode(0o755))
                .and_then(|()| rustix::fs::openat(parent, entry.name.as_str(), directory_flags(), Mode::empty()))
                .map(Some),
            What::File(id) => {
                let blob = repo.find_blob(*id).map_err(|e| missing_or_invalid(&e, &entry.path))?;
                let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(parent, entry.name.as_str(), flags, Mode::from_raw_mode(0o644))
                    .map_err(|e| write_failure(&entry.path, e.into()))?;
                File::from(fd).write_all(blob.content()).map_err(|e| write_failure(&entry.path, e))?;
                Ok(None)
            }
            What::Symlink(target) => rustix::fs::symlinkat(target.as_str(), parent, entry.name.as_str()).map(|()| None),
        };
        if let Some(directory) = created.map_err(|e| write_failure(&entry.path, e.into()))? {
            stack.push(directory);
        }
    }
    Ok(())
}

fn directory_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn write_failure(path: &str, error: std::io::Error) -> SourceError {
    if error.kind() == std::io::ErrorKind::AlreadyExists {
        // The plan refuses duplicate names; this catches names the file system folds together.
        return unsafe_tree(format!(
            "`{path}` already exists in the snapshot (a name the file system treats as another)"
        ));
    }
    SourceError::new(FailureKind::Other, format!("cannot write the snapshot at `{path}`: {error}"))
}

fn unsafe_tree(message: String) -> SourceError {
    SourceError::new(FailureKind::UnsafeTree, message)
}

/// A missing object damages the cache (fetch again); one that does not parse is the tree's fault.
fn missing_or_invalid(error: &git2::Error, path: &str) -> SourceError {
    if error.code() == ErrorCode::NotFound {
        corrupt(&format!("reading `{path}`"), error)
    } else {
        unsafe_tree(format!("`{path}` cannot be read as a Git object: {}", error.message()))
    }
}

fn corrupt(doing: &str, error: &git2::Error) -> SourceError {
    SourceError::new(
        FailureKind::CorruptCache,
        format!("the cache repository is damaged ({doing}): {}", error.message()),
    )
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_owned() } else { format!("{prefix}/{name}") }
}

/// A raw name for messages: escaped (no control characters reach a status or a log), bounded.
fn shown(name: &[u8]) -> String {
    truncated(&name.escape_ascii().to_string(), 120)
}

fn truncated(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_or_confuse_the_directory_are_refused() {
        for name in [
            &b""[..],
            b".",
            b"..",
            b".git",
            b".GIT",
            b"a/b",
            b"/",
            b"\xff\xfe",
            b"line\nbreak",
            b"esc\x1b[31m",
            &[b'a'; 256],
        ] {
            assert!(checked_name(name).is_err(), "{:?} must be refused", name.escape_ascii().to_string());
        }
        assert_eq!(checked_name(b"app.yaml"), Ok("app.yaml"));
        assert_eq!(checked_name(b".gitlab-ci.yml"), Ok(".gitlab-ci.yml"));
        assert_eq!(checked_name("ünïcode.yaml".as_bytes()), Ok("ünïcode.yaml"));
        assert!(checked_name(&[b'a'; 255]).is_ok());
    }

    #[test]
    fn symlink_targets_must_be_text_symlinkat_takes_verbatim() {
        assert!(checked_link_target(b"").is_err());
        assert!(checked_link_target(b"a\0b").is_err());
        assert!(checked_link_target(b"\xff").is_err());
        assert!(checked_link_target(b"a\nb").is_err());
        assert!(checked_link_target(&[b'a'; 4096]).is_err());
        // Where a link points is the reader's decision, not the writer's.
        assert_eq!(checked_link_target(b"/etc/passwd"), Ok("/etc/passwd"));
        assert_eq!(checked_link_target(b"../../x"), Ok("../../x"));
    }

    #[test]
    fn names_in_messages_are_escaped_and_bounded() {
        assert_eq!(shown(b"a\nb\x1b"), "a\\nb\\x1b");
        assert_eq!(shown(&[b'x'; 500]).chars().count(), 121);
    }
}
