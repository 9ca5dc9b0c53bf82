//! `address_parse`: tenant address text → the address check and the rendered egress policy.
//!
//! Invariants: no panic; whatever is accepted is canonical (its text parses back to the same
//! network) and reaches no forbidden range of the default policy, in any spelling: directly,
//! as IPv4 behind an IPv4-mapped, IPv4-compatible or NAT64 IPv6 form, which a CNI or a
//! translator turns back into IPv4, or as the IPv4 address a 6to4 (`2002::/16`) or Teredo
//! (`2001::/32`, server or client) address embeds, to which a tunnel carries its traffic.

use std::net::{Ipv4Addr, Ipv6Addr};

use cdtarget::api::CDTarget;
use cdtarget::api::keda::KedaVersion;
use cdtarget::policy::address::{self, Use};
use cdtarget::policy::{Policy, cidr, outbound};
use cdtarget::render::{self, Children, Scaling, SecretDigests};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde_json::json;

/// Most addresses taken from one input (one per line).
const MAX_ENTRIES: usize = 16;

/// IPv6 prefixes whose last 32 bits are an IPv4 address someone on the path translates to.
const EMBEDDING_V4: [(Ipv6Addr, u8); 3] = [
    // IPv4-mapped (RFC 4291): the kernel and CNIs treat it as the IPv4 address.
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96),
    // IPv4-compatible (deprecated, RFC 4291): some stacks still translate it.
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96),
    // NAT64 well-known prefix (RFC 6052).
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96),
];
/// NAT64 local-use prefix (RFC 8215): any IPv4 address can sit behind it, in several layouts.
const NAT64_LOCAL: (Ipv6Addr, u8) = (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48);
/// 6to4 (RFC 3056): the IPv4 address the traffic is tunnelled to is in bits 16–47.
const SIX_TO_FOUR: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16);
/// Teredo (RFC 4380): the server's IPv4 address in bits 32–63, the client's in the last 32 bits,
/// inverted; the traffic is tunnelled to either.
const TEREDO: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32);

