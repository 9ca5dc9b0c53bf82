//! KEDA's own operator (`github.com/kedacore/keda/v2/cmd/operator`), built from the Go modules
//! `hack/tools/keda-v2.21` and `hack/tools/keda-v2.20`, running as a process of the test against
//! a control plane of `control_plane`.
//!
//! ```text
//! let cluster = ControlPlane::start_with(&Options { job_controller: true, ..Options::default() })?;
//! let keda = KedaOperator::start(&cluster, KedaRelease::V2_21_0, &KedaOptions::default())?;
//! // ... create a ScaledJob; KEDA polls its scaler and creates Jobs ...
//! let value = keda.scaler_metrics_value(Scaled::Job, "ns", "name", 0);
//! ```
//!
//! * **Build**: [`GoBuild::tool`] into `<cache>/cdtarget/keda-operator/<version>-<hash>/`, once
//!   per machine and pin (progress lines on stderr; without Go a SKIP, a failure under `CI`).
//! * **CRDs**: every `config/crd/bases/*.yaml` of the release's module (found with
//!   `go mod download -json` in the tool module, read from the module cache, never copied into
//!   the repository), applied server-side with kubectl and waited for until Established. The
//!   two `eventing.keda.sh` kinds are applied too: the operator watches them and its manager
//!   does not start without them. CRDs are cluster-scoped: one release per control plane.
//! * **Process**: the admin kubeconfig (`--kubeconfig`), leader election off, certificate
//!   rotation off (it patches a Secret, webhooks and an APIService of a cluster-side install);
//!   the gRPC metrics service (for KEDA's metrics API server, not run here) still starts and needs
//!   `ca.crt`, `tls.crt` and `tls.key` in `--cert-dir`: a self-signed pair made with openssl.
//!   Every listener binds `127.0.0.1:0`; the ports are read back from the process (see
//!   [`KedaOperator::start`]). Its own process group, SIGKILLed on drop.
//! * **Up** means: `/readyz` on the probe address answers `ok`, the metrics endpoint serves, and
//!   the ScaledObject and ScaledJob controllers logged `Starting workers` (their caches synced).

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::HarnessError;
use super::control_plane::{ControlPlane, until_appended};
use super::go_build::GoBuild;
use super::process::{find_on_path, process_running};

/// How long the operator may take from its start to being up (`Starting workers`).
const UP_DEADLINE: Duration = Duration::from_secs(120);

/// The KEDA releases the tests can run, each pinned by a Go module of `hack/tools/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KedaRelease {
    /// `github.com/kedacore/keda/v2 v2.21.0` (`hack/tools/keda-v2.21`).
    V2_21_0,
    /// `github.com/kedacore/keda/v2 v2.20.2` (`hack/tools/keda-v2.20`).
    V2_20_2,
}

