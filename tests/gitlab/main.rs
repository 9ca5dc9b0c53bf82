//! The GitLab syncer against a stateful fake GitLab on 127.0.0.1 (`tests/common/fake_gitlab.rs`,
//! faithful to the GitLab contract): the client's paging, waits, retries and errors; sync and
//! removal scenarios; key rotation; commit statuses and refusal comments; the fake's own
//! fidelity (its repository model, pipelines and status records included); and
//! `cdtarget gitlab-sync`.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod client;
mod fake;
mod fake_statuses;
mod statuses;
mod sync;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cdtarget::api::TenantRepository;
use cdtarget::api::tenant_repository::GitLabSpec;
use cdtarget::gitlab::keys::{self, KeyPair};
use cdtarget::gitlab::{ClientConfig, Clock, GitLabClient, RetryPolicy, Secret, SyncInput, SyncOutcome};
use futures::future::BoxFuture;

use common::fake_gitlab::{BOT_TOKEN, FakeGitLab};

/// The receiver's external URL in most tests.
pub const EXTERNAL_URL: &str = "https://cd.example.com";
/// The webhook token of the registrations.
pub const HOOK_TOKEN: &str = "hook-token-of-app";

/// A clock that records every wait and spends a hundredth of it, so a `Retry-After: 1` is seen
/// as one second without costing one.
#[derive(Clone, Default)]
pub struct TestClock {
    waits: Arc<Mutex<Vec<Duration>>>,
}

impl TestClock {
    /// Every wait asked for so far.
    pub fn waits(&self) -> Vec<Duration> {
        self.waits.lock().unwrap().clone()
    }
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.waits.lock().unwrap().push(duration);
        Box::pin(tokio::time::sleep(duration / 100))
    }
}

/// A client of `fake` with the bot token, the test clock and short backoffs.
pub fn client(fake: &FakeGitLab, clock: &TestClock) -> GitLabClient {
    client_with_token(fake, clock, BOT_TOKEN)
}

/// A client of `fake` with `token`.
pub fn client_with_token(fake: &FakeGitLab, clock: &TestClock, token: &str) -> GitLabClient {
    let mut config = ClientConfig::new(fake.url(), Secret::new(token));
    config.clock = Arc::new(clock.clone());
    config.timeout = Duration::from_secs(10);
    config.retry = RetryPolicy {
        max_attempts: 4,
        base_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(2),
        max_rate_limit_wait: Duration::from_secs(60),
    };
    GitLabClient::new(config).expect("client")
}

/// A registration `platform/<name>` of project `path`, following branch `main`, with the
/// deploy key and the webhook managed.
pub fn registration(name: &str, path: &str) -> TenantRepository {
    TenantRepository::test()
        .with_name(name)
        .in_namespace("platform")
        .with_url(&format!("ssh://git@gitlab.example.com/{path}.git"))
        .with_branch("main")
        .with_gitlab(GitLabSpec::test())
}

/// `registration` with `status.gitlab` taken from a previous outcome, as the controller writes it.
pub fn with_status(repo: TenantRepository, outcome: &SyncOutcome) -> TenantRepository {
    repo.with_gitlab_status(outcome.status())
}

/// The input for `repo` with `pair`'s public key, [`HOOK_TOKEN`] and `external_url`.
pub fn input(repo: &TenantRepository, pair: &KeyPair, external_url: &str) -> SyncInput {
    SyncInput::for_registration(repo, &pair.public_openssh, &Secret::new(HOOK_TOKEN), external_url).expect("input")
}

/// A new key pair.
pub fn pair() -> KeyPair {
    keys::generate("cdtarget:platform/app").expect("key pair")
}
