//! Smart HTTP(S): an in-process axum server around `git http-backend` (CGI), with token auth,
//! request counters and fault injection switchable while it runs.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt as _;
use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use super::process::loopback;
use super::server_thread::ServerThread;
use super::{TestDir, test_dir};

/// How the server answers, switchable at run time with [`HttpGit::set_mode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Serve every request through `git http-backend`.
    #[default]
    Normal,
    /// Accept every request and never answer; the connection stays open until the server is
    /// dropped.
    Stall,
    /// Serve normally, except that a `git-upload-pack` response carrying a pack (not a protocol
    /// v2 `ls-refs`) sends its status, headers and the first half of its body, then the
    /// connection is aborted.
    CloseMidBody,
    /// Answer every request with `500 Internal Server Error`.
    ServerError,
}

/// Requests received so far, counted before authentication and fault injection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Every request.
    pub total: usize,
    /// `GET .../info/refs` (ref advertisement).
    pub info_refs: usize,
    /// `POST .../git-upload-pack` (ls-refs and fetches).
    pub upload_pack: usize,
    /// `POST .../git-receive-pack` (pushes).
    pub receive_pack: usize,
    /// Requests rejected with 401 for a missing or wrong token.
    pub unauthorized: usize,
    /// Bytes of the response bodies `git http-backend` produced so far (the server's own error
    /// answers aside), counted when the response is built.
    pub response_bytes: u64,
}

/// Which certificate an HTTPS server presents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tls {
    /// Plain HTTP.
    #[default]
    None,
    /// A self-signed certificate for `127.0.0.1` and `localhost`; [`HttpGit::ca_pem`] is that
    /// certificate itself.
    SelfSigned,
    /// A certificate for `127.0.0.1` and `localhost` signed by a test CA;
    /// [`HttpGit::ca_pem`] is the CA, [`HttpGit::cert_pem`] the server's certificate.
    SignedByCa,
}

/// How to start an [`HttpGit`].
#[derive(Clone, Debug, Default)]
pub struct HttpOptions {
    /// When set, every request must carry HTTP Basic credentials with this password and any user
    /// name (GitLab's `oauth2:<token>`), or gets `401` with `WWW-Authenticate: Basic realm="git"`.
    pub token: Option<String>,
    /// Plain HTTP or HTTPS, and with which certificate.
    pub tls: Tls,
}

/// An HTTP(S) git server on `127.0.0.1:<port>` serving the bare repositories under a root
/// directory, in-process (own tokio runtime on a background thread, so it works from sync and
/// async tests alike). Push works too (`REMOTE_USER` is set). Stopped on drop: connections are
/// closed and running `git http-backend` processes killed.
pub struct HttpGit {
    port: u16,
    tls: Option<TlsFiles>,
    shared: Arc<Shared>,
    _server: ServerThread,
}

/// The certificate files of an HTTPS server (also used by `fake_azure_devops`).
pub(super) struct TlsFiles {
    /// Holds `ca.crt`, `tls.crt` and `tls.key`.
    pub(super) dir: TestDir,
    pub(super) ca_pem: String,
    pub(super) cert_pem: String,
}

struct Shared {
    root: PathBuf,
    mode: Mutex<Mode>,
    token: Mutex<Option<String>>,
    counts: Mutex<RequestCounts>,
    backend_log: Mutex<String>,
}

impl HttpGit {
    /// Plain HTTP, no authentication.
    pub fn start(root: &Path) -> HttpGit {
        HttpGit::start_with(root, HttpOptions::default())
    }

    /// Plain HTTP requiring HTTP Basic credentials whose password is `token`.
    pub fn start_with_token(root: &Path, token: &str) -> HttpGit {
        HttpGit::start_with(root, HttpOptions { token: Some(token.to_string()), ..HttpOptions::default() })
    }

    /// HTTPS with a self-signed certificate for `127.0.0.1` (see [`HttpGit::ca_pem`]).
    pub fn start_tls(root: &Path) -> HttpGit {
        HttpGit::start_with(root, HttpOptions { tls: Tls::SelfSigned, ..HttpOptions::default() })
    }