impl KedaRelease {
    /// The module version, `v2.21.0`.
    pub fn version(self) -> &'static str {
        match self {
            KedaRelease::V2_21_0 => "v2.21.0",
            KedaRelease::V2_20_2 => "v2.20.2",
        }
    }

    /// The Go module of this repository that pins it, relative to the crate root.
    pub fn module(self) -> &'static str {
        match self {
            KedaRelease::V2_21_0 => "hack/tools/keda-v2.21",
            KedaRelease::V2_20_2 => "hack/tools/keda-v2.20",
        }
    }

    /// The build of its operator: `<cache>/cdtarget/keda-operator/<version>-<hash of go.mod and
    /// go.sum>/keda-operator`.
    pub fn build(self) -> GoBuild {
        let mut build = GoBuild::tool("keda-operator", self.module(), "github.com/kedacore/keda/v2/cmd/operator");
        build.key_prefix = self.version().into();
        // What KEDA's release build sets (its Makefile's GO_LDFLAGS): the version in its welcome
        // line, `keda_build_info` and the `app.kubernetes.io/version` label of the Jobs it creates.
        let version = self.version().trim_start_matches('v');
        build.ldflags = Some(format!("-X=github.com/kedacore/keda/v2/version.Version={version}"));
        // Measured on this project's machines (2 cores shared with other builds): v2.21.0 cold,
        // Go build cache empty for its dependencies.
        build.cold_estimate = "8-9 minutes (800 s of CPU, 3.4 GB of memory)".into();
        build
    }

    /// The operator binary, from the cache or built now.
    pub fn binary(self) -> Result<PathBuf, HarnessError> {
        self.build().binary()
    }

    /// KEDA's module in the Go module cache (`go mod download -json` in the tool module, which
    /// downloads it when it is not there yet).
    pub fn source_dir(self) -> Result<PathBuf, HarnessError> {
        let go = find_on_path("go").ok_or_else(|| {
            HarnessError::Unavailable(format!("Go is not installed: KEDA {} comes from it", self.version()))
        })?;
        let module = self.build().module_dir();
        let output = Command::new(go)
            .args(["mod", "download", "-json", &format!("github.com/kedacore/keda/v2@{}", self.version())])
            .current_dir(&module)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failed(format!("go mod download in {}: {e}", module.display())))?;
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
            failed(format!(
                "go mod download -json in {} ({}): {e}\n{}",
                module.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        })?;
        match answer["Dir"].as_str() {
            Some(dir) if output.status.success() => Ok(PathBuf::from(dir)),
            _ => Err(failed(format!("go mod download of KEDA {}: {answer}", self.version()))),
        }
    }

    /// The CRD files of the release: every `config/crd/bases/*.yaml` of its module, sorted.
    pub fn crd_files(self) -> Result<Vec<PathBuf>, HarnessError> {
        let bases = self.source_dir()?.join("config/crd/bases");
        let mut files: Vec<PathBuf> = fs::read_dir(&bases)
            .map_err(|e| failed(format!("{}: {e}", bases.display())))?
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(failed(format!("no CRDs in {}", bases.display())));
        }
        Ok(files)
    }

    /// Applies the release's CRDs to `cluster` (server-side: the biggest is too large for the
    /// last-applied annotation of a client-side apply) and waits until they are Established.
    /// Returns their names (`scaledjobs.keda.sh`, ...).
    pub fn install_crds(self, cluster: &ControlPlane) -> Result<Vec<String>, HarnessError> {
        if find_on_path("kubectl").is_none() {
            return Err(HarnessError::Unavailable("kubectl is not installed (it applies KEDA's CRDs)".into()));
        }
        let files = self.crd_files()?;
        // `<group>_<plural>.yaml`, as controller-gen names them.
        let names: Vec<String> = files
            .iter()
            .filter_map(|file| {
                let stem = file.file_stem()?.to_str()?;
                let (group, plural) = stem.split_once('_')?;
                Some(format!("{plural}.{group}"))
            })
            .collect();
        let mut apply = vec!["apply", "--server-side", "--force-conflicts", "--field-manager=cdtarget-test-keda"];
        for file in &files {
            apply.push("-f");
            apply.push(file.to_str().ok_or_else(|| failed("a CRD path is not UTF-8"))?);
        }
        kubectl_ok(cluster, &apply)?;
        let crds: Vec<String> = names.iter().map(|name| format!("crd/{name}")).collect();
        let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        wait.extend(crds.iter().map(String::as_str));
        kubectl_ok(cluster, &wait)?;
        Ok(names)
    }
}

/// How an operator is started.
#[derive(Clone, Debug)]
pub struct KedaOptions {
    /// KEDA's own namespace (created if missing): `POD_NAMESPACE` and
    /// `KEDA_CLUSTER_OBJECT_NAMESPACE`, where it reads the Secrets of ClusterTriggerAuthentications.
    pub namespace: String,
    /// `WATCH_NAMESPACE`: the namespaces whose ScaledObjects and ScaledJobs it handles, comma
    /// separated; empty for all.
    pub watch_namespace: String,
    /// A CA certificate (PEM file) the scalers' HTTPS clients trust beside the machine's CAs:
    /// `SSL_CERT_FILE` is pointed at a bundle of both (Go reads its system pool from there, and
    /// KEDA's HTTP clients start from the system pool).
    pub extra_ca: Option<PathBuf>,
    /// More environment (`KEDA_HTTP_DEFAULT_TIMEOUT`, ...).
    pub env: Vec<(String, String)>,
}

