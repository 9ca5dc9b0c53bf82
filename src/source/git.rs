//! The blocking git2 work: ask the remote where the ref points, fetch only when it moved, and
//! write the tree of the commit into the cache. Run it off the async runtime (see
//! [`super::Fetcher`]).

use std::cell::{Cell, RefCell};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, Direction, ErrorClass, ErrorCode, FetchOptions,
    ObjectType, Oid, ProxyOptions, RemoteCallbacks, Repository, TreeWalkMode, TreeWalkResult,
};

use super::error::{FailureKind, SourceError, redact};
use super::known_hosts::{HostKeyVerdict, KnownHosts};
use super::url::RemoteUrl;
use super::{Credentials, Fetched, Limits, Progress, Reference, Request, Snapshot};

/// libgit2 asks again after every rejected credential; a wrong key must not loop forever.
const MAX_CREDENTIAL_ATTEMPTS: u32 = 3;
/// Where the fetched commit is kept in the cache repository.
const FETCHED_REF: &str = "refs/cdtarget/fetched";

static INIT: Once = Once::new();
static IO_TIMEOUT_MS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(30_000);

/// Sets libgit2's socket timeouts (connect and every read), which end a stalled transfer where
/// no progress callback would run. Takes effect only before the first fetch of the process.
pub fn set_io_timeout(timeout: Duration) {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX).max(1);
    IO_TIMEOUT_MS.store(ms, std::sync::atomic::Ordering::SeqCst);
}

#[allow(unsafe_code)]
fn init_libgit2() {
    INIT.call_once(|| {
        let ms = IO_TIMEOUT_MS.load(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: the options are plain C globals. Every use of libgit2 in cdtarget passes through
        // this `Once` first, so no other thread is inside libgit2 while they are written, and every
        // later reader is ordered after the write.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
            let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
        }
    });
}

/// What the callbacks saw, to name the failure precisely afterwards.
struct Watch<'a> {
    request: &'a Request,
    remote: &'a RemoteUrl,
    known_hosts: KnownHosts,
    deadline: Instant,
    limits: &'a Limits,
    credential_attempts: Cell<u32>,
    credential_problem: RefCell<Option<String>>,
    host_key: RefCell<Option<HostKeyVerdict>>,
    certificate_problem: RefCell<Option<String>>,
    timed_out: Cell<bool>,
    too_large: Cell<bool>,
}

impl<'a> Watch<'a> {
    fn new(request: &'a Request, remote: &'a RemoteUrl, limits: &'a Limits) -> Self {
        let known_hosts = match &request.credentials {
            Credentials::Ssh { known_hosts, .. } => KnownHosts::parse(known_hosts),
            _ => KnownHosts::default(),
        };
        Watch {
            request,
            remote,
            known_hosts,
            deadline: Instant::now() + limits.timeout,
            limits,
            credential_attempts: Cell::new(0),
            credential_problem: RefCell::new(None),
            host_key: RefCell::new(None),
            certificate_problem: RefCell::new(None),
            timed_out: Cell::new(false),
            too_large: Cell::new(false),
        }
    }

    fn expired(&self) -> bool {
        let expired = Instant::now() >= self.deadline;
        if expired {
            self.timed_out.set(true);
        }
        expired
    }

    fn callbacks<'b>(&'b self, mut progress: Option<&'b mut dyn FnMut(&Progress)>) -> RemoteCallbacks<'b> {
        let mut callbacks = RemoteCallbacks::new();
        callbacks.credentials(|_url, username, allowed| self.credentials(username, allowed));
        callbacks.certificate_check(|cert, host| self.certificate(cert, host));
        callbacks.transfer_progress(move |stats| {
            if stats.received_bytes() as u64 > self.limits.max_fetch_bytes {
                self.too_large.set(true);
                return false;
            }
            if self.expired() {
                return false;
            }
            if let Some(report) = progress.as_mut() {
                report(&Progress {
                    received_objects: stats.received_objects(),
                    total_objects: stats.total_objects(),
                    received_bytes: stats.received_bytes() as u64,
                });
            }
            true
        });
        callbacks.sideband_progress(|_| !self.expired());
        callbacks
    }

