//! The container image: the Dockerfile's runtime stage built with buildah around the static
//! binary of this checkout (the `dist` profile), then run here.
//!
//! Nothing is pulled: the binary is built on the host with `hack/static-binary.sh` (the same
//! script the Dockerfile's build stage runs), laid out with `hack/image-rootfs.sh`, and the
//! Dockerfile is built with `BINARY_FROM=prebuilt`, so its Rust stage is skipped and the rest is
//! `FROM scratch`. buildah runs with the vfs storage driver and chroot isolation (which needs
//! root), its storage in a temporary directory removed at exit; containers share the host's
//! network, so they reach the harness's Git servers on 127.0.0.1.
//!
//! The first run builds that binary cold (minutes, with progress lines); the image is built once
//! per process. Without buildah or root every test prints SKIP (and fails under `CI`).

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::process::{find_on_path, running_as_root};
use common::{HarnessError, HttpGit, HttpOptions, Tls, Upstream, skip_or_fail};

/// What README's first command renders, inside the image and on the host.
const NAMESPACE: &str = "team-payments";
/// The image's entrypoint and the only executable in it.
const ENTRYPOINT: &str = "/usr/local/bin/cdtarget";
/// Where the image keeps its CA bundle (`SSL_CERT_FILE`).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Issue #13's goal for the uncompressed image.
const SIZE_GOAL_BYTES: u64 = 25 * 1000 * 1000;

#[test]
fn the_image_renders_the_example_byte_for_byte_like_the_host_binary() {
    let Some(image) = image("the_image_renders_the_example_byte_for_byte_like_the_host_binary") else { return };
    let examples = manifest_dir().join("examples");
    let inside = image.run(
        &[Mount::read_only(&examples, "/examples")],
        &["render", "/examples/tenant-repo", "--policy", "/examples/platform/policy.yaml", "--namespace", NAMESPACE],
    );
    let on_host = host_render_of_the_example();
    assert_success("render in the image", &inside);
    assert_success("render on the host", &on_host);
    assert!(!on_host.stdout.is_empty(), "the example renders to something");
    assert!(inside.stdout == on_host.stdout, "{}", first_difference(&inside.stdout, &on_host.stdout));
}

#[test]
fn the_image_runs_as_65532_and_so_do_its_processes() {
    let Some(image) = image("the_image_runs_as_65532_and_so_do_its_processes") else { return };
    assert_eq!(image.config()["User"], "65532:65532", "the image's configured user");
    // A file written by the process in the image belongs to the uid and gid it ran as.
    let out = common::test_dir();
    fs::set_permissions(out.path(), fs::Permissions::from_mode(0o777)).expect("open the output directory to anyone");
    let written = image.run(&[Mount::read_write(out.path(), "/out")], &["crds", "--output-dir", "/out"]);
    assert_success("crds --output-dir in the image", &written);
    let files: Vec<_> = fs::read_dir(out.path()).expect("the output directory").map(|entry| entry.unwrap()).collect();
    assert!(!files.is_empty(), "`cdtarget crds --output-dir` wrote nothing");
    for file in files {
        let metadata = file.metadata().expect("metadata of a written file");
        assert_eq!(
            (metadata.uid(), metadata.gid()),
            (65532, 65532),
            "{} was written by another user",
            file.path().display()
        );
    }
}