impl Default for KedaOptions {
    fn default() -> KedaOptions {
        KedaOptions { namespace: "keda".into(), watch_namespace: String::new(), extra_ca: None, env: Vec::new() }
    }
}

/// Which kind of scaled resource a scaler metric is about (the `type` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaled {
    /// A ScaledObject (`type="scaledobject"`).
    Object,
    /// A ScaledJob (`type="scaledjob"`).
    Job,
}

/// A running KEDA operator (killed with its process group on drop).
pub struct KedaOperator {
    child: Child,
    dir: tempfile::TempDir,
    release: KedaRelease,
    namespace: String,
    probe: SocketAddr,
    metrics: SocketAddr,
}

impl KedaOperator {
    /// Builds the operator of `release` if needed, installs its CRDs on `cluster`, creates its
    /// namespace and runs it with the admin kubeconfig until it is up.
    ///
    /// Ports: every listener (metrics, health probe, gRPC metrics service) binds `127.0.0.1:0`, so
    /// the OS picks a free port and nothing races for it. The probe's port is read from the
    /// operator's log (controller-runtime logs `starting server` with the listener's actual
    /// address); the metrics server logs only the address it was given, so its port is read from
    /// the process's listening sockets (`/proc/<pid>/fd` and `/proc/<pid>/net/tcp`): the one that
    /// is not the probe and answers `GET /metrics`.
    pub fn start(
        cluster: &ControlPlane,
        release: KedaRelease,
        options: &KedaOptions,
    ) -> Result<KedaOperator, HarnessError> {
        let binary = release.binary()?;
        let openssl = find_on_path("openssl").ok_or_else(|| {
            HarnessError::Unavailable("openssl is not installed (the certificate of KEDA's gRPC service)".into())
        })?;
        release.install_crds(cluster)?;
        ensure_namespace(cluster, &options.namespace)?;

        let dir = tempfile::Builder::new()
            .prefix("cdtarget-keda-")
            .tempdir()
            .map_err(|e| failed(format!("temporary directory: {e}")))?;
        let certs = dir.path().join("certs");
        write_grpc_certificates(&openssl, &certs)?;
        let log_path = dir.path().join("operator.log");
        let log = fs::File::create(&log_path).map_err(failed)?;

        let mut command = Command::new(&binary);
        command
            .arg(format!("--kubeconfig={}", cluster.admin_kubeconfig().display()))
            .arg("--leader-elect=false")
            .arg("--enable-cert-rotation=false")
            .arg(format!("--cert-dir={}", certs.display()))
            // An empty directory of the test: the machine's /custom/ca (the default) never counts.
            .arg(format!("--ca-dir={}", dir.path().join("custom-ca").display()))
            .arg("--metrics-bind-address=127.0.0.1:0")
            .arg("--health-probe-bind-address=127.0.0.1:0")
            .arg("--metrics-service-bind-address=127.0.0.1:0")
            .arg("--zap-encoder=json")
            .env_remove("KUBECONFIG")
            .env("WATCH_NAMESPACE", &options.watch_namespace)
            .env("POD_NAMESPACE", &options.namespace)
            .env("KEDA_CLUSTER_OBJECT_NAMESPACE", &options.namespace)
            .envs(options.env.iter().map(|(name, value)| (name, value)))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(failed)?)
            .stderr(log);
        if let Some(ca) = &options.extra_ca {
            command.env("SSL_CERT_FILE", write_ca_bundle(dir.path(), ca)?);
        }
        // Its own process group: the drop kills the group.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let started = Instant::now();
        let child = command.spawn().map_err(|e| failed(format!("spawn {}: {e}", binary.display())))?;
        let unspecified = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut operator = KedaOperator {
            child,
            dir,
            release,
            namespace: options.namespace.clone(),
            probe: unspecified,
            metrics: unspecified,
        };
        operator.await_up()?;
        report(&format!(
            "KEDA operator {} up in {:.1} s (probe {}, metrics {}); log {}",
            release.version(),
            started.elapsed().as_secs_f64(),
            operator.probe,
            operator.metrics,
            operator.log().display()
        ));
        Ok(operator)
    }

    /// The release running.
    pub fn release(&self) -> KedaRelease {
        self.release
    }

    /// KEDA's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The operator's PID (also its process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the health probe serves (`/healthz`, `/readyz`).
    pub fn probe_address(&self) -> SocketAddr {
        self.probe
    }

    /// Where the Prometheus metrics are served (`/metrics`).
    pub fn metrics_address(&self) -> SocketAddr {
        self.metrics
    }

    /// The operator's log (stdout and stderr; JSON lines of zap, and klog's lines).
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("operator.log")
    }

    /// The last `lines` lines of the log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The log's zap lines, parsed (klog's plain lines are left out).
    pub fn log_entries(&self) -> Vec<serde_json::Value> {
        log_entries(&self.log())
    }

    /// `GET /metrics`: the operator's Prometheus text. Panics (with the log's tail) when it does
    /// not answer 200.
    pub fn metrics(&self) -> String {
        match http_get(self.metrics, "/metrics") {
            Some((200, body)) => body,
            other => panic!(
                "KEDA's /metrics at {} answered {other:?}; its log ends with:\n{}",
                self.metrics,
                self.log_tail(30)
            ),
        }
    }

    /// `keda_scaler_metrics_value` of trigger `trigger_index` of the ScaledObject or ScaledJob
    /// `namespace/name`: the value its scaler last read (for a ScaledJob, the queue length), or
    /// `None` before the first poll.
    pub fn scaler_metrics_value(&self, kind: Scaled, namespace: &str, name: &str, trigger_index: usize) -> Option<f64> {
        scaler_metrics_value(&self.metrics(), kind, namespace, name, trigger_index)
    }

    /// Calls `check` now and after every line the operator logs (its scale loops log each round;
    /// inotify says when, no timer), until it gives a value, at most `within`; then panics with
    /// `what` and the log's tail. Blocks: inside a multi-threaded runtime, in `block_in_place`.
    pub fn until_logged<T>(&self, within: Duration, what: &str, check: impl FnMut() -> Option<T>) -> T {
        let log = self.log();
        let what = format!("{what} (KEDA's log: {})", log.display());
        let wait = || until_appended(&log, within, &what, check);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        }
    }

    /// Waits, woken by each line the operator logs (inotify, no timer), at most [`UP_DEADLINE`],
    /// until its health probe is serving (`starting server`, then `/readyz` answers `ok`: the
    /// listener is bound before that line), its metrics server serves, and the ScaledObject and
    /// ScaledJob controllers started their workers; fails at once when the process exits.
    fn await_up(&mut self) -> Result<(), HarnessError> {
        let pid = self.child.id();
        let log = self.log();
        let mut found: Option<(SocketAddr, SocketAddr)> = None;
        let up = until_appended(&log, UP_DEADLINE, "the KEDA operator up", || {
            if !process_running(pid) {
                return Some(Err(failed(format!("KEDA operator exited:\n{}", self.log_tail(40)))));
            }
            let entries = self.log_entries();
            let probe = probe_address(&entries)?;
            let workers = |kind: &str| {
                entries.iter().any(|entry| entry["msg"] == "Starting workers" && entry["controllerKind"] == kind)
            };
            if !(entries.iter().any(|entry| entry["msg"] == "Serving metrics server")
                && workers("ScaledObject")
                && workers("ScaledJob"))
            {
                return None;
            }
            let ready = http_get(probe, "/readyz").is_some_and(|(status, body)| status == 200 && body.trim() == "ok");
            let metrics = find_metrics_address(pid, probe).filter(|_| ready)?;
            found = Some((probe, metrics));
            Some(Ok(()))
        });
        if let Some((probe, metrics)) = found {
            self.probe = probe;
            self.metrics = metrics;
        }
        up
    }
}

