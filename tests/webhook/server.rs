//! Server-wide behaviour: slow clients, the connection cap, a replica that does not lead, the
//! metrics, and the index kept by watch events. The limits and budgets that keep strangers from
//! spending anything are in `unauthenticated.rs`.

use std::sync::Arc;
use std::time::Duration;

use cdtarget::api::TenantRepository;
use cdtarget::fixtures::{self, SecretFixture};
use cdtarget::webhook::{Index, Limits, keep_index_on_streams};
use futures::StreamExt as _;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Delivery, Kind, NAMESPACE, TestReceiver, exchange, fired, test_limits};

const MAIN: &str = "refs/heads/main";

#[tokio::test]
async fn timeout_of_a_slow_body_is_408() {
    let limits = Limits { request_timeout: Duration::from_millis(300), ..test_limits() };
    let receiver = TestReceiver::start_with(limits).await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    // Announces 100 bytes, sends 10, then stalls. (The event header is there since the event is
    // checked before the body is read.)
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: receiver\r\nX-Gitlab-Token: {}\r\nX-Gitlab-Event: Push Hook\r\n\
         Content-Length: 100\r\n\r\n{{\"ref\": \"r",
        crate::support::TOKEN
    );
    let response = exchange(receiver.address, request.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 408 "), "{response}");
    assert!(response.ends_with("the body did not arrive in time\n"), "{response}");
    assert!(receiver.fires().is_empty());
    receiver.stop().await;
}

#[tokio::test]
async fn timeout_of_slow_headers_closes_the_connection() {
    let limits = Limits { header_timeout: Duration::from_millis(300), ..test_limits() };
    let receiver = TestReceiver::start_with(limits).await;
    let mut stream = tokio::net::TcpStream::connect(receiver.address).await.unwrap();
    stream.write_all(b"POST /hook/").await.unwrap();
    // The server gives up on the head: the connection ends (hyper may say 408 first).
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection was not closed");
    let text = String::from_utf8_lossy(&rest);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    receiver.stop().await;
}

#[tokio::test]
async fn oversize_chunked_body_without_a_length_is_413_after_3_mib() {
    let receiver = TestReceiver::start().await;
    let path = receiver.register(Kind::Generic, "repo", None);
    let mut stream = tokio::net::TcpStream::connect(receiver.address).await.unwrap();
    let head = format!("POST {path} HTTP/1.1\r\nHost: receiver\r\nTransfer-Encoding: chunked\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    // The writer sends 64 KiB chunks until the server stops reading; the reader waits for the
    // answer.
    let writer = tokio::spawn(async move {
        let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, " ".repeat(64 * 1024));
        for _ in 0..64 {
            if write.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
    });
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), read.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert!(receiver.fires().is_empty());
    writer.abort();
    receiver.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_on_arrival() {
    // A long header timeout: only the cap can close the second connection within the wait.
    let limits = Limits { max_connections: 1, header_timeout: Duration::from_secs(120), ..test_limits() };
    let receiver = TestReceiver::start_with(limits).await;
    let path = receiver.register(Kind::Generic, "repo", None);
    // The first connection holds the only slot until it is done.
    let mut first = tokio::net::TcpStream::connect(receiver.address).await.unwrap();
    first.write_all(b"POST ").await.unwrap();
    let mut second = tokio::net::TcpStream::connect(receiver.address).await.unwrap();
    let mut buffer = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(30), second.read(&mut buffer)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the second connection is closed: {closed:?}");
    // The first one is served.
    let rest = format!("{path} HTTP/1.1\r\nHost: receiver\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    first.write_all(rest.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), first.read_to_end(&mut response)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&response).starts_with("HTTP/1.1 202 "));
    assert_eq!(receiver.fires(), [fired("repo")]);
    receiver.stop().await;
}

#[tokio::test]
async fn a_replica_that_does_not_lead_answers_503_and_triggers_nothing() {
    let receiver = TestReceiver::start().await;
    let path = receiver.register(Kind::Gitlab, "repo", None);
    receiver.receiver.set_trigger(None);
    let delivery = Delivery::push(Kind::Gitlab, MAIN).key("k");
    let answer = receiver.send(&path, &delivery).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    // The delivery id was not spent: once leading, a resend of it is accepted.
    receiver.receiver.set_trigger(Some(receiver.fired.clone()));
    assert_eq!(receiver.send(&path, &delivery).await.status, 202);
    assert_eq!(receiver.fires(), [fired("repo")]);
    receiver.stop().await;
}

#[tokio::test]
async fn metrics_count_every_answer_by_type_and_result_without_paths() {
    let receiver = TestReceiver::start().await;
    let path = receiver.register(Kind::Github, "repo", None);
    receiver.send(&path, &Delivery::push(Kind::Github, MAIN)).await;
    receiver.send(&path, &Delivery::push(Kind::Github, "refs/heads/x")).await;
    receiver.send(&path, &Delivery::push(Kind::Github, MAIN).token("wrong")).await;
    receiver.send(&format!("/hook/{}", "1".repeat(64)), &Delivery::push(Kind::Github, MAIN)).await;
    receiver.request(reqwest::Method::GET, &path).await;
    let text = receiver.metrics_text();
    for line in [
        r#"cdtarget_webhook_requests_total{type="github",result="accepted"} 1"#,
        r#"cdtarget_webhook_requests_total{type="github",result="ignored"} 1"#,
        r#"cdtarget_webhook_requests_total{type="github",result="unauthorized"} 1"#,
        r#"cdtarget_webhook_requests_total{type="none",result="not_found"} 1"#,
        r#"cdtarget_webhook_requests_total{type="none",result="method_not_allowed"} 1"#,
        r#"cdtarget_webhook_request_duration_seconds_count{type="github"} 3"#,
    ] {
        assert!(text.contains(line), "{line} missing in:\n{text}");
    }
    assert!(!text.contains(path.trim_start_matches("/hook/")), "no digest in the metrics");
    receiver.stop().await;
}

// === the index, kept by watch events ===

/// Registration `name` with a GitLab webhook whose token is in Secret `secret`.
fn registration(name: &str, secret: &str) -> TenantRepository {
    TenantRepository::test().with_name(name).in_namespace(NAMESPACE).with_webhook_secret(secret)
}

/// The webhook Secret `name` holding `token`.
fn secret(name: &str, token: &str) -> Secret {
    fixtures::secret(name, &[("token", token)]).in_namespace(NAMESPACE)
}

/// Waits (bounded) for the next change of the index.
async fn changed(changes: &mut tokio::sync::watch::Receiver<u64>) {
    tokio::time::timeout(Duration::from_secs(20), changes.changed()).await.expect("an index update").unwrap();
}

#[tokio::test]
async fn index_follows_registrations_their_webhook_secrets_and_relists() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = kube_fake_client::ClientBuilder::new().build().await.expect("fake client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    secrets.create(&PostParams::default(), &secret("hook-a", "one")).await.unwrap();
    let index = Arc::new(Index::default());
    let mut changes = index.subscribe();
    // Stand-ins for the TenantRepository watch and the Secret (metadata) watch of
    // `controller::process::keep_receiver_index`; kube-fake-client serves no watches.
    let (repos, repo_events) = mpsc::unbounded();
    let (names, secret_events) = mpsc::unbounded::<String>();
    let keeper = tokio::spawn(keep_index_on_streams(
        client,
        index.clone(),
        repo_events.map(Ok),
        secret_events.map(Ok),
        futures::future::pending(),
    ));
    let path = |token: &str, name: &str| cdtarget::api::tenant_repository::webhook_path(token, name, NAMESPACE);
    let digest = |path: String| path.trim_start_matches("/hook/").to_owned();

    // The initial list: one registration with its Secret, one whose Secret does not exist yet.
    repos.unbounded_send(watcher::Event::Init).unwrap();
    repos.unbounded_send(watcher::Event::InitApply(registration("a", "hook-a"))).unwrap();
    changed(&mut changes).await;
    repos.unbounded_send(watcher::Event::InitApply(registration("b", "hook-b"))).unwrap();
    repos.unbounded_send(watcher::Event::InitDone).unwrap();
    assert!(index.lookup(&digest(path("one", "a"))).is_some());

    // Secret hook-b is created: its watch event makes `b` served.
    secrets.create(&PostParams::default(), &secret("hook-b", "two")).await.unwrap();
    names.unbounded_send("hook-b".into()).unwrap();
    changed(&mut changes).await;
    assert!(index.lookup(&digest(path("two", "b"))).is_some());

    // hook-a's token rotates: the old path is gone, the new one is served.
    secrets.replace("hook-a", &PostParams::default(), &secret("hook-a", "rotated")).await.unwrap();
    names.unbounded_send("hook-a".into()).unwrap();
    changed(&mut changes).await;
    assert!(index.lookup(&digest(path("one", "a"))).is_none());
    assert!(index.lookup(&digest(path("rotated", "a"))).is_some());

    // `b` is deleted (its Delete event): dropped.
    repos.unbounded_send(watcher::Event::Delete(registration("b", "hook-b"))).unwrap();
    changed(&mut changes).await;
    assert!(index.lookup(&digest(path("two", "b"))).is_none());

    // A relist (the watch restarted) that no longer lists `a`: dropped too.
    repos.unbounded_send(watcher::Event::Init).unwrap();
    repos.unbounded_send(watcher::Event::InitDone).unwrap();
    changed(&mut changes).await;
    assert!(index.is_empty());

    // Both streams end: the keeper returns.
    drop((repos, names));
    tokio::time::timeout(Duration::from_secs(20), keeper).await.expect("the keeper ends").unwrap();
}
