//! libgit2's process-wide options: the socket timeouts, the configuration search paths and the
//! socket every fetch goes over (`stream::SocketStream`), set once before the first fetch of the process.
//!
//! The one module of cdtarget with unsafe code, and the reason it is a module of its own: git2
//! exposes these setters as `unsafe fn` (they write C globals that every libgit2 call reads, so
//! the caller must make sure no other thread is inside libgit2 meanwhile). Every other module of
//! the crate is compiled under `forbid(unsafe_code)` (see `src/lib.rs`), and a foundation test
//! (`tests/foundation/lints.rs`) fails when `unsafe` appears anywhere else in `src/`. Used by the
//! Git source ([`crate::source`]), which re-exports [`set_io_timeout`].

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use git2::ConfigLevel;

static INIT: Once = Once::new();
static IO_TIMEOUT_MS: AtomicI32 = AtomicI32::new(30_000);
/// Set once the global, XDG, system and ProgramData configuration search paths are emptied.
static ISOLATED: AtomicBool = AtomicBool::new(false);
/// Set once libgit2 connects through [`SocketStream`].
static NO_DELAY: AtomicBool = AtomicBool::new(false);

/// Sets libgit2's socket timeouts (connect and every read), which end a stalled transfer where
/// no progress callback would run. Takes effect only before the first fetch of the process.
pub fn set_io_timeout(timeout: Duration) {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX).max(1);
    IO_TIMEOUT_MS.store(ms, Ordering::SeqCst);
}

/// Sets the options, once per process; every use of libgit2 in cdtarget calls this first.
#[allow(unsafe_code)]
pub(crate) fn init() {
    INIT.call_once(|| {
        let ms = IO_TIMEOUT_MS.load(Ordering::SeqCst);
        // SAFETY: the options are plain C globals. Every use of libgit2 in cdtarget passes through
        // this `Once` first, so no other thread is inside libgit2 while they are written, and every
        // later reader is ordered after the write.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
            let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
            // No configuration but the cache repository's own: a `$HOME/.gitconfig`,
            // `$XDG_CONFIG_HOME/git/config` or `/etc/gitconfig` (`url.<x>.insteadOf`,
            // `http.followRedirects`, proxies) must not change where or how a tenant is fetched.
            let levels = [ConfigLevel::System, ConfigLevel::XDG, ConfigLevel::Global, ConfigLevel::ProgramData];
            let isolated = levels.into_iter().all(|level| git2::opts::set_search_path(level, "").is_ok());
            ISOLATED.store(isolated, Ordering::SeqCst);
        }
        let registered = stream::register();
        NO_DELAY.store(registered, Ordering::SeqCst);
        if !registered {
            tracing::warn!("libgit2 refused cdtarget's socket stream: fetches over HTTP wait on Nagle's algorithm");
        }
    });
}

/// Loads libgit2 while the process has one thread. git2's own first-use set-up sets
/// `SSL_CERT_FILE`/`SSL_CERT_DIR` with `setenv` when they are unset (openssl-probe), which races
/// with any other thread reading the environment; done first thing in `main`, nothing else runs.
pub fn load_before_threads() {
    // An empty in-memory configuration: git2 runs its one-time set-up first; nothing is read.
    let _ = git2::Config::new();
}

/// Whether libgit2 fetches over `stream::SocketStream` (with `TCP_NODELAY`): registered by [`init`].
#[cfg(test)]
fn no_delay() -> bool {
    NO_DELAY.load(Ordering::SeqCst)
}

/// Whether [`init`] cut libgit2 off from the machine's and the user's git configuration.
pub(crate) fn isolated() -> bool {
    ISOLATED.load(Ordering::SeqCst)
}

// === the socket every fetch goes over ===
//
// libgit2's own socket (src/libgit2/streams/socket.c, 1.9) never sets TCP_NODELAY, and its HTTP
// client writes a POST's headers and its body in separate writes: Nagle's algorithm then holds
// the body until the server acknowledges the headers, which a server delays by up to 40 ms. A
// fetch over smart HTTP posts once or twice, so every fetch waited 80-120 ms for nothing (the
// push → applied figure of docs/performance.md). libgit2 lets a program register the stream it
// connects through; this one is libgit2's, with TCP_NODELAY. TLS (OpenSSL's stream wraps it),
// proxies and SSH connect through it as well.

#[allow(unsafe_code)]
mod stream {
    use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
    use std::io;
    use std::mem::MaybeUninit;
    use std::net::ToSocketAddrs;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use socket2::{Domain, Protocol, Socket, TcpKeepalive, Type};

    use super::IO_TIMEOUT_MS;

