//! Rendering benchmark: `cdtarget render` side by side with `kubectl kustomize` over the same
//! documents and with a bare serde-saphyr parse-and-emit round trip (the floor of any YAML
//! pipeline), in the same run. See docs/performance.md.
//!
//! ```text
//! cargo bench --bench render                              # 1,000 and 10,000 CDTargets
//! cargo bench --bench render -- --sizes 1000,10000 --runs 3
//! cargo bench --bench render -- --quick                   # kustomize only at 1,000
//! CDTARGET_BENCH_SIZES=1000 CDTARGET_BENCH_RUNS=5 cargo bench --bench render
//! ```
//!
//! Every contender runs as its own child process whose output goes into a byte-counting sink
//! (so disk speed does not count) and which is reaped with `wait4(2)`: the rusage `wait4` returns
//! is that one child's, so `ru_maxrss` is exactly its peak resident set, isolated from the
//! benchmark and from the other contenders. Nothing here asserts on time; it prints the numbers
//! and the ratios.

#[path = "support/args.rs"]
mod args;

#[path = "support/reap.rs"]
mod reap;

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use reap::wait4;

/// The hidden argument under which this binary is the bare round trip.
const ROUNDTRIP_ARG: &str = "__roundtrip";
/// The hidden argument under which this binary only writes a generated repository.
const GENERATE_ARG: &str = "__generate";
/// CDTarget documents per generated file.
const DOCS_PER_FILE: usize = 10;
/// The namespace every contender puts the objects in.
const NAMESPACE: &str = "team-bench";
/// The platform policy the generated CDTargets satisfy.
const POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/platform/policy.yaml");
/// The release build of the CLI that `cargo bench` builds next to this benchmark.
const CDTARGET: &str = env!("CARGO_BIN_EXE_cdtarget");

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(ROUNDTRIP_ARG) {
        let dir = args.get(1).expect("usage: __roundtrip DIR");
        if let Err(e) = roundtrip(Path::new(dir)) {
            eprintln!("roundtrip: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.first().map(String::as_str) == Some(GENERATE_ARG) {
        // For profiling: `render-<hash> __generate DIR N` leaves a repository in DIR.
        let (Some(dir), Some(n)) = (args.get(1), args.get(2)) else { usage("usage: __generate DIR N") };
        match generate(Path::new(dir), number(n)) {
            Ok(repo) => {
                println!("{} (kustomize root), {} (tenant repository)", repo.root.display(), repo.tenant.display())
            }
            Err(e) => usage(&e.to_string()),
        }
        return;
    }
    let options = Options::parse(&args);
    if let Err(e) = run(&options) {
        eprintln!("render bench: {e}");
        std::process::exit(1);
    }
}

/// What to run, from arguments (`--sizes`, `--runs`, `--quick`, `--no-kustomize`) and the
/// matching `CDTARGET_BENCH_*` environment variables.
struct Options {
    /// Numbers of CDTargets to render.
    sizes: Vec<usize>,
    /// Runs of cdtarget and of the round trip per size (the median is reported).
    runs: usize,
    /// Runs of kustomize per size.
    kustomize_runs: usize,
    /// Largest size kustomize is run at.
    kustomize_max: usize,
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let env_flag = |name: &str| env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
        let env_num = |name: &str, default: usize| env::var(name).ok().map_or(default, |v| number(&v));
        let mut sizes = env::var("CDTARGET_BENCH_SIZES").ok().map_or_else(|| vec![1_000, 10_000], |v| list(&v));
        let mut runs = env_num("CDTARGET_BENCH_RUNS", 5);
        let mut kustomize_runs = env_num("CDTARGET_BENCH_KUSTOMIZE_RUNS", 1);
        let mut kustomize_max = if env_flag("CDTARGET_BENCH_QUICK") { 1_000 } else { usize::MAX };
        if env_flag("CDTARGET_BENCH_NO_KUSTOMIZE") {
            kustomize_max = 0;
        }
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value"))).clone();
            match arg.as_str() {
                "--bench" => {} // passed by `cargo bench`
                "--sizes" => sizes = list(&value()),
                "--runs" => runs = number(&value()),
                "--kustomize-runs" => kustomize_runs = number(&value()),
                "--quick" => kustomize_max = kustomize_max.min(1_000),
                "--no-kustomize" => kustomize_max = 0,
                other if other.starts_with('-') => usage(&format!("unknown option {other}")),
                _ => {} // a name filter given to `cargo bench`: there is only one benchmark
            }
        }
        Options { sizes, runs: runs.max(1), kustomize_runs: kustomize_runs.max(1), kustomize_max }
    }
}

