//! What a registration asks the source for, read from its spec and its credentials Secret: the
//! ref to check out, how often and how long to fetch, and the Git credentials (Flux's key names).
//! Pure functions over the registration; the TenantRepository reconciler and the webhook
//! receiver's ref filter read a registration the same way through them.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;

use super::{Credentials, Reference};
use crate::api::tenant_repository::TenantRepositorySpec;

/// The poll interval when `spec.interval` is not set.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// What to check out: exactly one of `branch`, `tag` or `commit`; the branch `main` by default.
pub fn reference_of(spec: &TenantRepositorySpec) -> Result<Reference, String> {
    let Some(git_ref) = &spec.git_ref else { return Ok(Reference::Branch("main".into())) };
    let given = |value: &Option<String>| value.as_deref().filter(|v| !v.is_empty()).map(str::to_owned);
    match (given(&git_ref.branch), given(&git_ref.tag), given(&git_ref.commit)) {
        (None, None, None) => Ok(Reference::Branch("main".into())),
        (Some(branch), None, None) => Ok(Reference::Branch(branch)),
        (None, Some(tag), None) => Ok(Reference::Tag(tag)),
        (None, None, Some(commit)) if commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Reference::Commit(commit.to_ascii_lowercase()))
        }
        (None, None, Some(_)) => Err("spec.ref.commit: expected a full 40-character commit SHA".into()),
        _ => Err("spec.ref: set exactly one of branch, tag or commit".into()),
    }
}

/// `spec.interval` as a duration (`DEFAULT_INTERVAL` when absent).
pub fn interval_of(spec: &TenantRepositorySpec) -> Result<Duration, String> {
    match spec.interval.as_deref() {
        None | Some("") => Ok(DEFAULT_INTERVAL),
        Some(text) => match parse_go_duration(text) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(format!("spec.interval: `{text}` is not a positive duration such as `30s`, `5m` or `1h30m`")),
        },
    }
}

/// `spec.timeout`: the bound on one fetch of this registration; `None` leaves the controller's
/// `--git-timeout`.
pub fn timeout_of(spec: &TenantRepositorySpec) -> Result<Option<Duration>, String> {
    match spec.timeout.as_deref() {
        None | Some("") => Ok(None),
        Some(text) => match parse_go_duration(text) {
            Some(d) if !d.is_zero() => Ok(Some(d)),
            _ => Err(format!("spec.timeout: `{text}` is not a positive duration such as `30s`, `2m` or `1m30s`")),
        },
    }
}

/// Parses a Go duration made of `<number><unit>` parts, units `ms`, `s`, `m`, `h`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let (seconds, unit_len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            return None;
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A timeout given on the command line (`--timeout`, `--git-timeout`): a positive Go duration
/// (`90s`, `5m`, `1h30m`) or, as these flags took before, a whole number of seconds (`60`).
pub(crate) fn parse_timeout(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let parsed = match trimmed.parse::<u64>() {
        Ok(seconds) => Some(Duration::from_secs(seconds)),
        Err(_) => parse_go_duration(trimmed),
    };
    parsed.filter(|timeout| !timeout.is_zero()).ok_or_else(|| {
        format!("`{text}` is not a positive duration such as `90s`, `5m` or `1h30m` (or a number of seconds)")
    })
}

/// Git credentials from a Secret with Flux's key names: `identity` (SSH private key, with
/// optional `identity.passphrase`) and `known_hosts`; or `username` and `password`; or
/// `bearerToken`; and an optional `ca.crt` for HTTPS. A Secret with none of them means no
/// credentials. Messages name the missing or unreadable keys, never a value.
pub fn credentials_from_secret(data: &BTreeMap<String, ByteString>) -> Result<(Credentials, Option<String>), String> {
    let text = |key: &str| -> Result<Option<String>, String> {
        match data.get(key) {
            None => Ok(None),
            Some(value) if value.0.is_empty() => Ok(None),
            Some(value) => String::from_utf8(value.0.clone())
                .map(Some)
                .map_err(|_| format!("key `{key}` of the Secret is not UTF-8 text")),
        }
    };
    let ca_bundle = text("ca.crt")?;
    let credentials = if let Some(private_key) = text("identity")? {
        let known_hosts = text("known_hosts")?.ok_or_else(|| {
            "the Secret has `identity` but no `known_hosts`: add the server's host keys (ssh-keyscan), there is no trust on first use"
                .to_owned()
        })?;
        Credentials::Ssh { private_key, passphrase: text("identity.passphrase")?, known_hosts }
    } else if let Some(username) = text("username")? {
        let password = text("password")?
            .ok_or_else(|| "the Secret has `username` but no `password` (or token) beside it".to_owned())?;
        Credentials::Basic { username, password }
    } else if text("password")?.is_some() {
        return Err("the Secret has `password` but no `username` beside it".into());
    } else if let Some(token) = text("bearerToken")? {
        Credentials::token(&token)
    } else if text("known_hosts")?.is_some() || text("identity.passphrase")?.is_some() {
        return Err("the Secret has SSH settings but no `identity` (the private key)".into());
    } else {
        Credentials::None
    };
    Ok((credentials, ca_bundle))
}

