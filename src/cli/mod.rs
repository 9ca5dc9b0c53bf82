//! The command line: `render`, `validate`, `diff`, `crds`, `controller`, `webhook-path`,
//! `gitlab-sync`, `reconcile`, `completion` and `version`.

pub mod completion;
pub mod diff;
pub mod gitlab_sync;
pub mod reconcile;
mod remote;
pub mod version;
pub mod webhook_path;

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use kube::CustomResourceExt;

use crate::api::keda::KedaVersion;
use crate::api::{CDTarget, SyncStatus, TenantRepository};
use crate::manifests::{self, ApplySet, Content, Limits};
use crate::policy::{self, Policy};
use crate::problem::Problem;
use crate::render::{self, Scaling, SecretDigests};
use crate::yaml::to_yaml;

/// Largest policy file read, in bytes.
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// cdtarget: tenants' Git repositories rendered into egress NetworkPolicies, Azure Pipelines
/// agents and KEDA autoscalers, inside the guardrails the cluster admins set.
#[derive(Debug, Parser)]
#[command(name = "cdtarget", version = version::VERSION_LINE, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the complete apply set of a tenant repository as multi-document YAML: the tenant's
    /// documents plus the rendered children of every CDTarget, for the KEDA of
    /// `--keda-version`. All or nothing: on any problem nothing is printed on stdout and every
    /// problem goes to stderr. Risks of that KEDA (busy agents scaled down) are warned about on
    /// stderr.
    Render {
        /// Where the manifests come from.
        #[command(flatten)]
        source: SourceArgs,
        /// The KEDA rendered for.
        #[command(flatten)]
        keda: KedaArgs,
    },
    /// Check a tenant repository and print one line per problem
    /// (`file:DOC: field: what is wrong`); exits non-zero when there is any. Risks of the KEDA
    /// of `--keda-version` are warned about on stderr (`warning: file:DOC: field: …`) and do not
    /// fail the check.
    Validate {
        /// Where the manifests come from.
        #[command(flatten)]
        source: SourceArgs,
        /// The KEDA checked for.
        #[command(flatten)]
        keda: KedaArgs,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Text, value_name = "FORMAT")]
        output: Output,
    },
    /// Show what a push would create, change and prune in the tenant namespace: every object
    /// server-side dry-run as the tenant's ServiceAccount, CDTarget children included, as a
    /// unified diff per object (or `--output json`). Exit codes as `kubectl diff`: 0 no
    /// differences, 1 differences, 2 an error (the located problems on stderr).
    Diff(diff::DiffArgs),
    /// Print the CustomResourceDefinitions of CDTarget and TenantRepository.
    Crds {
        /// Write one file per CRD into this directory (as committed under `deploy/crds/`)
        /// instead of printing them.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
    /// Run the controller against the cluster of the environment (in-cluster or kubeconfig):
    /// both reconcilers, leader election, `/metrics`, `/healthz` and `/readyz`.
    Controller(crate::controller::process::Args),
    /// Print a registration's webhook path (`/hook/<digest>`), as in its `status.webhookPath`,
    /// or with `--base-url` the full URL to paste into the Git host's webhook settings.
    WebhookPath(webhook_path::WebhookPathArgs),
    /// Put the registration's read-only deploy key and webhook on its GitLab project (or remove
    /// them with `--delete`) exactly as the controller does, once; `--dry-run` prints the calls.
    GitlabSync(gitlab_sync::GitLabSyncArgs),
    /// Ask the controller to reconcile a TenantRepository or a CDTarget now (the annotation
    /// `cdtarget.io/requestedAt`); with `--wait`, wait until it did and print the outcome.
    Reconcile(reconcile::ReconcileArgs),
    /// Print the completion script of a shell (`source <(cdtarget completion bash)`).
    Completion {
        /// The shell the script is for.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the version and what the binary was built from: Git commit, compiler, target,
    /// profile and features.
    Version {
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = version::VersionOutput::Text, value_name = "FORMAT")]
        output: version::VersionOutput,
    },
}

