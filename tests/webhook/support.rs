//! The receiver on `127.0.0.1:0` with a trigger that records what it fires, registrations built
//! from a TenantRepository and its Secret data exactly as the index keeper builds them, and
//! deliveries signed like each sender signs them.
//!
//! The signatures are computed here with `hmac`/`sha2`/`base64` directly, not with the crate's
//! helpers, so a mistake in the receiver's message format cannot cancel out.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use cdtarget::api::TenantRepository;
use cdtarget::api::tenant_repository::{GitRef, WebhookType, webhook_path};
use cdtarget::telemetry::Metrics;
use cdtarget::webhook::TriggerClosed;
use cdtarget::webhook::{self, Fire, Index, Limits, Receiver, Registration};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio::sync::watch;

/// The platform namespace of every registration here.
pub const NAMESPACE: &str = "cdtarget-system";
/// The `token` of every registration here.
pub const TOKEN: &str = "t0ken-of-the-tests";
/// The decoded Standard Webhooks signing key of signed GitLab registrations.
pub const SIGNING_KEY: [u8; 32] = *b"0123456789abcdef0123456789ABCDEF";

/// A commit SHA for payloads.
pub const SHA: &str = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7";

/// The sender flavours: each webhook type, GitLab with and without a signing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `gitlab`, token only.
    Gitlab,
    /// `gitlab` with `signingToken` (Standard Webhooks).
    GitlabSigned,
    /// `github`.
    Github,
    /// `generic-hmac`.
    Hmac,
    /// `generic`.
    Generic,
}

impl Kind {
    fn webhook_type(self) -> WebhookType {
        match self {
            Kind::Gitlab | Kind::GitlabSigned => WebhookType::Gitlab,
            Kind::Github => WebhookType::Github,
            Kind::Hmac => WebhookType::GenericHmac,
            Kind::Generic => WebhookType::Generic,
        }
    }

    /// The header carrying the secret proof (none for `generic`).
    pub fn proof_header(self) -> Option<&'static str> {
        match self {
            Kind::Gitlab => Some("x-gitlab-token"),
            Kind::GitlabSigned => Some("webhook-signature"),
            Kind::Github => Some("x-hub-signature-256"),
            Kind::Hmac => Some("x-signature"),
            Kind::Generic => None,
        }
    }

    fn event_header(self) -> &'static str {
        match self {
            Kind::Gitlab | Kind::GitlabSigned => "x-gitlab-event",
            Kind::Github => "x-github-event",
            Kind::Hmac | Kind::Generic => "x-event",
        }
    }
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/webhook/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture is JSON")
}

/// A GitLab push payload (contract §10 fields) to `git_ref`.
pub fn gitlab_push(git_ref: &str) -> Value {
    let mut push = fixture("gitlab-push.json");
    push["ref"] = git_ref.into();
    push
}

/// What the trigger was asked to reconcile, in order (`namespace/name`).
#[derive(Default)]
pub struct Fired(Mutex<Vec<String>>);

impl Fire for Fired {
    fn fire(&self, namespace: &str, name: &str) -> Result<(), TriggerClosed> {
        self.0.lock().unwrap().push(format!("{namespace}/{name}"));
        Ok(())
    }
}

/// An answer: status, body, `Retry-After`/`Allow` headers.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: String,
    /// The headers.
    pub headers: reqwest::header::HeaderMap,
}