#[cfg(test)]
mod tests {
    use crate::api::tenant_repository::GitRef;

    use super::*;

    fn bytes(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect()
    }

    #[test]
    fn ssh_secret_needs_known_hosts_and_the_message_holds_no_value() {
        let error = credentials_from_secret(&bytes(&[("identity", "PRIVATE-KEY-MATERIAL")])).unwrap_err();
        assert!(error.contains("known_hosts") && !error.contains("PRIVATE"), "{error}");
        let (credentials, ca) =
            credentials_from_secret(&bytes(&[("identity", "k"), ("known_hosts", "h"), ("ca.crt", "pem")])).unwrap();
        assert!(matches!(credentials, Credentials::Ssh { passphrase: None, .. }));
        assert_eq!(ca.as_deref(), Some("pem"));
    }

    #[test]
    fn https_secrets_take_basic_or_bearer_credentials() {
        let (basic, _) = credentials_from_secret(&bytes(&[("username", "u"), ("password", "p")])).unwrap();
        assert_eq!(basic, Credentials::Basic { username: "u".into(), password: "p".into() });
        let (token, _) = credentials_from_secret(&bytes(&[("bearerToken", "glpat-x")])).unwrap();
        assert_eq!(token, Credentials::token("glpat-x"));
        assert!(credentials_from_secret(&bytes(&[("username", "u")])).unwrap_err().contains("password"));
        assert_eq!(credentials_from_secret(&bytes(&[])).unwrap().0, Credentials::None);
    }

    #[test]
    fn reference_is_exactly_one_of_branch_tag_or_commit() {
        let mut spec = TenantRepositorySpec::default();
        assert_eq!(reference_of(&spec), Ok(Reference::Branch("main".into())));
        spec.git_ref = Some(GitRef { tag: Some("v1".into()), ..GitRef::default() });
        assert_eq!(reference_of(&spec), Ok(Reference::Tag("v1".into())));
        spec.git_ref = Some(GitRef { branch: Some("a".into()), tag: Some("v1".into()), commit: None });
        assert!(reference_of(&spec).unwrap_err().contains("exactly one"));
        spec.git_ref = Some(GitRef { commit: Some("abc".into()), ..GitRef::default() });
        assert!(reference_of(&spec).is_err());
    }

    #[test]
    fn go_durations_are_parsed() {
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration("5d"), None);
    }

    #[test]
    fn a_command_line_timeout_is_a_positive_duration_or_a_number_of_seconds() {
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_timeout("60"), Ok(Duration::from_secs(60)), "the flags' former form");
        for refused in ["0", "0s", "soon", "-5s", ""] {
            let error = parse_timeout(refused).expect_err(refused);
            assert!(error.contains("not a positive duration such as `90s`"), "{error}");
        }
    }

    #[test]
    fn timeout_is_optional_and_must_be_a_positive_duration() {
        let mut spec = TenantRepositorySpec::default();
        assert_eq!(timeout_of(&spec), Ok(None));
        spec.timeout = Some("1m30s".into());
        assert_eq!(timeout_of(&spec), Ok(Some(Duration::from_secs(90))));
        for bad in ["0s", "soon", "-5s"] {
            spec.timeout = Some(bad.into());
            let error = timeout_of(&spec).unwrap_err();
            assert!(error.starts_with("spec.timeout: `") && error.contains("30s"), "{error}");
        }
    }
}
