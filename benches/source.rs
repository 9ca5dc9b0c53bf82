//! Git source benchmark, side by side with the git CLI in the same run, over `git daemon` on
//! 127.0.0.1 (see docs/performance.md):
//!
//! - (a) a no-op poll of N unchanged repositories (200 by default): one pass of cdtarget's
//!   [`Fetcher`] over all of them (bounded concurrency), against a shell loop of `git fetch` in
//!   pre-cloned repositories (what a scripted operator does) and a shell loop of `git ls-remote`,
//!   both also with the CLI forced to protocol v0, and against the floor of any poller (the bare
//!   git:// ref advertisement exchange, at the same concurrency, with nothing around it);
//! - (b) the first clone of a repository with a ~10 MB pack: cdtarget's `fetch_blocking` into an
//!   empty cache (tree written, as the controller does) against `git clone --depth 1`.
//!
//! ```text
//! cargo bench --bench source
//! cargo bench --bench source -- --repos 200 --runs 3 --concurrency 4 --sweep 1,16,64
//! cargo bench --bench source -- --only poll          # or --only clone
//! cargo bench --bench source -- --pack-mib 10 --files 2000 --clone-runs 7
//! ```
//!
//! The servers (`git daemon --inetd` and the `git upload-pack` it starts, one pair per
//! connection) are children of this benchmark process. Every client contender runs as its own
//! child process instead (the shell loops; cdtarget as this binary re-executed with a hidden
//! argument) and is reaped with `wait4(2)`, whose rusage is that child's and its own reaped
//! descendants' only: the server's CPU is never counted as the client's. The server's CPU is
//! reported apart, from this process's `RUSAGE_CHILDREN` once the daemons of a run have exited.
//! Nothing here asserts on time; it prints the numbers, the ratios and the goals.

#[path = "support/args.rs"]
mod args;

#[path = "../tests/common/mod.rs"]
mod common;

#[path = "support/reap.rs"]
mod reap;

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use cdtarget::source::{self, Credentials, Fetched, Fetcher, Limits, Reference, Request};

use common::{GitDaemon, Upstream};
use reap::wait4;

/// The hidden argument under which this binary is one poll pass of cdtarget's `Fetcher`:
/// `__poll-pass CACHE_ROOT URLS_FILE CONCURRENCY unchanged|updated`.
const POLL_ARG: &str = "__poll-pass";
/// The hidden argument under which this binary is cdtarget's first clone:
/// `__first-clone CACHE URL`.
const CLONE_ARG: &str = "__first-clone";
/// The hidden argument under which this binary asks every URL for its refs with the bare git://
/// protocol and nothing else, the floor of any poller: `__raw-poll URLS_FILE CONCURRENCY`.
const RAW_ARG: &str = "__raw-poll";
/// The branch every repository is polled on.
const BRANCH: &str = "main";
/// A client contender that takes longer than this is killed and the benchmark fails.
const RUN_DEADLINE: Duration = Duration::from_secs(600);

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some(POLL_ARG) => std::process::exit(poll_pass(&args[1..])),
        Some(CLONE_ARG) => std::process::exit(first_clone(&args[1..])),
        Some(RAW_ARG) => std::process::exit(raw_poll(&args[1..])),
        _ => {}
    }
    let options = Options::parse(&args);
    if let Err(e) = run(&options) {
        eprintln!("source bench: {e}");
        std::process::exit(1);
    }
}

/// What to run, from the arguments.
struct Options {
    /// Repositories polled in (a).
    repos: usize,
    /// Measured runs per contender in (a) (the median is reported).
    runs: usize,
    /// The `Fetcher`'s concurrency the goals are judged at (default: the controller's, 4).
    concurrency: usize,
    /// Further concurrencies measured for information.
    sweep: Vec<usize>,
    /// Measured runs per contender in (b).
    clone_runs: usize,
    /// Incompressible bytes in the repository of (b), in MiB.
    pack_mib: usize,
    /// Files they are spread over.
    files: usize,
    poll: bool,
    clone: bool,
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let mut options = Options {
            repos: 200,
            runs: 3,
            // The controller's default (`--fetch-concurrency`, `CDTARGET_FETCH_CONCURRENCY`).
            concurrency: 4,
            sweep: vec![1, 16, 64],
            clone_runs: 7,
            pack_mib: 10,
            files: 2000,
            poll: true,
            clone: true,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value"))).clone();
            match arg.as_str() {
                "--bench" => {} // passed by `cargo bench`
                "--repos" => options.repos = number(&value()),
                "--runs" => options.runs = number(&value()),
                "--concurrency" => options.concurrency = number(&value()),
                "--sweep" => {
                    let v = value();
                    options.sweep = v.split(',').filter(|s| !s.trim().is_empty()).map(number).collect();
                }
                "--clone-runs" => options.clone_runs = number(&value()),
                "--pack-mib" => options.pack_mib = number(&value()),
                "--files" => options.files = number(&value()),
                "--only" => match value().as_str() {
                    "poll" => options.clone = false,
                    "clone" => options.poll = false,
                    other => usage(&format!("--only takes `poll` or `clone`, not `{other}`")),
                },
                other if other.starts_with('-') => usage(&format!("unknown option {other}")),
                _ => {} // a name filter given to `cargo bench`
            }
        }
        options.sweep.retain(|&c| c != options.concurrency);
        options
    }
}

