//! The one check every address that becomes an `ipBlock` (or a resolver the agents query) goes
//! through: a CDTarget's `ip` entries and `dnsConfig.nameservers`, a literal address as the host
//! of a tenant URL, and the policy's own platform targets.
//!
//! An address has one accepted spelling. IPv6 forms that carry an IPv4 address — IPv4-mapped
//! (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) — are refused, naming the IPv4 form to
//! write; but the policy's rules are applied to that IPv4 form first, so
//! `::ffff:169.254.169.254` is reported as forbidden, not as a spelling to fix. IPv6 networks that
//! contain either range are refused outright (the CNI would match their IPv4 traffic), and so is
//! anything overlapping one of the policy's NAT64 prefixes (a translator reaches every IPv4
//! address through them).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::cidr;

/// The IPv4-mapped range `::ffff:0:0/96` (RFC 4291 §2.5.5.2): a socket sends IPv4 to these.
pub const IPV4_MAPPED: Ipv6Net = match Ipv6Net::new(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) {
    Ok(net) => net,
    Err(_) => panic!("a valid prefix"),
};

/// The deprecated IPv4-compatible range `::/96` (RFC 4291 §2.5.5.1).
pub const IPV4_COMPATIBLE: Ipv6Net = match Ipv6Net::new(Ipv6Addr::UNSPECIFIED, 96) {
    Ok(net) => net,
    Err(_) => panic!("a valid prefix"),
};

/// The longest address text accepted (an expanded IPv6 CIDR with a dotted tail is 49).
pub const MAX_TEXT_LEN: usize = crate::api::cdtarget::limits::IP_ENTRY_BYTES;

/// What an address is for; it decides which of the policy's rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Use {
    /// A CDTarget `ip` entry: an address or a network.
    Destination,
    /// A CDTarget `dnsConfig.nameservers` entry: a single address.
    Nameserver,
    /// A literal address as the host of a URL a tenant sets: a single address.
    UrlHost,
    /// One of the policy's `platformTargets`: the admins' own, so only the spelling rules and
    /// "never every address" apply, not the tenant limits.
    PlatformTarget,
}

/// The policy's rules for addresses, borrowed from a [`super::Policy`]
/// ([`super::Policy::address_rules`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules<'a> {
    /// Broadest IPv4 prefix of a destination.
    pub min_prefix_v4: u8,
    /// Broadest IPv6 prefix of a destination.
    pub min_prefix_v6: u8,
    /// Ranges no tenant address may overlap.
    pub forbidden: &'a [IpNet],
    /// NAT64 prefixes no tenant address may overlap.
    pub nat64_prefixes: &'a [IpNet],
}

impl Rules<'_> {
    /// Rules that refuse only what is never accepted: the spelling rules and `/0`.
    pub const SPELLING_ONLY: Rules<'static> =
        Rules { min_prefix_v4: 0, min_prefix_v6: 0, forbidden: &[], nat64_prefixes: &[] };
}

/// How an address was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spelling {
    /// In its own family.
    Plain,
    /// As IPv4-mapped IPv6.
    Mapped,
    /// As IPv4-compatible IPv6.
    Compatible,
}

impl Spelling {
    fn describe(self) -> &'static str {
        match self {
            Spelling::Plain => "",
            Spelling::Mapped => "IPv4-mapped IPv6",
            Spelling::Compatible => "IPv4-compatible IPv6",
        }
    }
}