    fn credentials(&self, username: Option<&str>, allowed: CredentialType) -> Result<Cred, git2::Error> {
        let attempts = self.credential_attempts.get() + 1;
        self.credential_attempts.set(attempts);
        if attempts > MAX_CREDENTIAL_ATTEMPTS || self.expired() {
            return Err(git2::Error::from_str("credentials rejected"));
        }
        let refuse = |message: &str| {
            *self.credential_problem.borrow_mut() = Some(message.to_owned());
            Err(git2::Error::from_str(message))
        };
        match &self.request.credentials {
            Credentials::Ssh { private_key, passphrase, .. } => {
                let user = username.or(self.remote.user.as_deref()).unwrap_or("git");
                if allowed.contains(CredentialType::USERNAME) {
                    return Cred::username(user);
                }
                if !allowed.contains(CredentialType::SSH_KEY) && !allowed.contains(CredentialType::SSH_MEMORY) {
                    return refuse("the server does not accept SSH keys");
                }
                Cred::ssh_key_from_memory(user, None, private_key, passphrase.as_deref()).or_else(|_| {
                    refuse("the SSH private key cannot be used: wrong passphrase, or not an OpenSSH/PEM ed25519, RSA or ECDSA key")
                })
            }
            Credentials::Basic { username, password } if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) => {
                Cred::userpass_plaintext(username, password)
            }
            Credentials::Basic { .. } => refuse("the server does not accept a username and password or token"),
            Credentials::None => refuse("the server asks for credentials, and none are configured"),
        }
    }

    fn certificate(&self, cert: &git2::cert::Cert<'_>, host: &str) -> Result<CertificateCheckStatus, git2::Error> {
        if let Some(hostkey) = cert.as_hostkey() {
            let Some(key) = hostkey.hostkey() else {
                return Err(git2::Error::from_str("the server sent no host key"));
            };
            let verdict = self.known_hosts.verify(host, self.remote.port, key);
            let trusted = verdict == HostKeyVerdict::Trusted;
            *self.host_key.borrow_mut() = Some(verdict);
            return if trusted {
                Ok(CertificateCheckStatus::CertificateOk)
            } else {
                Err(git2::Error::from_str("host key"))
            };
        }
        match (cert.as_x509(), &self.request.ca_bundle) {
            (Some(x509), Some(bundle)) => match super::tls::verify(x509.data(), bundle, host) {
                Ok(()) => Ok(CertificateCheckStatus::CertificateOk),
                Err(problem) => {
                    *self.certificate_problem.borrow_mut() = Some(problem);
                    Err(git2::Error::from_str("certificate"))
                }
            },
            // Without a bundle of its own the system's trust store decides.
            _ => Ok(CertificateCheckStatus::CertificatePassthrough),
        }
    }

    /// Names a libgit2 failure from what the callbacks saw, then from libgit2's classification.
    fn failure(&self, error: &git2::Error, doing: &str) -> SourceError {
        let secrets = self.request.credentials.secrets();
        let detail = redact(error.message(), &secrets);
        let remote = self.remote.display();
        if self.too_large.get() {
            return SourceError::new(
                FailureKind::TooLarge,
                format!("fetching from {remote} exceeded the limit of {} bytes", self.limits.max_fetch_bytes),
            );
        }
        // libgit2's socket timeouts surface as network errors saying so.
        let socket_timeout = error.message().to_ascii_lowercase().contains("timed out");
        if self.timed_out.get() || error.code() == ErrorCode::Timeout || socket_timeout || self.expired() {
            return SourceError::new(
                FailureKind::Timeout,
                format!("{doing} {remote} took longer than {}s", self.limits.timeout.as_secs_f32()),
            );
        }
        match self.host_key.borrow().as_ref() {
            Some(HostKeyVerdict::Mismatch { presented }) => {
                return SourceError::new(
                    FailureKind::HostKeyMismatch,
                    format!(
                        "the host key of {remote} ({presented}) is not the one in known_hosts; if the server's key was changed on purpose, update known_hosts"
                    ),
                );
            }
            Some(HostKeyVerdict::Unknown { presented }) => {
                return SourceError::new(
                    FailureKind::HostKeyUnknown,
                    format!(
                        "known_hosts has no entry for {remote} (it presented {presented}); add the server's key, e.g. from `ssh-keyscan`"
                    ),
                );
            }
            _ => {}
        }
        if let Some(problem) = self.certificate_problem.borrow().as_ref() {
            return SourceError::new(
                FailureKind::CertificateInvalid,
                format!("the TLS certificate of {remote} is not trusted by the configured CA bundle: {problem}"),
            );
        }
        let certificate_error = error.code() == ErrorCode::Certificate || detail.contains("certificate");
        if certificate_error && self.remote.scheme == "https" {
            return SourceError::new(
                FailureKind::CertificateInvalid,
                format!(
                    "the TLS certificate of {remote} is not trusted ({detail}); configure the CA bundle that signed it"
                ),
            );
        }
        // libssh2's words for a key it cannot decrypt or parse.
        if detail.contains("Unable to extract public key") || detail.contains("Unsupported private key format") {
            return SourceError::new(
                FailureKind::AuthenticationFailed,
                format!(
                    "{remote}: the SSH private key cannot be used: wrong passphrase, or not an OpenSSH/PEM ed25519, RSA or ECDSA key"
                ),
            );
        }
        if let Some(problem) = self.credential_problem.borrow().as_ref() {
            return SourceError::new(FailureKind::AuthenticationFailed, format!("{remote}: {problem}"));
        }
        if error.code() == ErrorCode::Auth || self.credential_attempts.get() > MAX_CREDENTIAL_ATTEMPTS {
            return SourceError::new(
                FailureKind::AuthenticationFailed,
                format!("{remote} refused the credentials ({detail}); check the deploy key or token and its access"),
            );
        }
        let kind = match error.class() {
            ErrorClass::Net | ErrorClass::Os | ErrorClass::Ssh | ErrorClass::Http | ErrorClass::Ssl => {
                FailureKind::Unreachable
            }
            ErrorClass::Odb | ErrorClass::Object | ErrorClass::Repository | ErrorClass::Index | ErrorClass::Zlib => {
                FailureKind::CorruptCache
            }
            _ => FailureKind::Other,
        };
        SourceError::new(kind, format!("{doing} {remote} failed: {detail}"))
    }
}