#[test]
fn the_image_holds_a_static_binary_a_ca_bundle_and_tmp_only() {
    let Some(image) = image("the_image_holds_a_static_binary_a_ca_bundle_and_tmp_only") else { return };
    let (files, tmp_mode, binary) = image.inspect_root(|root| {
        let mut files = Vec::new();
        list_tree(root, root, &mut files);
        files.sort();
        let tmp = fs::metadata(root.join("tmp")).expect("/tmp in the image");
        (files, tmp.permissions().mode() & 0o7777, fs::read(root.join("usr/local/bin/cdtarget")).expect("the binary"))
    });
    assert_eq!(
        files,
        [
            "etc/",
            "etc/ssl/",
            "etc/ssl/certs/",
            "etc/ssl/certs/ca-certificates.crt",
            "tmp/",
            "usr/",
            "usr/local/",
            "usr/local/bin/",
            "usr/local/bin/cdtarget",
        ]
    );
    assert_eq!(tmp_mode, 0o1777, "/tmp is writable by anyone, sticky");
    assert_eq!(program_interpreter(&binary), None, "the binary asks for a dynamic loader: it is not static");
    let config = image.config();
    assert_eq!(config["Entrypoint"], serde_json::json!([ENTRYPOINT]));
    let env = &config["Env"];
    for variable in [format!("SSL_CERT_FILE={CA_BUNDLE}"), "SSL_CERT_DIR=/etc/ssl/certs".to_string()] {
        assert!(env.as_array().is_some_and(|env| env.contains(&variable.as_str().into())), "{variable} missing: {env}");
    }
    assert_eq!(
        config["Labels"]["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION"),
        "the Dockerfile's VERSION default is the crate's version"
    );
    eprintln!(
        "[image] binary {:.1} MB; image {:.1} MB uncompressed ({} bytes), {:.1} MB gzip-compressed",
        binary.len() as f64 / 1e6,
        image.uncompressed_bytes as f64 / 1e6,
        image.uncompressed_bytes,
        image.compressed_bytes as f64 / 1e6
    );
    assert!(
        image.uncompressed_bytes < SIZE_GOAL_BYTES,
        "the image is {} bytes uncompressed, over the goal of {SIZE_GOAL_BYTES}",
        image.uncompressed_bytes
    );
}

#[test]
fn https_fetches_in_the_image_trust_the_bundle_at_ssl_cert_file_and_nothing_else() {
    let Some(image) = image("https_fetches_in_the_image_trust_the_bundle_at_ssl_cert_file_and_nothing_else") else {
        return;
    };
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let tree = manifest_dir().join("examples/tenant-repo");
    let mut files = Vec::new();
    list_tree(&tree, &tree, &mut files);
    let contents: Vec<(&str, Vec<u8>)> = files
        .iter()
        .filter(|path| !path.ends_with('/'))
        .map(|path| (path.as_str(), fs::read(tree.join(path)).expect("an example file")))
        .collect();
    repo.commit_and_push(&contents, "the example tenant repository");
    let https = HttpGit::start_with(&upstream.root(), HttpOptions { tls: Tls::SignedByCa, ..HttpOptions::default() });
    // `localhost`, not 127.0.0.1: the static glibc resolves it from the /etc/hosts buildah
    // provides (as the kubelet does), without /etc/nsswitch.conf.
    let url = format!("https://localhost:{}/tenant.git", https.port());
    let examples = manifest_dir().join("examples");
    let render = ["render", &url, "--policy", "/examples/platform/policy.yaml", "--namespace", NAMESPACE];

    // The test CA where the image's bundle is: libgit2's OpenSSL finds it through SSL_CERT_FILE.
    let bundle = common::test_dir();
    let bundle_file = bundle.path().join("ca-certificates.crt");
    fs::write(&bundle_file, https.ca_pem().expect("the test CA")).expect("write the bundle");
    let trusted =
        image.run(&[Mount::read_only(&examples, "/examples"), Mount::read_only(&bundle_file, CA_BUNDLE)], &render);
    let on_host = host_render_of_the_example();
    assert_success("render of the https URL in the image", &trusted);
    assert_success("render of the directory on the host", &on_host);
    assert!(trusted.stdout == on_host.stdout, "{}", first_difference(&trusted.stdout, &on_host.stdout));

    // The image's own bundle (the public CAs) does not hold the test CA: the same fetch fails.
    let untrusted = image.run(&[Mount::read_only(&examples, "/examples")], &render);
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success(), "a certificate outside the image's bundle was accepted");
    assert!(stderr.contains("is not trusted"), "the failure names the certificate: {stderr}");
}

// === the image ===

/// The image built for this test process, and what is known about it.
struct Image {
    buildah: Buildah,
    name: String,
    uncompressed_bytes: u64,
    compressed_bytes: u64,
}

