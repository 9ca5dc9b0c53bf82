//! The fake GitLab's commit statuses, pipelines and commit comments, spoken to with raw HTTP and
//! checked against the contract's tables (§14.2–14.5, 14.8): if the fake were lenient, the
//! client and controller tests against it would prove nothing.

use reqwest::Method;
use serde_json::{Value, json};

use super::common::fake_gitlab::{BOT_TOKEN, DEVELOPER, FakeGitLab, GUEST, REPORTER, Scope, TokenState};

/// A second user's token (a person posting statuses by hand).
const OTHER_TOKEN: &str = "glpat-fake-other-user-token";
const OTHER_USER: u64 = 2;

struct Answer {
    status: u16,
    json: Value,
}

async fn call_as(fake: &FakeGitLab, token: &str, method: Method, path: &str, body: Option<Value>) -> Answer {
    let http = reqwest::Client::new();
    let mut request = http.request(method, format!("{}/api/v4{path}", fake.url())).header("PRIVATE-TOKEN", token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    Answer { status, json: serde_json::from_str(&text).unwrap_or(Value::Null) }
}

async fn call(fake: &FakeGitLab, method: Method, path: &str, body: Option<Value>) -> Answer {
    call_as(fake, BOT_TOKEN, method, path, body).await
}

async fn post_status(fake: &FakeGitLab, project: i64, sha: &str, body: Value) -> Answer {
    call(fake, Method::POST, &format!("/projects/{project}/statuses/{sha}"), Some(body)).await
}

/// A project with one commit on `main` (adding lines 1–3 of `deploy/a.yaml`).
fn project_with_commit(fake: &FakeGitLab) -> (i64, String) {
    let project = fake.add_project("team-a/app");
    let sha = fake.commit(project, "main", &[("deploy/a.yaml", &[1, 2, 3], &[])]);
    (project, sha)
}

fn refusal(event: &str, from: &str) -> Value {
    json!({"message": format!("Cannot transition status via :{event} from :{from} (Reason(s): Status cannot transition via \"{event}\")")})
}

#[tokio::test]
async fn the_transition_table_is_gitlab_s_with_its_exact_refusals() {
    // (open record, wanted) -> status; every row of contract §14.3.
    type Row = (Option<&'static str>, &'static str, u16, Option<(&'static str, &'static str)>);
    let table: &[Row] = &[
        (None, "pending", 201, None),
        (None, "skipped", 201, None),
        (Some("pending"), "pending", 400, Some(("enqueue", "pending"))),
        (Some("pending"), "running", 201, None),
        (Some("pending"), "success", 201, None),
        (Some("pending"), "skipped", 201, None),
        (Some("running"), "pending", 400, Some(("enqueue", "running"))),
        (Some("running"), "running", 400, Some(("run", "running"))),
        (Some("running"), "failed", 201, None),
        (Some("running"), "canceled", 201, None),
        (Some("running"), "skipped", 400, Some(("skip", "running"))),
    ];
    for (open, wanted, code, refused) in table {
        let fake = FakeGitLab::start();
        let (project, sha) = project_with_commit(&fake);
        let base = json!({"ref": "main", "name": "cd"});
        if let Some(open) = open {
            let answer = post_status(&fake, project, &sha, json!({"state": open, "ref": "main", "name": "cd"})).await;
            assert_eq!(answer.status, 201);
        }
        let mut body = base.clone();
        body["state"] = json!(wanted);
        body["description"] = json!("sent with a refused transition");
        let answer = post_status(&fake, project, &sha, body).await;
        assert_eq!(answer.status, *code, "{open:?} -> {wanted}: {}", answer.json);
        if let Some((event, from)) = refused {
            assert_eq!(answer.json, refusal(event, from), "{open:?} -> {wanted}");
            let records = fake.statuses(project);
            assert_eq!(records.len(), 1, "the record is untouched");
            assert_eq!((records[0].status.as_str(), &records[0].description), (*from, &None), "description discarded");
        } else {
            assert_eq!(answer.json["status"], json!(wanted));
        }
    }
}

#[tokio::test]
async fn finished_records_are_never_updated_a_new_record_retries_them() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    let first = post_status(&fake, project, &sha, json!({"state": "success", "ref": "main", "name": "cd"})).await;
    let again = post_status(&fake, project, &sha, json!({"state": "success", "ref": "main", "name": "cd"})).await;
    assert_eq!((first.status, again.status), (201, 201));
    assert_ne!(first.json["id"], again.json["id"], "the same final state again is a new record");
    assert_eq!(first.json["pipeline_id"], again.json["pipeline_id"]);
    let records = fake.statuses(project);
    assert_eq!(records.iter().map(|r| r.retried).collect::<Vec<_>>(), [true, false]);
    // success -> pending is allowed, as a new record.
    let reopened = post_status(&fake, project, &sha, json!({"state": "pending", "ref": "main", "name": "cd"})).await;
    assert_eq!((reopened.status, reopened.json["status"].clone()), (201, json!("pending")));
    let path = format!("/projects/{project}/repository/commits/{sha}/statuses");
    assert_eq!(call(&fake, Method::GET, &path, None).await.json.as_array().unwrap().len(), 1, "latest only");
    let all = call(&fake, Method::GET, &format!("{path}?all=true"), None).await;
    assert_eq!(all.json.as_array().unwrap().len(), 3, "retried ones with all=true");
}

