//! A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and kube-controller-manager,
//! built from the Go module in `hack/control-plane/` (Kubernetes and etcd at the versions its
//! `go.mod` pins) and started once per test binary.
//!
//! ```text
//! let Some(cluster) = common::skip_or_fail("my_test", ControlPlane::shared()) else { return };
//! let client = cluster.admin_client().await;
//! cluster.kubectl(&["apply", "-k", "deploy/"]).success();
//! let writes = cluster.audit_events().into_iter().filter(AuditEvent::is_mutating).count();
//! ```
//!
//! * **Build**: the multi-call binary is built with `go build` into a cache directory keyed by the
//!   pinned Kubernetes version and a hash of `go.mod`, `go.sum` and `main.go`
//!   (`$CDTARGET_CONTROL_PLANE_CACHE`, else `$XDG_CACHE_HOME/cdtarget/control-plane`, else
//!   `~/.cache/cdtarget/control-plane`), so it is built once per pin and reused by every run. The
//!   build prints what it does and its progress on stderr (not captured by the test harness).
//!   Without `go` on `PATH` the control plane is [`HarnessError::Unavailable`]: `skip_or_fail`
//!   prints a SKIP line, or fails under `CI`.
//! * **Certificates** come from the `openssl` command line (rcgen is not among the crate's
//!   dependencies): one CA that signs the apiserver's serving certificate (127.0.0.1) and the admin
//!   client certificate (`O=system:masters`); an EC P-256 key signs ServiceAccount tokens.
//! * **kube-apiserver** runs with RBAC authorization, the default admission plugins (more with
//!   [`Options::admission_plugins`]), and an audit policy at level `Metadata` for every request,
//!   logged as JSON lines to a file ([`ControlPlane::audit_events`]).
//! * **kube-controller-manager** runs the garbage collector, namespace deletion, ServiceAccount
//!   and ServiceAccount-token controllers, and on request the Deployment and ReplicaSet
//!   controllers ([`Options::workload_controllers`]) and the Job controller
//!   ([`Options::job_controller`]); no scheduler, no kubelet: pods stay Pending.
//! * Every port is picked by the OS; everything lives in one temporary directory; the processes
//!   are killed by PID when a [`ControlPlane`] is dropped, and the shared one (a static, never
//!   dropped) when the test process exits.

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::HarnessError;
use super::go_build::{self, GoBuild};
use super::process::{find_on_path, free_port, kill_pid, process_running, wait_until_serving};

/// The Go module holding the control plane.
pub fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/control-plane")
}

/// How long kube-apiserver may take from start to a successful `/readyz`.
const READY_DEADLINE: Duration = Duration::from_secs(120);

/// The ServiceAccount issuer and audience of the built control plane.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// How a control plane differs from the default one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Admission plugins enabled in addition to kube-apiserver's default set (e.g.
    /// `OwnerReferencesPermissionEnforcement`, which hardened clusters and OpenShift turn on).
    pub admission_plugins: Vec<String>,
    /// kube-controller-manager also runs the Deployment and ReplicaSet controllers: pods are
    /// created for Deployments (and stay Pending: no scheduler, no kubelet), and a pod whose
    /// status a test reports running and ready counts in the Deployment's availability.
    pub workload_controllers: bool,
    /// kube-controller-manager also runs the Job controller: a Job gets its pods (which stay
    /// Pending), as KEDA's ScaledJobs need (`tests/common/keda.rs`).
    pub job_controller: bool,
}

/// A running control plane (see the module documentation).
pub struct ControlPlane {
    dir: tempfile::TempDir,
    processes: Vec<Child>,
    server: String,
    version: String,
    ca_pem: String,
    /// Set when the tests were pointed at a cluster of someone else's ([`ControlPlane::external`]).
    external: Option<External>,
}

/// An existing cluster the tests were pointed at: its kubeconfig and its API server's audit log.
struct External {
    kubeconfig: PathBuf,
    audit_log: PathBuf,
    insecure: bool,
}

/// The kubeconfig of an existing cluster to run the cluster tests against instead of the built one.
pub const EXTERNAL_KUBECONFIG: &str = "CDTARGET_TEST_KUBECONFIG";
/// Its API server's audit log (JSON lines, level `Metadata` or more for every request), readable here.
pub const EXTERNAL_AUDIT_LOG: &str = "CDTARGET_TEST_AUDIT_LOG";

