//! The cases, each a function of the sender flavour; `main.rs` instantiates them per type.

use cdtarget::api::tenant_repository::GitRef;
use cdtarget::webhook::{Limits, Rate};

use crate::support::{Delivery, Kind, SHA, TOKEN, TestReceiver, fired, test_limits};

const MAIN: &str = "refs/heads/main";

fn tag(name: &str) -> Option<GitRef> {
    Some(GitRef { tag: Some(name.into()), ..GitRef::default() })
}

/// Starts a receiver with one registration `repo` tracking `main`; returns both and the path.
async fn one(kind: Kind) -> (TestReceiver, String) {
    let receiver = TestReceiver::start().await;
    let path = receiver.register(kind, "repo", None);
    (receiver, path)
}

// === common to every type ===

pub async fn valid(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let answer = receiver.send(&path, &Delivery::push(kind, MAIN).key("delivery-1")).await;
    assert_eq!((answer.status, answer.body.as_str()), (202, "accepted\n"));
    assert_eq!(receiver.fires(), [fired("repo")]);
    receiver.stop().await;
}

pub async fn replay(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let delivery = Delivery::push(kind, MAIN).key("delivery-1");
    assert_eq!(receiver.send(&path, &delivery).await.status, 202);
    // A retry or a manual "Resend": same delivery id.
    let again = receiver.send(&path, &delivery).await;
    assert_eq!((again.status, again.body.as_str()), (200, "duplicate: this delivery was already accepted\n"));
    assert_eq!(receiver.fires().len(), 1, "one trigger for two copies");
    // Another delivery id is another push.
    assert_eq!(receiver.send(&path, &Delivery::push(kind, MAIN).key("delivery-2")).await.status, 202);
    assert_eq!(receiver.fires().len(), 2);
    receiver.stop().await;
}

