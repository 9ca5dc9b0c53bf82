//! Nothing outside a registration changes where or how it is fetched, and its credentials stay
//! with their origin: no git configuration of the machine or the user, no redirect to another
//! host or port, no URL userinfo in any message.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use cdtarget::source::{Credentials, FailureKind, Reference, SourceError};

use super::common::process::loopback;
use super::common::{self, GitDaemon, HttpGit, Upstream};
use super::{cdtarget_cli as cdtarget, fetch, limits, request};

/// An upstream holding `tenant.git` whose only manifest is a ConfigMap called `name`.
fn upstream_named(name: &str) -> Upstream {
    let upstream = Upstream::new();
    let manifest = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n");
    upstream.create("tenant.git").commit_and_push(&[("cm.yaml", manifest.as_str())], name);
    upstream
}

// === The machine's git configuration ===

#[test]
fn a_gitconfig_in_home_or_xdg_does_not_redirect_the_fetch() {
    let good = upstream_named("good");
    let evil = upstream_named("evil");
    let good_daemon = GitDaemon::start(&good.root());
    let evil_daemon = GitDaemon::start(&evil.root());
    let rewrite = format!(
        "[url \"git://127.0.0.1:{}/\"]\n\tinsteadOf = git://127.0.0.1:{}/\n[http]\n\tfollowRedirects = true\n",
        evil_daemon.port(),
        good_daemon.port()
    );
    let home = common::test_dir();
    std::fs::write(home.path().join(".gitconfig"), &rewrite).unwrap();
    std::fs::create_dir_all(home.path().join("xdg/git")).unwrap();
    std::fs::write(home.path().join("xdg/git/config"), &rewrite).unwrap();

    let url = good_daemon.url("tenant.git");
    for env in [
        vec![("HOME", home.path())],
        vec![("HOME", std::path::Path::new("/nonexistent")), ("XDG_CONFIG_HOME", &home.path().join("xdg"))],
    ] {
        let out = cdtarget(&["render", &url, "-n", "team-a"], &env);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("name: good"), "fetched from the registration's URL: {stdout}");
        assert!(!stdout.contains("evil"), "{stdout}");
    }
    assert_eq!(evil_daemon.connections(), 0, "the rewritten URL was never contacted");
}

// === Redirects ===

