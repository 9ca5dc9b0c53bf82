//! URLs a tenant sets that the agent or KEDA call with the tenant's personal access token
//! (`config.url`, `triggerMeta.organizationURL`): https only, no credentials in the URL, a host
//! on the policy's allow-list, a literal address only when the list names it and never in a
//! forbidden range.
//!
//! URLs are parsed with the `url` crate (WHATWG), and a URL is accepted only when it is already
//! in the form that parser writes back. The agent (.NET) and KEDA (Go) parse the text again with
//! their own parsers; a URL that is already canonical leaves no room for them to read another
//! host than the one checked here (percent-encoded hosts, backslashes, numeric IPv4 forms,
//! whitespace, upper case and default ports are all rewritten, hence refused).

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use url::{Host, Url};

use super::address::{self, Rules, Use};
use crate::text::redact_url_userinfo;

/// The longest URL accepted.
pub(crate) const MAX_URL_LEN: usize = crate::api::cdtarget::limits::URL_BYTES;

/// One entry of the policy's `agents.allowedUrlHosts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this host name (lower case, ASCII: IDNs in their `xn--` form).
    Exact(String),
    /// `*.suffix`: one DNS label, any, followed by `.suffix`. Neither `suffix` itself nor a
    /// host with more labels before it matches (as a wildcard in a TLS certificate).
    Wildcard(String),
    /// Literal addresses in this network (an address is a `/32` or `/128`).
    Network(IpNet),
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(host) => f.write_str(host),
            HostPattern::Wildcard(suffix) => write!(f, "*.{suffix}"),
            HostPattern::Network(net) if net.prefix_len() == net.max_prefix_len() => write!(f, "{}", net.addr()),
            HostPattern::Network(net) => write!(f, "{net}"),
        }
    }
}

impl HostPattern {
    /// Parses an allow-list entry: `dev.azure.com`, `*.visualstudio.com`, `10.1.2.3` or
    /// `10.1.0.0/16`.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let address_part = text.split_once('/').map_or(text, |(address, _)| address);
        if address_part.parse::<IpAddr>().is_ok() {
            let net = address::check(text, Use::PlatformTarget, &Rules::SPELLING_ONLY)?;
            return Ok(HostPattern::Network(net));
        }
        let (wildcard, name) = match text.strip_prefix("*.") {
            Some(suffix) => (true, suffix),
            None => (false, text),
        };
        let labels: Vec<&str> = name.split('.').collect();
        let valid_label = |label: &&str| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if name.len() > 253 || !labels.iter().all(valid_label) {
            return Err(format!(
                "`{text}` is not a host name pattern; expected a lower-case host name such as `dev.azure.com`, `*.` and a host name such as `*.visualstudio.com` (IDNs in their xn-- form), or an IP address or CIDR"
            ));
        }
        if wildcard && labels.len() < 2 {
            return Err(format!(
                "`{text}` is too broad; a wildcard needs at least two labels after `*.`, such as `*.visualstudio.com`"
            ));
        }
        Ok(if wildcard { HostPattern::Wildcard(name.to_owned()) } else { HostPattern::Exact(name.to_owned()) })
    }

    fn matches_domain(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => host == name,
            HostPattern::Wildcard(suffix) => host
                .strip_suffix(suffix.as_str())
                .and_then(|rest| rest.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            HostPattern::Network(_) => false,
        }
    }

    fn matches_address(&self, addr: &IpNet) -> bool {
        matches!(self, HostPattern::Network(net) if net.contains(addr))
    }
}