fn number(text: &str) -> usize {
    args::positive(text).unwrap_or_else(|why| usage(&why))
}

fn list(text: &str) -> Vec<usize> {
    text.split(',').filter(|s| !s.trim().is_empty()).map(number).collect()
}

fn usage(message: &str) -> ! {
    eprintln!(
        "render bench: {message}\n\
         usage: cargo bench --bench render -- [--sizes 1000,10000] [--runs N] [--kustomize-runs N] [--quick] [--no-kustomize]"
    );
    std::process::exit(2)
}

/// One contender.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Contender {
    Cdtarget,
    Kustomize,
    Roundtrip,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Cdtarget => "cdtarget render",
            Contender::Kustomize => "kubectl kustomize",
            Contender::Roundtrip => "saphyr round trip",
        }
    }

    /// Output documents per input CDTarget.
    fn documents_per_target(self) -> usize {
        match self {
            Contender::Cdtarget => 5,
            Contender::Kustomize | Contender::Roundtrip => 1,
        }
    }

    fn command(self, repo: &GeneratedRepo) -> io::Result<Command> {
        Ok(match self {
            Contender::Cdtarget => {
                let mut c = Command::new(CDTARGET);
                c.arg("render").arg(&repo.tenant).arg("--policy").arg(POLICY).arg("--namespace").arg(NAMESPACE);
                c
            }
            Contender::Kustomize => {
                let mut c = Command::new("kubectl");
                c.arg("kustomize").arg(&repo.root);
                c
            }
            Contender::Roundtrip => {
                let mut c = Command::new(env::current_exe()?);
                c.arg(ROUNDTRIP_ARG).arg(&repo.tenant);
                c
            }
        })
    }
}

/// What one run of a contender took.
#[derive(Clone, Copy)]
struct Measurement {
    wall: Duration,
    /// User plus system CPU time.
    cpu: Duration,
    /// Peak resident set, in bytes.
    peak_rss: u64,
    output_bytes: u64,
    output_documents: u64,
}

/// The runs of one contender at one size, summarised.
struct Row {
    contender: Contender,
    targets: usize,
    runs: usize,
    /// Median wall time of the runs.
    wall: Duration,
    /// CPU time of the median run.
    cpu: Duration,
    /// Largest peak resident set of the runs.
    peak_rss: u64,
    output_bytes: u64,
    output_documents: u64,
}

fn run(options: &Options) -> io::Result<()> {
    print_header(options);
    let kubectl = kubectl_version();
    if kubectl.is_none() {
        println!("kubectl not found: kustomize is skipped");
    }
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("render-bench-{}", std::process::id()));
    let mut rows = Vec::new();
    let result = (|| {
        for &targets in &options.sizes {
            let repo = generate(&scratch.join(format!("n{targets}")), targets)?;
            println!(
                "\n{} CDTargets in {} files, {} of YAML: {}",
                group(targets as u64),
                group(repo.files as u64),
                mib(repo.input_bytes),
                repo.root.display()
            );
            // The two fast contenders alternate, after one unmeasured warm-up run each, so that
            // a slow spell of the machine hits both alike.
            let fast = [Contender::Roundtrip, Contender::Cdtarget];
            let mut measured = [Vec::new(), Vec::new()];
            for round in 0..=options.runs {
                for (contender, measurements) in fast.iter().zip(&mut measured) {
                    let m = measure(*contender, &repo, targets)?;
                    if round > 0 {
                        measurements.push(m);
                    }
                }
            }
            for (contender, measurements) in fast.into_iter().zip(measured) {
                rows.push(summarize(contender, targets, measurements));
            }
            if kubectl.is_some() && targets <= options.kustomize_max {
                let measurements = (0..options.kustomize_runs)
                    .map(|_| measure(Contender::Kustomize, &repo, targets))
                    .collect::<io::Result<Vec<_>>>()?;
                rows.push(summarize(Contender::Kustomize, targets, measurements));
            }
            fs::remove_dir_all(&repo.root)?;
        }
        Ok::<_, io::Error>(())
    })();
    let _ = fs::remove_dir_all(&scratch);
    result?;
    println!("\n{}", table(&rows));
    println!("{}", ratios(&rows));
    Ok(())
}

