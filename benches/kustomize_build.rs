//! The native kustomize build (issue #15) side by side with `kubectl kustomize` and with plain
//! loading, in one run. See docs/performance.md and docs/kustomize.md ("Speed").
//!
//! ```text
//! cargo bench --bench kustomize_build                                # 1,000 and 10,000 resources
//! cargo bench --bench kustomize_build -- --sizes 1000 --runs 5
//! cargo bench --bench kustomize_build -- --skip-kubectl-above 1000   # kubectl only at 1,000
//! ```
//!
//! The tree: `base/` holds N resources (a third each Deployments, Services and ConfigMaps, 100
//! documents a file) and a `configMapGenerator` every Deployment references; `overlay/` lists the
//! base and sets `namePrefix`, `commonLabels`, `images`, a `configMapGenerator` merged into the
//! base's, a strategic merge patch by label selector on every Deployment and a JSON 6902 patch by
//! name regex on a tenth of the Services. The contenders:
//! - **cdtarget build, in memory**: `kustomize::build::build` over `MemoryFiles` already read;
//! - **cdtarget build, from disk**: the files read from disk into `MemoryFiles`, then built;
//! - **kubectl kustomize**: `kubectl kustomize overlay/`, its output read and counted;
//! - **plain load**: the same N objects written flat, without a kustomization, read and loaded by
//!   `cdtarget::manifests::load` (parse, tenancy checks) — what rendering costs without kustomize.
//!
//! It prints the median of the runs (kubectl runs once) in wall time and in CPU time (the
//! thread's for cdtarget, the child's `wait4` rusage for kubectl: the figure a shared, loaded
//! machine disturbs least), the ratios kubectl / cdtarget and build / plain, the growth from the
//! smallest to the largest size, and the load average before and after. Nothing here asserts on time. When the native build fails (before the builder is
//! complete) it says so and prints the other contenders.

#[path = "support/reap.rs"]
mod reap;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdtarget::kustomize::build::build;
use cdtarget::kustomize::files::MemoryFiles;
use cdtarget::manifests::{SourceFile, load};

const NAMESPACE: &str = "team-bench";
const POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/platform/policy.yaml");
const DOCS_PER_FILE: usize = 100;

struct Options {
    sizes: Vec<usize>,
    runs: usize,
    skip_kubectl_above: usize,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options { sizes: vec![1_000, 10_000], runs: 3, skip_kubectl_above: usize::MAX };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value")));
            match arg.as_str() {
                "--sizes" => options.sizes = value().split(',').map(number).collect(),
                "--runs" => options.runs = number(&value()).max(1),
                "--skip-kubectl-above" => options.skip_kubectl_above = number(&value()),
                "--bench" => {}
                other => usage(&format!("unknown argument {other}")),
            }
        }
        options
    }
}

fn number(text: &str) -> usize {
    text.replace('_', "").parse().unwrap_or_else(|_| usage(&format!("not a number: {text}")))
}

fn usage(why: &str) -> ! {
    eprintln!(
        "kustomize_build: {why}\nusage: kustomize_build [--sizes 1000,10000] [--runs 3] [--skip-kubectl-above N]"
    );
    std::process::exit(2)
}

fn deployment(i: usize) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{i}
  labels:
    app: app-{i}
    tier: {tier}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: app-{i}
  template:
    metadata:
      labels:
        app: app-{i}
    spec:
      containers:
      - name: app
        image: ghcr.io/acme/app:1.0
        ports:
        - containerPort: 8080
          name: http
        envFrom:
        - configMapRef:
            name: shared-settings
        volumeMounts:
        - name: config
          mountPath: /etc/app
      volumes:
      - name: config
        configMap:
          name: config-{i}
"#,
        tier = if i.is_multiple_of(2) { "web" } else { "worker" }
    )
}

fn service(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\nspec:\n  selector:\n    app: app-{i}\n  ports:\n  - port: 80\n    targetPort: http\n"
    )
}

fn config_map(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{i}\ndata:\n  INDEX: \"{i}\"\n  MODE: production\n"
    )
}

/// The N documents of the base, in files of `DOCS_PER_FILE`.
fn documents(n: usize) -> Vec<(String, String)> {
    let docs: Vec<String> = (0..n)
        .map(|j| {
            let i = j / 3;
            match j % 3 {
                0 => deployment(i),
                1 => service(i),
                _ => config_map(i),
            }
        })
        .collect();
    docs.chunks(DOCS_PER_FILE)
        .enumerate()
        .map(|(f, chunk)| (format!("resources-{f:04}.yaml"), chunk.join("---\n")))
        .collect()
}

const OVERLAY: &str = r#"resources:
- ../base
namePrefix: prod-
commonLabels:
  environment: production
images:
- name: ghcr.io/acme/app
  newTag: "2.0"
configMapGenerator:
- name: shared-settings
  behavior: merge
  literals:
  - REGION=eu-west
