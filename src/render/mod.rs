//! The renderer: CDTarget + policy + referenced-secret digests → its children: the egress
//! NetworkPolicy, and the agents as a Deployment with a KEDA ScaledObject (Deployment mode) or
//! as the Jobs of a KEDA ScaledJob (Job mode), with the TriggerAuthentication of either.
//!
//! Pure functions only: no I/O and no client. `validate()` checks everything first
//! and every builder works from the resulting `ValidTarget`, so rendering itself cannot fail.

pub(crate) mod children;
pub(crate) mod deployment;
pub(crate) mod keda;
pub(crate) mod network_policy;
pub(crate) mod pod;
pub(crate) mod validate;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use sha2::{Digest, Sha256};

use crate::api::keda::{KedaSeen, KedaVersion};
use crate::api::{AgentMode, CDTarget, labels};
use crate::policy::Policy;
use crate::problem::Problem;
pub use children::{Child, ChildKind, Children};
pub(crate) use validate::{ValidTarget, check_document, validate};

/// How the agents are scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaling {
    /// By KEDA of this release: a ScaledObject over the Deployment (which leaves `replicas` to
    /// KEDA's HPA), or a ScaledJob in Job mode.
    Keda(KedaVersion),
    /// KEDA is not installed: a plain Deployment at `minReplicaCount`; in Job mode no agent.
    Fixed,
}

impl Scaling {
    /// The KEDA release, if KEDA scales the agents.
    pub fn keda(self) -> Option<KedaVersion> {
        match self {
            Scaling::Keda(version) => Some(version),
            Scaling::Fixed => None,
        }
    }
}

/// How the agents are scaled on a cluster where `seen` is what is known of KEDA and `pin` the
/// policy's `keda.version`: the pin, else the release found, else the oldest supported one,
/// which renders nothing an older KEDA would not read and reports the risk rather than hide it.
pub fn scaling_for(seen: KedaSeen, pin: Option<KedaVersion>) -> Scaling {
    let release = pin.or(seen.version).unwrap_or(KedaVersion::OLDEST_SUPPORTED);
    if seen.installed { Scaling::Keda(release) } else { Scaling::Fixed }
}

/// The risk a CDTarget's agents run because of the KEDA they are scaled by, if any: a warning
/// for the tenant (`cdtarget validate` and `render`) and for the controller's status, never a
/// refusal. `trigger_meta` is the CDTarget's `triggerMeta`.
///
/// KEDA before 2.21 leaves job requests busy agents have received out of the queue length
/// (kedacore/keda#8185), so a ScaledObject's HPA may scale a Deployment down under running jobs
/// and starts no agent while all are busy. Job mode, or KEDA 2.21 (which counts them with
/// `scaleOnInFlight`, unless the tenant turns it off), avoids it.
pub fn busy_agent_risk(mode: AgentMode, scaling: Scaling, trigger_meta: &BTreeMap<String, String>) -> Option<String> {
    let version = scaling.keda()?;
    if mode != AgentMode::Deployment {
        return None;
    }
    let set = trigger_meta.get(validate::SCALE_ON_IN_FLIGHT).map(String::as_str);
    if !version.counts_busy_agents() {
        let ignored = match set {
            Some(value) => format!(" (triggerMeta.scaleOnInFlight `{value}` is ignored: KEDA reads it from 2.21 on)"),
            None => String::new(),
        };
        return Some(format!(
            "KEDA {version} leaves agents that are running a job out of the pool's queue length (kedacore/keda#8185): its autoscaler may scale the Deployment down under running jobs and adds no agent while all are busy{ignored}; use spec.mode: Job, or KEDA {} or later",
            KedaVersion::V2_21_0
        ));
    }
    match set {
        Some(value) if value_is_false(value) => Some(format!(
            "triggerMeta.scaleOnInFlight `{value}` makes KEDA {version} leave agents that are running a job out of the pool's queue length (kedacore/keda#8185): its autoscaler may scale the Deployment down under running jobs and adds no agent while all are busy; leave scaleOnInFlight out, or use spec.mode: Job"
        )),
        _ => None,
    }
}

/// Whether a boolean trigger value (Go's `strconv.ParseBool` spellings) is false.
fn value_is_false(value: &str) -> bool {
    matches!(value, "0" | "f" | "F" | "false" | "FALSE" | "False")
}

/// Digests (hex SHA-256 of their data, see `secret_digest`) of the Secrets a CDTarget
/// references, by Secret name. A missing entry means the content is unknown (offline render).
pub type SecretDigests = BTreeMap<String, String>;