fn number(text: &str) -> usize {
    args::positive(text).unwrap_or_else(|why| usage(&why))
}

fn usage(message: &str) -> ! {
    eprintln!(
        "source bench: {message}\n\
         usage: cargo bench --bench source -- [--only poll|clone] [--repos N] [--runs N] [--concurrency N] \
         [--sweep N,N] [--clone-runs N] [--pack-mib N] [--files N]"
    );
    std::process::exit(2)
}

// ---------------------------------------------------------------------------------------------
// The client sides run in child processes.

/// One pass of the `Fetcher` over every URL of `URLS_FILE` (one a line), as the controller's
/// reconcilers would call it: every registration at once, at most `CONCURRENCY` fetches running.
fn poll_pass(args: &[String]) -> i32 {
    let [cache_root, urls_file, concurrency, expect] = args else {
        eprintln!("usage: {POLL_ARG} CACHE_ROOT URLS_FILE CONCURRENCY unchanged|updated");
        return 2;
    };
    let Ok(text) = fs::read_to_string(urls_file) else {
        eprintln!("cannot read {urls_file}");
        return 2;
    };
    let urls: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    let fetcher = Fetcher::new(cache_root, Limits::default(), concurrency.parse().unwrap_or(1));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let outcomes = runtime.block_on(async {
        let tasks: Vec<_> = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let fetcher = fetcher.clone();
                let request = branch_request(url);
                tokio::spawn(async move { fetcher.fetch(&format!("bench/tenant-{i:03}"), request).await })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await);
        }
        outcomes
    });
    let (mut unchanged, mut updated, mut failed) = (0, 0, 0);
    for outcome in outcomes {
        match outcome {
            Ok(Ok(Fetched::Unchanged(_))) => unchanged += 1,
            Ok(Ok(Fetched::Updated(_))) => updated += 1,
            Ok(Err(e)) => {
                failed += 1;
                eprintln!("{e}");
            }
            Err(e) => {
                failed += 1;
                eprintln!("task: {e}");
            }
        }
    }
    println!("unchanged {unchanged} updated {updated} failed {failed}");
    let wanted = if expect == "updated" { updated } else { unchanged };
    if failed > 0 || wanted != urls.len() { 1 } else { 0 }
}

