//! A TCP server that accepts and never says anything, for timeout tests on any transport.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::process::loopback;

/// Listens on `127.0.0.1:<port>`, accepts every connection, never reads or writes, and keeps the
/// connections open until dropped. A client of any protocol (ssh waits for the banner, http and
/// git:// for a response) hangs until its own timeout.
pub struct Stalling {
    port: u16,
    stopping: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<TcpStream>>>,
    thread: Option<JoinHandle<()>>,
}

impl Stalling {
    /// Listens on a port picked by the OS; accepts connections when this returns.
    pub fn start() -> Stalling {
        let listener = TcpListener::bind(loopback(0)).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local address").port();
        let stopping = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stopping, held) = (Arc::clone(&stopping), Arc::clone(&held));
            std::thread::Builder::new()
                .name(format!("stalling-{port}"))
                .spawn(move || {
                    for connection in listener.incoming() {
                        if stopping.load(Ordering::SeqCst) {
                            break;
                        }
                        if let Ok(stream) = connection {
                            held.lock().unwrap().push(stream);
                        }
                    }
                })
                .expect("spawn the accept thread")
        };
        Stalling { port, stopping, held, thread: Some(thread) }
    }

    /// The port it listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `<scheme>://127.0.0.1:PORT/stalled.git` for `http`, `https`, `git` or `ssh` (with a
    /// `git@` user, so an ssh client gets as far as waiting for the server's banner).
    pub fn url(&self, scheme: &str) -> String {
        let user = if scheme == "ssh" { "git@" } else { "" };
        format!("{scheme}://{user}127.0.0.1:{}/stalled.git", self.port)
    }

    /// Connections accepted so far (and held open).
    pub fn accepted(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

impl Drop for Stalling {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the loop sees the flag.
        let _ = TcpStream::connect(loopback(self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.held.lock().unwrap().clear();
    }
}