    /// Starts a server with `options`. The port is bound before this returns, so the server
    /// accepts connections at once. Panics when it cannot start (e.g. `openssl` missing for TLS).
    pub fn start_with(root: &Path, options: HttpOptions) -> HttpGit {
        let tls = match options.tls {
            Tls::None => None,
            kind => Some(generate_certificate(kind)),
        };
        let acceptor = tls.as_ref().map(|files| tls_acceptor(files.dir.path()));
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            mode: Mutex::new(Mode::Normal),
            token: Mutex::new(options.token),
            counts: Mutex::new(RequestCounts::default()),
            backend_log: Mutex::new(String::new()),
        });
        let listener = std::net::TcpListener::bind(loopback(0)).expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let port = listener.local_addr().expect("local address").port();
        let app = Router::new().fallback(handle).with_state(Arc::clone(&shared));
        let server =
            ServerThread::spawn(format!("http-git-{port}"), move |stopped| serve(listener, acceptor, app, stopped));
        HttpGit { port, tls, shared, _server: server }
    }

    /// The port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT/<name>` (`https://` with TLS), `name` relative to the served root.
    pub fn url(&self, name: &str) -> String {
        format!("{}://127.0.0.1:{}/{}", self.scheme(), self.port, name.trim_start_matches('/'))
    }

    /// [`url`](Self::url) with `user:password@` in it, e.g. `("oauth2", token)` for the git CLI.
    pub fn url_with_credentials(&self, name: &str, user: &str, password: &str) -> String {
        format!("{}://{user}:{password}@127.0.0.1:{}/{}", self.scheme(), self.port, name.trim_start_matches('/'))
    }

    /// Switches how the server answers from the next request on.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// How the server answers now.
    pub fn mode(&self) -> Mode {
        *self.shared.mode.lock().unwrap()
    }

    /// Requires `token` from the next request on (`None`: no authentication).
    pub fn set_required_token(&self, token: Option<&str>) {
        *self.shared.token.lock().unwrap() = token.map(str::to_string);
    }

    /// The requests received so far.
    pub fn counts(&self) -> RequestCounts {
        *self.shared.counts.lock().unwrap()
    }

    /// Sets every counter back to zero.
    pub fn reset_counts(&self) {
        *self.shared.counts.lock().unwrap() = RequestCounts::default();
    }

    /// For HTTPS: the PEM certificate a client must trust (the self-signed certificate itself,
    /// or the CA with [`Tls::SignedByCa`]).
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|files| files.ca_pem.as_str())
    }

    /// For HTTPS: [`ca_pem`](Self::ca_pem) as a file, e.g. for `git -c http.sslCAInfo=...` or
    /// `SSL_CERT_FILE`.
    pub fn ca_path(&self) -> Option<PathBuf> {
        self.tls.as_ref().map(|files| files.dir.path().join("ca.crt"))
    }

    /// For HTTPS: the server's own certificate (PEM), what a client pins.
    pub fn cert_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|files| files.cert_pem.as_str())
    }

    /// For HTTPS: the server's own certificate in DER, as libgit2's certificate callback sees it.
    pub fn cert_der(&self) -> Option<Vec<u8>> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let pem = self.cert_pem()?;
        Some(CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM certificate").to_vec())
    }

    /// What `git http-backend` wrote to stderr so far, for failure messages.
    pub fn backend_log(&self) -> String {
        self.shared.backend_log.lock().unwrap().clone()
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }
}