#[tokio::test]
async fn the_external_pipeline_is_kept_before_validation_and_the_protected_branch_check() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    let bad =
        post_status(&fake, project, &sha, json!({"state": "pending", "ref": "main", "target_url": "git://x/y"})).await;
    assert_eq!(
        (bad.status, bad.json),
        (400, json!({"message": {"target_url": ["is blocked: Only allowed schemes are http, https"]}}))
    );
    assert_eq!(fake.pipelines(project).len(), 1, "the pipeline stays after the 400");
    assert!(fake.statuses(project).is_empty());

    fake.protect_branch(project, "main");
    fake.set_bot_role(project, DEVELOPER);
    let sha2 = fake.commit(project, "main", &[("deploy/a.yaml", &[4], &[])]);
    let forbidden = post_status(&fake, project, &sha2, json!({"state": "pending", "ref": "main", "name": "cd"})).await;
    assert_eq!((forbidden.status, forbidden.json), (403, json!({"message": "403 Forbidden"})));
    assert_eq!(fake.pipelines(project).len(), 2, "the pipeline stays after the 403");
    let branch = fake.commit(project, "feature", &[("deploy/b.yaml", &[1], &[])]);
    let answer =
        post_status(&fake, project, &branch, json!({"state": "pending", "ref": "feature", "name": "cd"})).await;
    assert_eq!(answer.status, 201, "a Developer posts on an unprotected branch");
    fake.set_bot_role(project, REPORTER);
    let reporter = post_status(&fake, project, &branch, json!({"state": "success", "ref": "feature"})).await;
    assert_eq!(reporter.status, 403, "Reporters post no statuses");
}

#[tokio::test]
async fn sha_resolves_from_branch_tag_or_short_sha_but_listings_match_the_raw_string() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    fake.tag(project, "v1", &sha);
    for spelling in ["main", "v1", &sha[..8]] {
        let answer =
            post_status(&fake, project, spelling, json!({"state": "success", "ref": "main", "name": spelling})).await;
        assert_eq!((answer.status, answer.json["sha"].clone()), (201, json!(sha)), "{spelling}");
    }
    let missing = post_status(&fake, project, &"f".repeat(40), json!({"state": "success"})).await;
    assert_eq!((missing.status, missing.json), (404, json!({"message": "404 Commit Not Found"})));
    let by_branch =
        call(&fake, Method::GET, &format!("/projects/{project}/repository/commits/main/statuses"), None).await;
    assert_eq!((by_branch.status, by_branch.json), (200, json!([])), "the branch name matches no record");
    let by_sha =
        call(&fake, Method::GET, &format!("/projects/{project}/repository/commits/{sha}/statuses?name=v1"), None).await;
    assert_eq!(by_sha.json.as_array().unwrap().len(), 1);
    let bad =
        call(&fake, Method::GET, &format!("/projects/{project}/repository/commits/{sha}/statuses?order_by=x"), None)
            .await;
    assert_eq!((bad.status, bad.json), (400, json!({"error": "order_by does not have a valid value"})));
    // A commit reachable only from a tag, and no ref sent: GitLab has no ref to choose.
    let orphan = fake.commit(project, "tmp", &[]);
    fake.tag(project, "only-tag", &orphan);
    fake.delete_branch(project, "tmp");
    let answer = post_status(&fake, project, &orphan, json!({"state": "success"})).await;
    assert_eq!((answer.status, answer.json), (404, json!({"message": "404 References for commit Not Found"})));
    let answer = post_status(&fake, project, &sha, json!({"state": "success", "name": "no-ref"})).await;
    assert_eq!((answer.status, answer.json["ref"].clone()), (201, json!("main")), "the first branch holding it");
}