impl Drop for KedaOperator {
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            report(&format!("the KEDA operator's log ended with:\n{}", self.log_tail(30)));
            if std::env::var_os("CDTARGET_KEEP_FAILED_CONTROL_PLANE").is_some() {
                let kept = std::mem::replace(&mut self.dir, tempfile::TempDir::new().expect("a temporary directory"));
                report(&format!("kept the failed test's KEDA directory {}", kept.keep().display()));
            }
        }
    }
}

/// `keda_scaler_metrics_value` of trigger `trigger_index` of `namespace/name` in the Prometheus
/// text `metrics`. The labels (KEDA's `pkg/metricscollector/prommetrics.go`): `namespace`,
/// `scaledObject` (the ScaledObject's or ScaledJob's name), `type` (`scaledobject` or
/// `scaledjob`), `triggerIndex`, `scaler`, `metric`.
pub fn scaler_metrics_value(
    metrics: &str,
    kind: Scaled,
    namespace: &str,
    name: &str,
    trigger_index: usize,
) -> Option<f64> {
    let kind = match kind {
        Scaled::Object => "scaledobject",
        Scaled::Job => "scaledjob",
    };
    let index = trigger_index.to_string();
    metrics.lines().find_map(|line| {
        let (labels, value) = line.strip_prefix("keda_scaler_metrics_value{")?.rsplit_once('}')?;
        let labels = parse_labels(labels);
        let label = |key: &str| labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        (label("namespace") == Some(namespace)
            && label("scaledObject") == Some(name)
            && label("type") == Some(kind)
            && label("triggerIndex") == Some(&index))
        .then(|| value.split_whitespace().next()?.parse().ok())?
    })
}