/// The server thread: runs until `stopped`, then drops the runtime, which cancels every
/// connection and request (stalled ones too) and kills their `git http-backend` processes.
fn serve(listener: std::net::TcpListener, acceptor: Option<TlsAcceptor>, app: Router, stopped: oneshot::Receiver<()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http-git-worker")
        .enable_all()
        .build()
        .expect("build the server runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
        match acceptor {
            None => {
                // TCP_NODELAY, as the web servers in front of real Git hosts set it (nginx's
                // `tcp_nodelay on`): else a response's second write waits for the client's
                // delayed acknowledgement of its first, 40 ms a request.
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                tokio::select! {
                    _ = async { axum::serve(listener, app).await } => {}
                    _ = stopped => {}
                }
            }
            Some(acceptor) => {
                let listener = TlsListener::new(listener, acceptor);
                tokio::select! {
                    _ = async { axum::serve(listener, app).await } => {}
                    _ = stopped => {}
                }
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
}

// === the handler ===

#[derive(Clone, Copy, PartialEq, Eq)]
enum PathKind {
    InfoRefs,
    UploadPack,
    ReceivePack,
    Other,
}

impl PathKind {
    fn of(path: &str) -> PathKind {
        if path.ends_with("/info/refs") {
            PathKind::InfoRefs
        } else if path.ends_with("/git-upload-pack") {
            PathKind::UploadPack
        } else if path.ends_with("/git-receive-pack") {
            PathKind::ReceivePack
        } else {
            PathKind::Other
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let kind = PathKind::of(request.uri().path());
    {
        let mut counts = shared.counts.lock().unwrap();
        counts.total += 1;
        match kind {
            PathKind::InfoRefs => counts.info_refs += 1,
            PathKind::UploadPack => counts.upload_pack += 1,
            PathKind::ReceivePack => counts.receive_pack += 1,
            PathKind::Other => {}
        }
    }
    let required_token = shared.token.lock().unwrap().clone();
    if let Some(token) = required_token
        && !carries_token(request.headers(), &token)
    {
        shared.counts.lock().unwrap().unauthorized += 1;
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Basic realm=\"git\"")], "token required\n")
            .into_response();
    }
    let mode = *shared.mode.lock().unwrap();
    match mode {
        Mode::Stall => return std::future::pending::<Response>().await,
        Mode::ServerError => return (StatusCode::INTERNAL_SERVER_ERROR, "injected server error\n").into_response(),
        Mode::Normal | Mode::CloseMidBody => {}
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("reading the request body: {e}\n")).into_response(),
    };
    let cut = mode == Mode::CloseMidBody && kind == PathKind::UploadPack && !contains(&body, b"command=ls-refs");
    let output = match run_http_backend(&shared, &parts, body).await {
        Ok(output) => output,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("git http-backend: {e}\n")).into_response(),
    };
    let (status, headers, body) = parse_cgi_output(&output);
    shared.counts.lock().unwrap().response_bytes += body.len() as u64;
    let mut response = if cut {
        let half = body.slice(..body.len().div_ceil(2));
        Response::new(Body::new(CutBody { first: Some(half), flushed: false }))
    } else {
        Response::new(Body::from(body))
    };
    *response.status_mut() = status;
    for (name, value) in headers {
        if cut && name == header::CONTENT_LENGTH {
            continue;
        }
        response.headers_mut().append(name, value);
    }
    response
}

fn carries_token(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let Some(encoded) = value.strip_prefix("Basic ") else { return false };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else { return false };
    String::from_utf8_lossy(&decoded).split_once(':').is_some_and(|(_user, password)| password == token)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

/// Runs `git http-backend` as a CGI script for one request and returns its whole stdout.
async fn run_http_backend(shared: &Shared, parts: &axum::http::request::Parts, body: Bytes) -> io::Result<Vec<u8>> {
    let header = |name: HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let mut child = tokio::process::Command::new("git")
        .args(["-c", "safe.directory=*", "http-backend"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env("GIT_PROJECT_ROOT", &shared.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header(header::CONTENT_TYPE))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header(header::CONTENT_ENCODING))
        .env("GIT_PROTOCOL", header(HeaderName::from_static("git-protocol")))
        .env("REMOTE_USER", "test")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    // Written concurrently with reading stdout: a large push body would otherwise deadlock.
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let error_reader = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text).await;
        text
    });
    let mut output = Vec::new();
    stdout.read_to_end(&mut output).await?;
    let _ = writer.await;
    let errors = error_reader.await.unwrap_or_default();
    child.wait().await?;
    if !errors.is_empty() {
        shared.backend_log.lock().unwrap().push_str(&String::from_utf8_lossy(&errors));
    }
    Ok(output)
}

/// Splits CGI output into the status (`Status:` header, 200 without one), the other headers and
/// the body.
fn parse_cgi_output(output: &[u8]) -> (StatusCode, Vec<(HeaderName, HeaderValue)>, Bytes) {
    let (head, body) = match find(output, b"\r\n\r\n") {
        Some(at) => (&output[..at], &output[at + 4..]),
        None => match find(output, b"\n\n") {
            Some(at) => (&output[..at], &output[at + 2..]),
            None => (&output[..0], output),
        },
    };
    let mut status = StatusCode::OK;
    let mut headers = Vec::new();
    for line in String::from_utf8_lossy(head).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().and_then(|code| code.parse::<u16>().ok());
            status = code.and_then(|code| StatusCode::from_u16(code).ok()).unwrap_or(StatusCode::BAD_GATEWAY);
        } else if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.trim()), HeaderValue::try_from(value)) {
            headers.push((name, value));
        }
    }
    (status, headers, Bytes::copy_from_slice(body))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// A response body that yields one chunk, lets the connection flush it, then fails, which makes
