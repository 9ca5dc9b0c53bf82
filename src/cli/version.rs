//! `cdtarget version`: what the binary is built from (see `build.rs`), as text or JSON.

use std::io::{self, Write};

use serde::Serialize;

/// Output format of `version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VersionOutput {
    /// `cdtarget VERSION (COMMIT)` and one `key: value` line per fact.
    Text,
    /// One JSON object on one line.
    Json,
}

/// What the binary is built from. Every field is fixed at build time; nothing depends on when
/// it was built.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildInfo {
    /// The crate version (`Cargo.toml`).
    pub version: &'static str,
    /// The full Git commit, or `None` when built without `.git` and without `CDTARGET_GIT_COMMIT`.
    pub git_commit: Option<&'static str>,
    /// `clean` or `dirty` (the sources differ from the commit), when known.
    pub git_tree_state: Option<&'static str>,
    /// `rustc --version` of the compiler.
    pub rustc: &'static str,
    /// The target triple.
    pub target: &'static str,
    /// `debug` or `release`.
    pub profile: &'static str,
    /// The cargo features enabled, sorted.
    pub features: Vec<&'static str>,
}

/// `--version` and the first line of `cdtarget version`: `0.1.0 (abc123def456)`, with `-dirty`
/// when the sources differed from the commit; `0.1.0 (commit unknown)` without one (put together
/// by `build.rs`).
pub const VERSION_LINE: &str = env!("CDTARGET_BUILD_VERSION_LINE");

/// The build information of this binary.
pub fn build_info() -> BuildInfo {
    let nonempty = |text: &'static str| Some(text).filter(|t| !t.is_empty());
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: nonempty(env!("CDTARGET_BUILD_GIT_COMMIT")),
        git_tree_state: nonempty(env!("CDTARGET_BUILD_GIT_TREE_STATE")),
        rustc: env!("CDTARGET_BUILD_RUSTC"),
        target: env!("CDTARGET_BUILD_TARGET"),
        profile: env!("CDTARGET_BUILD_PROFILE"),
        features: env!("CDTARGET_BUILD_FEATURES").split(',').filter(|f| !f.is_empty()).collect(),
    }
}

/// `cdtarget version`: the `--version` line, then one line per fact; or the JSON object.
pub fn version_command(output: VersionOutput, out: &mut impl Write) -> io::Result<bool> {
    let info = build_info();
    match output {
        VersionOutput::Json => {
            serde_json::to_writer(&mut *out, &info)?;
            writeln!(out)?;
        }
        VersionOutput::Text => {
            let unknown = "unknown";
            let features = if info.features.is_empty() { "none".to_owned() } else { info.features.join(",") };
            writeln!(out, "cdtarget {VERSION_LINE}")?;
            writeln!(out, "commit:   {}", info.git_commit.unwrap_or(unknown))?;
            writeln!(out, "tree:     {}", info.git_tree_state.unwrap_or(unknown))?;
            writeln!(out, "rustc:    {}", info.rustc)?;
            writeln!(out, "target:   {}", info.target)?;
            writeln!(out, "profile:  {}", info.profile)?;
            writeln!(out, "features: {features}")?;
        }
    }
    Ok(true)
}
