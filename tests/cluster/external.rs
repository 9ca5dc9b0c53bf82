//! Pointing the cluster tests at an existing cluster (`CDTARGET_TEST_KUBECONFIG`,
//! `CDTARGET_TEST_AUDIT_LOG`): shown here against this binary's own control plane, reached only
//! through its kubeconfig and its audit log, as an existing cluster would be.

use std::path::PathBuf;

use crate::common::cluster::namespace;
use crate::common::control_plane::{EXTERNAL_AUDIT_LOG, EXTERNAL_KUBECONFIG};
use crate::common::{ControlPlane, HarnessError, skip_or_fail};

#[tokio::test]
async fn an_existing_cluster_is_driven_through_its_kubeconfig_and_read_through_its_audit_log() {
    let test = "an_existing_cluster_is_driven_through_its_kubeconfig_and_read_through_its_audit_log";
    let Some(cluster) = skip_or_fail(test, ControlPlane::shared()) else { return };
    let existing = ControlPlane::external(&cluster.admin_kubeconfig(), Some(cluster.audit_log()))
        .expect("the control plane, as an existing cluster");
    assert!(existing.is_external());
    assert_eq!(existing.server(), cluster.server());
    assert_eq!(existing.version(), cluster.version(), "the version is the server's, asked over the API");
    assert!(existing.pids().is_empty(), "nothing was started for an existing cluster");

    // Administered with the given kubeconfig; what it did is read off the given audit log.
    let mark = existing.audit_mark();
    let ns = namespace(&existing, "existing");
    let events = existing.audit_requests_until(mark, "the namespace create", |events| {
        events.iter().any(|event| event.verb == "create" && event.resource == "namespaces" && event.name == ns)
    });
    assert!(events.iter().any(|event| event.name == ns && event.code == 201), "{events:#?}");

    // A ServiceAccount token kubeconfig carries the existing cluster's server and CA.
    existing.kubectl(&["create", "serviceaccount", "probe", "-n", &ns]).success();
    let kubeconfig = existing.service_account_kubeconfig(&ns, "probe").await;
    let whoami = existing.kubectl_as(&kubeconfig, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_eq!(whoami.success(), format!("system:serviceaccount:{ns}:probe"));
}

#[test]
fn an_existing_cluster_without_its_audit_log_is_unavailable_and_says_which_variable_is_missing() {
    let Err(error) = ControlPlane::external(&PathBuf::from("/nonexistent/kubeconfig"), None) else {
        panic!("an existing cluster without an audit log was accepted");
    };
    let HarnessError::Unavailable(message) = error else { panic!("not unavailable: {error}") };
    assert!(message.contains(EXTERNAL_AUDIT_LOG) && message.contains(EXTERNAL_KUBECONFIG), "{message}");
}
