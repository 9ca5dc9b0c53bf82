//! Commit statuses and the refusal comment (`cdtarget::gitlab::commit_status`) against the fake
//! GitLab: every trap of contract §14 the client must avoid, played out.

use std::time::Duration;

use cdtarget::api::tenant_repository::PostedCommitStatus;
use cdtarget::gitlab::client::{CommitState, StatusParams, StatusPosted};
use cdtarget::gitlab::commit_status::{self, Outcome, Remembered, StatusSettings, Step, Target, Vars};
use cdtarget::gitlab::{ErrorKind, GitLabClient};
use cdtarget::problem::Problem;

use super::common::fake_gitlab::{BOT_TOKEN, DEVELOPER, FakeGitLab, Fault};
use super::{TestClock, client};

/// The target of registration `cdtarget-system/team-a` for `sha` on `main`.
fn target(sha: &str) -> Target {
    let settings = StatusSettings::new(
        commit_status::DEFAULT_STATUS_NAME,
        Some("https://dash.example.com/{targetNamespace}?rev={revision}"),
    )
    .unwrap();
    let vars = Vars { namespace: "cdtarget-system", name: "team-a", target_namespace: "team-a", revision: sha };
    Target::new(&settings, vars, Some("main".into()))
}

fn setup() -> (FakeGitLab, i64, String) {
    let fake = FakeGitLab::start();
    let project = fake.add_project("team-a/app");
    let sha = fake.commit(project, "main", &[("deploy/a.yaml", &[1, 2, 3, 4, 5], &[])]);
    (fake, project, sha)
}

/// One evaluation of `sha` as the controller does it: `pending` if new, then the verdict.
async fn evaluate(
    client: &GitLabClient,
    project: i64,
    remembered: &Remembered,
    sha: &str,
    outcome: &Outcome,
) -> Remembered {
    let target = target(sha);
    let mut remembered = remembered.clone();
    if let Some(pending) = commit_status::pending(&remembered, &target) {
        let posted = commit_status::post(client, project, &remembered, &[pending]).await;
        assert_eq!(posted.error, None);
        remembered = posted.remembered;
    }
    let steps = commit_status::verdict(&remembered, &target, &outcome.clone());
    let posted = commit_status::post(client, project, &remembered, &steps).await;
    assert_eq!(posted.error, None);
    posted.remembered
}

fn problems() -> Vec<Problem> {
    vec![
        Problem::field("spec.ip[0]", "`10.0.0.300` is not an IPv4 address").located("deploy/a.yaml", Some(1), Some(3)),
        Problem::field("kind", "Secret is not allowed; use a SealedSecret").located("deploy/b.yaml", Some(2), Some(9)),
    ]
}

#[tokio::test]
async fn pending_then_success_is_one_record_with_our_name_ref_and_link() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let remembered =
        evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Applied("applied 2 objects".into())).await;
    let records = fake.statuses(project);
    assert_eq!(records.len(), 1, "pending and success are the same record: {records:?}");
    let record = &records[0];
    assert_eq!(
        (record.status.as_str(), record.name.as_str(), record.git_ref.as_str(), record.sha.as_str()),
        ("success", "cdtarget:cdtarget-system/team-a", "main", sha.as_str())
    );
    assert_eq!(record.target_url.as_deref(), Some(format!("https://dash.example.com/team-a?rev={sha}").as_str()));
    assert_eq!(record.description.as_deref(), Some("applied 2 objects"));
    assert_eq!(
        remembered.commit_status,
        Some(PostedCommitStatus {
            sha: sha.clone(),
            git_ref: Some("main".into()),
            name: "cdtarget:cdtarget-system/team-a".into(),
            state: "success".into(),
            pipeline_id: Some(record.pipeline_id),
        })
    );
    assert_eq!(fake.counts().endpoint("statuses.create").writes, 2);
}

#[tokio::test]
async fn evaluating_the_same_revision_again_sends_nothing() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let outcome = Outcome::Refused(problems());
    let remembered = evaluate(&client, project, &Remembered::default(), &sha, &outcome).await;
    fake.reset_counts();
    let again = evaluate(&client, project, &remembered, &sha, &outcome).await;
    assert_eq!(again, remembered);
    assert_eq!(fake.counts().total(), 0, "no request at all: {:?}", fake.log());
    assert_eq!(fake.statuses(project).len(), 1);
    assert_eq!(fake.comments(project).len(), 1);
}