/// A plain-HTTP server on 127.0.0.1 that answers every request with `answer(path)` and keeps
/// every request head it received. Stopped on drop.
struct Recorder {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    fn start(answer: impl Fn(&str) -> String + Send + 'static) -> Recorder {
        let listener = TcpListener::bind(loopback(0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (heads, stopping) = (heads.clone(), stopping.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(mut stream) = stream else { continue };
                    let head = read_head(&mut stream);
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    heads.lock().unwrap().push(head);
                    let _ = stream.write_all(answer(&path).as_bytes());
                }
            })
        };
        Recorder { port, heads, stopping, thread: Some(thread) }
    }

    /// Redirects every request to the same path at `base`.
    fn redirecting_to(base: String) -> Recorder {
        Recorder::start(move |path| {
            format!("HTTP/1.1 302 Found\r\nLocation: {base}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        })
    }

    /// Asks for HTTP Basic credentials on every request.
    fn asking_for_credentials() -> Recorder {
        Recorder::start(|_| {
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_owned()
        })
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(loopback(self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The request line and headers, at most 64 KiB.
fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while head.len() < 64 << 10 && !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

const TOKEN: &str = "glpat-must-stay-home";

fn assert_no_credentials(heads: &[String]) {
    for head in heads {
        assert!(!head.to_ascii_lowercase().contains("authorization:"), "credentials were sent:\n{head}");
        assert!(!head.contains(TOKEN), "{head}");
    }
}

fn expect_redirect_refused(result: Result<cdtarget::source::Fetched, SourceError>) -> String {
    match result {
        Err(e) if e.kind == FailureKind::RedirectRefused => {
            assert!(!e.message.contains(TOKEN), "{}", e.message);
            e.message
        }
        other => panic!("expected RedirectRefused, got {other:?}"),
    }
}

/// The `RedirectRefused` messages of fetching `url` with a token by branch and by commit: a
/// branch asks where it points first (ls-remote), a commit SHA is fetched directly.
fn redirect_refusals(url: &str) -> Vec<String> {
    [Reference::Branch("main".into()), Reference::Commit("0123456789abcdef0123456789abcdef01234567".into())]
        .into_iter()
        .map(|reference| {
            let cache = common::test_dir();
            let mut request = request(url, Credentials::token(TOKEN));
            request.reference = reference;
            expect_redirect_refused(fetch(cache.path(), &request, &limits()))
        })
        .collect()
}

#[test]
fn a_redirect_to_another_port_gets_no_token_and_fails_clearly() {
    let elsewhere = Recorder::asking_for_credentials();
    let origin = Recorder::redirecting_to(format!("http://127.0.0.1:{}", elsewhere.port));
    let url = format!("http://127.0.0.1:{}/tenant.git", origin.port);
    for message in redirect_refusals(&url) {
        assert!(message.contains(&format!("redirected to http://127.0.0.1:{}", elsewhere.port)), "{message}");
        assert!(message.contains("credentials are sent only to"), "{message}");
    }
    assert!(!elsewhere.heads().is_empty(), "libgit2 followed the redirect (same host), as this test expects");
    assert_no_credentials(&elsewhere.heads());
}

#[test]
fn a_redirect_to_another_host_is_not_followed_at_all() {
    let elsewhere = Recorder::asking_for_credentials();
    let origin = Recorder::redirecting_to(format!("http://localhost:{}", elsewhere.port));
    let url = format!("http://127.0.0.1:{}/tenant.git", origin.port);
    for message in redirect_refusals(&url) {
        assert!(message.contains("not followed"), "{message}");
    }
    assert_eq!(elsewhere.heads(), Vec::<String>::new(), "the other host is never contacted");
    assert_no_credentials(&origin.heads());
}

// === URL userinfo ===

const USERINFO_SECRET: &str = "s3cret-in-the-url";

fn assert_no_userinfo(message: &str) {
    for leaked in [USERINFO_SECRET, "s3cret%2Din-the-url", "tenant-user:"] {
        assert!(!message.contains(leaked), "`{leaked}` leaked: {message}");
    }
}

#[test]
fn url_userinfo_never_appears_in_an_error() {
    let (upstream, _repo) = super::tenant_repo();
    let protected = HttpGit::start_with_token(&upstream.root(), "another-token");
    let open = HttpGit::start(&upstream.root());
    let closed_port = {
        let listener = TcpListener::bind(loopback(0)).unwrap();
        listener.local_addr().unwrap().port()
    };
    let elsewhere = Recorder::asking_for_credentials();
    let redirecting = Recorder::redirecting_to(format!("http://127.0.0.1:{}", elsewhere.port));
    let with_userinfo =
        |port: u16, path: &str, secret: &str| format!("http://tenant-user:{secret}@127.0.0.1:{port}/{path}");
    let mut kinds = Vec::new();
    for secret in [USERINFO_SECRET, "s3cret%2Din-the-url"] {
        let cases = [
            (with_userinfo(closed_port, "tenant.git", secret), Reference::Branch("main".into())),
            (with_userinfo(protected.port(), "tenant.git", secret), Reference::Branch("main".into())),
            (with_userinfo(open.port(), "missing.git", secret), Reference::Branch("main".into())),
            (with_userinfo(open.port(), "tenant.git", secret), Reference::Branch("release".into())),
            (with_userinfo(redirecting.port, "tenant.git", secret), Reference::Branch("main".into())),
        ];
        for (url, reference) in cases {
            let cache = common::test_dir();
            let mut request = request(&url, Credentials::None);
            request.reference = reference;
            let error = fetch(cache.path(), &request, &limits()).unwrap_err();
            assert_no_userinfo(&error.to_string());
            kinds.push(error.kind);
        }
    }
    for kind in [
        FailureKind::Unreachable,
        FailureKind::AuthenticationFailed,
        FailureKind::RefNotFound,
        FailureKind::RedirectRefused,
    ] {
        assert!(kinds.contains(&kind), "{kind:?} was produced: {kinds:?}");
    }

    let out = cdtarget(&["render", &with_userinfo(closed_port, "tenant.git", USERINFO_SECRET)], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_no_userinfo(&String::from_utf8_lossy(&out.stderr));
    assert_no_userinfo(&String::from_utf8_lossy(&out.stdout));
}