pub async fn other_ref(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let answer = receiver.send(&path, &Delivery::push(kind, "refs/heads/feature")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, "ignored: `refs/heads/feature` is not the ref this registration tracks\n");
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn tag_push(kind: Kind) {
    let receiver = TestReceiver::start().await;
    let tagged = receiver.register(kind, "tagged", tag("v1.0.0"));
    let branch = receiver.register(kind, "branch", None);
    let push = Delivery::push(kind, "refs/tags/v1.0.0");
    assert_eq!(receiver.send(&tagged, &push).await.status, 202);
    assert_eq!(receiver.fires(), [fired("tagged")]);
    let ignored = receiver.send(&branch, &push).await;
    assert_eq!((ignored.status, ignored.body.starts_with("ignored:")), (200, true), "{ignored:?}");
    let other_tag = receiver.send(&tagged, &Delivery::push(kind, "refs/tags/v1.0.1")).await;
    assert_eq!(other_tag.status, 200, "{other_tag:?}");
    assert_eq!(receiver.fires(), [fired("tagged")]);
    receiver.stop().await;
}

pub async fn oversize(kind: Kind) {
    let (receiver, path) = one(kind).await;
    // A declared length past 3 MiB is refused before a byte of the body is read: the request
    // head alone is sent, and the answer comes.
    let limit = Limits::default().max_body_bytes;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: receiver\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        limit + 1
    );
    let response = crate::support::exchange(receiver.address, head.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 413 "), "{response}");
    assert!(response.ends_with("\r\n\r\nbody larger than 3145728 bytes\n"), "{response}");
    assert!(receiver.fires().is_empty());
    // Exactly the limit is read.
    let exact = vec![b' '; Limits::default().max_body_bytes];
    let answer = receiver.send(&path, &Delivery::raw(kind, exact).push_event()).await;
    assert_ne!(answer.status, 413, "{}", answer.body);
    receiver.stop().await;
}

pub async fn wrong_method(kind: Kind) {
    let (receiver, path) = one(kind).await;
    for method in [reqwest::Method::GET, reqwest::Method::PUT, reqwest::Method::DELETE] {
        let answer = receiver.request(method.clone(), &path).await;
        assert_eq!(answer.status, 405, "{method}");
        assert_eq!(answer.headers.get("allow").unwrap(), "POST");
    }
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn unknown_path(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let delivery = Delivery::push(kind, MAIN);
    let unknown = format!("/hook/{}", "ab".repeat(32));
    let mut bodies = Vec::new();
    for candidate in [unknown.as_str(), "/hook/not-hex", "/hook/", "/", "/hooks/x", &format!("{path}/extra")] {
        let answer = receiver.send(candidate, &delivery).await;
        assert_eq!(answer.status, 404, "{candidate}");
        bodies.push(answer.body);
    }
    assert!(bodies.iter().all(|b| b == "not found\n"), "one answer for everything not served: {bodies:?}");
    // A registration that is removed is not found the same way.
    receiver.index.remove(crate::support::NAMESPACE, "repo");
    assert_eq!(receiver.send(&path, &delivery).await.body, "not found\n");
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn malformed_json(kind: Kind) {
    let (receiver, path) = one(kind).await;
    for body in [&b"{\"ref\": \"refs/heads/main\""[..], b"ref=refs/heads/main", b"[\"refs/heads/main\"]"] {
        let answer = receiver.send(&path, &Delivery::raw(kind, body).push_event()).await;
        assert_eq!(answer.status, 400, "{}", String::from_utf8_lossy(body));
        assert!(answer.body.starts_with("the body is not a push payload: "), "{}", answer.body);
    }
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn rate_limit(kind: Kind) {
    // A burst of 3, refilled once an hour: the 4th verified delivery in a row is refused.
    let limits = Limits { registration_rate: Some(Rate::new(1.0 / 3600.0, 3)), ..test_limits() };
    let receiver = TestReceiver::start_with(limits).await;
    let path = receiver.register(kind, "repo", None);
    let other = receiver.register(kind, "other", None);
    for i in 0..3 {
        let answer = receiver.send(&path, &Delivery::push(kind, MAIN).key(&format!("d{i}"))).await;
        assert_eq!(answer.status, 202, "{answer:?}");
    }
    let limited = receiver.send(&path, &Delivery::push(kind, MAIN).key("d3")).await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.body, "rate limit reached; retry later\n");
    let retry_after: u64 = limited.headers.get("retry-after").unwrap().to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(receiver.fires().len(), 3);
    // The limit is per registration.
    assert_eq!(receiver.send(&other, &Delivery::push(kind, MAIN).key("d3")).await.status, 202);
    receiver.stop().await;
}

pub async fn wrong_token(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let delivery = match kind {
        Kind::GitlabSigned => Delivery::push(kind, MAIN).signing_key(b"another signing key, 32 bytes.."),
        _ => Delivery::push(kind, MAIN).token("not-the-token"),
    };
    if kind == Kind::Generic {
        // For `generic` the token is the path: another token is another path.
        let other = cdtarget::api::tenant_repository::webhook_path("not-the-token", "repo", crate::support::NAMESPACE);
        let answer = receiver.send(&other, &delivery).await;
        assert_eq!((answer.status, answer.body.as_str()), (404, "not found\n"));
    } else {
        let answer = receiver.send(&path, &delivery).await;
        let header = match kind {
            Kind::Gitlab => "x-gitlab-token does not match",
            Kind::GitlabSigned => "webhook-signature does not match the body",
            Kind::Github => "x-hub-signature-256 does not match the body",
            _ => "x-signature does not match the body",
        };
        assert_eq!((answer.status, answer.body), (401, format!("unauthorized: {header}\n")));
    }
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn answers_never_echo_secrets(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let digest = path.trim_start_matches("/hook/").to_owned();
    let deliveries = [
        Delivery::push(kind, MAIN),
        Delivery::push(kind, MAIN).token("wrong"),
        Delivery::push(kind, "refs/heads/x"),
        Delivery::raw(kind, "{").push_event(),
        Delivery::push(kind, MAIN).without("x-gitlab-event"),
    ];
    for delivery in &deliveries {
        let answer = receiver.send(&path, delivery).await;
        let text = format!("{:?} {}", answer.headers, answer.body);
        assert!(!text.contains(TOKEN) && !text.contains(&digest), "{text}");
        assert!(answer.body.len() < 512, "answers are small: {}", answer.body);
    }
    receiver.stop().await;
}

// === per type ===

pub async fn missing_proof_header_is_401(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let header = kind.proof_header().expect("a type with a proof header");
    let answer = receiver.send(&path, &Delivery::push(kind, MAIN).without(header)).await;
    assert_eq!((answer.status, answer.body), (401, format!("unauthorized: missing header {header}\n")));
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn tampered_body_fails_the_signature_with_401(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let answer = receiver.send(&path, &Delivery::push(kind, MAIN).tampered()).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert!(answer.body.ends_with("does not match the body\n"), "{}", answer.body);
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn no_header_at_all_is_enough(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let answer = receiver.send(&path, &Delivery::raw(kind, Vec::new()).without("content-type")).await;
    assert_eq!(answer.status, 202, "the path alone is the proof: {}", answer.body);
    assert_eq!(receiver.fires(), [fired("repo")]);
    receiver.stop().await;
}

pub async fn stale_timestamp_past_or_future_is_401(kind: Kind) {
    let (receiver, path) = one(kind).await;
    for offset in [-301, 301, -86_400] {
        let answer = receiver.send(&path, &Delivery::push(kind, MAIN).stamped(offset)).await;
        assert_eq!(answer.status, 401, "{offset}");
        assert_eq!(answer.body, "unauthorized: webhook-timestamp is more than 300 s away from the receiver's clock\n");
    }
    assert!(receiver.fires().is_empty());
    // Within the tolerance either way.
    assert_eq!(receiver.send(&path, &Delivery::push(kind, MAIN).stamped(-240).key("a")).await.status, 202);
    assert_eq!(receiver.send(&path, &Delivery::push(kind, MAIN).stamped(240).key("b")).await.status, 202);
    receiver.stop().await;
}

pub async fn replay_of_a_signed_id_under_a_new_idempotency_key_is_a_duplicate(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let first = Delivery::push(kind, MAIN).key("key-1").webhook_id("msg_1");
    assert_eq!(receiver.send(&path, &first).await.status, 202);
    // A captured request replayed with a new (unsigned) Idempotency-Key: the signed id decides.
    let replayed = Delivery::push(kind, MAIN).key("key-2").webhook_id("msg_1");
    assert_eq!(receiver.send(&path, &replayed).await.status, 200);
    assert_eq!(receiver.fires().len(), 1);
    receiver.stop().await;
}

pub async fn signature_alone_is_not_enough_the_token_is_required_too(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let answer = receiver.send(&path, &Delivery::push(kind, MAIN).without("x-gitlab-token")).await;
    assert_eq!((answer.status, answer.body.as_str()), (401, "unauthorized: missing header x-gitlab-token\n"));
    let answer = receiver.send(&path, &Delivery::push(kind, MAIN).without("webhook-timestamp")).await;
    assert_eq!((answer.status, answer.body.as_str()), (401, "unauthorized: missing header webhook-timestamp\n"));
    receiver.stop().await;
}

pub async fn deleted_branch_triggers_a_sync(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let answer = receiver.send(&path, &Delivery::gitlab_branch_deleted(kind)).await;
    assert_eq!(answer.status, 202, "the registration reports the missing ref at once: {}", answer.body);
    assert_eq!(receiver.fires(), [fired("repo")]);
    receiver.stop().await;
}

pub async fn other_events_are_ignored_and_a_missing_event_header_is_400(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let answer = receiver.send(&path, &Delivery::push(kind, MAIN).event("Merge Request Hook")).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, "ignored: event `Merge Request Hook` does not trigger a sync\n")
    );
    let answer = receiver.send(&path, &Delivery::push(kind, MAIN).without("x-gitlab-event")).await;
    assert_eq!((answer.status, answer.body.as_str()), (400, "missing header x-gitlab-event\n"));
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn configured_events_replace_the_defaults(kind: Kind) {
    let receiver = TestReceiver::start().await;
    let path = receiver.register_with(kind, "tags-only", None, &["Tag Push Hook"]);
    let branch = receiver.send(&path, &Delivery::push(kind, MAIN)).await;
    assert_eq!(branch.status, 200, "Push Hook is not configured: {}", branch.body);
    let tag = Delivery::push(kind, "refs/tags/v1").event("Tag Push Hook");
    let ignored_ref = receiver.send(&path, &tag).await;
    assert_eq!(ignored_ref.status, 200, "the event passes, the ref does not: {}", ignored_ref.body);
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn ping_event_is_acknowledged_and_ignored(kind: Kind) {
    let (receiver, path) = one(kind).await;
    let ping =
        Delivery::raw(kind, serde_json::to_vec(&serde_json::json!({"zen": "Keep it simple.", "hook_id": 1})).unwrap())
            .event("ping");
    let answer = receiver.send(&path, &ping).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ignored: event `ping` does not trigger a sync\n"));
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

pub async fn empty_body_means_sync_now_and_pinned_commits_are_matched(kind: Kind) {
    let (receiver, path) = one(kind).await;
    assert_eq!(receiver.send(&path, &Delivery::raw(kind, Vec::new())).await.status, 202);
    let deleted = serde_json::json!({"ref": MAIN, "after": "0".repeat(40), "deleted": true});
    assert_eq!(receiver.send(&path, &Delivery::raw(kind, serde_json::to_vec(&deleted).unwrap())).await.status, 202);
    let pinned = receiver.register(kind, "pinned", Some(GitRef { commit: Some(SHA.into()), ..GitRef::default() }));
    let push = Delivery::push(kind, MAIN);
    assert_eq!(receiver.send(&pinned, &push).await.status, 202, "the pinned commit was pushed");
    let other = serde_json::json!({"ref": MAIN, "after": "1".repeat(40)});
    let answer = receiver.send(&pinned, &Delivery::raw(kind, serde_json::to_vec(&other).unwrap())).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(receiver.fires().len(), 3);
    receiver.stop().await;
}
