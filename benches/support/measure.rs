//! Measuring the processes of a real-API benchmark, shared by `benches/cluster.rs` (cdtarget
//! alone) and `benches/flux.rs` (cdtarget and Flux side by side): the audit log read as it
//! grows, CPU seconds and memory of a process from `/proc`, the load average.

use std::fs;
use std::io::{self, Read as _, Seek as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::control_plane::{AuditEvent, parse_audit_log};

/// Reads the audit log from where it ended when created, a chunk at a time, whole lines only.
/// The test control plane never rotates its log (`--audit-log-maxsize=0`). A log that rotates
/// (kube-apiserver's default renames it every 100 MB) is followed only if it is read at least
/// once per rotation: the file kept open is read to its end, then the new one, and a file
/// rotated in between is never seen. That lost most of a 1,000-tenant first pass once, before
/// the control plane stopped rotating.
pub struct AuditTail {
    path: PathBuf,
    /// The file being read (kept open: after a rotation it is the renamed one, read to its end).
    file: fs::File,
    inode: u64,
    rest: Vec<u8>,
    /// How many rotations of the log were followed.
    pub rotations: usize,
}

impl AuditTail {
    pub fn at_end(path: PathBuf) -> AuditTail {
        let mut file = fs::File::open(&path).expect("open the audit log");
        file.seek(io::SeekFrom::End(0)).expect("seek to the end of the audit log");
        let inode = file.metadata().expect("the audit log's metadata").ino();
        AuditTail { path, file, inode, rest: Vec::new(), rotations: 0 }
    }

    /// Calls `each` for every event appended since the last call.
    pub fn read_new(&mut self, mut each: impl FnMut(&AuditEvent)) {
        loop {
            self.drain(&mut each);
            let renamed = fs::metadata(&self.path).is_ok_and(|meta| meta.ino() != self.inode);
            if !renamed {
                return;
            }
            // What was appended between the read above and the rename.
            self.drain(&mut each);
            let Ok(file) = fs::File::open(&self.path) else { return };
            self.inode = file.metadata().map_or(0, |meta| meta.ino());
            self.file = file;
            self.rotations += 1;
        }
    }

    /// Reads the open file to its end.
    fn drain(&mut self, each: &mut impl FnMut(&AuditEvent)) {
        let mut chunk = vec![0; 8 << 20];
        loop {
            let n = match self.file.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            self.rest.extend_from_slice(&chunk[..n]);
            if let Some(end) = self.rest.iter().rposition(|&byte| byte == b'\n') {
                let lines: Vec<u8> = self.rest.drain(..=end).collect();
                for event in parse_audit_log(&lines) {
                    each(&event);
                }
            }
        }
    }

    /// Calls `step` now and each time a file of the log's directory changes (inotify on the
    /// directory, which also sees a rotation; no timer) until it returns true, at most `within`;
    /// whether it did.
    pub fn until(&mut self, within: Duration, mut step: impl FnMut(&mut AuditTail) -> bool) -> bool {
        use rustix::fs::inotify;
        let dir = self.path.parent().expect("the audit log's directory").to_path_buf();
        let changed =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).expect("an inotify instance");
        let flags = inotify::WatchFlags::MODIFY | inotify::WatchFlags::CREATE | inotify::WatchFlags::MOVED_TO;
        inotify::add_watch(&changed, &dir, flags).unwrap_or_else(|e| panic!("a watch of {}: {e}", dir.display()));
        let deadline = Instant::now() + within;
        loop {
            if step(self) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let timeout = rustix::time::Timespec::try_from(left).expect("a timeout");
            let mut ready = [rustix::event::PollFd::new(&changed, rustix::event::PollFlags::IN)];
            match rustix::event::poll(&mut ready, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => panic!("waiting for the audit log: {e}"),
            }
            // Drain the notifications; the log is read again above either way.
            let mut buffer = [0u8; 4096];
            while rustix::io::read(&changed, &mut buffer).is_ok_and(|n| n > 0) {}
        }
    }
}

/// Whether an audit event stands for one request: its `ResponseComplete`, or for a watch (which
/// completes only when it ends) its `ResponseStarted`.
pub fn counted(event: &AuditEvent) -> bool {
    match event.verb.as_str() {
        "watch" => event.stage == "ResponseStarted",
        _ => event.stage == "ResponseComplete",
    }
}

/// CPU seconds (`utime + stime`) of a process so far.
#[allow(unsafe_code)] // a libc call of the benchmark; `[lints]` denies unsafe code, src/ forbids it
pub fn cpu_seconds(pid: u32) -> f64 {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start with the state, field 3;
    // utime and stime are fields 14 and 15.
    let fields: Vec<&str> =
        text.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / per_second.max(1.0)
}

/// A `kB` field of `/proc/<pid>/status`, in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `/proc/loadavg`'s three averages.
pub fn load_average() -> String {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// `examples/platform/tenant-rbac.yaml` split into the documents onboarding repeats per tenant
/// (Namespace, ServiceAccount, Roles, RoleBindings, all for `team-payments`) and the cluster-wide
/// ones (the admission policies), applied once.
pub fn tenant_rbac_documents() -> (Vec<String>, Vec<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/platform/tenant-rbac.yaml");
    let example = fs::read_to_string(&path).expect("read examples/platform/tenant-rbac.yaml");
    let kind_of = |document: &str| {
        document.lines().find_map(|line| line.strip_prefix("kind: ")).map(str::trim).unwrap_or_default().to_owned()
    };
    let per_tenant = ["Namespace", "ServiceAccount", "Role", "RoleBinding"];
    let (tenant, cluster_wide): (Vec<String>, Vec<String>) = example
        .split("\n---\n")
        .map(str::to_owned)
        .partition(|document| per_tenant.contains(&kind_of(document).as_str()));
    // Since issue #14 the example holds two Roles and RoleBindings (the impersonated
    // ServiceAccount's, and its people's read access): every kind at least once.
    for kind in per_tenant {
        assert!(tenant.iter().any(|document| kind_of(document) == kind), "no {kind} in tenant-rbac.yaml");
    }
    (tenant, cluster_wide)
}