fn print_header(options: &Options) {
    println!("cdtarget render benchmark");
    println!("  cdtarget:  {CDTARGET}");
    if !Path::new(CDTARGET).components().any(|c| c.as_os_str() == "release") || cfg!(debug_assertions) {
        println!("  WARNING: not an optimised build; run it with `cargo bench --bench render`");
    }
    println!("  cpus:      {}", thread::available_parallelism().map_or(0, |n| n.get()));
    println!(
        "  sizes:     {}; cdtarget and round trip: median of {} runs; kustomize: {} run(s){}",
        options.sizes.iter().map(|&n| group(n as u64)).collect::<Vec<_>>().join(", "),
        options.runs,
        options.kustomize_runs,
        match options.kustomize_max {
            0 => " (skipped)".to_owned(),
            usize::MAX => String::new(),
            max => format!(" up to {} CDTargets", group(max as u64)),
        }
    );
}

fn kubectl_version() -> Option<String> {
    let output = Command::new("kubectl").args(["version", "--client"]).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout).trim().replace('\n', ", ");
    println!("  kubectl:   {text}");
    output.status.success().then_some(text)
}

/// Runs `contender` once and checks it printed the expected number of documents.
fn measure(contender: Contender, repo: &GeneratedRepo, targets: usize) -> io::Result<Measurement> {
    let m = run_once(contender.command(repo)?).map_err(|e| io::Error::other(format!("{}: {e}", contender.name())))?;
    let expected = (targets * contender.documents_per_target()) as u64;
    if m.output_documents != expected {
        return Err(io::Error::other(format!(
            "{} printed {} documents, expected {expected}",
            contender.name(),
            m.output_documents
        )));
    }
    Ok(m)
}

/// The median run by wall time, and the largest peak RSS of all runs.
fn summarize(contender: Contender, targets: usize, mut measurements: Vec<Measurement>) -> Row {
    measurements.sort_by_key(|m| m.wall);
    let median = measurements[measurements.len() / 2];
    let row = Row {
        contender,
        targets,
        runs: measurements.len(),
        wall: median.wall,
        cpu: median.cpu,
        peak_rss: measurements.iter().map(|m| m.peak_rss).max().unwrap_or_default(),
        output_bytes: median.output_bytes,
        output_documents: median.output_documents,
    };
    println!(
        "  {:<18} {:>9.3} s wall  {:>9.3} s CPU  {:>10} peak RSS  (median of {})",
        contender.name(),
        row.wall.as_secs_f64(),
        row.cpu.as_secs_f64(),
        mib(row.peak_rss),
        row.runs
    );
    row
}

