//! Self-tests of the test harnesses: the loopback git servers in `tests/common` (with the git
//! CLI as the client), the fake Azure DevOps (`fake_azure_devops`), and the replay of the fuzz
//! corpora (`fuzz_corpora`).

mod common;
mod fake_azure_devops;
mod fuzz_corpora;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::process::{loopback, process_running};
use common::{
    GitDaemon, HttpGit, HttpOptions, KeyKind, Mode, Sshd, Stalling, Upstream, git, git_ssh_command, skip_or_fail,
    test_dir,
};

/// Runs the git CLI in `dir` with extra environment variables; returns its output whatever the
/// exit status.
fn git_cli(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = common::git_command();
    command.current_dir(dir).args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run git")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Clones `url` into `dir/name` and returns the clone's HEAD sha, panicking with git's stderr.
fn clone_head(dir: &Path, name: &str, env: &[(&str, &str)], url: &str, extra: &[&str]) -> String {
    let args: Vec<&str> = ["clone", "--quiet"].iter().chain(extra).chain(&[url, name]).copied().collect();
    let output = git_cli(dir, env, &args);
    assert!(output.status.success(), "git clone {url} failed:\n{}", stderr(&output));
    git(&dir.join(name), &["rev-parse", "HEAD"])
}

/// An upstream with `app.git` holding one pushed commit on `main`; returns it and the sha.
fn upstream_with_app() -> (Upstream, String) {
    let upstream = Upstream::new();
    let repo = upstream.create("app.git");
    let sha = repo.commit_and_push(&[("deploy/app.yaml", "kind: ConfigMap\n")], "first");
    (upstream, sha)
}

// === Upstream ===

#[test]
fn upstream_commits_branches_tags_and_rewrites_history() {
    let upstream = Upstream::new();
    let repo = upstream.create("group/app.git");
    assert_eq!(repo.head("main"), None, "a new repository is empty");

    let first = repo.commit(&[("a.yaml", "a: 1\n"), ("dir/b.yaml", "b: 2\n")], "first");
    assert_eq!(first.len(), 40);
    assert_eq!(repo.head("main"), None, "a commit reaches the bare repository only when pushed");
    repo.push("main");
    assert_eq!(repo.head("main").as_deref(), Some(first.as_str()));

    repo.checkout("feature");
    let feature = repo.commit_and_push(&[("c.yaml", b"c: 3\n".as_slice())], "feature");
    assert_eq!(repo.head("feature").as_deref(), Some(feature.as_str()));
    repo.checkout("main");
    assert_eq!(repo.current_branch(), "main");

    let rewritten = repo.force_push_rewritten_history("feature");
    assert_ne!(rewritten, feature);
    assert_eq!(repo.head("feature").as_deref(), Some(rewritten.as_str()));
    let is_ancestor = git_cli(repo.bare_path(), &[], &["merge-base", "--is-ancestor", &feature, &rewritten]);
    assert!(!is_ancestor.status.success(), "the old tip is no longer in the rewritten history");
    assert_eq!(repo.current_branch(), "main", "the working clone is back on its branch");

    repo.delete_branch("feature");
    assert_eq!(repo.head("feature"), None);

    assert_eq!(repo.tag("v1"), first);
    assert_eq!(git(repo.bare_path(), &["rev-parse", "v1^{commit}"]), first);
    assert_eq!(repo.tag_annotated("v1-annotated", "release"), first);
    assert_eq!(git(repo.bare_path(), &["cat-file", "-t", "v1-annotated"]), "tag");

    let removed = repo.commit_and_push(&[] as &[(&str, &str)], "empty commit");
    assert_ne!(removed, first, "commits are made even when nothing changed");
    let removal = repo.remove_file("dir", "remove dir");
    repo.push("main");
    assert_eq!(git(repo.bare_path(), &["ls-tree", "--name-only", "-r", &removal]), "a.yaml");

    repo.set_default_branch("main");
    assert_eq!(git(repo.bare_path(), &["symbolic-ref", "HEAD"]), "refs/heads/main");
}

#[test]
fn large_random_commits_are_incompressible_and_distinct() {
    let upstream = Upstream::new();
    let repo = upstream.create("big.git");
    let one = repo.commit_large_random(1 << 20);
    let two = repo.commit_large_random(1 << 20);
    assert_ne!(one, two);
    repo.push("main");
    let first = std::fs::read(repo.work_path().join("large/random-0.bin")).unwrap();
    let second = std::fs::read(repo.work_path().join("large/random-1.bin")).unwrap();
    assert_eq!((first.len(), second.len()), (1 << 20, 1 << 20));
    assert_ne!(first, second);
    git(repo.bare_path(), &["gc", "--quiet"]);
    let sizes = git(repo.bare_path(), &["count-objects", "-v"]);
    let pack_kib: usize = sizes
        .lines()
        .find_map(|line| line.strip_prefix("size-pack: "))
        .and_then(|kib| kib.parse().ok())
        .expect("size-pack in count-objects");
    assert!(pack_kib >= 2 * 1024, "two random MiB do not compress: the pack has {pack_kib} KiB");
}

#[test]
fn file_urls_clone_with_the_git_cli() {
    let (upstream, sha) = upstream_with_app();
    let dir = test_dir();
    assert_eq!(clone_head(dir.path(), "clone", &[], &upstream.repo("app.git").file_url(), &[]), sha);
}

// === git:// ===

#[test]
fn git_daemon_serves_clones_and_shallow_clones() {
    let (upstream, sha) = upstream_with_app();
    upstream.repo("app.git").commit_and_push(&[("second.yaml", "x: 1\n")], "second");
    let daemon = GitDaemon::start(&upstream.root());
    let dir = test_dir();
    let head = clone_head(dir.path(), "full", &[], &daemon.url("app.git"), &[]);
    assert_eq!(git(&dir.path().join("full"), &["rev-list", "--count", "HEAD"]), "2");
    assert_eq!(head, upstream.repo("app.git").head("main").unwrap());
    clone_head(dir.path(), "shallow", &[], &daemon.url("app.git"), &["--depth", "1"]);
    assert_eq!(git(&dir.path().join("shallow"), &["rev-list", "--count", "HEAD"]), "1");
    assert!(daemon.connections() >= 2);
    let missing = git_cli(dir.path(), &[], &["clone", "--quiet", &daemon.url("missing.git"), "missing"]);
    assert!(!missing.status.success());
    let _ = sha;
}

#[test]
fn git_daemon_kills_its_processes_when_dropped() {
    let (upstream, _) = upstream_with_app();
    let daemon = GitDaemon::start(&upstream.root());
    // A connection that never sends its request keeps one daemon process waiting.
    let _idle = TcpStream::connect(loopback(daemon.port())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids = loop {
        let pids = daemon.running_pids();
        if !pids.is_empty() || Instant::now() > deadline {
            break pids;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(pids.len(), 1, "one daemon for the idle connection");
    drop(daemon);
    assert!(pids.iter().all(|&pid| !process_running(pid)), "daemon processes are gone after drop");
}

// === smart HTTP ===

#[test]
fn http_serves_clones_shallow_clones_and_pushes_and_counts_requests() {
    let (upstream, sha) = upstream_with_app();
    let http = HttpGit::start(&upstream.root());
    let dir = test_dir();
    assert_eq!(clone_head(dir.path(), "clone", &[], &http.url("app.git"), &[]), sha);
    let counts = http.counts();
    assert!(counts.info_refs >= 1 && counts.upload_pack >= 1, "{counts:?}");
    assert_eq!(counts.total, counts.info_refs + counts.upload_pack);

    clone_head(dir.path(), "shallow", &[], &http.url("app.git"), &["--depth", "1"]);
    assert_eq!(git(&dir.path().join("shallow"), &["rev-list", "--count", "HEAD"]), "1");

    let clone = dir.path().join("clone");
    std::fs::write(clone.join("pushed.yaml"), "y: 2\n").unwrap();
    git(&clone, &["add", "pushed.yaml"]);
    git(&clone, &["commit", "--quiet", "-m", "pushed over http"]);
    let pushed = git(&clone, &["rev-parse", "HEAD"]);
    let push = git_cli(&clone, &[], &["push", "--quiet", "origin", "main"]);
    assert!(push.status.success(), "push over http failed:\n{}\n{}", stderr(&push), http.backend_log());
    assert_eq!(upstream.repo("app.git").head("main"), Some(pushed));
    assert!(http.counts().receive_pack >= 1);

    http.reset_counts();
    assert_eq!(http.counts(), common::RequestCounts::default());
}

#[test]
fn http_with_a_token_rejects_clients_without_it() {
    let (upstream, sha) = upstream_with_app();
    let http = HttpGit::start_with_token(&upstream.root(), "s3cret");
    let dir = test_dir();

    let anonymous = git_cli(dir.path(), &[], &["clone", "--quiet", &http.url("app.git"), "anonymous"]);
    assert!(!anonymous.status.success());
    assert!(http.counts().unauthorized >= 1);
    let wrong = git_cli(
        dir.path(),
        &[],
        &["clone", "--quiet", &http.url_with_credentials("app.git", "oauth2", "wrong"), "wrong"],
    );
    assert!(!wrong.status.success());

    let url = http.url_with_credentials("app.git", "oauth2", "s3cret");
    assert_eq!(clone_head(dir.path(), "authorized", &[], &url, &[]), sha);

    // The 401 itself, with the challenge git clients answer.
    let response = raw_http(http.port(), "GET /app.git/info/refs?service=git-upload-pack HTTP/1.1\r\n", "");
    assert!(response.starts_with(b"HTTP/1.1 401"), "{}", String::from_utf8_lossy(&response));
    assert!(String::from_utf8_lossy(&response).to_lowercase().contains("www-authenticate: basic realm=\"git\""));

    http.set_required_token(None);
    assert_eq!(clone_head(dir.path(), "open", &[], &http.url("app.git"), &[]), sha);
}

#[test]
fn http_faults_close_mid_body_stall_and_server_error() {
    let (upstream, sha) = upstream_with_app();
    upstream.repo("app.git").commit_large_random(256 * 1024);
    let http = HttpGit::start(&upstream.root());
    let dir = test_dir();

    http.set_mode(Mode::CloseMidBody);
    let cut = git_cli(dir.path(), &[], &["clone", "--quiet", &http.url("app.git"), "cut"]);
    assert!(!cut.status.success(), "a clone whose pack is cut off fails");
    // On the wire: status, headers and part of the body, then the connection ends without the
    // final chunk.
    let request = upload_pack_request(&upstream.repo("app.git").head("main").unwrap());
    let response = raw_http(http.port(), "POST /app.git/git-upload-pack HTTP/1.1\r\n", &request);
    let (head, body) = split_response(&response);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/x-git-upload-pack-result"), "{head}");
    assert!(!body.is_empty(), "part of the body arrives");
    assert!(!body.ends_with(b"0\r\n\r\n"), "the chunked body never ends");
    http.set_mode(Mode::Normal);
    let full = raw_http(http.port(), "POST /app.git/git-upload-pack HTTP/1.1\r\n", &request);
    let full_body = split_response(&full).1;
    assert!(body.len() < full_body.len() * 3 / 4, "only part of the pack: {} of {} bytes", body.len(), full_body.len());

    http.set_mode(Mode::ServerError);
    let failed = git_cli(dir.path(), &[], &["clone", "--quiet", &http.url("app.git"), "failed"]);
    assert!(!failed.status.success());
    assert!(stderr(&failed).contains("500"), "{}", stderr(&failed));

    http.set_mode(Mode::Stall);
    let mut stalled = TcpStream::connect(loopback(http.port())).unwrap();
    stalled.write_all(b"GET /app.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    stalled.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut buffer = [0u8; 64];
    let waited = stalled.read(&mut buffer);
    assert!(waited.is_err(), "a stalled request gets no answer: {waited:?}");
    let counted = http.counts().total;

    http.set_mode(Mode::Normal);
    assert_eq!(
        clone_head(dir.path(), "recovered", &[], &http.url("app.git"), &[]),
        upstream.repo("app.git").head("main").unwrap()
    );
    assert!(http.counts().total > counted);
    let _ = sha;

    // Dropping the server closes the stalled connection.
    drop(http);
    stalled.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let after_drop = stalled.read(&mut buffer);
    assert!(matches!(after_drop, Ok(0)) || after_drop.is_err(), "{after_drop:?}");
    assert!(!matches!(&after_drop, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));
}

#[test]
fn https_with_a_self_signed_or_ca_signed_certificate() {
    let (upstream, sha) = upstream_with_app();
    let dir = test_dir();
    for tls in [common::Tls::SelfSigned, common::Tls::SignedByCa] {
        let https = HttpGit::start_with(&upstream.root(), HttpOptions { token: Some("t0ken".into()), tls });
        let url = https.url_with_credentials("app.git", "oauth2", "t0ken");
        assert!(url.starts_with("https://oauth2:t0ken@127.0.0.1:"));
        let name = format!("{tls:?}");
        let untrusted = git_cli(dir.path(), &[], &["clone", "--quiet", &url, &format!("{name}-untrusted")]);
        assert!(!untrusted.status.success(), "the certificate is not trusted by default");
        let ca = https.ca_path().unwrap();
        let trusted = [("GIT_SSL_CAINFO", ca.to_str().unwrap())];
        assert_eq!(clone_head(dir.path(), &name, &trusted, &url, &[]), sha);
        assert!(https.ca_pem().unwrap().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(https.cert_der().unwrap()[0], 0x30, "DER starts with a SEQUENCE");
        if tls == common::Tls::SignedByCa {
            assert_ne!(https.ca_pem(), https.cert_pem());
        } else {
            assert_eq!(https.ca_pem(), https.cert_pem());
        }
    }
}

#[tokio::test]
async fn http_git_works_from_an_async_test() {
    let (upstream, _) = upstream_with_app();
    let http = HttpGit::start(&upstream.root());
    let mut stream = tokio::net::TcpStream::connect(loopback(http.port())).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET /app.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
    assert_eq!(http.counts().info_refs, 1);
    drop(http);
}

/// A protocol v0 upload-pack request for `want` without capabilities.
fn upload_pack_request(want: &str) -> String {
    format!("0032want {want}\n00000009done\n")
}

/// Sends one HTTP/1.1 request (`request_line` ends with CRLF) with `body` and reads until the
/// server closes the connection.
fn raw_http(port: u16, request_line: &str, body: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(loopback(port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let content_type = if body.is_empty() { "" } else { "Content-Type: application/x-git-upload-pack-request\r\n" };
    write!(
        stream,
        "{request_line}Host: 127.0.0.1\r\nConnection: close\r\n{content_type}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    let mut buffer = [0u8; 64 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buffer[..n]),
            // A reset after the partial body ends the response too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the response: {e}"),
        }
    }
    response
}

fn split_response(response: &[u8]) -> (String, Vec<u8>) {
    let at = response.windows(4).position(|w| w == b"\r\n\r\n").expect("end of the response headers");
    (String::from_utf8_lossy(&response[..at]).into_owned(), response[at + 4..].to_vec())
}

// === stalling ===

#[test]
fn stalling_server_accepts_and_never_answers() {
    let stalling = Stalling::start();
    let mut stream = TcpStream::connect(loopback(stalling.port())).unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    assert!(stream.read(&mut [0u8; 16]).is_err(), "no answer");
    assert_eq!(stalling.accepted(), 1);
    assert!(stalling.url("ssh").starts_with("ssh://git@127.0.0.1:"));
    assert!(stalling.url("git").ends_with("/stalled.git"));
    drop(stalling);
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(stream.read(&mut [0u8; 16]), Ok(0) | Err(_)), "closed when dropped");
}

// === ssh ===

#[test]
fn sshd_serves_clones_and_pushes_to_every_unencrypted_key_kind() {
    let Some(sshd) = skip_or_fail("sshd_serves_clones", Sshd::start()) else { return };
    let (upstream, sha) = upstream_with_app();
    let repo = upstream.repo("app.git");
    let dir = test_dir();
    let known_hosts = sshd.known_hosts_file();
    let url = sshd.url(repo.bare_path());
    assert_eq!(url, format!("ssh://{}@127.0.0.1:{}{}", sshd.user(), sshd.port(), repo.bare_path().display()));

    for kind in [KeyKind::Ed25519, KeyKind::RsaPem, KeyKind::RsaOpenSsh, KeyKind::EcdsaP256] {
        let ssh = git_ssh_command(&sshd.client_key(kind), &known_hosts);
        let head = clone_head(dir.path(), &format!("{kind:?}"), &[("GIT_SSH_COMMAND", &ssh)], &url, &[]);
        assert_eq!(head, sha, "{kind:?}\n{}", sshd.log());
    }
    let ssh = git_ssh_command(&sshd.client_key(KeyKind::Ed25519), &known_hosts);
    clone_head(dir.path(), "shallow", &[("GIT_SSH_COMMAND", &ssh)], &url, &["--depth", "1"]);

    // Push over ssh.
    let clone = dir.path().join("Ed25519");
    std::fs::write(clone.join("pushed.yaml"), "z: 3\n").unwrap();
    git(&clone, &["add", "pushed.yaml"]);
    git(&clone, &["commit", "--quiet", "-m", "pushed over ssh"]);
    let push = git_cli(&clone, &[("GIT_SSH_COMMAND", &ssh)], &["push", "--quiet", "origin", "main"]);
    assert!(push.status.success(), "push over ssh failed:\n{}", stderr(&push));
    assert_eq!(repo.head("main"), Some(git(&clone, &["rev-parse", "HEAD"])));

    // The key formats are what their names say.
    assert!(sshd.client_key(KeyKind::RsaPem).private_key_pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    for kind in [KeyKind::Ed25519, KeyKind::RsaOpenSsh, KeyKind::EcdsaP256, KeyKind::Ed25519Passphrase] {
        assert!(sshd.client_key(kind).private_key_pem.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"), "{kind:?}");
    }
    assert!(sshd.client_key(KeyKind::EcdsaP256).public_key.starts_with("ecdsa-sha2-nistp256 "));
    // The passphrase opens the encrypted key (the CLI cannot be given one in batch mode).
    let encrypted = sshd.client_key(KeyKind::Ed25519Passphrase);
    assert_eq!(encrypted.passphrase.as_deref(), Some("sekret"));
    let public = std::process::Command::new("ssh-keygen")
        .args(["-y", "-P", "sekret", "-f"])
        .arg(&encrypted.path)
        .output()
        .unwrap();
    assert!(public.status.success(), "{}", stderr(&public));
    let derived = String::from_utf8_lossy(&public.stdout);
    assert!(encrypted.public_key.starts_with(derived.trim()), "{derived} vs {}", encrypted.public_key);
}

#[test]
fn sshd_rejects_unauthorized_keys_and_commands_other_than_git() {
    let Some(sshd) = skip_or_fail("sshd_rejects", Sshd::start()) else { return };
    let (upstream, _) = upstream_with_app();
    let dir = test_dir();
    let known_hosts = sshd.known_hosts_file();
    let url = sshd.url(upstream.repo("app.git").bare_path());

    let ssh = git_ssh_command(&sshd.an_unauthorized_key(), &known_hosts);
    let rejected = git_cli(dir.path(), &[("GIT_SSH_COMMAND", &ssh)], &["clone", "--quiet", &url, "rejected"]);
    assert!(!rejected.status.success());
    assert!(stderr(&rejected).contains("Permission denied"), "{}", stderr(&rejected));

    let ssh = git_ssh_command(&sshd.client_key(KeyKind::Ed25519), &known_hosts);
    let mut command: Vec<String> = ssh.split_whitespace().map(str::to_string).collect();
    command.extend(["-p".into(), sshd.port().to_string(), format!("{}@127.0.0.1", sshd.user()), "id".into()]);
    let shell = std::process::Command::new(&command[0]).args(&command[1..]).output().unwrap();
    assert!(!shell.status.success(), "only git commands run");
    assert!(stderr(&shell).contains("unrecognized command"), "{}", stderr(&shell));
}

#[test]
fn sshd_restarted_with_a_new_host_key_fails_the_old_known_hosts() {
    let Some(mut sshd) = skip_or_fail("sshd_restarted", Sshd::start()) else { return };
    let (upstream, sha) = upstream_with_app();
    let dir = test_dir();
    let old_line = sshd.known_hosts();
    let host_key = sshd.host_public_key();
    assert!(old_line.starts_with(&format!("[127.0.0.1]:{} ssh-ed25519 AAAA", sshd.port())), "{old_line}");
    assert!(sshd.host_key_fingerprint().starts_with("SHA256:"));
    let old_known_hosts = dir.path().join("old_known_hosts");
    std::fs::write(&old_known_hosts, format!("{old_line}\n")).unwrap();
    let key = sshd.client_key(KeyKind::Ed25519);
    let (old_pid, old_port) = (sshd.pid(), sshd.port());

    let port = sshd.restart_with_new_host_key().expect("restart");
    assert_eq!(port, sshd.port());
    if port != old_port {
        eprintln!("note: sshd could not bind port {old_port} again and moved to {port}");
    }
    assert!(!process_running(old_pid), "the old sshd is gone");
    assert_ne!(sshd.host_public_key(), host_key);
    let url = sshd.url(upstream.repo("app.git").bare_path());
    // The old line names the same host and port (unless the port had to change) with the old key.
    let old_ssh = git_ssh_command(&key, &old_known_hosts);
    let refused = git_cli(dir.path(), &[("GIT_SSH_COMMAND", &old_ssh)], &["clone", "--quiet", &url, "refused"]);
    assert!(!refused.status.success(), "the old known_hosts no longer matches");
    assert!(stderr(&refused).contains("Host key verification failed"), "{}", stderr(&refused));

    let new_ssh = git_ssh_command(&key, &sshd.known_hosts_file());
    assert_eq!(clone_head(dir.path(), "accepted", &[("GIT_SSH_COMMAND", &new_ssh)], &url, &[]), sha);
}

#[test]
fn sshd_is_gone_after_drop() {
    let Some(sshd) = skip_or_fail("sshd_is_gone_after_drop", Sshd::start()) else { return };
    let pid = sshd.pid();
    assert!(process_running(pid));
    // An open connection has its own sshd process, which goes too.
    let mut connection = TcpStream::connect(loopback(sshd.port())).unwrap();
    let mut banner = [0u8; 8];
    connection.read_exact(&mut banner).unwrap();
    assert_eq!(&banner, b"SSH-2.0-");
    let children = common::process::children_of(pid);
    drop(sshd);
    assert!(!process_running(pid), "sshd {pid} still exists after drop");
    assert!(children.iter().all(|&child| !process_running(child)), "connection processes are gone");
}

// === libgit2, the client of the source module ===

/// How a libgit2 clone authenticates and checks the server.
enum Git2Client<'a> {
    Anonymous,
    Token(&'a str),
    PinnedCertificate(Vec<u8>),
    Ssh { key: &'a common::ClientKey, host_key: Vec<u8> },
}

fn git2_clone(url: &str, into: &Path, client: &Git2Client<'_>) -> Result<String, git2::Error> {
    let mut callbacks = git2::RemoteCallbacks::new();
    let mut attempts = 0;
    callbacks.credentials(|_url, user, _allowed| {
        attempts += 1;
        if attempts > 3 {
            return Err(git2::Error::from_str("credentials rejected 3 times"));
        }
        match client {
            Git2Client::Token(token) => git2::Cred::userpass_plaintext("oauth2", token),
            Git2Client::Ssh { key, .. } => git2::Cred::ssh_key_from_memory(
                user.unwrap_or("git"),
                None,
                &key.private_key_pem,
                key.passphrase.as_deref(),
            ),
            _ => Err(git2::Error::from_str("no credentials")),
        }
    });
    callbacks.certificate_check(|cert, _host| match client {
        Git2Client::Ssh { host_key, .. } => match cert.as_hostkey().and_then(|key| key.hostkey()) {
            Some(presented) if presented == host_key.as_slice() => Ok(git2::CertificateCheckStatus::CertificateOk),
            _ => Err(git2::Error::from_str("host key mismatch")),
        },
        Git2Client::PinnedCertificate(der) => match cert.as_x509() {
            Some(presented) if presented.data() == der.as_slice() => Ok(git2::CertificateCheckStatus::CertificateOk),
            _ => Err(git2::Error::from_str("certificate mismatch")),
        },
        _ => Ok(git2::CertificateCheckStatus::CertificatePassthrough),
    });
    let mut fetch = git2::FetchOptions::new();
    fetch.remote_callbacks(callbacks);
    let repo = git2::build::RepoBuilder::new().fetch_options(fetch).clone(url, into)?;
    let head = repo.head()?.target().expect("HEAD points at a commit");
    Ok(head.to_string())
}

#[test]
fn libgit2_clones_from_every_server() {
    let (upstream, sha) = upstream_with_app();
    let repo = upstream.repo("app.git");
    let dir = test_dir();

    let daemon = GitDaemon::start(&upstream.root());
    assert_eq!(git2_clone(&daemon.url("app.git"), &dir.path().join("git"), &Git2Client::Anonymous).unwrap(), sha);

    let http = HttpGit::start_with_token(&upstream.root(), "t0ken");
    let url = http.url("app.git");
    assert_eq!(git2_clone(&url, &dir.path().join("http"), &Git2Client::Token("t0ken")).unwrap(), sha);
    let wrong = git2_clone(&url, &dir.path().join("http-wrong"), &Git2Client::Token("wrong"));
    assert!(wrong.is_err());
    http.set_mode(Mode::CloseMidBody);
    let cut = git2_clone(&url, &dir.path().join("http-cut"), &Git2Client::Token("t0ken"));
    assert!(cut.is_err(), "a pack cut off mid-body fails the clone");

    let https = HttpGit::start_tls(&upstream.root());
    let pinned = Git2Client::PinnedCertificate(https.cert_der().unwrap());
    assert_eq!(git2_clone(&https.url("app.git"), &dir.path().join("https"), &pinned).unwrap(), sha);
    let unpinned = git2_clone(&https.url("app.git"), &dir.path().join("https-unpinned"), &Git2Client::Anonymous);
    assert!(unpinned.is_err(), "a self-signed certificate is not trusted by default");

    let Some(sshd) = skip_or_fail("libgit2_clones_from_every_server (ssh)", Sshd::start()) else { return };
    use base64::Engine;
    let blob = sshd.host_public_key().split_whitespace().nth(1).unwrap().to_string();
    let host_key = base64::engine::general_purpose::STANDARD.decode(blob).unwrap();
    for kind in KeyKind::ALL {
        let key = sshd.client_key(kind);
        let client = Git2Client::Ssh { key: &key, host_key: host_key.clone() };
        let into = dir.path().join(format!("ssh-{kind:?}"));
        let head = git2_clone(&sshd.url(repo.bare_path()), &into, &client);
        assert_eq!(head.as_deref().ok(), Some(sha.as_str()), "{kind:?}: {head:?}\n{}", sshd.log());
    }
    let stranger = sshd.an_unauthorized_key();
    let client = Git2Client::Ssh { key: &stranger, host_key };
    assert!(git2_clone(&sshd.url(repo.bare_path()), &dir.path().join("ssh-stranger"), &client).is_err());
}
