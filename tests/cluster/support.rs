//! What the cluster tests share: the control plane, and `deploy/` plus KEDA's CRDs installed on it
//! once, as a platform team installs them.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::process::find_on_path;
use crate::common::{ControlPlane, HarnessError, skip_or_fail};

/// KEDA's CRDs, read where CI keeps the shared contracts (beside the checkout); never copied in.
pub fn keda_crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/contracts/keda")
}

/// What installing printed: `kubectl apply -k deploy/` and `kubectl apply -f <keda CRDs>`.
pub struct Installed {
    pub deploy: String,
    pub keda: String,
}

/// The shared control plane with cdtarget and KEDA's CRDs installed and established, or `None`
/// after a SKIP line (no Go, no KEDA contracts) when not under `CI`.
pub fn installed_cluster(test: &str) -> Option<(&'static ControlPlane, &'static Installed)> {
    if find_on_path("kubectl").is_none() {
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable("kubectl is not installed".into())))?;
    }
    let cluster = skip_or_fail(test, ControlPlane::shared())?;
    let keda = keda_crds_dir();
    if !keda.is_dir() {
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable(format!("KEDA's CRDs are not at {}", keda.display()))))?;
    }
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        // Exactly as README and docs/operations.md say, from the repository root.
        let deploy = cluster.kubectl(&["apply", "-k", "deploy/"]).success();
        let keda = cluster.kubectl(&["apply", "-f", keda.to_str().expect("UTF-8 path")]).success();
        cluster
            .kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/cdtargets.cdtarget.io",
                "crd/tenantrepositories.cdtarget.io",
                "crd/scaledobjects.keda.sh",
                "crd/triggerauthentications.keda.sh",
            ])
            .success();
        Installed { deploy, keda }
    });
    Some((cluster, installed))
}

/// A new namespace named `<prefix>-<n>`, created with kubectl as the admin.
pub fn namespace(cluster: &ControlPlane, prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::SeqCst));
    cluster.kubectl(&["create", "namespace", &name]).success();
    name
}
