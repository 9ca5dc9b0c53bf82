//! The agent pod of a CDTarget, as the Deployment (Deployment mode) and the ScaledJob's Jobs (Job
//! mode) both run it.
//!
//! Environment precedence (seed defect 12): the rendered variables first, each name once; a
//! variable of the tenant's `env` with the same name replaces the rendered one in place, the
//! others follow in the tenant's order.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PodDNSConfig, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{SecretDigests, ValidTarget, object_labels, secrets_digest};
use crate::api::{AgentMode, labels};
use crate::policy::{Policy, RunOnceConvention};

/// Key of the personal access token in the token Secret.
pub(crate) const TOKEN_KEY: &str = "AZP_TOKEN";

/// Where the tenant's CA Secret is mounted in the init container.
pub(crate) const TENANT_CA_DIR: &str = "/var/run/cdtarget/tenant-ca";
/// Where the combined CA bundle is written and read.
pub(crate) const CA_BUNDLE_DIR: &str = "/var/run/cdtarget/ca-bundle";
/// The combined CA bundle (system store plus the tenant's CAs).
pub(crate) const CA_BUNDLE_FILE: &str = "/var/run/cdtarget/ca-bundle/ca-certificates.crt";

/// Proxy variables: (variable, key in the proxy Secret). The agent itself reads `VSTS_HTTP_PROXY*`
/// and lowercase `http_proxy`/`no_proxy`; child tools read the upper- and lowercase variants;
/// the seed images' start.sh reads `PROXY_URL`, `PROXY_USER` and `PROXY_PW`.
const PROXY_VARIABLES: &[(&str, &str)] = &[
    ("VSTS_HTTP_PROXY", "PROXY_URL"),
    ("VSTS_HTTP_PROXY_USERNAME", "PROXY_USER"),
    ("VSTS_HTTP_PROXY_PASSWORD", "PROXY_PW"),
    ("PROXY_URL", "PROXY_URL"),
    ("PROXY_USER", "PROXY_USER"),
    ("PROXY_PW", "PROXY_PW"),
    ("HTTP_PROXY", "HTTP_PROXY"),
    ("http_proxy", "HTTP_PROXY"),
    ("HTTPS_PROXY", "HTTPS_PROXY"),
    ("https_proxy", "HTTPS_PROXY"),
    ("FTP_PROXY", "FTP_PROXY"),
    ("NO_PROXY", "NO_PROXY"),
    ("no_proxy", "NO_PROXY"),
];

/// Variables pointing tools at the combined CA bundle.
const CA_VARIABLES: &[&str] =
    &["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"];

