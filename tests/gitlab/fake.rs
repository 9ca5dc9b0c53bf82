//! The fake GitLab itself, spoken to with raw HTTP: it must answer as the contract says, or the
//! syncer tests would prove nothing. Includes the webhook emitter against a loopback receiver.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use base64::Engine;
use cdtarget::api::tenant_repository::webhook_path;
use cdtarget::gitlab;
use reqwest::Method;
use serde_json::{Value, json};

use super::common::fake_gitlab::{
    BOT_TOKEN, FakeGitLab, Fault, Push, RateLimit, Scope, TokenState, fingerprint, synthetic_key,
};
use super::{HOOK_TOKEN, TestClock, client, input, pair, registration};

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn call(fake: &FakeGitLab, method: Method, path: &str, body: Option<Value>) -> Answer {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let mut request = http.request(method, format!("{}/api/v4{path}", fake.url())).header("PRIVATE-TOKEN", BOT_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Answer { status, headers, text: response.text().await.unwrap() }
}

#[tokio::test]
async fn projects_resolve_by_id_and_encoded_path_only() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("group/sub/app");
    assert_eq!(call(&fake, Method::GET, "/projects/group%2Fsub%2Fapp", None).await.json()["id"], id);
    assert_eq!(
        call(&fake, Method::GET, &format!("/projects/{id}"), None).await.json()["path_with_namespace"],
        "group/sub/app"
    );
    let raw = call(&fake, Method::GET, "/projects/group/sub/app", None).await;
    assert_eq!((raw.status, raw.json()), (404, json!({"error": "404 Not Found"})));
    let missing = call(&fake, Method::GET, "/projects/group%2Fnone", None).await;
    assert_eq!((missing.status, missing.json()), (404, json!({"message": "404 Project Not Found"})));
    let v3 = reqwest::get(format!("{}/api/v3/projects", fake.url())).await.unwrap();
    assert_eq!(v3.status(), 410);
}

#[tokio::test]
async fn moved_projects_redirect_gets_and_refuse_writes() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("old/app");
    fake.rename_project(id, "new/app");
    let get = call(&fake, Method::GET, "/projects/old%2Fapp", None).await;
    assert_eq!(get.status, 301);
    assert_eq!(get.header("location"), Some(format!("{}/api/v4/projects/{id}", fake.url()).as_str()));
    let post = call(&fake, Method::POST, "/projects/old%2Fapp/hooks", Some(json!({"url": "https://x.example"}))).await;
    assert_eq!(
        (post.status, post.json()),
        (405, json!({"message": "Non GET methods are not allowed for moved projects"}))
    );
}

#[tokio::test]
async fn auth_failures_have_the_contract_bodies() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    fake.add_token("glpat-revoked", 1, Scope::Api, TokenState::Revoked);
    let http = reqwest::Client::new();
    let url = format!("{}/api/v4/projects/{id}/hooks", fake.url());
    let none = http.get(&url).send().await.unwrap();
    assert_eq!(
        (none.status().as_u16(), none.json::<Value>().await.unwrap()),
        (401, json!({"message": "401 Unauthorized"}))
    );
    let revoked = http.get(&url).bearer_auth("glpat-revoked").send().await.unwrap();
    assert!(revoked.headers().contains_key("www-authenticate"));
    assert_eq!(revoked.json::<Value>().await.unwrap()["error"], "invalid_token");
    let bearer = http.get(&url).bearer_auth(BOT_TOKEN).send().await.unwrap();
    assert_eq!(bearer.status(), 200, "Authorization: Bearer works like PRIVATE-TOKEN");
}