patches:
- target:
    kind: Deployment
    labelSelector: tier=web
  patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: any
    spec:
      template:
        spec:
          containers:
          - name: app
            env:
            - name: TIER
              value: web
            resources:
              requests:
                cpu: 100m
- target:
    kind: Service
    name: svc-[0-9]*5
  patch: |-
    - op: add
      path: /metadata/annotations
      value:
        scrape: "true"
"#;

/// Writes the kustomization tree and the flat copy for `n` resources under `dir`.
fn write(dir: &Path, n: usize) -> std::io::Result<()> {
    let (base, overlay, flat) = (dir.join("base"), dir.join("overlay"), dir.join("flat"));
    for d in [&base, &overlay, &flat] {
        std::fs::create_dir_all(d)?;
    }
    let files = documents(n);
    let mut kustomization = String::from("resources:\n");
    for (name, text) in &files {
        std::fs::write(base.join(name), text)?;
        std::fs::write(flat.join(name), text)?;
        kustomization.push_str(&format!("- {name}\n"));
    }
    kustomization
        .push_str("configMapGenerator:\n- name: shared-settings\n  literals:\n  - LOG_LEVEL=info\n  - FEATURE=on\n");
    std::fs::write(base.join("kustomization.yaml"), kustomization)?;
    std::fs::write(overlay.join("kustomization.yaml"), OVERLAY)?;
    Ok(())
}

/// Every file beneath `root`, relative to it.
fn read_into_memory(root: &Path) -> std::io::Result<MemoryFiles> {
    let mut files = MemoryFiles::new();
    for sub in ["base", "overlay"] {
        for entry in std::fs::read_dir(root.join(sub))? {
            let entry = entry?;
            files.insert(format!("{sub}/{}", entry.file_name().to_string_lossy()), std::fs::read(entry.path())?);
        }
    }
    Ok(files)
}

fn read_flat(dir: &Path) -> std::io::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let text = std::fs::read_to_string(entry.path())?;
        files.push(SourceFile { path: entry.file_name().to_string_lossy().into_owned(), text });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What one contender measured at one size, or why it failed.
type Measured = Result<Sample, String>;

/// The medians of one contender's runs and the objects it gave.
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Duration,
    objects: usize,
}

/// The CPU time this thread has used.
#[allow(unsafe_code)] // a libc call of the benchmark; `[lints]` denies unsafe code, src/ forbids it
fn thread_cpu() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Runs `work` `runs` times; the medians of its wall and CPU times, and the objects it gave last.
fn runs(runs: usize, mut work: impl FnMut() -> Result<usize, String>) -> Measured {
    let (mut walls, mut cpus, mut objects) = (Vec::new(), Vec::new(), 0);
    for _ in 0..runs {
        let (started, cpu) = (Instant::now(), thread_cpu());
        objects = work()?;
        walls.push(started.elapsed());
        cpus.push(thread_cpu() - cpu);
    }
    Ok(Sample { wall: median(walls), cpu: median(cpus), objects })
}

struct Row {
    size: usize,
    memory: Measured,
    disk: Measured,
    kubectl: Option<Measured>,
    plain: Measured,
}

fn problems(found: &[cdtarget::problem::Problem]) -> String {
    format!("{} problem(s), first: {}", found.len(), found.first().map(ToString::to_string).unwrap_or_default())
}

fn measure_build(files: &MemoryFiles, count: usize) -> Measured {
    runs(count, || build(files, "overlay").map(|built| built.resources.len()).map_err(|p| problems(&p)))
}

fn measure_disk(root: &Path, count: usize) -> Measured {
    runs(count, || {
        let files = read_into_memory(root).map_err(|e| e.to_string())?;
        build(&files, "overlay").map(|built| built.resources.len()).map_err(|p| problems(&p))
    })
}

fn measure_kubectl(root: &Path) -> Measured {
    let started = Instant::now();
    let mut child = Command::new("kubectl")
        .arg("kustomize")
        .arg(root.join("overlay"))
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("kubectl: {e}"))?;
    let mut stdout = String::new();
    child.stdout.take().expect("piped").read_to_string(&mut stdout).map_err(|e| e.to_string())?;
    let mut stderr = String::new();
    child.stderr.take().expect("piped").read_to_string(&mut stderr).map_err(|e| e.to_string())?;
    let (status, usage) = reap::wait4(child.id() as libc::pid_t).map_err(|e| e.to_string())?;
    let wall = started.elapsed();
    if status != 0 {
        return Err(stderr.trim().to_owned());
    }
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let objects = stdout.matches("\nkind: ").count() + usize::from(stdout.starts_with("kind: "));
    Ok(Sample { wall, cpu: time(usage.ru_utime) + time(usage.ru_stime), objects })
}

