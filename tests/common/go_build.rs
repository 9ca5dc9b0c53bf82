//! Go programs the tests need (the control plane, and tools such as `helm`), built from a Go
//! module of this repository into a cache directory keyed by a hash of the module's files, so each
//! pin is built once per machine and reused by every later run.
//!
//! ```text
//! let helm = go_build::GoBuild::tool("helm", "hack/tools/helm", "helm.sh/helm/v3/cmd/helm").binary()?;
//! ```
//!
//! Cache: `$XDG_CACHE_HOME/cdtarget/<name>` (else `~/.cache/cdtarget/<name>`); the control plane
//! keeps `$CDTARGET_CONTROL_PLANE_CACHE`. Without `go` on `PATH` a build is
//! [`HarnessError::Unavailable`], which `skip_or_fail` turns into a SKIP line (a failure under
//! `CI`). A build prints its progress on stderr, which the test harness does not capture.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::HarnessError;
use super::process::find_on_path;

/// One Go program to build from a module of this repository.
#[derive(Clone, Debug)]
pub struct GoBuild {
    /// The name of the binary and of the progress lines (`control-plane`, `helm`).
    pub name: String,
    /// The module directory, relative to the crate root.
    pub module: PathBuf,
    /// The package to build (`.` for the module's own main package, or an import path of a
    /// dependency such as `helm.sh/helm/v3/cmd/helm`).
    pub package: String,
    /// Where the cached builds of this program live (one subdirectory per key).
    pub cache_dir: PathBuf,
    /// A prefix of the cache subdirectory (a pinned version), before the hash.
    pub key_prefix: String,
    /// Files of the module whose contents make the cache key.
    pub key_files: Vec<String>,
    /// `-ldflags` for `go build`, if any.
    pub ldflags: Option<String>,
    /// How long a cold build takes, for the first progress line.
    pub cold_estimate: String,
}

impl GoBuild {
    /// A tool built from a dependency of the module `module` (its `go.mod` and `go.sum` pin it),
    /// cached under `<cache>/cdtarget/<name>/`.
    pub fn tool(name: &str, module: &str, package: &str) -> GoBuild {
        GoBuild {
            name: name.into(),
            module: module.into(),
            package: package.into(),
            cache_dir: cache_base().join(name),
            key_prefix: String::new(),
            key_files: vec!["go.mod".into(), "go.sum".into()],
            ldflags: None,
            cold_estimate: "a few minutes".into(),
        }
    }

    /// The module directory as an absolute path.
    pub fn module_dir(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(&self.module)
    }

    /// The binary: from the cache, or built into it now (once per process and program; a
    /// concurrent build by another process only costs time, the rename is atomic).
    pub fn binary(&self) -> Result<PathBuf, HarnessError> {
        type Built = Result<PathBuf, (bool, String)>;
        static BUILT: OnceLock<Mutex<HashMap<PathBuf, Built>>> = OnceLock::new();
        let builds = BUILT.get_or_init(Default::default);
        let dir = self.cache_key_dir()?;
        // Held while building: two tests of one binary asking for the same tool build it once.
        let mut builds = builds.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let built = builds.entry(dir.clone()).or_insert_with(|| {
            self.build(&dir).map_err(|error| match error {
                HarnessError::Unavailable(what) => (true, what),
                HarnessError::Failed(why) => (false, why),
            })
        });
        match built {
            Ok(path) => Ok(path.clone()),
            Err((true, what)) => Err(HarnessError::Unavailable(what.clone())),
            Err((false, why)) => Err(HarnessError::Failed(why.clone())),
        }
    }

    fn cache_key_dir(&self) -> Result<PathBuf, HarnessError> {
        let module = self.module_dir();
        let mut hash = Sha256::new();
        for file in &self.key_files {
            hash.update(fs::read(module.join(file)).map_err(failed)?);
        }
        let key = hex::encode(hash.finalize());
        let prefix = if self.key_prefix.is_empty() { String::new() } else { format!("{}-", self.key_prefix) };
        Ok(self.cache_dir.join(format!("{prefix}{}", &key[..16])))
    }

    fn build(&self, dir: &Path) -> Result<PathBuf, HarnessError> {
        let binary = dir.join(&self.name);
        if binary.is_file() {
            return Ok(binary);
        }
        let module = self.module_dir();
        let go = find_on_path("go").ok_or_else(|| {
            HarnessError::Unavailable(format!(
                "Go is not installed: the tests build {} from {} with it",
                self.name,
                self.module.display()
            ))
        })?;
        fs::create_dir_all(dir).map_err(failed)?;
        let total = Command::new(&go)
            .args(["list", "-deps", &self.package])
            .current_dir(&module)
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| output.stdout.split(|&byte| byte == b'\n').filter(|line| !line.is_empty()).count());
        self.report(&format!(
            "building {} ({} in {}) into {} with {}; a cold build takes {} on 2 cores, later runs reuse it",
            self.name,
            self.package,
            self.module.display(),
            dir.display(),
            go.display(),
            self.cold_estimate
        ));
        let partial = dir.join(format!("{}.partial-{}", self.name, std::process::id()));
        let started = Instant::now();
        let mut command = Command::new(&go);
        command.args(["build", "-v", "-trimpath"]);
        if let Some(ldflags) = &self.ldflags {
            command.args(["-ldflags", ldflags]);
        }
        let mut child = command
            .arg("-o")
            .arg(&partial)
            .arg(&self.package)
            .current_dir(&module)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| HarnessError::Failed(format!("go build of {}: {e}", self.name)))?;
        // `go build -v` names each package as it compiles it: count them for the progress lines.
        let stderr = child.stderr.take().expect("piped stderr");
        let mut compiled = 0usize;
        let mut last_report = Instant::now();
        let mut errors = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with('#') || line.contains(": ") || line.starts_with('\t') {
                errors.push(line);
                continue;
            }
            compiled += 1;
            if last_report.elapsed() >= Duration::from_secs(30) {
                last_report = Instant::now();
                let of = total.map(|total| format!(" of at most {total}")).unwrap_or_default();
                self.report(&format!(
                    "{} build: {compiled} packages compiled{of}, {:.0} s",
                    self.name,
                    started.elapsed().as_secs_f64()
                ));
            }
        }
        let status = child.wait().map_err(failed)?;
        if !status.success() {
            let _ = fs::remove_file(&partial);
            return Err(HarnessError::Failed(format!(
                "go build of {} in {} ({status}):\n{}",
                self.package,
                self.module.display(),
                errors.join("\n")
            )));
        }
        fs::rename(&partial, &binary).map_err(failed)?;
        self.report(&format!(
            "{} built in {:.0} s ({compiled} packages compiled): {}",
            self.name,
            started.elapsed().as_secs_f64(),
            binary.display()
        ));
        Ok(binary)
    }

    /// A line on the test process's stderr that the test harness does not capture (progress of a
    /// long step must be visible while it runs).
    fn report(&self, line: &str) {
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "[{}] {line}", self.name);
    }
}

/// `$XDG_CACHE_HOME/cdtarget`, else `~/.cache/cdtarget`, else under the temporary directory.
pub fn cache_base() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("cdtarget")
}

fn failed(error: impl std::fmt::Display) -> HarnessError {
    HarnessError::Failed(error.to_string())
}