/// A running receiver.
pub struct TestReceiver {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The address it listens on.
    pub address: std::net::SocketAddr,
    /// What it triggered.
    pub fired: Arc<Fired>,
    /// Its index.
    pub index: Arc<Index>,
    /// Its receiver (to change the trigger).
    pub receiver: Arc<Receiver>,
    /// The metrics it reports to.
    pub metrics: Arc<Metrics>,
    client: reqwest::Client,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The limits of most tests: the defaults, without the global limit (each test has its own
/// server, but a test must not depend on how fast the machine runs the others).
pub fn test_limits() -> Limits {
    Limits { global_rate: None, ..Limits::default() }
}

impl TestReceiver {
    /// A receiver with [`test_limits`].
    pub async fn start() -> TestReceiver {
        Self::start_with(test_limits()).await
    }

    /// A receiver with `limits`, triggering into [`TestReceiver::fired`].
    pub async fn start_with(limits: Limits) -> TestReceiver {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().unwrap();
        let index = Arc::new(Index::default());
        let metrics = Arc::new(Metrics::default());
        let receiver = Receiver::new(index.clone(), limits, metrics.webhook.clone());
        let fired = Arc::new(Fired::default());
        receiver.set_trigger(Some(fired.clone()));
        let (stop, stopped) = watch::channel(false);
        let shutdown = async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|s| *s).await;
        };
        let task = tokio::spawn(webhook::serve(listener, receiver.clone(), shutdown));
        TestReceiver {
            base: format!("http://{address}"),
            address,
            fired,
            index,
            receiver,
            metrics,
            client: reqwest::Client::new(),
            stop,
            task,
        }
    }

    /// Registers `name` of `kind` tracking `git_ref` (`None`: no `spec.ref`, i.e. branch `main`)
    /// and returns its path, as `status.webhookPath` shows it.
    pub fn register(&self, kind: Kind, name: &str, git_ref: Option<GitRef>) -> String {
        self.register_with(kind, name, git_ref, &[])
    }

    /// As [`TestReceiver::register`], with `spec.webhook.events`.
    pub fn register_with(&self, kind: Kind, name: &str, git_ref: Option<GitRef>, events: &[&str]) -> String {
        let repo = TenantRepository::test()
            .with_name(name)
            .in_namespace(NAMESPACE)
            .with_git_ref(git_ref)
            .with_webhook(kind.webhook_type(), &format!("{name}-webhook"))
            .with_webhook_events(events);
        let signing = format!("whsec_{}", STANDARD.encode(SIGNING_KEY));
        let data = match kind {
            Kind::GitlabSigned => cdtarget::fixtures::secret_data(&[("token", TOKEN), ("signingToken", &signing)]),
            _ => cdtarget::fixtures::secret_data(&[("token", TOKEN)]),
        };
        let registration = Registration::from_parts(&repo, Some(&data)).expect("served").expect("has a webhook");
        assert!(registration.warnings().is_empty(), "{:?}", registration.warnings());
        self.index.upsert(registration);
        webhook_path(TOKEN, name, NAMESPACE)
    }

    /// Sends `delivery` to `path`.
    pub async fn send(&self, path: &str, delivery: &Delivery) -> Answer {
        let request = delivery.request(&self.client, &format!("{}{path}", self.base));
        answer(request.send().await.expect("the receiver answers")).await
    }

    /// Sends `method` to `path` with an empty body.
    pub async fn request(&self, method: reqwest::Method, path: &str) -> Answer {
        let request = self.client.request(method, format!("{}{path}", self.base));
        answer(request.send().await.expect("the receiver answers")).await
    }

    /// What was triggered so far.
    pub fn fires(&self) -> Vec<String> {
        self.fired.0.lock().unwrap().clone()
    }

    /// The metrics text.
    pub fn metrics_text(&self) -> String {
        self.metrics.encode()
    }

    /// Stops the server and waits for it to return.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("server task").expect("server");
    }
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.unwrap_or_default();
    Answer { status, body, headers }
}

/// `namespace/name` of a registration, as fired.
pub fn fired(name: &str) -> String {
    format!("{NAMESPACE}/{name}")
}

fn now_unix() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// One delivery as a sender of `kind` would make it, with knobs to break it.
#[derive(Clone, Debug)]
pub struct Delivery {
    kind: Kind,
    body: Vec<u8>,
    event: Option<String>,
    key: Option<String>,
    token: String,
    signing_key: Vec<u8>,
    webhook_id: Option<String>,
    timestamp_offset: i64,
    without: Vec<&'static str>,
    tampered: bool,
}

