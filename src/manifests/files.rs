//! The kustomize build's view of a snapshot on disk: [`Files`] over one root directory, every
//! lookup resolved beneath it as the tree reader resolves links (component by component, never
//! by the kernel), every read bounded by the loader's [`Limits`].
//!
//! Unlike the tree walk, this reader follows links to directories (kustomize reads a base
//! through one): they are resolved beneath the root like any other link, so none leads out.
//! A path or link through `.git`, in any letter case, is refused, and `.git` is never listed.

use std::cell::Cell;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use rustix::fs::FileType;

use super::Limits;
use super::read::{Beneath, Resolved};
use crate::kustomize::files::{Files, GIT_LINK_REFUSED, GIT_PATH_REFUSED, Kind, is_git_name};

/// Longest path looked up, in bytes (as `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;
/// Most entries listed in one directory.
const MAX_ENTRIES: usize = 10_000;

/// The files beneath one root on disk, read within [`Limits`]: `max_file_bytes` per file and
/// `max_total_bytes` over every read of this reader (a file read twice counts twice, so nested
/// bases naming the same large file cannot multiply the work without bound).
pub struct SnapshotFiles {
    beneath: Beneath,
    limits: Limits,
    /// Bytes read so far (`Files` reads through `&self`).
    used: Cell<u64>,
}

impl SnapshotFiles {
    /// A reader of the directory `root` (which may itself be reached through a link: it is the
    /// caller's); `Err` says why it cannot be opened.
    pub fn open(root: &Path, limits: Limits) -> Result<Self, String> {
        Ok(SnapshotFiles { beneath: Beneath::open(root)?, limits, used: Cell::new(0) })
    }

    /// Counts `bytes` already read elsewhere (the plain documents) against the total.
    pub fn with_used(self, bytes: u64) -> Self {
        self.used.set(bytes);
        self
    }

    /// Bytes counted so far.
    pub fn used(&self) -> u64 {
        self.used.get()
    }

    fn lookup(&self, path: &str) -> Result<Resolved, String> {
        Ok(self.beneath.lookup(&components(path)?))
    }
}

/// The components of a root-relative path; `.`, `..`, empty components and `.git` (any letter
/// case) are refused (the builder normalises paths and refuses `.git` before it asks, so one here
/// is a bug or an attack).
fn components(path: &str) -> Result<Vec<Vec<u8>>, String> {
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("is a path of more than {MAX_PATH_BYTES} bytes"));
    }
    if path.is_empty() {
        return Ok(Vec::new());
    }
    path.split('/')
        .map(|c| match c {
            "" | "." | ".." => Err("is not a normalised path inside the repository".to_owned()),
            c if is_git_name(c.as_bytes()) => Err(GIT_PATH_REFUSED.to_owned()),
            c => Ok(c.as_bytes().to_vec()),
        })
        .collect()
}

const LEAVES: &str =
    "is a symlink that leaves the repository (or passes through one); only links to places inside it are followed";
const OTHER: &str = "is not a regular file or directory (a FIFO, socket or device); only files are read";

fn not_followed(resolved: Resolved) -> String {
    match resolved {
        Resolved::Leaves => LEAVES.into(),
        Resolved::Other => OTHER.into(),
        // The path itself was checked, so a link on the way led there.
        Resolved::Git => GIT_LINK_REFUSED.into(),
        Resolved::Loop => "is a symlink that does not resolve within 40 links (a loop?)".into(),
        Resolved::Broken => "does not exist (or is a broken symlink)".into(),
        Resolved::File(_) => "is a file, not a directory".into(),
        Resolved::Directory(_) => "is a directory, not a file".into(),
    }
}

impl Files for SnapshotFiles {
    fn stat(&self, path: &str) -> Result<Option<Kind>, String> {
        match self.lookup(path)? {
            Resolved::File(_) => Ok(Some(Kind::File)),
            Resolved::Directory(_) => Ok(Some(Kind::Directory)),
            Resolved::Broken => Ok(None),
            other => Err(not_followed(other)),
        }
    }

