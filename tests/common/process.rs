//! Process and port helpers shared by the servers of the harness.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// How long a server may take to accept its first connection.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// The loopback address with `port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A port the OS considers free right now: bound on `127.0.0.1:0`, read, released. For daemons
/// that must be told their port (sshd); another process may take it before the daemon binds it,
/// so callers retry with a new port when the daemon fails to bind.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind(loopback(0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

/// Whether the process `pid` is still running: it exists and is not a zombie waiting for its
/// (possibly new) parent to reap it.
pub fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// The direct children of `pid`, read from `/proc` (Linux).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&candidate| parent_of(candidate) == Some(pid))
        .collect()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may contain spaces and parentheses, so split after the last ')'.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

/// Sends SIGKILL to `pid`, ignoring a process that is already gone.
#[allow(unsafe_code)] // a libc call of the harness; `[lints]` denies unsafe code, src/ forbids it
pub fn kill_pid(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) takes plain integers and has no memory effects; the pid is one of ours.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Kills `child` and the processes it forked (one level, e.g. sshd's per-connection processes,
/// which leave sshd's process group), then reaps `child` so its pid is gone when this returns.
/// The forked processes are not ours to reap, so this waits (at most 5 s) until they are dead.
pub fn kill_with_children(child: &mut Child) {
    let children = children_of(child.id());
    for &pid in &children {
        kill_pid(pid);
    }
    let _ = child.kill();
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    while children.iter().any(|&pid| process_running(pid)) && Instant::now() < deadline {
        // SIGKILL is delivered asynchronously; nothing to await for a process that is not our child.
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether the effective user is root.
#[allow(unsafe_code)] // a libc call of the harness; `[lints]` denies unsafe code, src/ forbids it
pub fn running_as_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// `name` looked up on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

/// Polls `127.0.0.1:port` until a connection is accepted and `ready` accepts what the server says
/// on it, or until `deadline`. `still_running` is checked between attempts so a daemon that exited
/// fails at once instead of after the deadline.
pub fn wait_until_serving(
    port: u16,
    deadline: Duration,
    mut ready: impl FnMut(&mut TcpStream) -> bool,
    mut still_running: impl FnMut() -> bool,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if !still_running() {
            return Err(format!("exited before accepting on port {port}"));
        }
        if let Ok(mut stream) = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(1))
            && ready(&mut stream)
        {
            return Ok(());
        }
        if started.elapsed() > deadline {
            return Err(format!("not serving on port {port} after {deadline:?}"));
        }
        // Nothing to await for a foreign daemon's readiness: poll the port (bounded above).
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A readiness check for SSH servers: the first bytes on a new connection are `SSH-2.0-`.
pub fn sends_ssh_banner(stream: &mut TcpStream) -> bool {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut banner = [0u8; 8];
    stream.read_exact(&mut banner).is_ok() && &banner == b"SSH-2.0-"
}
