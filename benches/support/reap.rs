//! Reaping a benchmark's child process with `wait4(2)`, which also reports the child's resource
//! usage: its `ru_maxrss` is the peak resident set of that process alone. Shared by the
//! benchmarks through `#[path = "support/reap.rs"] mod reap;`.

use std::io;

/// Waits for `pid` (an unreaped child of this process) to end; its wait status and its
/// resource usage.
#[allow(unsafe_code)] // a libc call of the benchmark; `[lints]` denies unsafe code, src/ forbids it
pub fn wait4(pid: libc::pid_t) -> io::Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data, and wait4 only writes to the two pointers it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: as above; `pid` is our own unreaped child.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            return Ok((status, usage));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
