//! The REST client: paging, both kinds of 429, retries, error classification, and the token
//! kept out of every message.

use std::time::Duration;

use cdtarget::error::Reason;
use cdtarget::gitlab::{self, ErrorKind, GitLabError};

use super::common::fake_gitlab::{
    BOT_TOKEN, DEVELOPER, FakeGitLab, Fault, Pagination, RateLimit, Scope, TokenState, synthetic_key,
};
use super::{TestClock, client, client_with_token, input, pair, registration};

fn assert_token_absent(error: &GitLabError) {
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains(BOT_TOKEN) && !shown.contains("glpat-"), "token leaked: {shown}");
}

#[tokio::test]
async fn project_is_looked_up_once_by_encoded_path() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/infra/app");
    let client = client(&fake, &TestClock::default());
    let project = client.project("team-a/infra/app").await.unwrap();
    assert_eq!((project.id, project.path_with_namespace.as_str()), (id, "team-a/infra/app"));
    assert_eq!(fake.log(), ["GET /api/v4/projects/team-a%2Finfra%2Fapp -> 200".to_owned()]);
}

#[tokio::test]
async fn a_moved_project_is_found_through_the_redirect_on_the_same_host() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.rename_project(id, "team-b/app");
    let project = client(&fake, &TestClock::default()).project("team-a/app").await.unwrap();
    assert_eq!(project.id, id);
    assert_eq!(
        fake.log(),
        ["GET /api/v4/projects/team-a%2Fapp -> 301".to_owned(), format!("GET /api/v4/projects/{id} -> 200")]
    );
}

#[tokio::test]
async fn listings_follow_every_page_whatever_headers_gitlab_sends() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.seed_foreign_keys(id, 250);
    fake.seed_foreign_hooks(id, 130);
    let client = client(&fake, &TestClock::default());
    for pagination in [Pagination::AllHeaders, Pagination::LinkOnly, Pagination::None] {
        fake.set_pagination(pagination);
        fake.reset_counts();
        assert_eq!(client.deploy_keys(id).await.unwrap().len(), 250, "{pagination:?}");
        assert_eq!(client.hooks(id).await.unwrap().len(), 130, "{pagination:?}");
        let counts = fake.counts();
        assert_eq!(counts.route("GET /projects/:id/deploy_keys"), 3, "{pagination:?}: 250 keys in pages of 100");
        assert_eq!(counts.route("GET /projects/:id/hooks"), 2, "{pagination:?}: 130 hooks");
        assert!(fake.log().iter().all(|line| line.contains("per_page=100")), "{:?}", fake.log());
    }
}

#[tokio::test]
async fn a_full_last_page_without_headers_costs_one_empty_page() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.seed_foreign_keys(id, 200);
    fake.set_pagination(Pagination::None);
    assert_eq!(client(&fake, &TestClock::default()).deploy_keys(id).await.unwrap().len(), 200);
    assert_eq!(fake.counts().route("GET /projects/:id/deploy_keys"), 3);
}

#[tokio::test]
async fn throttled_requests_wait_for_retry_after_then_go_through() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.inject(Some("GET"), Some("/projects/:id/deploy_keys"), Fault::Throttle { retry_after: 1 }, 1);
    let clock = TestClock::default();
    let client = client(&fake, &clock);
    assert!(client.deploy_keys(id).await.unwrap().is_empty());
    assert_eq!(fake.counts().status(429), 1);
    // The wait runs until the moment Retry-After names (a few µs of it already passed).
    let waits = clock.waits();
    assert!(
        waits.len() == 1 && waits[0] > Duration::from_millis(900) && waits[0] <= Duration::from_secs(1),
        "{waits:?}"
    );
    assert_eq!(client.stats().throttled, 1);
}

#[tokio::test]
async fn throttled_requests_without_retry_after_wait_until_ratelimit_reset() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.inject(Some("GET"), Some("/projects/:id/hooks"), Fault::ThrottleResetOnly { reset_in: 3 }, 1);
    let clock = TestClock::default();
    assert!(client(&fake, &clock).hooks(id).await.unwrap().is_empty());
    // RateLimit-Reset is an epoch second: the wait is up to 3 s from now, never a 3 s delta read
    // as an epoch (which would be decades).
    let wait = clock.waits().into_iter().max().unwrap();
    assert!(wait > Duration::from_millis(1500) && wait <= Duration::from_secs(3), "waited {wait:?}");
}