/// cdtarget's first fetch of `URL` into the empty cache `CACHE`, tree written; prints the
/// revision.
fn first_clone(args: &[String]) -> i32 {
    let [cache, url] = args else {
        eprintln!("usage: {CLONE_ARG} CACHE URL");
        return 2;
    };
    match source::fetch_blocking(Path::new(cache), &branch_request(url), &Limits::default(), None) {
        Ok(Fetched::Updated(snapshot)) => {
            println!("{}", snapshot.revision);
            0
        }
        Ok(other) => {
            eprintln!("expected a new snapshot, got {other:?}");
            1
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// The floor of a poll over git:// (what libgit2 does on the wire for `connect` and `list`, with
/// nothing around it): connect, send the `git-upload-pack` request, read the ref advertisement up
/// to its flush packet, send a flush packet, close. Plain threads, `CONCURRENCY` at once; prints
/// how many advertisements named the branch.
fn raw_poll(args: &[String]) -> i32 {
    let [urls_file, concurrency] = args else {
        eprintln!("usage: {RAW_ARG} URLS_FILE CONCURRENCY");
        return 2;
    };
    let Ok(text) = fs::read_to_string(urls_file) else {
        eprintln!("cannot read {urls_file}");
        return 2;
    };
    let urls: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found = std::sync::atomic::AtomicUsize::new(0);
    let threads = concurrency.parse().unwrap_or(1).clamp(1, urls.len().max(1));
    let failed = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(url) = urls.get(i) else { return Ok(()) };
                        if advertise(url)? {
                            found.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .filter_map(Result::err)
            .inspect(|e| eprintln!("{e}"))
            .count()
    });
    println!("advertised {}", found.into_inner());
    if failed > 0 { 1 } else { 0 }
}

/// One ref advertisement of `git://HOST:PORT/PATH`; whether it named the branch.
fn advertise(url: &str) -> io::Result<bool> {
    use std::io::Write as _;
    let rest = url.strip_prefix("git://").ok_or_else(|| io::Error::other(format!("not git://: {url}")))?;
    let (host, path) = rest.split_once('/').ok_or_else(|| io::Error::other(format!("no path: {url}")))?;
    let mut stream = std::net::TcpStream::connect(host)?;
    let request = format!("git-upload-pack /{path}\0host={host}\0");
    stream.write_all(format!("{:04x}{request}", request.len() + 4).as_bytes())?;
    let wanted = format!("refs/heads/{BRANCH}");
    let mut named = false;
    loop {
        let mut length = [0u8; 4];
        stream.read_exact(&mut length)?;
        let length = std::str::from_utf8(&length)
            .ok()
            .and_then(|l| usize::from_str_radix(l, 16).ok())
            .ok_or_else(|| io::Error::other("bad pkt-line length"))?;
        if length == 0 {
            break;
        }
        let mut line = vec![0u8; length.saturating_sub(4)];
        stream.read_exact(&mut line)?;
        let line = String::from_utf8_lossy(&line);
        let name = line.split(['\0', '\n']).next().unwrap_or_default();
        named |= name.split(' ').nth(1) == Some(wanted.as_str());
    }
    stream.write_all(b"0000")?;
    Ok(named)
}

fn branch_request(url: &str) -> Request {
    Request {
        url: url.to_owned(),
        reference: Reference::Branch(BRANCH.into()),
        credentials: Credentials::None,
        ca_bundle: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring a child.

/// What one run of a client contender took.
#[derive(Clone, Debug)]
struct Measurement {
    wall: Duration,
    /// User plus system CPU of the client process and the descendants it reaped.
    cpu: Duration,
    /// CPU of the server processes (`git daemon --inetd`, `git upload-pack`, `git pack-objects`)
    /// that served this run.
    server_cpu: Duration,
    stdout: String,
}

/// The processes a run started: the child leads its own process group, and the whole group is
/// killed if the run is abandoned (deadline, panic) before the child was reaped.
struct Group {
    pid: libc::pid_t,
    reaped: bool,
}

impl Drop for Group {
    #[allow(unsafe_code)] // a libc call of the benchmark; `[lints]` denies unsafe code, src/ forbids it
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: kill(2) with plain integers; the group is the one our child leads.
            unsafe {
                libc::kill(-self.pid, libc::SIGKILL);
            }
        }
    }
}

/// Runs `command` as a new process group with a clean git environment, reaps it with `wait4`,
/// and fails unless it exits 0. `daemon` is waited for until the server processes of the run
/// have exited, so that their CPU can be told apart.
fn run_client(mut command: Command, env: &ClientEnv, daemon: &GitDaemon) -> io::Result<Measurement> {
    env.apply(&mut command);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    wait_for_idle_server(daemon);
    let children_before = children_cpu();
    let start = Instant::now();
    let mut child = command.spawn()?;
    let mut group = Group { pid: child.id() as libc::pid_t, reaped: false };
    let pid = group.pid;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        text
    });
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let reaped = wait4(pid);
        let _ = sender.send((reaped, Instant::now()));
    });
    let (reaped, end) = match receiver.recv_timeout(RUN_DEADLINE) {
        Ok(reaped) => reaped,
        Err(_) => {
            drop(group); // kills the group; the waiter thread reaps the child
            return Err(io::Error::other(format!("no exit after {RUN_DEADLINE:?}; killed")));
        }
    };
    let (status, usage) = reaped?;
    group.reaped = true;
    // `child` was reaped by wait4; dropping it neither waits nor kills.
    drop(child);
    let wall = end - start;
    let stdout = out.join().expect("stdout thread");
    let errors = err.join().expect("stderr thread");
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let errors = String::from_utf8_lossy(&errors);
        let head: String = errors.lines().take(10).collect::<Vec<_>>().join("\n");
        return Err(io::Error::other(format!("failed (wait status {status}):\n{head}\n{stdout}")));
    }
    let cpu = cpu_time(&usage);
    wait_for_idle_server(daemon);
    // Everything this process reaped during the run: the client, and the daemons (reaped by the
    // harness's `running_pids`, which `wait_for_idle_server` calls).
    let server_cpu = (children_cpu() - children_before).saturating_sub(cpu);
    Ok(Measurement { wall, cpu, server_cpu, stdout })
}

