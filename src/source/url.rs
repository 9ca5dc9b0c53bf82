//! The parts of a repository URL the source needs: scheme, user, host and port.

use super::error::{FailureKind, SourceError};
use crate::text::redact_userinfo;

/// A parsed `ssh://`, `https://`, `http://`, `git://` or `file://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RemoteUrl {
    /// `ssh`, `https`, `http`, `git` or `file`.
    pub scheme: String,
    /// The user of `ssh://user@host`, if given.
    pub user: Option<String>,
    /// Host name or address (without brackets for IPv6); empty for `file://`.
    pub host: String,
    /// The port, or the scheme's default.
    pub port: u16,
    url: String,
}

impl RemoteUrl {
    /// Parses `url`; anything but the five schemes is refused (scp-like `git@host:path` cannot
    /// carry a port and is refused too: write `ssh://git@host/path`).
    pub fn parse(url: &str) -> Result<Self, SourceError> {
        let invalid = |why: &str| {
            SourceError::new(
                FailureKind::InvalidRequest,
                format!("`{}` {why}; expected ssh://, https://, http://, git:// or file:// URLs", redact_userinfo(url)),
            )
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("is not a URL"))?;
        let default_port = match scheme {
            "ssh" => 22,
            "https" => 443,
            "http" => 80,
            "git" => 9418,
            "file" => 0,
            _ => return Err(invalid("has an unsupported scheme")),
        };
        if scheme == "file" {
            return Ok(RemoteUrl { scheme: scheme.into(), user: None, host: String::new(), port: 0, url: url.into() });
        }
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        let (user, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo.split(':').next().unwrap_or_default().to_owned()), host),
            None => (None, authority),
        };
        let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']').ok_or_else(|| invalid("has an unclosed IPv6 bracket"))?;
            (host, after.strip_prefix(':'))
        } else {
            match host_port.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (host_port, None),
            }
        };
        let port = match port {
            None | Some("") => default_port,
            Some(p) => p.parse().map_err(|_| invalid("has an invalid port"))?,
        };
        if host.is_empty() {
            return Err(invalid("has no host"));
        }
        Ok(RemoteUrl { scheme: scheme.into(), user, host: host.into(), port, url: url.into() })
    }

    /// The URL for messages, without credentials.
    pub fn display(&self) -> String {
        redact_userinfo(&self.url)
    }

    /// `scheme://host:port`, for messages about where a server sent us.
    pub fn origin(&self) -> String {
        if self.host.contains(':') {
            format!("{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            format!("{}://{}:{}", self.scheme, self.host, self.port)
        }
    }

    /// Whether `other` has the same scheme, host (ignoring case) and port: the origin that
    /// credentials belong to.
    pub fn same_origin(&self, other: &RemoteUrl) -> bool {
        self.scheme.eq_ignore_ascii_case(&other.scheme)
            && self.host.eq_ignore_ascii_case(&other.host)
            && self.port == other.port
    }
}

/// The secret parts of a URL's userinfo (`user:password@`), raw and percent-decoded, so that no
/// message can carry them even where a library quotes the URL in its own way.
pub(crate) fn userinfo_secrets(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else { return Vec::new() };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some((userinfo, _)) = authority.rsplit_once('@') else { return Vec::new() };
    let mut secrets = vec![userinfo.to_owned()];
    for part in userinfo.split(':') {
        secrets.push(part.to_owned());
        secrets.push(percent_decoded(part));
    }
    secrets.retain(|s| !s.is_empty());
    secrets.sort();
    secrets.dedup();
    secrets
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_url_with_user_and_port() {
        let url = RemoteUrl::parse("ssh://git@127.0.0.1:2222/srv/repo.git").unwrap();
        assert_eq!(
            (url.scheme.as_str(), url.user.as_deref(), url.host.as_str(), url.port),
            ("ssh", Some("git"), "127.0.0.1", 2222)
        );
    }

    #[test]
    fn defaults_and_ipv6() {
        assert_eq!(RemoteUrl::parse("https://gitlab.example.com/a/b.git").unwrap().port, 443);
        let v6 = RemoteUrl::parse("git://[::1]:9000/x").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9000));
    }

    #[test]
    fn origins_differ_by_scheme_host_or_port() {
        let origin = RemoteUrl::parse("https://GitLab.example.com/a/b.git").unwrap();
        assert!(origin.same_origin(&RemoteUrl::parse("https://gitlab.example.com:443/c.git").unwrap()));
        assert!(!origin.same_origin(&RemoteUrl::parse("https://gitlab.example.com:8443/a/b.git").unwrap()));
        assert!(!origin.same_origin(&RemoteUrl::parse("http://gitlab.example.com/a/b.git").unwrap()));
        assert!(!origin.same_origin(&RemoteUrl::parse("https://evil.example.com/a/b.git").unwrap()));
        assert_eq!(origin.origin(), "https://GitLab.example.com:443");
    }

    #[test]
    fn userinfo_secrets_cover_raw_and_decoded_forms() {
        let secrets = userinfo_secrets("https://oauth2:glpat%2Dsecret@host/x?y=a@b");
        assert!(secrets.contains(&"oauth2:glpat%2Dsecret".to_owned()), "{secrets:?}");
        assert!(secrets.contains(&"glpat%2Dsecret".to_owned()), "{secrets:?}");
        assert!(secrets.contains(&"glpat-secret".to_owned()), "{secrets:?}");
        assert!(userinfo_secrets("https://host/x").is_empty());
        assert!(userinfo_secrets("not a url").is_empty());
    }

    #[test]
    fn scp_like_and_unknown_schemes_are_refused_without_echoing_credentials() {
        assert!(RemoteUrl::parse("git@gitlab.example.com:a/b.git").is_err());
        let error = RemoteUrl::parse("ftp://user:secret@host/x").unwrap_err();
        assert!(!error.message.contains("secret"), "{}", error.message);
    }
}
