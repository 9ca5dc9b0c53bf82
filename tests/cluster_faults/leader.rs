//! Two controller processes on one Lease: the leader SIGKILLed in the middle of an apply, the
//! standby taking over.

use std::fs;
use std::time::{Duration, Instant};

use crate::common::cluster::{CONVERGE, Controller, own_installed_cluster};
use crate::common::control_plane::until_appended;
use crate::kit::{
    ONE_AT_A_TIME, Set, converged, figure, lease_holder, names, onboard, registration, tenant_writes,
    until_first_tenant_write,
};

/// What a replica logs when it takes the Lease and starts its reconcilers, and when it finds it
/// held by another after all.
const ACQUIRED: &str = "acquired the lease: starting the reconcilers";
const LOST: &str = "lost the lease";

/// The Lease's validity (kube-lease-manager's default, which the controller keeps): the longest a
/// standby waits for a dead leader's Lease to run out.
const LEASE_DURATION: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_leader_killed_mid_apply_is_replaced_by_the_standby_which_converges_without_orphans() {
    let test = "a_leader_killed_mid_apply_is_replaced_by_the_standby_which_converges_without_orphans";
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cluster) = own_installed_cluster(test) else { return };
    // Two replicas started together, as a Deployment with two replicas starts them.
    let (mut first, mut second) =
        tokio::join!(Controller::start(&cluster, "cdtarget-a", &[]), Controller::start(&cluster, "cdtarget-b", &[]));
    let leader_name = lease_holder(&cluster, Duration::from_secs(60), |holder| holder.starts_with("cdtarget-")).await;
    let (leader, standby, standby_name) = if leader_name == "cdtarget-a" {
        (&mut first, &mut second, "cdtarget-b")
    } else {
        (&mut second, &mut first, "cdtarget-a")
    };
    let (leader_log, standby_log) = (leader.log().to_path_buf(), standby.log().to_path_buf());
    until_appended(&leader_log, CONVERGE, "the leader starting its reconcilers", || {
        fs::read_to_string(&leader_log).unwrap_or_default().contains(ACQUIRED).then_some(())
    });

    let small = Set::small();
    let (tenant, head) = onboard(cluster.cluster(), &small, "");
    converged(&tenant, &small, &head, &leader_log).await;

    // A big push: 30 ConfigMaps and 6 CDTargets more. The leader is killed as soon as the API
    // server has answered its first write as the tenant.
    let big = small.clone().with_config_maps(names("batch", 30)).with_targets(names("agents", 6));
    let mark = cluster.audit_mark();
    let big_head = big.commit_over(&small, &tenant, "big");
    figure(&format!("pushed {} (36 objects more), reconcile requested", &big_head[..12]));
    tenant.request_reconcile("big");
    until_first_tenant_write(&cluster, mark, &tenant);
    let killed = Instant::now();
    leader.kill();
    // Where the standby's log stands at the kill: it acquires the Lease after this point only.
    let standby_log_at_kill = fs::read_to_string(&standby_log).unwrap_or_default().len();

    // Mid-apply: the revision is not recorded, and only part of it was written.
    let status = registration(&tenant).await.status.unwrap_or_default();
    assert_eq!(status.last_applied_revision.as_deref(), Some(head.as_str()), "the apply had finished before the kill");
    let written = tenant_writes(&cluster, mark, &tenant, "patch");
    let new_objects: std::collections::BTreeSet<_> = big.objects().difference(&small.objects()).cloned().collect();
    figure(&format!(
        "the killed leader had applied {} of the {} objects of the big push",
        written.len(),
        big.objects().len()
    ));
    assert!(written.len() < big.objects().len(), "the apply had finished before the kill: {written:?}");

    // While nobody leads, the tenant takes back what the killed leader had created, and two of
    // the new CDTargets: the standby never sees the big revision.
    let created: std::collections::BTreeSet<(String, String)> = written.intersection(&new_objects).cloned().collect();
    assert!(!created.is_empty(), "the killed leader created nothing new: {written:?}");
    let mut taken_back = created.clone();
    taken_back.extend(["agents-04", "agents-05"].map(|name| ("CDTarget".to_string(), name.to_string())));
    let after = big.clone().without(&taken_back);
    let after_head = after.commit_over(&big, &tenant, "take back");
    figure(&format!("pushed {} while nobody leads, {:?} taken back", &after_head[..12], created));

    let holder = lease_holder(&cluster, LEASE_DURATION * 3, move |holder| holder == standby_name).await;
    let takeover = killed.elapsed();
    figure(&format!(
        "takeover: {holder} holds the Lease {:.1} s after the leader was killed (lease duration {} s)",
        takeover.as_secs_f64(),
        LEASE_DURATION.as_secs()
    ));
    // One leader at a time: the standby started its reconcilers once, after the kill, and
    // nobody lost the Lease (a replica that finds another holder exits).
    let standby_text = until_appended(&standby_log, CONVERGE, "the standby starting its reconcilers", || {
        let text = fs::read_to_string(&standby_log).unwrap_or_default();
        text.contains(ACQUIRED).then_some(text)
    });
    let leader_text = fs::read_to_string(&leader_log).unwrap_or_default();
    assert!(
        !standby_text[..standby_log_at_kill].contains(ACQUIRED),
        "both replicas led before the kill:\n{}",
        &standby_text[..standby_log_at_kill]
    );
    assert_eq!(standby_text.matches(ACQUIRED).count(), 1, "{standby_text}");
    assert_eq!(leader_text.matches(ACQUIRED).count(), 1, "{leader_text}");
    assert!(!standby_text.contains(LOST) && !leader_text.contains(LOST), "a replica lost the Lease");
    // No request needed: the new leader's reconciler starts with every registration as it
    // stands.
    converged(&tenant, &after, &after_head, &standby_log).await;
    figure(&format!(
        "the standby converged on {} objects {:.1} s after the kill ({:.1} s after taking over)",
        after.objects().len(),
        killed.elapsed().as_secs_f64(),
        (killed.elapsed() - takeover).as_secs_f64()
    ));
    // What the killed leader created and Git took back is gone, deleted by the new leader as the
    // tenant: nothing it wrote escaped the inventory.
    let deleted = tenant_writes(&cluster, mark, &tenant, "delete");
    assert!(created.is_subset(&deleted), "created {created:?}, deleted {deleted:?}");
}
