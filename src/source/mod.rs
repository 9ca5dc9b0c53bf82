//! The Git source: a registration's URL, ref and credentials turned into a verified snapshot of
//! the tree — cheaply when nothing changed.
//!
//! Per registration there is one cache directory holding a bare repository (`repo.git`) and the
//! running snapshot (`trees/<sha>`). A poll first asks the remote where the ref points (one
//! round trip); when a snapshot of that commit exists, nothing is fetched and nothing is written.
//! Otherwise the commit is fetched shallow (depth 1, except over `file://`), its tree is checked
//! whole and written beside the running snapshot ([`snapshot`]), moved into place once whole, and
//! only then is the previous snapshot removed — a failed fetch never touches the last good one.
//! [`Limits`] bound each fetch and the disk each registration may use.

pub(crate) mod error;
mod git;
pub mod known_hosts;
pub(crate) mod registration;
pub mod snapshot;
mod tls;
pub(crate) mod url;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use tokio::sync::Semaphore;

pub use crate::libgit2_globals::set_io_timeout;
pub use error::{FailureKind, SourceError};

/// What to check out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    /// The tip of a branch.
    Branch(String),
    /// A tag (annotated tags are peeled to their commit).
    Tag(String),
    /// A full 40-character commit SHA.
    Commit(String),
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Branch(name) => write!(f, "branch `{name}`"),
            Reference::Tag(name) => write!(f, "tag `{name}`"),
            Reference::Commit(sha) => write!(f, "commit `{sha}`"),
        }
    }
}

impl Reference {
    /// Reads `--ref NAME` of the command line: a full SHA is a commit, `tags/NAME` or
    /// `refs/tags/NAME` a tag, anything else a branch.
    pub fn from_name(name: &str) -> Reference {
        if name.len() == 40 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            Reference::Commit(name.to_ascii_lowercase())
        } else if let Some(tag) = name.strip_prefix("refs/tags/").or_else(|| name.strip_prefix("tags/")) {
            Reference::Tag(tag.to_owned())
        } else {
            Reference::Branch(name.strip_prefix("refs/heads/").unwrap_or(name).to_owned())
        }
    }
}

/// How to authenticate, and to whom. Held in memory only; never logged.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials (`git://`, `file://`, public HTTPS).
    None,
    /// An SSH deploy key and the `known_hosts` entries the server's host key must match.
    Ssh {
        /// OpenSSH or PEM private key (ed25519, RSA, ECDSA).
        private_key: String,
        /// Its passphrase, if it has one.
        passphrase: Option<String>,
        /// known_hosts text; required, there is no trust on first use.
        known_hosts: String,
    },
    /// HTTP basic authentication; a token goes in `password` (GitLab accepts any user name).
    Basic {
        /// User name (`oauth2` for GitLab tokens).
        username: String,
        /// Password or token.
        password: String,
    },
}

impl Credentials {
    /// HTTPS with a GitLab-style token.
    pub fn token(token: &str) -> Self {
        Credentials::Basic { username: "oauth2".into(), password: token.trim().to_owned() }
    }

    /// The secret values, to be scrubbed from every message.
    pub fn secrets(&self) -> Vec<&str> {
        match self {
            Credentials::None => Vec::new(),
            Credentials::Ssh { private_key, passphrase, .. } => {
                [Some(private_key.as_str()), passphrase.as_deref()].into_iter().flatten().collect()
            }
            Credentials::Basic { password, .. } => vec![password.as_str()],
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material or tokens, even in debug output.
        f.write_str(match self {
            Credentials::None => "Credentials::None",
            Credentials::Ssh { .. } => "Credentials::Ssh(..)",
            Credentials::Basic { .. } => "Credentials::Basic(..)",
        })
    }
}

/// One repository to fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `ssh://`, `https://`, `http://`, `git://` or `file://` URL.
    pub url: String,
    /// What to check out.
    pub reference: Reference,
    /// How to authenticate.
    pub credentials: Credentials,
    /// PEM CA bundle that HTTPS servers must chain to (or be pinned in); the system store otherwise.
    pub ca_bundle: Option<String>,
}