/// `key="value",...` of a Prometheus sample, with `\\`, `\"` and `\n` unescaped.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = at + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.push((key.trim_start_matches(',').trim().to_string(), value));
        rest = &after[end..];
    }
    labels
}

/// The zap lines of the log at `path`, parsed.
fn log_entries(path: &Path) -> Vec<serde_json::Value> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines().filter(|line| line.starts_with('{')).filter_map(|line| serde_json::from_str(line).ok()).collect()
}

/// The health probe's actual address: controller-runtime's `starting server` line of the server
/// named `health probe` carries its listener's address.
fn probe_address(entries: &[serde_json::Value]) -> Option<SocketAddr> {
    entries
        .iter()
        .find(|entry| entry["msg"] == "starting server" && entry["name"] == "health probe")
        .and_then(|entry| entry["addr"].as_str()?.parse().ok())
}

/// The metrics server's address: among the TCP sockets process `pid` listens on, the one that is
/// not `probe` and answers `GET /metrics` with 200.
fn find_metrics_address(pid: u32, probe: SocketAddr) -> Option<SocketAddr> {
    listening_addresses(pid)
        .into_iter()
        .filter(|address| *address != probe)
        .find(|&address| http_get(address, "/metrics").is_some_and(|(status, _)| status == 200))
}

/// The IPv4 TCP addresses process `pid` listens on: its socket inodes (`/proc/<pid>/fd`) that
/// `/proc/<pid>/net/tcp` lists in state LISTEN (`0A`).
fn listening_addresses(pid: u32) -> Vec<SocketAddr> {
    let inodes: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(|entry| fs::read_link(entry.ok()?.path()).ok())
                .filter_map(|target| {
                    let target = target.to_str()?;
                    Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let table = fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            if *state != "0A" || !inodes.iter().any(|ours| ours == inode) {
                return None;
            }
            // `0100007F:9C41`: the address's four bytes read as a native-endian u32, in hex; the
            // port in hex.
            let (ip, port) = local.split_once(':')?;
            let ip = std::net::Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_ne_bytes());
            Some(SocketAddr::from((ip, u16::from_str_radix(port, 16).ok()?)))
        })
        .collect()
}