/// Checks `target` against `policy` and renders its children.
pub fn render(
    target: &CDTarget,
    policy: &Policy,
    digests: &SecretDigests,
    scaling: Scaling,
) -> Result<Children, Vec<Problem>> {
    let valid = validate(target, policy)?;
    Ok(children(&valid, policy, digests, scaling))
}

/// Renders the children of an already validated CDTarget: a NetworkPolicy always; in
/// Deployment mode a Deployment, and with KEDA a TriggerAuthentication and a ScaledObject; in
/// Job mode, with KEDA, a TriggerAuthentication and a ScaledJob (without KEDA nothing runs the
/// agents: Job mode needs KEDA).
pub(crate) fn children(
    valid: &ValidTarget<'_>,
    policy: &Policy,
    digests: &SecretDigests,
    scaling: Scaling,
) -> Children {
    let mut list = vec![Child::NetworkPolicy(network_policy::network_policy(valid, policy))];
    match (valid.mode, scaling) {
        (AgentMode::Deployment, _) => {
            list.push(Child::Deployment(Box::new(deployment::deployment(valid, policy, digests, scaling))));
            if let Scaling::Keda(version) = scaling {
                list.push(Child::TriggerAuthentication(keda::trigger_authentication(valid)));
                list.push(Child::ScaledObject(keda::scaled_object(valid, policy, version)));
            }
        }
        (AgentMode::Job, Scaling::Keda(version)) => {
            list.push(Child::TriggerAuthentication(keda::trigger_authentication(valid)));
            list.push(Child::ScaledJob(Box::new(keda::scaled_job(valid, policy, digests, version))));
        }
        (AgentMode::Job, Scaling::Fixed) => {}
    }
    Children::new(list)
}

/// Digest of a Secret's data: SHA-256 over its keys and values in key order.
pub(crate) fn secret_digest(data: &BTreeMap<String, ByteString>) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in data {
        hasher.update((key.len() as u64).to_be_bytes());
        hasher.update(key.as_bytes());
        hasher.update((value.0.len() as u64).to_be_bytes());
        hasher.update(&value.0);
    }
    hex::encode(hasher.finalize())
}

