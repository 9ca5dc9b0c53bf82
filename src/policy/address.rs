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
//!
//! The tunnels that carry IPv6 over IPv4 embed IPv4 addresses too: 6to4 (`2002::/16`, RFC 3056:
//! the relay's IPv4 address in bits 16–47) and Teredo (`2001::/32`, RFC 4380: the server's IPv4
//! address in bits 32–63, the client's in the last 32 bits, inverted). Their addresses are real
//! IPv6 destinations, so they keep their spelling, but an address or network whose embedded IPv4
//! addresses overlap a forbidden range is refused; a network that only contains one of the
//! ranges, or a Teredo network that leaves the client bits open, embeds every IPv4 address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::cidr;

/// The IPv4-mapped range `::ffff:0:0/96` (RFC 4291 §2.5.5.2): a socket sends IPv4 to these.
pub(crate) const IPV4_MAPPED: Ipv6Net = match Ipv6Net::new(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96) {
    Ok(net) => net,
    Err(_) => panic!("a valid prefix"),
};

/// The deprecated IPv4-compatible range `::/96` (RFC 4291 §2.5.5.1).
pub(crate) const IPV4_COMPATIBLE: Ipv6Net = match Ipv6Net::new(Ipv6Addr::UNSPECIFIED, 96) {
    Ok(net) => net,
    Err(_) => panic!("a valid prefix"),
};

/// The 6to4 range `2002::/16` (RFC 3056): bits 16–47 are an IPv4 address the traffic is
/// tunnelled to.
pub const SIX_TO_FOUR: Ipv6Net = match Ipv6Net::new(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
    Ok(net) => net,
    Err(_) => panic!("a valid prefix"),
};

/// The Teredo range `2001::/32` (RFC 4380): bits 32–63 are the Teredo server's IPv4 address, the
/// last 32 bits the client's, each bit inverted; the traffic is tunnelled to either.
pub const TEREDO: Ipv6Net = match Ipv6Net::new(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
    Ok(net) => net,
    Err(_) => panic!("a valid prefix"),
};

/// The longest address text accepted (an expanded IPv6 CIDR with a dotted tail is 49).
pub(crate) const MAX_TEXT_LEN: usize = crate::api::cdtarget::limits::IP_ENTRY_BYTES;

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
    if purpose != Use::PlatformTarget
        && let IpNet::V6(v6) = net
        && let Some(problem) = tunnelled_into_forbidden(text, &v6, purpose, rules)
    {
        return Err(problem);
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

/// What to do instead of an address that reaches a forbidden range, per use.
fn choose_instead(purpose: Use) -> &'static str {
    match purpose {
        Use::Destination => "choose a destination outside it",
        Use::Nameserver => "choose another nameserver",
        Use::UrlHost | Use::PlatformTarget => "use the service's host name",
    }
}

/// The problem with an IPv6 address or network whose traffic a 6to4 or Teredo tunnel carries
/// into a forbidden range, naming what it reaches.
fn tunnelled_into_forbidden(text: &str, net: &Ipv6Net, purpose: Use, rules: &Rules<'_>) -> Option<String> {
    tunnelled(net).into_iter().find_map(|tunnelled| {
        let v4 = IpNet::V4(tunnelled.v4);
        let forbidden = rules.forbidden.iter().find(|f| cidr::overlaps(&v4, f))?;
        let reached = match tunnelled.v4.prefix_len() {
            0 => "every IPv4 address".to_owned(),
            32 => tunnelled.v4.addr().to_string(),
            _ => tunnelled.v4.to_string(),
        };
        let relation = if forbidden.contains(&v4) { "inside" } else { "overlapping" };
        Some(format!(
            "`{text}` reaches {reached}{} through the {} range {} (IPv6 tunnelled over IPv4), {relation} the forbidden range {forbidden}; {}",
            tunnelled.role,
            tunnelled.tunnel,
            tunnelled.range,
            choose_instead(purpose)
        ))
    })
}

/// An IPv4 network an IPv6 address or network reaches through a tunnel that embeds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tunnelled {
    /// `6to4` or `Teredo`.
    tunnel: &'static str,
    /// The tunnel's range, as text.
    range: &'static str,
    /// Which embedded address it is, for the message (empty for 6to4's one).
    role: &'static str,
    /// The IPv4 addresses reached: one, a network, or `0.0.0.0/0` when the bits are open.
    v4: Ipv4Net,
}