/// hyper abort the connection in the middle of the response.
struct CutBody {
    first: Option<Bytes>,
    flushed: bool,
}

impl http_body::Body for CutBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        if let Some(chunk) = self.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(chunk))));
        }
        if !self.flushed {
            // One pending poll: hyper flushes what it buffered before polling the body again.
            self.flushed = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Some(Err(io::Error::new(io::ErrorKind::ConnectionAborted, "injected: connection closed mid-body"))))
    }
}

// === TLS ===

/// Writes `ca.crt`, `tls.crt` and `tls.key` (ECDSA P-256, valid two days, for `IP:127.0.0.1` and
/// `DNS:localhost`) with the openssl CLI.
pub(super) fn generate_certificate(kind: Tls) -> TlsFiles {
    const EC_KEY: [&str; 5] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    const NAMES: &str = "subjectAltName=IP:127.0.0.1,DNS:localhost";
    let dir = test_dir();
    let path = |file: &str| dir.path().join(file).to_string_lossy().into_owned();
    let (ca_key, ca_crt, key, csr, crt) =
        (path("ca.key"), path("ca.crt"), path("tls.key"), path("tls.csr"), path("tls.crt"));
    match kind {
        Tls::SelfSigned => {
            openssl(
                &["req", "-x509"],
                &EC_KEY,
                &["-keyout", &key, "-out", &crt, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", NAMES],
            );
            std::fs::copy(&crt, &ca_crt).expect("copy the certificate");
        }
        Tls::SignedByCa => {
            openssl(
                &["req", "-x509"],
                &EC_KEY,
                &["-keyout", &ca_key, "-out", &ca_crt, "-days", "2", "-subj", "/CN=cdtarget test CA"],
            );
            openssl(&["req"], &EC_KEY, &["-keyout", &key, "-out", &csr, "-subj", "/CN=127.0.0.1"]);
            let extensions = path("leaf.ext");
            std::fs::write(
                &extensions,
                format!("{NAMES}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"),
            )
            .expect("write leaf.ext");
            openssl(
                &["x509", "-req", "-in", &csr, "-CA", &ca_crt, "-CAkey", &ca_key, "-CAcreateserial"],
                &[],
                &["-out", &crt, "-days", "2", "-extfile", &extensions],
            );
        }
        Tls::None => unreachable!("no certificate for plain HTTP"),
    }
    let ca_pem = std::fs::read_to_string(&ca_crt).expect("read ca.crt");
    let cert_pem = std::fs::read_to_string(&crt).expect("read tls.crt");
    TlsFiles { dir, ca_pem, cert_pem }
}

fn openssl(command: &[&str], key: &[&str], args: &[&str]) {
    let output = std::process::Command::new("openssl")
        .args(command)
        .args(key)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl (is it installed?)");
    assert!(output.status.success(), "openssl {}: {}", command.join(" "), String::from_utf8_lossy(&output.stderr));
}

/// For other HTTPS servers of the tests: a directory holding `ca.crt` (a new test CA) and
/// `tls.crt`/`tls.key` (a certificate it signed for `IP:127.0.0.1` and `DNS:localhost`), and a
/// TLS acceptor presenting that certificate.
pub fn signed_by_test_ca() -> (TestDir, TlsAcceptor) {
    let files = generate_certificate(Tls::SignedByCa);
    let acceptor = tls_acceptor(files.dir.path());
    (files.dir, acceptor)
}

pub(super) fn tls_acceptor(dir: &Path) -> TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = vec![CertificateDer::from_pem_file(dir.join("tls.crt")).expect("read tls.crt")];
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).expect("read tls.key");
    // An explicit provider: a test binary may link more than one, and then none is the default.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("TLS server configuration");
    TlsAcceptor::from(Arc::new(config))
}

/// An axum listener yielding TLS streams. Handshakes run in their own tasks, so a client that
/// stalls its handshake does not hold up the others.
pub(super) struct TlsListener {
    handshaken: mpsc::Receiver<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    address: SocketAddr,
}

impl TlsListener {
    pub(super) fn new(listener: tokio::net::TcpListener, acceptor: TlsAcceptor) -> TlsListener {
        let address = listener.local_addr().expect("local address");
        let (sender, handshaken) = mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else { continue };
                let _ = tcp.set_nodelay(true); // as the plain listener (see `serve`)
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = sender.send((tls, peer)).await;
                    }
                });
            }
        });
        TlsListener { handshaken, address }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(connection) => connection,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.address)
    }
}