/// Names of the Secrets the agent pods read, in a fixed order: token, proxy, CA.
pub(crate) fn referenced_secrets(target: &CDTarget) -> Vec<&str> {
    let spec = &target.spec;
    [Some(&spec.token_ref), spec.proxy_ref.as_ref(), spec.ca_cert_ref.as_ref()]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

/// Names of every Secret the agent pods read, in a fixed order, each once: the ones they cannot
/// start without ([`referenced_secrets`]), then `imagePullSecrets` and
/// `env[].valueFrom.secretKeyRef` in the order of the spec.
pub(crate) fn rolled_secrets(target: &CDTarget) -> Vec<&str> {
    let spec = &target.spec;
    let pulled = spec.image_pull_secrets.iter().map(|s| s.name.as_str());
    let env = spec.env.iter().filter_map(|e| Some(e.value_from.as_ref()?.secret_key_ref.as_ref()?.name.as_str()));
    let mut names = referenced_secrets(target);
    for name in pulled.chain(env) {
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// One digest over the digest of every Secret the agents read ([`rolled_secrets`]); a rotated
/// PAT, proxy, CA, pull Secret or environment Secret changes it and so rolls the agents. A
/// Secret the pods may go without (pull, environment) that does not exist counts as `absent`:
/// when it appears the agents roll too. For a CDTarget that reads only its PAT, proxy and CA the
/// digest is what it always was.
pub(crate) fn secrets_digest(target: &CDTarget, digests: &SecretDigests) -> String {
    let required = referenced_secrets(target);
    let mut hasher = Sha256::new();
    for name in rolled_secrets(target) {
        let missing = if required.contains(&name) { "unknown" } else { "absent" };
        let digest = digests.get(name).map_or(missing, String::as_str);
        hasher.update(format!("{name}={digest}\n").as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Labels on every rendered object: the tenant's `additionalSelector` plus cdtarget's own.
pub(crate) fn object_labels(valid: &ValidTarget<'_>) -> BTreeMap<String, String> {
    let mut labels = valid.spec().additional_selector.clone();
    labels.extend(selector_labels(valid));
    labels.insert(labels::APP_NAME.into(), labels::APP_NAME_VALUE.into());
    labels.insert(labels::APP_INSTANCE.into(), valid.name.into());
    labels.insert(labels::MANAGED_BY.into(), labels::MANAGED_BY_VALUE.into());
    labels
}

/// The label that selects exactly this CDTarget's agent pods. The selector never includes the
/// tenant's labels: a Deployment's selector is immutable, and a shared selector would let two
/// CDTargets select each other's pods (seed defect 21).
pub(crate) fn selector_labels(valid: &ValidTarget<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([(labels::CDTARGET.into(), valid.name.into())])
}

/// Metadata of a child named `name`: namespace, labels and, when the CDTarget came from the
/// cluster (it has a uid), a controller owner reference.
pub(crate) fn child_metadata(valid: &ValidTarget<'_>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(valid.namespace.to_owned()),
        labels: Some(object_labels(valid)),
        // Only a CDTarget read from the cluster has a uid to own its children by.
        owner_references: valid.target.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;

    use super::*;
    use crate::api::policy::{PolicyDocument, RunOnceDocument, RunOnceEnvironmentDocument};

    const V2_20: Scaling = Scaling::Keda(KedaVersion::V2_20_0);
    const V2_21: Scaling = Scaling::Keda(KedaVersion::V2_21_0);

    fn job() -> CDTarget {
        CDTarget::test().with_mode("Job")
    }

    fn rendered(target: &CDTarget, policy: &Policy, scaling: Scaling) -> Children {
        render(target, policy, &SecretDigests::new(), scaling).expect("renders")
    }

    fn kinds(children: &Children) -> Vec<ChildKind> {
        children.iter().map(Child::kind).collect()
    }

    fn job_pod(children: &Children) -> PodSpec {
        let job = children.scaled_job().expect("a ScaledJob");
        job.spec.job_target_ref.template.spec.clone().expect("a pod spec")
    }

    #[test]
    fn job_mode_renders_a_scaled_job_instead_of_the_deployment_and_scaled_object() {
        for scaling in [V2_20, V2_21] {
            let children = rendered(&job(), &Policy::default(), scaling);
            assert_eq!(
                kinds(&children),
                [ChildKind::TriggerAuthentication, ChildKind::NetworkPolicy, ChildKind::ScaledJob],
                "{scaling:?}"
            );
        }
        let without_keda = rendered(&job(), &Policy::default(), Scaling::Fixed);
        assert_eq!(kinds(&without_keda), [ChildKind::NetworkPolicy], "no agent runs without KEDA in Job mode");
    }

    #[test]
    fn the_jobs_run_the_deployments_pod_once_never_restarted_and_selected_by_the_network_policy() {
        let deployment_mode = rendered(&CDTarget::test(), &Policy::default(), V2_21);
        let job_mode = rendered(&job(), &Policy::default(), V2_21);
        let deployment_pod = deployment_mode.deployment().unwrap().spec.as_ref().unwrap().template.clone();
        let job = job_mode.scaled_job().unwrap();
        let job_template = &job.spec.job_target_ref.template;
        assert_eq!(job_template.metadata, deployment_pod.metadata, "the same labels and digest");
        let pod = job_pod(&job_mode);
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.containers[0].args.as_deref(), Some(&["--once".to_owned()][..]));
        let without_once = PodSpec { restart_policy: None, ..pod.clone() };
        let mut deployment_spec = deployment_pod.spec.unwrap();
        deployment_spec.containers[0].args = Some(vec!["--once".into()]);
        // `resources: {}` where the Deployment's container has none (what KEDA writes itself).
        deployment_spec.containers[0].resources.get_or_insert_with(Default::default);
        assert_eq!(without_once, deployment_spec, "otherwise the very pod of the Deployment");
        let selector =
            job_mode.network_policy().unwrap().spec.as_ref().unwrap().pod_selector.clone().and_then(|s| s.match_labels);
        let labels = job_template.metadata.as_ref().unwrap().labels.clone().unwrap();
        assert!(selector.unwrap().iter().all(|(k, v)| labels.get(k) == Some(v)), "the egress policy selects the Jobs");
        let spec = &job.spec.job_target_ref;
        assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(0), Some(21600)));
        assert_eq!(pod.termination_grace_period_seconds, Some(Policy::default().termination_grace_period_seconds));
    }

    #[test]
    fn the_strategy_and_scale_on_in_flight_follow_the_keda_release() {
        let strategy_and_switch = |scaling| {
            let children = rendered(&job(), &Policy::default(), scaling);
            let spec = &children.scaled_job().unwrap().spec;
            let strategy = spec.scaling_strategy.as_ref().and_then(|s| s.strategy.clone()).unwrap();
            (strategy, spec.triggers[0].metadata.get("scaleOnInFlight").cloned().unwrap())
        };
        assert_eq!(strategy_and_switch(V2_21), ("default".to_owned(), "true".to_owned()));
        assert_eq!(strategy_and_switch(V2_20), ("accurate".to_owned(), "false".to_owned()));
        let deployment_switch = |target: &CDTarget, scaling| {
            let children = rendered(target, &Policy::default(), scaling);
            children.scaled_object().unwrap().spec.triggers[0].metadata.get("scaleOnInFlight").cloned()
        };
        assert_eq!(deployment_switch(&CDTarget::test(), V2_21).as_deref(), Some("true"));
        assert_eq!(deployment_switch(&CDTarget::test(), V2_20), None, "2.20 gets nothing extra");
        let turned_off = CDTarget::test().with_trigger_meta("scaleOnInFlight", "false");
        assert_eq!(deployment_switch(&turned_off, V2_21).as_deref(), Some("false"), "the tenant's value wins");
    }

    #[test]
    fn the_policy_sets_polling_history_deadline_and_the_run_once_variable() {
        let mut document = PolicyDocument::default();
        document.keda.polling_interval_seconds = 15;
        document.agents.jobs.active_deadline_seconds = 3600;
        document.agents.jobs.successful_jobs_history_limit = 0;
        document.agents.jobs.failed_jobs_history_limit = 1;
        document.agents.jobs.run_once = vec![RunOnceDocument {
            image_prefix: "ghcr.io/".into(),
            convention: "environment".into(),
            argument: None,
            environment: Some(RunOnceEnvironmentDocument { name: "AZP_RUN_ONCE".into(), value: "1".into() }),
        }];
        let policy = crate::policy::from_document(&document).unwrap();
        let children = rendered(&job(), &policy, V2_21);
        let spec = &children.scaled_job().unwrap().spec;
        assert_eq!(spec.polling_interval, Some(15));
        assert_eq!((spec.successful_jobs_history_limit, spec.failed_jobs_history_limit), (Some(0), Some(1)));
        assert_eq!(spec.job_target_ref.active_deadline_seconds, Some(3600));
        assert_eq!(spec.rollout.as_ref().and_then(|r| r.strategy.as_deref()), Some("gradual"));
        let agent = &job_pod(&children).containers[0];
        assert_eq!(agent.args, None);
        let env = agent.env.as_ref().unwrap();
        assert!(env.iter().any(|e| e.name == "AZP_RUN_ONCE" && e.value.as_deref() == Some("1")), "{env:?}");
        let deployment = rendered(&CDTarget::test(), &policy, V2_21);
        assert_eq!(deployment.scaled_object().unwrap().spec.polling_interval, Some(15));
    }

    #[test]
    fn a_built_in_image_gets_neither_argument_nor_variable() {
        let mut document = PolicyDocument::default();
        document.agents.jobs.run_once[0].convention = "builtIn".into();
        let policy = crate::policy::from_document(&document).unwrap();
        let once = rendered(&job(), &policy, V2_21);
        let deployment = rendered(&CDTarget::test(), &policy, V2_21);
        let deployment_env =
            deployment.deployment().unwrap().spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
                .env
                .clone();
        let agent = &job_pod(&once).containers[0];
        assert_eq!((agent.args.clone(), agent.env.clone()), (None, deployment_env));
    }

    #[test]
    fn busy_agents_are_a_risk_only_for_deployments_on_keda_before_2_21() {
        let none = BTreeMap::new();
        let risk = busy_agent_risk(AgentMode::Deployment, V2_20, &none).expect("a risk");
        assert!(risk.contains("kedacore/keda#8185"), "{risk}");
        assert!(risk.contains("spec.mode: Job") && risk.contains("KEDA 2.21.0 or later"), "{risk}");
        assert_eq!(busy_agent_risk(AgentMode::Deployment, V2_21, &none), None);
        assert_eq!(busy_agent_risk(AgentMode::Job, V2_20, &none), None);
        assert_eq!(busy_agent_risk(AgentMode::Job, V2_21, &none), None);
        assert_eq!(busy_agent_risk(AgentMode::Deployment, Scaling::Fixed, &none), None, "no autoscaler, no risk");
    }

    #[test]
    fn a_tenants_scale_on_in_flight_is_named_when_keda_ignores_it_or_it_turns_the_count_off() {
        let on = BTreeMap::from([("scaleOnInFlight".to_owned(), "true".to_owned())]);
        let ignored = busy_agent_risk(AgentMode::Deployment, V2_20, &on).expect("a risk");
        assert!(ignored.contains("scaleOnInFlight `true` is ignored"), "{ignored}");
        let off = BTreeMap::from([("scaleOnInFlight".to_owned(), "0".to_owned())]);
        let turned_off = busy_agent_risk(AgentMode::Deployment, V2_21, &off).expect("a risk");
        assert!(turned_off.contains("leave scaleOnInFlight out"), "{turned_off}");
        assert_eq!(busy_agent_risk(AgentMode::Deployment, V2_21, &on), None);
    }
}