fn measure_plain(root: &Path, count: usize) -> Measured {
    let text = std::fs::read_to_string(POLICY).map_err(|e| e.to_string())?;
    let policy = cdtarget::policy::parse(&text, POLICY).map_err(|p| format!("policy: {}", problems(&p)))?;
    runs(count, || {
        let files = read_flat(&root.join("flat")).map_err(|e| e.to_string())?;
        load(files, NAMESPACE, &policy).map(|set| set.documents.len()).map_err(|p| problems(&p))
    })
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn show(name: &str, size: usize, measured: &Measured) {
    match measured {
        Ok(sample) => {
            println!("{name:<28} {size:>7} {:>8} {:>12.1} {:>12.1}", sample.objects, ms(sample.wall), ms(sample.cpu))
        }
        Err(why) => println!("{name:<28} {size:>7} {:>8} {:>12} {:>12}   FAILED: {why}", "-", "-", "-"),
    }
}

/// numerator / denominator, in wall time and in CPU time.
fn ratio(numerator: &Measured, denominator: &Measured) -> Option<(f64, f64)> {
    match (numerator, denominator) {
        (Ok(a), Ok(b)) if !b.wall.is_zero() && !b.cpu.is_zero() => {
            Some((a.wall.as_secs_f64() / b.wall.as_secs_f64(), a.cpu.as_secs_f64() / b.cpu.as_secs_f64()))
        }
        _ => None,
    }
}

fn show_ratio(what: &str, value: Option<(f64, f64)>, goal: &str, met: impl Fn(f64) -> bool) {
    match value {
        Some((wall, cpu)) => println!(
            "  {what:<44} wall {wall:>8.2}x  cpu {cpu:>8.2}x   goal {goal}: {}",
            if met(cpu) { "met" } else { "NOT met" }
        ),
        None => println!("  {what:<44} {:>30}   goal {goal}: not measured", "-"),
    }
}

fn main() {
    let options = Options::parse();
    let kubectl = kubectl_available();
    println!("kustomize build bench: sizes {:?}, {} run(s) each (kubectl once)", options.sizes, options.runs);
    println!("  load average before: {}", load_average());
    if !kubectl {
        println!("  kubectl not found: kubectl kustomize is skipped");
    }
    println!("{:<28} {:>7} {:>8} {:>12} {:>12}", "contender", "N", "objects", "wall ms", "cpu ms");
    let mut rows = Vec::new();
    for &size in &options.sizes {
        let dir = tempfile::Builder::new().prefix("cdtarget-kustomize-bench-").tempdir().expect("a scratch directory");
        write(dir.path(), size).expect("write the tree");
        let files = read_into_memory(dir.path()).expect("read the tree");
        let memory = measure_build(&files, options.runs);
        show("cdtarget build (in memory)", size, &memory);
        let disk = measure_disk(dir.path(), options.runs);
        show("cdtarget build (from disk)", size, &disk);
        let plain = measure_plain(dir.path(), options.runs);
        show("plain load (no kustomize)", size, &plain);
        let kubectl = (kubectl && size <= options.skip_kubectl_above).then(|| measure_kubectl(dir.path()));
        match &kubectl {
            Some(measured) => show("kubectl kustomize", size, measured),
            None => println!("{:<28} {size:>7}   skipped", "kubectl kustomize"),
        }
        rows.push(Row { size, memory, disk, kubectl, plain });
    }
    println!("ratios:");
    for row in &rows {
        let n = row.size;
        if let Some(kubectl) = &row.kubectl {
            show_ratio(
                &format!("{n}: kubectl kustomize / cdtarget (disk)"),
                ratio(kubectl, &row.disk),
                ">= 50x",
                |v| v >= 50.0,
            );
            show_ratio(
                &format!("{n}: kubectl kustomize / cdtarget (memory)"),
                ratio(kubectl, &row.memory),
                ">= 50x",
                |v| v >= 50.0,
            );
        }
        show_ratio(&format!("{n}: cdtarget build (disk) / plain load"), ratio(&row.disk, &row.plain), "<= 2x", |v| {
            v <= 2.0
        });
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && last.size > first.size
    {
        let scale = last.size as f64 / first.size as f64;
        let linear = |v: f64| v <= scale * 1.5;
        let goal = format!("about {scale:.0}x (linear)");
        show_ratio(
            &format!("growth {}→{}: cdtarget build (memory)", first.size, last.size),
            ratio(&last.memory, &first.memory),
            &goal,
            linear,
        );
        show_ratio(
            &format!("growth {}→{}: plain load", first.size, last.size),
            ratio(&last.plain, &first.plain),
            &goal,
            linear,
        );
        if let (Some(a), Some(b)) = (&first.kubectl, &last.kubectl) {
            show_ratio(&format!("growth {}→{}: kubectl kustomize", first.size, last.size), ratio(b, a), &goal, linear);
        }
    }
    println!("  load average after: {}", load_average());
}