#[tokio::test]
async fn adding_a_deploy_key_has_the_three_outcomes() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    let other = fake.add_project("g/other");
    let hidden = fake.add_project_with_role("x/hidden", None);
    let key = synthetic_key("one");
    let path = format!("/projects/{id}/deploy_keys");

    // 1. Already linked with exactly this string: the existing link, title and can_push kept.
    let linked = fake.seed_deploy_key(id, "original", &key, true);
    let again =
        call(&fake, Method::POST, &path, Some(json!({"title": "new", "key": format!("  {key}\n"), "can_push": false})))
            .await;
    assert_eq!(again.status, 201);
    assert_eq!(
        (again.json()["id"].as_i64(), again.json()["title"].clone(), again.json()["can_push"].clone()),
        (Some(linked), json!("original"), json!(true))
    );

    // 2. On another project the bot maintains: linked here with the can_push asked for.
    let shared = synthetic_key("two");
    let shared_id = fake.seed_deploy_key(other, "on other", &shared, true);
    let reused = call(&fake, Method::POST, &path, Some(json!({"title": "t", "key": shared, "can_push": false}))).await;
    assert_eq!(
        (reused.status, reused.json()["id"].as_i64(), reused.json()["can_push"].clone()),
        (201, Some(shared_id), json!(false))
    );

    // 3. Taken where the bot cannot see it, or the same material with another comment.
    let theirs = synthetic_key("three");
    fake.seed_deploy_key(hidden, "theirs", &theirs, false);
    let taken = call(&fake, Method::POST, &path, Some(json!({"title": "t", "key": theirs}))).await;
    assert_eq!(
        (taken.status, taken.json()),
        (400, json!({"message": {"deploy_key.fingerprint_sha256": ["has already been taken"]}}))
    );
    let recommented = format!("{} other-comment", shared.rsplit_once(' ').unwrap().0);
    let third = call(
        &fake,
        Method::POST,
        &format!("/projects/{other}/deploy_keys"),
        Some(json!({"title": "t", "key": recommented})),
    )
    .await;
    assert_eq!(third.status, 400, "another comment misses the exact-string cases 1 and 2");
    let fresh = synthetic_key("four");
    let created = call(&fake, Method::POST, &path, Some(json!({"title": "t", "key": fresh}))).await;
    assert_eq!((created.status, created.json()["can_push"].clone()), (201, json!(false)), "can_push defaults to false");
    assert_eq!(created.json()["fingerprint_sha256"], fingerprint(&fresh).unwrap());

    let missing = call(&fake, Method::POST, &path, Some(json!({"title": "t"}))).await;
    assert_eq!((missing.status, missing.json()), (400, json!({"error": "key is missing"})));
    let gone = call(&fake, Method::DELETE, &format!("{path}/999999"), None).await;
    assert_eq!((gone.status, gone.json()), (404, json!({"message": "404 Deploy key Not Found"})));
}

#[tokio::test]
async fn enabling_a_key_links_it_read_only_without_can_push_in_the_answer() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    let other = fake.add_project("g/other");
    let key_id = fake.seed_deploy_key(other, "k", &synthetic_key("k"), true);
    let enabled = call(&fake, Method::POST, &format!("/projects/{id}/deploy_keys/{key_id}/enable"), None).await;
    assert_eq!(enabled.status, 201);
    assert!(enabled.json().get("can_push").is_none());
    assert!(!fake.deploy_keys(id)[0].can_push);
}

#[tokio::test]
async fn the_fake_fingerprint_is_the_one_ssh_key_computes() {
    let pair = pair();
    assert_eq!(fingerprint(&pair.public_openssh).as_deref(), Some(pair.fingerprint.as_str()));
}