impl Delivery {
    /// A push to `git_ref` (a branch push, or a tag push for `refs/tags/...`).
    pub fn push(kind: Kind, git_ref: &str) -> Delivery {
        let tag = git_ref.starts_with("refs/tags/");
        let (body, event) = match kind {
            Kind::Gitlab | Kind::GitlabSigned if tag => {
                let mut push = fixture("gitlab-tag-push.json");
                push["ref"] = git_ref.into();
                (push, "Tag Push Hook")
            }
            Kind::Gitlab | Kind::GitlabSigned => (gitlab_push(git_ref), "Push Hook"),
            Kind::Github => {
                let mut push = fixture("github-push.json");
                push["ref"] = git_ref.into();
                (push, "push")
            }
            Kind::Hmac | Kind::Generic => (serde_json::json!({"ref": git_ref, "after": SHA}), "push"),
        };
        Delivery::raw(kind, serde_json::to_vec(&body).unwrap()).event(event)
    }

    /// GitLab's payload of a deleted branch `main` (`checkout_sha: null`).
    pub fn gitlab_branch_deleted(kind: Kind) -> Delivery {
        Delivery::raw(kind, serde_json::to_vec(&fixture("gitlab-branch-delete.json")).unwrap()).event("Push Hook")
    }

    /// `body` as it is, correctly authenticated, without an event header.
    pub fn raw(kind: Kind, body: impl Into<Vec<u8>>) -> Delivery {
        Delivery {
            kind,
            body: body.into(),
            event: None,
            key: None,
            token: TOKEN.into(),
            signing_key: SIGNING_KEY.to_vec(),
            webhook_id: None,
            timestamp_offset: 0,
            without: Vec::new(),
            tampered: false,
        }
    }

    /// Sets the event header to the kind's push event (`Push Hook`, `push`).
    pub fn push_event(self) -> Delivery {
        let event = match self.kind {
            Kind::Gitlab | Kind::GitlabSigned => "Push Hook",
            Kind::Github | Kind::Hmac | Kind::Generic => "push",
        };
        self.event(event)
    }

    /// Sets the event header.
    pub fn event(mut self, event: &str) -> Delivery {
        self.event = Some(event.into());
        self
    }

    /// Sets the delivery id: `Idempotency-Key` (GitHub: `X-GitHub-Delivery`); for signed GitLab
    /// also `webhook-id`, as GitLab does.
    pub fn key(mut self, key: &str) -> Delivery {
        self.key = Some(key.into());
        self
    }

    /// Sets `webhook-id` alone (signed GitLab), e.g. to replay a signed id under a new
    /// `Idempotency-Key`.
    pub fn webhook_id(mut self, id: &str) -> Delivery {
        self.webhook_id = Some(id.into());
        self
    }

    /// Authenticates with another token: `X-Gitlab-Token`, or the HMAC key of `github` and
    /// `generic-hmac`.
    pub fn token(mut self, token: &str) -> Delivery {
        self.token = token.into();
        self
    }

    /// Signs (Standard Webhooks) with another key.
    pub fn signing_key(mut self, key: &[u8]) -> Delivery {
        self.signing_key = key.to_vec();
        self
    }

    /// Stamps `webhook-timestamp` this many seconds away from now.
    pub fn stamped(mut self, offset_secs: i64) -> Delivery {
        self.timestamp_offset = offset_secs;
        self
    }

    /// Leaves `header` out.
    pub fn without(mut self, header: &'static str) -> Delivery {
        self.without.push(header);
        self
    }

    /// Changes the body after signing it.
    pub fn tampered(mut self) -> Delivery {
        self.tampered = true;
        self
    }