/// Builds the bundle without root: the image's system store (when it has one) plus every key of
/// the tenant's CA Secret, into an emptyDir (seed defect 13).
const CA_BUNDLE_SCRIPT: &str = r#"set -eu
out=/var/run/cdtarget/ca-bundle/ca-certificates.crt
: > "$out"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then cat /etc/ssl/certs/ca-certificates.crt >> "$out"; fi
for f in /var/run/cdtarget/tenant-ca/*; do [ -f "$f" ] || continue; cat "$f" >> "$out"; echo >> "$out"; done
"#;

/// The agent pod, as the Deployment and the ScaledJob's Jobs both run it: its labels include
/// [`selector_labels`], so the egress NetworkPolicy selects it in either mode. In Job mode the
/// agent is also told to run once ([`ValidTarget::run_once`]) and never restarted in place.
pub(crate) fn pod_template(valid: &ValidTarget<'_>, policy: &Policy, digests: &SecretDigests) -> PodTemplateSpec {
    let spec = valid.spec();
    let has_ca = spec.ca_cert_ref.is_some();
    let mut pod_labels = object_labels(valid);
    pod_labels.insert(labels::APP_COMPONENT.into(), "agent".into());

    let mut env = environment(valid);
    let mut args = None;
    match &valid.run_once {
        None | Some(RunOnceConvention::BuiltIn) => {}
        Some(RunOnceConvention::Argument(argument)) => args = Some(vec![argument.clone()]),
        Some(RunOnceConvention::Environment { name, value: text }) => {
            let var = value(name, text);
            match env.iter_mut().find(|e| &e.name == name) {
                Some(rendered) => *rendered = var,
                None => env.push(var),
            }
        }
    }
    let agent = Container {
        name: "agent".into(),
        image: Some(spec.agent_image.clone()),
        args,
        env: Some(env),
        resources: spec.agent_resources.clone(),
        security_context: Some(container_security_context()),
        volume_mounts: has_ca.then(|| vec![mount("ca-bundle", CA_BUNDLE_DIR)]),
        ..Container::default()
    };
    let init_containers = has_ca.then(|| {
        vec![Container {
            name: "ca-bundle".into(),
            image: Some(spec.agent_image.clone()),
            command: Some(vec!["/bin/sh".into(), "-c".into(), CA_BUNDLE_SCRIPT.into()]),
            resources: spec.agent_resources.clone(),
            security_context: Some(container_security_context()),
            volume_mounts: Some(vec![
                mount("tenant-ca", TENANT_CA_DIR),
                VolumeMount { read_only: None, ..mount("ca-bundle", CA_BUNDLE_DIR) },
            ]),
            ..Container::default()
        }]
    });
    let volumes = spec.ca_cert_ref.as_ref().map(|secret| {
        vec![
            Volume {
                name: "tenant-ca".into(),
                secret: Some(SecretVolumeSource { secret_name: Some(secret.clone()), ..Default::default() }),
                ..Volume::default()
            },
            Volume { name: "ca-bundle".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
        ]
    });

    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels),
            annotations: Some(BTreeMap::from([(labels::SECRETS_DIGEST.into(), secrets_digest(valid.target, digests))])),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![agent],
            init_containers,
            volumes,
            // A Job's agent that fails must not restart in place and take a second job; a
            // Deployment's pods restart as Deployments require.
            restart_policy: (valid.mode == AgentMode::Job).then(|| "Never".into()),
            image_pull_secrets: (!spec.image_pull_secrets.is_empty()).then(|| spec.image_pull_secrets.clone()),
            dns_policy: spec.dns_policy.clone(),
            dns_config: spec.dns_config.as_ref().map(|config| PodDNSConfig {
                // The nameservers as checked: canonical, each once.
                nameservers: config
                    .nameservers
                    .as_ref()
                    .map(|_| valid.nameservers.iter().map(|net| net.addr().to_string()).collect()),
                ..config.clone()
            }),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(policy.termination_grace_period_seconds),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(policy.run_as_user),
                run_as_group: Some(policy.run_as_user),
                fs_group: Some(policy.run_as_user),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
                ..PodSecurityContext::default()
            }),
            ..PodSpec::default()
        }),
    }
}

/// The agent's environment, each name once.
pub(crate) fn environment(valid: &ValidTarget<'_>) -> Vec<EnvVar> {
    let spec = valid.spec();
    let config = &spec.config;
    let mut env = vec![value("AZP_URL", &config.url), value("AZP_POOL", &config.pool_name)];
    if let Some(name) = &config.agent_name {
        env.push(value("AZP_AGENT_NAME", name));
    }
    if let Some(work) = &config.work_dir {
        env.push(value("AZP_WORK", work));
    }
    if let Some(mtu) = &config.mtu_value {
        // The variable the agent reads; the seed's AGENT_MTU_VALUE is ignored (seed defect 14).
        env.push(value("AGENT_DOCKER_MTU_VALUE", mtu));
    }
    env.push(secret_key("AZP_TOKEN", &spec.token_ref, TOKEN_KEY, false));
    if let Some(proxy) = &spec.proxy_ref {
        env.extend(PROXY_VARIABLES.iter().map(|(variable, key)| secret_key(variable, proxy, key, true)));
    }
    if spec.ca_cert_ref.is_some() {
        env.extend(CA_VARIABLES.iter().map(|variable| value(variable, CA_BUNDLE_FILE)));
    }
    for var in &spec.env {
        match env.iter_mut().find(|e| e.name == var.name) {
            Some(rendered) => *rendered = var.clone(),
            None => env.push(var.clone()),
        }
    }
    env
}

fn value(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

fn secret_key(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: optional.then_some(true),
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount { name: volume.into(), mount_path: path.into(), read_only: Some(true), ..VolumeMount::default() }
}

/// Pod Security Standard "restricted" (seed defect 19).
fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
        ..SecurityContext::default()
    }
}