#[tokio::test]
async fn a_newer_pipeline_captures_posts_unless_the_first_pipeline_is_named() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    let pending = post_status(&fake, project, &sha, json!({"state": "pending", "ref": "main", "name": "cd"})).await;
    let first = pending.json["pipeline_id"].as_i64().unwrap();
    let ci = fake.add_ci_pipeline(project, &sha, "main", &["build", "test"]);
    let captured = post_status(&fake, project, &sha, json!({"state": "success", "ref": "main", "name": "cd"})).await;
    assert_eq!(captured.json["pipeline_id"], ci, "without pipeline_id the newest pipeline takes it");
    let in_first = fake.statuses(project).into_iter().find(|r| r.pipeline_id == first).unwrap();
    assert_eq!(in_first.status, "pending", "the first record stays pending for ever");
    let pinned = post_status(
        &fake,
        project,
        &sha,
        json!({"state": "success", "ref": "main", "name": "cd", "pipeline_id": first}),
    )
    .await;
    assert_eq!((pinned.json["pipeline_id"].as_i64(), pinned.json["id"].clone()), (Some(first), json!(in_first.id)));
    let clash = post_status(&fake, project, &sha, json!({"state": "success", "ref": "main", "name": "build"})).await;
    assert_eq!((clash.status, clash.json), (400, json!({"message": {"name": ["has already been taken"]}})));
    let wrong =
        post_status(&fake, project, &sha, json!({"state": "success", "ref": "main", "pipeline_id": 999_999})).await;
    assert_eq!(
        (wrong.status, wrong.json),
        (404, json!({"message": "404 Pipeline for pipeline_id, sha and ref Not Found"}))
    );
}

#[tokio::test]
async fn the_user_is_part_of_the_key() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    fake.add_token(OTHER_TOKEN, OTHER_USER, Scope::Api, TokenState::Valid);
    fake.set_role(project, OTHER_USER, DEVELOPER);
    let body = json!({"state": "running", "ref": "main", "name": "cd"});
    assert_eq!(post_status(&fake, project, &sha, body.clone()).await.status, 201);
    let other =
        call_as(&fake, OTHER_TOKEN, Method::POST, &format!("/projects/{project}/statuses/{sha}"), Some(body)).await;
    assert_eq!(other.status, 201, "another user's post is a new record, not a refused transition");
    let records = fake.statuses(project);
    assert_eq!(records.len(), 2);
    assert_eq!((records[0].status.as_str(), records[0].retried), ("running", true), "running for ever, hidden");
}

#[tokio::test]
async fn parameters_and_fields_are_validated_as_gitlab_does() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    let cases = [
        (json!({"ref": "main"}), json!({"error": "state is missing"})),
        (json!({"state": "error"}), json!({"error": "state does not have a valid value"})),
        (json!({"state": "failure"}), json!({"error": "state does not have a valid value"})),
        (json!({"state": "success", "coverage": "lots"}), json!({"error": "coverage is invalid"})),
        (
            json!({"state": "success", "description": "é".repeat(256)}),
            json!({"message": {"description": ["is too long (maximum is 255 characters)"]}}),
        ),
        (json!({"state": "success", "name": ""}), json!({"message": {"name": ["can't be blank"]}})),
        (
            json!({"state": "success", "target_url": format!("https://x.example/{}", "a".repeat(250))}),
            json!({"message": {"target_url": ["is too long (maximum is 255 characters)"]}}),
        ),
    ];
    for (body, expected) in cases {
        let answer = post_status(&fake, project, &sha, body.clone()).await;
        assert_eq!((answer.status, answer.json), (400, expected), "{body}");
    }
    // Grape's checks come before the project lookup: even an unknown project says `state`.
    let early = call(&fake, Method::POST, "/projects/999999/statuses/abc", Some(json!({}))).await;
    assert_eq!((early.status, early.json), (400, json!({"error": "state is missing"})));
    let ok = post_status(&fake, project, &sha, json!({"state": "success", "description": "é".repeat(255)})).await;
    assert_eq!(ok.status, 201, "255 characters of two bytes each are fine");
    // Blank values never clear a field.
    let blank =
        post_status(&fake, project, &sha, json!({"state": "pending", "name": "x", "description": "kept"})).await;
    assert_eq!(blank.status, 201);
    let after = post_status(&fake, project, &sha, json!({"state": "running", "name": "x", "description": ""})).await;
    assert_eq!(after.json["description"], "kept");
}