    fn request(&self, client: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
        use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
        let mut headers = HeaderMap::new();
        let mut set = |name: &str, value: &str| {
            headers.insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        };
        set("content-type", "application/json");
        set("user-agent", "GitLab/19.0.0");
        if let Some(event) = &self.event {
            set(self.kind.event_header(), event);
        }
        let body = &self.body;
        match self.kind {
            Kind::Gitlab => set("x-gitlab-token", &self.token),
            Kind::GitlabSigned => {
                set("x-gitlab-token", &self.token);
                let id = self.webhook_id.clone().or_else(|| self.key.clone()).unwrap_or_else(|| "msg_default".into());
                let timestamp = (now_unix() + self.timestamp_offset).to_string();
                let mac = hmac(&self.signing_key, &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body]);
                set("webhook-id", &id);
                set("webhook-timestamp", &timestamp);
                set("webhook-signature", &format!("v1,{}", STANDARD.encode(mac)));
            }
            Kind::Github => {
                set("x-hub-signature-256", &format!("sha256={}", hex::encode(hmac(self.token.as_bytes(), &[body]))))
            }
            Kind::Hmac => set("x-signature", &format!("sha256={}", hex::encode(hmac(self.token.as_bytes(), &[body])))),
            Kind::Generic => {}
        }
        if let Some(key) = &self.key {
            set(if self.kind == Kind::Github { "x-github-delivery" } else { "idempotency-key" }, key);
        }
        for header in &self.without {
            headers.remove(*header);
        }
        let mut body = self.body.clone();
        if self.tampered {
            // Still valid JSON, another byte string.
            body.push(b' ');
        }
        client.post(url).headers(headers).body(body)
    }
}

/// Writes `request` on a new connection to `address` and reads until the server closes it or a
/// whole response (by `Content-Length`) has arrived; returns what was read. Bounded by 30 s.
pub async fn exchange(address: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect");
    stream.write_all(request).await.expect("write the request");
    let read = async {
        let mut response = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => response.extend_from_slice(&buffer[..n]),
            }
            if complete(&response) {
                break;
            }
        }
        String::from_utf8_lossy(&response).into_owned()
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), read).await.expect("an answer within 30 s")
}

/// Whether `response` holds a head and the whole body its `Content-Length` announces.
fn complete(response: &[u8]) -> bool {
    let text = String::from_utf8_lossy(response);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    let length = head
        .lines()
        .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
        .and_then(|v| v.parse::<usize>().ok());
    length.is_some_and(|length| body.len() >= length)
}

/// The head of a `POST path` with `headers`, `Content-Length: length` and
/// `Expect: 100-continue`: a server that starts reading the body first answers `100 Continue`,
/// so a final answer first proves the body was never asked for.
pub fn head(path: &str, headers: &[(&str, &str)], length: usize) -> String {
    let mut head =
        format!("POST {path} HTTP/1.1\r\nHost: receiver\r\nExpect: 100-continue\r\nContent-Length: {length}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// One raw connection to the receiver, for requests whose body is sent late or never.
pub struct Raw {
    stream: tokio::net::TcpStream,
    buffered: Vec<u8>,
}

impl Raw {
    /// Connects to `address` and writes `bytes`.
    pub async fn send(address: std::net::SocketAddr, bytes: &[u8]) -> Raw {
        use tokio::io::AsyncWriteExt;
        let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect");
        stream.write_all(bytes).await.expect("write the request");
        Raw { stream, buffered: Vec::new() }
    }

    /// Reads the next answer: an interim `100 Continue` head, or a final answer with its whole
    /// body. Bounded by 30 s, far less than any timeout the tests that use it configure, so a
    /// server that waited for the body fails the test instead of answering late.
    pub async fn answer(&mut self) -> String {
        use tokio::io::AsyncReadExt;
        let read = async {
            loop {
                if let Some(end) = self.buffered.windows(4).position(|w| w == b"\r\n\r\n") {
                    let interim = self.buffered.starts_with(b"HTTP/1.1 1");
                    if interim || complete(&self.buffered) {
                        let taken = if interim { end + 4 } else { self.buffered.len() };
                        let answer = self.buffered.drain(..taken).collect::<Vec<u8>>();
                        return String::from_utf8_lossy(&answer).into_owned();
                    }
                }
                let mut buffer = [0u8; 4096];
                match self.stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return String::from_utf8_lossy(&std::mem::take(&mut self.buffered)).into_owned(),
                    Ok(n) => self.buffered.extend_from_slice(&buffer[..n]),
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), read).await.expect("an answer within 30 s")
    }

    /// Writes more of the request.
    pub async fn write(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Ends the request early: the server sees the body end before its announced length.
    pub async fn give_up(&mut self) {
        use tokio::io::AsyncWriteExt;
        self.stream.shutdown().await.expect("shutdown");
    }
}
