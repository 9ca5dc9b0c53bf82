//! Real git servers on 127.0.0.1 for the tests of the Git source and the end-to-end tests, and a
//! stateful fake GitLab (`fake_gitlab`) for the GitLab syncer's tests and benchmark, and a real
//! Kubernetes control plane (`control_plane`) for the cluster tests, and KEDA's operator beside
//! it (`keda`).
//!
//! Use it from `tests/<name>.rs` with `mod common;` (from `tests/<area>/main.rs`:
//! `#[path = "../common/mod.rs"] mod common;`), then, for example:
//!
//! ```ignore
//! let upstream = common::Upstream::new();
//! let repo = upstream.create("app.git");
//! let sha = repo.commit_and_push(&[("deploy/app.yaml", "kind: ConfigMap\n")], "first");
//! let http = common::HttpGit::start(&upstream.root());
//! let url = http.url("app.git");
//! ```
//!
//! Every server binds `127.0.0.1:0` (the OS picks the port), lives in its own temporary directory
//! and kills the processes it started when dropped. `Sshd::start` returns
//! [`HarnessError::Unavailable`] when `/usr/sbin/sshd` is missing; [`skip_or_fail`] turns that into
//! a visible SKIP line (or a failure when `CI` is set, where sshd is always installed).

// Each test binary uses a different part of the harness.
#![allow(dead_code, unused_imports)]

pub mod access_review;
pub mod api_bridge;
pub mod attacks;
pub mod cluster;
pub mod control_plane;
pub mod fake_azure_devops;
pub mod fake_gitlab;
pub mod git_daemon;
pub mod go_build;
pub mod http_git;
pub mod keda;
pub mod process;
pub mod server_thread;
pub mod sshd;
pub mod stalling;
pub mod upstream;

use std::fmt;
use std::path::Path;
use std::process::Command;

pub use control_plane::{AuditEvent, ControlPlane};
pub use git_daemon::GitDaemon;
pub use http_git::{HttpGit, HttpOptions, Mode, RequestCounts, Tls};
pub use sshd::{ClientKey, KEY_PASSPHRASE, KeyKind, Sshd, git_ssh_command};
pub use stalling::Stalling;
pub use upstream::{Upstream, UpstreamRepo};

/// A per-test scratch directory, removed when dropped.
pub type TestDir = tempfile::TempDir;

/// A new scratch directory under the system temporary directory, named `cdtarget-test-*`.
pub fn test_dir() -> TestDir {
    tempfile::Builder::new().prefix("cdtarget-test-").tempdir().expect("create a temporary directory")
}

/// Why a server of the harness could not be started.
#[derive(Debug)]
pub enum HarnessError {
    /// A program the server needs is not installed (e.g. `/usr/sbin/sshd`): the test should be
    /// skipped with a visible message rather than fail on a developer's machine.
    Unavailable(String),
    /// The server was found but did not start; the message carries its log.
    Failed(String),
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::Unavailable(what) => write!(f, "unavailable: {what}"),
            HarnessError::Failed(why) => write!(f, "failed to start: {why}"),
        }
    }
}

impl std::error::Error for HarnessError {}

/// Unwraps a started server, or prints `SKIP <test>: <reason>` to stderr and returns `None` when a
/// program it needs is not installed. Panics on any other error, and also when the program is
/// missing while the `CI` variable is set (CI installs everything, so a missing program there is
/// a broken set-up, not a reason to skip).
pub fn skip_or_fail<T>(test: &str, started: Result<T, HarnessError>) -> Option<T> {
    match started {
        Ok(server) => Some(server),
        Err(HarnessError::Unavailable(what)) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIP {test}: {what}");
            None
        }
        Err(error) => panic!("{test}: {error}"),
    }
}

/// A `git` command isolated from the machine's and the user's git configuration (no system or
/// global config, no terminal prompts), with an author and committer identity set. Tests use it as
/// the git CLI client; the harness uses it for everything it does with git.
pub fn git_command() -> Command {
    let mut command = Command::new("git");
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .args(["-c", "user.name=cdtarget test", "-c", "user.email=test@cdtarget.invalid"])
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"])
        .args(["-c", "safe.directory=*", "-c", "protocol.file.allow=always"]);
    command
}

/// Runs `git args...` in `dir` with [`git_command`] and returns its trimmed stdout; panics with
/// git's stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = git_command().current_dir(dir).args(args).output().expect("run git");
    if !output.status.success() {
        panic!(
            "git {} in {} failed ({}):\n{}",
            args.join(" "),
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}