/// The fuzz target: every line of the input is one `spec.ip` entry, and also one nameserver.
pub fn check(data: &[u8]) {
    let text = super::text(data);
    let entries: Vec<&str> = text.split('\n').take(MAX_ENTRIES).collect();
    let policy = Policy::default();

    for entry in &entries {
        check_parse(entry, &policy);
        check_address(entry, &policy);
        check_url(entry, &policy);
    }
    // The whole `ip` list, then the whole nameserver list, through the renderer.
    let as_ip = target(json!({ "ip": entries }));
    if let Ok(children) =
        render::render(&as_ip, &policy, &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
    {
        assert_egress_within_policy(&children, &policy, "spec.ip");
    }
    // Custom nameservers are refused by default; allowed here so they reach the address check.
    let nameserver_policy = Policy { allow_custom_nameservers: true, ..Policy::default() };
    let as_nameservers = target(json!({ "dnsPolicy": "None", "dnsConfig": { "nameservers": entries } }));
    if let Ok(children) = render::render(
        &as_nameservers,
        &nameserver_policy,
        &SecretDigests::new(),
        Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
    ) {
        assert_egress_within_policy(&children, &nameserver_policy, "spec.dnsConfig.nameservers");
    }
}

/// `cidr::parse` on its own: accepted text is a network in canonical form.
fn check_parse(entry: &str, policy: &Policy) {
    let Ok(net) = cidr::parse(entry) else { return };
    assert_eq!(net, net.trunc(), "`{entry}` accepted with host bits set");
    let canonical = cidr::canonical(&net);
    assert_eq!(cidr::parse(&canonical), Ok(net), "`{entry}`: canonical text `{canonical}` does not parse back");
    if let IpNet::V6(v6) = net {
        assert!(v6.addr().to_ipv4_mapped().is_none(), "`{entry}` accepted as an IPv4-mapped address");
    }
    // Not a check of `parse` (it knows no policy), but of the oracle against the defaults.
    let _ = forbidden_reached(&net, &policy.forbidden);
}

/// The one address check, for every use: what it accepts is canonical, never every address,
/// and reaches no forbidden range or NAT64 prefix in any spelling.
fn check_address(entry: &str, policy: &Policy) {
    let rules = policy.address_rules();
    for purpose in [Use::Destination, Use::Nameserver, Use::UrlHost] {
        let Ok(net) = address::check(entry, purpose, &rules) else { continue };
        assert_eq!(net, net.trunc(), "`{entry}` accepted with host bits set");
        assert!(net.prefix_len() > 0, "`{entry}` accepted as every address");
        if let Some((reached, forbidden)) = forbidden_reached(&net, &policy.forbidden) {
            panic!("`{entry}` accepted as {purpose:?} reaches {reached}, inside the forbidden range {forbidden}");
        }
        for nat64 in &policy.nat64_prefixes {
            assert!(!overlaps(&net, nat64), "`{entry}` accepted as {purpose:?} overlaps the NAT64 prefix {nat64}");
        }
    }
}

/// The outbound URL check: an accepted URL is https, carries no user info, and its host is on
/// the allow-list (the default policy lists only host names, so never a literal address).
fn check_url(entry: &str, policy: &Policy) {
    let Ok(url) = outbound::check_url(entry, &policy.allowed_url_hosts, &policy.address_rules()) else { return };
    assert_eq!(url.scheme(), "https", "`{entry}` accepted without https");
    assert!(url.username().is_empty() && url.password().is_none(), "`{entry}` accepted with user info");
    let host = url.host_str().unwrap_or_default();
    assert!(
        host == "dev.azure.com"
            || host.strip_suffix(".visualstudio.com").is_some_and(|label| !label.is_empty() && !label.contains('.')),
        "`{entry}` accepted with host `{host}`, not on the default allow-list"
    );
}

/// A minimal valid CDTarget in `tenant-a` with `extra` merged into its spec.
fn target(extra: serde_json::Value) -> CDTarget {
    let mut spec = json!({
        "agentImage": "ghcr.io/acme/azp-agent:4.255.0",
        "tokenRef": "azp-token",
        "config": { "url": "https://dev.azure.com/acme", "poolName": "linux" },
    });
    if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    let spec = serde_json::from_value(spec).expect("the fixture spec deserialises");
    let mut target = CDTarget::new("agents", spec);
    target.metadata.namespace = Some("tenant-a".into());
    target
}

/// Every `ipBlock` the rendered NetworkPolicy opens, apart from the platform's own targets, is
/// canonical, never every address, and reaches no forbidden range in any spelling.
pub fn assert_egress_within_policy(children: &Children, policy: &Policy, what: &str) {
    let platform: Vec<IpNet> = policy.platform_targets.iter().map(|t| t.cidr).collect();
    let egress = children.network_policy().expect("a NetworkPolicy").spec.as_ref().and_then(|s| s.egress.as_ref());
    for rule in egress.into_iter().flatten() {
        for peer in rule.to.iter().flatten() {
            let Some(block) = &peer.ip_block else { continue };
            let net: IpNet =
                block.cidr.parse().unwrap_or_else(|_| panic!("{what}: rendered ipBlock `{}` is no CIDR", block.cidr));
            assert_eq!(cidr::canonical(&net), block.cidr, "{what}: rendered ipBlock is not canonical");
            if platform.contains(&net) {
                continue;
            }
            assert!(net.prefix_len() > 0, "{what}: rendered ipBlock `{net}` opens every address");
            if let Some((reached, forbidden)) = forbidden_reached(&net, &policy.forbidden) {
                panic!("{what}: rendered ipBlock `{net}` reaches {reached}, inside the forbidden range {forbidden}");
            }
        }
    }
}

/// The first forbidden range `net` reaches, directly or through an IPv4-translating IPv6
/// spelling, as (what is reached, the forbidden range).
pub fn forbidden_reached(net: &IpNet, forbidden: &[IpNet]) -> Option<(IpNet, IpNet)> {
    let mut reached = vec![*net];
    if let IpNet::V6(v6) = net {
        reached.extend(ipv4_reached(v6).into_iter().map(IpNet::V4));
    }
    reached.into_iter().find_map(|r| forbidden.iter().find(|f| overlaps(&r, f)).map(|f| (r, *f)))
}

/// The IPv4 networks an IPv6 network reaches through the translating prefixes and the tunnels.
fn ipv4_reached(net: &Ipv6Net) -> Vec<Ipv4Net> {
    let everything = Ipv4Net::new(Ipv4Addr::UNSPECIFIED, 0).expect("/0 is a prefix");
    let mut reached = Vec::new();
    for (addr, len) in EMBEDDING_V4 {
        let prefix = Ipv6Net::new(addr, len).expect("a valid prefix");
        if prefix.contains(net) {
            let low = u128::from(net.network()) as u32;
            reached.push(Ipv4Net::new(Ipv4Addr::from(low), net.prefix_len() - len).expect("at most /32"));
        } else if net.contains(&prefix) {
            reached.push(everything);
        }
    }
    let local = Ipv6Net::new(NAT64_LOCAL.0, NAT64_LOCAL.1).expect("a valid prefix");
    if local.contains(net) || net.contains(&local) {
        reached.push(everything);
    }
    // The 32 bits from IPv6 bit `start` on, as far as the prefix fixes them (open bits stay open
    // when inverted).
    let bits = u128::from(net.network());
    let embedded = |start: u8, inverted: bool| {
        let v4 = (bits >> (96 - u32::from(start))) as u32;
        let v4 = if inverted { !v4 } else { v4 };
        let fixed = net.prefix_len().saturating_sub(start).min(32);
        Ipv4Net::new(Ipv4Addr::from(v4), fixed).expect("at most /32").trunc()
    };
    let six_to_four = Ipv6Net::new(SIX_TO_FOUR.0, SIX_TO_FOUR.1).expect("a valid prefix");
    if six_to_four.contains(net) {
        reached.push(embedded(16, false));
    } else if net.contains(&six_to_four) {
        reached.push(everything);
    }
    let teredo = Ipv6Net::new(TEREDO.0, TEREDO.1).expect("a valid prefix");
    if teredo.contains(net) {
        reached.extend([embedded(32, false), embedded(96, true)]);
    } else if net.contains(&teredo) {
        reached.push(everything);
    }
    reached
}

/// Whether two networks of the same family share an address.
fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    #[test]
    fn the_oracle_sees_every_translating_spelling_of_a_forbidden_address() {
        let forbidden = [net("169.254.0.0/16")];
        for spelling in ["::ffff:169.254.169.254/128", "::169.254.169.254/128", "64:ff9b::a9fe:a9fe/128", "::/64"] {
            assert!(forbidden_reached(&net(spelling), &forbidden).is_some(), "{spelling}");
        }
        assert!(forbidden_reached(&net("64:ff9b:1::/64"), &forbidden).is_some());
        // 6to4 and Teredo (server, then client inverted), and networks leaving those bits open.
        for tunnelled in [
            "2002:a9fe:a9fe::1/128",
            "2002:a9fe::/32",
            "2001:0:a9fe:a9fe::/64",
            "2001:0:cb00:7107:8000:0:5601:5601/128",
            "2001:0:cb00:7107::/64",
            "2000::/3",
        ] {
            assert!(forbidden_reached(&net(tunnelled), &forbidden).is_some(), "{tunnelled}");
        }
        assert!(forbidden_reached(&net("2002:cb00:7107::/48"), &forbidden).is_none());
        assert!(forbidden_reached(&net("2001:0:cb00:7107:8000:0:f4ff:fff8/128"), &forbidden).is_none());
        assert!(forbidden_reached(&net("2001:db8::/64"), &forbidden).is_none());
        assert!(forbidden_reached(&net("::ffff:10.0.0.0/120"), &forbidden).is_none());
    }
}
