//! Sync and removal against the fake GitLab: the contract's surprising cases, idempotence,
//! deletion with things already gone, and key rotation without a moment without a valid key.

use cdtarget::api::tenant_repository::webhook_path;
use cdtarget::error::{Classify, Reason};
use cdtarget::gitlab::{self, ErrorKind, executor};

use super::common::fake_gitlab::{FakeGitLab, Fault, HOOK_LIMIT};
use super::{EXTERNAL_URL, HOOK_TOKEN, TestClock, client, input, pair, registration, with_status};

const PROJECT: &str = "team-a/app";

fn hook_url(external: &str) -> String {
    format!("{external}{}", webhook_path(HOOK_TOKEN, "app", "platform"))
}

#[tokio::test]
async fn a_new_registration_gets_a_read_only_key_and_a_push_hook_then_costs_two_listings() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());

    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    assert_eq!(outcome.project_id, id);
    assert_eq!(outcome.writes, 2);
    let keys = fake.deploy_keys(id);
    assert_eq!(keys.len(), 1);
    assert_eq!((keys[0].fingerprint.as_str(), keys[0].can_push), (pair.fingerprint.as_str(), false));
    assert_eq!(keys[0].title, "cdtarget:platform/app");
    assert_eq!(Some(keys[0].id), outcome.deploy_key_id);
    let hooks = fake.hooks(id);
    assert_eq!(hooks.len(), 1);
    let hook = &hooks[0];
    assert_eq!((hook.url.as_str(), hook.token.as_deref()), (hook_url(EXTERNAL_URL).as_str(), Some(HOOK_TOKEN)));
    assert_eq!(hook.name, "cdtarget:platform/app");
    assert!(hook.enable_ssl_verification);
    let on: Vec<&str> = hook.events.iter().filter(|(_, on)| **on).map(|(flag, _)| flag.as_str()).collect();
    assert_eq!(on, ["push_events"], "push events only for a branch");
    assert_eq!((hook.push_events_branch_filter.as_str(), hook.branch_filter_strategy.as_str()), ("main", "wildcard"));

    // The controller writes the outcome to status; from then on the id is known.
    fake.reset_counts();
    let repo = with_status(repo, &outcome);
    let again = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    let counts = fake.counts();
    assert_eq!((counts.method("GET"), counts.writes()), (2, 0), "{:?}", fake.log());
    assert_eq!((again.writes, again.deploy_key_id, again.hook_id), (0, outcome.deploy_key_id, outcome.hook_id));
    assert!(again.plan.is_empty());
}

#[tokio::test]
async fn a_recorded_project_id_that_is_gone_is_looked_up_again_by_path() {
    let fake = FakeGitLab::start();
    let old = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    fake.delete_project(old);
    let new = fake.add_project(PROJECT);
    let again = gitlab::sync(&client, &input(&with_status(repo, &outcome), &pair, EXTERNAL_URL)).await.unwrap();
    assert_eq!(again.project_id, new);
    assert_eq!((fake.deploy_keys(new).len(), fake.hooks(new).len()), (1, 1));
}

#[tokio::test]
async fn a_tag_registration_gets_tag_push_events_for_all_branches() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let repo = registration("app", PROJECT).with_tag("v1.0.0");
    gitlab::sync(&client(&fake, &TestClock::default()), &input(&repo, &pair(), EXTERNAL_URL)).await.unwrap();
    let hook = &fake.hooks(id)[0];
    assert_eq!((hook.events["push_events"], hook.events["tag_push_events"]), (true, true));
    assert_eq!(hook.branch_filter_strategy, "all_branches");
}

#[tokio::test]
async fn the_same_key_already_on_the_project_with_push_access_is_made_read_only() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let pair = pair();
    let key_id = fake.seed_deploy_key(id, "added by a person", &pair.public_openssh, true);
    let client = client(&fake, &TestClock::default());
    let outcome = gitlab::sync(&client, &input(&registration("app", PROJECT), &pair, EXTERNAL_URL)).await.unwrap();
    assert_eq!(outcome.deploy_key_id, Some(key_id));
    assert_eq!(fake.counts().route("POST /projects/:id/deploy_keys"), 0, "listed, not added again");
    assert_eq!(fake.counts().route("PUT /projects/:id/deploy_keys/:key_id"), 1);
    assert!(!fake.deploy_keys(id)[0].can_push);
}

