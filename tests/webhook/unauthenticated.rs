//! The receiver spends nothing on the unauthenticated. Each test plays an attacker over real
//! HTTP: one who knows no path, one who knows a path but not the secret, one who trickles bodies;
//! and shows that real deliveries, above all those of other registrations, still get through.
//!
//! "Before the body is read" is proven, not timed: the requests carry `Expect: 100-continue`, to
//! which hyper answers `100 Continue` only when the handler starts reading the body, and the
//! request timeout is set far beyond the tests' 30 s bound, so a server that waited for the body
//! would fail the test rather than answer late.

use std::time::Duration;

use cdtarget::webhook::{Limits, Rate};

use crate::support::{Delivery, Kind, Raw, TOKEN, TestReceiver, fired, head, test_limits};

const MAIN: &str = "refs/heads/main";
const MIB: usize = 1024 * 1024;

/// Once an hour: a bucket with this rate is refilled by nothing a test does.
fn hourly(burst: u32) -> Option<Rate> {
    Some(Rate::new(1.0 / 3600.0, burst))
}

/// Limits under which a body the server waits for is never cut while a test runs.
fn patient(limits: Limits) -> Limits {
    Limits { request_timeout: Duration::from_secs(600), ..limits }
}

/// A well-formed signature header of `kind` made with a key that is not the registration's.
fn forged(kind: Kind) -> (&'static str, String) {
    let header = kind.proof_header().expect("a signed kind");
    (header, format!("sha256={}", "ab".repeat(32)))
}

fn event(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Gitlab | Kind::GitlabSigned => ("X-Gitlab-Event", "Push Hook"),
        Kind::Github => ("X-GitHub-Event", "push"),
        Kind::Hmac | Kind::Generic => ("X-Event", "push"),
    }
}

/// Starts a body of `length` bytes on `path` with a forged signature and stops after the head;
/// returns once the server has started reading it (its `100 Continue`), i.e. holds its budget.
async fn hold_a_body(receiver: &TestReceiver, kind: Kind, path: &str, length: usize) -> Raw {
    let (proof, signature) = forged(kind);
    let headers = [(proof, signature.as_str()), event(kind), ("Content-Type", "application/json")];
    let mut raw = Raw::send(receiver.address, head(path, &headers, length).as_bytes()).await;
    let interim = raw.answer().await;
    assert!(interim.starts_with("HTTP/1.1 100 "), "the body is being read: {interim}");
    raw
}

/// Ends a held body early and waits for its answer: by then its budget is given back.
async fn release(mut raw: Raw) {
    raw.give_up().await;
    let answer = raw.answer().await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
}

