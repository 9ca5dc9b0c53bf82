//! Property tests: address and CIDR parsing, the invariants of every rendered egress
//! NetworkPolicy, and the hostile tenant's other spellings of addresses and URLs.
//!
//! Expected values are computed here from plain integers (masks, intervals and the standard
//! library's address formatting), not with the code under test.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cdtarget::api::CDTarget;
use cdtarget::api::keda::KedaVersion;
use cdtarget::api::policy::{
    MaxAddressesDocument, MinPrefixLengthDocument, PlatformTargetDocument, PolicyDocument, PortDocument,
};
use cdtarget::policy::address::{self, Rules, Use};
use cdtarget::policy::{self, Policy, cidr, outbound};
use cdtarget::render::{self, Scaling, SecretDigests};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyEgressRule};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// A network as plain integers.

/// An IPv4 (`v6 == false`, address in the low 32 bits) or IPv6 network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Net {
    v6: bool,
    /// The network address: host bits are always zero.
    addr: u128,
    prefix: u8,
}

impl Net {
    /// The network of `addr` with `prefix`, host bits cleared.
    fn new(v6: bool, addr: u128, prefix: u8) -> Net {
        let bits = if v6 { 128 } else { 32 };
        assert!(prefix <= bits);
        let addr = if v6 { addr } else { addr & u128::from(u32::MAX) };
        Net { v6, addr: addr & !host_mask(bits, prefix), prefix }
    }