#[tokio::test]
async fn a_key_that_appears_between_listing_and_adding_keeps_no_push_access() {
    // Case 1 of adding a key: GitLab answers 201 with the existing link and ignores can_push.
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let pair = pair();
    let client = client(&fake, &TestClock::default());
    let plan = gitlab::plan_sync(&client, &input(&registration("app", PROJECT), &pair, EXTERNAL_URL)).await.unwrap();
    let key_id = fake.seed_deploy_key(id, "raced", &pair.public_openssh, true);
    let done = executor::execute(&client, &plan).await.unwrap();
    assert_eq!(done.deploy_key_id, Some(key_id));
    assert_eq!(fake.counts().route("PUT /projects/:id/deploy_keys/:key_id"), 1, "the can_push fix-up after 201");
    assert!(!fake.deploy_keys(id)[0].can_push);
    assert_eq!(fake.deploy_keys(id).len(), 1);
}

#[tokio::test]
async fn a_key_on_another_project_the_bot_maintains_is_linked_read_only() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let other = fake.add_project("team-a/other");
    let pair = pair();
    fake.seed_deploy_key(other, "other", &pair.public_openssh, true);
    let outcome =
        gitlab::sync(&client(&fake, &TestClock::default()), &input(&registration("app", PROJECT), &pair, EXTERNAL_URL))
            .await
            .unwrap();
    assert!(outcome.deploy_key_id.is_some());
    assert!(!fake.deploy_keys(id)[0].can_push, "case 2 links with the can_push asked for");
    assert!(fake.deploy_keys(other)[0].can_push, "the other project is not touched");
}

#[tokio::test]
async fn a_key_taken_elsewhere_stalls_with_a_reason_and_a_remedy() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let hidden = fake.add_project_with_role("someone/else", None);
    let (in_hidden, as_user_key) = (pair(), pair());
    fake.seed_deploy_key(hidden, "theirs", &in_hidden.public_openssh, false);
    fake.seed_user_key(&as_user_key.public_openssh);
    let client = client(&fake, &TestClock::default());
    for taken in [&in_hidden, &as_user_key] {
        let error =
            gitlab::sync(&client, &input(&registration("app", PROJECT), taken, EXTERNAL_URL)).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::KeyTakenElsewhere, "{error}");
        assert_eq!(error.reason(), "DeployKeyInUse");
        assert_eq!(error.class(), cdtarget::error::Class::Stalled);
        assert!(
            error.message.contains("already taken") && error.message.contains("cdtarget.io/rotate-deploy-key"),
            "{error}"
        );
    }
    assert!(fake.deploy_keys(id).is_empty());
    assert_eq!(fake.counts().route("POST /projects/:id/deploy_keys"), 2, "a 400 is not retried");
}

#[tokio::test]
async fn a_new_receiver_url_edits_the_hook_in_place_and_keeps_its_token() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let first = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    let repo = with_status(repo, &first);

    fake.reset_counts();
    let moved = gitlab::sync(&client, &input(&repo, &pair, "https://cd2.example.com/")).await.unwrap();
    assert_eq!(moved.hook_id, first.hook_id, "edited, not duplicated");
    assert_eq!(fake.counts().writes(), 1);
    assert_eq!(fake.counts().route("PUT /projects/:id/hooks/:hook_id"), 1);
    let hooks = fake.hooks(id);
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].url, hook_url("https://cd2.example.com"));
    assert_eq!(hooks[0].token.as_deref(), Some(HOOK_TOKEN), "a URL edit without the token would wipe it");
}

#[tokio::test]
async fn a_token_wiped_by_a_url_edit_elsewhere_is_sent_again() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    let hook_id = outcome.hook_id.unwrap();

    // A person changes the URL in GitLab without retyping the token: GitLab drops the token.
    let http = reqwest::Client::new();
    let url = format!("{}/api/v4/projects/{id}/hooks/{hook_id}", fake.url());
    let edited = http
        .put(&url)
        .header("PRIVATE-TOKEN", super::common::fake_gitlab::BOT_TOKEN)
        .json(&serde_json::json!({"url": "https://elsewhere.example.com/x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(edited.status(), 200);
    assert_eq!(fake.hooks(id)[0].token, None);

    let repo = with_status(repo, &outcome);
    let again = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    assert_eq!(again.hook_id, Some(hook_id));
    let hook = &fake.hooks(id)[0];
    assert_eq!((hook.url.as_str(), hook.token.as_deref()), (hook_url(EXTERNAL_URL).as_str(), Some(HOOK_TOKEN)));
}

#[tokio::test]
async fn duplicates_of_our_hook_are_removed_and_foreign_hooks_kept() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let url = hook_url(EXTERNAL_URL);
    let first = fake.seed_hook(id, &url, "made by hand", Some(HOOK_TOKEN));
    let duplicate = fake.seed_hook(id, &url, "made twice", Some(HOOK_TOKEN));
    let foreign = fake.seed_hook(id, "https://ci.example.com/hook", "ci", Some("x"));
    let outcome = gitlab::sync(
        &client(&fake, &TestClock::default()),
        &input(&registration("app", PROJECT), &pair(), EXTERNAL_URL),
    )
    .await
    .unwrap();
    assert_eq!(outcome.hook_id, Some(first));
    let ids: Vec<i64> = fake.hooks(id).iter().map(|h| h.id).collect();
    assert_eq!(ids, [first, foreign], "{duplicate} removed");
    assert_eq!(fake.hooks(id)[0].name, "cdtarget:platform/app", "renamed to the marker");
}

#[tokio::test]
async fn more_than_a_hundred_keys_and_hooks_are_paged_through() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    fake.seed_foreign_keys(id, 150);
    fake.seed_foreign_hooks(id, 99);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    // Our key and hook land last: on page 2 of each listing.
    fake.seed_foreign_hooks(id, 10);
    let repo = with_status(repo, &outcome);
    fake.reset_counts();
    let again = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    assert!(again.plan.is_empty(), "{}", again.plan);
    assert_eq!((again.deploy_key_id, again.hook_id), (outcome.deploy_key_id, outcome.hook_id));
    let counts = fake.counts();
    assert_eq!(counts.route("GET /projects/:id/deploy_keys"), 2, "151 keys");
    assert_eq!(counts.route("GET /projects/:id/hooks"), 2, "110 hooks");
    assert_eq!(counts.writes(), 0);
}