    fn list(&self, path: &str) -> Result<Vec<String>, String> {
        let resolved = match self.lookup(path)? {
            Resolved::Directory(resolved) => resolved,
            other => return Err(not_followed(other)),
        };
        let dir = self.beneath.open_dir(&resolved).map_err(|e| format!("cannot read directory: {e}"))?;
        let entries = rustix::fs::Dir::read_from(&dir).map_err(|e| format!("cannot read directory: {e}"))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read directory: {e}"))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." || is_git_name(name) {
                continue;
            }
            if names.len() == MAX_ENTRIES {
                return Err(format!("holds more than {MAX_ENTRIES} entries"));
            }
            names.push(String::from_utf8_lossy(name).into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        let file = match self.lookup(path)? {
            Resolved::File(file) => file,
            other => return Err(not_followed(other)),
        };
        let max = self.limits.max_file_bytes;
        // The size of what is open, not of what the path named a moment ago.
        let size = match rustix::fs::fstat(&file) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => stat.st_size as u64,
            Ok(_) => return Err(OTHER.into()),
            Err(e) => return Err(format!("cannot read: {e}")),
        };
        if size > max {
            return Err(format!("is {size} bytes; files of at most {max} bytes are read"));
        }
        let total = self.limits.max_total_bytes;
        if self.used.get() + size > total {
            return Err(format!("brings what the repository's build reads past the limit of {total} bytes"));
        }
        let mut bytes = Vec::with_capacity(size as usize);
        // Bounded even if the file grows between the stat and the read.
        File::from(file).take(max + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
        let read = bytes.len() as u64;
        if read > max {
            return Err(format!("grew past {max} bytes while it was read"));
        }
        if self.used.get() + read > total {
            return Err(format!("brings what the repository's build reads past the limit of {total} bytes"));
        }
        self.used.set(self.used.get() + read);
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// `repo/` (the root) and `outside/secret.yaml` beside it.
    fn disk() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("repo/base")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::fs::write(dir.path().join("outside/secret.yaml"), "other-tenants-secret").unwrap();
        std::fs::write(dir.path().join("repo/base/cm.yaml"), "kind: ConfigMap").unwrap();
        dir
    }

    fn reader(dir: &tempfile::TempDir) -> SnapshotFiles {
        SnapshotFiles::open(&dir.path().join("repo"), Limits::default()).unwrap()
    }

    fn refused(files: &SnapshotFiles, path: &str, says: &str) {
        let read = files.read(path).expect_err(path);
        assert!(read.contains(says), "{path}: {read}");
        assert!(!read.contains("other-tenants-secret"));
    }

    #[test]
    fn files_and_directories_inside_the_root_are_read() {
        let dir = disk();
        let files = reader(&dir);
        assert_eq!(files.stat("").unwrap(), Some(Kind::Directory));
        assert_eq!(files.stat("base").unwrap(), Some(Kind::Directory));
        assert_eq!(files.stat("base/cm.yaml").unwrap(), Some(Kind::File));
        assert_eq!(files.stat("base/missing.yaml").unwrap(), None);
        assert_eq!(files.list("").unwrap(), ["base"]);
        assert_eq!(files.read("base/cm.yaml").unwrap(), b"kind: ConfigMap");
        assert_eq!(files.used(), 15);
        assert!(files.list("base/cm.yaml").is_err());
        assert!(files.read("base").is_err());
    }

    #[test]
    fn a_link_to_etc_passwd_is_refused() {
        let dir = disk();
        symlink("/etc/passwd", dir.path().join("repo/passwd.env")).unwrap();
        let files = reader(&dir);
        refused(&files, "passwd.env", "leaves the repository");
        assert!(files.stat("passwd.env").is_err());
    }

    #[test]
    fn a_relative_link_climbing_out_is_refused() {
        let dir = disk();
        symlink("../../outside/secret.yaml", dir.path().join("repo/base/secret.yaml")).unwrap();
        refused(&reader(&dir), "base/secret.yaml", "leaves the repository");
    }

    #[test]
    fn a_symlinked_directory_leaving_the_root_is_refused_for_what_is_beneath_it() {
        let dir = disk();
        symlink("../outside", dir.path().join("repo/remote-base")).unwrap();
        let files = reader(&dir);
        refused(&files, "remote-base/secret.yaml", "leaves the repository");
        assert!(files.list("remote-base").is_err());
        assert!(files.stat("remote-base").is_err());
    }

    #[test]
    fn an_absolute_link_to_the_root_itself_is_resolved_beneath_it() {
        let dir = disk();
        let root = dir.path().join("repo");
        symlink(root.join("base"), root.join("linked-base")).unwrap();
        let files = reader(&dir);
        assert_eq!(files.stat("linked-base").unwrap(), Some(Kind::Directory));
        assert_eq!(files.read("linked-base/cm.yaml").unwrap(), b"kind: ConfigMap");
    }

    #[test]
    fn link_loops_are_refused() {
        let dir = disk();
        symlink("b", dir.path().join("repo/a")).unwrap();
        symlink("a", dir.path().join("repo/b")).unwrap();
        refused(&reader(&dir), "a", "does not resolve");
    }

    #[test]
    fn a_fifo_is_refused_without_hanging() {
        let dir = disk();
        let root = rustix::fs::open(dir.path().join("repo"), rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty())
            .unwrap();
        rustix::fs::mknodat(&root, "pipe.env", FileType::Fifo, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR, 0)
            .unwrap();
        symlink("pipe.env", dir.path().join("repo/link-to-pipe.env")).unwrap();
        let files = reader(&dir);
        refused(&files, "pipe.env", "FIFO");
        refused(&files, "link-to-pipe.env", "FIFO");
        assert!(files.stat("pipe.env").is_err());
    }

    #[test]
    fn a_file_swapped_for_a_link_after_its_stat_is_not_read() {
        let dir = disk();
        let files = reader(&dir);
        assert_eq!(files.stat("base/cm.yaml").unwrap(), Some(Kind::File));
        let path = dir.path().join("repo/base/cm.yaml");
        std::fs::remove_file(&path).unwrap();
        symlink("/etc/passwd", &path).unwrap();
        refused(&files, "base/cm.yaml", "leaves the repository");
    }

    #[test]
    fn paths_climbing_or_into_git_are_refused_before_the_disk() {
        let dir = disk();
        let files = reader(&dir);
        for path in ["../outside/secret.yaml", "base/../../outside/secret.yaml", "/etc/passwd", "base//cm.yaml"] {
            refused(&files, path, "not a normalised path");
        }
        for path in [".git/config", ".GIT/config", "base/.Git/config", ".git"] {
            refused(&files, path, "passes through `.git`");
        }
        refused(&files, &"a/".repeat(3000), "more than 4096 bytes");
    }

    /// `repo/.git/config` holding a CI job's token in its remote URL, as a checkout has.
    const TOKEN: &str = "glcbt-FAKE-JOB-TOKEN";

    fn checkout() -> tempfile::TempDir {
        let dir = disk();
        std::fs::create_dir_all(dir.path().join("repo/.git")).unwrap();
        let config = format!("[remote \"origin\"]\n\turl = https://gitlab-ci-token:{TOKEN}@gitlab.example/x.git\n");
        std::fs::write(dir.path().join("repo/.git/config"), config).unwrap();
        dir
    }

    #[test]
    fn links_into_git_are_refused_however_they_get_there() {
        let dir = checkout();
        let root = dir.path().join("repo");
        let link = |target: &Path, at: &str| symlink(target, root.join(at)).unwrap();
        link(Path::new(".git/config"), "config.env");
        link(Path::new(".git"), "gitdir");
        link(Path::new("../.git/config"), "base/up.env");
        link(Path::new("base/../.git/config"), "dotdot.env");
        link(Path::new("./base/./../.GIT/config"), "mixed.env");
        link(&root.join(".git/config"), "absolute.env");
        link(Path::new("config.env"), "chain.env");
        let files = reader(&dir);
        for path in ["config.env", "base/up.env", "dotdot.env", "mixed.env", "absolute.env", "chain.env"] {
            let read = files.read(path).expect_err(path);
            assert!(read.contains("symlink into `.git`") && !read.contains(TOKEN), "{path}: {read}");
            assert!(files.stat(path).is_err(), "{path}");
        }
        for path in ["gitdir/config", "gitdir"] {
            assert!(files.read(path).expect_err(path).contains("symlink into `.git`"), "{path}");
            assert!(files.stat(path).is_err() && files.list(path).is_err(), "{path}");
        }
    }

    #[test]
    fn git_is_never_listed() {
        let dir = checkout();
        assert_eq!(reader(&dir).list("").unwrap(), ["base"]);
    }

    #[test]
    fn a_huge_file_and_the_running_total_are_bounded() {
        let dir = disk();
        std::fs::write(dir.path().join("repo/huge.txt"), vec![b'x'; 2000]).unwrap();
        std::fs::write(dir.path().join("repo/small.txt"), vec![b'x'; 600]).unwrap();
        let limits = Limits { max_file_bytes: 1000, max_total_bytes: 1000, ..Limits::default() };
        let files = SnapshotFiles::open(&dir.path().join("repo"), limits).unwrap();
        refused(&files, "huge.txt", "is 2000 bytes; files of at most 1000 bytes are read");
        assert_eq!(files.read("small.txt").unwrap().len(), 600);
        // The same file again: every read counts, so nesting cannot multiply the work.
        refused(&files, "small.txt", "past the limit of 1000 bytes");
        let counted = SnapshotFiles::open(&dir.path().join("repo"), limits).unwrap().with_used(500);
        refused(&counted, "small.txt", "past the limit of 1000 bytes");
    }
}