/// The image, built on first use; `None` (after a SKIP line) when buildah or root is missing.
fn image(test: &str) -> Option<&'static Image> {
    static BUILT: OnceLock<Result<Image, (bool, String)>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        build_image().map_err(|error| match error {
            HarnessError::Unavailable(what) => (true, what),
            HarnessError::Failed(why) => (false, why),
        })
    });
    let result = match built {
        Ok(image) => Ok(image),
        Err((true, what)) => Err(HarnessError::Unavailable(what.clone())),
        Err((false, why)) => Err(HarnessError::Failed(why.clone())),
    };
    skip_or_fail(test, result)
}

fn build_image() -> Result<Image, HarnessError> {
    let buildah = Buildah::new()?;
    let host_bundle = Path::new(CA_BUNDLE);
    if !host_bundle.is_file() {
        return Err(HarnessError::Unavailable(format!(
            "{CA_BUNDLE} is missing: the image copies the host's CA bundle (apt-get install ca-certificates)"
        )));
    }
    let binary = static_binary()?;
    let context = buildah.dir.join("context");
    let rootfs = context.join("rootfs");
    run_checked(
        Command::new(manifest_dir().join("hack/image-rootfs.sh")).arg(&binary).arg(host_bundle).arg(&rootfs),
        "hack/image-rootfs.sh",
    )?;
    let name = format!("localhost/cdtarget-image-test:{}", std::process::id());
    let started = Instant::now();
    buildah.checked(
        &[
            "bud",
            "--isolation",
            "chroot",
            "--pull=never",
            "--build-arg",
            "BINARY_FROM=prebuilt",
            "--tag",
            &name,
            "--file",
            path_str(&manifest_dir().join("Dockerfile")),
            path_str(&context),
        ],
        "buildah bud",
    )?;
    report(&format!("image {name} built in {:.1} s", started.elapsed().as_secs_f64()));
    let uncompressed_bytes = buildah.layer_bytes(&name, true)?;
    let compressed_bytes = buildah.layer_bytes(&name, false)?;
    Ok(Image { buildah, name, uncompressed_bytes, compressed_bytes })
}

impl Image {
    /// The image's OCI configuration (`config` of `buildah inspect`: User, Entrypoint, Env,
    /// Labels, ...).
    fn config(&self) -> serde_json::Value {
        let inspected = self
            .buildah
            .checked(&["inspect", "--type", "image", &self.name], "buildah inspect")
            .unwrap_or_else(|error| panic!("{error}"));
        let inspected: serde_json::Value = serde_json::from_str(&inspected).expect("buildah inspect prints JSON");
        inspected["OCIv1"]["config"].clone()
    }

    /// Calls `inspect` with the root directory of a new container of the image (removed
    /// afterwards): what the image holds, not what it was built from.
    fn inspect_root<T>(&self, inspect: impl FnOnce(&Path) -> T) -> T {
        let container = self.container();
        let _remove = RemoveContainer { buildah: &self.buildah, container: container.clone() };
        let root =
            self.buildah.checked(&["mount", &container], "buildah mount").unwrap_or_else(|error| panic!("{error}"));
        let inspected = inspect(Path::new(root.trim()));
        let _ = self.buildah.command().args(["umount", &container]).output();
        inspected
    }

    fn container(&self) -> String {
        self.buildah
            .checked(&["from", "--pull=never", &self.name], "buildah from")
            .unwrap_or_else(|error| panic!("{error}"))
            .trim()
            .to_string()
    }

    /// Runs the image's entrypoint with `args` in a new container (removed afterwards), as the
    /// image's user, with `mounts`; returns its output whatever the exit status.
    fn run(&self, mounts: &[Mount], args: &[&str]) -> Output {
        let container = self.container();
        let _remove = RemoveContainer { buildah: &self.buildah, container: container.clone() };
        let mut command = self.buildah.command();
        command.args(["run", "--isolation", "chroot"]);
        for mount in mounts {
            command.arg("--volume").arg(format!(
                "{}:{}:{}",
                mount.host.display(),
                mount.inside,
                if mount.writable { "rw" } else { "ro" }
            ));
        }
        command.arg(&container).arg("--").arg(ENTRYPOINT).args(args);
        command.output().expect("run buildah run")
    }
}