#[tokio::test]
async fn a_project_full_of_hooks_is_a_rejection_naming_the_limit() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    fake.seed_foreign_hooks(id, HOOK_LIMIT);
    let error = gitlab::sync(
        &client(&fake, &TestClock::default()),
        &input(&registration("app", PROJECT), &pair(), EXTERNAL_URL),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Rejected);
    assert!(error.message.contains("Maximum number of project hooks (100) exceeded"), "{error}");
}

#[tokio::test]
async fn server_errors_on_writes_are_retried_without_duplicates() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    fake.inject(Some("POST"), Some("/projects/:id/hooks"), Fault::ServerError, 2);
    fake.inject(Some("POST"), Some("/projects/:id/deploy_keys"), Fault::BadGateway, 1);
    let outcome = gitlab::sync(
        &client(&fake, &TestClock::default()),
        &input(&registration("app", PROJECT), &pair(), EXTERNAL_URL),
    )
    .await
    .unwrap();
    assert!(outcome.deploy_key_id.is_some() && outcome.hook_id.is_some());
    assert_eq!((fake.deploy_keys(id).len(), fake.hooks(id).len()), (1, 1));
    assert_eq!(fake.counts().route("POST /projects/:id/hooks"), 3);
}

#[tokio::test]
async fn removal_takes_key_and_hook_and_leaves_the_rest() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let foreign_key = fake.seed_deploy_key(id, "human", &super::common::fake_gitlab::synthetic_key("human"), false);
    let foreign_hook = fake.seed_hook(id, "https://ci.example.com/hook", "ci", None);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    let repo = with_status(repo, &outcome);

    let removed = gitlab::remove(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    assert_eq!(removed.writes, 2);
    assert_eq!(fake.deploy_keys(id).iter().map(|k| k.id).collect::<Vec<_>>(), [foreign_key]);
    assert_eq!(fake.hooks(id).iter().map(|h| h.id).collect::<Vec<_>>(), [foreign_hook]);
    assert!(!fake.key_exists(&pair.fingerprint), "an unlinked private key is destroyed");
}

#[tokio::test]
async fn removal_with_the_key_or_hook_already_gone_completes() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    let repo = with_status(repo, &outcome);
    let input = input(&repo, &pair, EXTERNAL_URL);

    // Removed by a person before the registration was deleted: not listed, nothing to call.
    let http = reqwest::Client::new();
    let hook_url = format!("{}/api/v4/projects/{id}/hooks/{}", fake.url(), outcome.hook_id.unwrap());
    let token = super::common::fake_gitlab::BOT_TOKEN;
    assert_eq!(http.delete(&hook_url).header("PRIVATE-TOKEN", token).send().await.unwrap().status(), 204);
    let plan = gitlab::plan_removal(&client, &input).await.unwrap();
    assert_eq!(plan.calls.len(), 1, "{plan}");

    // Removed between listing and deleting: the 404 counts as done.
    let key_url = format!("{}/api/v4/projects/{id}/deploy_keys/{}", fake.url(), outcome.deploy_key_id.unwrap());
    assert_eq!(http.delete(&key_url).header("PRIVATE-TOKEN", token).send().await.unwrap().status(), 204);
    let done = executor::execute(&client, &plan).await.unwrap();
    assert_eq!(done.already_gone, 1);
    assert!(fake.deploy_keys(id).is_empty() && fake.hooks(id).is_empty());
}