/// Checks a URL the agent or KEDA will call with the tenant's token. `allowed` is the policy's
/// host allow-list, `rules` its address rules (for a literal address as host). The error quotes
/// the URL with any user info replaced by `***`, and never more than [`MAX_URL_LEN`] bytes of it.
pub fn check_url(text: &str, allowed: &[HostPattern], rules: &Rules<'_>) -> Result<Url, String> {
    const EXAMPLE: &str = "e.g. `https://dev.azure.com/acme`";
    if text.len() > MAX_URL_LEN {
        return Err(format!("is {} bytes long; a URL here has at most {MAX_URL_LEN}", text.len()));
    }
    let shown = redact_url_userinfo(text);
    let url = Url::parse(text).map_err(|_| format!("`{shown}` is not an https URL; expected {EXAMPLE}"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "`{shown}` is not an https URL; the token is sent to it, so only https:// is accepted, {EXAMPLE}"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{shown}` carries user info (before '@'); remove it: the token comes from tokenRef, never from the URL"
        ));
    }
    let list = || {
        if allowed.is_empty() {
            "none (agents.allowedUrlHosts is empty)".to_owned()
        } else {
            allowed.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        }
    };
    match url.host() {
        Some(Host::Domain(host)) => {
            if !allowed.iter().any(|p| p.matches_domain(host)) {
                return Err(format!("`{shown}`: host `{host}` is not allowed; the platform policy allows: {}", list()));
            }
        }
        Some(Host::Ipv4(addr)) => check_literal(&shown, IpAddr::V4(addr), allowed, rules, list)?,
        Some(Host::Ipv6(addr)) => check_literal(&shown, IpAddr::V6(addr), allowed, rules, list)?,
        None => return Err(format!("`{shown}` has no host; expected {EXAMPLE}")),
    }
    // What the agent and KEDA parse must be what was checked: only the canonical text passes.
    let canonical = url.as_str();
    let same = canonical == text || (url.path() == "/" && canonical.strip_suffix('/') == Some(text));
    if !same {
        let instead = if url.path() == "/" { canonical.trim_end_matches('/') } else { canonical };
        return Err(format!("`{shown}` is not written in canonical form; write `{instead}`"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("`{shown}` has a query or fragment; expected the organization URL alone, {EXAMPLE}"));
    }
    if text.ends_with('/') {
        return Err(format!(
            "`{shown}` ends with '/'; KEDA takes the organization from the last path segment, write `{}`",
            text.trim_end_matches('/')
        ));
    }
    Ok(url)
}

fn check_literal(
    shown: &str,
    addr: IpAddr,
    allowed: &[HostPattern],
    rules: &Rules<'_>,
    list: impl Fn() -> String,
) -> Result<(), String> {
    let checked = address::check(&addr.to_string(), Use::UrlHost, rules).map_err(|e| format!("`{shown}`: {e}"))?;
    if !allowed.iter().any(|p| p.matches_address(&checked)) {
        return Err(format!(
            "`{shown}`: the literal address {} is not allowed as a host; use the service's host name (the platform policy allows: {})",
            checked.addr(),
            list()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn azure() -> Vec<HostPattern> {
        ["dev.azure.com", "*.visualstudio.com"].iter().map(|p| HostPattern::parse(p).unwrap()).collect()
    }

    #[test]
    fn organization_urls_of_azure_devops_pass() {
        for url in ["https://dev.azure.com/acme", "https://acme.visualstudio.com", "https://dev.azure.com/my%20org"] {
            check_url(url, &azure(), &Rules::SPELLING_ONLY).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn wildcards_match_exactly_one_label() {
        let allowed = azure();
        for url in ["https://visualstudio.com", "https://a.b.visualstudio.com", "https://evilvisualstudio.com"] {
            let e = check_url(url, &allowed, &Rules::SPELLING_ONLY).unwrap_err();
            assert!(e.contains("is not allowed"), "{url}: {e}");
        }
        assert!(HostPattern::parse("*.com").is_err());
        assert!(HostPattern::parse("*").is_err());
        assert!(HostPattern::parse("Dev.Azure.com").is_err());
    }

    #[test]
    fn parser_tricks_are_refused_as_not_canonical() {
        let allowed = azure();
        for url in [
            "https://dev.azure.com:443/acme",
            "https://DEV.azure.com/acme",
            "https://dev%2eazure.com/acme",
            "https:\\\\dev.azure.com/acme",
            "https://dev.azure.com/a/../acme",
            "https://dev.azure.com/ac me",
            " https://dev.azure.com/acme",
        ] {
            let e = check_url(url, &allowed, &Rules::SPELLING_ONLY).unwrap_err();
            assert!(e.contains("canonical form"), "{url}: {e}");
        }
    }

    #[test]
    fn user_info_is_never_repeated() {
        let e = check_url("https://user:s3cret@dev.azure.com/acme", &azure(), &Rules::SPELLING_ONLY).unwrap_err();
        assert!(!e.contains("s3cret") && !e.contains("user:"), "{e}");
    }
}
