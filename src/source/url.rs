//! The parts of a repository URL the source needs: scheme, user, host and port.

use super::error::{FailureKind, SourceError, redact_userinfo};

/// A parsed `ssh://`, `https://`, `http://`, `git://` or `file://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteUrl {
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
    fn scp_like_and_unknown_schemes_are_refused_without_echoing_credentials() {
        assert!(RemoteUrl::parse("git@gitlab.example.com:a/b.git").is_err());
        let error = RemoteUrl::parse("ftp://user:secret@host/x").unwrap_err();
        assert!(!error.message.contains("secret"), "{}", error.message);
    }
}