#[tokio::test]
async fn hooks_default_to_push_events_and_a_url_edit_without_token_wipes_it() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    let path = format!("/projects/{id}/hooks");
    let created =
        call(&fake, Method::POST, &path, Some(json!({"url": "https://r.example/a", "token": "secret"}))).await;
    assert_eq!(created.status, 201);
    let hook = created.json();
    assert_eq!((hook["push_events"].clone(), hook["tag_push_events"].clone()), (json!(true), json!(false)));
    assert_eq!((hook["enable_ssl_verification"].clone(), hook["token_present"].clone()), (json!(true), json!(true)));
    assert!(hook.get("token").is_none(), "never returned");
    let hook_path = format!("{path}/{}", hook["id"]);

    let same_url = call(&fake, Method::PUT, &hook_path, Some(json!({"url": "https://r.example/a"}))).await;
    assert_eq!(same_url.json()["token_present"], true, "the same URL keeps the token");
    let moved = call(&fake, Method::PUT, &hook_path, Some(json!({"url": "https://r.example/b"}))).await;
    assert_eq!(moved.json()["token_present"], false);
    let both =
        call(&fake, Method::PUT, &hook_path, Some(json!({"url": "https://r.example/c", "token": "secret"}))).await;
    assert_eq!(both.json()["token_present"], true);

    let empty = call(&fake, Method::PUT, &hook_path, Some(json!({}))).await;
    assert_eq!((empty.status, empty.json()), (400, json!({"error": "No parameters provided"})));
    let no_url = call(&fake, Method::POST, &path, Some(json!({"token": "x"}))).await;
    assert_eq!((no_url.status, no_url.json()), (400, json!({"error": "url is missing"})));
    fake.set_allow_local_requests(false);
    let local = call(&fake, Method::POST, &path, Some(json!({"url": "http://127.0.0.1:8080/hook"}))).await;
    assert_eq!((local.status, local.json()), (422, json!({"error": "Invalid url given"})));
    let deleted = call(&fake, Method::DELETE, &hook_path, None).await;
    assert_eq!((deleted.status, deleted.text.as_str()), (204, ""));
    let again = call(&fake, Method::DELETE, &hook_path, None).await;
    assert_eq!((again.status, again.json()), (404, json!({"message": "404 Not found"})));
}

#[tokio::test]
async fn form_bodies_and_query_parameters_are_accepted() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    let http = reqwest::Client::new();
    let url = format!("{}/api/v4/projects/{id}/hooks?tag_push_events=true", fake.url());
    let created = http
        .post(&url)
        .header("PRIVATE-TOKEN", BOT_TOKEN)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("url=https%3A%2F%2Fr.example%2Fa&push_events=false")
        .send()
        .await
        .unwrap();
    let hook: Value = created.json().await.unwrap();
    assert_eq!(
        (hook["url"].clone(), hook["push_events"].clone(), hook["tag_push_events"].clone()),
        (json!("https://r.example/a"), json!(false), json!(true))
    );
}

#[tokio::test]
async fn listings_carry_every_pagination_header() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    fake.seed_foreign_keys(id, 150);
    let first = call(&fake, Method::GET, &format!("/projects/{id}/deploy_keys?per_page=100&page=1"), None).await;
    assert_eq!(first.json().as_array().unwrap().len(), 100);
    for (header, value) in [
        ("x-next-page", "2"),
        ("x-page", "1"),
        ("x-per-page", "100"),
        ("x-prev-page", ""),
        ("x-total", "150"),
        ("x-total-pages", "2"),
    ] {
        assert_eq!(first.header(header), Some(value), "{header}");
    }
    assert!(first.header("link").unwrap().contains("page=2&per_page=100>; rel=\"next\""));
    let last = call(&fake, Method::GET, &format!("/projects/{id}/deploy_keys?per_page=500&page=2"), None).await;
    assert_eq!(
        (last.json().as_array().unwrap().len(), last.header("x-next-page"), last.header("x-per-page")),
        (50, Some(""), Some("100"))
    );
    assert!(!last.header("link").unwrap().contains("rel=\"next\""));
    let default = call(&fake, Method::GET, &format!("/projects/{id}/deploy_keys"), None).await;
    assert_eq!(default.json().as_array().unwrap().len(), 20, "per_page defaults to 20");
}

