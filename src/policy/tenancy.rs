//! The tenancy part of the policy: kinds no tenant may apply, whatever its RBAC allows.

use std::fmt;

use crate::api::names;
use crate::api::policy::{GroupKindDocument, TenancyDocument};
use crate::problem::Problems;

/// Kinds refused to tenants even when the policy leaves them out: cdtarget's guarantees rest on
/// them (egress only through CDTargets; registrations only by the platform team).
pub(crate) const ALWAYS_FORBIDDEN: [(&str, &str); 2] =
    [("networking.k8s.io", "NetworkPolicy"), (crate::api::GROUP, "TenantRepository")];

/// Most entries `tenancy.forbiddenKinds` may hold.
pub(crate) const MAX_FORBIDDEN_KINDS: usize = 256;

/// The spelling of "every kind of the group" in `tenancy.forbiddenKinds`.
const EVERY_KIND: &str = "*";

/// A kind, or every kind of an API group, that tenants may not apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindPattern {
    /// The API group; empty for the core group.
    pub group: String,
    /// The kind; `None` for every kind of the group.
    pub kind: Option<String>,
}

impl KindPattern {
    /// Whether an object of `group` and `kind` (case-exact, any version) is matched.
    pub fn matches(&self, group: &str, kind: &str) -> bool {
        self.group == group && self.kind.as_deref().is_none_or(|k| k == kind)
    }
}

impl fmt::Display for KindPattern {
    /// `group/Kind`, `group/*`, or `Kind` for the core group.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind.as_deref().unwrap_or(EVERY_KIND);
        if self.group.is_empty() { f.write_str(kind) } else { write!(f, "{}/{kind}", self.group) }
    }
}

/// The checked tenancy rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenancy {
    /// Every refused kind: [`ALWAYS_FORBIDDEN`], then the policy's list.
    pub forbidden_kinds: Vec<KindPattern>,
}

impl Tenancy {
    /// The first pattern refusing `group`/`kind`, if any.
    pub fn forbidden(&self, group: &str, kind: &str) -> Option<&KindPattern> {
        self.forbidden_kinds.iter().find(|pattern| pattern.matches(group, kind))
    }
}

/// Checks `tenancy` of a policy document; problems are recorded under `tenancy.…`.
pub fn check(document: &TenancyDocument, problems: &mut Problems) -> Tenancy {
    let always = ALWAYS_FORBIDDEN
        .iter()
        .map(|(group, kind)| KindPattern { group: (*group).to_owned(), kind: Some((*kind).to_owned()) });
    let mut forbidden_kinds: Vec<KindPattern> = always.collect();
    if document.forbidden_kinds.len() > MAX_FORBIDDEN_KINDS {
        problems.push(
            "tenancy.forbiddenKinds",
            format!(
                "holds {} entries; at most {MAX_FORBIDDEN_KINDS} are accepted (use `kind: \"*\"` for a whole group)",
                document.forbidden_kinds.len()
            ),
        );
    }
    for (i, entry) in document.forbidden_kinds.iter().take(MAX_FORBIDDEN_KINDS).enumerate() {
        if let Some(pattern) = pattern_of(entry, &format!("tenancy.forbiddenKinds[{i}]"), problems)
            && !forbidden_kinds.contains(&pattern)
        {
            forbidden_kinds.push(pattern);
        }
    }
    Tenancy { forbidden_kinds }
}