#[tokio::test]
async fn application_rate_limit_without_headers_backs_off_and_retries() {
    let fake = FakeGitLab::start();
    fake.add_project("team-a/app");
    // More 429s than `max_attempts` (4): rate limits are bounded by time waited, not attempts.
    fake.inject(Some("GET"), Some("/projects/:id"), Fault::AppRateLimit, 6);
    let clock = TestClock::default();
    client(&fake, &clock).project("team-a/app").await.unwrap();
    assert_eq!(fake.counts().route("GET /projects/:id"), 7);
    let waits = clock.waits();
    assert_eq!(waits.len(), 6, "{waits:?}");
    assert!(waits[0] <= Duration::from_millis(200) && waits[5] >= Duration::from_secs(1), "growing: {waits:?}");
    assert!(waits.iter().all(|w| *w <= Duration::from_secs(2)), "capped: {waits:?}");
}

#[tokio::test]
async fn an_application_rate_limit_that_never_lifts_ends_as_rate_limited() {
    let fake = FakeGitLab::start();
    fake.add_project("team-a/app");
    fake.inject(Some("GET"), Some("/projects/:id"), Fault::AppRateLimit, 1000);
    let clock = TestClock::default();
    let error = client(&fake, &clock).project("team-a/app").await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::RateLimited);
    assert!(error.message.contains("This endpoint has been requested too many times"), "{error}");
    let waited: Duration = clock.waits().iter().sum();
    assert!(waited <= Duration::from_secs(60) && waited > Duration::from_secs(55), "the budget: {waited:?}");
}

#[tokio::test]
async fn a_rate_limit_longer_than_the_client_waits_is_returned_with_its_delay() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.inject(None, None, Fault::Throttle { retry_after: 3600 }, 1);
    let clock = TestClock::default();
    let error = client(&fake, &clock).deploy_keys(id).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(3600)));
    assert_eq!(error.reason(), "GitLabRateLimited");
    assert!(clock.waits().is_empty(), "an hour is not waited out in a worker");
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_then_succeed() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.inject(Some("GET"), Some("/projects/:id/hooks"), Fault::ServerError, 2);
    fake.inject(Some("GET"), Some("/projects/:id/hooks"), Fault::BadGateway, 1);
    let clock = TestClock::default();
    let client = client(&fake, &clock);
    assert!(client.hooks(id).await.unwrap().is_empty());
    assert_eq!(fake.counts().route("GET /projects/:id/hooks"), 4);
    assert_eq!(client.stats().retries, 3);
    assert_eq!(clock.waits().len(), 3);
}

#[tokio::test]
async fn an_outage_ends_as_unavailable_after_the_last_attempt() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.inject(None, None, Fault::ServerError, 100);
    let error = client(&fake, &TestClock::default()).deploy_keys(id).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Unavailable);
    assert!(error.message.contains("500") && error.message.contains("500 Internal Server Error"), "{error}");
    assert_eq!(fake.counts().total(), 4, "max_attempts");
}

#[tokio::test]
async fn an_unreachable_gitlab_is_unavailable() {
    let fake = FakeGitLab::start();
    let clock = TestClock::default();
    let client = client(&fake, &clock);
    drop(fake);
    let error = client.project("team-a/app").await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Unavailable, "{error}");
    assert!(error.message.contains("cannot connect"), "{error}");
    assert_eq!(clock.waits().len(), 3, "retried");
}

