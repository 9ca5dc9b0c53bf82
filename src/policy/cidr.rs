//! Addresses and CIDRs: parsed, checked and put in canonical form.

use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// Parses an address or CIDR written the way the admins' lists take it; a bare address becomes
/// a /32 or /128.
///
/// Rejected, with what would be accepted: anything that is not an IPv4/IPv6 address or CIDR,
/// CIDRs with host bits set, and IPv4-mapped IPv6 addresses. Tenant addresses and everything
/// rendered into an `ipBlock` go through [`super::address::check`], which also applies the
/// policy's rules.
pub fn parse(input: &str) -> Result<IpNet, String> {
    let net = parse_network(input)?;
    if let IpNet::V6(v6) = net
        && let Some(v4) = v6.addr().to_ipv4_mapped()
    {
        let instead =
            if input.contains('/') { format!("{v4}/{}", v6.prefix_len().saturating_sub(96)) } else { v4.to_string() };
        return Err(format!("`{input}` is an IPv4-mapped IPv6 address; write the IPv4 form `{instead}` instead"));
    }
    Ok(net)
}

/// The syntax alone: an IPv4/IPv6 address (a host network) or a CIDR without host bits, exactly
/// as written, whatever range it is in.
pub(crate) fn parse_network(input: &str) -> Result<IpNet, String> {
    if input.contains('/') {
        let net = IpNet::from_str(input).map_err(|_| {
            format!("`{input}` is not a CIDR; expected an address with a prefix length, such as `10.1.0.0/24` or `2001:db8::/64`")
        })?;
        if net.trunc() != net {
            return Err(format!(
                "`{input}` has host bits set; write the network `{}` or a single address such as `{}`",
                net.trunc(),
                net.addr()
            ));
        }
        Ok(net)
    } else {
        let addr = IpAddr::from_str(input).map_err(|_| {
            format!("`{input}` is not an IP address or CIDR; expected for example `10.0.0.1`, `2001:db8::1` or `10.1.0.0/24`")
        })?;
        Ok(IpNet::from(addr))
    }
}

/// Whether the network is every address of its family (`0.0.0.0/0`, `::/0`).
pub(crate) fn is_everything(net: &IpNet) -> bool {
    net.prefix_len() == 0
}

/// Whether two networks share any address.
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Canonical text of a network, as Kubernetes expects it in an `ipBlock`.
pub fn canonical(net: &IpNet) -> String {
    net.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_addresses_become_host_networks() {
        assert_eq!(canonical(&parse("10.0.0.1").unwrap()), "10.0.0.1/32");
        assert_eq!(canonical(&parse("2001:DB8::1").unwrap()), "2001:db8::1/128");
        assert_eq!(canonical(&parse("2001:db8:0:0::/64").unwrap()), "2001:db8::/64");
    }

    #[test]
    fn host_bits_and_mapped_addresses_are_rejected() {
        assert!(parse("10.0.0.5/24").unwrap_err().contains("10.0.0.0/24"));
        assert!(parse("::ffff:10.0.0.1").unwrap_err().contains("10.0.0.1"));
        assert!(parse("10.0.0.256").is_err());
        assert!(parse("10.0.0.0/33").is_err());
        assert!(parse(" 10.0.0.1").is_err());
        assert!(parse("example.com").is_err());
    }

    #[test]
    fn overlap_is_symmetric_and_family_aware() {
        let a = parse("10.0.0.0/8").unwrap();
        let b = parse("10.1.2.3").unwrap();
        let c = parse("fe80::/10").unwrap();
        assert!(overlaps(&a, &b) && overlaps(&b, &a));
        assert!(!overlaps(&a, &c));
    }
}