impl ControlPlane {
    /// The control plane shared by every test of this test binary, started on first use (and the
    /// binary built first when it is not in the cache). Tests give themselves their own
    /// namespaces. Killed when the test process exits.
    pub fn shared() -> Result<&'static ControlPlane, HarnessError> {
        ControlPlane::shared_with(&Options::default())
    }

    /// [`ControlPlane::shared`] started with `options`; every caller in a test binary must pass
    /// the same options (a binary has one control plane). With `CDTARGET_TEST_KUBECONFIG` set it
    /// is that existing cluster ([`ControlPlane::external`]), which is taken as it is: options
    /// other than the defaults make it unavailable (a SKIP line, or a failure under `CI`).
    pub fn shared_with(options: &Options) -> Result<&'static ControlPlane, HarnessError> {
        // The options it was started with, and the control plane or (unavailable?, why) not.
        type Started = (Options, Result<ControlPlane, (bool, String)>);
        static SHARED: OnceLock<Started> = OnceLock::new();
        let (started_with, started) = SHARED.get_or_init(|| {
            let started = match std::env::var_os(EXTERNAL_KUBECONFIG) {
                Some(_) if *options != Options::default() => Err(HarnessError::Unavailable(format!(
                    "this binary needs kube-apiserver started with {options:?}; an existing cluster \
                     ({EXTERNAL_KUBECONFIG}) is used as it is"
                ))),
                Some(kubeconfig) => ControlPlane::external(
                    Path::new(&kubeconfig),
                    std::env::var_os(EXTERNAL_AUDIT_LOG).map(PathBuf::from),
                ),
                None => ControlPlane::start_with(options),
            };
            if let Ok(cluster) = &started {
                kill_at_exit(cluster.pids().into_iter().rev().collect(), Some(cluster.dir().to_path_buf()));
            }
            let started = started.map_err(|error| match error {
                HarnessError::Unavailable(what) => (true, what),
                HarnessError::Failed(why) => (false, why),
            });
            (options.clone(), started)
        });
        assert_eq!(started_with, options, "the shared control plane of this binary was started with other options");
        match started {
            Ok(cluster) => Ok(cluster),
            Err((true, what)) => Err(HarnessError::Unavailable(what.clone())),
            Err((false, why)) => Err(HarnessError::Failed(why.clone())),
        }
    }

    /// Builds the binary if needed and starts a new control plane of its own (killed on drop).
    pub fn start() -> Result<ControlPlane, HarnessError> {
        ControlPlane::start_with(&Options::default())
    }

    /// [`ControlPlane::start`] with `options`.
    pub fn start_with(options: &Options) -> Result<ControlPlane, HarnessError> {
        let binary = binary()?;
        let openssl = find_on_path("openssl").ok_or_else(|| {
            HarnessError::Unavailable("openssl is not installed (certificates of the control plane)".into())
        })?;
        let version = pinned_version(&module_dir())?;
        let dir = tempfile::Builder::new()
            .prefix("cdtarget-control-plane-")
            .tempdir()
            .map_err(|e| HarnessError::Failed(format!("temporary directory: {e}")))?;
        let mut cluster = ControlPlane {
            dir,
            processes: Vec::new(),
            server: String::new(),
            version,
            ca_pem: String::new(),
            external: None,
        };
        let started = Instant::now();
        cluster.write_certificates(&openssl)?;
        cluster.write_audit_policy()?;

        let etcd_port = cluster.start_etcd(&binary)?;
        let etcd_ready = started.elapsed();
        let api_port = cluster.start_apiserver(&binary, etcd_port, options)?;
        cluster.server = format!("https://127.0.0.1:{api_port}");
        cluster.write_admin_kubeconfig()?;
        cluster.wait_ready()?;
        let api_ready = started.elapsed();
        cluster.start_controller_manager(&binary, options)?;
        report(&format!(
            "control plane {} ready at {} in {:.1} s (etcd {:.1} s, kube-apiserver /readyz {:.1} s after etcd); dir {}",
            cluster.version,
            cluster.server,
            started.elapsed().as_secs_f64(),
            etcd_ready.as_secs_f64(),
            (api_ready - etcd_ready).as_secs_f64(),
            cluster.dir.path().display()
        ));
        Ok(cluster)
    }

    /// An existing cluster instead of the built one (`CDTARGET_TEST_KUBECONFIG`): the server and CA
    /// of the kubeconfig's current context, its user as the administrator, and its API server's
    /// audit log (`CDTARGET_TEST_AUDIT_LOG`, which the tests read to see what the controller sent;
    /// without it the cluster tests are unavailable). Nothing is started or stopped; the faults
    /// that restart processes are unavailable ([`ControlPlane::is_external`]).
    pub fn external(kubeconfig: &Path, audit_log: Option<PathBuf>) -> Result<ControlPlane, HarnessError> {
        let audit_log = audit_log.ok_or_else(|| {
            HarnessError::Unavailable(format!(
                "{EXTERNAL_KUBECONFIG} is set but {EXTERNAL_AUDIT_LOG} is not: the cluster tests read what the \
                 controller sent from the API server's audit log (docs/testing.md)"
            ))
        })?;
        fs::File::open(&audit_log)
            .map_err(|e| HarnessError::Failed(format!("{EXTERNAL_AUDIT_LOG}={}: {e}", audit_log.display())))?;
        let config = kube::config::Kubeconfig::read_from(kubeconfig)
            .map_err(|e| HarnessError::Failed(format!("{EXTERNAL_KUBECONFIG}={}: {e}", kubeconfig.display())))?;
        let context =
            config.current_context.as_deref().ok_or_else(|| failed("the kubeconfig has no current context"))?;
        let cluster_name = config
            .contexts
            .iter()
            .find(|named| named.name == context)
            .and_then(|named| named.context.as_ref())
            .map(|context| context.cluster.clone())
            .ok_or_else(|| failed(format!("the kubeconfig has no context {context}")))?;
        let cluster = config
            .clusters
            .iter()
            .find(|named| named.name == cluster_name)
            .and_then(|named| named.cluster.as_ref())
            .ok_or_else(|| failed(format!("the kubeconfig has no cluster {cluster_name}")))?;
        let server = cluster.server.clone().ok_or_else(|| failed(format!("cluster {cluster_name} has no server")))?;
        let ca_pem = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
            (Some(data), _) => {
                String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data).map_err(failed)?)
                    .map_err(failed)?
            }
            (None, Some(file)) => fs::read_to_string(file).map_err(failed)?,
            (None, None) => String::new(),
        };
        let dir = tempfile::Builder::new()
            .prefix("cdtarget-external-")
            .tempdir()
            .map_err(|e| HarnessError::Failed(format!("temporary directory: {e}")))?;
        let mut external = ControlPlane {
            dir,
            processes: Vec::new(),
            server,
            version: String::new(),
            ca_pem,
            external: Some(External {
                kubeconfig: kubeconfig.to_path_buf(),
                audit_log,
                insecure: cluster.insecure_skip_tls_verify.unwrap_or(false),
            }),
        };
        let version = external.kubectl(&["version", "-o", "json"]);
        if !version.output.status.success() {
            return Err(failed(format!(
                "{} is not reachable: {}",
                external.server,
                String::from_utf8_lossy(&version.output.stderr).trim()
            )));
        }
        external.version = serde_json::from_slice::<serde_json::Value>(&version.output.stdout)
            .ok()
            .and_then(|value| value["serverVersion"]["gitVersion"].as_str().map(str::to_string))
            .unwrap_or_else(|| "unknown".into());
        report(&format!(
            "existing cluster {} at {} ({}); audit log {}",
            external.version,
            external.server,
            kubeconfig.display(),
            external.audit_log().display()
        ));
        Ok(external)
    }

    /// Whether this is an existing cluster the tests were pointed at (nothing here to restart).
    pub fn is_external(&self) -> bool {
        self.external.is_some()
    }

    /// `https://127.0.0.1:PORT` of kube-apiserver.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The Kubernetes version of the control plane (`v1.X.Y`, the pin of `hack/control-plane`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The control plane's directory (certificates, logs, kubeconfigs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kubeconfig of the cluster administrator (client certificate, `system:masters`), for
    /// kubectl and for [`ControlPlane::admin_client`].
    pub fn admin_kubeconfig(&self) -> PathBuf {
        match &self.external {
            Some(external) => external.kubeconfig.clone(),
            None => self.dir().join("admin.kubeconfig"),
        }
    }

    /// The PEM of the CA that signed the apiserver's serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The audit log: one JSON event per line.
    pub fn audit_log(&self) -> PathBuf {
        match &self.external {
            Some(external) => external.audit_log.clone(),
            None => self.dir().join("audit.log"),
        }
    }

    /// The PIDs of etcd, kube-apiserver and kube-controller-manager.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(Child::id).collect()
    }

    /// A new admin client. Built per call: a client's connections belong to the tokio runtime
    /// that opened them, and each `#[tokio::test]` has its own.
    pub async fn admin_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig()).await
    }

    /// `kubectl --kubeconfig <admin> args...`, run from the repository root.
    pub fn kubectl(&self, args: &[&str]) -> Kubectl {
        self.kubectl_as(&self.admin_kubeconfig(), args)
    }

    /// `kubectl --kubeconfig <kubeconfig> args...`, run from the repository root.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Kubectl {
        let output = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("KUBECONFIG")
            .output()
            .expect("run kubectl");
        Kubectl { args: args.iter().map(|arg| (*arg).to_string()).collect(), output }
    }

    /// A token of the ServiceAccount `namespace/name` from the TokenRequest API (audience: the
    /// apiserver's, valid for an hour).
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        let api: kube::Api<ServiceAccount> = kube::Api::namespaced(self.admin_client().await, namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..TokenRequestSpec::default() }),
            ..TokenRequest::default()
        };
        let granted = api
            .create_token_request(name, &kube::api::PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"));
        granted.status.and_then(|status| status.token).expect("a token in the TokenRequest status")
    }

    /// Mints a token of the ServiceAccount `namespace/name` and writes a kubeconfig that
    /// authenticates with it (nothing else), named `<namespace>.<name>.kubeconfig` in the control
    /// plane's directory.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.service_account_token(namespace, name).await;
        let path = self.dir().join(format!("{namespace}.{name}.kubeconfig"));
        let user = format!("      token: {token}\n");
        fs::write(&path, self.kubeconfig_text(&format!("system:serviceaccount:{namespace}:{name}"), &user))
            .expect("write the ServiceAccount kubeconfig");
        path
    }

    /// Every event of the audit log so far, in order (each request appears once per stage logged:
    /// `ResponseComplete`, plus `ResponseStarted` for watches).
    pub fn audit_events(&self) -> Vec<AuditEvent> {
        self.audit_events_since(AuditMark(0))
    }

    /// Where the audit log ends now: [`ControlPlane::audit_events_since`] returns what follows.
    pub fn audit_mark(&self) -> AuditMark {
        AuditMark(fs::metadata(self.audit_log()).map(|meta| meta.len()).unwrap_or(0))
    }

    /// The audit events written after `mark`. A line still being written is left out.
    pub fn audit_events_since(&self, mark: AuditMark) -> Vec<AuditEvent> {
        let text = fs::read(self.audit_log()).unwrap_or_default();
        let start = usize::try_from(mark.0).unwrap_or(usize::MAX).min(text.len());
        parse_audit_log(&text[start..])
    }

    /// The same events, one per request (the `ResponseComplete` stage, or the last stage logged).
    pub fn audit_requests_since(&self, mark: AuditMark) -> Vec<AuditEvent> {
        let events = self.audit_events_since(mark);
        let complete: HashSet<String> = events
            .iter()
            .filter(|event| event.stage == "ResponseComplete")
            .map(|event| event.audit_id.clone())
            .collect();
        let mut seen = HashSet::new();
        events
            .into_iter()
            .filter(|event| !complete.contains(&event.audit_id) || event.stage == "ResponseComplete")
            .filter(|event| seen.insert(event.audit_id.clone()))
            .collect()
    }

    /// The requests since `mark` once `done` holds for them, polling the file (at most 10 s,
    /// then panicking with `what`). The audit event of a request is written when its handler
    /// returns, which may be after a watcher has seen its effect: await it here.
    pub fn audit_requests_until(
        &self,
        mark: AuditMark,
        what: &str,
        mut done: impl FnMut(&[AuditEvent]) -> bool,
    ) -> Vec<AuditEvent> {
        until_appended(&self.audit_log(), Duration::from_secs(10), what, || {
            let events = self.audit_requests_since(mark);
            done(&events).then_some(events)
        })
    }

    // === start-up ===

    fn write_certificates(&mut self, openssl: &Path) -> Result<(), HarnessError> {
        let dir = self.dir().to_path_buf();
        // An empty configuration: no extension from the machine's openssl.cnf (a CA:TRUE on a leaf
        // would make rustls refuse it), only those given with -addext.
        fs::write(dir.join("openssl.cnf"), "[req]\ndistinguished_name = dn\n[dn]\n").map_err(failed)?;
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"];
        let leaf = ["-CA", "ca.crt", "-CAkey", "ca.key", "-addext", "basicConstraints=critical,CA:FALSE"];
        let steps: [Vec<&str>; 5] = [
            [&["req", "-config", "openssl.cnf", "-x509"][..], &ec, &["-keyout", "ca.key", "-out", "ca.crt"]].concat(),
            [
                &["req", "-config", "openssl.cnf", "-x509"][..],
                &ec,
                &leaf,
                &["-keyout", "server.key", "-out", "server.crt"],
            ]
            .concat(),
            [
                &["req", "-config", "openssl.cnf", "-x509"][..],
                &ec,
                &leaf,
                &["-keyout", "admin.key", "-out", "admin.crt"],
            ]
            .concat(),
            vec!["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key"],
            vec!["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
        ];
        let extra: [&[&str]; 5] = [
            &[
                "-subj",
                "/CN=cdtarget-test-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            &[
                "-subj",
                "/CN=kube-apiserver",
                "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-addext",
                "extendedKeyUsage=serverAuth",
            ],
            &["-subj", "/O=system:masters/CN=cdtarget-admin", "-addext", "extendedKeyUsage=clientAuth"],
            &[],
            &[],
        ];
        for (args, extra) in steps.iter().zip(extra) {
            let output = Command::new(openssl).args(args).args(extra).current_dir(&dir).output().map_err(failed)?;
            if !output.status.success() {
                return Err(HarnessError::Failed(format!(
                    "openssl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&output.stderr)
                )));
            }
        }
        self.ca_pem = fs::read_to_string(dir.join("ca.crt")).map_err(failed)?;
        Ok(())
    }

    fn write_audit_policy(&self) -> Result<(), HarnessError> {
        // Metadata for everything: user, impersonated user, verb, resource, namespace, name and
        // response code of every request, no bodies. RequestReceived is left out so a request is
        // logged when it is answered (watches also when their response starts).
        let policy =
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n";
        fs::write(self.dir().join("audit-policy.yaml"), policy).map_err(failed)
    }

    fn spawn(&mut self, binary: &Path, name: &str, args: &[String]) -> Result<u32, HarnessError> {
        let log = fs::File::create(self.dir().join(format!("{name}.log"))).map_err(failed)?;
        let child = spawn_logged(binary.as_os_str(), args, self.dir(), log, name)?;
        let pid = child.id();
        self.processes.push(child);
        Ok(pid)
    }

    fn log_tail(&self, name: &str) -> String {
        let text = fs::read_to_string(self.dir().join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn start_etcd(&mut self, binary: &Path) -> Result<u16, HarnessError> {
        let (client, peer) = (free_port(), free_port());
        let data = self.dir().join("etcd");
        let args: Vec<String> = vec![
            "etcd".into(),
            "--name=cdtarget-test".into(),
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls=http://127.0.0.1:{client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=cdtarget-test=http://127.0.0.1:{peer}"),
            // Test data: no fsync, a small quota.
            "--unsafe-no-fsync=true".into(),
            "--quota-backend-bytes=1073741824".into(),
            "--log-level=warn".into(),
        ];
        let pid = self.spawn(binary, "etcd", &args)?;
        wait_until_serving(client, Duration::from_secs(30), |_| true, || process_running(pid))
            .map_err(|why| HarnessError::Failed(format!("etcd {why}:\n{}", self.log_tail("etcd"))))?;
        Ok(client)
    }

    fn start_apiserver(&mut self, binary: &Path, etcd_port: u16, options: &Options) -> Result<u16, HarnessError> {
        let port = free_port();
        let dir = self.dir().display().to_string();
        let mut args: Vec<String> = vec![
            "apiserver".into(),
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={dir}/apiserver-certs"),
            format!("--tls-cert-file={dir}/server.crt"),
            format!("--tls-private-key-file={dir}/server.key"),
            format!("--client-ca-file={dir}/ca.crt"),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={dir}/sa.pub"),
            format!("--service-account-signing-key-file={dir}/sa.key"),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // The `kubernetes` Service's endpoint may not be a loopback address; nothing needs it.
            "--endpoint-reconciler-type=none".into(),
            format!("--audit-policy-file={dir}/audit-policy.yaml"),
            format!("--audit-log-path={dir}/audit.log"),
            // Synchronous: a request's event is in the file when its response has been sent.
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxbackup=0".into(),
            // 0: one file that is never rotated (the default rotates at 100 MB, and a reader
            // holding an offset into the old file would miss everything after it).
            "--audit-log-maxsize=0".into(),
            "--profiling=false".into(),
        ];
        if !options.admission_plugins.is_empty() {
            // Enabled on top of the default plugins, which stay on.
            args.push(format!("--enable-admission-plugins={}", options.admission_plugins.join(",")));
        }
        self.spawn(binary, "apiserver", &args)?;
        Ok(port)
    }

    fn kubeconfig_text(&self, user: &str, credentials: &str) -> String {
        // An existing cluster's CA may be the machine's roots (none given) or not checked at all.
        let ca = match (&self.external, self.ca_pem.is_empty()) {
            (Some(External { insecure: true, .. }), _) => "      insecure-skip-tls-verify: true\n".to_string(),
            (_, true) => String::new(),
            (_, false) => format!(
                "      certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
            ),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n  - name: cdtarget-test\n    cluster:\n      server: {server}\n{ca}users:\n  - name: {user}\n    user:\n{credentials}contexts:\n  - name: cdtarget-test\n    context:\n      cluster: cdtarget-test\n      user: {user}\ncurrent-context: cdtarget-test\n",
            server = self.server,
        )
    }

    fn write_admin_kubeconfig(&self) -> Result<(), HarnessError> {
        let encode = |file: &str| {
            fs::read(self.dir().join(file)).map(|pem| base64::engine::general_purpose::STANDARD.encode(pem))
        };
        let credentials = format!(
            "      client-certificate-data: {}\n      client-key-data: {}\n",
            encode("admin.crt").map_err(failed)?,
            encode("admin.key").map_err(failed)?
        );
        fs::write(self.admin_kubeconfig(), self.kubeconfig_text("cdtarget-admin", &credentials)).map_err(failed)
    }

    fn wait_ready(&self) -> Result<(), HarnessError> {
        let pid = self.processes.last().map(Child::id).unwrap_or_default();
        await_readyz(&self.admin_kubeconfig(), pid)
            .map_err(|why| HarnessError::Failed(format!("kube-apiserver {why}:\n{}", self.log_tail("apiserver"))))
    }

    fn start_controller_manager(&mut self, binary: &Path, options: &Options) -> Result<(), HarnessError> {
        let dir = self.dir().display().to_string();
        let mut controllers =
            "garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller"
                .to_owned();
        if options.workload_controllers {
            controllers.push_str(",deployment-controller,replicaset-controller");
        }
        if options.job_controller {
            controllers.push_str(",job-controller");
        }
        let mut args: Vec<String> = vec![
            "controller-manager".into(),
            format!("--kubeconfig={dir}/admin.kubeconfig"),
            format!("--controllers={controllers}"),
            format!("--service-account-private-key-file={dir}/sa.key"),
            format!("--root-ca-file={dir}/ca.crt"),
            "--leader-elect=false".into(),
            // No serving endpoint: nothing scrapes it, and its default port is fixed.
            "--secure-port=0".into(),
        ];
        if options.workload_controllers {
            // Each controller as its own ServiceAccount (`kube-system:replicaset-controller`...),
            // as clusters run them: the example's admission policies exempt those names, and
            // refuse the admin's agent-labelled ReplicaSets and pods.
            args.push("--use-service-account-credentials".into());
        }
        let pid = self.spawn(binary, "controller-manager", &args)?;
        if !process_running(pid) {
            return Err(HarnessError::Failed(format!(
                "kube-controller-manager exited:\n{}",
                self.log_tail("controller-manager")
            )));
        }
        Ok(())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The controller manager and the apiserver first, etcd last.
        for child in self.processes.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The role of each process of the control plane: the first argument of the multi-call binary.
pub const ETCD: &str = "etcd";
/// See [`ETCD`].
pub const APISERVER: &str = "apiserver";
/// See [`ETCD`].
pub const CONTROLLER_MANAGER: &str = "controller-manager";

impl ControlPlane {
    /// A new control plane for one test alone, which may kill and start its processes again
    /// ([`OwnControlPlane`]).
    pub fn start_own() -> Result<OwnControlPlane, HarnessError> {
        ControlPlane::start_own_with(&Options::default())
    }

    /// [`ControlPlane::start_own`] with `options`.
    pub fn start_own_with(options: &Options) -> Result<OwnControlPlane, HarnessError> {
        let cluster = ControlPlane::start_with(options)?;
        // The scenario kit takes `&'static` (tenants keep it); the guard ends the processes.
        Ok(OwnControlPlane {
            cluster: Box::leak(Box::new(cluster)),
            restarted: Mutex::default(),
            stopped: Mutex::default(),
            reaped: Mutex::default(),
        })
    }
}

/// A control plane of one test's own, for the fault tests: kube-apiserver killed and started
/// again on the same port with the same flags, etcd killed and started again on the same data
/// directory and ports. It dereferences to its [`ControlPlane`], which lives for the rest of
/// the process (`&'static`, as the scenario kit takes it); its processes, those started again
/// included, are killed and its directory removed when this guard drops, on a panic too.
///
/// "etcd stopped" is a killed etcd (SIGKILL), not a paused one (SIGSTOP): the apiserver's
/// connections are refused, as when the etcd member crashes or its node goes away, and etcd
/// comes back from its data directory as a restarted member does. A paused etcd would only
/// show timeouts on connections that stay open.
pub struct OwnControlPlane {
    cluster: &'static ControlPlane,
    /// The processes started again, each with the command line of the one it replaced.
    restarted: Mutex<Vec<Child>>,
    /// The command lines of the processes stopped and not started yet, by role.
    stopped: Mutex<Vec<(&'static str, Vec<std::ffi::OsString>)>>,
    /// The first processes killed and reaped: their PIDs may belong to anyone now.
    reaped: Mutex<HashSet<u32>>,
}

impl std::ops::Deref for OwnControlPlane {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        self.cluster
    }
}

impl OwnControlPlane {
    /// The control plane, for the scenario kit.
    pub fn cluster(&self) -> &'static ControlPlane {
        self.cluster
    }

    /// SIGKILLs kube-apiserver, starts it again with the same command line (port, certificates,
    /// etcd, audit log appended to) and waits for `/readyz`. Returns how long it was away (from
    /// the kill to ready).
    pub fn restart_apiserver(&self) -> Result<Duration, HarnessError> {
        let killed = Instant::now();
        let command = self.kill(APISERVER)?;
        let pid = self.spawn_again(APISERVER, &command)?;
        await_readyz(&self.admin_kubeconfig(), pid).map_err(|why| {
            HarnessError::Failed(format!("kube-apiserver started again {why}:\n{}", self.log_tail(APISERVER)))
        })?;
        Ok(killed.elapsed())
    }

    /// SIGKILLs etcd and returns once it is gone; its data directory and ports stay for
    /// [`OwnControlPlane::start_etcd`]. kube-apiserver keeps running, without its storage.
    pub fn stop_etcd(&self) -> Result<(), HarnessError> {
        let command = self.kill(ETCD)?;
        self.stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((ETCD, command));
        Ok(())
    }

    /// Starts the stopped etcd again with its command line (same data directory, same ports),
    /// waits until it accepts connections and then until kube-apiserver's `/readyz` (which checks
    /// etcd) passes again. Returns the time from the start to the apiserver being ready.
    pub fn start_etcd(&self) -> Result<Duration, HarnessError> {
        let command = {
            let mut stopped = self.stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let at = stopped.iter().position(|(role, _)| *role == ETCD);
            at.map(|at| stopped.remove(at).1).ok_or_else(|| HarnessError::Failed("etcd was not stopped".into()))?
        };
        let started = Instant::now();
        let port = command
            .iter()
            .filter_map(|arg| arg.to_str()?.strip_prefix("--listen-client-urls=http://127.0.0.1:"))
            .find_map(|port| port.parse::<u16>().ok())
            .ok_or_else(|| HarnessError::Failed("etcd's command line has no client URL".into()))?;
        let pid = self.spawn_again(ETCD, &command)?;
        wait_until_serving(port, Duration::from_secs(30), |_| true, || process_running(pid)).map_err(|why| {
            HarnessError::Failed(format!(
                "etcd started again {why} (its port may have been taken meanwhile):\n{}",
                self.log_tail(ETCD)
            ))
        })?;
        let apiserver =
            self.running(APISERVER).ok_or_else(|| HarnessError::Failed("kube-apiserver is not running".into()))?;
        await_readyz(&self.admin_kubeconfig(), apiserver).map_err(|why| {
            HarnessError::Failed(format!("kube-apiserver after etcd's return {why}:\n{}", self.log_tail(APISERVER)))
        })?;
        Ok(started.elapsed())
    }

    /// The PID of the running process with `role`, started first or again.
    pub fn running(&self, role: &str) -> Option<u32> {
        let restarted: Vec<u32> = self
            .restarted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .rev()
            .map(Child::id)
            .collect();
        let reaped = self.reaped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        restarted
            .into_iter()
            .chain(self.cluster.pids().into_iter().filter(|pid| !reaped.contains(pid)))
            .filter(|&pid| process_running(pid))
            .find(|&pid| command_line(pid).get(1).is_some_and(|arg| arg == role))
    }

    /// SIGKILLs the process with `role`, reaps it (its ports are free when this returns) and
    /// gives its command line.
    fn kill(&self, role: &str) -> Result<Vec<std::ffi::OsString>, HarnessError> {
        let pid = self.running(role).ok_or_else(|| HarnessError::Failed(format!("no running {role}")))?;
        let command = command_line(pid);
        let mut restarted = self.restarted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = restarted.iter().position(|child| child.id() == pid) {
            let mut child = restarted.remove(at);
            let _ = child.kill();
            let _ = child.wait();
        } else {
            kill_pid(pid);
            reap(pid);
            self.reaped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(pid);
        }
        Ok(command)
    }

    /// Starts `command` (a command line read from `/proc`) in the control plane's directory,
    /// appending to the log of `role`.
    fn spawn_again(&self, role: &str, command: &[std::ffi::OsString]) -> Result<u32, HarnessError> {
        let (program, args) =
            command.split_first().ok_or_else(|| HarnessError::Failed(format!("{role} had no command line")))?;
        let mut log = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir().join(format!("{role}.log")))
            .map_err(failed)?;
        writeln!(log, "--- killed and started again by the test harness ---").map_err(failed)?;
        let child = spawn_logged(program, args, self.dir(), log, &format!("{role} again"))?;
        let pid = child.id();
        self.restarted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(child);
        Ok(pid)
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        let restarted = std::mem::take(&mut *self.restarted.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for mut child in restarted.into_iter().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The controller manager and the apiserver first, etcd last; each is this process's child.
        let reaped = self.reaped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        for pid in self.cluster.pids().into_iter().rev().filter(|pid| !reaped.contains(pid)) {
            kill_pid(pid);
            reap(pid);
        }
        if std::thread::panicking() && std::env::var_os("CDTARGET_KEEP_FAILED_CONTROL_PLANE").is_some() {
            report(&format!("kept the failed test's control plane directory {}", self.cluster.dir().display()));
        } else {
            let _ = fs::remove_dir_all(self.cluster.dir());
        }
    }
}

/// The command line of process `pid` (`/proc/<pid>/cmdline`), empty when it is gone.
fn command_line(pid: u32) -> Vec<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|&byte| byte == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| std::ffi::OsStr::from_bytes(arg).to_os_string())
        .collect()
}

/// Waits for the child process `pid` (killed) to end and reaps it.
#[allow(unsafe_code)] // a libc call of the harness; `[lints]` denies unsafe code, src/ forbids it
fn reap(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: waitpid(2) with a null status pointer writes nothing; the pid is a child of this
    // process whose `Child` handle is never waited on (it lives in a leaked `ControlPlane`).
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// Polls kube-apiserver's `/readyz` (as the admin) until it answers `ok`, at most
/// [`READY_DEADLINE`]; fails at once when the process `pid` (the apiserver) exits.
fn await_readyz(kubeconfig: &Path, pid: u32) -> Result<(), String> {
    let kubeconfig = kubeconfig.to_path_buf();
    // On a thread of its own with its own runtime: callers may be inside a tokio runtime.
    std::thread::spawn(move || -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let client = client_from_kubeconfig(&kubeconfig).await;
            let started = Instant::now();
            let mut last = String::new();
            loop {
                if !process_running(pid) {
                    return Err(format!("exited ({last})"));
                }
                let request = http::Request::get("/readyz").body(Vec::new()).expect("request");
                match client.request_text(request).await {
                    Ok(body) if body.trim() == "ok" => return Ok(()),
                    Ok(body) => last = body,
                    Err(e) => last = e.to_string(),
                }
                if started.elapsed() > READY_DEADLINE {
                    return Err(format!("not ready after {READY_DEADLINE:?}: {last}"));
                }
                // Nothing to await in a foreign process: poll /readyz (bounded above).
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    })
    .join()
    .map_err(|_| "the /readyz poller panicked".to_string())?
}

/// What [`kill_shared_at_exit`] kills and removes, in registration order.
static AT_EXIT: Mutex<Vec<(Vec<u32>, Option<PathBuf>)>> = Mutex::new(Vec::new());

/// Kills `pids` (in this order) and removes `dir` when the test process exits, for processes held
/// in statics, which are never dropped. What was registered last goes first (a controller
/// before the control plane it talks to).
#[allow(unsafe_code)] // a libc call of the harness; `[lints]` denies unsafe code, src/ forbids it
pub fn kill_at_exit(pids: Vec<u32>, dir: Option<PathBuf>) {
    let mut registered = AT_EXIT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if registered.is_empty() {
        // SAFETY: atexit(3) stores a plain function pointer; the handler is an `extern "C"` fn
        // that does not unwind.
        unsafe {
            libc::atexit(kill_shared_at_exit);
        }
    }
    registered.push((pids, dir));
}

extern "C" fn kill_shared_at_exit() {
    let Ok(registered) = AT_EXIT.lock() else { return };
    for (pids, dir) in registered.iter().rev() {
        for &pid in pids {
            kill_pid(pid);
        }
        if let Some(dir) = dir {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Calls `done` now and each time something is appended to the file at `path` (the kernel says
/// when, through inotify: no timer) until it gives a value, at most `within`, then panics with
/// `what`. For files another process appends to: the audit log, a controller's log.
pub fn until_appended<T>(path: &Path, within: Duration, what: &str, mut done: impl FnMut() -> Option<T>) -> T {
    use rustix::fs::inotify;
    let appended =
        inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).expect("an inotify instance");
    inotify::add_watch(&appended, path, inotify::WatchFlags::MODIFY)
        .unwrap_or_else(|e| panic!("a watch of {}: {e}", path.display()));
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = done() {
            return value;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{what}: not in {} after {within:?}", path.display());
        let timeout = rustix::time::Timespec::try_from(left).expect("a timeout");
        let mut ready = [rustix::event::PollFd::new(&appended, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut ready, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("waiting for {}: {e}", path.display()),
        }
        // Drain the notifications; the file is read again above either way.
        let mut buffer = [0u8; 4096];
        while rustix::io::read(&appended, &mut buffer).is_ok_and(|n| n > 0) {}
    }
}

/// A point in the audit log (a byte offset).
#[derive(Clone, Copy, Debug)]
pub struct AuditMark(u64);

impl AuditMark {
    /// The start of the audit log.
    pub const START: AuditMark = AuditMark(0);
}

/// One audit event, as far as the tests read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEvent {
    /// The request's id (the same for every stage of one request).
    pub audit_id: String,
    /// `ResponseStarted` or `ResponseComplete` (`Panic` on a server panic).
    pub stage: String,
    /// Who sent the request (`system:serviceaccount:ns:name`, `cdtarget-admin`, ...).
    pub user: String,
    /// Who the request was made as with impersonation, if anyone.
    pub impersonated_user: Option<String>,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The API group (`""` for the core group).
    pub api_group: String,
    /// The resource (plural), `""` for non-resource requests.
    pub resource: String,
    /// The subresource (`status`, `token`, ...), `""` when none.
    pub subresource: String,
    /// The namespace, `""` when cluster-scoped.
    pub namespace: String,
    /// The object's name, `""` for collections.
    pub name: String,
    /// The HTTP status code of the response, 0 when not logged.
    pub code: u16,
    /// The request URI.
    pub uri: String,
}

impl AuditEvent {
    /// Whether the request writes (`create`, `update`, `patch`, `delete`, `deletecollection`);
    /// a server-side dry run (`dryRun=All`) persists nothing and is no write.
    pub fn is_mutating(&self) -> bool {
        matches!(self.verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection")
            && !self.is_dry_run()
    }

    /// Whether the request is a server-side dry run (`dryRun=All` in its URI).
    pub fn is_dry_run(&self) -> bool {
        self.uri.split_once('?').is_some_and(|(_, query)| query.split('&').any(|pair| pair == "dryRun=All"))
    }

    /// The identity the request was authorized as: the impersonated user, else the user.
    pub fn acting_user(&self) -> &str {
        self.impersonated_user.as_deref().unwrap_or(&self.user)
    }

    /// `resource` or `resource/subresource`.
    pub fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    #[serde(rename = "auditID")]
    audit_id: String,
    stage: String,
    verb: String,
    #[serde(rename = "requestURI", default)]
    request_uri: String,
    user: RawUser,
    #[serde(default)]
    impersonated_user: Option<RawUser>,
    #[serde(default)]
    object_ref: Option<RawObjectRef>,
    #[serde(default)]
    response_status: Option<RawStatus>,
}

#[derive(Deserialize)]
struct RawUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawObjectRef {
    api_group: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
}

#[derive(Deserialize)]
struct RawStatus {
    #[serde(default)]
    code: u16,
}

/// Parses JSON-lines audit events; a line that does not parse (one being written) is left out.
pub fn parse_audit_log(text: &[u8]) -> Vec<AuditEvent> {
    text.split(|&byte| byte == b'\n')
        .filter_map(|line| serde_json::from_slice::<RawEvent>(line).ok())
        .map(|raw| {
            let object = raw.object_ref.unwrap_or_default();
            AuditEvent {
                audit_id: raw.audit_id,
                stage: raw.stage,
                user: raw.user.username,
                impersonated_user: raw.impersonated_user.map(|user| user.username),
                verb: raw.verb,
                api_group: object.api_group,
                resource: object.resource,
                subresource: object.subresource,
                namespace: object.namespace,
                name: object.name,
                code: raw.response_status.map_or(0, |status| status.code),
                uri: raw.request_uri,
            }
        })
        .collect()
}

/// The output of one kubectl run.
pub struct Kubectl {
    args: Vec<String>,
    /// What kubectl printed and how it exited.
    pub output: Output,
}

impl Kubectl {
    /// Stdout, panicking with everything kubectl said when it failed.
    pub fn success(&self) -> String {
        assert!(
            self.output.status.success(),
            "kubectl {} failed ({}):\n{}{}",
            self.args.join(" "),
            self.output.status,
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        );
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// Stderr, panicking when kubectl succeeded.
    pub fn failure(&self) -> String {
        assert!(
            !self.output.status.success(),
            "kubectl {} succeeded but should have failed:\n{}",
            self.args.join(" "),
            String::from_utf8_lossy(&self.output.stdout)
        );
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// A client from a kubeconfig file (its current context).
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    // kube-fake-client turns kube's ring features on beside aws-lc-rs: pick one provider.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .expect("a config from the kubeconfig");
    kube::Client::try_from(config).expect("a client")
}

// === the build ===

/// The Kubernetes version `hack/control-plane/go.mod` requires (`v1.X.Y`).
pub fn pinned_version(module: &Path) -> Result<String, HarnessError> {
    let go_mod = fs::read_to_string(module.join("go.mod")).map_err(failed)?;
    go_mod
        .lines()
        .map(|line| line.trim().trim_start_matches("require").trim_start())
        .find_map(|line| line.strip_prefix("k8s.io/kubernetes v"))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|version| format!("v{version}"))
        .ok_or_else(|| HarnessError::Failed("hack/control-plane/go.mod requires no k8s.io/kubernetes".into()))
}

/// Where built control planes are kept.
pub fn cache_root() -> PathBuf {
    match std::env::var_os("CDTARGET_CONTROL_PLANE_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => go_build::cache_base().join("control-plane"),
    }
}

/// The control-plane binary for the current pin: from the cache, or built into it now (once per
/// process; a concurrent build by another process only costs time, the rename is atomic).
pub fn binary() -> Result<PathBuf, HarnessError> {
    let version = pinned_version(&module_dir())?;
    GoBuild {
        name: "control-plane".into(),
        module: "hack/control-plane".into(),
        package: ".".into(),
        cache_dir: cache_root(),
        key_prefix: version.clone(),
        key_files: vec!["go.mod".into(), "go.sum".into(), "main.go".into()],
        ldflags: Some(version_ldflags(&version)),
        cold_estimate: "9-14 minutes (3.4 GB of memory)".into(),
    }
    .binary()
}

/// What `/version` reports: Kubernetes' own build sets these with the linker, `go build` leaves
/// `v0.0.0-master`.
fn version_ldflags(version: &str) -> String {
    let mut parts = version.trim_start_matches('v').split('.');
    let (major, minor) = (parts.next().unwrap_or("0"), parts.next().unwrap_or("0"));
    let package = "k8s.io/component-base/version";
    format!(
        "-X {package}.gitVersion={version} -X {package}.gitMajor={major} -X {package}.gitMinor={minor} -X {package}.gitTreeState=clean"
    )
}

/// A line on the test process's stderr that the test harness does not capture (progress of a
/// long step must be visible while it runs).
fn report(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "[control plane] {line}");
}

/// Starts `program` with `args` in `dir`, its stdout and stderr going to `log`; `what` names it in
/// the error.
fn spawn_logged(
    program: &std::ffi::OsStr,
    args: &[impl AsRef<std::ffi::OsStr>],
    dir: &Path,
    log: fs::File,
    what: &str,
) -> Result<Child, HarnessError> {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(failed)?)
        .stderr(log)
        .spawn()
        .map_err(|e| HarnessError::Failed(format!("spawn {what}: {e}")))
}

fn failed(error: impl std::fmt::Display) -> HarnessError {
    HarnessError::Failed(error.to_string())
}