#[tokio::test]
async fn auth_failures_name_what_to_fix_and_never_the_token() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    let low = fake.add_project_with_role("team-a/low", Some(DEVELOPER));
    fake.add_token("glpat-expired-token", 1, Scope::Api, TokenState::Expired);
    fake.add_token("glpat-read-only-token", 1, Scope::ReadApi, TokenState::Valid);
    let clock = TestClock::default();

    let error = client_with_token(&fake, &clock, "glpat-wrong-token").deploy_keys(id).await.unwrap_err();
    assert_eq!((error.kind, error.status), (ErrorKind::Unauthorized, Some(401)));
    assert!(error.message.contains("401 Unauthorized") && error.message.contains("scope `api`"), "{error}");
    assert!(!error.to_string().contains("glpat-wrong-token"));

    let error = client_with_token(&fake, &clock, "glpat-expired-token").hooks(id).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Unauthorized);
    assert!(error.message.contains("Token is expired"), "{error}");
    assert!(!error.to_string().contains("glpat-expired-token"));

    let read_only = client_with_token(&fake, &clock, "glpat-read-only-token");
    assert!(read_only.deploy_keys(id).await.is_ok(), "read_api may read");
    let error = read_only.create_deploy_key(id, "t", &synthetic_key("k"), false).await.unwrap_err();
    assert_eq!((error.kind, error.reason()), (ErrorKind::InsufficientScope, "GitLabInsufficientScope"));
    assert!(error.message.contains("lacks scope `api`"), "{error}");

    let client = client(&fake, &clock);
    let error = client.hooks(low).await.unwrap_err();
    assert_eq!((error.kind, error.reason()), (ErrorKind::NotMaintainer, "GitLabNotMaintainer"));
    assert!(error.message.contains("Maintainer"), "{error}");
    assert_token_absent(&error);

    let error = client.project("team-a/missing").await.unwrap_err();
    assert_eq!((error.kind, error.reason()), (ErrorKind::ProjectNotFound, "GitLabProjectNotFound"));
    assert!(error.message.contains("project `team-a/missing`"), "{error}");
    let hidden = fake.add_project_with_role("team-x/hidden", None);
    assert_eq!(client.deploy_keys(hidden).await.unwrap_err().kind, ErrorKind::ProjectNotFound, "invisible = missing");
    assert!(clock.waits().is_empty(), "4xx is never retried");
}

#[tokio::test]
async fn a_shared_client_pauses_every_sync_when_gitlab_says_the_window_is_used_up() {
    let fake = FakeGitLab::start();
    fake.set_rate_limit(Some(RateLimit { requests: 25, period_secs: 1 }));
    let repos: Vec<_> = (0..8).map(|n| registration(&format!("app-{n}"), &format!("team/app-{n}"))).collect();
    for n in 0..8 {
        fake.add_project(&format!("team/app-{n}"));
    }
    let pairs: Vec<_> = (0..8).map(|_| pair()).collect();
    let inputs: Vec<_> = repos.iter().zip(&pairs).map(|(repo, pair)| input(repo, pair, super::EXTERNAL_URL)).collect();
    // The real clock: the fake's windows are real seconds. 40 requests at 25 per second.
    let client = cdtarget::gitlab::GitLabClient::new(cdtarget::gitlab::ClientConfig::new(
        fake.url(),
        cdtarget::gitlab::Secret::new(BOT_TOKEN),
    ))
    .unwrap();
    let results = gitlab::sync_many(&client, &inputs, 4).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let counts = fake.counts();
    assert_eq!(counts.status(201), 16, "a key and a hook per registration");
    assert_eq!(counts.total() - counts.status(429), 8 * 5, "lookup, two listings, two creations each");
    assert_eq!(counts.status(429), 0, "the client stops when the window's requests are taken: {:?}", fake.log());
}

#[tokio::test]
async fn bodies_larger_than_the_bound_are_refused() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    fake.seed_foreign_keys(id, 60);
    let mut config = cdtarget::gitlab::ClientConfig::new(fake.url(), cdtarget::gitlab::Secret::new(BOT_TOKEN));
    config.max_body_bytes = 4096;
    let client = cdtarget::gitlab::GitLabClient::new(config).unwrap();
    let error = client.deploy_keys(id).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidResponse);
    assert!(error.message.contains("larger than 4096 bytes"), "{error}");
}

#[tokio::test]
async fn the_debug_form_of_a_client_shows_no_token() {
    let fake = FakeGitLab::start();
    let client = client(&fake, &TestClock::default());
    assert!(!format!("{client:?}").contains(BOT_TOKEN));
}

#[tokio::test]
async fn the_observer_is_told_each_calls_method_and_outcome_once_after_retries() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    let client = client(&fake, &TestClock::default());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    client.observe_requests(std::sync::Arc::new(move |method: &str, result: Result<(), ErrorKind>| {
        sink.lock().unwrap().push((method.to_owned(), result));
    }));
    client.project("team-a/app").await.unwrap();
    // A 500 retried and then answered is one call, and a success.
    fake.inject(Some("GET"), Some("/projects/:id/hooks"), Fault::ServerError, 1);
    client.hooks(id).await.unwrap();
    client.project("team-a/missing").await.unwrap_err();
    assert_eq!(
        *seen.lock().unwrap(),
        [("GET".to_owned(), Ok(())), ("GET".to_owned(), Ok(())), ("GET".to_owned(), Err(ErrorKind::ProjectNotFound)),]
    );
    assert_eq!(client.stats().count("GET"), 4, "the retry was sent: {:?}", fake.log());
}