    /// `GIT_STREAM_VERSION`.
    const STREAM_VERSION: c_int = 1;
    /// `GIT_STREAM_STANDARD`: the plain socket streams (TLS is layered on top by libgit2).
    const STREAM_STANDARD: c_int = 1;
    /// `GIT_ERROR_NET`.
    const ERROR_NET: c_int = 12;
    /// `GIT_TIMEOUT`: what libgit2's socket returns when a timeout ends a read, write or connect.
    const GIT_TIMEOUT: c_int = -37;

    /// libgit2's `git_stream` (include/git2/sys/stream.h, version 1).
    #[repr(C)]
    struct RawStream {
        version: c_int,
        /// The bit fields `encrypted` and `proxy_support`: both 0 for a plain socket.
        flags: c_uint,
        timeout: c_int,
        connect_timeout: c_int,
        connect: Option<unsafe extern "C" fn(*mut RawStream) -> c_int>,
        certificate: Option<unsafe extern "C" fn(*mut *mut c_void, *mut RawStream) -> c_int>,
        set_proxy: Option<unsafe extern "C" fn(*mut RawStream, *const c_void) -> c_int>,
        read: Option<unsafe extern "C" fn(*mut RawStream, *mut c_void, usize) -> isize>,
        write: Option<unsafe extern "C" fn(*mut RawStream, *const c_char, usize, c_int) -> isize>,
        close: Option<unsafe extern "C" fn(*mut RawStream) -> c_int>,
        free: Option<unsafe extern "C" fn(*mut RawStream)>,
    }

    /// The stream libgit2 connects through: laid out as libgit2's `git_socket_stream`
    /// (src/libgit2/streams/socket.h), because its SSH transport reads the descriptor `s` of the
    /// standard stream it is given to hand it to libssh2; the socket itself comes after.
    #[repr(C)]
    struct SocketStream {
        raw: RawStream,
        host: *mut c_char,
        port: *mut c_char,
        /// The connected socket's descriptor, -1 before `connect` and after `close`.
        s: c_int,
        socket: Option<socket2::Socket>,
    }

    /// libgit2's `git_stream_registration`.
    #[repr(C)]
    struct Registration {
        version: c_int,
        init: Option<unsafe extern "C" fn(*mut *mut RawStream, *const c_char, *const c_char) -> c_int>,
        wrap: Option<unsafe extern "C" fn(*mut *mut RawStream, *mut RawStream, *const c_char) -> c_int>,
    }

    /// Registers [`SocketStream`] as libgit2's standard stream; whether libgit2 took it.
    ///
    /// Called once, from [`init`]'s `Once` (the registry is libgit2's global, written under its
    /// own lock; libgit2 was initialised by the setters before).
    pub(super) fn register() -> bool {
        let mut registration = Registration { version: STREAM_VERSION, init: Some(stream_new), wrap: None };
        // SAFETY: a valid registration, copied by libgit2 before the call returns.
        unsafe { git_stream_register(STREAM_STANDARD, &mut registration) == 0 }
    }

    // Exported by libgit2 (include/git2/sys/stream.h, include/git2/sys/errors.h); git2 links it.
    unsafe extern "C" {
        fn git_stream_register(kind: c_int, registration: *mut Registration) -> c_int;
        fn git_error_set_str(class: c_int, message: *const c_char) -> c_int;
    }

    /// A millisecond timeout of libgit2's (0: none).
    fn millis(ms: c_int) -> Option<Duration> {
        u64::try_from(ms).ok().filter(|ms| *ms > 0).map(Duration::from_millis)
    }