/// The tenant repository and the platform settings it is rendered with.
#[derive(Debug, clap::Args)]
pub struct SourceArgs {
    /// Directory holding the tenant's manifests, or a Git URL (`ssh://`, `https://`, `http://`,
    /// `git://`, `file://`) fetched exactly as the controller fetches it.
    #[arg(value_name = "DIR|URL")]
    pub source: String,
    /// With a URL: the branch, tag (`tags/NAME`) or full commit SHA to check out.
    #[arg(long = "ref", value_name = "REF", default_value = "main")]
    pub git_ref: String,
    /// With a URL: the directory inside the repository holding the manifests.
    #[arg(long, value_name = "SUBDIR")]
    pub path: Option<String>,
    /// With a directory: the repository root it lies in, the boundary of kustomize builds (an
    /// overlay in DIR may use bases anywhere beneath ROOT, as the controller allows beneath the
    /// repository). Without it, DIR itself is the boundary.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// With an ssh:// URL: the private key (deploy key) to authenticate with.
    #[arg(long, value_name = "FILE")]
    pub ssh_key: Option<PathBuf>,
    /// With an ssh:// URL: the key's passphrase, read from this file.
    #[arg(long, value_name = "FILE")]
    pub ssh_key_passphrase_file: Option<PathBuf>,
    /// With an ssh:// URL: known_hosts entries the server's host key must match (required).
    #[arg(long, value_name = "FILE")]
    pub known_hosts: Option<PathBuf>,
    /// With an https:// URL: a file holding the access token (`-` reads standard input).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// With an https:// URL: a PEM CA bundle the server's certificate must chain to.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// With a URL: upper bound on the fetch, as a duration (`90s`, `5m`; a bare number counts as
    /// seconds).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = crate::source::registration::parse_timeout)]
    pub timeout: Duration,
    /// The platform policy: a policy document, a ConfigMap with key `policy.yaml`, or the legacy
    /// `cdtarget-ports` ConfigMap. Without it the documented defaults apply.
    #[arg(long, env = "CDTARGET_POLICY", value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The tenant namespace every object goes to.
    #[arg(long, short = 'n', default_value = "default", value_name = "NAMESPACE")]
    pub namespace: String,
    /// Largest YAML file read, in bytes.
    #[arg(long, default_value_t = Limits::default().max_file_bytes, value_name = "BYTES")]
    pub max_file_bytes: u64,
    /// Largest total of YAML read, in bytes.
    #[arg(long, default_value_t = Limits::default().max_total_bytes, value_name = "BYTES")]
    pub max_total_bytes: u64,
}

/// The KEDA release `render` and `validate` work for.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct KedaArgs {
    /// The KEDA release of the cluster (`2.21`, `2.21.0`, `v2.21.0`), which decides what the
    /// ScaledObject and ScaledJob count. Default: the policy's `keda.version`, else the newest
    /// supported release (2.21.0).
    #[arg(long, value_name = "VERSION", value_parser = parse_keda_version)]
    pub keda_version: Option<KedaVersion>,
}

impl KedaArgs {
    /// The release to render for: the flag, else the policy's pin, else the newest supported.
    pub fn version(&self, policy: &Policy) -> KedaVersion {
        self.keda_version.or(policy.keda.version).unwrap_or(KedaVersion::NEWEST_SUPPORTED)
    }
}

/// Reads `--keda-version`: a release cdtarget renders for.
fn parse_keda_version(text: &str) -> Result<KedaVersion, String> {
    let version: KedaVersion = text.parse()?;
    if version < KedaVersion::OLDEST_SUPPORTED {
        return Err(format!(
            "KEDA {version} is older than the oldest release cdtarget renders for ({})",
            KedaVersion::OLDEST_SUPPORTED
        ));
    }
    Ok(version)
}

/// Output format of `validate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One line per problem.
    Text,
    /// One JSON object: `{"valid": bool, "documents": N, "cdtargets": N, "problems": [...]}`.
    Json,
}