/// Waits (at most 10 s) until no `git daemon --inetd` of `daemon` is running, reaping those done.
fn wait_for_idle_server(daemon: &GitDaemon) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.running_pids().is_empty() && Instant::now() < deadline {
        // The daemons are the harness's children: nothing to await but their exit.
        thread::sleep(Duration::from_millis(2));
    }
}

/// User plus system CPU of every child this process has reaped so far.
#[allow(unsafe_code)] // a libc call of the benchmark; `[lints]` denies unsafe code, src/ forbids it
fn children_cpu() -> Duration {
    // SAFETY: rusage is plain old data; getrusage only writes to the pointer it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
    }
    cpu_time(&usage)
}

fn cpu_time(usage: &libc::rusage) -> Duration {
    let time = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The environment every client runs in: git's system and global configuration ignored, no
/// prompts, and an empty `HOME` (libgit2 reads `~/.gitconfig` too).
struct ClientEnv {
    home: PathBuf,
}

impl ClientEnv {
    fn apply(&self, command: &mut Command) {
        command
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
    }
}

// ---------------------------------------------------------------------------------------------
// The benchmark.

fn run(options: &Options) -> io::Result<()> {
    println!("cdtarget Git source benchmark (git daemon on 127.0.0.1)");
    if cfg!(debug_assertions) {
        println!("  WARNING: not an optimised build; run it with `cargo bench --bench source`");
    }
    println!("  cpus:      {}", thread::available_parallelism().map_or(0, |n| n.get()));
    println!("  git:       {}", git_version());
    let scratch = common::test_dir();
    let home = scratch.path().join("home");
    fs::create_dir_all(&home)?;
    let env = ClientEnv { home };
    let mut report = String::new();
    if options.poll {
        report.push_str(&bench_polls(options, &env, scratch.path())?);
    }
    if options.clone {
        report.push_str(&bench_clone(options, &env, scratch.path())?);
    }
    println!("\n{report}");
    Ok(())
}

fn git_version() -> String {
    Command::new("git")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("not found ({e})"))
}

/// A contender of (a).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Poller {
    /// `git fetch` in each pre-cloned repository, one after the other; `v0` forces wire protocol
    /// version 0 (the CLI speaks version 2 by default).
    FetchLoop { v0: bool },
    /// `git ls-remote URL refs/heads/main` for each repository, one after the other.
    LsRemoteLoop { v0: bool },
    /// One pass of cdtarget's `Fetcher` at this concurrency.
    Cdtarget(usize),
    /// The bare protocol exchange, at this concurrency: the floor of any poller.
    Floor(usize),
}

impl Poller {
    fn name(self) -> String {
        let protocol = |v0: bool| if v0 { ", protocol v0" } else { "" };
        match self {
            Poller::FetchLoop { v0 } => format!("git fetch loop{}", protocol(v0)),
            Poller::LsRemoteLoop { v0 } => format!("git ls-remote loop{}", protocol(v0)),
            Poller::Cdtarget(concurrency) => format!("cdtarget Fetcher pass, concurrency {concurrency}"),
            Poller::Floor(concurrency) => format!("raw git:// ref advertisement (floor), concurrency {concurrency}"),
        }
    }