/// The IPv4 networks `net` embeds as 6to4 or Teredo: inside a range, the bits it fixes; around
/// one, every IPv4 address.
fn tunnelled(net: &Ipv6Net) -> Vec<Tunnelled> {
    let every = Ipv4Net::new(Ipv4Addr::UNSPECIFIED, 0).expect("/0 is a prefix");
    let bits = u128::from(net.network());
    // The IPv4 network in the 32 bits ending `shift` bits from the right, fixed as far as the
    // prefix reaches into them (bit 0 of the range being IPv6 bit `start`).
    let embedded = |start: u8, shift: u32| -> Ipv4Net {
        let fixed = net.prefix_len().saturating_sub(start).min(32);
        let v4 = u32::try_from((bits >> shift) & u128::from(u32::MAX)).expect("32 bits");
        Ipv4Net::new(Ipv4Addr::from(v4), fixed).expect("prefix within 0..=32").trunc()
    };
    let six_to_four = |v4| Tunnelled { tunnel: "6to4", range: "2002::/16", role: "", v4 };
    let server =
        |v4| Tunnelled { tunnel: "Teredo", range: "2001::/32", role: " (the Teredo server, bits 32–63)", v4 };
    let client = |v4| Tunnelled {
        tunnel: "Teredo",
        range: "2001::/32",
        role: " (the Teredo client, the last 32 bits inverted)",
        v4,
    };
    let mut reached = Vec::new();
    if SIX_TO_FOUR.contains(net) {
        reached.push(six_to_four(embedded(16, 80)));
    } else if net.contains(&SIX_TO_FOUR) {
        reached.push(six_to_four(every));
    }
    if TEREDO.contains(net) {
        reached.push(server(embedded(32, 64)));
        // Inverted, the client's fixed bits stay fixed and its open bits stay open.
        let low = embedded(96, 0);
        let inverted = Ipv4Net::new(Ipv4Addr::from(!u32::from(low.addr())), low.prefix_len()).expect("same prefix");
        reached.push(client(inverted.trunc()));
    } else if net.contains(&TEREDO) {
        reached.extend([server(every), client(every)]);
    }
    reached
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
    fn six_to_four_and_teredo_addresses_of_a_forbidden_address_are_refused_for_every_tenant_use() {
        let forbidden = nets(&["169.254.0.0/16", "10.96.0.0/12"]);
        let rules = rules(&forbidden, &[]);
        let reaching = [
            // 6to4 with 169.254.169.254 in bits 16–47, in any spelling.
            ("2002:a9fe:a9fe::1", "reaches 169.254.169.254 through the 6to4 range 2002::/16"),
            ("2002:A9FE:A9FE:0:0:0:0:53", "reaches 169.254.169.254 through the 6to4 range 2002::/16"),
            ("2002:a60:1:ffff::1", "reaches 10.96.0.1 through the 6to4 range 2002::/16"),
            // Teredo: the server 169.254.169.254 in bits 32–63, client 11.0.0.7 (inverted f4ff:fff8).
            ("2001:0:a9fe:a9fe:8000:0:f4ff:fff8", "reaches 169.254.169.254 (the Teredo server, bits 32–63)"),
            // Teredo: server 203.0.113.7, the client 169.254.169.254 inverted (5601:5601).
            (
                "2001:0:cb00:7107:8000:0:5601:5601",
                "reaches 169.254.169.254 (the Teredo client, the last 32 bits inverted)",
            ),
        ];
        for (text, reached) in reaching {
            for purpose in [Use::Destination, Use::Nameserver, Use::UrlHost] {
                let e = check(text, purpose, &rules).unwrap_err();
                assert!(e.starts_with(&format!("`{text}` {reached}")), "{text} as {purpose:?}: {e}");
                assert!(e.contains("(IPv6 tunnelled over IPv4), inside the forbidden range"), "{text}: {e}");
            }
        }
        let e = check("2002:a9fe:a9fe:1::/64", Use::Destination, &rules).unwrap_err();
        assert!(e.ends_with("inside the forbidden range 169.254.0.0/16; choose a destination outside it"), "{e}");
        // A Teredo network as narrow as the policy allows still leaves every client open.
        let e = check("2001:0:cb00:7107::/64", Use::Destination, &rules).unwrap_err();
        assert!(e.contains("reaches every IPv4 address (the Teredo client, the last 32 bits inverted)"), "{e}");
    }

    #[test]
    fn tunnel_networks_embedding_part_of_a_forbidden_range_are_refused() {
        let forbidden = nets(&["169.254.0.0/16", "10.96.0.0/12"]);
        let rules = Rules { min_prefix_v6: 0, ..rules(&forbidden, &[]) };
        let cases = [
            (
                "2002:a60::/28",
                "reaches 10.96.0.0/12 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), inside",
            ),
            (
                "2002:a00::/24",
                "reaches 10.0.0.0/8 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), overlapping",
            ),
            ("2002:a9fe:a9fe:8000::/49", "reaches 169.254.169.254 through the 6to4 range"),
            ("2002::/16", "reaches every IPv4 address through the 6to4 range 2002::/16"),
            ("2000::/3", "reaches every IPv4 address through the 6to4 range 2002::/16"),
            ("2001:0:a9fe::/48", "reaches 169.254.0.0/16 (the Teredo server, bits 32–63)"),
            ("2001:0:cb00:7107:8000::/96", "reaches every IPv4 address (the Teredo client"),
            ("2001:0:cb00:7107:8000:0:5601:5600/120", "reaches 169.254.169.0/24 (the Teredo client"),
            ("2001::/32", "reaches every IPv4 address (the Teredo server, bits 32–63)"),
            ("2001::/16", "reaches every IPv4 address (the Teredo server, bits 32–63)"),
        ];
        for (text, reached) in cases {
            let e = check(text, Use::Destination, &rules).unwrap_err();
            assert!(e.starts_with(&format!("`{text}` {reached}")), "{text}: {e}");
        }
    }

    #[test]
    fn tunnel_addresses_of_allowed_ipv4_addresses_are_accepted_as_written() {
        let forbidden = nets(&["169.254.0.0/16", "10.96.0.0/12"]);
        let rules = Rules { min_prefix_v6: 0, ..rules(&forbidden, &[]) };
        // 6to4 of 203.0.113.7; Teredo with server 203.0.113.7 and client 11.0.0.7; a 6to4 /40
        // of 203.0.113.0/24; a Teredo /120 whose clients are 11.0.0.0/24.
        for text in [
            "2002:cb00:7107::1",
            "2001:0:cb00:7107:8000:0:f4ff:fff8",
            "2002:cb00:7100::/40",
            "2001:0:cb00:7107:8000:0:f4ff:ff00/120",
        ] {
            let net: IpNet = text.parse().or_else(|_| text.parse::<IpAddr>().map(IpNet::from)).unwrap();
            assert_eq!(check(text, Use::Destination, &rules), Ok(net), "{text}");
        }
        // The admins' own platform targets may sit behind a tunnel to a forbidden range.
        assert!(check("2002:a9fe:a9fe::/48", Use::PlatformTarget, &rules).is_ok());
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
