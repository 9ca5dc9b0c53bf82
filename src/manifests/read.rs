//! Reading a tree of YAML from disk without ever leaving it.
//!
//! Everything below the root is opened relative to directory descriptors with `O_NOFOLLOW`:
//! directories are entered only when they are directories (never through a link), files are
//! opened only when they are regular files, and their size is taken from the open descriptor.
//! A symlink is resolved here, component by component, beneath the root: each step is looked up
//! without following, a `..` may not climb above the root, an absolute target counts only when it
//! names a place inside the root. So no link, however nested, and nothing swapped in between a
//! check and a read, makes the reader open a file outside the tree.
//!
//! Nor inside `.git`: the walk skips a `.git` directory (a checkout's own, so `cdtarget render .`
//! works on one) and every resolution stops at a `.git` component in any letter case, so a link
//! into it is refused, never read.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};

use super::{Limits, SourceFile};
use crate::kustomize::build::KUSTOMIZATION_FILE_NAMES;
use crate::kustomize::files::{GIT_LINK_REFUSED, is_git_name};
use crate::problem::Problem;

/// Deepest directory nesting read.
const MAX_DEPTH: usize = 64;
/// Most symlinks followed to resolve one link (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;

const DIRECTORY: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
// NONBLOCK: a FIFO swapped in for a file must not hang the reader.
const REGULAR_FILE: OFlags = OFlags::RDONLY.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC).union(OFlags::NONBLOCK);

/// Reads every `.yaml`/`.yml` file under `root`, in sorted order. Hidden files and directories
/// (`.git`, `.gitlab-ci.yml`) and other files are skipped; symlinks are read only when they
/// resolve to a file inside the tree and outside `.git` (a link into `.git` is a problem,
/// whatever its name); the limits bound each file and the total.
pub fn read_tree(root: &Path, limits: &Limits) -> Result<Vec<SourceFile>, Vec<Problem>> {
    walk(root, limits, false).map(|tree| tree.files)
}

/// What [`read_tree_for_build`] found: the plain YAML files, and the directories holding a
/// kustomization file, whose files are not read as documents (the build reads what they name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    /// The YAML files outside every kustomization directory, relative to the root read.
    pub files: Vec<SourceFile>,
    /// Directories holding a kustomization file, relative to the root read (`""` for the root
    /// itself), outermost only: nothing beneath one is looked at.
    pub kustomizations: Vec<String>,
}

/// As [`read_tree`], but a directory holding a kustomization file (`kustomization.yaml`,
/// `kustomization.yml` or `Kustomization`) is recorded instead of read, as Flux's generated
/// kustomization lists it as one resource and does not descend into it.
pub fn read_tree_for_build(root: &Path, limits: &Limits) -> Result<Tree, Vec<Problem>> {
    walk(root, limits, true)
}

fn walk(root: &Path, limits: &Limits, builds: bool) -> Result<Tree, Vec<Problem>> {
    let shown = root.display().to_string();
    let failed = |message: String| vec![Problem::field("", message).located(&shown, None, None)];
    let beneath = Beneath::open(root).map_err(failed)?;
    let mut walk =
        TreeWalk { beneath: &beneath, limits, total: 0, builds, tree: Tree::default(), problems: Vec::new() };
    let mut here = Vec::new();
    let root_fd = beneath.root.try_clone().map_err(|e| failed(format!("cannot read directory: {e}")))?;
    walk.directory(&root_fd, &mut here);
    if walk.problems.is_empty() { Ok(walk.tree) } else { Err(walk.problems) }
}

/// A directory every lookup stays beneath: symlinks are resolved here, component by component,
/// never by the kernel.
pub(super) struct Beneath {
    root: OwnedFd,
    /// The root's absolute paths (as given, canonical), component by component.
    root_paths: Vec<Vec<Vec<u8>>>,
}