#[tokio::test]
async fn both_kinds_of_429_look_like_gitlab_s() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    fake.set_rate_limit(Some(RateLimit { requests: 2, period_secs: 3600 }));
    let ok = call(&fake, Method::GET, &format!("/projects/{id}/hooks"), None).await;
    assert_eq!(ok.header("ratelimit-remaining"), Some("1"), "RateLimit-* on every answer");
    assert_eq!(ok.header("ratelimit-limit"), Some("1"), "normalised to 60 s: ceil(2 * 60 / 3600)");
    call(&fake, Method::GET, &format!("/projects/{id}/hooks"), None).await;
    let throttled = call(&fake, Method::GET, &format!("/projects/{id}/hooks"), None).await;
    assert_eq!((throttled.status, throttled.text.as_str()), (429, "Retry later\n"));
    assert_eq!(throttled.header("content-type"), Some("text/plain"));
    let retry_after: u64 = throttled.header("retry-after").unwrap().parse().unwrap();
    let reset: u64 = throttled.header("ratelimit-reset").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry_after));
    assert!(reset > 1_700_000_000, "RateLimit-Reset is epoch seconds");
    assert!(throttled.header("ratelimit-resettime").unwrap().ends_with(" GMT"));
    assert_eq!(throttled.header("ratelimit-name"), Some("throttle_authenticated_api"));

    fake.set_rate_limit(None);
    fake.inject(Some("GET"), Some("/projects/:id"), Fault::AppRateLimit, 1);
    let app = call(&fake, Method::GET, &format!("/projects/{id}"), None).await;
    assert_eq!(app.status, 429);
    assert_eq!(app.header("content-type"), Some("application/json"));
    assert_eq!(
        app.json(),
        json!({"message": {"error": "This endpoint has been requested too many times. Try again later."}})
    );
    assert!(app.header("retry-after").is_none() && app.header("ratelimit-reset").is_none());

    fake.set_project_lookup_limit(Some(1));
    assert_eq!(call(&fake, Method::GET, &format!("/projects/{id}"), None).await.status, 200);
    assert_eq!(call(&fake, Method::GET, &format!("/projects/{id}"), None).await.status, 429);
}

// === the webhook emitter ===

#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Seen>>>);

/// Path, headers and body of one request.
type Seen = (String, Vec<(String, String)>, String);

/// A receiver on 127.0.0.1:0 that records every request and answers `status`.
async fn receiver(status: StatusCode) -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .fallback(|State((received, status)): State<(Received, StatusCode)>, request: Request| async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
            let headers = parts
                .headers
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
                .collect();
            received.0.lock().unwrap().push((
                parts.uri.path().to_owned(),
                headers,
                String::from_utf8_lossy(&body).into_owned(),
            ));
            status
        })
        .with_state((received.clone(), status));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_push_reaches_the_registration_s_receiver_path_with_its_token() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    let (url, received) = receiver(StatusCode::OK).await;
    let repo = registration("app", "team-a/app");
    gitlab::sync(&client(&fake, &TestClock::default()), &input(&repo, &pair(), &url)).await.unwrap();

    let sha = "b".repeat(40);
    let deliveries = fake.emit_push(id, &Push::branch("main", &sha)).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].status, Some(200));
    let (path, headers, body) = received.0.lock().unwrap()[0].clone();
    assert_eq!(path, webhook_path(HOOK_TOKEN, "app", "platform"));
    assert_eq!(header(&headers, "x-gitlab-token"), Some(HOOK_TOKEN));
    assert_eq!(header(&headers, "x-gitlab-event"), Some("Push Hook"));
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert!(header(&headers, "user-agent").unwrap().starts_with("GitLab/"));
    assert_eq!(header(&headers, "x-gitlab-instance"), Some(fake.url().as_str()));
    let payload: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((payload["object_kind"].clone(), payload["ref"].clone()), (json!("push"), json!("refs/heads/main")));
    assert_eq!((payload["after"].clone(), payload["checkout_sha"].clone()), (json!(sha), json!(sha)));
    assert_eq!(payload["project"]["path_with_namespace"], "team-a/app");
    assert_eq!(payload["project_id"], id);
    assert!(payload["project"]["git_ssh_url"].as_str().unwrap().ends_with(":team-a/app.git"));

    // A resend keeps the Idempotency-Key; the UUID headers are new per attempt.
    let resent = fake.resend(id, &Push::branch("main", &sha), &deliveries[0]).await;
    assert_eq!(resent[0].idempotency_key, deliveries[0].idempotency_key);
    assert_ne!(resent[0].webhook_uuid, deliveries[0].webhook_uuid);
    let second = fake.emit_push(id, &Push::branch("main", &sha)).await;
    assert_ne!(second[0].idempotency_key, deliveries[0].idempotency_key, "a new event, a new key");

    // The branch filter keeps other branches away; tags need tag push events.
    assert!(fake.emit_push(id, &Push::branch("feature", &sha)).await.is_empty());
    let tag = Push { git_ref: "refs/tags/v1".into(), before: "0".repeat(40), after: sha.clone() };
    assert!(fake.emit_push(id, &tag).await.is_empty());
    let deleted = Push { git_ref: "refs/heads/main".into(), before: sha.clone(), after: "0".repeat(40) };
    fake.emit_push(id, &deleted).await;
    let last: Value = serde_json::from_str(&received.0.lock().unwrap().last().unwrap().2).unwrap();
    assert_eq!(last["checkout_sha"], Value::Null, "null when the ref is deleted");
}