#[tokio::test]
async fn removal_from_a_deleted_project_is_done_and_an_outage_keeps_it_pending() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    let repo = with_status(repo, &outcome);

    fake.inject(None, None, Fault::ServerError, 100);
    let error = gitlab::remove(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap_err();
    assert_eq!((error.kind, error.class()), (ErrorKind::Unavailable, cdtarget::error::Class::Transient));
    assert_eq!(fake.deploy_keys(id).len(), 1, "nothing is forgotten during an outage");

    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = super::client(&fake, &TestClock::default());
    let outcome =
        gitlab::sync(&client, &super::input(&registration("app", PROJECT), &pair, EXTERNAL_URL)).await.unwrap();
    fake.delete_project(id);
    let repo = with_status(registration("app", PROJECT), &outcome);
    let removed = gitlab::remove(&client, &super::input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    assert_eq!(removed.writes, 0, "a project that is gone holds nothing of ours");
}

#[tokio::test]
async fn rotation_registers_the_new_key_before_the_old_one_goes() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let repo = registration("app", PROJECT);
    // What the registration's Secret holds, step by step.
    let old = pair();
    let outcome = gitlab::sync(&client, &input(&repo, &old, EXTERNAL_URL)).await.unwrap();
    let repo = with_status(repo, &outcome);

    // 1. Rotation asked: a new pair, registered while the old key (still in the Secret) stays.
    let new = pair();
    let step = input(&repo, &old, EXTERNAL_URL).rotating_to(&new.public_openssh).unwrap();
    // The first attempt fails on GitLab's side: the old key must survive it.
    fake.inject(Some("POST"), Some("/projects/:id/deploy_keys"), Fault::ServerError, 4);
    assert_eq!(gitlab::sync(&client, &step).await.unwrap_err().kind, ErrorKind::Unavailable);
    assert_eq!(
        fake.deploy_keys(id).iter().map(|k| k.fingerprint.as_str()).collect::<Vec<_>>(),
        [old.fingerprint.as_str()]
    );
    let registered = gitlab::sync(&client, &step).await.unwrap();
    assert_eq!(
        registered.deploy_key_id,
        fake.deploy_keys(id).iter().find(|k| k.fingerprint == new.fingerprint).map(|k| k.id)
    );

    // 2. The controller writes the new pair into the Secret, then syncs as usual: the old key goes.
    let repo = with_status(repo, &registered);
    let done = gitlab::sync(&client, &input(&repo, &new, EXTERNAL_URL)).await.unwrap();
    assert_eq!(done.writes, 1);
    let keys = fake.deploy_keys(id);
    assert_eq!(keys.iter().map(|k| k.fingerprint.as_str()).collect::<Vec<_>>(), [new.fingerprint.as_str()]);
    assert!(!keys[0].can_push);

    // Every state the project went through held the key the Secret held at that moment.
    let timeline = fake.key_timeline(id);
    let expected = [vec![&old.fingerprint], vec![&old.fingerprint, &new.fingerprint], vec![&new.fingerprint]];
    assert_eq!(timeline.len(), expected.len(), "{timeline:?}");
    for (state, wanted) in timeline.iter().zip(expected) {
        let mut wanted: Vec<String> = wanted.into_iter().cloned().collect();
        wanted.sort();
        assert_eq!(state.iter().cloned().collect::<Vec<_>>(), wanted);
    }
}

#[tokio::test]
async fn a_disabled_hook_is_tested_to_enable_it_and_a_temporarily_disabled_one_left_to_heal() {
    let fake = FakeGitLab::start();
    let id = fake.add_project(PROJECT);
    let client = client(&fake, &TestClock::default());
    let (repo, pair) = (registration("app", PROJECT), pair());
    let outcome = gitlab::sync(&client, &input(&repo, &pair, EXTERNAL_URL)).await.unwrap();
    let hook_id = outcome.hook_id.unwrap();
    let input = input(&with_status(repo, &outcome), &pair, EXTERNAL_URL);

    fake.set_hook_alert_status(id, hook_id, "temporarily_disabled");
    let plan = gitlab::plan_sync(&client, &input).await.unwrap();
    assert!(plan.is_empty(), "GitLab re-enables it by itself: {plan}");

    fake.set_hook_alert_status(id, hook_id, "disabled");
    fake.reset_counts();
    let again = gitlab::sync(&client, &input).await.unwrap();
    assert_eq!(again.writes, 1);
    assert_eq!(fake.counts().route("POST /projects/:id/hooks/:hook_id/test/push_events"), 1);
    assert_eq!(fake.hooks(id)[0].alert_status, "executable");
}