/// Runs the command line and maps the outcome to an exit code: 0 success, 1 problems found,
/// 2 usage errors.
pub fn main() -> ExitCode {
    crate::libgit2_globals::load_before_threads();
    let cli = Cli::parse();
    let cli = match cli.command {
        Command::Controller(args) => return crate::controller::process::main(args),
        Command::GitlabSync(args) => return gitlab_sync::main(&args),
        Command::Reconcile(args) => return reconcile::main(&args),
        Command::Diff(args) => return diff::main(&args),
        command => Cli { command },
    };
    let stdout = io::stdout();
    let stderr = io::stderr();
    let result = match cli.command {
        Command::Render { source, keda } => {
            render_command(&source, keda, &mut BufWriter::new(stdout.lock()), &mut stderr.lock())
        }
        Command::Validate { source, keda, output } => {
            validate_command(&source, keda, output, &mut stdout.lock(), &mut stderr.lock())
        }
        Command::Crds { output_dir: None } => stdout.lock().write_all(crds_yaml().as_bytes()).map(|()| true),
        Command::Crds { output_dir: Some(dir) } => write_crds(&dir).map(|()| true),
        Command::WebhookPath(args) => {
            webhook_path::webhook_path_command(&args, &mut io::stdin().lock(), &mut stdout.lock(), &mut stderr.lock())
        }
        Command::Completion { shell } => completion::completion_command(shell, &mut stdout.lock()),
        Command::Version { output } => version::version_command(output, &mut stdout.lock()),
        Command::Controller(_) | Command::GitlabSync(_) | Command::Reconcile(_) | Command::Diff(_) => {
            unreachable!("handled above")
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cdtarget: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the policy and the tree and loads the apply set, collecting every problem.
pub fn load_source(args: &SourceArgs) -> Result<(Policy, ApplySet), Vec<Problem>> {
    let policy = match &args.policy {
        None => Ok(Policy::default()),
        Some(path) => read_policy(path),
    };
    let limits =
        Limits { max_file_bytes: args.max_file_bytes, max_total_bytes: args.max_total_bytes, ..Limits::default() };
    // Keeps a fetched checkout alive until the tree is read; removed on drop.
    let mut _checkout = None;
    let synced = match remote::is_url(&args.source) {
        false => local_root(Path::new(&args.source), args.root.as_deref()),
        true => match remote::fetch(args) {
            Ok((checkout, root, dir)) => {
                _checkout = Some(checkout);
                Ok((root, dir))
            }
            Err(problem) => Err(vec![problem]),
        },
    };
    match (policy, synced) {
        (Ok(policy), Ok((root, dir))) => {
            // On a loader thread, as in the controller: its stack is sized for the depth bound.
            let namespace = args.namespace.clone();
            let load = crate::budget::spawn_loader("cdtarget-load", move || {
                manifests::read_and_load(&root, &dir, &limits, &namespace, &policy).map(|set| (policy, set))
            });
            match load.map(std::thread::JoinHandle::join) {
                Ok(Ok(loaded)) => loaded,
                Ok(Err(_)) => Err(vec![Problem::field("", "the load stopped before it finished")]),
                Err(e) => Err(vec![Problem::field("", format!("the load could not start: {e}"))]),
            }
        }
        (policy, synced) => Err(policy.err().into_iter().chain(synced.err()).flatten().collect()),
    }
}

/// The boundary and the synced directory (relative to it) of a local DIR: DIR itself, or with
/// `--root` the root and DIR's path beneath it.
fn local_root(dir: &Path, root: Option<&Path>) -> Result<(PathBuf, String), Vec<Problem>> {
    let Some(root) = root else { return Ok((dir.to_path_buf(), String::new())) };
    let canonical = |path: &Path| {
        fs::canonicalize(path).map_err(|e| {
            vec![Problem::field("", format!("cannot read directory: {e}")).located(
                &path.display().to_string(),
                None,
                None,
            )]
        })
    };
    let (dir_canonical, root_canonical) = (canonical(dir)?, canonical(root)?);
    let Ok(relative) = dir_canonical.strip_prefix(&root_canonical) else {
        return Err(vec![
            Problem::field("", format!("is not beneath --root {}; give a root that holds it", root.display())).located(
                &dir.display().to_string(),
                None,
                None,
            ),
        ]);
    };
    let relative: Vec<String> = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    Ok((root_canonical, relative.join("/")))
}

fn read_policy(path: &Path) -> Result<Policy, Vec<Problem>> {
    let shown = path.display().to_string();
    let fail = |message: String| vec![Problem::field("", message).located(&shown, None, None)];
    let size = fs::metadata(path).map_err(|e| fail(format!("cannot read policy: {e}")))?.len();
    if size > MAX_POLICY_BYTES {
        return Err(fail(format!("is {size} bytes; a policy of at most {MAX_POLICY_BYTES} bytes is read")));
    }
    let text = fs::read_to_string(path).map_err(|e| fail(format!("cannot read policy: {e}")))?;
    policy::parse(&text, &shown)
}

/// `cdtarget render`: writes the apply set (and the busy-agent warnings on `err`), or every
/// problem. Returns whether it rendered.
pub fn render_command(
    args: &SourceArgs,
    keda: KedaArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> io::Result<bool> {
    match load_source(args) {
        Ok((policy, set)) => {
            let scaling = Scaling::Keda(keda.version(&policy));
            write_apply_set(&set, &policy, &SecretDigests::new(), scaling, out)?;
            out.flush()?;
            for warning in warnings(&set, &policy, scaling) {
                writeln!(err, "warning: {warning}")?;
            }
            Ok(true)
        }
        Err(problems) => {
            for problem in problems {
                writeln!(err, "{problem}")?;
            }
            Ok(false)
        }
    }
}

/// The risks the CDTargets of `set` run under `scaling` ([`render::busy_agent_risk`]), each
/// located at its CDTarget's `spec.mode`.
pub fn warnings(set: &ApplySet, policy: &Policy, scaling: Scaling) -> Vec<Problem> {
    let mut found = Vec::new();
    for document in &set.documents {
        let Content::CDTarget(target) = &document.content else { continue };
        let Ok(valid) = render::validate(target, policy) else { continue };
        if let Some(risk) = render::busy_agent_risk(valid.mode, scaling, &target.spec.trigger_meta) {
            let problem = Problem::field("spec.mode", risk);
            found.push(problem.located(&document.file, Some(document.index), Some(document.line)));
        }
    }
    found
}

/// Writes the tenant's documents in apply order, then the children of every CDTarget.
pub fn write_apply_set(
    set: &ApplySet,
    policy: &Policy,
    digests: &SecretDigests,
    scaling: Scaling,
    out: &mut impl Write,
) -> io::Result<()> {
    for document in &set.documents {
        let text = match &document.content {
            Content::CDTarget(target) => to_yaml(target.as_ref()),
            Content::Object(value) => to_yaml(value),
        };
        write_document(out, &text)?;
    }
    for target in set.cdtargets() {
        let children = render::render(target, policy, digests, scaling)
            .map_err(|_| io::Error::other("a CDTarget that passed validation failed to render"))?;
        for child in &children {
            write_document(out, &to_yaml(child))?;
        }
    }
    Ok(())
}

fn write_document(out: &mut impl Write, text: &str) -> io::Result<()> {
    out.write_all(b"---\n")?;
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// `cdtarget validate`: reports every problem on `out`, and the busy-agent warnings on `err`
/// (and with `--output json` in the report too). Returns whether the tree is valid; a warning
/// does not make it invalid.
pub fn validate_command(
    args: &SourceArgs,
    keda: KedaArgs,
    output: Output,
    out: &mut impl Write,
    err: &mut impl Write,
) -> io::Result<bool> {
    let result = load_source(args);
    let (documents, cdtargets, problems, warnings) = match &result {
        Ok((policy, set)) => {
            let warnings = warnings(set, policy, Scaling::Keda(keda.version(policy)));
            (set.documents.len(), set.cdtargets().count(), Vec::new(), warnings)
        }
        Err(problems) => (0, 0, problems.clone(), Vec::new()),
    };
    for warning in &warnings {
        writeln!(err, "warning: {warning}")?;
    }
    match output {
        Output::Text if problems.is_empty() => writeln!(out, "valid: {documents} documents, {cdtargets} CDTargets")?,
        Output::Text => {
            for problem in &problems {
                writeln!(out, "{problem}")?;
            }
        }
        Output::Json => {
            let report = serde_json::json!({
                "valid": problems.is_empty(),
                "documents": documents,
                "cdtargets": cdtargets,
                "problems": problems,
                "warnings": warnings,
            });
            writeln!(out, "{report}")?;
        }
    }
    Ok(problems.is_empty())
}

/// The CRDs, as (file name under `deploy/crds/`, YAML).
pub fn crd_documents() -> Vec<(&'static str, String)> {
    vec![
        ("cdtarget.io_cdtargets.yaml", to_yaml(&CDTarget::crd())),
        ("cdtarget.io_tenantrepositories.yaml", to_yaml(&TenantRepository::crd())),
        ("cdtarget.io_syncstatuses.yaml", to_yaml(&SyncStatus::crd())),
    ]
}

fn write_crds(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    for (file, yaml) in crd_documents() {
        fs::write(dir.join(file), yaml)?;
    }
    Ok(())
}

/// Every CRD as one multi-document YAML text.
pub fn crds_yaml() -> String {
    crd_documents().into_iter().map(|(_, yaml)| format!("---\n{yaml}")).collect()
}