#[tokio::test]
async fn commit_comments_stick_inline_only_on_the_commit_s_own_lines_and_have_no_id() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    let path = format!("/projects/{project}/repository/commits/{sha}/comments");
    let inline =
        call(&fake, Method::POST, &path, Some(json!({"note": "here", "path": "deploy/a.yaml", "line": 2}))).await;
    assert_eq!(
        (inline.status, inline.json["path"].clone(), inline.json["line"].clone()),
        (201, json!("deploy/a.yaml"), json!(2))
    );
    assert!(inline.json.get("id").is_none(), "commit notes have no id: {}", inline.json);
    let context =
        call(&fake, Method::POST, &path, Some(json!({"note": "there", "path": "deploy/a.yaml", "line": 9}))).await;
    assert_eq!(
        (context.status, context.json["path"].clone(), context.json["line"].clone()),
        (201, Value::Null, Value::Null)
    );
    let missing_line = call(&fake, Method::POST, &path, Some(json!({"note": "x", "path": "deploy/a.yaml"}))).await;
    assert_eq!((missing_line.status, missing_line.json), (400, json!({"error": "line is missing"})));
    let blank = call(&fake, Method::POST, &path, Some(json!({"note": "  "}))).await;
    assert_eq!(blank.json, json!({"message": "400 Bad request - Note {:note=>[\"can't be blank\"]}"}));
    let listed = call(&fake, Method::GET, &path, None).await;
    assert_eq!(
        listed.json.as_array().unwrap().iter().map(|c| c["note"].clone()).collect::<Vec<_>>(),
        [json!("here"), json!("there")]
    );

    // Quick actions run; a note of commands only stores nothing and answers 202.
    let commands = call(&fake, Method::POST, &path, Some(json!({"note": "/tag v9\n/assign @mallory"}))).await;
    assert_eq!(commands.status, 202);
    let fenced = call(&fake, Method::POST, &path, Some(json!({"note": "ok\n```\n/merge\n```"}))).await;
    assert_eq!(fenced.status, 201, "inside a code block a command is text");
    assert_eq!(fake.quick_actions(), ["/tag v9", "/assign @mallory"]);
    assert_eq!(fake.comments(project).len(), 3);

    fake.set_bot_role(project, GUEST);
    assert_eq!(call(&fake, Method::GET, &path, None).await.status, 403, "Guests cannot read code");
}

#[tokio::test]
async fn state_counts_writes_per_endpoint() {
    let fake = FakeGitLab::start();
    let (project, sha) = project_with_commit(&fake);
    post_status(&fake, project, &sha, json!({"state": "pending", "ref": "main"})).await;
    post_status(&fake, project, &sha, json!({"state": "pending", "ref": "main"})).await;
    call(&fake, Method::GET, &format!("/projects/{project}/repository/commits/{sha}/statuses"), None).await;
    let state: Value = reqwest::get(format!("{}/__state", fake.url())).await.unwrap().json().await.unwrap();
    assert_eq!(state["counts"]["statuses.create"], json!({"requests": 2, "writes": 1}), "{state}");
    assert_eq!(state["counts"]["statuses.list"]["requests"], 1);
    assert_eq!(state["projects"]["team-a/app"]["statuses"].as_array().unwrap().len(), 1);
}