/// Runs `command` with its stdout drained into a counting sink and reaps it with `wait4`, whose
/// rusage belongs to this one child (and any children it reaped itself).
fn run_once(mut command: Command) -> io::Result<Measurement> {
    let start = Instant::now();
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let sink = thread::spawn(move || -> io::Result<(u64, u64)> {
        let mut counter = DocumentCounter::default();
        let mut buffer = vec![0; 1 << 16];
        loop {
            match stdout.read(&mut buffer) {
                Ok(0) => return Ok((counter.bytes, counter.documents)),
                Ok(n) => counter.feed(&buffer[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    });
    let errors = thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        text
    });
    let (status, usage) = wait4(pid)?;
    let wall = start.elapsed();
    // `child` was reaped by wait4; dropping it neither waits nor kills.
    drop(child);
    let (output_bytes, output_documents) = sink.join().expect("sink thread")?;
    let errors = errors.join().expect("stderr thread");
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let errors = String::from_utf8_lossy(&errors);
        let head: String = errors.lines().take(10).collect::<Vec<_>>().join("\n");
        return Err(io::Error::other(format!("failed (wait status {status}):\n{head}")));
    }
    let time = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    Ok(Measurement {
        wall,
        cpu: time(usage.ru_utime) + time(usage.ru_stime),
        // Linux reports ru_maxrss in KiB.
        peak_rss: usage.ru_maxrss as u64 * 1024,
        output_bytes,
        output_documents,
    })
}

/// Counts bytes and YAML documents (lines that are exactly `---`, plus a first document that
/// does not start with one) of a stream.
#[derive(Default)]
struct DocumentCounter {
    bytes: u64,
    documents: u64,
    /// Bytes of the current line seen so far, up to 4.
    line: [u8; 4],
    line_len: usize,
    /// Whether the current line could still be `---`.
    candidate: bool,
    started: bool,
}

impl DocumentCounter {
    fn feed(&mut self, chunk: &[u8]) {
        for &b in chunk {
            if !self.started {
                self.started = true;
                self.candidate = true;
                // A stream not starting with `---` has an implicit first document.
                if b != b'-' {
                    self.documents += 1;
                }
            }
            if b == b'\n' {
                if self.candidate && self.line_len == 3 && self.line[..3] == *b"---" {
                    self.documents += 1;
                }
                self.line_len = 0;
                self.candidate = true;
            } else if self.candidate {
                if self.line_len < 3 && b == b'-' {
                    self.line[self.line_len] = b;
                    self.line_len += 1;
                } else {
                    self.candidate = false;
                }
            }
        }
        self.bytes += chunk.len() as u64;
    }
}

/// The bare round trip: every document of every YAML file under `dir` (sorted, like cdtarget
/// reads them) parsed into `serde_json::Value` with serde-saphyr, all of them held (as any
/// all-or-nothing pipeline must), then each emitted with serde-saphyr as its own document.
fn roundtrip(dir: &Path) -> io::Result<()> {
    let mut files = Vec::new();
    collect_yaml(dir, &mut files)?;
    let mut documents = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file)?;
        let parsed: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).map_err(|e| io::Error::other(format!("{}: {e}", file.display())))?;
        documents.extend(parsed);
    }
    let mut out = BufWriter::new(io::stdout().lock());
    for document in &documents {
        let text = serde_saphyr::to_string(document).map_err(io::Error::other)?;
        out.write_all(b"---\n")?;
        out.write_all(text.as_bytes())?;
    }
    out.flush()
}

fn collect_yaml(dir: &Path, files: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_yaml(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
    Ok(())
}

/// A generated tenant repository.
struct GeneratedRepo {
    /// Holds `kustomization.yaml` and `tenant/`: kustomize's root.
    root: PathBuf,
    /// The tenant's manifests: what cdtarget and the round trip read. (cdtarget rejects
    /// kustomization files, so the kustomization sits one level up.)
    tenant: PathBuf,
    files: usize,
    input_bytes: u64,
}

/// Writes `targets` CDTargets, `DOCS_PER_FILE` to a file, in folders of 100 files, plus a
/// kustomization listing every file.
fn generate(root: &Path, targets: usize) -> io::Result<GeneratedRepo> {
    let tenant = root.join("tenant");
    fs::create_dir_all(&tenant)?;
    let mut random = Random(0x9e37_79b9_7f4a_7c15 ^ targets as u64);
    let mut kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {NAMESPACE}\nresources:\n"
    );
    let (mut files, mut input_bytes) = (0, 0);
    for first in (0..targets).step_by(DOCS_PER_FILE) {
        let file = first / DOCS_PER_FILE;
        let relative = format!("group-{:02}/agents-{file:04}.yaml", file / 100);
        let mut text = String::new();
        for i in first..(first + DOCS_PER_FILE).min(targets) {
            if i > first {
                text.push_str("---\n");
            }
            cdtarget_document(&mut text, i, &mut random);
        }
        let path = tenant.join(&relative);
        fs::create_dir_all(path.parent().expect("has a folder"))?;
        fs::write(&path, &text)?;
        writeln!(kustomization, "  - tenant/{relative}").expect("writing to a String");
        files += 1;
        input_bytes += text.len() as u64;
    }
    fs::write(root.join("kustomization.yaml"), kustomization)?;
    Ok(GeneratedRepo { root: root.to_owned(), tenant, files, input_bytes })
}

