//! The hostile tenant against the egress guardrails (issue #10, points 3 and 4): other
//! spellings of an address, networks around the IPv4 ranges of IPv6, NAT64, custom nameservers,
//! oversized lists and address space, and URLs that would make the agents or KEDA send the
//! tenant's token elsewhere. Each case names the problem it must get; nothing is rendered.
//!
//! Cases run against `examples/platform/policy.yaml` unless a case table says otherwise.

use cdtarget::api::keda::KedaVersion;
use cdtarget::policy::{MaxAddresses, Policy};
use cdtarget::render::{self, Scaling, SecretDigests};

use super::cases::{Case, PolicyCase, one_file, policy_at, policy_case, run_all, run_policy_cases, target_at};
use super::support::{self, example_policy, example_policy_with, valid_plus, with_ips, with_trigger, with_url};

/// The example policy, but custom nameservers are allowed.
fn nameservers_allowed() -> Policy {
    example_policy_with("allowCustomNameservers: false", "allowCustomNameservers: true")
}

/// A YAML flow list of `n` quoted strings made by `item`.
fn list_of(n: usize, item: impl Fn(usize) -> String) -> String {
    format!("[{}]", (0..n).map(|i| format!("{:?}", item(i))).collect::<Vec<_>>().join(", "))
}

