//! A test server on a thread of its own (with its own runtime, so that it serves sync and async
//! tests alike), told to stop and joined when dropped: the fakes of GitLab and Azure DevOps and
//! the smart-HTTP Git server.

use std::thread::JoinHandle;

use tokio::sync::oneshot;

/// The thread of a running server; dropping it stops the server and waits for the thread.
pub struct ServerThread {
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    /// Runs `serve` on a thread named `name`; `serve` returns once the receiver it is given
    /// resolves (on drop).
    pub fn spawn(name: String, serve: impl FnOnce(oneshot::Receiver<()>) + Send + 'static) -> ServerThread {
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || serve(stopped))
            .unwrap_or_else(|e| panic!("spawn the thread {name}: {e}"));
        ServerThread { shutdown: Some(shutdown), thread: Some(thread) }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