/// A host path mounted into a container.
struct Mount<'a> {
    host: &'a Path,
    inside: &'a str,
    writable: bool,
}

impl<'a> Mount<'a> {
    fn read_only(host: &'a Path, inside: &'a str) -> Mount<'a> {
        Mount { host, inside, writable: false }
    }

    fn read_write(host: &'a Path, inside: &'a str) -> Mount<'a> {
        Mount { host, inside, writable: true }
    }
}

struct RemoveContainer<'a> {
    buildah: &'a Buildah,
    container: String,
}

impl Drop for RemoveContainer<'_> {
    fn drop(&mut self) {
        let _ = self.buildah.command().args(["rm", &self.container]).output();
    }
}

// === buildah ===

/// buildah with storage of its own (vfs, under a temporary directory removed at exit).
struct Buildah {
    program: PathBuf,
    dir: PathBuf,
}

impl Buildah {
    fn new() -> Result<Buildah, HarnessError> {
        let program = find_on_path("buildah").ok_or_else(|| {
            HarnessError::Unavailable(
                "buildah is not installed: the image test builds and runs the image with it (apt-get install buildah)"
                    .into(),
            )
        })?;
        if !running_as_root() {
            return Err(HarnessError::Unavailable(
                "the image test runs buildah with chroot isolation, which needs root; run it as root (CI does)".into(),
            ));
        }
        // Kept past the TempDir (statics are never dropped) and removed when the process exits.
        let dir = common::test_dir().keep();
        common::control_plane::kill_at_exit(Vec::new(), Some(dir.clone()));
        let storage = format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            dir.join("storage").display(),
            dir.join("run").display()
        );
        fs::write(dir.join("storage.conf"), storage).map_err(failed)?;
        Ok(Buildah { program, dir })
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command
            .arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .args(["--storage-driver", "vfs"])
            // Neither the machine's registries nor its storage configuration is read.
            .env("CONTAINERS_REGISTRIES_CONF", "/dev/null")
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .stdin(Stdio::null());
        command
    }

    /// Runs buildah with `args`; its stdout, or a failure with its stderr.
    fn checked(&self, args: &[&str], what: &str) -> Result<String, HarnessError> {
        run_checked(self.command().args(args), what)
    }

    /// The total size of the image's layers as pushed: to a `dir:` destination uncompressed, or
    /// to an OCI layout gzip-compressed (what a registry stores).
    fn layer_bytes(&self, image: &str, uncompressed: bool) -> Result<u64, HarnessError> {
        let manifest = if uncompressed {
            let dir = self.dir.join("pushed-uncompressed");
            let destination = format!("dir:{}", dir.display());
            self.checked(&["push", "--quiet", "--disable-compression", image, &destination], "buildah push")?;
            read_json(&dir.join("manifest.json"))?
        } else {
            let layout = self.dir.join("pushed-oci");
            let destination = format!("oci:{}", layout.display());
            self.checked(&["push", "--quiet", image, &destination], "buildah push")?;
            let index = read_json(&layout.join("index.json"))?;
            let digest = index["manifests"][0]["digest"].as_str().ok_or_else(|| failed("no manifest in index.json"))?;
            read_json(&blob(&layout, digest))?
        };
        let layers = manifest["layers"].as_array().ok_or_else(|| failed("no layers in the manifest"))?;
        Ok(layers.iter().filter_map(|layer| layer["size"].as_u64()).sum())
    }
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let (algorithm, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
    layout.join("blobs").join(algorithm).join(hex)
}