/// Checks `text` for `purpose` under `rules` and returns the network in canonical form (a bare
/// address as `/32` or `/128`). The error is one sentence saying what is wrong and what would be
/// accepted; it quotes `text` only when it is short (never more than [`MAX_TEXT_LEN`] bytes).
pub fn check(text: &str, purpose: Use, rules: &Rules<'_>) -> Result<IpNet, String> {
    if text.len() > MAX_TEXT_LEN {
        return Err(format!(
            "is {} characters long; an address or CIDR has at most {MAX_TEXT_LEN}",
            text.chars().count()
        ));
    }
    let written = parse(text, purpose)?;
    let form = canonical_form(text, &written)?;
    let (net, spelling) = match form {
        Form::Embedded(v4, spelling) => (v4, spelling),
        Form::Plain | Form::Contains(..) => (written, Spelling::Plain),
    };
    let quoted = match spelling {
        Spelling::Plain => format!("`{text}`"),
        _ => format!("`{text}` ({} for {})", spelling.describe(), written_like(text, &net)),
    };

    if matches!(purpose, Use::Destination | Use::PlatformTarget) && cidr::is_everything(&net) {
        return Err(match purpose {
            Use::PlatformTarget => format!("{quoted} is every address; platform targets name specific networks"),
            _ => format!("{quoted} is every address; name the destinations the agents need"),
        });
    }
    if purpose == Use::Destination {
        let (family, minimum) = match net {
            IpNet::V4(_) => ("IPv4", rules.min_prefix_v4),
            IpNet::V6(_) => ("IPv6", rules.min_prefix_v6),
        };
        if net.prefix_len() < minimum {
            return Err(format!(
                "{quoted} is broader than the policy allows; {family} destinations need a prefix of /{minimum} or longer"
            ));
        }
    }
    if let Form::Contains(range, spelling) = form {
        return Err(format!(
            "`{text}` contains the {} range {range}, whose addresses reach IPv4 destinations; IPv6 networks must not contain it, write IPv4 destinations as IPv4",
            spelling.describe()
        ));
    }
    if purpose != Use::PlatformTarget
        && let Some(forbidden) = rules.forbidden.iter().find(|f| cidr::overlaps(&net, f))
    {
        return Err(match purpose {
            Use::Destination => {
                format!("{quoted} overlaps the forbidden range {forbidden}; choose a destination outside it")
            }
            Use::Nameserver => format!("{quoted} is in the forbidden range {forbidden}; choose another nameserver"),
            _ => format!("{quoted} is in the forbidden range {forbidden}; use the service's host name"),
        });
    }
    if spelling != Spelling::Plain {
        return Err(format!(
            "`{text}` is an {} address; write the IPv4 form `{}` instead",
            spelling.describe(),
            written_like(text, &net)
        ));
    }
    if purpose != Use::PlatformTarget
        && let Some(prefix) = rules.nat64_prefixes.iter().find(|p| cidr::overlaps(&net, p))
    {
        let embedded = nat64_embedded(&net, prefix).map_or(String::new(), |v4| format!(" (here {v4})"));
        return Err(format!(
            "`{text}` overlaps the NAT64 prefix {prefix}: through the translator it reaches IPv4 addresses{embedded}, the forbidden ones included; write IPv4 destinations as IPv4 (the policy lists NAT64 prefixes in egress.nat64Prefixes)"
        ));
    }
    Ok(net)
}

/// Syntax: a single address for nameservers and URL hosts, an address or CIDR otherwise.
fn parse(text: &str, purpose: Use) -> Result<IpNet, String> {
    match purpose {
        Use::Nameserver => IpAddr::from_str(text)
            .map(IpNet::from)
            .map_err(|_| format!("`{text}` is not an IP address; expected e.g. `10.0.0.10`")),
        Use::UrlHost => IpAddr::from_str(text)
            .map(IpNet::from)
            .map_err(|_| format!("`{text}` is not an IP address; expected e.g. `10.0.0.10` or `2001:db8::1`")),
        Use::Destination | Use::PlatformTarget => cidr::parse_network(text),
    }
}

/// What an IPv6 network has to do with the IPv4-embedding ranges.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// Nothing: IPv4, or IPv6 outside both ranges.
    Plain,
    /// Inside one: the IPv4 network the CNI sees, and how it was spelled.
    Embedded(IpNet, Spelling),
    /// Contains one without lying inside it (the range's text).
    Contains(&'static str, Spelling),
}

/// The network as the CNI sees it: an IPv6 spelling of IPv4 becomes the IPv4 network. The IPv6
/// loopback and unspecified addresses, which lie in the IPv4-compatible range, are refused here.
fn canonical_form(text: &str, net: &IpNet) -> Result<Form, String> {
    let IpNet::V6(v6) = net else { return Ok(Form::Plain) };
    let ranges = [(IPV4_MAPPED, "::ffff:0:0/96", Spelling::Mapped), (IPV4_COMPATIBLE, "::/96", Spelling::Compatible)];
    for (range, range_text, spelling) in ranges {
        if range.contains(v6) {
            if v6.prefix_len() == 128 && (v6.addr() == Ipv6Addr::LOCALHOST || v6.addr() == Ipv6Addr::UNSPECIFIED) {
                let what = if v6.addr() == Ipv6Addr::LOCALHOST {
                    "the IPv6 loopback address"
                } else {
                    "the unspecified address"
                };
                return Err(format!(
                    "`{text}` is {what}; agents cannot reach anything there, name the destination's own address"
                ));
            }
            let low = u32::try_from(u128::from(v6.addr()) & u128::from(u32::MAX)).expect("32 bits");
            let v4 = Ipv4Net::new(Ipv4Addr::from(low), v6.prefix_len() - 96).expect("prefix within 0..=32");
            return Ok(Form::Embedded(IpNet::V4(v4), spelling));
        }
        if v6.contains(&range) {
            return Ok(Form::Contains(range_text, spelling));
        }
    }
    Ok(Form::Plain)
}