/// Bounds on one fetch and on what a registration keeps on disk.
///
/// The defaults keep `max_fetch_bytes + 2 × max_tree_bytes` (a repository, the running snapshot
/// and the one being written) within `max_cache_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The whole operation, including connecting; stalled sockets are cut by [`set_io_timeout`].
    pub timeout: Duration,
    /// Bytes received from the server in one fetch (the pack).
    pub max_fetch_bytes: u64,
    /// Bytes of all files (and symlink targets) in the checked-out tree.
    pub max_tree_bytes: u64,
    /// Bytes of one file of the checked-out tree (a blob is held in memory while written).
    pub max_file_bytes: u64,
    /// Entries (files, directories, symlinks) of the checked-out tree: inodes are disk too.
    pub max_tree_entries: u64,
    /// Bytes of a registration's whole cache directory: the repository, the running snapshot and
    /// the one being written.
    pub max_cache_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(60),
            max_fetch_bytes: 256 << 20,
            max_tree_bytes: 256 << 20,
            max_file_bytes: 64 << 20,
            max_tree_entries: 100_000,
            max_cache_bytes: 1 << 30,
        }
    }
}

/// A revision's tree on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Full commit SHA.
    pub revision: String,
    /// The directory holding the tree at that commit.
    pub root: PathBuf,
}

impl Snapshot {
    /// The directory `path` inside the snapshot (the registration's `spec.path`). Every component
    /// is checked on disk without following anything: `..`, absolute paths, symlinks and
    /// anything but a directory are refused with an error naming the component.
    pub fn dir(&self, path: Option<&str>) -> Result<PathBuf, SourceError> {
        let Some(path) = path.filter(|p| !p.is_empty()) else { return Ok(self.root.clone()) };
        let components = path_components(path).map_err(|why| {
            SourceError::new(FailureKind::InvalidRequest, format!("path `{}` {why}", shown_path(path)))
        })?;
        let not_a_directory = |why: String| {
            SourceError::new(
                FailureKind::InvalidRequest,
                format!("path `{path}` is not a directory at revision {}: {why}", self.revision),
            )
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = rustix::fs::openat(rustix::fs::CWD, &self.root, flags, Mode::empty())
            .map_err(|e| not_a_directory(format!("the snapshot cannot be opened ({})", std::io::Error::from(e))))?;
        for (index, component) in components.iter().enumerate() {
            let so_far = components[..=index].join("/");
            let stat = rustix::fs::statat(&dir, *component, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|_| not_a_directory(format!("`{so_far}` does not exist")))?;
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Directory => {}
                FileType::Symlink => {
                    return Err(SourceError::new(
                        FailureKind::InvalidRequest,
                        format!(
                            "path `{path}`: `{so_far}` is a symlink at revision {}; the path must name directories of the repository, links are not followed",
                            self.revision
                        ),
                    ));
                }
                _ => return Err(not_a_directory(format!("`{so_far}` is a file"))),
            }
            // Opened without following: a link swapped in after the check fails here.
            dir = rustix::fs::openat(&dir, *component, flags, Mode::empty())
                .map_err(|e| not_a_directory(format!("`{so_far}` cannot be opened ({})", std::io::Error::from(e))))?;
        }
        Ok(self.root.join(components.join("/")))
    }
}

/// The components of a relative path inside a snapshot (`.` and empty components dropped), or
/// why it cannot be one.
pub(crate) fn path_components(path: &str) -> Result<Vec<&str>, &'static str> {
    if path.len() > snapshot::MAX_PATH_BYTES {
        return Err("is longer than 1024 bytes");
    }
    if path.starts_with('/') {
        return Err("must be relative to the repository root, not absolute");
    }
    if path.contains('\0') {
        return Err("holds a NUL byte");
    }
    let mut components = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err("must stay inside the repository (no `..`)"),
            _ if component.chars().any(char::is_control) => return Err("holds a control character"),
            _ => components.push(component),
        }
    }
    Ok(components)
}

/// A path for messages, escaped and bounded.
fn shown_path(path: &str) -> String {
    let escaped: String = path.escape_debug().collect();
    match escaped.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &escaped[..end]),
        None => escaped,
    }
}

/// The outcome of a successful fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// The ref still points at the snapshot's commit: nothing was fetched or written.
    Unchanged(Snapshot),
    /// A new commit was fetched and written.
    Updated(Snapshot),
}

impl Fetched {
    /// The snapshot, whichever the outcome.
    pub fn snapshot(&self) -> &Snapshot {
        match self {
            Fetched::Unchanged(s) | Fetched::Updated(s) => s,
        }
    }
}