#[tokio::test]
async fn a_lost_answer_to_pending_is_already_there_and_its_pipeline_is_read_back() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let target = target(&sha);
    let Some(Step::Status(pending)) = commit_status::pending(&Remembered::default(), &target) else { panic!() };
    let first = client.set_commit_status(project, &pending).await.unwrap();
    let StatusPosted::Stored(stored) = first else { panic!("{first:?}") };
    // The controller did not record it (its status write failed): it posts pending again.
    let posted = commit_status::post(&client, project, &Remembered::default(), &[Step::Status(pending)]).await;
    assert_eq!(posted.error, None, "400 `:enqueue from :pending` means already there");
    assert_eq!(posted.remembered.commit_status.unwrap().pipeline_id, stored.pipeline_id);
    assert_eq!(fake.counts().status(400), 1);
    assert_eq!(fake.counts().endpoint("statuses.list").requests, 1, "read back by full SHA and name");
    assert!(fake.log().iter().any(|l| l.contains(&format!("/commits/{sha}/statuses?")) && l.contains("name=")));
}

#[tokio::test]
async fn a_finished_status_is_not_posted_again_but_a_changed_verdict_is_once() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let failed =
        evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Failed("RBAC missing".into())).await;
    let again = evaluate(&client, project, &failed, &sha, &Outcome::Failed("RBAC missing".into())).await;
    assert_eq!(fake.statuses(project).len(), 1, "the same final state is never re-posted");
    let fixed = evaluate(&client, project, &again, &sha, &Outcome::Applied("applied".into())).await;
    let records = fake.statuses(project);
    assert_eq!(records.len(), 2, "the changed verdict is a new record: {records:?}");
    assert!(records[0].retried && !records[1].retried);
    assert_eq!(records[0].pipeline_id, records[1].pipeline_id, "in the same pipeline");
    assert_eq!(fixed.commit_status.unwrap().state, "success");
}

#[tokio::test]
async fn a_long_multibyte_description_is_cut_to_255_characters() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let message = format!("Überprüfung fehlgeschlagen: {}", "ß".repeat(300));
    evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Failed(message)).await;
    let description = fake.statuses(project)[0].description.clone().unwrap();
    assert_eq!(description.chars().count(), 255, "{description}");
    assert!(description.len() > 255, "counted in characters, not bytes");
}

#[tokio::test]
async fn a_developer_token_on_protected_main_is_told_which_role_it_needs() {
    let (fake, project, sha) = setup();
    fake.protect_branch(project, "main");
    fake.set_bot_role(project, DEVELOPER);
    let client = client(&fake, &TestClock::default());
    let Some(pending) = commit_status::pending(&Remembered::default(), &target(&sha)) else { panic!() };
    let posted = commit_status::post(&client, project, &Remembered::default(), &[pending]).await;
    let error = posted.error.expect("403");
    assert_eq!(error.kind, ErrorKind::StatusForbidden);
    for expected in ["403", "Developer", "protected", "push or merge", "`main`", "Maintainer"] {
        assert!(error.message.contains(expected), "{expected:?} missing: {error}");
    }
    assert!(!error.message.contains(BOT_TOKEN));
    assert_eq!(posted.remembered, Remembered::default(), "nothing remembered");
    assert_eq!(fake.pipelines(project).len(), 1, "GitLab kept the pipeline it made before refusing");
}

#[tokio::test]
async fn a_409_is_retried_with_backoff() {
    let (fake, project, sha) = setup();
    fake.inject(Some("POST"), Some("/projects/:id/statuses/:sha"), Fault::StatusLocked, 2);
    let clock = TestClock::default();
    let client = client(&fake, &clock);
    let remembered = evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Applied("ok".into())).await;
    assert_eq!(remembered.commit_status.unwrap().state, "success");
    assert_eq!(fake.counts().status(409), 2);
    assert_eq!(clock.waits().len(), 2, "one backoff per 409: {:?}", clock.waits());
}

#[tokio::test]
async fn throttles_are_waited_out_and_the_notes_limit_asks_for_a_minute() {
    let (fake, project, sha) = setup();
    fake.inject(Some("POST"), Some("/projects/:id/statuses/:sha"), Fault::Throttle { retry_after: 2 }, 1);
    let clock = TestClock::default();
    let client = client(&fake, &clock);
    let Some(pending) = commit_status::pending(&Remembered::default(), &target(&sha)) else { panic!() };
    let posted = commit_status::post(&client, project, &Remembered::default(), &[pending]).await;
    assert_eq!(posted.error, None);
    assert!(clock.waits().iter().any(|w| *w >= Duration::from_secs(1)), "Retry-After honoured: {:?}", clock.waits());

    fake.inject(Some("POST"), Some("/projects/:id/repository/commits/:sha/comments"), Fault::AppRateLimit, 1);
    let steps = commit_status::verdict(&posted.remembered, &target(&sha), &Outcome::Refused(problems()));
    let refused = commit_status::post(&client, project, &posted.remembered, &steps).await;
    let error = refused.error.expect("the JSON 429 of the notes limit");
    assert_eq!((error.kind, error.retry_after), (ErrorKind::RateLimited, Some(Duration::from_secs(60))));
    assert_eq!(refused.remembered.commented_sha, None, "the comment is tried again later");
    assert_eq!(refused.remembered.commit_status.unwrap().state, "failed", "the status went through first");
    assert_eq!(fake.comments(project).len(), 0);
}

