//! `git://` through `git daemon --inetd`, one process per connection.

use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::process::loopback;

/// A `git://` server on `127.0.0.1:<port>` exporting every repository under a root directory
/// (read-only). An accept loop on a background thread hands each connection to its own
/// `git daemon --inetd` as stdin and stdout, so no port is ever guessed. Stopped on drop, running
/// daemons killed.
pub struct GitDaemon {
    port: u16,
    root: PathBuf,
    state: Arc<DaemonState>,
    thread: Option<JoinHandle<()>>,
}

struct DaemonState {
    stopping: AtomicBool,
    connections: AtomicUsize,
    children: Mutex<Vec<Child>>,
}

impl GitDaemon {
    /// Listens on a port picked by the OS and serves `root`; accepts connections when this
    /// returns.
    pub fn start(root: &Path) -> GitDaemon {
        let listener = TcpListener::bind(loopback(0)).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local address").port();
        let state = Arc::new(DaemonState {
            stopping: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            children: Mutex::default(),
        });
        let thread = {
            let state = Arc::clone(&state);
            let root = root.to_path_buf();
            std::thread::Builder::new()
                .name(format!("git-daemon-{port}"))
                .spawn(move || accept_loop(&listener, &root, &state))
                .expect("spawn the accept thread")
        };
        GitDaemon { port, root: root.to_path_buf(), state, thread: Some(thread) }
    }

    /// The port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `git://127.0.0.1:PORT/<name>`, `name` relative to the served root.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{}", self.port, name.trim_start_matches('/'))
    }

    /// The directory served.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The pids of the `git daemon --inetd` processes still running.
    pub fn running_pids(&self) -> Vec<u32> {
        let mut children = self.state.children.lock().unwrap();
        children.retain_mut(|child| matches!(child.try_wait(), Ok(None)));
        children.iter().map(Child::id).collect()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the loop sees the flag.
        let _ = TcpStream::connect(loopback(self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        for mut child in self.state.children.lock().unwrap().drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn accept_loop(listener: &TcpListener, root: &Path, state: &DaemonState) {
    for connection in listener.incoming() {
        if state.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = connection else { continue };
        state.connections.fetch_add(1, Ordering::SeqCst);
        let mut children = state.children.lock().unwrap();
        // Reap the daemons that are done, so the list only holds running ones.
        children.retain_mut(|child| matches!(child.try_wait(), Ok(None)));
        match spawn_daemon(stream, root) {
            Ok(child) => children.push(child),
            Err(e) => eprintln!("git daemon --inetd could not start: {e}"),
        }
    }
}

fn spawn_daemon(stream: TcpStream, root: &Path) -> std::io::Result<Child> {
    stream.set_nonblocking(false)?;
    let input = OwnedFd::from(stream.try_clone()?);
    let output = OwnedFd::from(stream);
    super::git_command()
        .arg("daemon")
        .args(["--inetd", "--export-all", "--informative-errors"])
        .arg(format!("--base-path={}", root.display()))
        .stdin(Stdio::from(input))
        .stdout(Stdio::from(output))
        .stderr(Stdio::null())
        .spawn()
}