#[tokio::test]
async fn junk_path_flood_spends_no_budget_and_a_valid_delivery_is_still_accepted() {
    // A global bucket of 3 for the whole test: one junk request charged to it would show.
    let limits = Limits { global_rate: hourly(3), registration_read_rate: None, ..Limits::default() };
    let receiver = TestReceiver::start_with(limits).await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    let delivery = Delivery::push(Kind::Gitlab, MAIN);
    for i in 0..100u32 {
        let guess = format!("/hook/{:064x}", u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        for junk in [guess.as_str(), "/hook/not-hex", "/", "/hook/"] {
            let answer = receiver.send(junk, &delivery).await;
            assert_eq!((answer.status, answer.body.as_str()), (404, "not found\n"), "{junk}");
        }
    }
    let answer = receiver.send(&path, &delivery).await;
    assert_eq!((answer.status, answer.body.as_str()), (202, "accepted\n"));
    assert_eq!(receiver.fires(), [fired("repo")]);
    receiver.stop().await;
}

#[tokio::test]
async fn wrong_gitlab_token_is_refused_while_the_body_is_still_unsent() {
    let limits = patient(Limits { global_rate: hourly(1), registration_read_rate: hourly(1), ..Limits::default() });
    let receiver = TestReceiver::start_with(limits).await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    let limit = Limits::default().max_body_bytes;
    for token in ["guess", "", "t0ken-of-the-test", "T0KEN-OF-THE-TESTS"] {
        let headers =
            [("X-Gitlab-Token", token), ("X-Gitlab-Event", "Push Hook"), ("Content-Type", "application/json")];
        // The largest body accepted is announced, and not a byte of it is sent.
        let mut raw = Raw::send(receiver.address, head(&path, &headers, limit).as_bytes()).await;
        let answer = raw.answer().await;
        assert!(answer.starts_with("HTTP/1.1 401 "), "{token:?}: {answer}");
        assert!(answer.ends_with("unauthorized: x-gitlab-token does not match\n"), "{answer}");
    }
    // A slow sender: the head and a trickle of the body, then nothing.
    let headers = [("X-Gitlab-Event", "Push Hook"), ("Content-Type", "application/json")];
    let mut request = head(&path, &headers, limit);
    request.push_str("{\"ref\": \"refs/he");
    let mut raw = Raw::send(receiver.address, request.as_bytes()).await;
    let answer = raw.answer().await;
    assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
    assert!(answer.ends_with("unauthorized: missing header x-gitlab-token\n"), "{answer}");
    // None of them spent the global bucket of 1, or the registration's: the real delivery passes.
    assert_eq!(receiver.receiver.bytes_in_flight(), 0);
    assert_eq!(receiver.send(&path, &Delivery::push(Kind::Gitlab, MAIN)).await.status, 202);
    assert_eq!(receiver.fires(), [fired("repo")]);
    receiver.stop().await;
}

#[tokio::test]
async fn malformed_signature_headers_are_refused_before_the_body() {
    let receiver = TestReceiver::start_with(patient(test_limits())).await;
    for kind in [Kind::Github, Kind::Hmac] {
        let path = receiver.register(kind, &format!("{kind:?}").to_lowercase(), None);
        let header = kind.proof_header().unwrap();
        for (value, why) in [
            (None, format!("missing header {header}")),
            (Some("sha256=zz"), format!("header {header} is malformed")),
            (Some("sha1=0123456789abcdef0123456789abcdef01234567"), format!("header {header} is malformed")),
        ] {
            let mut headers = vec![event(kind), ("Content-Type", "application/json")];
            if let Some(value) = value {
                headers.push((header, value));
            }
            let mut raw = Raw::send(receiver.address, head(&path, &headers, MIB).as_bytes()).await;
            let answer = raw.answer().await;
            assert!(answer.starts_with("HTTP/1.1 401 "), "{kind:?} {value:?}: {answer}");
            assert!(answer.ends_with(&format!("unauthorized: {why}\n")), "{answer}");
        }
    }
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

#[tokio::test]
async fn stale_standard_webhooks_timestamp_is_refused_before_the_body() {
    let receiver = TestReceiver::start_with(patient(test_limits())).await;
    let path = receiver.register(Kind::GitlabSigned, "repo", None);
    let stale =
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 3600).to_string();
    let signature = format!("v1,{}", "A".repeat(43) + "=");
    let headers = [
        ("X-Gitlab-Token", TOKEN),
        ("X-Gitlab-Event", "Push Hook"),
        ("Content-Type", "application/json"),
        ("webhook-id", "msg_replayed"),
        ("webhook-timestamp", stale.as_str()),
        ("webhook-signature", signature.as_str()),
    ];
    let mut raw = Raw::send(receiver.address, head(&path, &headers, MIB).as_bytes()).await;
    let answer = raw.answer().await;
    assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
    assert!(answer.ends_with("is more than 300 s away from the receiver's clock\n"), "{answer}");
    receiver.stop().await;
}

#[tokio::test]
async fn body_declared_as_anything_but_json_is_415_before_it_is_read() {
    let receiver = TestReceiver::start_with(patient(test_limits())).await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    let headers = [
        ("X-Gitlab-Token", TOKEN),
        ("X-Gitlab-Event", "Push Hook"),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    let mut raw = Raw::send(receiver.address, head(&path, &headers, MIB).as_bytes()).await;
    let answer = raw.answer().await;
    assert!(answer.starts_with("HTTP/1.1 415 "), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\naccept: application/json\r\n"), "{answer}");
    assert!(answer.ends_with("deliveries are JSON: Content-Type application/json (or none)\n"), "{answer}");
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

#[tokio::test]
async fn ignored_event_is_answered_before_the_body_is_read() {
    let receiver = TestReceiver::start_with(patient(test_limits())).await;
    let path = receiver.register(Kind::Github, "repo", None);
    // GitHub sends every event a hook subscribes to; big ones (pull requests) cost no read.
    let (proof, signature) = forged(Kind::Github);
    let headers =
        [(proof, signature.as_str()), ("X-GitHub-Event", "pull_request"), ("Content-Type", "application/json")];
    let mut raw = Raw::send(receiver.address, head(&path, &headers, MIB).as_bytes()).await;
    let answer = raw.answer().await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.ends_with("ignored: event `pull_request` does not trigger a sync\n"), "{answer}");
    receiver.stop().await;
}

#[tokio::test]
async fn forged_signature_flood_on_one_path_does_not_429_another_registration() {
    for kind in [Kind::Github, Kind::Hmac] {
        // The global bucket holds 10; the attacked registration may read 3 bodies.
        let limits = Limits { global_rate: hourly(10), registration_read_rate: hourly(3), ..Limits::default() };
        let receiver = TestReceiver::start_with(limits).await;
        let attacked = receiver.register(kind, "attacked", None);
        let other = receiver.register(kind, "other", None);
        let forged = Delivery::push(kind, MAIN).token("the attacker knows the path, not the token");
        let mut statuses = Vec::new();
        for _ in 0..40 {
            statuses.push(receiver.send(&attacked, &forged).await.status);
        }
        assert_eq!(&statuses[..3], [401; 3], "{kind:?}: three bodies read and refused");
        assert!(statuses[3..].iter().all(|s| *s == 429), "{kind:?}: then its own budget is spent: {statuses:?}");
        // The flood spent 3 of the 10 global tokens; the other registration is served.
        let answer = receiver.send(&other, &Delivery::push(kind, MAIN)).await;
        assert_eq!(answer.status, 202, "{kind:?}: {}", answer.body);
        // The price is paid by the attacked registration alone (its poll picks the push up).
        assert_eq!(receiver.send(&attacked, &Delivery::push(kind, MAIN)).await.status, 429);
        assert_eq!(receiver.fires(), [fired("other")]);
        receiver.stop().await;
    }
}

#[tokio::test]
async fn global_rate_limit_is_taken_after_the_lookup_and_the_header_checks() {
    let limits = Limits { global_rate: hourly(3), ..Limits::default() };
    let receiver = TestReceiver::start_with(limits).await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    for i in 0..3 {
        let answer = receiver.send(&path, &Delivery::push(Kind::Gitlab, MAIN).key(&format!("d{i}"))).await;
        assert_eq!(answer.status, 202, "{answer:?}");
    }
    let limited = receiver.send(&path, &Delivery::push(Kind::Gitlab, MAIN).key("d3")).await;
    assert_eq!((limited.status, limited.body.as_str()), (429, "rate limit reached; retry later\n"));
    assert!(limited.headers.get("retry-after").is_some());
    // What the lookup or the headers refuse is answered as before, at no cost.
    let unknown = format!("/hook/{}", "0".repeat(64));
    assert_eq!(receiver.send(&unknown, &Delivery::push(Kind::Gitlab, MAIN)).await.status, 404);
    assert_eq!(receiver.send(&path, &Delivery::push(Kind::Gitlab, MAIN).token("wrong")).await.status, 401);
    assert_eq!(receiver.fires().len(), 3);
    receiver.stop().await;
}

#[tokio::test]
async fn slow_bodies_on_one_registration_fill_only_its_share_and_others_get_through() {
    let limits = patient(Limits {
        in_flight_bytes: 4 * MIB,
        registration_in_flight_bytes: 2 * MIB,
        registration_read_rate: None,
        ..test_limits()
    });
    let receiver = TestReceiver::start_with(limits).await;
    let attacked = receiver.register(Kind::Github, "attacked", None);
    let other = receiver.register(Kind::Github, "other", None);
    let first = hold_a_body(&receiver, Kind::Github, &attacked, MIB).await;
    let second = hold_a_body(&receiver, Kind::Github, &attacked, MIB).await;
    assert_eq!(receiver.receiver.bytes_in_flight(), 2 * MIB);
    // The attacked registration's share is spent: the next body is refused unread.
    let (proof, signature) = forged(Kind::Github);
    let headers = [(proof, signature.as_str()), ("X-GitHub-Event", "push"), ("Content-Type", "application/json")];
    let mut third = Raw::send(receiver.address, head(&attacked, &headers, 1024).as_bytes()).await;
    let answer = third.answer().await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nretry-after: 600\r\n"), "{answer}");
    assert!(answer.ends_with("too many deliveries of this registration are being read; retry later\n"), "{answer}");
    // Another registration is served meanwhile.
    let answer = receiver.send(&other, &Delivery::push(Kind::Github, MAIN)).await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    assert_eq!(receiver.fires(), [fired("other")]);
    // Held bodies give their budget back when they end.
    release(first).await;
    release(second).await;
    assert_eq!(receiver.receiver.bytes_in_flight(), 0);
    assert_eq!(receiver.send(&attacked, &Delivery::push(Kind::Github, MAIN)).await.status, 202);
    receiver.stop().await;
}

#[tokio::test]
async fn bodies_beyond_the_global_budget_in_flight_are_refused_unread() {
    let limits = patient(Limits {
        in_flight_bytes: 2 * MIB,
        registration_in_flight_bytes: 2 * MIB,
        registration_read_rate: None,
        ..test_limits()
    });
    let receiver = TestReceiver::start_with(limits).await;
    let one = receiver.register(Kind::Hmac, "one", None);
    let two = receiver.register(Kind::Hmac, "two", None);
    let third = receiver.register(Kind::Hmac, "third", None);
    // Many slow senders on several paths: together they spend the global budget.
    let held =
        [hold_a_body(&receiver, Kind::Hmac, &one, MIB).await, hold_a_body(&receiver, Kind::Hmac, &two, MIB).await];
    let valid = Delivery::push(Kind::Hmac, MAIN);
    let refused = receiver.send(&third, &valid).await;
    assert_eq!(
        (refused.status, refused.body.as_str()),
        (503, "too many deliveries are being read; retry later\n"),
        "memory is bounded whoever holds it"
    );
    assert!(refused.headers.get("retry-after").is_some());
    // An empty body holds no memory and still gets through (generic types: "sync now").
    assert_eq!(receiver.send(&third, &Delivery::raw(Kind::Hmac, Vec::new())).await.status, 202);
    for raw in held {
        release(raw).await;
    }
    assert_eq!(receiver.send(&third, &valid).await.status, 202);
    assert_eq!(receiver.fires(), [fired("third"), fired("third")]);
    receiver.stop().await;
}

#[tokio::test]
async fn trickling_body_is_cut_at_the_timeout_and_gives_its_budget_back() {
    // One body at a time for the registration: the trickler holds all of it until cut.
    let limits = Limits {
        request_timeout: Duration::from_millis(300),
        registration_in_flight_bytes: MIB,
        registration_read_rate: None,
        ..test_limits()
    };
    let receiver = TestReceiver::start_with(limits).await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    let headers = [("X-Gitlab-Token", TOKEN), ("X-Gitlab-Event", "Push Hook"), ("Content-Type", "application/json")];
    let mut raw = Raw::send(receiver.address, head(&path, &headers, MIB).as_bytes()).await;
    assert!(raw.answer().await.starts_with("HTTP/1.1 100 "));
    raw.write(b"{\"ref\": \"refs/heads/ma").await;
    let answer = raw.answer().await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.ends_with("the body did not arrive in time\n"), "{answer}");
    assert_eq!(receiver.receiver.bytes_in_flight(), 0);
    assert_eq!(receiver.send(&path, &Delivery::push(Kind::Gitlab, MAIN)).await.status, 202);
    receiver.stop().await;
}

#[tokio::test]
async fn oversized_request_head_is_431_before_any_lookup() {
    let receiver = TestReceiver::start_with(patient(test_limits())).await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    // 256 KiB of headers, past the 64 KiB limit (hyper checks it between reads, so a head may
    // reach up to twice the limit before it is cut): to a served path or not.
    let padding = "x".repeat(256 * 1024);
    for target in [path.as_str(), "/hook/unknown"] {
        let headers = [("X-Gitlab-Token", TOKEN), ("X-Padding", padding.as_str())];
        let mut raw = Raw::send(receiver.address, head(target, &headers, 0).as_bytes()).await;
        let answer = raw.answer().await;
        assert!(answer.starts_with("HTTP/1.1 431 "), "{target}: {answer}");
    }
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}
