//! The CDTarget reconciler's decision, a pure function over what [`super::observe`] read: the
//! admin's policy, then the tenant's spec, then the references the agents may not be given, then
//! the Secrets; and, when all is well, the four children and the summary for status.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use kube::ResourceExt;

use super::borrowed::{self, Refusal};
use super::{STALLED_RESYNC, WAIT_RETRY};
use crate::api::conditions::{
    REASON_APPLIED, REASON_CONFIG_MAP_NOT_ALLOWED, REASON_INVALID_POLICY, REASON_INVALID_SPEC, REASON_JOB_MODE,
    REASON_KEDA_DROPS_BUSY_AGENTS, REASON_KEDA_NOT_INSTALLED, REASON_SCALE_ON_IN_FLIGHT,
    REASON_SCALE_ON_IN_FLIGHT_DISABLED, REASON_SECRET_NOT_ALLOWED, REASON_SECRET_NOT_FOUND,
};
use crate::api::keda::KedaVersion;
use crate::api::{AgentMode, CDTarget, RenderedSummary};
use crate::controller::conditions::Health;
use crate::controller::inputs::KedaSeen;
use crate::policy::Policy;
use crate::problem::Problem;
use crate::render::{self, Children, Scaling, SecretDigests};

/// A referenced Secret as read: its data, or `None` when it does not exist.
pub(crate) type SecretsRead = BTreeMap<String, Option<BTreeMap<String, ByteString>>>;

/// What one reconcile decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The health to report.
    pub health: Health,
    /// The children to apply, in order; `None` leaves the children in the cluster untouched.
    pub children: Option<Children>,
    /// The rendered summary for status (the previous one when nothing is applied).
    pub rendered: Option<RenderedSummary>,
    /// When to reconcile again.
    pub requeue: Duration,
    /// `BusyAgentsCounted`: what the KEDA the children are rendered for does with agents running
    /// a job.
    pub busy_agents: BusyAgents,
}

/// The `BusyAgentsCounted` condition a plan asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum BusyAgents {
    /// Nothing was rendered: the condition stays as it is.
    #[default]
    Unchanged,
    /// No KEDA scales the agents: no condition.
    Absent,
    /// The condition: whether busy agents count, the reason and the message.
    Set {
        /// `True`: KEDA counts agents running a job, or nothing scales them down (Job mode).
        counted: bool,
        /// One of the `BusyAgentsCounted` reasons of [`crate::api::conditions`].
        reason: &'static str,
        /// What the tenant reads: the risk and the ways out, or why there is none.
        message: String,
    },
}