/// Fetches `request` into `cache` (one directory per registration) and returns the snapshot.
pub fn fetch(
    cache: &Path,
    request: &Request,
    limits: &Limits,
    progress: Option<&mut dyn FnMut(&Progress)>,
) -> Result<Fetched, SourceError> {
    init_libgit2();
    let remote = RemoteUrl::parse(&request.url)?;
    if remote.scheme == "ssh"
        && !matches!(&request.credentials, Credentials::Ssh { known_hosts, .. } if !KnownHosts::parse(known_hosts).is_empty())
    {
        return Err(SourceError::new(
            FailureKind::InvalidRequest,
            "ssh:// needs a private key and a known_hosts entry for the server (there is no trust on first use)",
        ));
    }
    fs::create_dir_all(cache.join("trees")).map_err(|e| io_failure("cannot create the cache", &e))?;
    let repo = match open_cache(cache) {
        Ok(repo) => repo,
        Err(_) => reset_cache(cache)?,
    };
    match fetch_into(&repo, cache, request, &remote, limits, progress) {
        Err(e) if e.kind == FailureKind::CorruptCache => {
            // The cache heals itself: discard it and clone afresh, once.
            drop(repo);
            let repo = reset_cache(cache)?;
            fetch_into(&repo, cache, request, &remote, limits, None)
        }
        other => other,
    }
}

fn open_cache(cache: &Path) -> Result<Repository, git2::Error> {
    let path = cache.join("repo.git");
    if path.exists() { Repository::open_bare(&path) } else { Repository::init_bare(&path) }
}

fn reset_cache(cache: &Path) -> Result<Repository, SourceError> {
    let path = cache.join("repo.git");
    let _ = fs::remove_dir_all(&path);
    Repository::init_bare(&path).map_err(|e| {
        SourceError::new(FailureKind::Other, format!("cannot create the cache repository: {}", e.message()))
    })
}

