//! The KEDA objects of a CDTarget: a TriggerAuthentication, and a ScaledObject (Deployment
//! mode) or a ScaledJob (Job mode); one of each per CDTarget, named after it and owned by it
//! (never after the pool name, seed defect 15).
//!
//! What they count depends on the KEDA release ([`KedaVersion`]): from 2.21 the scaler's
//! `scaleOnInFlight` makes job requests busy agents have received count again.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::JobSpec;

pub(crate) use super::pod::TOKEN_KEY;
use super::validate::SCALE_ON_IN_FLIGHT;
use super::{SecretDigests, ValidTarget, child_metadata, pod};
use crate::api::keda::{
    AuthenticationRef, KedaVersion, Rollout, ScaleTargetRef, ScaleTrigger, ScaledJob, ScaledJobSpec, ScaledObject,
    ScaledObjectSpec, ScalingStrategy, SecretTargetRef, TriggerAuthentication, TriggerAuthenticationSpec,
};
use crate::api::labels;
use crate::policy::Policy;

/// The scaler's metadata every KEDA object starts from: the pool and where the organization URL
/// is read.
fn base_metadata(valid: &ValidTarget<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("poolName".to_owned(), valid.spec().config.pool_name.clone()),
        ("organizationURLFromEnv".to_owned(), "AZP_URL".to_owned()),
    ])
}

/// The trigger on the pool's queue, authenticated by the TriggerAuthentication.
fn trigger(valid: &ValidTarget<'_>, metadata: BTreeMap<String, String>) -> ScaleTrigger {
    ScaleTrigger {
        kind: "azure-pipelines".into(),
        name: Some("azure-pipelines".into()),
        metadata,
        authentication_ref: Some(AuthenticationRef { name: valid.name.to_owned(), kind: None }),
    }
}

/// Renders the ScaledObject scaling the agent Deployment on the pool's queue. On KEDA 2.21 and
/// later it asks for busy agents to be counted (`scaleOnInFlight`, which is 2.21's default too;
/// written out so that the object says what it relies on) unless the tenant set the key.
pub(crate) fn scaled_object(valid: &ValidTarget<'_>, policy: &Policy, version: KedaVersion) -> ScaledObject {
    let spec = valid.spec();
    // Rendered defaults first, then the tenant's triggerMeta on top (the seed's convention).
    let mut metadata = base_metadata(valid);
    if version.counts_busy_agents() {
        metadata.insert(SCALE_ON_IN_FLIGHT.into(), "true".into());
    }
    metadata.extend(spec.trigger_meta.clone());
    let mut object = ScaledObject::new(
        valid.name,
        ScaledObjectSpec {
            scale_target_ref: ScaleTargetRef {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                name: valid.name.to_owned(),
            },
            polling_interval: Some(policy.keda.polling_interval_seconds),
            min_replica_count: Some(valid.min_replicas),
            max_replica_count: Some(valid.max_replicas),
            triggers: vec![trigger(valid, metadata)],
        },
    );
    object.metadata = child_metadata(valid, valid.name);
    object
}

/// Renders the ScaledJob that starts one Job per queued pipeline job (Job mode): each Job runs
/// the agent pod of the Deployment mode, told to take one job and exit, never restarted or
/// retried (a second try would take a second job).
///
/// The strategy keeps one Job per pipeline job no agent has received:
/// - KEDA 2.21 and later: strategy `default` (new Jobs = queue − unfinished Jobs) with
///   `scaleOnInFlight: "true"` (the queue counts requests received by running agents, so each
///   running Job's own job cancels it out).
/// - KEDA 2.20: no such switch; strategy `accurate` (new Jobs = queue − pending Jobs, the queue
///   counting only requests no agent has received). Residual: a Job whose pod runs but whose
///   agent has not yet received its job is not pending, so KEDA starts another Job for that job
///   at every poll of that window (3 queued jobs made 6 Jobs in tests/cluster/agents.rs). `scaleOnInFlight: "false"` (ignored by 2.20) keeps that arithmetic right if
///   KEDA is upgraded before the ScaledJob is rendered again.
///
/// `rollout: gradual` keeps running Jobs when the ScaledJob changes (a rotated Secret, a new
/// image): KEDA's default deletes the Jobs of earlier generations, and with them the pipeline
/// jobs they run.
pub(crate) fn scaled_job(
    valid: &ValidTarget<'_>,
    policy: &Policy,
    digests: &SecretDigests,
    version: KedaVersion,
) -> ScaledJob {
    let mut metadata = base_metadata(valid);
    // The tenant may not set scaleOnInFlight in Job mode (validation refuses it).
    metadata.extend(valid.spec().trigger_meta.clone());
    let busy = version.counts_busy_agents();
    metadata.insert(SCALE_ON_IN_FLIGHT.into(), busy.to_string());
    let strategy = if busy { "default" } else { "accurate" };
    let jobs = &policy.jobs;
    let mut template = pod::pod_template(valid, policy, digests);
    // KEDA's first write of a ScaledJob (its finalizer) fills in `resources: {}` where a
    // container has none; a spec that already has it keeps its generation, where a new one
    // restarts KEDA's scale loop mid-creation and made it start one Job too many (seen in
    // tests/cluster/keda_operator.rs).
    if let Some(pod) = template.spec.as_mut() {
        for container in pod.containers.iter_mut().chain(pod.init_containers.iter_mut().flatten()) {
            container.resources.get_or_insert_with(Default::default);
        }
    }
    let mut object = ScaledJob::new(
        valid.name,
        ScaledJobSpec {
            job_target_ref: JobSpec {
                template,
                active_deadline_seconds: Some(jobs.active_deadline_seconds),
                backoff_limit: Some(0),
                ..JobSpec::default()
            },
            polling_interval: Some(policy.keda.polling_interval_seconds),
            successful_jobs_history_limit: Some(jobs.successful_jobs_history_limit),
            failed_jobs_history_limit: Some(jobs.failed_jobs_history_limit),
            min_replica_count: Some(valid.min_replicas),
            max_replica_count: Some(valid.max_replicas),
            rollout: Some(Rollout { strategy: Some("gradual".into()) }),
            scaling_strategy: Some(ScalingStrategy { strategy: Some(strategy.into()) }),
            triggers: vec![trigger(valid, metadata)],
        },
    );
    object.metadata = child_metadata(valid, valid.name);
    // KEDA copies the ScaledJob's labels onto its Jobs, over its own: without this the Jobs
    // would say cdtarget manages them, which only KEDA does.
    object
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(JOB_EXCLUDED_LABELS.into(), labels::MANAGED_BY.into());
    object
}

/// The ScaledJob annotation naming labels KEDA does not copy onto the Jobs it makes.
pub(crate) const JOB_EXCLUDED_LABELS: &str = "scaledjob.keda.sh/job-excluded-labels";

/// Renders the TriggerAuthentication giving the scaler the tenant's token.
pub(crate) fn trigger_authentication(valid: &ValidTarget<'_>) -> TriggerAuthentication {
    let mut object = TriggerAuthentication::new(
        valid.name,
        TriggerAuthenticationSpec {
            secret_target_ref: vec![SecretTargetRef {
                parameter: "personalAccessToken".into(),
                name: valid.spec().token_ref.clone(),
                key: TOKEN_KEY.into(),
            }],
        },
    );
    object.metadata = child_metadata(valid, valid.name);
    object
}