/// Decides what to do with `target` given the policy (or why it is invalid), the referenced
/// Secrets as read, the KEDA release installed (`None`: KEDA is not; the policy's `keda.version`
/// pin overrides the release given), and the referenced objects the agents may not be
/// given ([`borrowed::refusals`]). Order: the admin's policy, then the tenant's spec, then the
/// refused references (all three need a human, so they are reported before waiting for a
/// Secret), then the Secrets. A CDTarget whose children are planned comes back after `resync`
/// (`--cdtarget-resync-interval`, [`super::RESYNC`] by default).
pub fn plan(
    target: &CDTarget,
    policy: &Result<Policy, Vec<Problem>>,
    secrets: &SecretsRead,
    keda: KedaSeen,
    refused: &[Refusal],
    resync: Duration,
) -> Plan {
    let previous = target.status.as_ref().and_then(|s| s.rendered.clone());
    let keep = |health: Health, requeue: Duration| Plan {
        health,
        children: None,
        rendered: previous.clone(),
        requeue,
        busy_agents: BusyAgents::Unchanged,
    };

    let policy = match policy {
        Ok(policy) => policy,
        Err(problems) => {
            let message = format!("the platform policy is invalid (ask a cluster admin): {}", list(problems));
            return keep(stalled(REASON_INVALID_POLICY, message), STALLED_RESYNC);
        }
    };
    let valid = match render::validate(target, policy) {
        Ok(valid) => valid,
        Err(problems) => return keep(stalled(REASON_INVALID_SPEC, list(&problems)), STALLED_RESYNC),
    };
    if !refused.is_empty() {
        let secret = refused.iter().any(|r| r.resource == borrowed::Resource::Secret);
        let reason = if secret { REASON_SECRET_NOT_ALLOWED } else { REASON_CONFIG_MAP_NOT_ALLOWED };
        let each = refused.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        return keep(
            stalled(reason, format!("{each}. Nothing was applied; running children are left as they are")),
            STALLED_RESYNC,
        );
    }
    let digests = match secret_digests(target, secrets) {
        Ok(digests) => digests,
        Err(message) => {
            let health = Health::Progressing { reason: REASON_SECRET_NOT_FOUND.into(), message };
            return keep(health, WAIT_RETRY);
        }
    };

    let scaling = render::scaling_for(keda, policy.keda.version);
    let known = match (policy.keda.version, keda.version) {
        (Some(_), _) => "pinned by the policy's keda.version",
        (None, Some(_)) => "read from the schema of KEDA's CRDs",
        (None, None) => {
            "assumed: the API server's schema of KEDA's CRDs could not be read; a cluster admin can pin keda.version in the policy"
        }
    };
    let busy_agents = busy_agents(&valid, scaling, known);
    let children = render::children(&valid, policy, &digests, scaling);
    let rendered = RenderedSummary {
        network_policy: children.network_policy().map(ResourceExt::name_any).unwrap_or_default(),
        mode: Some(valid.mode.to_string()),
        deployment: children.deployment().map(ResourceExt::name_any),
        scaled_object: children.scaled_object().map(ResourceExt::name_any),
        scaled_job: children.scaled_job().map(ResourceExt::name_any),
        trigger_authentication: children.trigger_authentication().map(ResourceExt::name_any),
        destinations: valid.destinations.iter().map(ToString::to_string).collect(),
        secrets_digest: Some(render::secrets_digest(target, &digests)),
    };
    let applied = format!("applied NetworkPolicy {}", rendered.network_policy);
    let name = valid.name;
    let health = match (valid.mode, scaling) {
        (AgentMode::Deployment, Scaling::Keda(_)) => Health::Ready {
            reason: REASON_APPLIED.into(),
            message: format!(
                "{applied} and Deployment {name}, with KEDA ScaledObject {name} and TriggerAuthentication {name}"
            ),
        },
        (AgentMode::Job, Scaling::Keda(_)) => Health::Ready {
            reason: REASON_APPLIED.into(),
            message: format!(
                "{applied}, KEDA ScaledJob {name} and TriggerAuthentication {name}: one agent Job per queued pipeline job"
            ),
        },
        (AgentMode::Deployment, Scaling::Fixed) => Health::Ready {
            reason: REASON_KEDA_NOT_INSTALLED.into(),
            message: format!(
                "{applied} and Deployment {name}; KEDA is not installed, so a plain Deployment at minReplicaCount ({} replicas) and no autoscaling",
                valid.min_replicas
            ),
        },
        // Nothing runs the agents until KEDA is installed: not Ready, and not the tenant's to fix.
        (AgentMode::Job, Scaling::Fixed) => Health::Progressing {
            reason: REASON_KEDA_NOT_INSTALLED.into(),
            message: format!(
                "{applied}; KEDA is not installed, and spec.mode Job runs the agents only as the Jobs of a KEDA ScaledJob, so no agent runs until KEDA is installed (or spec.mode is Deployment)"
            ),
        },
    };
    Plan { health, children: Some(children), rendered: Some(rendered), requeue: resync, busy_agents }
}