#[tokio::test]
async fn a_hostile_problem_cannot_run_a_quick_action() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let hostile = vec![
        Problem::field("/merge", "a key named like a command").located("deploy/a.yaml", Some(1), Some(1)),
        Problem::field("metadata.name", "bad\n/assign @mallory\n```\n/close\n/tag v666").located(
            "deploy/```\n/approve.yaml",
            Some(1),
            Some(2),
        ),
        Problem::field("/label ~x", "no file at all"),
    ];
    evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Refused(hostile)).await;
    assert_eq!(fake.quick_actions(), Vec::<String>::new(), "no quick action ran");
    let comments = fake.comments(project);
    assert_eq!(comments.len(), 1);
    let note = &comments[0].note;
    assert!(note.contains("/assign @mallory") && note.contains("/merge"), "shown as text: {note}");
    assert_eq!(fake.counts().status(202), 0);
}

#[tokio::test]
async fn the_refusal_comment_lists_every_problem_with_its_line_once() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let remembered = evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Refused(problems())).await;
    let comments = fake.comments(project);
    assert_eq!(comments.len(), 1);
    let note = &comments[0].note;
    assert!(note.contains("deploy/a.yaml:3 (document 1): spec.ip[0]: `10.0.0.300` is not an IPv4 address"), "{note}");
    assert!(note.contains("deploy/b.yaml:9 (document 2): kind: Secret is not allowed"), "{note}");
    let record = &fake.statuses(project)[0];
    assert_eq!(record.status, "failed");
    assert!(
        record.description.as_deref().unwrap().starts_with("deploy/a.yaml:3 (document 1): spec.ip[0]"),
        "{record:?}"
    );
    // The controller lost what it remembered about the comment: the marker finds it.
    let forgot = Remembered { commented_sha: None, ..remembered };
    let steps = commit_status::verdict(&forgot, &target(&sha), &Outcome::Refused(problems()));
    let posted = commit_status::post(&client, project, &forgot, &steps).await;
    assert_eq!(posted.remembered.commented_sha.as_deref(), Some(sha.as_str()));
    assert_eq!(fake.comments(project).len(), 1, "never posted twice");
}

#[tokio::test]
async fn statuses_are_read_back_by_full_sha_only() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Applied("ok".into())).await;
    let records = client.commit_statuses(project, &sha, "cdtarget:cdtarget-system/team-a", Some("main")).await.unwrap();
    assert_eq!(records.len(), 1);
    let error = client.commit_statuses(project, "main", "x", None).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidConfig, "a branch name would list nothing: refused");
    let params = StatusParams {
        sha: sha[..8].to_owned(),
        git_ref: None,
        name: "x".into(),
        state: CommitState::Success,
        description: String::new(),
        target_url: None,
        pipeline_id: None,
    };
    assert_eq!(client.set_commit_status(project, &params).await.unwrap_err().kind, ErrorKind::InvalidConfig);
}

#[tokio::test]
async fn url_credentials_and_tokens_never_reach_gitlab() {
    let (fake, project, sha) = setup();
    let client = client(&fake, &TestClock::default());
    let leaky = "fetching https://bot:glpat-leaked-token@git.example.com/team-a/app.git failed";
    let first = evaluate(&client, project, &Remembered::default(), &sha, &Outcome::Failed(leaky.into())).await;
    let problem = Problem::field("spec.config.url", leaky).located("deploy/a.yaml", Some(1), Some(1));
    let second = fake.commit(project, "main", &[("deploy/a.yaml", &[1], &[1])]);
    evaluate(&client, project, &first, &second, &Outcome::Refused(vec![problem])).await;
    let state = fake.state_document().to_string();
    assert!(!state.contains("glpat-leaked-token"), "a credential reached GitLab: {state}");
    assert!(state.contains("https://***@git.example.com"), "redacted, not dropped: {state}");
    assert!(!state.contains(BOT_TOKEN));
}