    /// Connects to `host:port` as libgit2's socket does (each resolved address in turn, a timeout
    /// ending the attempt, keepalive probes after a minute idle), with `TCP_NODELAY`.
    fn open(
        host: &str,
        port: &str,
        connect_timeout: Option<Duration>,
        io_timeout: Option<Duration>,
    ) -> io::Result<Socket> {
        let port: u16 = port.parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "invalid port"))?;
        let mut failed = None;
        for address in (host, port).to_socket_addrs()? {
            let socket = Socket::new(Domain::for_address(address), Type::STREAM, Some(Protocol::TCP))?;
            let keepalive = TcpKeepalive::new()
                .with_time(Duration::from_secs(60))
                .with_interval(Duration::from_secs(10))
                .with_retries(3);
            socket.set_tcp_keepalive(&keepalive)?;
            let connected = match connect_timeout {
                Some(timeout) => socket.connect_timeout(&address.into(), timeout),
                None => socket.connect(&address.into()),
            };
            match connected {
                Ok(()) => {
                    socket.set_tcp_nodelay(true)?;
                    socket.set_read_timeout(io_timeout)?;
                    socket.set_write_timeout(io_timeout)?;
                    return Ok(socket);
                }
                Err(error) if error.kind() == io::ErrorKind::TimedOut => return Err(error),
                Err(error) => failed = Some(error),
            }
        }
        Err(failed.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
    }

    fn timed_out(error: &io::Error) -> bool {
        matches!(error.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)
    }

    /// Sets libgit2's error message; `-1`, or [`GIT_TIMEOUT`] when `error` is a timeout (libgit2
    /// reports it as such, and the fetch's error says the transfer took too long).
    fn failed(doing: &str, error: &io::Error) -> c_int {
        let (message, code) = if timed_out(error) {
            (format!("{doing}: timed out"), GIT_TIMEOUT)
        } else {
            (format!("{doing}: {error}"), -1)
        };
        let message = CString::new(message).unwrap_or_default();
        // SAFETY: a NUL-terminated message; libgit2 copies it into its thread-local error.
        unsafe { git_error_set_str(ERROR_NET, message.as_ptr()) };
        code
    }

    /// `init` of the registration: a stream to `host:port`, not yet connected.
    unsafe extern "C" fn stream_new(out: *mut *mut RawStream, host: *const c_char, port: *const c_char) -> c_int {
        // SAFETY: libgit2 passes NUL-terminated host and port and a pointer to store the stream in.
        let (host, port) = unsafe { (CStr::from_ptr(host).to_owned(), CStr::from_ptr(port).to_owned()) };
        let ms = IO_TIMEOUT_MS.load(Ordering::SeqCst);
        let stream = Box::new(SocketStream {
            raw: RawStream {
                version: STREAM_VERSION,
                flags: 0,
                timeout: ms,
                connect_timeout: ms,
                connect: Some(stream_connect),
                certificate: None,
                set_proxy: None,
                read: Some(stream_read),
                write: Some(stream_write),
                close: Some(stream_close),
                free: Some(stream_free),
            },
            host: host.into_raw(),
            port: port.into_raw(),
            s: -1,
            socket: None,
        });
        // SAFETY: `out` is valid for a write (above); `raw` is the first field of a `repr(C)`
        // struct, so the pointer is also a `git_stream *`, which `stream_free` turns back.
        unsafe { *out = Box::into_raw(stream).cast::<RawStream>() };
        0
    }

    /// The stream behind libgit2's pointer.
    ///
    /// # Safety
    /// `stream` came from [`stream_new`] and was not freed; libgit2 uses a stream from one thread.
    unsafe fn ours<'a>(stream: *mut RawStream) -> &'a mut SocketStream {
        // SAFETY: as the caller promises.
        unsafe { &mut *stream.cast::<SocketStream>() }
    }

    unsafe extern "C" fn stream_connect(stream: *mut RawStream) -> c_int {
        // SAFETY: called by libgit2 on a stream of `stream_new`.
        let stream = unsafe { ours(stream) };
        // SAFETY: set from `CString::into_raw` in `stream_new`, freed only in `stream_free`.
        let (host, port) = unsafe { (CStr::from_ptr(stream.host), CStr::from_ptr(stream.port)) };
        let (host, port) = (host.to_string_lossy(), port.to_string_lossy());
        match open(&host, &port, millis(stream.raw.connect_timeout), millis(stream.raw.timeout)) {
            Ok(socket) => {
                stream.s = socket.as_raw_fd();
                stream.socket = Some(socket);
                0
            }
            Err(error) => failed(&format!("failed to connect to {host}"), &error),
        }
    }

    unsafe extern "C" fn stream_read(stream: *mut RawStream, data: *mut c_void, len: usize) -> isize {
        // SAFETY: called by libgit2 on a stream of `stream_new`.
        let stream = unsafe { ours(stream) };
        let Some(socket) = &stream.socket else {
            return failed("could not read from socket", &io::Error::from(io::ErrorKind::NotConnected)) as isize;
        };
        // SAFETY: libgit2 hands a buffer of `len` bytes, possibly uninitialised (hence MaybeUninit).
        let buffer = unsafe { std::slice::from_raw_parts_mut(data.cast::<MaybeUninit<u8>>(), len) };
        loop {
            match socket.recv(buffer) {
                Ok(read) => return isize::try_from(read).unwrap_or(isize::MAX),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return failed("could not read from socket", &error) as isize,
            }
        }
    }

    unsafe extern "C" fn stream_write(stream: *mut RawStream, data: *const c_char, len: usize, _flags: c_int) -> isize {
        // SAFETY: called by libgit2 on a stream of `stream_new`.
        let stream = unsafe { ours(stream) };
        let Some(socket) = &stream.socket else {
            return failed("could not write to socket", &io::Error::from(io::ErrorKind::NotConnected)) as isize;
        };
        // SAFETY: libgit2 hands `len` initialised bytes.
        let mut left = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
        while !left.is_empty() {
            match socket.send(left) {
                Ok(0) => {
                    return failed("could not write to socket", &io::Error::from(io::ErrorKind::WriteZero)) as isize;
                }
                Ok(sent) => left = &left[sent..],
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return failed("could not write to socket", &error) as isize,
            }
        }
        isize::try_from(len).unwrap_or(isize::MAX)
    }

    unsafe extern "C" fn stream_close(stream: *mut RawStream) -> c_int {
        // SAFETY: called by libgit2 on a stream of `stream_new`.
        let stream = unsafe { ours(stream) };
        stream.socket = None;
        stream.s = -1;
        0
    }

    unsafe extern "C" fn stream_free(stream: *mut RawStream) {
        // SAFETY: the pointer `stream_new` boxed; libgit2 frees a stream once and never uses it after.
        let stream = unsafe { Box::from_raw(stream.cast::<SocketStream>()) };
        // SAFETY: both from `CString::into_raw` in `stream_new`.
        unsafe {
            drop(CString::from_raw(stream.host));
            drop(CString::from_raw(stream.port));
        }
    }

    #[cfg(test)]
    mod tests {
        use std::net::TcpListener;

        use super::*;

        /// Connects a stream of [`stream_new`] to `listener` as libgit2 would.
        fn connected(listener: &TcpListener) -> *mut RawStream {
            let host = CString::new("127.0.0.1").unwrap();
            let port = CString::new(listener.local_addr().unwrap().port().to_string()).unwrap();
            let mut stream = std::ptr::null_mut();
            // SAFETY: as libgit2 calls them: valid strings, a stream of `stream_new`.
            unsafe {
                assert_eq!(stream_new(&mut stream, host.as_ptr(), port.as_ptr()), 0);
                assert_eq!(stream_connect(stream), 0);
            }
            stream
        }

        #[test]
        fn init_makes_libgit2_connect_through_this_stream() {
            crate::libgit2_globals::init();
            assert!(crate::libgit2_globals::no_delay());
        }

        #[test]
        fn fetches_connect_with_nagle_off_and_the_descriptor_where_libssh2_reads_it() {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let stream = connected(&listener);
            // SAFETY: a stream of `stream_new`, freed at the end.
            let ours = unsafe { ours(stream) };
            let socket = ours.socket.as_ref().unwrap();
            assert!(socket.tcp_nodelay().unwrap(), "TCP_NODELAY is set");
            assert_eq!(ours.s, socket.as_raw_fd(), "git_socket_stream.s is the descriptor");
            assert_eq!(std::mem::offset_of!(SocketStream, s), std::mem::size_of::<RawStream>() + 16);
            // SAFETY: as above.
            unsafe { stream_free(stream) };
        }

        #[test]
        fn bytes_written_arrive_and_bytes_sent_are_read() {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let stream = connected(&listener);
            let (mut peer, _) = listener.accept().unwrap();
            let request = b"POST /git-upload-pack HTTP/1.1\r\n\r\n0032want";
            // SAFETY: a stream of `stream_new` and buffers of the lengths given.
            unsafe {
                let written = stream_write(stream, request.as_ptr().cast(), request.len(), 0);
                assert_eq!(written, request.len() as isize);
            }
            let mut received = vec![0; request.len()];
            std::io::Read::read_exact(&mut peer, &mut received).unwrap();
            assert_eq!(received, request);
            std::io::Write::write_all(&mut peer, b"0008NAK\n").unwrap();
            drop(peer);
            let mut buffer = [0u8; 64];
            let mut got = Vec::new();
            loop {
                // SAFETY: as above.
                let read = unsafe { stream_read(stream, buffer.as_mut_ptr().cast(), buffer.len()) };
                assert!(read >= 0, "read failed");
                if read == 0 {
                    break;
                }
                got.extend_from_slice(&buffer[..read as usize]);
            }
            assert_eq!(got, b"0008NAK\n");
            // SAFETY: as above.
            unsafe {
                assert_eq!(stream_close(stream), 0);
                stream_free(stream);
            }
        }

        #[test]
        fn a_refused_connection_is_an_error_naming_the_host() {
            crate::libgit2_globals::init(); // libgit2 keeps its error per thread once initialised
            let port = {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                listener.local_addr().unwrap().port()
            };
            let host = CString::new("127.0.0.1").unwrap();
            let port = CString::new(port.to_string()).unwrap();
            let mut stream = std::ptr::null_mut();
            // SAFETY: as libgit2 calls them.
            unsafe {
                assert_eq!(stream_new(&mut stream, host.as_ptr(), port.as_ptr()), 0);
                assert_eq!(stream_connect(stream), -1);
                stream_free(stream);
            }
            let error = git2::Error::last_error(0);
            assert!(error.message().contains("failed to connect to 127.0.0.1"), "{}", error.message());
        }
    }
}