fn read_json(path: &Path) -> Result<serde_json::Value, HarnessError> {
    let text = fs::read_to_string(path).map_err(|e| failed(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| failed(format!("{}: {e}", path.display())))
}

// === the static binary ===

/// Builds the image's binary with `hack/static-binary.sh` into this test's target directory (cold:
/// minutes), reporting progress every 30 s; returns its path.
fn static_binary() -> Result<PathBuf, HarnessError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = target_dir();
    report(&format!(
        "building the image's static binary with hack/static-binary.sh into {}; cold, this takes 8 to 20 minutes on 2 cores (later runs reuse it)",
        target_dir.display()
    ));
    let started = Instant::now();
    let mut child = Command::new(manifest_dir().join("hack/static-binary.sh"))
        .env("CARGO", &cargo)
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("hack/static-binary.sh: {e}")))?;
    let stderr = child.stderr.take().expect("piped stderr");
    let mut compiled = 0usize;
    let mut last_report = Instant::now();
    let mut tail = Vec::new();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        if line.trim_start().starts_with("Compiling") {
            compiled += 1;
        }
        if last_report.elapsed() >= Duration::from_secs(30) {
            last_report = Instant::now();
            report(&format!(
                "static binary: {compiled} crates compiled, {:.0} s: {}",
                started.elapsed().as_secs_f64(),
                line.trim()
            ));
        }
        tail.push(line);
        if tail.len() > 60 {
            tail.remove(0);
        }
    }
    let output = child.wait_with_output().map_err(|e| failed(format!("hack/static-binary.sh: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!("hack/static-binary.sh ({}):\n{}", output.status, tail.join("\n"))));
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    report(&format!(
        "static binary ready in {:.0} s ({compiled} crates compiled): {}",
        started.elapsed().as_secs_f64(),
        path.display()
    ));
    Ok(path)
}

/// The target directory of this test binary (`<target>/debug/deps/image-<hash>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors().nth(3).expect("the test binary lives in <target>/<profile>/deps").to_path_buf()
}

/// The ELF program interpreter (`PT_INTERP`) the binary asks for, if any: a dynamically linked
/// binary names its loader there, a static one has none.
fn program_interpreter(elf: &[u8]) -> Option<String> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    assert_eq!(elf[5], 1, "little-endian");
    let (table, entry_size, entries) = (u64_at(0x20), usize::from(u16_at(0x36)), usize::from(u16_at(0x38)));
    (0..entries).map(|i| table + i * entry_size).find(|&header| u32_at(header) == 3).map(|header| {
        let (offset, size) = (u64_at(header + 8), u64_at(header + 32));
        String::from_utf8_lossy(&elf[offset..offset + size]).trim_end_matches('\0').to_string()
    })
}

// === helpers ===

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the host's (debug) `cdtarget` in the crate directory.
fn host_cdtarget(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdtarget"))
        .args(args)
        .current_dir(manifest_dir())
        .output()
        .expect("run the host's cdtarget")
}

fn run_checked(command: &mut Command, what: &str) -> Result<String, HarnessError> {
    let output = command.output().map_err(|e| failed(format!("{what}: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!(
            "{what} ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn assert_success(what: &str, output: &Output) {
    assert!(output.status.success(), "{what} failed ({}):\n{}", output.status, String::from_utf8_lossy(&output.stderr));
}

/// Where two outputs first differ, for a failure message that fits on a screen.
fn first_difference(left: &[u8], right: &[u8]) -> String {
    let at = left.iter().zip(right).position(|(a, b)| a != b).unwrap_or(left.len().min(right.len()));
    let context =
        |bytes: &[u8]| String::from_utf8_lossy(&bytes[at.saturating_sub(80)..(at + 80).min(bytes.len())]).into_owned();
    format!(
        "outputs differ at byte {at} (lengths {} and {}):\n--- image:\n{}\n--- host:\n{}",
        left.len(),
        right.len(),
        context(left),
        context(right)
    )
}

/// The paths under `dir`, relative to `root`, directories with a trailing `/`.
fn list_tree(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let relative = path.strip_prefix(root).expect("under root").to_string_lossy().into_owned();
        if path.is_dir() {
            out.push(format!("{relative}/"));
            list_tree(root, &path, out);
        } else {
            out.push(relative);
        }
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

fn failed(why: impl std::fmt::Display) -> HarnessError {
    HarnessError::Failed(why.to_string())
}

/// A progress line the test harness does not capture.
fn report(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "[image] {line}");
}

/// README's first command, run by the host's (debug) binary from the repository root.
fn host_render_of_the_example() -> Output {
    host_cdtarget(&[
        "render",
        "examples/tenant-repo",
        "--policy",
        "examples/platform/policy.yaml",
        "--namespace",
        NAMESPACE,
    ])
}
