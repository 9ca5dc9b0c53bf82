//! The Git source against real servers on 127.0.0.1: sshd with deploy keys, `git http-backend`
//! with a token (and TLS), `git daemon`, `file://`, and every failure produced for real.

#[path = "../common/mod.rs"]
mod common;

mod budgets;
mod cli;
mod failures;
mod hostile_trees;
mod isolation;
mod reader;
mod transports;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;
use std::time::Duration;

use cdtarget::source::{self, Credentials, Fetched, Limits, Reference, Request, SourceError};

/// Short socket timeouts for the whole test binary (libgit2 reads them once).
pub fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| source::set_io_timeout(Duration::from_secs(3)));
}

/// Limits for tests: a short overall timeout, generous sizes.
pub fn limits() -> Limits {
    Limits { timeout: Duration::from_secs(10), ..Limits::default() }
}

/// A request for branch `main` of `url`.
pub fn request(url: &str, credentials: Credentials) -> Request {
    Request { url: url.to_owned(), reference: Reference::Branch("main".into()), credentials, ca_bundle: None }
}

/// Fetches into `cache`.
pub fn fetch(cache: &Path, request: &Request, limits: &Limits) -> Result<Fetched, SourceError> {
    setup();
    source::fetch_blocking(cache, request, limits, None)
}

/// Fetches and expects a new snapshot.
pub fn fetch_updated(cache: &Path, request: &Request) -> source::Snapshot {
    match fetch(cache, request, &limits()) {
        Ok(Fetched::Updated(snapshot)) => snapshot,
        other => panic!("expected a new snapshot, got {other:?}"),
    }
}

/// Fetches and expects the ref not to have moved.
pub fn fetch_unchanged(cache: &Path, request: &Request) -> source::Snapshot {
    match fetch(cache, request, &limits()) {
        Ok(Fetched::Unchanged(snapshot)) => snapshot,
        other => panic!("expected no change, got {other:?}"),
    }
}

/// The text of `file` in a snapshot.
pub fn read(snapshot: &source::Snapshot, file: &str) -> String {
    std::fs::read_to_string(snapshot.root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Whether the cache repository holds a shallow history.
pub fn is_shallow(cache: &Path) -> bool {
    cache.join("repo.git/shallow").exists()
}

/// Every snapshot directory in the cache.
pub fn snapshot_dirs(cache: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cache.join("trees")).unwrap().map(|e| e.unwrap().path()).collect();
    dirs.sort();
    dirs
}

/// SSH credentials for `key` against `sshd`.
pub fn ssh_credentials(sshd: &common::Sshd, key: &common::ClientKey) -> Credentials {
    Credentials::Ssh {
        private_key: key.private_key_pem.clone(),
        passphrase: key.passphrase.clone(),
        known_hosts: sshd.known_hosts(),
    }
}

/// An upstream holding `tenant.git` with one commit of `settings.yaml` on `main`.
pub fn tenant_repo() -> (common::Upstream, common::UpstreamRepo) {
    let upstream = common::Upstream::new();
    let repo = upstream.create("tenant.git");
    repo.commit_and_push(&[("settings.yaml", CONFIG_MAP)], "first");
    (upstream, repo)
}

/// [`tenant_repo`] served by `git daemon`, an empty cache and a request for its `main`: the
/// setup of most tests of one fetch.
pub struct Served {
    /// Branch `main` of `tenant.git` at the daemon, without credentials.
    pub request: Request,
    /// The registration's cache directory.
    pub cache: common::TestDir,
    /// Serves the upstream over `git://`.
    pub daemon: common::GitDaemon,
    /// `tenant.git`, to push more commits to.
    pub repo: common::UpstreamRepo,
    /// Keeps the served repositories on disk.
    pub upstream: common::Upstream,
}

impl Served {
    /// Creates `tenant.git` (one commit of `settings.yaml`) and serves it.
    pub fn start() -> Served {
        let (upstream, repo) = tenant_repo();
        let daemon = common::GitDaemon::start(&upstream.root());
        let request = request(&daemon.url("tenant.git"), Credentials::None);
        Served { request, cache: common::test_dir(), daemon, repo, upstream }
    }

    /// Fetches into the cache with `limits`.
    pub fn fetch(&self, limits: &Limits) -> Result<Fetched, SourceError> {
        fetch(self.cache.path(), &self.request, limits)
    }

    /// Fetches and expects a new snapshot.
    pub fn fetch_updated(&self) -> source::Snapshot {
        fetch_updated(self.cache.path(), &self.request)
    }
}

/// Panics unless `running` still holds its `settings.yaml` and is the only snapshot in `cache`
/// (no half-written one left behind).
pub fn assert_running_intact(cache: &Path, running: &source::Snapshot) {
    assert_eq!(read(running, "settings.yaml"), CONFIG_MAP, "the running snapshot must survive");
    assert_eq!(snapshot_dirs(cache), std::slice::from_ref(&running.root), "no half-written snapshot is left behind");
}

/// Runs the `cdtarget` binary in the project directory with `args` and extra environment
/// variables.
pub fn cdtarget_cli(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cdtarget"));
    command.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("binary runs")
}

/// A manifest file for commits.
pub const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n";