/// Appends CDTarget number `i`: valid under examples/platform/policy.yaml, with 3 to 5
/// destinations mixing IPv4 and IPv6 addresses and CIDRs, env, triggerMeta and resources.
fn cdtarget_document(out: &mut String, i: usize, random: &mut Random) {
    let team = i / 50;
    let w = |out: &mut String, line: std::fmt::Arguments<'_>| {
        out.write_fmt(line).expect("writing to a String");
        out.push('\n');
    };
    w(out, format_args!("# Build and deploy agents of team {team}, pool {i}."));
    w(out, format_args!("apiVersion: cdtarget.io/v1alpha1"));
    w(out, format_args!("kind: CDTarget"));
    w(out, format_args!("metadata:"));
    w(out, format_args!("  name: agents-{i:05}"));
    w(out, format_args!("  labels:"));
    w(out, format_args!("    cost-center: cc-{:03}", team % 200));
    w(out, format_args!("spec:"));
    w(out, format_args!("  agentImage: ghcr.io/acme/azp-agent:4.{}.0", 250 + random.below(6)));
    w(out, format_args!("  tokenRef: azp-token-{team}"));
    if random.below(3) == 0 {
        w(out, format_args!("  proxyRef: corporate-proxy"));
        w(out, format_args!("  caCertRef: corporate-ca"));
    }
    let max = 2 + random.below(9); // policy ceiling: 10
    // A pool scaled to zero needs a placeholder agent named in triggerMeta.parent.
    let min = random.below(3).min(1);
    w(out, format_args!("  minReplicaCount: {min}"));
    w(out, format_args!("  maxReplicaCount: {max}"));
    w(out, format_args!("  additionalSelector:"));
    w(out, format_args!("    team: team-{team}"));
    w(out, format_args!("  ip:"));
    // Outside the forbidden 10.96.0.0/12, link-local and fe80::/10 ranges.
    let (a, b, c) = (random.below(90), random.below(256), 1 + random.below(250));
    w(out, format_args!("    - 10.{a}.{b}.{c}"));
    w(out, format_args!("    - 10.{a}.{}.0/24", (b + 1) % 256));
    w(out, format_args!("    - 2001:db8:{:x}::{:x}", random.below(0x10000), 1 + random.below(0xfff)));
    let extra = random.below(3);
    if extra >= 1 {
        w(out, format_args!("    - 2001:db8:{:x}:{:x}::/64", random.below(0x10000), random.below(0x10000)));
    }
    if extra >= 2 {
        w(out, format_args!("    - 192.168.{}.{}", random.below(256), 1 + random.below(250)));
    }
    w(out, format_args!("  config:"));
    w(out, format_args!("    url: https://dev.azure.com/acme"));
    w(out, format_args!("    poolName: team-{team}-pool-{}", i % 50));
    if random.below(2) == 0 {
        w(out, format_args!("    workDir: /azp/_work"));
    }
    if random.below(4) == 0 {
        w(out, format_args!("    mtuValue: \"1400\""));
    }
    w(out, format_args!("  triggerMeta:"));
    w(out, format_args!("    demands: maven,docker"));
    w(out, format_args!("    targetPipelinesQueueLength: \"{}\"", 1 + random.below(3)));
    if min == 0 {
        w(out, format_args!("    parent: team-{team}-placeholder"));
    }
    w(out, format_args!("  agentResources:"));
    w(out, format_args!("    requests: {{cpu: {}m, memory: 1Gi}}", 250 * (1 + random.below(4))));
    w(out, format_args!("    limits: {{memory: {}Gi}}", 2 + random.below(3)));
    w(out, format_args!("  env:"));
    w(out, format_args!("    - name: DEPLOY_ENVIRONMENT"));
    w(out, format_args!("      value: {}", ["production", "staging", "test"][random.below(3)]));
    w(out, format_args!("    - name: TEAM"));
    w(out, format_args!("      value: team-{team}"));
}