    fn command(self, cache: &Path, urls_file: &Path, dirs_file: &Path) -> io::Result<Command> {
        let git = |v0: bool| if v0 { "git -c protocol.version=0" } else { "git" };
        Ok(match self {
            Poller::FetchLoop { v0 } => shell_loop(
                &format!(r#"while IFS= read -r d; do {} -C "$d" fetch -q origin || exit 1; done < "$1""#, git(v0)),
                dirs_file,
            ),
            Poller::LsRemoteLoop { v0 } => shell_loop(
                &format!(
                    r#"while IFS= read -r u; do {} ls-remote "$u" refs/heads/{BRANCH} || exit 1; done < "$1""#,
                    git(v0)
                ),
                urls_file,
            ),
            Poller::Cdtarget(concurrency) => poll_command(cache, urls_file, concurrency, "unchanged")?,
            Poller::Floor(concurrency) => {
                let mut command = Command::new(env::current_exe()?);
                command.arg(RAW_ARG).arg(urls_file).arg(concurrency.to_string());
                command
            }
        })
    }
}

/// The runs of one contender, summarised.
struct Summary {
    name: String,
    /// Median wall time.
    wall: Duration,
    /// Median client CPU (the median of the CPU times, independently of the wall times).
    cpu: Duration,
    /// Median server CPU.
    server_cpu: Duration,
    walls: Vec<Duration>,
}

fn summarize(name: String, measurements: &[Measurement]) -> Summary {
    let median = |mut values: Vec<Duration>| {
        values.sort();
        values[values.len() / 2]
    };
    let summary = Summary {
        name,
        wall: median(measurements.iter().map(|m| m.wall).collect()),
        cpu: median(measurements.iter().map(|m| m.cpu).collect()),
        server_cpu: median(measurements.iter().map(|m| m.server_cpu).collect()),
        walls: measurements.iter().map(|m| m.wall).collect(),
    };
    println!(
        "  {:<36} {:>8.3} s wall  {:>8.3} s client CPU  {:>8.3} s server CPU  (median of {}; walls {})",
        summary.name,
        secs(summary.wall),
        secs(summary.cpu),
        secs(summary.server_cpu),
        measurements.len(),
        summary.walls.iter().map(|w| format!("{:.3}", secs(*w))).collect::<Vec<_>>().join(" ")
    );
    summary
}

/// (a): no-op polls of `options.repos` unchanged repositories.
fn bench_polls(options: &Options, env: &ClientEnv, scratch: &Path) -> io::Result<String> {
    let n = options.repos;
    println!("\n(a) no-op poll of {n} unchanged repositories");
    let started = Instant::now();
    let upstream = Upstream::new();
    let names: Vec<String> = (0..n).map(|i| format!("tenant-{i:03}.git")).collect();
    // Distinct small repositories, a few manifests each, created four at a time.
    thread::scope(|scope| {
        for chunk in names.chunks(n.div_ceil(4)) {
            let upstream = &upstream;
            scope.spawn(move || {
                for name in chunk {
                    let repo = upstream.create(name);
                    let files = tenant_files(name);
                    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
                    repo.commit_and_push(&files, "first");
                }
            });
        }
    });
    let daemon = GitDaemon::start(&upstream.root());
    let urls: Vec<String> = names.iter().map(|name| daemon.url(name)).collect();
    let urls_file = scratch.join("urls.txt");
    fs::write(&urls_file, urls.join("\n") + "\n")?;
    // The operator's clones, for the fetch loop.
    let clones = scratch.join("clones");
    let dirs: Vec<PathBuf> = (0..n).map(|i| clones.join(format!("tenant-{i:03}"))).collect();
    let dirs_file = scratch.join("dirs.txt");
    fs::write(&dirs_file, dirs.iter().map(|d| d.display().to_string() + "\n").collect::<String>())?;
    for (url, dir) in urls.iter().zip(&dirs) {
        let mut clone = Command::new("git");
        clone.args(["clone", "-q", url]).arg(dir);
        run_client(clone, env, &daemon).map_err(|e| io::Error::other(format!("git clone {url}: {e}")))?;
    }
    println!("  set up {n} repositories and their clones in {:.1} s", started.elapsed().as_secs_f64());

    // cdtarget's first pass clones everything into its cache: the passes measured after it are
    // no-op polls.
    let cache = scratch.join("cache");
    let first = run_client(poll_command(&cache, &urls_file, options.concurrency, "updated")?, env, &daemon)
        .map_err(|e| io::Error::other(format!("cdtarget first pass: {e}")))?;
    println!(
        "  cdtarget first pass ({n} shallow clones, concurrency {}): {:.3} s wall, {:.3} s client CPU ({})",
        options.concurrency,
        secs(first.wall),
        secs(first.cpu),
        first.stdout.trim()
    );

    let mut pollers = vec![
        Poller::FetchLoop { v0: false },
        Poller::LsRemoteLoop { v0: false },
        Poller::FetchLoop { v0: true },
        Poller::LsRemoteLoop { v0: true },
        Poller::Cdtarget(options.concurrency),
        Poller::Floor(options.concurrency),
    ];
    pollers.extend(options.sweep.iter().map(|&c| Poller::Cdtarget(c)));
    let mut measured: Vec<Vec<Measurement>> = vec![Vec::new(); pollers.len()];
    // Round 0 warms every contender up and is not counted; the contenders alternate round by
    // round so that a slow spell of the (shared) machine hits all of them alike.
    for round in 0..=options.runs {
        for (poller, measurements) in pollers.iter().zip(&mut measured) {
            let command = poller.command(&cache, &urls_file, &dirs_file)?;
            let m =
                run_client(command, env, &daemon).map_err(|e| io::Error::other(format!("{}: {e}", poller.name())))?;
            check_poll_output(*poller, &m.stdout, n)?;
            if round > 0 {
                measurements.push(m);
            }
        }
    }
    let rows: Vec<(Poller, Summary)> =
        pollers.iter().zip(&measured).map(|(p, m)| (*p, summarize(p.name(), m))).collect();
    Ok(poll_report(options, &rows, &first))
}

/// A few manifests, different for every repository.
fn tenant_files(name: &str) -> Vec<(String, String)> {
    let team = name.trim_end_matches(".git");
    (0..3)
        .map(|i| {
            (
                format!("deploy/agents-{i}.yaml"),
                format!(
                    "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: {team}-{i}\nspec:\n  \
                     agentImage: ghcr.io/acme/azp-agent:4.250.0\n  tokenRef: azp-token\n  ip:\n    - 10.{i}.0.0/24\n"
                ),
            )
        })
        .collect()
}

fn shell_loop(script: &str, list: &Path) -> Command {
    let mut command = Command::new("sh");
    command.arg("-c").arg(script).arg("sh").arg(list);
    command
}

fn poll_command(cache: &Path, urls_file: &Path, concurrency: usize, expect: &str) -> io::Result<Command> {
    let mut command = Command::new(env::current_exe()?);
    command.arg(POLL_ARG).arg(cache).arg(urls_file).arg(concurrency.to_string()).arg(expect);
    Ok(command)
}

/// Each contender really polled every repository.
fn check_poll_output(poller: Poller, stdout: &str, n: usize) -> io::Result<()> {
    let ok = match poller {
        Poller::FetchLoop { .. } => stdout.trim().is_empty(),
        Poller::LsRemoteLoop { .. } => {
            stdout.lines().filter(|l| l.ends_with(&format!("\trefs/heads/{BRANCH}"))).count() == n
        }
        Poller::Cdtarget(_) => stdout.trim() == format!("unchanged {n} updated 0 failed 0"),
        Poller::Floor(_) => stdout.trim() == format!("advertised {n}"),
    };
    if ok { Ok(()) } else { Err(io::Error::other(format!("{}: unexpected output:\n{stdout}", poller.name()))) }
}

fn poll_report(options: &Options, rows: &[(Poller, Summary)], first: &Measurement) -> String {
    let n = options.repos;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "(a) No-op poll of {n} unchanged repositories over git:// (median of {} runs each)\n",
        options.runs
    );
    let _ = writeln!(
        out,
        "| contender | wall time | client CPU | client CPU per poll | server CPU per poll |\n|---|--:|--:|--:|--:|"
    );
    let per_poll = |d: Duration| format!("{:.2} ms", secs(d) * 1000.0 / n as f64);
    for (_, s) in rows {
        let _ = writeln!(
            out,
            "| {} | {:.3} s | {:.3} s | {} | {} |",
            s.name,
            secs(s.wall),
            secs(s.cpu),
            per_poll(s.cpu),
            per_poll(s.server_cpu)
        );
    }
    let _ = writeln!(
        out,
        "| (cdtarget first pass: {n} shallow clones, concurrency {}, 1 run) | {:.3} s | {:.3} s | {} | {} |",
        options.concurrency,
        secs(first.wall),
        secs(first.cpu),
        per_poll(first.cpu),
        per_poll(first.server_cpu)
    );
    let find = |p: Poller| rows.iter().find(|(q, _)| *q == p).map(|(_, s)| s);
    let (Some(fetch), Some(ls), Some(fetch0), Some(ls0), Some(ours)) = (
        find(Poller::FetchLoop { v0: false }),
        find(Poller::LsRemoteLoop { v0: false }),
        find(Poller::FetchLoop { v0: true }),
        find(Poller::LsRemoteLoop { v0: true }),
        find(Poller::Cdtarget(options.concurrency)),
    ) else {
        return out;
    };
    let _ = writeln!(
        out,
        "\n| cdtarget concurrency | fetch loop / cdtarget, wall | ls-remote loop / cdtarget, wall | \
         fetch loop v0 / cdtarget, wall | ls-remote loop v0 / cdtarget, wall | \
         cdtarget / ls-remote loop, CPU per poll | cdtarget / ls-remote loop v0, CPU per poll |\n\
         |--:|--:|--:|--:|--:|--:|--:|"
    );
    for (poller, s) in rows {
        let Poller::Cdtarget(c) = poller else { continue };
        let _ = writeln!(
            out,
            "| {c} | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.2}x | {:.2}x |",
            ratio(fetch.wall, s.wall),
            ratio(ls.wall, s.wall),
            ratio(fetch0.wall, s.wall),
            ratio(ls0.wall, s.wall),
            ratio(s.cpu, ls.cpu),
            ratio(s.cpu, ls0.cpu)
        );
    }
    let headings = [
        format!("\nGoals (a), cdtarget at concurrency {} against the git CLI as it comes:", options.concurrency),
        "Stricter check, the CLI forced to protocol v0 (it then skips the ~40 ms Nagle / delayed-ACK stall \
         its protocol v2 requests hit on git://):"
            .to_owned(),
    ];
    for (heading, (label, fetch, ls)) in headings.iter().zip([("", fetch, ls), (" v0", fetch0, ls0)]) {
        let _ = writeln!(out, "{heading}");
        let wall_ratio = ratio(fetch.wall, ours.wall);
        let _ = writeln!(
            out,
            "  at least 5x faster than the git fetch loop{label} (wall): {wall_ratio:.1}x ({:.3} s / {:.3} s), {}",
            secs(fetch.wall),
            secs(ours.wall),
            verdict(wall_ratio >= 5.0)
        );
        let _ = writeln!(
            out,
            "  client CPU per poll at most the ls-remote loop{label}'s: {} vs {} ({:.2}x), {}",
            per_poll(ours.cpu),
            per_poll(ls.cpu),
            ratio(ours.cpu, ls.cpu),
            verdict(ours.cpu <= ls.cpu)
        );
    }
    if let Some(floor) = find(Poller::Floor(options.concurrency)) {
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        let _ = writeln!(
            out,
            "\nThe floor: the bare protocol exchange at concurrency {} took {:.3} s; cdtarget's pass is {:.2}x \
             that. The server (git daemon --inetd and git upload-pack, two processes per connection, on the \
             same {cores} cores) used {} of CPU per poll, at least {:.3} s of wall time for {n} polls whatever \
             the client. So no client can be more than {:.1}x faster than the fetch loop v0 here ({:.1}x than \
             the fetch loop).",
            options.concurrency,
            secs(floor.wall),
            ratio(ours.wall, floor.wall),
            per_poll(floor.server_cpu),
            secs(floor.server_cpu) / cores as f64,
            ratio(fetch0.wall, floor.wall),
            ratio(fetch.wall, floor.wall),
        );
    }
    out.push('\n');
    out
}

