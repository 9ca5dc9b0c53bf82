//! `render` and `validate` of a Git URL: fetched into a scratch cache exactly as the controller
//! fetches, then read like a directory, so the output is the same for the same tree.

use std::fs;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::SourceArgs;
use crate::problem::Problem;
use crate::source::{self, Credentials, Limits, Progress, Reference, Request};

/// Whether `source` names a Git URL rather than a directory.
pub fn is_url(source: &str) -> bool {
    ["ssh://", "https://", "http://", "git://", "file://"].iter().any(|scheme| source.starts_with(scheme))
}

/// A scratch cache directory, removed on drop.
pub struct Checkout(PathBuf);

impl Drop for Checkout {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Fetches the URL of `args`; returns the scratch cache and the manifests directory inside it.
pub fn fetch(args: &SourceArgs) -> Result<(Checkout, PathBuf, String), Problem> {
    let request = request(args)?;
    let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let checkout = Checkout(std::env::temp_dir().join(format!("cdtarget-{}-{unique}", std::process::id())));
    let limits = Limits { timeout: args.timeout, ..Limits::default() };
    source::set_io_timeout(limits.timeout);

    let mut indicator = ProgressLine::new();
    let report: Option<&mut dyn FnMut(&Progress)> =
        if std::io::stderr().is_terminal() { Some(&mut |p: &Progress| indicator.show(p)) } else { None };
    let fetched = source::fetch_blocking(&checkout.0, &request, &limits, report);
    indicator.finish();
    let fetched =
        fetched.map_err(|e| Problem::field("", e.to_string()).located(&shown_url(&args.source), None, None))?;
    let snapshot = fetched.snapshot();
    snapshot
        .dir(args.path.as_deref())
        .map_err(|e| Problem::field("", e.to_string()).located(&shown_url(&args.source), None, None))?;
    // The checkout is the boundary of kustomize builds, as in the controller.
    let synced = source::path_components(args.path.as_deref().unwrap_or_default()).unwrap_or_default().join("/");
    Ok((checkout, snapshot.root.clone(), synced))
}

fn shown_url(url: &str) -> String {
    crate::text::redact_userinfo(url)
}

fn request(args: &SourceArgs) -> Result<Request, Problem> {
    let read = |path: &Path, what: &str| -> Result<String, Problem> {
        let text = if path == Path::new("-") {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        } else {
            fs::read_to_string(path)
        };
        text.map_err(|e| {
            Problem::field("", format!("cannot read {what}: {e}")).located(&path.display().to_string(), None, None)
        })
    };
    let credentials = match (&args.ssh_key, &args.token_file) {
        (Some(_), Some(_)) => {
            return Err(Problem::field("", "give either --ssh-key or --token-file, not both"));
        }
        (Some(key), None) => Credentials::Ssh {
            private_key: read(key, "the SSH key")?,
            passphrase: match &args.ssh_key_passphrase_file {
                Some(file) => Some(read(file, "the passphrase")?.trim_end_matches(['\r', '\n']).to_owned()),
                None => None,
            },
            known_hosts: match &args.known_hosts {
                Some(file) => read(file, "known_hosts")?,
                None => {
                    return Err(Problem::field(
                        "",
                        "--ssh-key needs --known-hosts: the server's host key is always checked",
                    ));
                }
            },
        },
        (None, Some(token)) => Credentials::token(&read(token, "the token")?),
        (None, None) => Credentials::None,
    };
    let ca_bundle = match &args.ca_file {
        Some(file) => Some(read(file, "the CA bundle")?),
        None => None,
    };
    Ok(Request { url: args.source.clone(), reference: Reference::from_name(&args.git_ref), credentials, ca_bundle })
}

/// "Receiving objects: 45% (450/1000), 1.2 MiB" on one line of a terminal, redrawn at most ten
/// times a second.
struct ProgressLine {
    shown: bool,
    last: Option<Instant>,
}

impl ProgressLine {
    fn new() -> Self {
        ProgressLine { shown: false, last: None }
    }

    fn show(&mut self, progress: &Progress) {
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) {
            return;
        }
        self.last = Some(Instant::now());
        self.shown = true;
        let percent = (progress.received_objects * 100).checked_div(progress.total_objects).unwrap_or(0);
        let mib = progress.received_bytes as f64 / (1024.0 * 1024.0);
        eprint!(
            "\rReceiving objects: {percent:3}% ({}/{}), {mib:.1} MiB",
            progress.received_objects, progress.total_objects
        );
    }

    fn finish(&mut self) {
        if self.shown {
            eprintln!();
        }
    }
}