/// What the KEDA of `scaling` does with agents running a job, for `BusyAgentsCounted`; `known`
/// says how the release was told.
fn busy_agents(valid: &render::ValidTarget<'_>, scaling: Scaling, known: &str) -> BusyAgents {
    let Scaling::Keda(version) = scaling else {
        return BusyAgents::Absent;
    };
    if valid.mode == AgentMode::Job {
        // What KEDA 2.20's strategy does while new agents start (tests/cluster/agents.rs).
        let extra = if version.counts_busy_agents() {
            String::new()
        } else {
            format!(
                "; KEDA {version} ({known}) may start more Jobs than queued jobs while new agents start (its accurate strategy counts a Job whose agent runs but has not taken its job yet as neither pending nor busy), and KEDA {} or later starts exactly one per job",
                KedaVersion::V2_21_0
            )
        };
        return BusyAgents::Set {
            counted: true,
            reason: REASON_JOB_MODE,
            message: format!(
                "the agents run as the Jobs of KEDA ScaledJob {}: one per queued pipeline job, each running its job to the end; nothing scales a busy agent down{extra}",
                valid.name
            ),
        };
    }
    match render::busy_agent_risk(valid.mode, scaling, &valid.spec().trigger_meta) {
        Some(risk) => BusyAgents::Set {
            counted: false,
            reason: if version.counts_busy_agents() {
                REASON_SCALE_ON_IN_FLIGHT_DISABLED
            } else {
                REASON_KEDA_DROPS_BUSY_AGENTS
            },
            message: format!("{risk} (KEDA {version}, {known})"),
        },
        None => BusyAgents::Set {
            counted: true,
            reason: REASON_SCALE_ON_IN_FLIGHT,
            message: format!(
                "KEDA {version} ({known}) counts the jobs agents are running (triggerMeta scaleOnInFlight \"true\"), so its autoscaler keeps an agent for every queued and running job; which agent a scale-down removes it still does not know (spec.mode Job avoids that)"
            ),
        },
    }
}

/// Digests of the referenced Secrets, or why the agents cannot start yet. Never mentions a
/// Secret's content.
fn secret_digests(target: &CDTarget, secrets: &SecretsRead) -> Result<SecretDigests, String> {
    let mut digests = SecretDigests::new();
    let mut missing = Vec::new();
    for name in render::referenced_secrets(target) {
        match secrets.get(name).and_then(Option::as_ref) {
            None => missing.push(format!("Secret {name} does not exist")),
            Some(data) => {
                if name == target.spec.token_ref && data.get(render::keda::TOKEN_KEY).is_none_or(|v| v.0.is_empty()) {
                    missing.push(format!("Secret {name} has no non-empty key {}", render::keda::TOKEN_KEY));
                }
                digests.insert(name.to_owned(), render::secret_digest(data));
            }
        }
    }
    // The Secrets the pods can start without (pull, environment) roll them too when present.
    for name in render::rolled_secrets(target) {
        if let Some(Some(data)) = secrets.get(name)
            && !digests.contains_key(name)
        {
            digests.insert(name.to_owned(), render::secret_digest(data));
        }
    }
    if missing.is_empty() {
        Ok(digests)
    } else {
        Err(format!("waiting for the referenced Secrets: {}", missing.join("; ")))
    }
}

fn stalled(reason: &str, message: String) -> Health {
    Health::Stalled { reason: reason.into(), message }
}