impl Beneath {
    /// Opens `root`, which must be a directory. The root itself is the caller's (a checked
    /// snapshot path, or a directory on the command line), so it may be reached through a link;
    /// nothing below it is.
    pub(super) fn open(root: &Path) -> Result<Self, String> {
        let root_fd = rustix::fs::openat(CWD, root, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("cannot read directory: {}", std::io::Error::from(e)))?;
        match rustix::fs::fstat(&root_fd) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {}
            Ok(_) => return Err("is not a directory".into()),
            Err(e) => return Err(format!("cannot read directory: {}", std::io::Error::from(e))),
        }
        // Absolute link targets count when they name a place below the root, as given or as the
        // kernel names it (the rest of the target is then resolved beneath the root all the same).
        let mut root_paths: Vec<Vec<Vec<u8>>> = Vec::new();
        for path in [std::path::absolute(root).ok(), std::fs::canonicalize(root).ok()].into_iter().flatten() {
            let components = normal_components(&path);
            if !root_paths.contains(&components) {
                root_paths.push(components);
            }
        }
        Ok(Beneath { root: root_fd, root_paths })
    }

    /// Resolves the symlink at `link` beneath the root without letting the kernel follow anything.
    pub(super) fn resolve(&self, link: &[Vec<u8>]) -> Resolved {
        let Some((name, parent)) = link.split_last() else { return Resolved::Broken };
        let mut here: Vec<Vec<u8>> = parent.to_vec();
        let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
        if !self.expand(&mut here, &mut pending, name) {
            return Resolved::Leaves;
        }
        self.follow(here, pending, 1)
    }

    /// Looks `path` (names from the root, no `.` or `..`) up beneath the root, resolving every
    /// link on the way as [`Beneath::resolve`] does.
    pub(super) fn lookup(&self, path: &[Vec<u8>]) -> Resolved {
        self.follow(Vec::new(), path.iter().cloned().collect(), 0)
    }

    /// Walks `pending` from `here`, link by link, beneath the root.
    fn follow(&self, mut here: Vec<Vec<u8>>, mut pending: VecDeque<Vec<u8>>, mut hops: usize) -> Resolved {
        while let Some(component) = pending.pop_front() {
            match component.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    if here.pop().is_none() {
                        return Resolved::Leaves;
                    }
                    continue;
                }
                // Before the disk: `.GIT` is `.git` on a case-insensitive file system.
                c if is_git_name(c) => return Resolved::Git,
                _ => {}
            }
            let Ok(dir) = self.open_dir(&here) else { return Resolved::Broken };
            let Ok(stat) = rustix::fs::statat(&dir, component.as_slice(), AtFlags::SYMLINK_NOFOLLOW) else {
                return Resolved::Broken;
            };
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Directory => here.push(component),
                FileType::Symlink => {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Resolved::Loop;
                    }
                    // `here` is the directory holding the link, as the kernel would see it.
                    let mut link_path = here.clone();
                    link_path.push(component);
                    let (name, parent) = link_path.split_last().expect("just pushed");
                    let mut next = parent.to_vec();
                    if !self.expand(&mut next, &mut pending, name) {
                        return Resolved::Leaves;
                    }
                    here = next;
                }
                FileType::RegularFile => {
                    // `file.yaml/...`: the kernel would say "not a directory".
                    if pending.iter().any(|c| !c.is_empty()) {
                        return Resolved::Broken;
                    }
                    let Ok(file) = rustix::fs::openat(&dir, component.as_slice(), REGULAR_FILE, Mode::empty()) else {
                        return Resolved::Broken;
                    };
                    return Resolved::File(file);
                }
                _ => return Resolved::Other,
            }
        }
        Resolved::Directory(here)
    }

    /// Reads the link `name` in directory `here` and queues its target's components in front of
    /// `pending`; an absolute target restarts `here` at the root when it names a place inside
    /// it. False when the target leaves the root (or cannot be read as a link).
    fn expand(&self, here: &mut Vec<Vec<u8>>, pending: &mut VecDeque<Vec<u8>>, name: &[u8]) -> bool {
        let Ok(dir) = self.open_dir(here) else { return false };
        let Ok(target) = rustix::fs::readlinkat(&dir, name, Vec::new()) else { return false };
        let target = target.as_bytes();
        let mut components: Vec<Vec<u8>> = target.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
        if target.starts_with(b"/") {
            let absolute: Vec<Vec<u8>> = components.into_iter().filter(|c| !c.is_empty() && c != b".").collect();
            // Lexically: an absolute target counts only when it starts with the root's path.
            let Some(root) = self.root_paths.iter().find(|root| absolute.starts_with(root)) else { return false };
            components = absolute[root.len()..].to_vec();
            here.clear();
        }
        for component in components.into_iter().rev() {
            pending.push_front(component);
        }
        true
    }

    /// Opens the directory at `path` (names from the root), refusing to pass through a link.
    pub(super) fn open_dir(&self, path: &[Vec<u8>]) -> rustix::io::Result<OwnedFd> {
        let mut dir = self.root.try_clone().map_err(|_| rustix::io::Errno::MFILE)?;
        for name in path {
            dir = rustix::fs::openat(&dir, name.as_slice(), DIRECTORY, Mode::empty())?;
        }
        Ok(dir)
    }
}