    fn bits(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    fn first(&self) -> u128 {
        self.addr
    }

    fn last(&self) -> u128 {
        self.addr | host_mask(self.bits(), self.prefix)
    }

    fn ip(&self) -> IpAddr {
        if self.v6 { IpAddr::V6(Ipv6Addr::from(self.addr)) } else { IpAddr::V4(Ipv4Addr::from(self.addr as u32)) }
    }

    /// `address/prefix`, with the standard library's canonical address text (RFC 5952 for IPv6).
    fn canonical(&self) -> String {
        format!("{}/{}", self.ip(), self.prefix)
    }

    fn overlaps(&self, other: &Net) -> bool {
        self.v6 == other.v6 && self.first() <= other.last() && other.first() <= self.last()
    }

    /// In `::ffff:0:0/96`, which the parser rejects (write the IPv4 address instead).
    fn is_v4_mapped(&self) -> bool {
        self.v6 && self.addr >> 32 == 0xffff
    }

    /// Inside or containing `::ffff:0:0/96` or `::/96`, the IPv6 ranges whose addresses reach
    /// IPv4 destinations: the address check refuses every such network.
    fn touches_ipv4_ranges(&self) -> bool {
        self.overlaps(&ipv4_mapped()) || self.overlaps(&ipv4_compatible())
    }

    /// Inside `::ffff:0:0/96` or `::/96` (checked as the IPv4 network it spells).
    fn spells_ipv4(&self) -> bool {
        self.v6 && self.prefix >= 96 && (self.addr >> 32 == 0 || self.addr >> 32 == 0xffff)
    }

    /// The IPv4 networks this IPv6 network reaches through an IPv6-over-IPv4 tunnel: 6to4
    /// (`2002::/16`, the IPv4 address in bits 16–47) and Teredo (`2001::/32`, the server in
    /// bits 32–63, the client inverted in the last 32 bits). The bits the prefix leaves open are
    /// open in the IPv4 network too; a network around either range reaches every IPv4 address.
    fn tunnelled_v4(&self) -> Vec<Net> {
        if !self.v6 {
            return Vec::new();
        }
        let every = Net::new(false, 0, 0);
        // The 32 bits starting at IPv6 bit `start`, as far as the prefix fixes them.
        let embedded = |start: u8| {
            Net::new(false, self.addr >> (96 - u32::from(start)), self.prefix.saturating_sub(start).min(32))
        };
        let mut reached = Vec::new();
        if Net::new(true, 0x2002 << 112, 16).overlaps(self) {
            reached.push(if self.prefix >= 16 { embedded(16) } else { every });
        }
        if Net::new(true, 0x2001_0000 << 96, 32).overlaps(self) {
            if self.prefix >= 32 {
                let client = embedded(96);
                reached.extend([embedded(32), Net::new(false, !client.addr, client.prefix)]);
            } else {
                reached.push(every);
            }
        }
        reached
    }

    /// Whether a tunnel carries this network's traffic into one of `forbidden`.
    fn tunnels_into(&self, forbidden: &[Net]) -> bool {
        self.tunnelled_v4().iter().any(|v4| forbidden.iter().any(|f| f.overlaps(v4)))
    }

    fn ipnet(&self) -> IpNet {
        match self.ip() {
            IpAddr::V4(a) => IpNet::V4(Ipv4Net::new(a, self.prefix).unwrap()),
            IpAddr::V6(a) => IpNet::V6(Ipv6Net::new(a, self.prefix).unwrap()),
        }
    }

    /// A way the tenant might write this network: `style` picks among the accepted spellings.
    fn written(&self, style: u8) -> String {
        let host = self.prefix == self.bits();
        match (self.v6, style % 4) {
            (_, 1) if host => self.ip().to_string(),
            (true, 2) => self.canonical().to_uppercase(),
            (true, 3) => {
                let groups: Vec<String> =
                    Ipv6Addr::from(self.addr).segments().iter().map(|g| format!("{g:04x}")).collect();
                format!("{}/{}", groups.join(":"), self.prefix)
            }
            _ => self.canonical(),
        }
    }
}

/// `::ffff:0:0/96`.
fn ipv4_mapped() -> Net {
    Net::new(true, 0xffff << 32, 96)
}

/// `::/96`.
fn ipv4_compatible() -> Net {
    Net::new(true, 0, 96)
}

/// The default NAT64 prefixes, `64:ff9b::/96` and `64:ff9b:1::/48`.
fn default_nat64() -> Vec<Net> {
    vec![Net::new(true, 0x0064_ff9b << 96, 96), Net::new(true, 0x0064_ff9b_0001 << 80, 48)]
}

/// The host bits of a `bits`-bit address with `prefix`.
fn host_mask(bits: u8, prefix: u8) -> u128 {
    let host = u32::from(bits - prefix);
    let all = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
    if host == 128 { u128::MAX } else { all & ((1u128 << host) - 1) }
}

/// Any network of the family with a prefix in `prefixes`.
fn net(v6: bool, prefixes: std::ops::RangeInclusive<u8>) -> impl Strategy<Value = Net> {
    (any::<u128>(), prefixes).prop_map(move |(addr, prefix)| Net::new(v6, addr, prefix))
}

/// Any IPv4 or IPv6 network with a prefix of at least `min4` / `min6`.
fn any_net(min4: u8, min6: u8) -> impl Strategy<Value = Net> {
    prop_oneof![net(false, min4..=32), net(true, min6..=128)]
}

// ---------------------------------------------------------------------------------------------
// (1) Addresses and CIDRs.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_ipv4_address_parses_to_its_host_network(a in any::<u32>()) {
        let expected = Net::new(false, u128::from(a), 32);
        let text = Ipv4Addr::from(a).to_string();
        let parsed = cidr::parse(&text).unwrap();
        prop_assert_eq!(parsed, expected.ipnet());
        prop_assert_eq!(parsed.prefix_len(), 32);
        prop_assert_eq!(cidr::canonical(&parsed), expected.canonical());
        prop_assert_eq!(cidr::parse(&cidr::canonical(&parsed)).unwrap(), parsed);
    }

    #[test]
    fn any_ipv6_address_parses_to_its_host_network_unless_ipv4_mapped(a in any::<u128>()) {
        let expected = Net::new(true, a, 128);
        let text = Ipv6Addr::from(a).to_string();
        match cidr::parse(&text) {
            Ok(parsed) => {
                prop_assert!(!expected.is_v4_mapped(), "{text} is IPv4-mapped but was accepted");
                prop_assert_eq!(parsed, expected.ipnet());
                prop_assert_eq!(parsed.prefix_len(), 128);
                prop_assert_eq!(cidr::canonical(&parsed), expected.canonical());
                prop_assert_eq!(cidr::parse(&cidr::canonical(&parsed)).unwrap(), parsed);
            }
            Err(e) => prop_assert!(expected.is_v4_mapped(), "{text} rejected: {e}"),
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_addresses_are_rejected_naming_the_ipv4_address(a in any::<u32>()) {
        let v4 = Ipv4Addr::from(a);
        let expanded: Vec<String> = v4.to_ipv6_mapped().segments().iter().map(|g| format!("{g:x}")).collect();
        for text in [format!("::ffff:{v4}"), expanded.join(":")] {
            let e = cidr::parse(&text).unwrap_err();
            prop_assert!(e.contains(&format!("write the IPv4 form `{v4}`")), "{text}: {e}");
        }
    }

    #[test]
    fn every_spelling_of_an_ipv6_network_parses_to_the_canonical_one(n in net(true, 0..=128), style in 0u8..4) {
        prop_assume!(!n.is_v4_mapped());
        let written = n.written(style);
        let parsed = cidr::parse(&written).unwrap_or_else(|e| panic!("{written}: {e}"));
        prop_assert_eq!(parsed, n.ipnet());
        prop_assert_eq!(cidr::canonical(&parsed), n.canonical());
    }

    #[test]
    fn any_truncated_network_parses_and_is_canonical(n in any_net(0, 0)) {
        prop_assume!(!n.is_v4_mapped());
        let text = n.canonical();
        let parsed = cidr::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        prop_assert_eq!(parsed, n.ipnet());
        prop_assert_eq!(cidr::canonical(&parsed), text.clone());
        prop_assert_eq!(cidr::parse(&cidr::canonical(&parsed)).unwrap(), parsed);
    }

    #[test]
    fn any_network_with_host_bits_set_is_rejected(
        v6 in any::<bool>(),
        addr in any::<u128>(),
        prefix in 0u8..=127,
        host_bit in any::<u32>(),
    ) {
        let bits = if v6 { 128 } else { 32 };
        let prefix = prefix % bits; // shorter than the address, so there are host bits
        let network = Net::new(v6, addr, prefix);
        let with_host_bit = network.addr | (1u128 << (host_bit % u32::from(bits - prefix)));
        let written = Net { v6, addr: with_host_bit, prefix };
        let text = format!("{}/{prefix}", written.ip());
        let e = cidr::parse(&text).unwrap_err();
        prop_assert!(e.contains("has host bits set"), "{text}: {e}");
        prop_assert!(e.contains(&format!("`{}`", network.canonical())), "{text}: {e}");
    }

    #[test]
    fn prefix_longer_than_the_address_is_rejected(n in any_net(0, 0), extra in 1u8..=100) {
        let text = format!("{}/{}", n.ip(), u16::from(n.bits()) + u16::from(extra));
        prop_assert!(cidr::parse(&text).is_err(), "{text}");
    }

    #[test]
    fn parsing_never_panics_and_what_it_accepts_is_stable(text in "[0-9a-fA-F:./ ]{0,45}") {
        if let Ok(net) = cidr::parse(&text) {
            prop_assert_eq!(net.trunc(), net);
            let canonical = cidr::canonical(&net);
            prop_assert_eq!(cidr::parse(&canonical), Ok(net));
        }
    }

    #[test]
    fn overlap_agrees_with_address_intervals(a in any_net(0, 0), b in any_net(0, 0)) {
        prop_assume!(!a.is_v4_mapped() && !b.is_v4_mapped());
        let (x, y) = (a.ipnet(), b.ipnet());
        prop_assert_eq!(cidr::overlaps(&x, &y), a.overlaps(&b));
        prop_assert_eq!(cidr::overlaps(&x, &y), cidr::overlaps(&y, &x));
    }
}

// ---------------------------------------------------------------------------------------------
// (2) Rendering.

/// A policy port as generated: `(protocol, port, endPort)`.
type PortSpec = (&'static str, u16, Option<u16>);

/// What a generated policy is built from.
#[derive(Clone, Debug)]
struct PolicyInput {
    ports: Vec<PortSpec>,
    min4: u8,
    min6: u8,
    /// The default forbidden ranges plus random ones.
    forbidden: Vec<Net>,
    dns: bool,
    platform: Vec<(Net, Vec<PortSpec>)>,
}

impl PolicyInput {
    fn document(&self) -> PolicyDocument {
        let ports = |ports: &[PortSpec]| -> Vec<PortDocument> {
            ports
                .iter()
                .map(|(protocol, port, end)| PortDocument {
                    port: i64::from(*port),
                    end_port: end.map(i64::from),
                    protocol: Some((*protocol).to_owned()),
                })
                .collect()
        };
        let mut document = PolicyDocument::default();
        document.egress.ports = ports(&self.ports);
        document.egress.min_prefix_length =
            MinPrefixLengthDocument { ipv4: i64::from(self.min4), ipv6: i64::from(self.min6) };
        document.egress.forbidden = self.forbidden.iter().map(Net::canonical).collect();
        document.egress.dns = self.dns;
        // The address-space cap has properties of its own; here it lets everything through.
        document.egress.max_addresses_per_target = MaxAddressesDocument { ipv4: 1 << 32, ipv6_prefix_length: 0 };
        document.egress.platform_targets = self
            .platform
            .iter()
            .map(|(cidr, p)| PlatformTargetDocument { cidr: cidr.canonical(), ports: ports(p) })
            .collect();
        document
    }

    fn policy(&self) -> Policy {
        policy::from_document(&self.document()).unwrap_or_else(|p| panic!("generated policy is invalid: {p:#?}"))
    }

    /// Whether the renderer must accept `n` as a tenant destination.
    fn allows(&self, n: &Net) -> bool {
        let minimum = if n.v6 { self.min6 } else { self.min4 };
        n.prefix >= minimum
            && !n.touches_ipv4_ranges()
            && !self.forbidden.iter().any(|f| f.overlaps(n))
            && !n.tunnels_into(&self.forbidden)
            && !default_nat64().iter().any(|p| p.overlaps(n))
    }
}

fn default_forbidden() -> Vec<Net> {
    vec![Net::new(false, 0xa9fe_0000, 16), Net::new(true, 0xfe80 << 112, 10)]
}

/// 1–3 TCP/UDP ports, some of them ranges.
fn ports(range: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<PortSpec>> {
    let port = (prop_oneof![Just("TCP"), Just("UDP")], 1u16..=65535, prop::option::weighted(0.2, 0u16..=1000))
        .prop_map(|(protocol, port, span)| (protocol, port, span.map(|s| port.saturating_add(s))));
    prop::collection::vec(port, range)
}

fn policy_input() -> impl Strategy<Value = PolicyInput> {
    let extra_forbidden = prop::collection::vec(any_net(8, 16), 0..=2);
    let platform_target =
        (any_net(8, 16).prop_filter("not an IPv4 range of IPv6", |n| !n.touches_ipv4_ranges()), ports(1..=3));
    (ports(1..=4), 0u8..=32, 0u8..=128, extra_forbidden, any::<bool>(), prop::collection::vec(platform_target, 0..=3))
        .prop_map(|(ports, min4, min6, extra, dns, platform)| {
            let mut forbidden = default_forbidden();
            forbidden.extend(extra.into_iter().filter(|n| !n.is_v4_mapped()));
            PolicyInput { ports, min4, min6, forbidden, dns, platform }
        })
}

/// A policy and up to 8 destinations it allows, each with a spelling style.
fn policy_and_destinations() -> impl Strategy<Value = (PolicyInput, Vec<(Net, u8)>)> {
    policy_input()
        .prop_flat_map(|input| {
            let candidates = prop::collection::vec((any_net(input.min4, input.min6), 0u8..4), 0..8);
            (Just(input), candidates)
        })
        .prop_map(|(input, candidates)| {
            let allowed = candidates.into_iter().filter(|(n, _)| input.allows(n)).collect();
            (input, allowed)
        })
}

fn render_network_policy(input: &PolicyInput, ips: Vec<String>) -> NetworkPolicy {
    let policy = input.policy();
    let children = render::render(
        &CDTarget::test().with_ips(ips),
        &policy,
        &SecretDigests::new(),
        Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
    )
    .unwrap_or_else(|p| panic!("does not render: {p:#?}"));
    assert!(children.scaled_object().is_some() && children.trigger_authentication().is_some());
    children.network_policy().expect("a NetworkPolicy").clone()
}

type PortKey = (String, i32, Option<i32>);

fn port_keys(ports: &[PortSpec]) -> BTreeSet<PortKey> {
    ports.iter().map(|(protocol, port, end)| ((*protocol).to_owned(), i32::from(*port), end.map(i32::from))).collect()
}

fn rule_ports(rule: &NetworkPolicyEgressRule) -> BTreeSet<PortKey> {
    rule.ports
        .iter()
        .flatten()
        .map(|p| {
            let port = match &p.port {
                Some(IntOrString::Int(n)) => *n,
                other => panic!("port is not a number: {other:?}"),
            };
            (p.protocol.clone().unwrap_or_else(|| "TCP".into()), port, p.end_port)
        })
        .collect()
}

fn rule_cidrs(rule: &NetworkPolicyEgressRule) -> BTreeSet<String> {
    rule.to.iter().flatten().filter_map(|peer| peer.ip_block.as_ref()).map(|b| b.cidr.clone()).collect()
}

/// Checks every invariant of `np`, rendered under `input` for `destinations`.
fn check_network_policy(np: &NetworkPolicy, input: &PolicyInput, destinations: &[Net]) -> Result<(), TestCaseError> {
    let spec = np.spec.as_ref().expect("spec");
    prop_assert_eq!(spec.policy_types.as_deref(), Some(&["Egress".to_owned()][..]));
    prop_assert!(spec.ingress.is_none());
    let selector = spec.pod_selector.as_ref().and_then(|s| s.match_labels.as_ref()).expect("pod selector");
    prop_assert_eq!(selector.get("cdtarget.io/cdtarget").map(String::as_str), Some("agents"));
    let rules = spec.egress.as_deref().unwrap_or_default();

    let tenant: BTreeSet<String> = destinations.iter().map(Net::canonical).collect();
    let platform: BTreeSet<String> = input.platform.iter().map(|(n, _)| n.canonical()).collect();
    let policy_ports = port_keys(&input.ports);
    let dns_ports: BTreeSet<PortKey> = [("UDP".to_owned(), 53, None), ("TCP".to_owned(), 53, None)].into();

    for (i, rule) in rules.iter().enumerate() {
        let to = rule.to.as_deref().unwrap_or_default();
        let ports = rule.ports.as_deref().unwrap_or_default();
        prop_assert!(!to.is_empty(), "rule {} has no destinations", i);
        prop_assert!(!ports.is_empty(), "rule {} has no ports", i);
        for port in ports {
            prop_assert!(port.port.is_some(), "rule {} has a port without a number: {:?}", i, port);
        }
        for peer in to {
            let selects_pods = peer.namespace_selector.is_some() || peer.pod_selector.is_some();
            prop_assert!(peer.ip_block.is_some() != selects_pods, "rule {}: peer {:?}", i, peer);
            if let Some(block) = &peer.ip_block {
                prop_assert!(!block.cidr.is_empty(), "rule {}: empty cidr", i);
                prop_assert!(block.cidr != "0.0.0.0/0" && block.cidr != "::/0", "rule {} opens everything", i);
                prop_assert!(block.except.is_none());
                let parsed = cidr::parse(&block.cidr).map_err(TestCaseError::fail)?;
                prop_assert_eq!(cidr::canonical(&parsed), block.cidr.clone(), "rule {}: not canonical", i);
                prop_assert!(
                    tenant.contains(&block.cidr) || platform.contains(&block.cidr),
                    "rule {}: {} is neither a tenant destination nor a platform target",
                    i,
                    block.cidr
                );
            } else {
                prop_assert!(input.dns, "rule {}: a DNS peer although DNS egress is off", i);
                prop_assert_eq!(rule_ports(rule), dns_ports.clone(), "rule {}: DNS peer on other ports", i);
            }
        }
        // A destination that is only the tenant's is opened on exactly the policy's ports.
        if rule_cidrs(rule).iter().any(|c| tenant.contains(c) && !platform.contains(c)) {
            prop_assert_eq!(rule_ports(rule), policy_ports.clone(), "rule {}: tenant destinations on other ports", i);
        }
    }

    // Every tenant destination appears, canonical, in a rule on the policy's ports.
    let tenant_rules: Vec<&NetworkPolicyEgressRule> =
        rules.iter().filter(|r| rule_ports(r) == policy_ports && rule_cidrs(r) == tenant).collect();
    if tenant.is_empty() {
        // Only DNS and platform rules: one for the DNS pods, and platform targets grouped by their
        // ports (at most one rule per target, at least one per distinct port set).
        let port_sets: BTreeSet<BTreeSet<PortKey>> = input.platform.iter().map(|(_, p)| port_keys(p)).collect();
        let fewest = usize::from(input.dns) + port_sets.len();
        let most = usize::from(input.dns) + input.platform.len();
        prop_assert!(
            (fewest..=most).contains(&rules.len()),
            "{} rules, expected {}..={}: {:#?}",
            rules.len(),
            fewest,
            most,
            rules
        );
        for rule in rules {
            prop_assert!(rule_cidrs(rule).is_subset(&platform), "a rule besides DNS and platform: {:?}", rule);
        }
    } else {
        prop_assert!(!tenant_rules.is_empty(), "no rule holds exactly the destinations {:?}: {:#?}", tenant, rules);
    }
    for (n, _) in &input.platform {
        prop_assert!(rules.iter().any(|r| rule_cidrs(r).contains(&n.canonical())), "platform target {:?} missing", n);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn rendered_network_policy_holds_its_invariants((input, destinations) in policy_and_destinations()) {
        let ips: Vec<String> = destinations.iter().map(|(n, style)| n.written(*style)).collect();
        let nets: Vec<Net> = destinations.iter().map(|(n, _)| *n).collect();
        let np = render_network_policy(&input, ips.clone());
        check_network_policy(&np, &input, &nets)?;
        // Rendering is a function of its input.
        prop_assert_eq!(render_network_policy(&input, ips), np);
    }

    #[test]
    fn without_destinations_only_dns_and_platform_rules_are_rendered(input in policy_input()) {
        let np = render_network_policy(&input, Vec::new());
        check_network_policy(&np, &input, &[])?;
    }

    #[test]
    fn destination_broader_than_the_policy_minimum_is_rejected_at_its_index(
        (input, destinations) in policy_and_destinations(),
        v6 in any::<bool>(),
        addr in any::<u128>(),
        shorter_by in 1u8..=128,
        position in any::<prop::sample::Index>(),
    ) {
        let minimum = if v6 { input.min6 } else { input.min4 };
        prop_assume!(minimum > 0);
        let broad = Net::new(v6, addr, minimum.saturating_sub(shorter_by));
        // Inside those ranges the IPv4 minimum applies (checked as IPv4).
        prop_assume!(!broad.spells_ipv4());
        let mut ips: Vec<String> = destinations.iter().map(|(n, style)| n.written(*style)).collect();
        let at = position.index(ips.len() + 1);
        ips.insert(at, broad.canonical());
        let problems = render::render(&CDTarget::test().with_ips(ips), &input.policy(), &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED)).unwrap_err();
        prop_assert_eq!(problems.len(), 1, "{:#?}", problems);
        prop_assert_eq!(&problems[0].field, &format!("spec.ip[{at}]"));
        // `/0` gets a message of its own: it is never accepted, whatever the policy says.
        let expected = if broad.prefix == 0 { "is every address".to_owned() } else { format!("prefix of /{minimum} or longer") };
        prop_assert!(problems[0].message.contains(&expected), "{}", problems[0].message);
    }

    #[test]
    fn destination_overlapping_a_forbidden_range_is_rejected_at_its_index(
        (input, destinations) in policy_and_destinations(),
        which in any::<prop::sample::Index>(),
        offset in any::<u128>(),
        prefix in any::<u8>(),
        position in any::<prop::sample::Index>(),
    ) {
        let forbidden = input.forbidden[which.index(input.forbidden.len())];
        let minimum = if forbidden.v6 { input.min6 } else { input.min4 };
        // A network inside the forbidden range, as narrow as the policy asks.
        let shortest = forbidden.prefix.max(minimum);
        let prefix = shortest + prefix % (forbidden.bits() - shortest + 1);
        let inside = Net::new(forbidden.v6, forbidden.first() | (offset & host_mask(forbidden.bits(), forbidden.prefix)), prefix);
        prop_assume!(!inside.touches_ipv4_ranges());
        let mut ips: Vec<String> = destinations.iter().map(|(n, style)| n.written(*style)).collect();
        let at = position.index(ips.len() + 1);
        ips.insert(at, inside.canonical());
        let problems = render::render(&CDTarget::test().with_ips(ips), &input.policy(), &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED)).unwrap_err();
        prop_assert_eq!(problems.len(), 1, "{:#?}", problems);
        prop_assert_eq!(&problems[0].field, &format!("spec.ip[{at}]"));
        prop_assert!(problems[0].message.contains("overlaps the forbidden range"), "{}", problems[0].message);
    }
}

// ---------------------------------------------------------------------------------------------
// (3) The hostile tenant: other spellings of an address, oversized address space, URLs.

/// Every IPv6 spelling of an IPv4 address: IPv4-mapped (dotted, hex, expanded, upper case, as a
/// /128) and IPv4-compatible.
fn ipv6_spellings_of(v4: Ipv4Addr) -> Vec<String> {
    let [a, b, c, d] = v4.octets();
    let (high, low) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
    vec![
        format!("::ffff:{v4}"),
        format!("::ffff:{high:x}:{low:x}"),
        format!("0:0:0:0:0:ffff:{high:x}:{low:x}"),
        format!("0000:0000:0000:0000:0000:FFFF:{high:04X}:{low:04X}"),
        format!("::FFFF:{v4}"),
        format!("::ffff:{v4}/128"),
        format!("::{v4}"),
        format!("::{high:x}:{low:x}"),
        format!("0:0:0:0:0:0:{v4}"),
    ]
}

/// An IPv6 address carrying `v4` as 6to4 (`form` 0), as a Teredo client (1, inverted) or as a
/// Teredo server (2); `noise` fills the other bits.
fn tunnel_address(form: u8, v4: u32, noise: u128) -> Ipv6Addr {
    let v4 = u128::from(v4);
    Ipv6Addr::from(match form {
        0 => (0x2002 << 112) | (v4 << 80) | (noise & ((1 << 80) - 1)),
        1 => (0x2001_0000 << 96) | (noise & (u128::from(u64::MAX) << 32)) | (!v4 & 0xffff_ffff),
        _ => (0x2001_0000 << 96) | (v4 << 64) | (noise & u128::from(u64::MAX)),
    })
}

fn policy_from(yaml: &str) -> Policy {
    policy::parse(yaml, "policy.yaml").unwrap_or_else(|p| panic!("policy: {p:#?}"))
}

/// Renders `target` under `policy`, returning the problems (empty when it renders).
fn problems_of(target: &CDTarget, policy: &Policy) -> Vec<cdtarget::problem::Problem> {
    render::render(target, policy, &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
        .err()
        .unwrap_or_default()
}

/// The union of networks of one family as sorted, merged intervals, and its size.
fn union_size(nets: &[Net]) -> u128 {
    let mut intervals: Vec<(u128, u128)> = nets.iter().map(|n| (n.first(), n.last())).collect();
    intervals.sort_unstable();
    let mut total = 0u128;
    let mut current: Option<(u128, u128)> = None;
    for (first, last) in intervals {
        current = match current {
            Some((f, l)) if first <= l.saturating_add(1) => Some((f, l.max(last))),
            Some((f, l)) => {
                total += l - f + 1;
                Some((first, last))
            }
            None => Some((first, last)),
        };
    }
    total + current.map_or(0, |(f, l)| l - f + 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_ipv6_spelling_of_a_forbidden_ipv4_address_is_refused_as_destination_nameserver_and_url_host(
        low in any::<u16>(),
    ) {
        // 169.254.0.0/16 is forbidden by the default policy and the example.
        let v4 = Ipv4Addr::from(0xa9fe_0000 | u32::from(low));
        let policy = policy_from("egress: {allowCustomNameservers: true}\nagents: {allowedUrlHosts: [dev.azure.com, \"169.254.0.0/16\"]}\n");
        for text in ipv6_spellings_of(v4) {
            let problems = problems_of(&CDTarget::test().with_ips([&text]), &policy);
            prop_assert_eq!(problems.len(), 1, "{}: {:#?}", text, problems);
            prop_assert_eq!(&problems[0].field, "spec.ip[0]");
            prop_assert!(problems[0].message.contains("the forbidden range 169.254.0.0/16"), "{}: {}", text, problems[0].message);

            let address = text.trim_end_matches("/128").to_owned();
            let problems = problems_of(&CDTarget::test().with_nameservers([&address]), &policy);
            prop_assert_eq!(problems.len(), 1, "{}: {:#?}", address, problems);
            prop_assert_eq!(&problems[0].field, "spec.dnsConfig.nameservers[0]");
            prop_assert!(problems[0].message.contains("forbidden range 169.254.0.0/16"), "{}: {}", address, problems[0].message);

            let url = format!("https://[{address}]/acme");
            let problems = problems_of(&CDTarget::test().with_url(&url), &policy);
            prop_assert_eq!(problems.len(), 1, "{}: {:#?}", url, problems);
            prop_assert_eq!(&problems[0].field, "spec.config.url");
            prop_assert!(problems[0].message.contains("forbidden range 169.254.0.0/16"), "{}: {}", url, problems[0].message);
        }
        // And the plain IPv4 spelling, as a literal URL host too.
        let problems = problems_of(&CDTarget::test().with_url(&format!("https://{v4}/acme")), &policy);
        prop_assert!(problems.iter().any(|p| p.message.contains("forbidden range 169.254.0.0/16")), "{:#?}", problems);
    }

    #[test]
    fn every_6to4_and_teredo_form_of_a_forbidden_ipv4_address_is_refused_as_destination_nameserver_and_url_host(
        low in any::<u16>(),
        noise in any::<u128>(),
        form in 0u8..3,
    ) {
        // 169.254.0.0/16 is forbidden by the default policy.
        let address = tunnel_address(form, 0xa9fe_0000 | u32::from(low), noise).to_string();
        let policy = policy_from("egress: {allowCustomNameservers: true}\n");
        let ip = problems_of(&CDTarget::test().with_ips([&address]), &policy);
        let nameserver = problems_of(&CDTarget::test().with_nameservers([&address]), &policy);
        let url = problems_of(&CDTarget::test().with_url(&format!("https://[{address}]/acme")), &policy);
        for (problems, field) in [(ip, "spec.ip[0]"), (nameserver, "spec.dnsConfig.nameservers[0]"), (url, "spec.config.url")] {
            prop_assert_eq!(problems.len(), 1, "{}: {:#?}", address, problems);
            prop_assert_eq!(&problems[0].field, field);
            prop_assert!(problems[0].message.contains("(IPv6 tunnelled over IPv4), inside the forbidden range 169.254.0.0/16"), "{}: {}", address, problems[0].message);
        }
    }

    #[test]
    fn a_tunnel_network_is_refused_exactly_when_it_reaches_a_forbidden_range(
        a in any::<u32>(),
        noise in any::<u128>(),
        form in 0u8..3,
        prefix in 0u8..=128,
    ) {
        let net = Net::new(true, u128::from(tunnel_address(form, a, noise)), prefix);
        prop_assume!(prefix > 0 && !net.touches_ipv4_ranges() && !default_nat64().iter().any(|p| p.overlaps(&net)));
        let policy = policy_from("egress: {minPrefixLength: {ipv6: 0}, maxAddressesPerTarget: {ipv6PrefixLength: 0}}\n");
        let problems = problems_of(&CDTarget::test().with_ips([net.canonical()]), &policy);
        let forbidden = default_forbidden();
        if net.tunnels_into(&forbidden) || forbidden.iter().any(|f| f.overlaps(&net)) {
            prop_assert_eq!(problems.len(), 1, "{}: {:#?}", net.canonical(), problems);
            prop_assert!(problems[0].message.contains("the forbidden range"), "{}: {}", net.canonical(), problems[0].message);
        } else {
            prop_assert!(problems.is_empty(), "{} refused: {:#?}", net.canonical(), problems);
        }
    }

    #[test]
    fn ipv6_spellings_of_an_allowed_ipv4_address_are_refused_naming_the_ipv4_form(a in any::<u32>()) {
        let v4 = Ipv4Addr::from(a);
        let net = Net::new(false, u128::from(a), 32);
        let policy = Policy::default();
        prop_assume!(!net.overlaps(&Net::new(false, 0xa9fe_0000, 16)));
        for text in ipv6_spellings_of(v4) {
            let problems = problems_of(&CDTarget::test().with_ips([&text]), &policy);
            prop_assert_eq!(problems.len(), 1, "{}: {:#?}", text, problems);
            let message = &problems[0].message;
            prop_assert!(message.contains(&format!("write the IPv4 form `{v4}")) || message.contains("loopback") || message.contains("unspecified"), "{}: {}", text, message);
        }
    }

    #[test]
    fn any_ipv6_network_containing_the_ipv4_ranges_is_refused(prefix in 1u8..96, mapped in any::<bool>(), noise in any::<u128>()) {
        let range = if mapped { ipv4_mapped() } else { ipv4_compatible() };
        // A network with a shorter prefix around the range, written from any address inside it.
        let net = Net::new(true, range.first() | (noise & host_mask(128, prefix) & !host_mask(128, 96)), prefix);
        prop_assert!(net.first() <= range.first() && range.last() <= net.last());
        let policy = policy_from("egress: {minPrefixLength: {ipv6: 0}, nat64Prefixes: []}\n");
        let problems = problems_of(&CDTarget::test().with_ips([net.canonical()]), &policy);
        prop_assert_eq!(problems.len(), 1, "{}: {:#?}", net.canonical(), problems);
        prop_assert!(problems[0].message.contains("whose addresses reach IPv4 destinations"), "{}: {}", net.canonical(), problems[0].message);
    }

    #[test]
    fn addresses_behind_a_nat64_prefix_are_refused_unless_the_policy_drops_it(low in any::<u32>(), well_known in any::<bool>()) {
        let addr = if well_known { (0x0064_ff9bu128 << 96) | u128::from(low) } else { (0x0064_ff9b_0001u128 << 80) | u128::from(low) };
        let text = Ipv6Addr::from(addr).to_string();
        let problems = problems_of(&CDTarget::test().with_ips([&text]), &Policy::default());
        prop_assert_eq!(problems.len(), 1, "{}: {:#?}", text, problems);
        prop_assert!(problems[0].message.contains("overlaps the NAT64 prefix"), "{}: {}", text, problems[0].message);
        let without = policy_from("egress: {nat64Prefixes: []}\n");
        prop_assert!(problems_of(&CDTarget::test().with_ips([&text]), &without).is_empty(), "{} refused without NAT64 prefixes", text);
    }

    #[test]
    fn deduplication_is_order_independent_and_keeps_the_first_spelling(
        nets in prop::collection::vec((any_net(24, 64), 0u8..4), 1..12),
        repeats in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        seed in any::<u64>(),
    ) {
        let input = PolicyInput {
            ports: vec![("TCP", 443, None)], min4: 24, min6: 64, forbidden: default_forbidden(), dns: false, platform: Vec::new(),
        };
        let nets: Vec<(Net, u8)> = nets.into_iter().filter(|(n, _)| input.allows(n)).collect();
        prop_assume!(!nets.is_empty());
        // The list with repeats in other spellings, then the same list shuffled.
        let mut ips: Vec<(Net, u8)> = nets.clone();
        ips.extend(repeats.iter().map(|i| { let (n, style) = nets[i.index(nets.len())]; (n, style + 1) }));
        let mut shuffled = ips.clone();
        let mut state = seed;
        for i in (1..shuffled.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (state >> 33) as usize % (i + 1));
        }
        let rendered = |list: &[(Net, u8)]| -> Vec<String> {
            let np = render_network_policy(&input, list.iter().map(|(n, style)| n.written(*style)).collect());
            let rules = np.spec.unwrap().egress.unwrap();
            rules[0].to.iter().flatten().map(|p| p.ip_block.as_ref().unwrap().cidr.clone()).collect()
        };
        let first_seen = |list: &[(Net, u8)]| -> Vec<String> {
            let mut seen = BTreeSet::new();
            list.iter().map(|(n, _)| n.canonical()).filter(|c| seen.insert(c.clone())).collect()
        };
        let (a, b) = (rendered(&ips), rendered(&shuffled));
        prop_assert_eq!(&a, &first_seen(&ips));
        prop_assert_eq!(&b, &first_seen(&shuffled));
        prop_assert_eq!(a.iter().collect::<BTreeSet<_>>(), b.iter().collect::<BTreeSet<_>>());
    }

    #[test]
    fn the_union_of_the_destinations_is_capped_per_family(
        v4 in prop::collection::vec(net(false, 20..=32), 1..8),
        v6 in prop::collection::vec(net(true, 48..=128), 0..4),
        cap4 in 0u64..=40_000,
        cap6 in 40u8..=128,
    ) {
        let forbidden = default_forbidden();
        let clear = |n: &Net| !forbidden.iter().any(|f| f.overlaps(n)) && !n.touches_ipv4_ranges() && !n.tunnels_into(&forbidden) && !default_nat64().iter().any(|p| p.overlaps(n));
        let v4: Vec<Net> = v4.into_iter().filter(clear).collect();
        let v6: Vec<Net> = v6.into_iter().filter(clear).collect();
        let policy = policy_from(&format!(
            "egress: {{minPrefixLength: {{ipv4: 20, ipv6: 48}}, maxAddressesPerTarget: {{ipv4: {cap4}, ipv6PrefixLength: {cap6}}}}}\n"
        ));
        let ips: Vec<String> = v4.iter().chain(&v6).map(Net::canonical).collect();
        let problems = problems_of(&CDTarget::test().with_ips(&ips), &policy);
        let over4 = union_size(&v4) > u128::from(cap4);
        let over6 = union_size(&v6) > 1u128 << (128 - u32::from(cap6));
        let reported4 = problems.iter().any(|p| p.field == "spec.ip" && p.message.contains("egress.maxAddressesPerTarget.ipv4"));
        let reported6 = problems.iter().any(|p| p.field == "spec.ip" && p.message.contains("egress.maxAddressesPerTarget.ipv6PrefixLength"));
        prop_assert_eq!(reported4, over4, "{:?}: {:#?}", ips, problems);
        prop_assert_eq!(reported6, over6, "{:?}: {:#?}", ips, problems);
        prop_assert_eq!(problems.len(), usize::from(over4) + usize::from(over6), "{:#?}", problems);
    }

    #[test]
    fn the_address_check_never_panics_and_accepts_nothing_forbidden_in_any_spelling(
        text in prop_oneof![
            "[0-9a-fA-F:./]{0,50}",
            (any_net(0, 0), 0u8..4).prop_map(|(n, style)| n.written(style)),
            (0u16..=u16::MAX, 0usize..9).prop_map(|(low, i)| ipv6_spellings_of(Ipv4Addr::from(0xa9fe_0000 | u32::from(low)))[i].clone()),
            (any::<u32>(), 0usize..9).prop_map(|(a, i)| ipv6_spellings_of(Ipv4Addr::from(a))[i].clone()),
            any::<u32>().prop_map(|a| format!("64:ff9b::{}", Ipv4Addr::from(a))),
            (any::<u32>(), any::<u128>(), 0u8..3).prop_map(|(a, noise, form)| tunnel_address(form, a, noise).to_string()),
            (any::<u32>(), any::<u128>(), 0u8..3, 0u8..=128).prop_map(|(a, noise, form, prefix)| Net::new(true, u128::from(tunnel_address(form, a, noise)), prefix).canonical()),
        ],
        purpose in prop_oneof![Just(Use::Destination), Just(Use::Nameserver), Just(Use::UrlHost)],
    ) {
        let policy = Policy::default();
        let rules = policy.address_rules();
        if let Ok(net) = address::check(&text, purpose, &rules) {
            prop_assert_eq!(net.trunc(), net);
            prop_assert!(!policy.forbidden.iter().any(|f| cidr::overlaps(f, &net)), "{} -> {}", text, net);
            prop_assert!(!policy.nat64_prefixes.iter().any(|f| cidr::overlaps(f, &net)), "{} -> {}", text, net);
            if let IpNet::V6(v6) = net {
                prop_assert!(v6.addr().to_ipv4().is_none(), "{} is an IPv4 spelling", text);
                prop_assert!(!v6.contains(&"::ffff:0:0/96".parse::<Ipv6Net>().unwrap()));
                let as_net = Net::new(true, u128::from(v6.network()), v6.prefix_len());
                prop_assert!(!as_net.tunnels_into(&default_forbidden()), "{} tunnels into a forbidden range", text);
            }
            // The canonical text is accepted as itself.
            prop_assert_eq!(address::check(&cidr::canonical(&net), Use::Destination, &Rules { min_prefix_v4: 0, min_prefix_v6: 0, ..rules }), Ok(net));
        }
    }

    #[test]
    fn an_accepted_url_is_canonical_https_on_an_allowed_host(
        host in prop_oneof![
            Just("dev.azure.com".to_owned()),
            "[a-z0-9%.@:\\[\\]-]{0,24}",
            "[a-z]{1,8}\\.visualstudio\\.com",
            "[a-zA-Z0-9%.]{0,12}\\.?dev\\.azure\\.com",
        ],
        tail in "(/[a-zA-Z0-9%@.:\\\\?#-]{0,12}){0,2}",
        scheme in prop_oneof![Just("https://"), Just("http://"), Just("HTTPS://"), Just("https:\\\\"), Just("")],
    ) {
        let text = format!("{scheme}{host}{tail}");
        let policy = Policy::default();
        if let Ok(url) = outbound::check_url(&text, &policy.allowed_url_hosts, &policy.address_rules()) {
            prop_assert_eq!(url.scheme(), "https");
            prop_assert!(url.username().is_empty() && url.password().is_none());
            prop_assert!(url.query().is_none() && url.fragment().is_none());
            let host = url.host_str().unwrap_or_default();
            let one_label = host.strip_suffix(".visualstudio.com").is_some_and(|l| !l.is_empty() && !l.contains('.'));
            prop_assert!(host == "dev.azure.com" || one_label, "{} reached host {}", text, host);
            prop_assert!(url.as_str() == text || url.as_str() == format!("{text}/"), "{} is not canonical ({})", text, url);
        }
    }
}
