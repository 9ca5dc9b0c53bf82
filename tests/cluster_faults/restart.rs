//! The controller SIGKILLed in the middle of an apply and started again (a container restart:
//! same pod name, same cache volume).

use std::collections::BTreeSet;
use std::time::Instant;

use crate::common::cluster::{Controller, own_installed_cluster};
use crate::kit::{
    ONE_AT_A_TIME, Set, converged, figure, names, onboard, registration, tenant_writes, until_first_tenant_write,
};

#[tokio::test]
async fn a_controller_killed_mid_apply_and_restarted_converges_and_prunes_exactly_what_leaves_git() {
    let test = "a_controller_killed_mid_apply_and_restarted_converges_and_prunes_exactly_what_leaves_git";
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cluster) = own_installed_cluster(test) else { return };
    let mut controller = Controller::start(&cluster, "cdtarget-restarted", &[]).await;
    let log = controller.log().to_path_buf();
    let small = Set::small();
    let (tenant, head) = onboard(cluster.cluster(), &small, "");
    converged(&tenant, &small, &head, &log).await;

    // 30 ConfigMaps and 5 CDTargets more; killed once the first of them is written.
    let big = small.clone().with_config_maps(names("batch", 30)).with_targets(names("agents", 5));
    let mark = cluster.audit_mark();
    let big_head = big.commit_over(&small, &tenant, "big");
    tenant.request_reconcile("big");
    until_first_tenant_write(&cluster, mark, &tenant);
    controller.kill();
    let killed = Instant::now();
    let status = registration(&tenant).await.status.unwrap_or_default();
    assert_eq!(status.last_applied_revision.as_deref(), Some(head.as_str()), "the apply had finished before the kill");
    let written = tenant_writes(&cluster, mark, &tenant, "patch");
    figure(&format!("killed after {} of the {} objects of the push were applied", written.len(), big.objects().len()));
    assert!(written.len() < big.objects().len(), "the apply had finished before the kill: {written:?}");

    // Started again under the same name: it holds the Lease at once and finishes the revision.
    let restarted = Controller::start(&cluster, "cdtarget-restarted", &[]).await;
    converged(&tenant, &big, &big_head, &log).await;
    figure(&format!(
        "converged on {} objects {:.1} s after the kill (restart included)",
        big.objects().len(),
        killed.elapsed().as_secs_f64()
    ));

    // A push taking back 10 ConfigMaps and 2 CDTargets: exactly those are pruned, as the tenant;
    // their children go with them (garbage collector).
    let leaving: BTreeSet<(String, String)> = names("batch", 10)
        .into_iter()
        .map(|name| ("ConfigMap".to_string(), name))
        .chain(["agents-00", "agents-03"].map(|name| ("CDTarget".to_string(), name.to_string())))
        .collect();
    let after = big.clone().without(&leaving);
    let mark = cluster.audit_mark();
    let after_head = after.commit_over(&big, &tenant, "take back");
    tenant.request_reconcile("take back");
    converged(&tenant, &after, &after_head, &log).await;
    let deleted = tenant_writes(&cluster, mark, &tenant, "delete");
    assert_eq!(deleted, leaving, "the prune deleted other objects than those that left Git");
    drop(restarted);
}
