//! `cdtarget gitlab-sync`: the controller's GitLab plan and executor, once, for onboarding
//! scripts and debugging. `--dry-run` reads and prints the plan; `--delete` removes.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::api::TenantRepository;
use crate::error::Reason;
use crate::gitlab::{self, ClientConfig, ErrorKind, GitLabClient, GitLabError, Secret, SyncInput};

/// Largest registration or public key file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Arguments of `gitlab-sync`.
#[derive(Debug, clap::Args)]
pub struct GitLabSyncArgs {
    /// The TenantRepository (YAML, as `kubectl get -o yaml` prints it); its `status.gitlab`, when
    /// present, gives the known ids.
    #[arg(long, value_name = "FILE")]
    pub registration: PathBuf,
    /// The GitLab instance, e.g. `https://gitlab.example.com`.
    #[arg(long, value_name = "URL")]
    pub gitlab_url: String,
    /// File holding the bot's access token (scope `api`, Maintainer of the project).
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// The deploy key's public half (`identity.pub`, one OpenSSH line).
    #[arg(long, value_name = "FILE")]
    pub ssh_public_key: PathBuf,
    /// File holding the registration's webhook token.
    #[arg(long, value_name = "FILE")]
    pub webhook_token_file: PathBuf,
    /// Base URL under which the receiver is reachable from GitLab, e.g. `https://cd.example.com`.
    #[arg(long, value_name = "URL")]
    pub webhook_external_url: String,
    /// Print the calls that would be made; send nothing but reads.
    #[arg(long)]
    pub dry_run: bool,
    /// Remove the deploy key and the webhook instead (what deleting the registration does).
    #[arg(long)]
    pub delete: bool,
}

/// Runs the command: 0 done, 1 GitLab refused or failed, 2 bad arguments or files.
pub fn main(args: &GitLabSyncArgs) -> ExitCode {
    let stdout = io::stdout();
    let stderr = io::stderr();
    run(args, &mut stdout.lock(), &mut stderr.lock())
}

/// [`main`] with the output streams given.
pub fn run(args: &GitLabSyncArgs, out: &mut impl Write, err: &mut impl Write) -> ExitCode {
    let result = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(execute(args, out)),
        Err(e) => Err(GitLabError::new(ErrorKind::InvalidConfig, format!("cannot start the runtime: {e}"))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(err, "cdtarget gitlab-sync: {}: {error}", error.reason());
            match error.kind {
                ErrorKind::InvalidConfig => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

async fn execute(args: &GitLabSyncArgs, out: &mut impl Write) -> Result<(), GitLabError> {
    // reqwest picks aws-lc-rs by itself; installing it keeps the process on one provider.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let registration = read_registration(&args.registration)?;
    let public_key = read_text(&args.ssh_public_key, "--ssh-public-key")?;
    let webhook_token = Secret::from_file(&args.webhook_token_file, "--webhook-token-file")?;
    let token = Secret::from_file(&args.token_file, "--token-file")?;
    let input = SyncInput::for_registration(&registration, &public_key, &webhook_token, &args.webhook_external_url)?;
    let client = GitLabClient::new(ClientConfig::new(args.gitlab_url.clone(), token))?;
    let write = |out: &mut dyn Write, text: &str| {
        out.write_all(text.as_bytes()).map_err(|e| GitLabError::new(ErrorKind::InvalidConfig, format!("stdout: {e}")))
    };
    match (args.dry_run, args.delete) {
        (true, false) => {
            let plan = gitlab::plan_sync(&client, &input).await?;
            write(out, &format!("dry run, nothing sent but reads:\n{plan}"))
        }
        (true, true) => {
            let plan = gitlab::plan_removal(&client, &input).await?;
            write(out, &format!("dry run, nothing sent but reads:\n{plan}"))
        }
        (false, false) => {
            let outcome = gitlab::sync(&client, &input).await?;
            write(out, &format!("{}synced: {}\n", outcome.plan, outcome.message()))
        }
        (false, true) => {
            let outcome = gitlab::remove(&client, &input).await?;
            let plan = if outcome.plan.is_empty() { String::new() } else { outcome.plan.to_string() };
            write(
                out,
                &format!(
                    "{plan}removed: nothing of {} left on project {} ({} removals sent)\n",
                    input.desired.ownership.marker, input.project.path, outcome.writes
                ),
            )
        }
    }
}

fn read_text(path: &Path, flag: &str) -> Result<String, GitLabError> {
    let invalid = |why: String| GitLabError::new(ErrorKind::InvalidConfig, format!("{flag} {}: {why}", path.display()));
    let size = std::fs::metadata(path).map_err(|e| invalid(format!("cannot read it: {e}")))?.len();
    if size > MAX_FILE_BYTES {
        return Err(invalid(format!("is {size} bytes; at most {MAX_FILE_BYTES} are read")));
    }
    std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read it: {e}")))
}

fn read_registration(path: &Path) -> Result<TenantRepository, GitLabError> {
    let text = read_text(path, "--registration")?;
    let invalid =
        |why: String| GitLabError::new(ErrorKind::InvalidConfig, format!("--registration {}: {why}", path.display()));
    let value = crate::yaml::parse_one(&text).map_err(|e| {
        invalid(format!("line {}: {}", e.line.map(|l| l.to_string()).unwrap_or_else(|| "?".into()), e.message))
    })?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
    if kind != "TenantRepository" {
        return Err(invalid(format!("kind is `{kind}`; expected a TenantRepository (cdtarget.io/v1alpha1)")));
    }
    serde_json::from_value(value).map_err(|e| invalid(format!("not a valid TenantRepository: {e}")))
}