fn address_cases() -> Vec<Case> {
    vec![
        one_file(
            "ipv4_mapped_spelling_of_the_metadata_endpoint_is_refused_as_forbidden",
            with_ips(r#"["::ffff:169.254.169.254"]"#),
            vec![target_at(
                "spec.ip[0]",
                "`::ffff:169.254.169.254` (IPv4-mapped IPv6 for 169.254.169.254) overlaps the forbidden range 169.254.0.0/16",
            )],
        ),
        one_file(
            "hex_ipv4_mapped_spelling_of_the_metadata_endpoint_is_refused_as_forbidden",
            with_ips(r#"["0:0:0:0:0:FFFF:A9FE:A9FE"]"#),
            vec![target_at(
                "spec.ip[0]",
                "(IPv4-mapped IPv6 for 169.254.169.254) overlaps the forbidden range 169.254.0.0/16",
            )],
        ),
        one_file(
            "ipv4_compatible_spelling_of_the_service_range_is_refused_as_forbidden",
            with_ips(r#"["::10.96.0.1"]"#),
            vec![target_at(
                "spec.ip[0]",
                "(IPv4-compatible IPv6 for 10.96.0.1) overlaps the forbidden range 10.96.0.0/12",
            )],
        ),
        one_file(
            "ipv4_mapped_network_is_checked_as_the_ipv4_network_it_spells",
            with_ips(r#"["::ffff:10.96.0.0/120"]"#),
            vec![target_at(
                "spec.ip[0]",
                "(IPv4-mapped IPv6 for 10.96.0.0/24) overlaps the forbidden range 10.96.0.0/12",
            )],
        ),
        one_file(
            "ipv4_compatible_spelling_of_an_allowed_address_names_the_ipv4_form",
            with_ips(r#"["::10.20.0.1"]"#),
            vec![target_at(
                "spec.ip[0]",
                "is an IPv4-compatible IPv6 address; write the IPv4 form `10.20.0.1` instead",
            )],
        ),
        one_file(
            "ipv6_network_containing_the_mapped_range_without_starting_in_it_is_refused",
            with_ips(r#"["::/80"]"#),
            vec![target_at(
                "spec.ip[0]",
                "`::/80` contains the IPv4-mapped IPv6 range ::ffff:0:0/96, whose addresses reach IPv4 destinations",
            )],
        ),
        one_file(
            "ipv6_network_ending_in_the_mapped_range_is_refused",
            with_ips(r#"["::fffe:0:0/95"]"#),
            vec![target_at("spec.ip[0]", "contains the IPv4-mapped IPv6 range ::ffff:0:0/96")],
        ),
        one_file(
            "ipv6_network_containing_the_compatible_range_is_refused",
            with_ips(r#"["::/64"]"#),
            vec![target_at("spec.ip[0]", "contains the IPv4-mapped IPv6 range ::ffff:0:0/96")],
        ),
        one_file(
            "ipv6_loopback_is_refused",
            with_ips(r#"["::1"]"#),
            vec![target_at("spec.ip[0]", "`::1` is the IPv6 loopback address")],
        ),
        one_file(
            "address_behind_the_well_known_nat64_prefix_is_refused_naming_its_ipv4",
            with_ips(r#"["64:ff9b::a9fe:a9fe"]"#),
            vec![target_at(
                "spec.ip[0]",
                "overlaps the NAT64 prefix 64:ff9b::/96: through the translator it reaches IPv4 addresses (here 169.254.169.254)",
            )],
        ),
        one_file(
            "network_in_the_local_use_nat64_prefix_is_refused",
            with_ips(r#"["64:ff9b:1:abcd::/64"]"#),
            vec![target_at("spec.ip[0]", "overlaps the NAT64 prefix 64:ff9b:1::/48")],
        ),
        one_file(
            "six_to_four_address_of_the_metadata_endpoint_is_refused_as_forbidden",
            with_ips(r#"["2002:a9fe:a9fe::1"]"#),
            vec![target_at(
                "spec.ip[0]",
                "`2002:a9fe:a9fe::1` reaches 169.254.169.254 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), inside the forbidden range 169.254.0.0/16; choose a destination outside it",
            )],
        ),
        one_file(
            "six_to_four_network_of_the_service_range_is_refused_as_forbidden",
            with_ips(r#"["2002:a60:1:abcd::/64"]"#),
            vec![target_at(
                "spec.ip[0]",
                "reaches 10.96.0.1 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), inside the forbidden range 10.96.0.0/12",
            )],
        ),
        one_file(
            "teredo_address_whose_client_is_the_metadata_endpoint_is_refused_as_forbidden",
            with_ips(r#"["2001:0:cb00:7107:8000:0:5601:5601"]"#),
            vec![target_at(
                "spec.ip[0]",
                "reaches 169.254.169.254 (the Teredo client, the last 32 bits inverted) through the Teredo range 2001::/32 (IPv6 tunnelled over IPv4), inside the forbidden range 169.254.0.0/16",
            )],
        ),
        one_file(
            "teredo_address_whose_server_is_in_the_service_range_is_refused_as_forbidden",
            with_ips(r#"["2001:0:a60:1:8000:0:f4ff:fff8"]"#),
            vec![target_at(
                "spec.ip[0]",
                "reaches 10.96.0.1 (the Teredo server, bits 32–63) through the Teredo range 2001::/32",
            )],
        ),
        one_file(
            "teredo_network_leaving_the_client_open_is_refused",
            with_ips(r#"["2001:0:cb00:7107::/64"]"#),
            vec![target_at(
                "spec.ip[0]",
                "reaches every IPv4 address (the Teredo client, the last 32 bits inverted) through the Teredo range 2001::/32 (IPv6 tunnelled over IPv4), overlapping the forbidden range 169.254.0.0/16",
            )],
        ),
        one_file(
            "more_ip_entries_than_the_bound_are_refused_once_not_per_entry",
            with_ips(&list_of(257, |i| {
                if i == 3 { "not-an-address".into() } else { format!("10.20.{}.{}", i / 250, i % 250) }
            })),
            vec![target_at(
                "spec.ip",
                "has 257 entries; at most 256 entries are accepted; cover neighbouring addresses with one CIDR",
            )],
        ),
        one_file(
            "oversized_ip_entry_is_refused_without_being_repeated",
            with_ips(&list_of(1, |_| "1".repeat(5000))),
            vec![target_at("spec.ip[0]", "is 5000 characters long; an address or CIDR has at most 64")],
        ),
        one_file(
            "destinations_opening_more_ipv4_addresses_than_the_cap_are_refused",
            with_ips(&list_of(17, |i| format!("10.20.{i}.0/24"))),
            vec![target_at(
                "spec.ip",
                "the IPv4 destinations open 4352 addresses together; the platform policy allows at most 4096 per CDTarget (egress.maxAddressesPerTarget.ipv4)",
            )],
        ),
    ]
}

/// Cases under a policy that lets IPv6 destinations be as broad as `/48`.
fn broad_ipv6_cases() -> Vec<Case> {
    vec![one_file(
        "ipv6_destinations_spanning_more_than_the_cap_are_refused",
        with_ips(r#"["2001:db8::/48"]"#),
        vec![target_at(
            "spec.ip",
            "the IPv6 destinations open about 2^80 addresses together, more than one /56 holds (2^72), the most the platform policy allows per CDTarget (egress.maxAddressesPerTarget.ipv6PrefixLength)",
        )],
    )]
}

/// Cases under a policy that sets no minimum for IPv6 destinations and no cap: tunnel networks
/// covering part of a forbidden range, or all of IPv4.
fn broad_tunnel_cases() -> Vec<Case> {
    vec![
        one_file(
            "six_to_four_network_covering_the_service_range_is_refused",
            with_ips(r#"["2002:a60::/28"]"#),
            vec![target_at(
                "spec.ip[0]",
                "`2002:a60::/28` reaches 10.96.0.0/12 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), inside the forbidden range 10.96.0.0/12",
            )],
        ),
        one_file(
            "six_to_four_network_covering_part_of_the_service_range_is_refused",
            with_ips(r#"["2002:a00::/24"]"#),
            vec![target_at(
                "spec.ip[0]",
                "reaches 10.0.0.0/8 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), overlapping the forbidden range 10.96.0.0/12",
            )],
        ),
        one_file(
            "network_containing_the_six_to_four_range_is_refused",
            with_ips(r#"["2000::/3"]"#),
            vec![target_at("spec.ip[0]", "reaches every IPv4 address through the 6to4 range 2002::/16")],
        ),
        one_file(
            "the_whole_teredo_range_is_refused",
            with_ips(r#"["2001::/32"]"#),
            vec![target_at(
                "spec.ip[0]",
                "reaches every IPv4 address (the Teredo server, bits 32–63) through the Teredo range 2001::/32",
            )],
        ),
    ]
}

/// Nameserver cases under the example policy, which allows no custom nameservers.
fn nameserver_refused_cases() -> Vec<Case> {
    vec![
        one_file(
            "custom_nameservers_are_refused_unless_the_policy_allows_them",
            valid_plus("  dnsConfig:\n    nameservers: [\"10.0.0.10\"]\n"),
            vec![target_at(
                "spec.dnsConfig.nameservers",
                "custom nameservers are not allowed by the platform policy (egress.allowCustomNameservers is false)",
            )],
        ),
        one_file(
            "dns_policy_none_cannot_be_used_without_allowed_nameservers",
            valid_plus("  dnsPolicy: None\n  dnsConfig:\n    nameservers: []\n"),
            vec![target_at(
                "spec.dnsConfig.nameservers",
                "the platform policy allows no custom nameservers (egress.allowCustomNameservers); choose another dnsPolicy",
            )],
        ),
    ]
}

/// Nameserver cases under a policy that allows custom nameservers: they pass the address check.
fn nameserver_allowed_cases() -> Vec<Case> {
    vec![
        one_file(
            "nameserver_that_is_not_an_address_is_rejected",
            valid_plus("  dnsPolicy: None\n  dnsConfig:\n    nameservers: [\"10.0.0.10\", dns.example]\n"),
            vec![target_at("spec.dnsConfig.nameservers[1]", "is not an IP address; expected e.g. `10.0.0.10`")],
        ),
        one_file(
            "nameserver_in_forbidden_range_is_rejected",
            valid_plus("  dnsConfig:\n    nameservers: [\"169.254.169.254\"]\n"),
            vec![target_at(
                "spec.dnsConfig.nameservers[0]",
                "forbidden range 169.254.0.0/16; choose another nameserver",
            )],
        ),
        one_file(
            "ipv4_mapped_nameserver_is_checked_as_ipv4",
            valid_plus("  dnsConfig:\n    nameservers: [\"::ffff:169.254.169.254\"]\n"),
            vec![target_at(
                "spec.dnsConfig.nameservers[0]",
                "`::ffff:169.254.169.254` (IPv4-mapped IPv6 for 169.254.169.254) is in the forbidden range 169.254.0.0/16",
            )],
        ),
        one_file(
            "ipv4_compatible_nameserver_is_checked_as_ipv4",
            valid_plus("  dnsConfig:\n    nameservers: [\"::a9fe:a9fe\"]\n"),
            vec![target_at("spec.dnsConfig.nameservers[0]", "is in the forbidden range 169.254.0.0/16")],
        ),
        one_file(
            "ipv4_mapped_nameserver_outside_forbidden_ranges_names_the_ipv4_form",
            valid_plus("  dnsConfig:\n    nameservers: [\"::ffff:10.53.0.10\"]\n"),
            vec![target_at("spec.dnsConfig.nameservers[0]", "write the IPv4 form `10.53.0.10` instead")],
        ),
        one_file(
            "six_to_four_nameserver_of_the_metadata_endpoint_is_refused",
            valid_plus("  dnsConfig:\n    nameservers: [\"2002:a9fe:a9fe::53\"]\n"),
            vec![target_at(
                "spec.dnsConfig.nameservers[0]",
                "reaches 169.254.169.254 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), inside the forbidden range 169.254.0.0/16; choose another nameserver",
            )],
        ),
        one_file(
            "teredo_nameserver_whose_client_is_the_metadata_endpoint_is_refused",
            valid_plus("  dnsConfig:\n    nameservers: [\"2001:0:cb00:7107:8000:0:5601:5601\"]\n"),
            vec![target_at("spec.dnsConfig.nameservers[0]", "(the Teredo client, the last 32 bits inverted)")],
        ),
        one_file(
            "nameserver_behind_nat64_is_refused",
            valid_plus("  dnsConfig:\n    nameservers: [\"64:ff9b::a9fe:a9fe\"]\n"),
            vec![target_at("spec.dnsConfig.nameservers[0]", "overlaps the NAT64 prefix 64:ff9b::/96")],
        ),
        one_file(
            "nameserver_network_is_refused",
            valid_plus("  dnsConfig:\n    nameservers: [\"10.53.0.0/24\"]\n"),
            vec![target_at("spec.dnsConfig.nameservers[0]", "is not an IP address")],
        ),
        one_file(
            "more_than_three_nameservers_are_refused",
            valid_plus("  dnsConfig:\n    nameservers: [\"10.53.0.1\", \"10.53.0.2\", \"10.53.0.3\", \"10.53.0.4\"]\n"),
            vec![target_at(
                "spec.dnsConfig.nameservers",
                "has 4 entries; at most 3 entries are accepted (Kubernetes' limit)",
            )],
        ),
    ]
}

fn list_cases() -> Vec<Case> {
    let env: String = (0..129).map(|i| format!("    - {{name: V{i}, value: x}}\n")).collect();
    let labels: String = (0..33).map(|i| format!("    l{i}: v\n")).collect();
    let meta: String = (0..33).map(|i| format!("    key{i}: v\n")).collect();
    let requests: String = (0..17).map(|i| format!("      example.com/r{i}: \"1\"\n")).collect();
    vec![
        one_file(
            "more_env_entries_than_the_bound_are_refused",
            valid_plus(&format!("  env:\n{env}")),
            vec![target_at("spec.env", "has 129 entries; at most 128 entries are accepted")],
        ),
        one_file(
            "env_replacing_azp_url_is_refused",
            valid_plus("  env:\n    - {name: AZP_URL, value: \"http://169.254.169.254\"}\n"),
            vec![target_at(
                "spec.env[0].name",
                "`AZP_URL` is rendered from config.url, which is checked against the platform's allowed hosts; set config.url instead",
            )],
        ),
        one_file(
            "env_replacing_azp_url_from_a_config_map_is_refused",
            valid_plus("  env:\n    - name: AZP_URL\n      valueFrom: {configMapKeyRef: {name: urls, key: evil}}\n"),
            vec![target_at("spec.env[0].name", "`AZP_URL` is rendered from config.url")],
        ),
        one_file(
            "more_additional_selector_labels_than_the_bound_are_refused",
            valid_plus(&format!("  additionalSelector:\n{labels}")),
            vec![target_at("spec.additionalSelector", "has 33 entries; at most 32 entries are accepted")],
        ),
        one_file(
            "more_image_pull_secrets_than_the_bound_are_refused",
            valid_plus(&format!(
                "  imagePullSecrets:\n{}",
                (0..17).map(|i| format!("    - name: pull-{i}\n")).collect::<String>()
            )),
            vec![target_at("spec.imagePullSecrets", "has 17 entries; at most 16 entries are accepted")],
        ),
        one_file(
            "more_trigger_meta_keys_than_the_bound_are_refused_once",
            valid_plus(&format!("  triggerMeta:\n{meta}")),
            vec![target_at("spec.triggerMeta", "has 33 entries; at most 32 entries are accepted")],
        ),
        one_file(
            "more_resource_requests_than_the_bound_are_refused",
            valid_plus(&format!("  agentResources:\n    requests:\n{requests}")),
            vec![target_at("spec.agentResources.requests", "has 17 entries; at most 16 entries are accepted")],
        ),
        one_file(
            "resource_claims_are_refused",
            valid_plus("  agentResources:\n    claims: [{name: gpu}]\n"),
            vec![target_at(
                "spec.agentResources.claims",
                "is not supported: the agent pod declares no resource claims",
            )],
        ),
        one_file(
            "more_dns_searches_than_kubernetes_allows_are_refused",
            valid_plus(&format!("  dnsConfig:\n    searches: {}\n", list_of(33, |i| format!("d{i}.example")))),
            vec![target_at(
                "spec.dnsConfig.searches",
                "has 33 entries; at most 32 entries are accepted (Kubernetes' limit)",
            )],
        ),
        one_file(
            "dns_search_that_is_not_a_domain_is_refused",
            valid_plus("  dnsConfig:\n    searches: [\"corp.example.\", \"Bad_Domain\"]\n"),
            vec![target_at("spec.dnsConfig.searches[1]", "(expected a DNS domain such as `corp.example.com`)")],
        ),
        one_file(
            "more_dns_options_than_the_bound_are_refused",
            valid_plus(&format!(
                "  dnsConfig:\n    options: [{}]\n",
                (0..17).map(|i| format!("{{name: o{i}}}")).collect::<Vec<_>>().join(", ")
            )),
            vec![target_at("spec.dnsConfig.options", "has 17 entries; at most 16 entries are accepted")],
        ),
        one_file(
            "dns_option_without_a_name_is_refused",
            valid_plus("  dnsConfig:\n    options: [{value: \"2\"}]\n"),
            vec![target_at(
                "spec.dnsConfig.options[0].name",
                "is required; expected a resolver option such as `ndots`",
            )],
        ),
    ]
}

fn url_cases() -> Vec<Case> {
    vec![
        one_file(
            "plain_http_url_is_refused",
            with_url("http://dev.azure.com/acme"),
            vec![target_at(
                "spec.config.url",
                "is not an https URL; the token is sent to it, so only https:// is accepted",
            )],
        ),
        one_file(
            "url_with_user_info_is_refused_without_repeating_it",
            with_url("https://pat:s3cret@dev.azure.com/acme"),
            vec![target_at(
                "spec.config.url",
                "`https://***@dev.azure.com/acme` carries user info (before '@'); remove it",
            )],
        ),
        one_file(
            "url_on_a_host_outside_the_allow_list_is_refused",
            with_url("https://collector.evil.example/acme"),
            vec![target_at(
                "spec.config.url",
                "host `collector.evil.example` is not allowed; the platform policy allows: dev.azure.com, *.visualstudio.com",
            )],
        ),
        one_file(
            "url_on_a_lookalike_host_is_refused",
            with_url("https://dev.azure.com.evil.example/acme"),
            vec![target_at("spec.config.url", "host `dev.azure.com.evil.example` is not allowed")],
        ),
        one_file(
            "wildcard_host_matches_one_label_only",
            with_url("https://acme.evil.visualstudio.com"),
            vec![target_at("spec.config.url", "host `acme.evil.visualstudio.com` is not allowed")],
        ),
        one_file(
            "url_at_the_metadata_endpoint_is_refused_as_forbidden",
            with_url("https://169.254.169.254/acme"),
            vec![target_at("spec.config.url", "`169.254.169.254` is in the forbidden range 169.254.0.0/16")],
        ),
        one_file(
            "url_at_the_metadata_endpoint_written_as_a_number_is_refused_as_forbidden",
            with_url("https://2852039166/acme"),
            vec![target_at("spec.config.url", "`169.254.169.254` is in the forbidden range 169.254.0.0/16")],
        ),
        one_file(
            "url_at_the_metadata_endpoint_written_in_hex_is_refused_as_forbidden",
            with_url("https://0xa9.0xfe.0xa9.0xfe/acme"),
            vec![target_at("spec.config.url", "`169.254.169.254` is in the forbidden range 169.254.0.0/16")],
        ),
        one_file(
            "url_at_an_ipv4_mapped_metadata_endpoint_is_refused_as_forbidden",
            with_url("https://[::ffff:169.254.169.254]/acme"),
            vec![target_at(
                "spec.config.url",
                "(IPv4-mapped IPv6 for 169.254.169.254) is in the forbidden range 169.254.0.0/16",
            )],
        ),
        one_file(
            "url_at_a_six_to_four_metadata_endpoint_is_refused_as_forbidden",
            with_url("https://[2002:a9fe:a9fe::1]/acme"),
            vec![target_at(
                "spec.config.url",
                "reaches 169.254.169.254 through the 6to4 range 2002::/16 (IPv6 tunnelled over IPv4), inside the forbidden range 169.254.0.0/16; use the service's host name",
            )],
        ),
        one_file(
            "url_at_a_teredo_server_in_the_service_range_is_refused_as_forbidden",
            with_trigger("organizationURL", "https://[2001:0:a60:1:8000:0:f4ff:fff8]/acme"),
            vec![target_at("spec.triggerMeta.organizationURL", "(the Teredo server, bits 32–63)")],
        ),
        one_file(
            "url_at_an_unlisted_literal_address_is_refused",
            with_url("https://20.1.2.3/acme"),
            vec![target_at(
                "spec.config.url",
                "the literal address 20.1.2.3 is not allowed as a host; use the service's host name",
            )],
        ),
        one_file(
            "url_with_a_percent_encoded_host_is_refused_as_not_canonical",
            with_url("https://dev%2eazure.com/acme"),
            vec![target_at("spec.config.url", "is not written in canonical form; write `https://dev.azure.com/acme`")],
        ),
        one_file(
            "url_with_backslashes_is_judged_by_the_host_a_browser_parser_sees",
            with_url("https:\\\\collector.evil.example\\@dev.azure.com/acme"),
            vec![target_at("spec.config.url", "host `collector.evil.example` is not allowed")],
        ),
        one_file(
            "url_with_the_default_port_spelled_out_is_refused_as_not_canonical",
            with_url("https://dev.azure.com:443/acme"),
            vec![target_at("spec.config.url", "write `https://dev.azure.com/acme`")],
        ),
        one_file(
            "url_with_a_query_is_refused",
            with_url("https://dev.azure.com/acme?api-version=7.1"),
            vec![target_at("spec.config.url", "has a query or fragment; expected the organization URL alone")],
        ),
        one_file(
            "oversized_url_is_refused_without_being_repeated",
            with_url(&format!("https://dev.azure.com/{}", "a".repeat(2100))),
            vec![target_at("spec.config.url", "is 2122 bytes long; a URL here has at most 2048")],
        ),
        one_file(
            "trigger_organization_url_at_the_metadata_endpoint_is_refused",
            with_trigger("organizationURL", "https://169.254.169.254/acme"),
            vec![target_at("spec.triggerMeta.organizationURL", "is in the forbidden range 169.254.0.0/16")],
        ),
        one_file(
            "trigger_organization_url_over_http_is_refused",
            with_trigger("organizationURL", "http://dev.azure.com/acme"),
            vec![target_at("spec.triggerMeta.organizationURL", "is not an https URL")],
        ),
        one_file(
            "trigger_organization_url_on_another_host_is_refused",
            with_trigger("organizationURL", "https://collector.evil.example/acme"),
            vec![target_at("spec.triggerMeta.organizationURL", "host `collector.evil.example` is not allowed")],
        ),
        one_file(
            "trigger_organization_url_from_another_variable_is_refused",
            valid_plus(
                "  triggerMeta:\n    organizationURLFromEnv: EVIL_URL\n  env:\n    - {name: EVIL_URL, value: \"http://169.254.169.254\"}\n",
            ),
            vec![target_at(
                "spec.triggerMeta.organizationURLFromEnv",
                "`EVIL_URL` is not accepted: KEDA would call the URL in that variable with the token; only `AZP_URL`",
            )],
        ),
    ]
}

fn policy_cases() -> Vec<PolicyCase> {
    vec![
        policy_case(
            "nat64_prefix_that_is_ipv4_is_rejected",
            "egress:\n  nat64Prefixes: [\"10.0.0.0/8\"]\n",
            vec![policy_at(
                "egress.nat64Prefixes[0]",
                "is IPv4; a NAT64 prefix is an IPv6 network such as `64:ff9b::/96`",
            )],
        ),
        policy_case(
            "nat64_prefix_that_is_not_a_cidr_is_rejected",
            "egress:\n  nat64Prefixes: [\"64:ff9b::/129\"]\n",
            vec![policy_at("egress.nat64Prefixes[0]", "is not a CIDR")],
        ),
        policy_case(
            "address_cap_out_of_range_is_rejected",
            "egress:\n  maxAddressesPerTarget: {ipv4: 4294967297, ipv6PrefixLength: 129}\n",
            vec![
                policy_at("egress.maxAddressesPerTarget.ipv4", "expected a number of addresses from 0 to 4294967296"),
                policy_at("egress.maxAddressesPerTarget.ipv6PrefixLength", "expected a prefix length 0–128"),
            ],
        ),
        policy_case(
            "allow_custom_nameservers_of_the_wrong_type_is_rejected",
            "egress:\n  allowCustomNameservers: \"yes\"\n",
            vec![policy_at("egress.allowCustomNameservers", "expected a boolean")],
        ),
        policy_case(
            "url_host_wildcard_of_a_top_level_domain_is_rejected",
            "agents:\n  allowedUrlHosts: [\"*.com\"]\n",
            vec![policy_at(
                "agents.allowedUrlHosts[0]",
                "is too broad; a wildcard needs at least two labels after `*.`",
            )],
        ),
        policy_case(
            "url_host_pattern_that_is_a_url_or_upper_case_is_rejected",
            "agents:\n  allowedUrlHosts: [\"https://dev.azure.com\", \"Dev.Azure.com\", \"*\"]\n",
            vec![
                policy_at("agents.allowedUrlHosts[0]", "is not a host name pattern"),
                policy_at("agents.allowedUrlHosts[1]", "is not a host name pattern"),
                policy_at("agents.allowedUrlHosts[2]", "is not a host name pattern"),
            ],
        ),
        policy_case(
            "url_host_network_of_every_address_is_rejected",
            "agents:\n  allowedUrlHosts: [\"0.0.0.0/0\"]\n",
            vec![policy_at("agents.allowedUrlHosts[0]", "is every address")],
        ),
        policy_case(
            "platform_target_spelled_as_ipv4_mapped_ipv6_is_rejected",
            "egress:\n  platformTargets: [{cidr: \"::ffff:10.0.0.0/104\", ports: [{port: 443}]}]\n",
            vec![policy_at("egress.platformTargets[0].cidr", "write the IPv4 form `10.0.0.0/8` instead")],
        ),
        policy_case(
            "platform_target_containing_the_mapped_range_is_rejected",
            "egress:\n  platformTargets: [{cidr: \"::/64\", ports: [{port: 443}]}]\n",
            vec![policy_at("egress.platformTargets[0].cidr", "contains the IPv4-mapped IPv6 range ::ffff:0:0/96")],
        ),
    ]
}

#[test]
fn every_other_spelling_of_a_forbidden_or_ipv4_address_is_refused() {
    run_all(&address_cases(), &example_policy());
    run_all(&broad_ipv6_cases(), &example_policy_with("ipv6: 64", "ipv6: 48"));
    let unbounded_ipv6 = Policy {
        min_prefix_v6: 0,
        max_addresses: MaxAddresses { ipv6_prefix_length: 0, ..example_policy().max_addresses },
        ..example_policy()
    };
    run_all(&broad_tunnel_cases(), &unbounded_ipv6);
}

#[test]
fn tunnel_addresses_of_allowed_ipv4_addresses_are_rendered_as_written() {
    // 6to4 of 203.0.113.7, and Teredo with server 203.0.113.7 and client 11.0.0.7.
    let yaml = with_ips(r#"["2002:CB00:7107::1", "2001:0:cb00:7107:8000:0:f4ff:fff8"]"#);
    let children = support::children(&yaml, &example_policy());
    let rules = children.network_policy().expect("a NetworkPolicy").spec.clone().unwrap().egress.unwrap();
    let blocks: Vec<&str> =
        rules[0].to.iter().flatten().filter_map(|p| p.ip_block.as_ref()).map(|b| b.cidr.as_str()).collect();
    assert_eq!(blocks, ["2002:cb00:7107::1/128", "2001:0:cb00:7107:8000:0:f4ff:fff8/128"]);
}

#[test]
fn custom_nameservers_need_the_policy_and_pass_the_same_address_check() {
    run_all(&nameserver_refused_cases(), &example_policy());
    run_all(&nameserver_allowed_cases(), &nameservers_allowed());
}

#[test]
fn every_list_a_tenant_writes_is_bounded_with_a_located_problem() {
    run_all(&list_cases(), &example_policy());
}

#[test]
fn urls_called_with_the_token_are_https_on_allowed_hosts_and_never_forbidden() {
    run_all(&url_cases(), &example_policy());
}

#[test]
fn every_bad_address_or_url_setting_of_the_policy_is_rejected() {
    run_policy_cases(&policy_cases());
}

#[test]
fn overlapping_destinations_count_once_towards_the_address_cap() {
    // Seventeen /24s, one of them twice and one inside another: 4096 addresses, the cap.
    let mut ips: Vec<String> = (0..16).map(|i| format!("10.20.{i}.0/24")).collect();
    ips.extend(["10.20.0.0/24".into(), "10.20.3.7".into()]);
    let yaml = with_ips(&format!("{ips:?}"));
    support::load(&[("target.yaml", &yaml)], &example_policy()).unwrap_or_else(|p| panic!("refused: {p:#?}"));
}

#[test]
fn url_user_info_never_appears_in_a_problem_however_malformed_the_url() {
    let secret = "s3cr3t-pat";
    let urls = [
        format!("https://user:{secret}@dev.azure.com/acme"),
        format!("http://user:{secret}@dev.azure.com/acme"),
        format!("https://user:{secret}@collector.evil.example/acme"),
        format!("https://user:{secret}/x@dev.azure.com/acme"),
        format!("https://{secret}@[::1/acme"),
        format!("user:{secret}@dev.azure.com/acme"),
        format!("https://user:{secret}@169.254.169.254/acme"),
    ];
    for url in &urls {
        for yaml in [with_url(url), with_trigger("organizationURL", url)] {
            let problems = support::load(&[("target.yaml", &yaml)], &example_policy()).expect_err(url);
            for problem in &problems {
                assert!(!problem.to_string().contains(secret), "{url}: the secret is repeated: {problem}");
            }
        }
    }
}

#[test]
fn rendered_nameservers_are_the_checked_canonical_addresses_each_once() {
    let yaml = valid_plus(
        "  dnsPolicy: None\n  dnsConfig:\n    nameservers: [\"2001:DB8::53\", \"2001:db8:0::53\", \"10.53.0.10\"]\n    searches: [corp.example]\n",
    );
    let policy = nameservers_allowed();
    let target = support::cdtarget(&yaml, &policy);
    let children =
        render::render(&target, &policy, &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
            .expect("renders");
    let pod = children.deployment().expect("a Deployment").spec.clone().unwrap().template.spec.unwrap();
    let dns = pod.dns_config.expect("dnsConfig");
    assert_eq!(dns.nameservers.unwrap(), ["2001:db8::53", "10.53.0.10"]);
    assert_eq!(dns.searches.unwrap(), ["corp.example"]);
    let rules = children.network_policy().expect("a NetworkPolicy").spec.clone().unwrap().egress.unwrap();
    let blocks: Vec<String> = rules
        .iter()
        .flat_map(|r| r.to.iter().flatten())
        .filter_map(|p| p.ip_block.as_ref())
        .map(|b| b.cidr.clone())
        .collect();
    assert!(
        blocks.starts_with(&["10.0.0.1/32".to_owned(), "2001:db8::53/128".to_owned(), "10.53.0.10/32".to_owned()]),
        "{blocks:?}"
    );
}

#[test]
fn the_example_policy_spells_out_the_defaults_of_the_address_and_url_fields() {
    let example = example_policy();
    let defaults = Policy::default();
    assert_eq!(example.nat64_prefixes, defaults.nat64_prefixes);
    assert_eq!(example.max_addresses, defaults.max_addresses);
    assert_eq!(example.allowed_url_hosts, defaults.allowed_url_hosts);
    assert_eq!(example.allow_custom_nameservers, defaults.allow_custom_nameservers);
}
