//! Build information for `cdtarget version`: the Git commit the binary is built from and whether
//! its sources differ from it, the compiler, target, profile and features. No clock is read, so
//! the same tree gives the same binary.
//!
//! The commit comes from `git` when the crate is the top of a Git work tree; a build without
//! `.git` (a container build context, an unpacked source archive) passes it in the environment
//! variable `CDTARGET_GIT_COMMIT` (and `CDTARGET_GIT_TREE_STATE=clean|dirty`), which wins when set.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files and directories the binary is built from: "dirty" means one of them differs from
/// the commit, and a change of any of them runs this script again.
const SOURCES: [&str; 4] = ["src", "build.rs", "Cargo.toml", "Cargo.lock"];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
    }
    println!("cargo:rerun-if-env-changed=CDTARGET_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=CDTARGET_GIT_TREE_STATE");

    let (commit, tree_state) = match env::var("CDTARGET_GIT_COMMIT").ok().filter(|c| !c.trim().is_empty()) {
        Some(commit) => (commit.trim().to_owned(), env::var("CDTARGET_GIT_TREE_STATE").unwrap_or_default()),
        None => from_git(&manifest_dir).unwrap_or_default(),
    };
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .unwrap_or_default();
    // Cargo names each enabled feature in a CARGO_FEATURE_<NAME> variable (upper case, `-` as `_`).
    let mut features: Vec<String> = env::vars()
        .filter_map(|(name, _)| name.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase().replace('_', "-")))
        .collect();
    features.sort();

    let short = match commit.get(..12) {
        _ if commit.is_empty() => "commit unknown".to_owned(),
        Some(short) => short.to_owned(),
        None => commit.clone(),
    };
    let dirty = if tree_state == "dirty" { "-dirty" } else { "" };
    // `--version` and the first line of `cdtarget version`.
    println!(
        "cargo:rustc-env=CDTARGET_BUILD_VERSION_LINE={} ({short}{dirty})",
        env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
    println!("cargo:rustc-env=CDTARGET_BUILD_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=CDTARGET_BUILD_GIT_TREE_STATE={tree_state}");
    println!("cargo:rustc-env=CDTARGET_BUILD_RUSTC={rustc_version}");
    println!("cargo:rustc-env=CDTARGET_BUILD_TARGET={}", env::var("TARGET").unwrap_or_default());
    println!("cargo:rustc-env=CDTARGET_BUILD_PROFILE={}", env::var("PROFILE").unwrap_or_default());
    println!("cargo:rustc-env=CDTARGET_BUILD_FEATURES={}", features.join(","));
}

/// The commit of HEAD and `clean` or `dirty`, when the crate is the top of a Git work tree (not
/// a crate unpacked inside some other repository) and `git` runs.
fn from_git(manifest_dir: &Path) -> Option<(String, String)> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").arg("-C").arg(manifest_dir).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != manifest_dir.canonicalize().ok()? {
        return None;
    }
    // A new commit or a checkout moves HEAD or the branch it points to: run again then. (A linked
    // work tree keeps HEAD in its own git directory and the branches in the common one.)
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch])?);
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"])?);
    for path in watched {
        let path = manifest_dir.join(path);
        // A path that does not exist would make cargo run this script on every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let commit = git(&["rev-parse", "HEAD"])?;
    let changes = git(&[&["status", "--porcelain", "--"][..], &SOURCES[..]].concat())?;
    let state = if changes.is_empty() { "clean" } else { "dirty" };
    Some((commit, state.to_owned()))
}