#[tokio::test]
async fn signed_deliveries_follow_standard_webhooks() {
    use hmac::{KeyInit, Mac};
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    let (url, received) = receiver(StatusCode::OK).await;
    let key = [7u8; 32];
    let signing = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key));
    let created = call(
        &fake,
        Method::POST,
        &format!("/projects/{id}/hooks"),
        Some(json!({"url": format!("{url}/x"), "signing_token": signing})),
    )
    .await;
    assert_eq!(created.json()["signing_token_present"], true);
    let deliveries = fake.emit_push(id, &Push::branch("main", &"c".repeat(40))).await;
    let (_, headers, body) = received.0.lock().unwrap()[0].clone();
    let id_header = header(&headers, "webhook-id").unwrap();
    assert_eq!(id_header, deliveries[0].idempotency_key);
    let timestamp = header(&headers, "webhook-timestamp").unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id_header}.{timestamp}.{body}").as_bytes());
    let expected = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()));
    assert_eq!(header(&headers, "webhook-signature"), Some(expected.as_str()));
    assert!(header(&headers, "x-gitlab-token").is_none(), "no token set on this hook");
}

#[tokio::test]
async fn deliveries_that_gitlab_never_sends() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("g/app");
    let (url, received) = receiver(StatusCode::INTERNAL_SERVER_ERROR).await;
    fake.seed_hook(id, &format!("{url}/x"), "h", Some("t"));
    let pushes: Vec<Push> = (0..4).map(|n| Push::branch(&format!("b{n}"), &"d".repeat(40))).collect();
    assert!(fake.emit_multi_ref_push(id, &pushes).await.is_empty(), "more than 3 refs in one push: no hook");
    fake.set_drop_deliveries(true);
    assert!(fake.emit_push(id, &pushes[0]).await.is_empty(), "rate-limited deliveries are dropped");
    fake.set_drop_deliveries(false);
    fake.set_auto_disable(true);
    for attempt in 1..=4 {
        let deliveries = fake.emit_push(id, &pushes[0]).await;
        assert_eq!(deliveries[0].status, Some(500), "attempt {attempt}, no retry");
    }
    assert_eq!(received.0.lock().unwrap().len(), 4);
    assert_eq!(fake.hooks(id)[0].alert_status, "temporarily_disabled", "from the 4th failure");
    assert!(fake.emit_push(id, &pushes[0]).await.is_empty());
}