/// A deterministic xorshift generator: the same repository on every run.
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| contender | CDTargets | output documents | wall time | CPU time | peak RSS | output |\n|---|--:|--:|--:|--:|--:|--:|"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} s | {:.3} s | {} | {} |",
            row.contender.name(),
            group(row.targets as u64),
            group(row.output_documents),
            row.wall.as_secs_f64(),
            row.cpu.as_secs_f64(),
            mib(row.peak_rss),
            mib(row.output_bytes),
        );
    }
    out
}

fn ratios(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| CDTargets | kustomize / cdtarget, time | kustomize / cdtarget, memory | cdtarget / round trip, time | cdtarget / round trip, memory | cdtarget peak RSS |\n|--:|--:|--:|--:|--:|--:|"
    );
    let mut sizes: Vec<usize> = rows.iter().map(|r| r.targets).collect();
    sizes.dedup();
    for targets in sizes {
        let find = |c: Contender| rows.iter().find(|r| r.targets == targets && r.contender == c);
        let Some(cdtarget) = find(Contender::Cdtarget) else { continue };
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.1}x", a / b) } else { "-".to_owned() };
        let (k_time, k_memory) = find(Contender::Kustomize).map_or(("not run".into(), "not run".into()), |k| {
            (
                ratio(k.wall.as_secs_f64(), cdtarget.wall.as_secs_f64()),
                ratio(k.peak_rss as f64, cdtarget.peak_rss as f64),
            )
        });
        let (r_time, r_memory) = find(Contender::Roundtrip).map_or(("-".into(), "-".into()), |r| {
            (
                ratio(cdtarget.wall.as_secs_f64(), r.wall.as_secs_f64()),
                ratio(cdtarget.peak_rss as f64, r.peak_rss as f64),
            )
        });
        let _ = writeln!(
            out,
            "| {} | {k_time} | {k_memory} | {r_time} | {r_memory} | {} |",
            group(targets as u64),
            mib(cdtarget.peak_rss)
        );
    }
    out.push_str(&goals(rows));
    out
}

/// The issue's goals, judged at the largest size measured (they are set for 10,000 CDTargets).
fn goals(rows: &[Row]) -> String {
    let Some(targets) = rows.iter().map(|r| r.targets).max() else { return String::new() };
    let find = |c: Contender| rows.iter().find(|r| r.targets == targets && r.contender == c);
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let note = if targets == 10_000 { "" } else { " (they are set for 10,000)" };
    let mut out = format!("\nGoals at {} CDTargets{note}:\n", group(targets as u64));
    let Some(cdtarget) = find(Contender::Cdtarget) else { return out };
    let cdtarget_wall = cdtarget.wall.as_secs_f64();
    match find(Contender::Kustomize) {
        Some(k) => {
            let ratio = k.wall.as_secs_f64() / cdtarget_wall;
            let _ = writeln!(out, "  at least 100x faster than kustomize:   {ratio:.1}x, {}", verdict(ratio >= 100.0));
        }
        None => out.push_str("  at least 100x faster than kustomize:   kustomize not run\n"),
    }
    if let Some(r) = find(Contender::Roundtrip) {
        let ratio = cdtarget_wall / r.wall.as_secs_f64();
        let _ = writeln!(out, "  within 5x of the bare round trip:      {ratio:.1}x, {}", verdict(ratio <= 5.0));
    }
    let peak = cdtarget.peak_rss;
    let _ = writeln!(out, "  under 100 MiB peak memory:             {}, {}", mib(peak), verdict(peak < 100 << 20));
    out
}

fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