fn pattern_of(entry: &GroupKindDocument, field: &str, problems: &mut Problems) -> Option<KindPattern> {
    let group_ok = entry.group.is_empty() || {
        let checked = names::api_group(&entry.group);
        checked.map_err(|e| problems.push(format!("{field}.group"), format!("{e}; `\"\"` is the core group"))).is_ok()
    };
    let kind = if entry.kind == EVERY_KIND {
        if entry.group.is_empty() {
            problems.push(format!("{field}.kind"), "`*` is not accepted for the core group; name the kinds one by one");
            return None;
        }
        None
    } else {
        match names::kind(&entry.kind) {
            Ok(()) => Some(entry.kind.clone()),
            Err(e) => {
                problems.push(format!("{field}.kind"), format!("{e}, or `*` for every kind of the group"));
                return None;
            }
        }
    };
    group_ok.then(|| KindPattern { group: entry.group.clone(), kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(group: &str, kind: &str) -> GroupKindDocument {
        GroupKindDocument { group: group.into(), kind: kind.into() }
    }

    fn checked(entries: Vec<GroupKindDocument>) -> Result<Tenancy, Vec<crate::problem::Problem>> {
        let mut problems = Problems::default();
        let tenancy = check(&TenancyDocument { forbidden_kinds: entries }, &mut problems);
        problems.finish(tenancy)
    }

    #[test]
    fn the_defaults_refuse_every_network_policy_kind_of_the_common_cnis() {
        let tenancy = checked(TenancyDocument::default().forbidden_kinds).unwrap();
        for (group, kind) in [
            ("networking.k8s.io", "NetworkPolicy"),
            ("cilium.io", "CiliumNetworkPolicy"),
            ("cilium.io", "CiliumClusterwideNetworkPolicy"),
            ("cilium.io", "CiliumCIDRGroup"),
            ("crd.projectcalico.org", "NetworkPolicy"),
            ("crd.projectcalico.org", "GlobalNetworkPolicy"),
            ("crd.projectcalico.org", "NetworkSet"),
            ("crd.projectcalico.org", "GlobalNetworkSet"),
            ("crd.projectcalico.org", "StagedNetworkPolicy"),
            ("projectcalico.org", "NetworkPolicy"),
            ("projectcalico.org", "GlobalNetworkPolicy"),
            ("policy.networking.k8s.io", "AdminNetworkPolicy"),
            ("policy.networking.k8s.io", "BaselineAdminNetworkPolicy"),
            ("crd.antrea.io", "NetworkPolicy"),
            ("k8s.ovn.org", "EgressFirewall"),
            ("cdtarget.io", "TenantRepository"),
        ] {
            assert!(tenancy.forbidden(group, kind).is_some(), "{group}/{kind} is refused");
        }
        for (group, kind) in [("", "ConfigMap"), ("networking.k8s.io", "Ingress"), ("cdtarget.io", "CDTarget")] {
            assert!(tenancy.forbidden(group, kind).is_none(), "{group}/{kind} is allowed");
        }
    }

    #[test]
    fn matching_is_case_exact_and_by_group_as_kubernetes_does() {
        let tenancy = checked(vec![entry("example.com", "Widget")]).unwrap();
        assert!(tenancy.forbidden("example.com", "Widget").is_some());
        // Another spelling is another kind for the API server, so it is not refused here; it is
        // refused by discovery as not served, or applied as what it really is.
        assert!(tenancy.forbidden("example.com", "widget").is_none());
        assert!(tenancy.forbidden("other.com", "Widget").is_none());
    }

    #[test]
    fn a_policy_cannot_drop_network_policy_or_tenant_repository() {
        let tenancy = checked(vec![entry("example.com", "*")]).unwrap();
        assert!(tenancy.forbidden("networking.k8s.io", "NetworkPolicy").is_some());
        assert!(tenancy.forbidden("cdtarget.io", "TenantRepository").is_some());
        assert!(tenancy.forbidden("example.com", "Anything").is_some());
        assert!(tenancy.forbidden("cilium.io", "CiliumNetworkPolicy").is_none(), "the list replaces the defaults");
        let empty = checked(Vec::new()).unwrap();
        assert_eq!(empty.forbidden_kinds.len(), ALWAYS_FORBIDDEN.len());
    }

    #[test]
    fn bad_entries_are_named_with_what_is_accepted() {
        let problems =
            checked(vec![entry("Cilium.IO", "CiliumNetworkPolicy"), entry("cilium.io", "../x"), entry("", "*")])
                .unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["tenancy.forbiddenKinds[0].group", "tenancy.forbiddenKinds[1].kind", "tenancy.forbiddenKinds[2].kind"]
        );
        assert!(problems[0].message.contains("such as `apps` or `cilium.io`"), "{}", problems[0].message);
        assert!(problems[1].message.contains("or `*` for every kind"), "{}", problems[1].message);
    }

    #[test]
    fn the_list_is_bounded() {
        let many = (0..=MAX_FORBIDDEN_KINDS).map(|i| entry(&format!("g{i}.example.com"), "*")).collect();
        let problems = checked(many).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].field, "tenancy.forbiddenKinds");
    }
}