/// (b): the first clone of a repository with a pack of `options.pack_mib` MiB.
fn bench_clone(options: &Options, env: &ClientEnv, scratch: &Path) -> io::Result<String> {
    let bytes = options.pack_mib << 20;
    let files = options.files;
    println!("\n(b) first clone of {} MiB of incompressible content in {files} files", options.pack_mib);
    let started = Instant::now();
    let upstream = Upstream::new();
    let repo = upstream.create("large.git");
    let mut random = SplitMix64(0x00c0_ffee);
    let content: Vec<(String, Vec<u8>)> = (0..files)
        .map(|i| {
            // Sizes vary around the mean (0.5x to 1.5x), as real files do.
            let mean = bytes / files;
            let size = mean / 2 + (random.next() as usize % (mean + 1));
            let mut data = Vec::with_capacity(size + 8);
            while data.len() < size {
                data.extend_from_slice(&random.next().to_le_bytes());
            }
            data.truncate(size);
            (format!("data/part-{:02}/file-{i:04}.bin", i / 100), data)
        })
        .collect();
    let tree_bytes: u64 = content.iter().map(|(_, d)| d.len() as u64).sum();
    let listed: Vec<(&str, &[u8])> = content.iter().map(|(p, d)| (p.as_str(), d.as_slice())).collect();
    let sha = repo.commit_and_push(&listed, "large");
    drop(content);
    let daemon = GitDaemon::start(&upstream.root());
    let url = daemon.url("large.git");
    println!(
        "  set up {} MiB in {files} files (commit {}) in {:.1} s",
        mb(tree_bytes),
        &sha[..12],
        started.elapsed().as_secs_f64()
    );

    // Every run writes into new directories, removed only at the end: deleting 2,000 files right
    // before creating 2,000 more makes ext4 skip the recently freed inodes one by one, a cost
    // that would land on whichever contender runs next.
    let runs = scratch.join("clone-runs");
    let mut measured = [Vec::new(), Vec::new()];
    let (mut ours_pack, mut cli_pack) = (0, 0);
    for round in 0..=options.clone_runs {
        // The two alternate which goes first, round by round.
        for which in [round % 2, 1 - round % 2] {
            let m = if which == 0 {
                // cdtarget: an empty cache, then `fetch_blocking` (shallow fetch, tree written).
                let cache = runs.join(format!("cdtarget-{round}"));
                let mut command = Command::new(env::current_exe()?);
                command.arg(CLONE_ARG).arg(&cache).arg(&url);
                let m =
                    run_client(command, env, &daemon).map_err(|e| io::Error::other(format!("cdtarget clone: {e}")))?;
                if m.stdout.trim() != sha {
                    return Err(io::Error::other(format!("cdtarget fetched {} instead of {sha}", m.stdout.trim())));
                }
                ours_pack = pack_bytes(&cache.join("repo.git/objects/pack"));
                m
            } else {
                // The CLI: `git clone --depth 1` into a new directory (pack and checkout written).
                let checkout = runs.join(format!("git-{round}"));
                let mut command = Command::new("git");
                command.args(["clone", "--depth", "1", "-q", &url]).arg(&checkout);
                let m = run_client(command, env, &daemon).map_err(|e| io::Error::other(format!("git clone: {e}")))?;
                let head = common::git(&checkout, &["rev-parse", "HEAD"]);
                if head != sha {
                    return Err(io::Error::other(format!("git clone checked out {head} instead of {sha}")));
                }
                cli_pack = pack_bytes(&checkout.join(".git/objects/pack"));
                m
            };
            if round > 0 {
                measured[which].push(m);
            }
        }
    }
    fs::remove_dir_all(&runs)?;
    let ours = summarize("cdtarget fetch_blocking (first clone)".into(), &measured[0]);
    let cli = summarize("git clone --depth 1".into(), &measured[1]);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "(b) First clone over git:// of {} MiB in {files} files (median of {} runs each)\n",
        mb(tree_bytes),
        options.clone_runs
    );
    let _ = writeln!(
        out,
        "| contender | wall time | client CPU | server CPU | pack received | tree written |\n|---|--:|--:|--:|--:|--:|"
    );
    for (s, pack) in [(&ours, ours_pack), (&cli, cli_pack)] {
        let _ = writeln!(
            out,
            "| {} | {:.3} s | {:.3} s | {:.3} s | {} MiB | {} MiB |",
            s.name,
            secs(s.wall),
            secs(s.cpu),
            secs(s.server_cpu),
            mb(pack),
            mb(tree_bytes)
        );
    }
    let time_ratio = ratio(ours.wall, cli.wall);
    let _ = writeln!(out, "\nGoal (b):");
    let _ = writeln!(
        out,
        "  at most 1.5x the time of git clone --depth 1:  {time_ratio:.2}x ({:.3} s / {:.3} s), {}",
        secs(ours.wall),
        secs(cli.wall),
        verdict(time_ratio <= 1.5)
    );
    let _ = writeln!(out, "  (client CPU: {:.2}x the CLI's)", ratio(ours.cpu, cli.cpu));
    Ok(out)
}

/// Bytes of the `.pack` files in `dir`.
fn pack_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ratio(a: Duration, b: Duration) -> f64 {
    if b.is_zero() { f64::INFINITY } else { a.as_secs_f64() / b.as_secs_f64() }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// SplitMix64: deterministic, incompressible output.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