fn fetch_into(
    repo: &Repository,
    cache: &Path,
    request: &Request,
    remote_url: &RemoteUrl,
    limits: &Limits,
    progress: Option<&mut dyn FnMut(&Progress)>,
) -> Result<Fetched, SourceError> {
    let watch = Watch::new(request, remote_url, limits);
    let mut remote = repo.remote_anonymous(&request.url).map_err(|e| watch.failure(&e, "reading the URL of"))?;

    let wanted = match &request.reference {
        Reference::Commit(sha) => {
            let oid = Oid::from_str(sha).map_err(|_| {
                SourceError::new(
                    FailureKind::InvalidRequest,
                    format!("`{sha}` is not a full commit SHA (40 hex characters)"),
                )
            })?;
            if let Some(snapshot) = existing_snapshot(cache, oid) {
                return Ok(Fetched::Unchanged(snapshot));
            }
            oid
        }
        reference => {
            // One round trip: where does the ref point now?
            let advertised = {
                let connection = remote
                    .connect_auth(Direction::Fetch, Some(watch.callbacks(None)), Some(proxy()))
                    .map_err(|e| watch.failure(&e, "connecting to"))?;
                let heads = connection.list().map_err(|e| watch.failure(&e, "listing refs of"))?;
                find_ref(heads, reference)
            };
            let oid = advertised.ok_or_else(|| {
                SourceError::new(
                    FailureKind::RefNotFound,
                    format!("{} does not exist on {}", reference, remote_url.display()),
                )
            })?;
            if let Some(snapshot) = existing_snapshot(cache, oid) {
                return Ok(Fetched::Unchanged(snapshot));
            }
            oid
        }
    };

    let shallow = remote_url.scheme != "file";
    let refspecs = match &request.reference {
        Reference::Branch(name) => vec![format!("+refs/heads/{name}:{FETCHED_REF}")],
        Reference::Tag(name) => vec![format!("+refs/tags/{name}:{FETCHED_REF}")],
        Reference::Commit(sha) => vec![format!("+{sha}:{FETCHED_REF}")],
    };
    let mut progress = progress;
    let progress = progress.as_mut().map(|p| &mut **p as &mut dyn FnMut(&Progress));
    let mut options = fetch_options(&watch, progress, shallow);
    let fetched = remote.fetch(&refspecs, Some(&mut options), None);
    let fetched = match (fetched, &request.reference) {
        // Servers that refuse unadvertised objects: fetch every branch and tag and look the commit up.
        (Err(_), Reference::Commit(_)) if !watch.timed_out.get() && !watch.too_large.get() => {
            let all = ["+refs/heads/*:refs/cdtarget/heads/*", "+refs/tags/*:refs/cdtarget/tags/*"];
            let mut options = fetch_options(&watch, None, false);
            remote.fetch(&all, Some(&mut options), None)
        }
        (result, _) => result,
    };
    fetched.map_err(|e| watch.failure(&e, "fetching from"))?;

    let commit_id = match &request.reference {
        Reference::Commit(_) => wanted,
        _ => repo
            .find_reference(FETCHED_REF)
            .and_then(|r| r.peel_to_commit())
            .map(|c| c.id())
            .map_err(|e| watch.failure(&e, "reading what was fetched from"))?,
    };
    let commit = repo.find_commit(commit_id).map_err(|_| {
        SourceError::new(
            FailureKind::RefNotFound,
            format!("{} does not exist on {}", request.reference, remote_url.display()),
        )
    })?;
    let snapshot = write_snapshot(repo, cache, &commit, limits)?;
    Ok(Fetched::Updated(snapshot))
}

fn fetch_options<'b>(
    watch: &'b Watch<'_>,
    progress: Option<&'b mut dyn FnMut(&Progress)>,
    shallow: bool,
) -> FetchOptions<'b> {
    let mut options = FetchOptions::new();
    options.remote_callbacks(watch.callbacks(progress));
    options.download_tags(AutotagOption::None);
    options.update_fetchhead(false);
    options.proxy_options(proxy());
    if shallow {
        options.depth(1);
    }
    options
}

fn proxy() -> ProxyOptions<'static> {
    let mut proxy = ProxyOptions::new();
    proxy.auto();
    proxy
}

