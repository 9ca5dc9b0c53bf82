//! libgit2's process-wide options: the socket timeouts and the configuration search paths, set
//! once before the first fetch of the process.
//!
//! The one module of cdtarget with unsafe code, and the reason it is a module of its own: git2
//! exposes these setters as `unsafe fn` (they write C globals that every libgit2 call reads, so
//! the caller must make sure no other thread is inside libgit2 meanwhile). Every other module of
//! the crate is compiled under `forbid(unsafe_code)` (see `src/lib.rs`), and a foundation test
//! (`tests/foundation/lints.rs`) fails when `unsafe` appears anywhere else in `src/`. Used by the
//! Git source ([`crate::source`]), which re-exports [`set_io_timeout`].

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use git2::ConfigLevel;

static INIT: Once = Once::new();
static IO_TIMEOUT_MS: AtomicI32 = AtomicI32::new(30_000);
/// Set once the global, XDG, system and ProgramData configuration search paths are emptied.
static ISOLATED: AtomicBool = AtomicBool::new(false);

/// Sets libgit2's socket timeouts (connect and every read), which end a stalled transfer where
/// no progress callback would run. Takes effect only before the first fetch of the process.
pub fn set_io_timeout(timeout: Duration) {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX).max(1);
    IO_TIMEOUT_MS.store(ms, Ordering::SeqCst);
}

/// Sets the options, once per process; every use of libgit2 in cdtarget calls this first.
#[allow(unsafe_code)]
pub(crate) fn init() {
    INIT.call_once(|| {
        let ms = IO_TIMEOUT_MS.load(Ordering::SeqCst);
        // SAFETY: the options are plain C globals. Every use of libgit2 in cdtarget passes through
        // this `Once` first, so no other thread is inside libgit2 while they are written, and every
        // later reader is ordered after the write.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
            let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
            // No configuration but the cache repository's own: a `$HOME/.gitconfig`,
            // `$XDG_CONFIG_HOME/git/config` or `/etc/gitconfig` (`url.<x>.insteadOf`,
            // `http.followRedirects`, proxies) must not change where or how a tenant is fetched.
            let levels = [ConfigLevel::System, ConfigLevel::XDG, ConfigLevel::Global, ConfigLevel::ProgramData];
            let isolated = levels.into_iter().all(|level| git2::opts::set_search_path(level, "").is_ok());
            ISOLATED.store(isolated, Ordering::SeqCst);
        }
    });
}

/// Loads libgit2 while the process has one thread. git2's own first-use set-up sets
/// `SSL_CERT_FILE`/`SSL_CERT_DIR` with `setenv` when they are unset (openssl-probe), which races
/// with any other thread reading the environment; done first thing in `main`, nothing else runs.
pub fn load_before_threads() {
    // An empty in-memory configuration: git2 runs its one-time set-up first; nothing is read.
    let _ = git2::Config::new();
}

/// Whether [`init`] cut libgit2 off from the machine's and the user's git configuration.
pub(crate) fn isolated() -> bool {
    ISOLATED.load(Ordering::SeqCst)
}
