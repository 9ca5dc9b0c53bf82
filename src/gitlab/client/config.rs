//! What a client is built from: the bot token (never shown), the clock it waits with, its retry
//! policy and its [`ClientConfig`].

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use crate::gitlab::error::{ErrorKind, GitLabError};

/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

// === secrets ===

/// A secret string (the bot token, a webhook token): `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value` as it is.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// Reads a token file: at most 64 KiB, surrounding whitespace removed, non-empty, one line.
    pub fn from_file(path: &Path, what: &str) -> Result<Self, GitLabError> {
        let invalid =
            |why: String| GitLabError::new(ErrorKind::InvalidConfig, format!("{what} {}: {why}", path.display()));
        let size = std::fs::metadata(path).map_err(|e| invalid(format!("cannot read it: {e}")))?.len();
        if size > MAX_TOKEN_FILE_BYTES {
            return Err(invalid(format!(
                "is {size} bytes; a token file of at most {MAX_TOKEN_FILE_BYTES} bytes is read"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read it: {e}")))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(invalid("is empty; expected the token on one line".into()));
        }
        if token.contains(['\n', '\r']) {
            return Err(invalid("holds more than one line; expected the token alone on one line".into()));
        }
        Ok(Secret(token.to_owned()))
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

// === time ===

/// The wall clock and the sleeping the client does while it waits out a 429 or backs off.
/// Injectable so tests can see the waits without spending them.
pub trait Clock: Send + Sync + 'static {
    /// Now, for `RateLimit-Reset` (Unix seconds).
    fn now(&self) -> SystemTime;
    /// Waits `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// The real clock: `SystemTime::now` and `tokio::time::sleep`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

// === configuration ===

/// How often and how long the client retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included, when it meets 5xx or connection failures
    /// (429s do not count here).
    pub max_attempts: u32,
    /// First backoff after a 5xx or a connection failure; doubled each time, with jitter.
    pub base_backoff: Duration,
    /// Longest single backoff.
    pub max_backoff: Duration,
    /// Longest total wait for 429s one request accepts (`Retry-After`, `RateLimit-Reset`, or
    /// backoff for an application limit that names no time); beyond it the request fails with
    /// [`ErrorKind::RateLimited`] so the caller requeues instead of holding a worker.
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_rate_limit_wait: Duration::from_secs(120),
        }
    }
}

/// Everything a [`GitLabClient`] is built from.
#[derive(Clone)]
pub struct ClientConfig {
    /// The GitLab instance, e.g. `https://gitlab.example.com` (a trailing `/api/v4` is accepted).
    pub base_url: String,
    /// The bot's access token, sent as `PRIVATE-TOKEN`.
    pub token: Secret,
    /// Upper bound on one request, body included.
    pub timeout: Duration,
    /// Upper bound on connecting.
    pub connect_timeout: Duration,
    /// Largest response body read.
    pub max_body_bytes: usize,
    /// Retries and waits.
    pub retry: RetryPolicy,
    /// The clock waits go through.
    pub clock: Arc<dyn Clock>,
}

impl ClientConfig {
    /// Defaults: 30 s per request, 10 s to connect, 8 MiB bodies, [`RetryPolicy::default`].
    pub fn new(base_url: impl Into<String>, token: Secret) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            token,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_body_bytes: 8 << 20,
            retry: RetryPolicy::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("token", &self.token)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}