/// The commit a ref points to, peeling annotated tags.
fn find_ref(heads: &[git2::RemoteHead<'_>], reference: &Reference) -> Option<Oid> {
    let name = match reference {
        Reference::Branch(branch) => format!("refs/heads/{branch}"),
        Reference::Tag(tag) => format!("refs/tags/{tag}"),
        Reference::Commit(_) => return None,
    };
    let peeled = format!("{name}^{{}}");
    heads.iter().find(|h| h.name() == peeled).or_else(|| heads.iter().find(|h| h.name() == name)).map(|h| h.oid())
}

fn tree_dir(cache: &Path, oid: Oid) -> PathBuf {
    cache.join("trees").join(oid.to_string())
}

fn existing_snapshot(cache: &Path, oid: Oid) -> Option<Snapshot> {
    let dir = tree_dir(cache, oid);
    dir.is_dir().then(|| Snapshot { revision: oid.to_string(), root: dir })
}

/// Writes the commit's tree beside the previous snapshot, which stays until the new one is whole.
fn write_snapshot(
    repo: &Repository,
    cache: &Path,
    commit: &git2::Commit<'_>,
    limits: &Limits,
) -> Result<Snapshot, SourceError> {
    let final_dir = tree_dir(cache, commit.id());
    let partial = cache.join("trees").join(format!("{}.partial", commit.id()));
    let _ = fs::remove_dir_all(&partial);
    fs::create_dir_all(&partial).map_err(|e| io_failure("cannot write the snapshot", &e))?;
    let tree = commit.tree().map_err(|e| corrupt(&e))?;
    if let Err(e) = write_tree(repo, &tree, &partial, limits) {
        let _ = fs::remove_dir_all(&partial);
        return Err(e);
    }
    fs::rename(&partial, &final_dir).map_err(|e| io_failure("cannot move the snapshot into place", &e))?;
    prune_snapshots(cache, commit.id());
    Ok(Snapshot { revision: commit.id().to_string(), root: final_dir })
}

/// Keeps the new snapshot and the one before it (a reader may still be on it).
fn prune_snapshots(cache: &Path, current: Oid) {
    let Ok(entries) = fs::read_dir(cache.join("trees")) else { return };
    let mut others: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != current.to_string().as_str())
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    others.sort();
    others.pop();
    for (_, path) in others {
        let _ = fs::remove_dir_all(path);
    }
}

/// Writes files, directories and symlinks (as links: the loader decides about them). Submodules
/// are not fetched; nothing is executed; names that could escape the directory are refused.
fn write_tree(repo: &Repository, tree: &git2::Tree<'_>, dir: &Path, limits: &Limits) -> Result<(), SourceError> {
    let mut total: u64 = 0;
    let mut failure = None;
    let walked = tree.walk(TreeWalkMode::PreOrder, |parent, entry| {
        let Some(name) =
            entry.name().ok().filter(|n| !n.is_empty() && *n != "." && *n != ".." && *n != ".git" && !n.contains('/'))
        else {
            failure = Some(SourceError::new(
                FailureKind::InvalidRequest,
                format!("the tree holds an unsafe name {:?}", entry.name()),
            ));
            return TreeWalkResult::Abort;
        };
        let path = dir.join(parent).join(name);
        let written = match entry.kind() {
            Some(ObjectType::Tree) => {
                fs::create_dir_all(&path).map_err(|e| io_failure("cannot write the snapshot", &e))
            }
            Some(ObjectType::Blob) => repo.find_blob(entry.id()).map_err(|e| corrupt(&e)).and_then(|blob| {
                total += blob.size() as u64;
                if total > limits.max_tree_bytes {
                    return Err(SourceError::new(
                        FailureKind::TooLarge,
                        format!("the checked-out tree exceeds the limit of {} bytes", limits.max_tree_bytes),
                    ));
                }
                if entry.filemode() == 0o120000 {
                    let target = String::from_utf8_lossy(blob.content()).into_owned();
                    std::os::unix::fs::symlink(target, &path).map_err(|e| io_failure("cannot write the snapshot", &e))
                } else {
                    fs::write(&path, blob.content()).map_err(|e| io_failure("cannot write the snapshot", &e))
                }
            }),
            // Submodule commits and anything else are not part of the snapshot.
            _ => Ok(()),
        };
        match written {
            Ok(()) => TreeWalkResult::Ok,
            Err(e) => {
                failure = Some(e);
                TreeWalkResult::Abort
            }
        }
    });
    match (failure, walked) {
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(corrupt(&e)),
        (None, Ok(())) => Ok(()),
    }
}

fn corrupt(error: &git2::Error) -> SourceError {
    SourceError::new(FailureKind::CorruptCache, format!("the cache repository is damaged: {}", error.message()))
}

fn io_failure(doing: &str, error: &std::io::Error) -> SourceError {
    SourceError::new(FailureKind::Other, format!("{doing}: {error}"))
}