/// `field: message; field: message` (a problem's display leaves out unknown parts).
fn list(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use crate::api::CDTargetStatus;
    use crate::controller::cdtarget::RESYNC;

    use super::*;

    const KEDA: KedaSeen = KedaSeen { installed: true, version: Some(KedaVersion::NEWEST_SUPPORTED) };

    fn target(ip: &[&str]) -> CDTarget {
        CDTarget::test().with_ips(ip.iter().copied())
    }

    fn token(value: &str) -> SecretsRead {
        let data = BTreeMap::from([("AZP_TOKEN".to_owned(), ByteString(value.as_bytes().to_vec()))]);
        SecretsRead::from([("azp-token".to_owned(), Some(data))])
    }

    fn reason(health: &Health) -> &str {
        match health {
            Health::Ready { reason, .. } | Health::Stalled { reason, .. } | Health::Progressing { reason, .. } => {
                reason
            }
        }
    }

    #[test]
    fn rotating_an_environment_or_pull_secret_rolls_the_agents_and_an_absent_one_blocks_nothing() {
        let target = target(&["10.1.2.3"])
            .with_image_pull_secret("pull")
            .with_env(crate::fixtures::env_from_secret("DB", "db", "password"));
        let digest = |secrets: &SecretsRead| {
            let plan = plan(&target, &Ok(Policy::default()), secrets, KEDA, &[], RESYNC);
            assert!(plan.children.is_some(), "{:?}", plan.health);
            plan.rendered.and_then(|r| r.secrets_digest).expect("a digest")
        };
        let with = |db: Option<&str>| {
            let mut secrets = token("pat");
            secrets.insert("pull".into(), Some(BTreeMap::new()));
            if let Some(password) = db {
                let data = BTreeMap::from([("password".to_owned(), ByteString(password.as_bytes().to_vec()))]);
                secrets.insert("db".into(), Some(data));
            }
            secrets
        };
        let absent = digest(&with(None));
        let first = digest(&with(Some("one")));
        let rotated = digest(&with(Some("two")));
        assert_ne!(absent, first, "the Secret appearing rolls the agents");
        assert_ne!(first, rotated, "a rotated environment Secret rolls the agents");
        assert_eq!(first, digest(&with(Some("one"))), "the same content, the same digest");
    }

    #[test]
    fn invalid_spec_is_reported_before_a_missing_secret_and_applies_nothing() {
        let plan = plan(&target(&["10.0.0.0/8"]), &Ok(Policy::default()), &SecretsRead::new(), KEDA, &[], RESYNC);
        assert!(
            matches!(&plan.health, Health::Stalled { reason, message } if reason == REASON_INVALID_SPEC && message.starts_with("spec.ip[0]: "))
        );
        assert_eq!(plan.children, None);
    }

    #[test]
    fn empty_token_waits_without_revealing_secret_content() {
        let plan = plan(&target(&["10.1.2.3"]), &Ok(Policy::default()), &token(""), KEDA, &[], RESYNC);
        assert_eq!(reason(&plan.health), REASON_SECRET_NOT_FOUND);
        assert_eq!((plan.children, plan.requeue), (None, WAIT_RETRY));
    }

    #[test]
    fn a_cdtarget_in_place_comes_back_at_the_configured_resync() {
        let every = Duration::from_secs(7);
        let plan = plan(&target(&["10.1.2.3"]), &Ok(Policy::default()), &token("pat"), KEDA, &[], every);
        assert!(plan.children.is_some(), "{:?}", plan.health);
        assert_eq!(plan.requeue, every);
    }

    #[test]
    fn without_keda_no_autoscaler_is_planned() {
        let plan =
            plan(&target(&["10.1.2.3"]), &Ok(Policy::default()), &token("pat"), KedaSeen::default(), &[], RESYNC);
        assert_eq!(reason(&plan.health), REASON_KEDA_NOT_INSTALLED);
        let children = plan.children.expect("children");
        assert!(children.scaled_object().is_none() && children.trigger_authentication().is_none());
    }

    #[test]
    fn invalid_policy_stalls_and_keeps_the_previous_summary() {
        let mut target = target(&["10.1.2.3"]);
        let previous = RenderedSummary { deployment: Some("agents".into()), ..RenderedSummary::default() };
        target.status = Some(CDTargetStatus { rendered: Some(previous.clone()), ..CDTargetStatus::default() });
        let problems = Err(vec![Problem::field("data.ports", "bad")]);
        let plan = plan(&target, &problems, &token("pat"), KEDA, &[], RESYNC);
        assert_eq!(reason(&plan.health), REASON_INVALID_POLICY);
        assert_eq!(plan.rendered, Some(previous));
    }

    #[test]
    fn a_refused_reference_stalls_before_a_missing_secret_is_awaited_and_applies_nothing() {
        let refused = [Refusal {
            field: "spec.caCertRef".into(),
            resource: borrowed::Resource::Secret,
            namespace: "team-a".into(),
            name: "builder-token".into(),
            why: borrowed::Why::ServiceAccountToken,
        }];
        let plan = plan(&target(&["10.1.2.3"]), &Ok(Policy::default()), &SecretsRead::new(), KEDA, &refused, RESYNC);
        assert_eq!(
            (reason(&plan.health), plan.children, plan.requeue),
            (REASON_SECRET_NOT_ALLOWED, None, STALLED_RESYNC)
        );
        let Health::Stalled { message, .. } = &plan.health else { panic!("{:?}", plan.health) };
        assert!(
            message.starts_with("spec.caCertRef: Secret team-a/builder-token is a ServiceAccount token"),
            "{message}"
        );
    }

    fn busy(plan: &Plan) -> (bool, &'static str, &str) {
        match &plan.busy_agents {
            BusyAgents::Set { counted, reason, message } => (*counted, *reason, message.as_str()),
            other => panic!("no BusyAgentsCounted: {other:?}"),
        }
    }

    fn seen(version: Option<KedaVersion>) -> KedaSeen {
        KedaSeen { installed: true, version }
    }

    #[test]
    fn busy_agents_count_on_keda_2_21_and_in_job_mode_and_not_on_2_20() {
        let deployment = target(&["10.1.2.3"]);
        let on_2_21 =
            plan(&deployment, &Ok(Policy::default()), &token("pat"), seen(Some(KedaVersion::V2_21_0)), &[], RESYNC);
        let (counted, reason, message) = busy(&on_2_21);
        assert_eq!((counted, reason), (true, REASON_SCALE_ON_IN_FLIGHT));
        assert!(message.starts_with("KEDA 2.21.0 (read from the schema of KEDA's CRDs) counts"), "{message}");

        let on_2_20 =
            plan(&deployment, &Ok(Policy::default()), &token("pat"), seen(Some(KedaVersion::V2_20_0)), &[], RESYNC);
        let (counted, reason, message) = busy(&on_2_20);
        assert_eq!((counted, reason), (false, REASON_KEDA_DROPS_BUSY_AGENTS));
        assert!(
            message.contains("spec.mode: Job") && message.contains("KEDA 2.21.0 or later"),
            "the two ways out: {message}"
        );

        let job = target(&["10.1.2.3"]).with_mode("Job");
        let jobs = plan(&job, &Ok(Policy::default()), &token("pat"), seen(Some(KedaVersion::V2_20_0)), &[], RESYNC);
        assert!(busy(&jobs).0);
        assert_eq!(busy(&jobs).1, REASON_JOB_MODE);
        assert!(
            busy(&jobs).2.contains("may start more Jobs than queued jobs while new agents start"),
            "{}",
            busy(&jobs).2
        );
        let on_2_21 = plan(&job, &Ok(Policy::default()), &token("pat"), seen(Some(KedaVersion::V2_21_0)), &[], RESYNC);
        assert!(!busy(&on_2_21).2.contains("more Jobs"), "{}", busy(&on_2_21).2);
    }

    #[test]
    fn an_unknown_keda_release_is_taken_for_2_20_and_said_so_and_the_policy_pin_wins() {
        let deployment = target(&["10.1.2.3"]);
        let unknown = plan(&deployment, &Ok(Policy::default()), &token("pat"), seen(None), &[], RESYNC);
        let (counted, reason, message) = busy(&unknown);
        assert_eq!((counted, reason), (false, REASON_KEDA_DROPS_BUSY_AGENTS));
        assert!(message.contains("KEDA 2.20.0, assumed") && message.contains("pin keda.version"), "{message}");
        let scaled = unknown.children.as_ref().and_then(Children::scaled_object).expect("a ScaledObject");
        assert!(!scaled.spec.triggers[0].metadata.contains_key("scaleOnInFlight"), "nothing 2.20 does not read");

        let mut pinned = Policy::default();
        pinned.keda.version = Some(KedaVersion::V2_21_0);
        let with_pin = plan(&deployment, &Ok(pinned), &token("pat"), seen(Some(KedaVersion::V2_20_0)), &[], RESYNC);
        let (counted, _, message) = busy(&with_pin);
        assert!(counted && message.contains("pinned by the policy's keda.version"), "{message}");
    }

    #[test]
    fn a_tenant_turning_scale_on_in_flight_off_is_reported_and_no_keda_means_no_condition() {
        let off = target(&["10.1.2.3"]).with_trigger_meta("scaleOnInFlight", "false");
        let planned = plan(&off, &Ok(Policy::default()), &token("pat"), seen(Some(KedaVersion::V2_21_0)), &[], RESYNC);
        assert_eq!(busy(&planned).1, REASON_SCALE_ON_IN_FLIGHT_DISABLED);
        let without = plan(&off, &Ok(Policy::default()), &token("pat"), KedaSeen::default(), &[], RESYNC);
        assert_eq!(without.busy_agents, BusyAgents::Absent);
        let invalid = plan(&target(&["10.0.0.0/8"]), &Ok(Policy::default()), &token("pat"), KEDA, &[], RESYNC);
        assert_eq!(invalid.busy_agents, BusyAgents::Unchanged, "nothing rendered: the condition stays");
    }
}
