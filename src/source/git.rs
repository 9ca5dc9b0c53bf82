//! The blocking git2 work: ask the remote where the ref points, fetch only when it moved, and
//! write the tree of the commit into the cache. Run it off the async runtime (see
//! [`super::Fetcher`]).

use std::cell::{Cell, RefCell};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use git2::{
    AutotagOption, CertificateCheckStatus, ConfigLevel, Cred, CredentialType, Direction, ErrorClass, ErrorCode,
    FetchOptions, Oid, ProxyOptions, RemoteCallbacks, RemoteRedirect, Repository,
};

use super::error::{FailureKind, SourceError};
use super::known_hosts::{HostKeyVerdict, KnownHosts};
use super::snapshot;
use super::url::RemoteUrl;
use super::{Credentials, Fetched, Limits, Progress, Reference, Request, Snapshot};
use crate::libgit2_globals;
use crate::text::redact;

/// libgit2 asks again after every rejected credential; a wrong key must not loop forever.
const MAX_CREDENTIAL_ATTEMPTS: u32 = 3;
/// Where the fetched commit is kept in the cache repository.
const FETCHED_REF: &str = "refs/cdtarget/fetched";

/// Refuses to fetch when libgit2 could not be cut off from the machine's git configuration.
fn ensure_isolated() -> Result<(), SourceError> {
    if libgit2_globals::isolated() {
        Ok(())
    } else {
        Err(SourceError::new(
            FailureKind::Other,
            "libgit2 could not be kept from reading the global and system git configuration; refusing to fetch",
        ))
    }
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
    /// Where the server redirected to, when credentials were asked for at another origin.
    redirected_to: RefCell<Option<String>>,
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
            redirected_to: RefCell::new(None),
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
        callbacks.credentials(|url, username, allowed| self.credentials(url, username, allowed));
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

    fn credentials(&self, url: &str, username: Option<&str>, allowed: CredentialType) -> Result<Cred, git2::Error> {
        let attempts = self.credential_attempts.get() + 1;
        self.credential_attempts.set(attempts);
        if attempts > MAX_CREDENTIAL_ATTEMPTS || self.expired() {
            return Err(git2::Error::from_str("credentials rejected"));
        }
        // libgit2 follows same-host redirects (any port) and asks here for the server it ended
        // up at: credentials go to the origin of the registration's URL and nowhere else.
        if matches!(self.remote.scheme.as_str(), "http" | "https") && !same_origin(self.remote, url) {
            *self.redirected_to.borrow_mut() = Some(origin_of(url));
            return Err(git2::Error::from_str("redirected to another origin"));
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
        let userinfo = super::url::userinfo_secrets(&self.request.url);
        let secrets: Vec<&str> =
            self.request.credentials.secrets().into_iter().chain(userinfo.iter().map(String::as_str)).collect();
        let detail = redact(error.message(), &secrets);
        let remote = self.remote.display();
        if let Some(origin) = self.redirected_to.borrow().as_ref() {
            return SourceError::new(
                FailureKind::RedirectRefused,
                format!(
                    "{remote} redirected to {origin}; credentials are sent only to the scheme, host and port of the registration's URL, so the fetch stops here (point the URL at where the repository lives)"
                ),
            );
        }
        // With redirects to other hosts off, libgit2 names the hosts it refused to follow.
        if detail.starts_with("cannot redirect from") {
            return SourceError::new(
                FailureKind::RedirectRefused,
                format!(
                    "{remote} answered with a redirect ({detail}); redirects to another host or to plain http are not followed (point the URL at where the repository lives)"
                ),
            );
        }
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
    libgit2_globals::init();
    ensure_isolated()?;
    let remote = RemoteUrl::parse(&request.url)?;
    if remote.scheme == "ssh"
        && !matches!(&request.credentials, Credentials::Ssh { known_hosts, .. } if !KnownHosts::parse(known_hosts).is_empty())
    {
        return Err(SourceError::new(
            FailureKind::InvalidRequest,
            "ssh:// needs a private key and a known_hosts entry for the server (there is no trust on first use)",
        ));
    }
    fs::create_dir_all(cache.join(TREES)).map_err(|e| io_failure("cannot create the cache", &e))?;
    remove_leftovers(cache);
    let (mut repo, mut fresh) = match open_cache(cache) {
        Ok(repo) => (repo, false),
        Err(_) => (reset_cache(cache)?, true),
    };
    let mut progress = progress;
    let mut retried = false;
    loop {
        let result = fetch_into(&repo, cache, request, &remote, limits, progress.take());
        match result {
            // The cache heals itself: discard it and clone afresh, once. A repository over the
            // budget may only hold history a fresh shallow clone does not need: compact it so.
            Err(e)
                if !retried
                    && (e.kind == FailureKind::CorruptCache || (e.kind == FailureKind::CacheTooLarge && !fresh)) =>
            {
                drop(repo);
                repo = reset_cache(cache)?;
                fresh = true;
                retried = true;
            }
            Err(e) if e.kind == FailureKind::CacheTooLarge => {
                // Give the disk back: only the running snapshot stays.
                drop(repo);
                let _ = fs::remove_dir_all(cache.join(REPOSITORY));
                return Err(e);
            }
            other => return other,
        }
    }
}

/// The bare repository inside a registration's cache directory.
const REPOSITORY: &str = "repo.git";
/// The directory of the snapshots inside a registration's cache directory.
const TREES: &str = "trees";
/// Suffix of a snapshot being written.
const PARTIAL: &str = ".partial";
/// Suffix of a snapshot being removed.
const STALE: &str = ".stale";

fn open_cache(cache: &Path) -> Result<Repository, git2::Error> {
    let path = cache.join(REPOSITORY);
    let repo = if path.exists() { Repository::open_bare(&path)? } else { Repository::init_bare(&path)? };
    isolate(&repo)?;
    Ok(repo)
}

fn reset_cache(cache: &Path) -> Result<Repository, SourceError> {
    let path = cache.join(REPOSITORY);
    let _ = fs::remove_dir_all(&path);
    Repository::init_bare(&path).and_then(|repo| isolate(&repo).map(|()| repo)).map_err(|e| {
        SourceError::new(FailureKind::Other, format!("cannot create the cache repository: {}", e.message()))
    })
}

/// Settings of the cache repository itself. `ls-remote` (`connect_auth`) takes no redirect
/// option and reads `http.followRedirects`, whose default follows the first request to any host.
fn isolate(repo: &Repository) -> Result<(), git2::Error> {
    let mut config = repo.config()?.open_level(ConfigLevel::Local)?;
    if config.get_bool("http.followRedirects").ok() != Some(false) {
        config.set_bool("http.followRedirects", false)?;
    }
    Ok(())
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

    // The commit asked for by its SHA; a ref's is known once fetched.
    let asked = match &request.reference {
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
            download(&mut remote, &watch, request, remote_url, progress)?;
            Some(oid)
        }
        reference => {
            // One round trip: where does the ref point now? The same connection then carries the
            // fetch, so that a smart-HTTP server is not asked for the ref advertisement twice.
            let mut connection = remote
                .connect_auth(Direction::Fetch, Some(watch.callbacks(None)), Some(proxy()))
                .map_err(|e| watch.failure(&e, "connecting to"))?;
            let heads = connection.list().map_err(|e| watch.failure(&e, "listing refs of"))?;
            let oid = find_ref(heads, reference).ok_or_else(|| {
                SourceError::new(
                    FailureKind::RefNotFound,
                    format!("{} does not exist on {}", reference, remote_url.display()),
                )
            })?;
            if let Some(snapshot) = existing_snapshot(cache, oid) {
                return Ok(Fetched::Unchanged(snapshot));
            }
            download(connection.remote(), &watch, request, remote_url, progress)?;
            None
        }
    };

    let commit_id = match asked {
        Some(oid) => oid,
        None => repo
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

/// Fetches the commit `request` names into [`FETCHED_REF`] through `remote`, which may already be
/// connected (libgit2 then sends only the negotiation and the pack request).
fn download(
    remote: &mut git2::Remote<'_>,
    watch: &Watch<'_>,
    request: &Request,
    remote_url: &RemoteUrl,
    progress: Option<&mut dyn FnMut(&Progress)>,
) -> Result<(), SourceError> {
    let shallow = remote_url.scheme != "file";
    let refspecs = match &request.reference {
        Reference::Branch(name) => vec![format!("+refs/heads/{name}:{FETCHED_REF}")],
        Reference::Tag(name) => vec![format!("+refs/tags/{name}:{FETCHED_REF}")],
        Reference::Commit(sha) => vec![format!("+{sha}:{FETCHED_REF}")],
    };
    let mut progress = progress;
    let progress = progress.as_mut().map(|p| &mut **p as &mut dyn FnMut(&Progress));
    let mut options = fetch_options(watch, progress, shallow);
    let fetched = remote.fetch(&refspecs, Some(&mut options), None);
    let fetched = match (fetched, &request.reference) {
        // Servers that refuse unadvertised objects: fetch every branch and tag and look the commit up.
        (Err(_), Reference::Commit(_))
            if !watch.timed_out.get() && !watch.too_large.get() && watch.redirected_to.borrow().is_none() =>
        {
            let all = ["+refs/heads/*:refs/cdtarget/heads/*", "+refs/tags/*:refs/cdtarget/tags/*"];
            let mut options = fetch_options(watch, None, false);
            remote.fetch(&all, Some(&mut options), None)
        }
        (result, _) => result,
    };
    fetched.map(|_| ()).map_err(|e| watch.failure(&e, "fetching from"))
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
    // libgit2 still follows a redirect on the same host; the credentials callback refuses any
    // other origin, port included.
    options.follow_redirects(RemoteRedirect::None);
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

fn same_origin(remote: &RemoteUrl, url: &str) -> bool {
    RemoteUrl::parse(url).is_ok_and(|asked| remote.same_origin(&asked))
}

/// Where a server sent us, for a message: the server chose it, so escaped and bounded.
fn origin_of(url: &str) -> String {
    let origin = RemoteUrl::parse(url).map_or_else(|_| "another origin".to_owned(), |asked| asked.origin());
    origin.escape_debug().take(200).collect()
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
    cache.join(TREES).join(oid.to_string())
}

fn existing_snapshot(cache: &Path, oid: Oid) -> Option<Snapshot> {
    let dir = tree_dir(cache, oid);
    let found = fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
    found.then(|| {
        // Snapshots an older version kept beside the current one are not needed any more.
        prune_snapshots(cache, oid);
        Snapshot { revision: oid.to_string(), root: dir }
    })
}

/// Writes the commit's tree beside the running snapshot, which stays until the new one is whole
/// and in place; only then is the running one removed. Within the cache budget or not at all.
fn write_snapshot(
    repo: &Repository,
    cache: &Path,
    commit: &git2::Commit<'_>,
    limits: &Limits,
) -> Result<Snapshot, SourceError> {
    let at_commit = |e: SourceError| SourceError::new(e.kind, format!("commit {}: {}", commit.id(), e.message));
    let (size, _) = repo.odb().and_then(|odb| odb.read_header(commit.tree_id())).map_err(|e| corrupt(&e))?;
    snapshot::check_tree_object_size(size as u64, limits, "").map_err(at_commit)?;
    let tree = commit
        .tree()
        .map_err(|e| match e.code() {
            ErrorCode::NotFound => corrupt(&e),
            // A root tree that does not parse is the pushed commit's fault, not the cache's.
            _ => SourceError::new(
                FailureKind::UnsafeTree,
                format!("its root tree cannot be read as a Git object: {}", e.message()),
            ),
        })
        .map_err(at_commit)?;
    let plan = snapshot::plan(repo, &tree, limits).map_err(at_commit)?;
    let repository = disk_usage(&cache.join(REPOSITORY));
    let running = disk_usage(&cache.join(TREES));
    let total = repository.saturating_add(running).saturating_add(plan.bytes);
    if total > limits.max_cache_bytes {
        return Err(SourceError::new(
            FailureKind::CacheTooLarge,
            format!(
                "the cache of this registration would hold {total} bytes (repository {repository}, running snapshot {running}, commit {} {}), over its budget of {} bytes",
                commit.id(),
                plan.bytes,
                limits.max_cache_bytes
            ),
        ));
    }
    let final_dir = tree_dir(cache, commit.id());
    let partial = cache.join(TREES).join(format!("{}{PARTIAL}", commit.id()));
    let _ = fs::remove_dir_all(&partial);
    if let Err(e) = snapshot::write_plan(repo, &plan, &partial) {
        let _ = fs::remove_dir_all(&partial);
        return Err(at_commit(e));
    }
    if let Err(e) = fs::rename(&partial, &final_dir) {
        let _ = fs::remove_dir_all(&partial);
        return Err(io_failure("cannot move the snapshot into place", &e));
    }
    prune_snapshots(cache, commit.id());
    Ok(Snapshot { revision: commit.id().to_string(), root: final_dir })
}

/// Removes every snapshot but `current`. Each is first renamed (atomically) out of the names a
/// poll looks up, so an interrupted removal never leaves a half-deleted tree that looks whole.
fn prune_snapshots(cache: &Path, current: Oid) {
    let trees = cache.join(TREES);
    let Ok(entries) = fs::read_dir(&trees) else { return };
    let current = current.to_string();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == current || name.ends_with(PARTIAL) {
            continue;
        }
        let doomed = if name.ends_with(STALE) { entry.path() } else { trees.join(format!("{name}{STALE}")) };
        if doomed == entry.path() || fs::rename(entry.path(), &doomed).is_ok() {
            let _ = fs::remove_dir_all(&doomed);
        }
    }
}

/// Removes what an interrupted poll left: snapshots half-written or half-removed.
fn remove_leftovers(cache: &Path) {
    let Ok(entries) = fs::read_dir(cache.join(TREES)) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(PARTIAL) || name.ends_with(STALE) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Apparent bytes of the files and symlinks under `dir` (as the snapshot plan counts them),
/// never following a link.
fn disk_usage(dir: &Path) -> u64 {
    let mut total: u64 = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let Ok(file_type) = entry.file_type() else { continue };
            if file_type.is_dir() {
                pending.push(entry.path());
            } else if let Ok(metadata) = entry.metadata() {
                total = total.saturating_add(metadata.len());
            }
        }
    }
    total
}

fn corrupt(error: &git2::Error) -> SourceError {
    SourceError::new(FailureKind::CorruptCache, format!("the cache repository is damaged: {}", error.message()))
}

fn io_failure(doing: &str, error: &std::io::Error) -> SourceError {
    SourceError::new(FailureKind::Other, format!("{doing}: {error}"))
}