/// Transfer progress, for an indicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Objects received so far.
    pub received_objects: usize,
    /// Objects the server announced.
    pub total_objects: usize,
    /// Bytes received so far.
    pub received_bytes: u64,
}

/// Fetches one repository into its cache directory, blocking the calling thread.
pub fn fetch_blocking(
    cache: &Path,
    request: &Request,
    limits: &Limits,
    progress: Option<&mut dyn FnMut(&Progress)>,
) -> Result<Fetched, SourceError> {
    git::fetch(cache, request, limits, progress)
}

/// Told the outcome of every fetch (`updated`, `unchanged`, or the failure's reason) and how long
/// it took, for metrics.
pub(crate) type FetchObserver = Arc<dyn Fn(&str, Duration) + Send + Sync>;

/// Fetches for many registrations with bounded concurrency, keeping the blocking git2 work off
/// the async runtime.
#[derive(Clone)]
pub struct Fetcher {
    cache_root: PathBuf,
    limits: Limits,
    permits: Arc<Semaphore>,
    observer: Option<FetchObserver>,
}

impl fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetcher").field("cache_root", &self.cache_root).field("limits", &self.limits).finish()
    }
}

impl Fetcher {
    /// A fetcher caching under `cache_root`, running at most `concurrency` fetches at once.
    pub fn new(cache_root: impl Into<PathBuf>, limits: Limits, concurrency: usize) -> Self {
        Fetcher {
            cache_root: cache_root.into(),
            limits,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            observer: None,
        }
    }

    /// Reports every fetch's outcome and duration to `observer`.
    pub fn with_observer(mut self, observer: FetchObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The cache directory of registration `key` (e.g. `namespace/name`).
    pub fn cache_dir(&self, key: &str) -> PathBuf {
        let safe: String =
            key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
        self.cache_root.join(safe)
    }

    /// Fetches `request` for registration `key`. The caller never runs two fetches of one key at
    /// once (the controller reconciles an object at most once at a time).
    pub async fn fetch(&self, key: &str, request: Request) -> Result<Fetched, SourceError> {
        self.fetch_within(key, request, None).await
    }

    /// [`Fetcher::fetch`] with the whole operation bounded by `timeout` instead of the fetcher's
    /// own limit (a registration's `spec.timeout`). A socket silent for the process-wide
    /// [`set_io_timeout`] is cut either way.
    pub async fn fetch_within(
        &self,
        key: &str,
        request: Request,
        timeout: Option<Duration>,
    ) -> Result<Fetched, SourceError> {
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        let cache = self.cache_dir(key);
        let limits = Limits { timeout: timeout.unwrap_or(self.limits.timeout), ..self.limits };
        let started = std::time::Instant::now();
        let result = tokio::task::spawn_blocking(move || fetch_blocking(&cache, &request, &limits, None))
            .await
            .unwrap_or_else(|e| Err(SourceError::new(FailureKind::Other, format!("the fetch task failed: {e}"))));
        if let Some(observer) = &self.observer {
            observer(outcome_label(&result), started.elapsed());
        }
        result
    }
}

/// The metric label of a fetch's outcome.
pub(crate) fn outcome_label(result: &Result<Fetched, SourceError>) -> &'static str {
    match result {
        Ok(Fetched::Unchanged(_)) => "unchanged",
        Ok(Fetched::Updated(_)) => "updated",
        Err(e) => e.kind.reason(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names_are_read_as_branch_tag_or_commit() {
        assert_eq!(Reference::from_name("main"), Reference::Branch("main".into()));
        assert_eq!(Reference::from_name("refs/heads/dev"), Reference::Branch("dev".into()));
        assert_eq!(Reference::from_name("tags/v1"), Reference::Tag("v1".into()));
        let sha = "0123456789ABCDEF0123456789abcdef01234567";
        assert_eq!(Reference::from_name(sha), Reference::Commit(sha.to_ascii_lowercase()));
    }

    #[test]
    fn snapshot_paths_stay_inside() {
        let snapshot = Snapshot { revision: "x".into(), root: std::env::temp_dir() };
        assert!(snapshot.dir(Some("../etc")).is_err());
        assert!(snapshot.dir(Some("/etc")).is_err());
        assert_eq!(snapshot.dir(None).unwrap(), std::env::temp_dir());
    }

    #[test]
    fn debug_output_hides_credentials() {
        let credentials = Credentials::token("glpat-very-secret");
        assert!(!format!("{credentials:?}").contains("secret"));
    }
}