/// The IPv4 form to write instead, as an address when the tenant wrote an address.
fn written_like(text: &str, net: &IpNet) -> String {
    if text.contains('/') { cidr::canonical(net) } else { net.addr().to_string() }
}

/// The IPv4 address a single address in a `/96` NAT64 prefix translates to (RFC 6052 §2.2).
fn nat64_embedded(net: &IpNet, prefix: &IpNet) -> Option<Ipv4Addr> {
    match (net, prefix) {
        (IpNet::V6(addr), IpNet::V6(prefix)) if addr.prefix_len() == 128 && prefix.prefix_len() == 96 => {
            let low = u32::try_from(u128::from(addr.addr()) & u128::from(u32::MAX)).ok()?;
            Some(Ipv4Addr::from(low))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(texts: &[&str]) -> Vec<IpNet> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    fn rules<'a>(forbidden: &'a [IpNet], nat64: &'a [IpNet]) -> Rules<'a> {
        Rules { min_prefix_v4: 24, min_prefix_v6: 64, forbidden, nat64_prefixes: nat64 }
    }

    #[test]
    fn mapped_and_compatible_spellings_are_checked_as_ipv4_first() {
        let forbidden = nets(&["169.254.0.0/16"]);
        let rules = rules(&forbidden, &[]);
        for text in ["::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "::169.254.169.254", "0:0:0:0:0:ffff:a9fe:a9fe"] {
            let e = check(text, Use::Nameserver, &rules).unwrap_err();
            assert!(e.contains("forbidden range 169.254.0.0/16"), "{text}: {e}");
            assert!(e.contains("for 169.254.169.254)"), "{text}: {e}");
        }
        let e = check("::ffff:10.0.0.1", Use::Destination, &rules).unwrap_err();
        assert!(e.ends_with("write the IPv4 form `10.0.0.1` instead"), "{e}");
        let e = check("::ffff:10.0.0.0/120", Use::Destination, &rules).unwrap_err();
        assert!(e.ends_with("write the IPv4 form `10.0.0.0/24` instead"), "{e}");
    }

    #[test]
    fn networks_containing_the_ipv4_ranges_are_refused() {
        let rules = Rules { min_prefix_v6: 0, ..Rules::SPELLING_ONLY };
        for text in ["::/80", "::fffe:0:0/95", "::/64", "::/1"] {
            let e = check(text, Use::Destination, &rules).unwrap_err();
            assert!(e.contains("whose addresses reach IPv4 destinations"), "{text}: {e}");
        }
        assert!(check("::1", Use::Destination, &rules).unwrap_err().contains("loopback"));
        assert!(check("::", Use::Nameserver, &rules).unwrap_err().contains("unspecified"));
        assert!(check("::fffe:0:0/96", Use::Destination, &rules).is_ok());
    }

    #[test]
    fn nat64_prefixes_name_the_embedded_address() {
        let nat64 = nets(&["64:ff9b::/96", "64:ff9b:1::/48"]);
        let rules = rules(&[], &nat64);
        let e = check("64:ff9b::a9fe:a9fe", Use::Nameserver, &rules).unwrap_err();
        assert!(e.contains("NAT64 prefix 64:ff9b::/96") && e.contains("(here 169.254.169.254)"), "{e}");
        assert!(check("64:ff9b:1:2::/64", Use::Destination, &rules).unwrap_err().contains("64:ff9b:1::/48"));
        assert!(check("64::/16", Use::Destination, &Rules { min_prefix_v6: 0, ..rules }).is_err());
    }

    #[test]
    fn platform_targets_skip_the_tenant_limits_but_not_the_spelling_rules() {
        let forbidden = nets(&["10.0.0.0/8"]);
        let rules = rules(&forbidden, &[]);
        assert!(check("10.1.2.3", Use::PlatformTarget, &rules).is_ok());
        assert!(check("10.0.0.0/8", Use::PlatformTarget, &rules).is_ok());
        assert!(check("::ffff:10.1.2.3", Use::PlatformTarget, &rules).is_err());
        assert!(check("0.0.0.0/0", Use::PlatformTarget, &rules).unwrap_err().contains("every address"));
    }

    #[test]
    fn long_text_is_not_quoted() {
        let text = "1".repeat(1000);
        let e = check(&text, Use::Destination, &Rules::SPELLING_ONLY).unwrap_err();
        assert!(!e.contains(&text[..100]), "{e}");
    }
}
