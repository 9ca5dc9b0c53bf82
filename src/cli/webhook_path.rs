//! `cdtarget webhook-path`: the receiver path (or full URL) of a registration, computed from its
//! token exactly as the controller computes `status.webhookPath`, for pasting into a Git host.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use crate::api::tenant_repository::webhook_path;

/// Largest token file read, in bytes.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// Flags of `cdtarget webhook-path`.
#[derive(Debug, clap::Args)]
pub struct WebhookPathArgs {
    /// Name of the TenantRepository.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Namespace of the TenantRepository (the platform namespace).
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: String,
    /// File holding the webhook Secret's `token` (`-` reads standard input). One trailing
    /// newline is removed.
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// The receiver's external base URL (e.g. `https://hooks.example.com`): print the full URL.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
}

/// Prints the path or URL on `out`, or the problem on `err`. Returns whether it printed.
pub fn webhook_path_command(
    args: &WebhookPathArgs,
    stdin: &mut impl Read,
    out: &mut impl Write,
    err: &mut impl Write,
) -> io::Result<bool> {
    match webhook_url(args, stdin) {
        Ok((url, warnings)) => {
            for warning in warnings {
                writeln!(err, "warning: {warning}")?;
            }
            writeln!(out, "{url}")?;
            Ok(true)
        }
        Err(problem) => {
            writeln!(err, "{problem}")?;
            Ok(false)
        }
    }
}

/// The path (or URL) and warnings, or the problem.
fn webhook_url(args: &WebhookPathArgs, stdin: &mut impl Read) -> Result<(String, Vec<String>), String> {
    for (flag, value) in [("--name", &args.name), ("--namespace", &args.namespace)] {
        if value.trim().is_empty() {
            return Err(format!("{flag} must not be empty"));
        }
    }
    let shown = args.token_file.display().to_string();
    let raw = read_token(args, stdin).map_err(|e| format!("{shown}: {e}"))?;
    let token = String::from_utf8(raw).map_err(|_| format!("{shown}: the token is not UTF-8"))?;
    // The same reading as the controller's, so the printed path is the served one.
    let token = crate::api::tenant_repository::webhook_token(token.as_bytes()).unwrap_or_default();
    if token.is_empty() {
        return Err(format!("{shown}: the token is empty"));
    }
    let mut warnings = Vec::new();
    if token.contains(['\r', '\n']) {
        warnings.push("the token contains a line break; GitLab removes line breaks from X-Gitlab-Token".to_owned());
    }
    let path = webhook_path(token, &args.name, &args.namespace);
    let Some(base) = &args.base_url else { return Ok((path, warnings)) };
    let base = base.trim().trim_end_matches('/');
    let host = base.strip_prefix("https://").or_else(|| base.strip_prefix("http://"));
    if host.is_none_or(|h| h.is_empty()) {
        return Err(format!(
            "--base-url `{base}`: expected an http:// or https:// URL such as https://hooks.example.com"
        ));
    }
    if base.starts_with("http://") {
        warnings.push("--base-url is plain http: the token-bearing headers cross the network unencrypted".to_owned());
    }
    Ok((format!("{base}{path}"), warnings))
}

fn read_token(args: &WebhookPathArgs, stdin: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    if args.token_file.as_os_str() == "-" {
        stdin.take(MAX_TOKEN_BYTES + 1).read_to_end(&mut bytes)?;
    } else {
        std::fs::File::open(&args.token_file)?.take(MAX_TOKEN_BYTES + 1).read_to_end(&mut bytes)?;
    }
    if bytes.len() as u64 > MAX_TOKEN_BYTES {
        return Err(io::Error::other(format!("larger than {MAX_TOKEN_BYTES} bytes; is this the token?")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(base_url: Option<&str>, stdin: &str) -> (bool, String, String) {
        let args = WebhookPathArgs {
            name: "team-a".into(),
            namespace: "platform".into(),
            token_file: "-".into(),
            base_url: base_url.map(Into::into),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ok = webhook_path_command(&args, &mut stdin.as_bytes(), &mut out, &mut err).unwrap();
        (ok, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    #[test]
    fn prints_the_status_path_and_drops_one_trailing_newline() {
        let expected = format!("{}\n", webhook_path("s3cret", "team-a", "platform"));
        assert_eq!(run(None, "s3cret\n"), (true, expected.clone(), String::new()));
        assert_eq!(run(None, "s3cret\r\n"), (true, expected.clone(), String::new()));
        assert_eq!(run(None, "s3cret"), (true, expected, String::new()));
    }

    #[test]
    fn a_base_url_gives_the_full_url() {
        let path = webhook_path("s3cret", "team-a", "platform");
        let (ok, out, _) = run(Some("https://hooks.example.com/"), "s3cret");
        assert!(ok);
        assert_eq!(out, format!("https://hooks.example.com{path}\n"));
        let (ok, out, err) = run(Some("ftp://x"), "s3cret");
        assert!(!ok && out.is_empty());
        assert!(err.contains("--base-url"), "{err}");
    }

    #[test]
    fn an_empty_token_is_refused_and_no_value_is_echoed() {
        let (ok, out, err) = run(None, "\n");
        assert!(!ok && out.is_empty());
        assert!(err.contains("the token is empty"), "{err}");
    }
}
