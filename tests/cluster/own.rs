//! A control plane of one test's own, for the cases the binary's shared one cannot host: a change
//! of something cluster-wide (the policy ConfigMap every CDTarget is rendered under) or a
//! controller started with flags of its own (a short resync). The shared controller has no shard
//! selector, so it reconciles every registration and CDTarget of the shared control plane: a
//! second controller there would fight it over the same objects, and a policy change there would
//! re-render the children other tests are comparing at that moment. A control plane of its own
//! costs a few seconds of start-up and isolates both.

use crate::common::ControlPlane;
use crate::common::cluster::{install, installed_cluster, keda_crds_dir};
use crate::common::process::kill_pid;

/// etcd, kube-apiserver and kube-controller-manager of one test, with `deploy/` and KEDA's CRDs
/// installed as [`installed_cluster`] installs them; killed, and its directory removed, when
/// dropped.
pub struct OwnCluster {
    /// The control plane. `'static` because the scenario kit's tenants hold one; it is leaked
    /// (a few kilobytes) and its processes are killed by [`Drop`], not by the plane's own drop.
    pub cluster: &'static ControlPlane,
}

impl OwnCluster {
    /// Starts and installs a control plane for `test`, or `None` after the SKIP line of
    /// [`installed_cluster`] (no Go, kubectl or KEDA contracts, outside CI).
    pub fn start(test: &str) -> Option<OwnCluster> {
        // The same SKIP rules as every cluster test (it also starts the shared control plane,
        // which the other tests of the binary use anyway).
        installed_cluster(test)?;
        let started = ControlPlane::start().unwrap_or_else(|e| panic!("{test}: a control plane of its own: {e}"));
        let cluster: &'static ControlPlane = Box::leak(Box::new(started));
        let own = OwnCluster { cluster };
        install(cluster, &keda_crds_dir());
        Some(own)
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        // The controller manager and the apiserver first, etcd last, as the plane's own drop does.
        for pid in self.cluster.pids().into_iter().rev() {
            kill_pid(pid);
        }
        let _ = std::fs::remove_dir_all(self.cluster.dir());
    }
}