/// A plain HTTP/1.0 `GET path` on `address`: the status and the body, or `None` when the
/// connection or the answer fails (within 5 s).
fn http_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// `kubectl args...` as the admin, its output or a failure with what kubectl said.
fn kubectl_ok(cluster: &ControlPlane, args: &[&str]) -> Result<String, HarnessError> {
    let run = cluster.kubectl(args);
    if run.output.status.success() {
        Ok(String::from_utf8_lossy(&run.output.stdout).into_owned())
    } else {
        Err(failed(format!(
            "kubectl {} ({}):\n{}",
            args.join(" "),
            run.output.status,
            String::from_utf8_lossy(&run.output.stderr)
        )))
    }
}

/// Creates namespace `name` unless it exists.
fn ensure_namespace(cluster: &ControlPlane, name: &str) -> Result<(), HarnessError> {
    let run = cluster.kubectl(&["create", "namespace", name]);
    let stderr = String::from_utf8_lossy(&run.output.stderr);
    if run.output.status.success() || stderr.contains("AlreadyExists") || stderr.contains("already exists") {
        Ok(())
    } else {
        Err(failed(format!("kubectl create namespace {name}: {stderr}")))
    }
}

/// `ca.crt`, `tls.crt` and `tls.key` in `dir` for KEDA's gRPC metrics service: one self-signed
/// EC certificate for 127.0.0.1 (nothing connects to it in the tests).
fn write_grpc_certificates(openssl: &Path, dir: &Path) -> Result<(), HarnessError> {
    fs::create_dir_all(dir).map_err(failed)?;
    // No extension from the machine's openssl.cnf.
    fs::write(dir.join("openssl.cnf"), "[req]\ndistinguished_name = dn\n[dn]\n").map_err(failed)?;
    let output = Command::new(openssl)
        .args(["req", "-config", "openssl.cnf", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-nodes", "-days", "2", "-subj", "/CN=keda-operator", "-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-keyout", "tls.key", "-out", "tls.crt"])
        .current_dir(dir)
        .output()
        .map_err(failed)?;
    if !output.status.success() {
        return Err(failed(format!(
            "openssl req (KEDA's gRPC certificate): {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    fs::copy(dir.join("tls.crt"), dir.join("ca.crt")).map_err(failed)?;
    Ok(())
}

/// The machine's CA bundles, where the usual distributions keep them.
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// `<dir>/ca-bundle.pem`: the machine's CAs (the first bundle of [`SYSTEM_CA_BUNDLES`] found, if
/// any) followed by `extra`.
fn write_ca_bundle(dir: &Path, extra: &Path) -> Result<PathBuf, HarnessError> {
    let mut bundle = SYSTEM_CA_BUNDLES.iter().find_map(|path| fs::read(path).ok()).unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend(fs::read(extra).map_err(|e| failed(format!("the extra CA {}: {e}", extra.display())))?);
    let path = dir.join("ca-bundle.pem");
    fs::write(&path, bundle).map_err(failed)?;
    Ok(path)
}

/// SIGKILLs the process group `pgid` (the operator's, which it leads).
#[allow(unsafe_code)] // a libc call of the harness; `[lints]` denies unsafe code, src/ forbids it
fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and has no memory effects; the group is the
    // operator's own (it was started with process_group(0), so its PID is the group's ID).
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// A line on the test process's stderr, which the test harness does not capture.
fn report(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "[keda] {line}");
}

fn failed(error: impl std::fmt::Display) -> HarnessError {
    HarnessError::Failed(error.to_string())
}