struct TreeWalk<'a> {
    beneath: &'a Beneath,
    limits: &'a Limits,
    total: u64,
    /// Whether directories holding a kustomization are recorded instead of read.
    builds: bool,
    tree: Tree,
    problems: Vec<Problem>,
}

/// Where a path or a symlink leads, resolved beneath the root.
pub(super) enum Resolved {
    File(OwnedFd),
    /// A directory, by its path from the root with every link resolved.
    Directory(Vec<Vec<u8>>),
    /// Something other than a file or directory (a FIFO, a socket, a device).
    Other,
    /// The path, or a link on the way, passes through `.git` (any letter case).
    Git,
    Leaves,
    Broken,
    Loop,
}

impl TreeWalk<'_> {
    fn problem(&mut self, path: &[Vec<u8>], message: impl Into<String>) {
        let shown = shown(path);
        self.problems.push(Problem::field("", message).located(&shown, None, None));
    }

    /// Reads the directory open as `dir`, at `here` (names from the root).
    fn directory(&mut self, dir: &OwnedFd, here: &mut Vec<Vec<u8>>) {
        if here.len() >= MAX_DEPTH {
            return self.problem(here, format!("is nested more than {MAX_DEPTH} directories deep; it is not read"));
        }
        let mut names: Vec<Vec<u8>> = match rustix::fs::Dir::read_from(dir) {
            Ok(entries) => entries.filter_map(Result::ok).map(|e| e.file_name().to_bytes().to_vec()).collect(),
            Err(e) => return self.problem(here, format!("cannot read directory: {}", std::io::Error::from(e))),
        };
        names.sort();
        if self.builds && names.iter().any(|n| KUSTOMIZATION_FILE_NAMES.iter().any(|k| k.as_bytes() == n.as_slice())) {
            // Built as one; the build reads what the kustomization names, nothing else here.
            self.tree.kustomizations.push(shown(here));
            return;
        }
        for name in names {
            // Hidden entries, `.` and `..` among them.
            if name.starts_with(b".") {
                continue;
            }
            here.push(name);
            self.entry(dir, here);
            here.pop();
        }
    }

    fn entry(&mut self, dir: &OwnedFd, path: &mut Vec<Vec<u8>>) {
        let name = path.last().expect("an entry has a name").clone();
        let stat = match rustix::fs::statat(dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(e) => return self.problem(path, format!("cannot read: {}", std::io::Error::from(e))),
        };
        let yaml = is_yaml(&name);
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => match rustix::fs::openat(dir, name.as_slice(), DIRECTORY, Mode::empty()) {
                Ok(subdirectory) => self.directory(&subdirectory, path),
                Err(e) => self.problem(path, format!("cannot read directory: {}", std::io::Error::from(e))),
            },
            FileType::RegularFile if yaml => {
                match rustix::fs::openat(dir, name.as_slice(), REGULAR_FILE, Mode::empty()) {
                    Ok(file) => self.file(path, file),
                    Err(e) => self.problem(path, format!("cannot read: {}", std::io::Error::from(e))),
                }
            }
            FileType::Symlink => self.symlink(path, yaml),
            _ => {}
        }
    }

    fn symlink(&mut self, link: &[Vec<u8>], yaml: bool) {
        let leaves = "is a symlink that leaves the repository; only links to files inside it are read, and symlinked directories are not followed";
        match (self.beneath.resolve(link), yaml) {
            (Resolved::Leaves, _) => self.problem(link, leaves),
            (Resolved::Git, _) => self.problem(link, GIT_LINK_REFUSED),
            (Resolved::Directory(_), _) => self.problem(
                link,
                "is a symlink to a directory; symlinked directories are not followed, move the files instead",
            ),
            (Resolved::File(file), true) => self.file(link, file),
            (Resolved::Other, true) => {
                self.problem(link, "is a symlink to something other than a file; only links to files are read")
            }
            (Resolved::Broken, true) => {
                self.problem(link, "is a broken symlink; point it at a file inside the repository or remove it")
            }
            (Resolved::Loop, true) => self.problem(
                link,
                format!(
                    "is a symlink that does not resolve within {MAX_LINK_HOPS} links (a loop?); point it at a file"
                ),
            ),
            // Links to files, broken links and the like that are not YAML are never read.
            _ => {}
        }
    }

    fn file(&mut self, shown: &[Vec<u8>], file: OwnedFd) {
        // The size of what is open, not of what a path named a moment ago.
        let size = match rustix::fs::fstat(&file) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => stat.st_size as u64,
            Ok(_) => {
                return self
                    .problem(shown, "is a symlink to something other than a file; only links to files are read");
            }
            Err(e) => return self.problem(shown, format!("cannot read: {}", std::io::Error::from(e))),
        };
        if size > self.limits.max_file_bytes {
            return self.problem(
                shown,
                format!("is {size} bytes; files of at most {} bytes are read", self.limits.max_file_bytes),
            );
        }
        self.total += size;
        if self.total > self.limits.max_total_bytes {
            return self.problem(
                shown,
                format!("brings the YAML in the tree past the limit of {} bytes", self.limits.max_total_bytes),
            );
        }
        let mut bytes = Vec::with_capacity(size as usize);
        // Bounded even if the file grows between the stat and the read.
        let read = File::from(file).take(self.limits.max_file_bytes + 1).read_to_end(&mut bytes);
        match read {
            Err(e) => self.problem(shown, format!("cannot read: {e}")),
            Ok(_) if bytes.len() as u64 > self.limits.max_file_bytes => {
                self.problem(shown, format!("grew past {} bytes while it was read", self.limits.max_file_bytes))
            }
            Ok(_) => match String::from_utf8(bytes) {
                Ok(text) => {
                    let path = self::shown(shown);
                    self.tree.files.push(SourceFile { path, text });
                }
                Err(_) => self.problem(shown, "is not UTF-8 text"),
            },
        }
    }
}

fn normal_components(path: &Path) -> Vec<Vec<u8>> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.as_bytes().to_vec()),
            _ => None,
        })
        .collect()
}

fn is_yaml(name: &[u8]) -> bool {
    Path::new(OsStr::from_bytes(name)).extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// A path from the root, `/`-separated, for messages and document locations.
fn shown(path: &[Vec<u8>]) -> String {
    path.iter().map(|name| String::from_utf8_lossy(name)).collect::<Vec<_>>().join("/")
}
