//! `cdtarget diff DIR|URL --namespace NS`: what a push would create, change and prune, before it
//! is pushed. The tree is loaded exactly as `validate` and `render` load it (same source
//! arguments, same loader), then every tenant object is server-side dry-run as the controller
//! would apply it: as the tenant's ServiceAccount (impersonated when the caller may, else as the
//! caller, said on stderr), with the tenant field manager and strict field validation. Each
//! result is compared with the live object, noise stripped and every Secret masked: its keys and
//! whether each value changes, nothing that can carry its data (see [`mask_secret`]). The
//! children the controller renders for every CDTarget are previewed too: server-side dry-run
//! with the controller's field manager when the caller may write them, else compared client-side
//! (the fields the controller sets, against the live object), and each says which. Prunes come
//! from the inventory of the registration's `SyncStatus` in the namespace.
//!
//! Exit codes as `kubectl diff`: 0 no differences, 1 differences, 2 an error (bad input, an
//! object the API server refuses, no cluster), with the located problems on stderr.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use serde::Serialize;
use serde_json::{Map, Value};

use super::SourceArgs;
use crate::api::tenant_repository::InventoryEntry;
use crate::api::{CDTarget, FIELD_MANAGER, SyncStatus, labels};
use crate::apply::discovery::{Discovery, Lookup};
use crate::apply::drift::live_matches;
use crate::apply::refusal::{Origin, Origins, Refusal};
use crate::apply::server_side::{self, impersonating_client, service_account_user};
use crate::apply::{entry_of, prune_plan};
use crate::manifests::ApplySet;
use crate::policy::Policy;
use crate::problem::Problem;
use crate::render::{self, ChildKind, Scaling, SecretDigests};

/// Exit code: differences found.
pub const EXIT_DIFFERENT: u8 = 1;
/// Exit code: an error (bad input, a refused object, no cluster).
pub const EXIT_ERROR: u8 = 2;

/// Arguments of `diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Where the manifests come from, and the tenant namespace (`--namespace`).
    #[command(flatten)]
    pub source: SourceArgs,
    /// The kubeconfig file. Default: `$KUBECONFIG`, `~/.kube/config`, or the in-cluster
    /// ServiceAccount.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use. Default: its current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The tenant's ServiceAccount in the namespace (the registration's
    /// `spec.serviceAccountName`), impersonated for the dry run when the caller may.
    #[arg(long, value_name = "NAME", default_value = "cdtarget-tenant")]
    pub service_account: String,
    /// The registration (TenantRepository name) whose `SyncStatus` inventory says what would be
    /// pruned; needed only when several registrations target the namespace. (Not
    /// `--registration`: `gitlab-sync` takes a registration FILE under that name.)
    #[arg(long = "registration-name", value_name = "NAME")]
    pub registration: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = DiffOutput::Text, value_name = "FORMAT")]
    pub output: DiffOutput,
}

/// Output format of `diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffOutput {
    /// A unified diff per object, as `kubectl diff` prints.
    Text,
    /// One JSON array of `{"action", "apiVersion", "kind", "namespace", "name", "preview", "diff"}`.
    Json,
}

/// What a push would do to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The object does not exist yet.
    Create,
    /// The object exists and would change.
    Change,
    /// The object left Git and would be deleted.
    Prune,
}

/// How an object was previewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preview {
    /// A server-side dry run (admission, defaulting and validation ran).
    ServerDryRun,
    /// Compared on the client: the fields the controller sets, against the live object (the
    /// caller may not write this kind, so the API server could not be asked).
    ClientSide,
    /// The live object, as the prune would delete it.
    Live,
}

/// One object that would change.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// What would happen to it.
    pub action: Action,
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// How it was previewed.
    pub preview: Preview,
    /// The unified diff, live (`-`) against what the push would leave (`+`).
    pub diff: String,
}

/// `cdtarget diff`: prints what a push would change; the exit code says whether anything would.
pub fn main(args: &DiffArgs) -> ExitCode {
    let (policy, set) = match super::load_source(&args.source) {
        Ok(loaded) => loaded,
        Err(problems) => return fail(&problems),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&[Problem::field("", format!("cannot start: {e}"))]),
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let outcome = runtime.block_on(preview(args, &policy, &set));
    let (changes, notes) = match outcome {
        Ok(previewed) => previewed,
        Err(problems) => return fail(&problems),
    };
    let mut err = io::stderr().lock();
    for note in &notes {
        let _ = writeln!(err, "cdtarget diff: {note}");
    }
    let mut out = io::stdout().lock();
    let written = match args.output {
        DiffOutput::Text => changes.iter().try_for_each(|change| out.write_all(change.diff.as_bytes())),
        DiffOutput::Json => {
            serde_json::to_writer_pretty(&mut out, &changes).map_err(io::Error::other).and_then(|()| writeln!(out))
        }
    };
    match written.and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => fail(&[Problem::field("", format!("writing: {e}"))]),
        _ if changes.is_empty() => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_DIFFERENT),
    }
}

fn fail(problems: &[Problem]) -> ExitCode {
    let mut err = io::stderr().lock();
    for problem in problems {
        let _ = writeln!(err, "{problem}");
    }
    ExitCode::from(EXIT_ERROR)
}

/// The changes the set would make in the namespace, and notes for stderr (who the dry run
/// acted as, how children were previewed, whether prunes are known).
async fn preview(args: &DiffArgs, policy: &Policy, set: &ApplySet) -> Result<(Vec<Change>, Vec<String>), Vec<Problem>> {
    let namespace = args.source.namespace.as_str();
    let caller = client(args).await.map_err(|message| vec![Problem::field("", message)])?;
    let cluster_error = |what: &str, e: kube::Error| vec![Problem::field("", format!("{what}: {e}"))];
    let mut notes = Vec::new();

    let tenant_user = service_account_user(namespace, &args.service_account);
    let tenant = if may_impersonate(&caller, namespace, &args.service_account).await {
        notes.push(format!("dry run as {tenant_user} (impersonated, as the controller applies)"));
        impersonating_client(&caller, &tenant_user).map_err(|e| cluster_error("impersonating", e))?
    } else {
        notes.push(format!(
            "dry run as the caller: it may not impersonate {tenant_user}, so the caller's rights are checked, not the tenant's (the same when the caller is bound to the tenant Role, as docs/validate-in-ci.md sets up)"
        ));
        caller.clone()
    };
    let discovery = Discovery::new(caller.clone());

    // The tenant's objects, as the controller sends them.
    let objects = set.objects(namespace);
    let origins: Origins = objects
        .iter()
        .zip(&set.documents)
        .filter_map(|(object, document)| Some((entry_of(object)?, Origin::of(document))))
        .collect();
    let answers = server_side::dry_run_all(&tenant, &discovery, &objects, |_| {}).await;
    let mut refused = Vec::new();
    let mut changes = Vec::new();
    for (object, answer) in objects.iter().zip(answers) {
        let entry = entry_of(object).unwrap_or_default();
        match answer {
            Err(e) => refused.extend(Refusal::of(entry.clone(), &e.source).problems(origins.get(&entry))),
            Ok(after) => {
                let resource = resource(&discovery, &entry).await.map_err(|e| cluster_error("discovery", e))?;
                let live = get(&tenant, &resource, &entry).await.map_err(|e| cluster_error("reading", e))?;
                changes.extend(compare(&entry, live, after, Preview::ServerDryRun));
            }
        }
    }
    if !refused.is_empty() {
        return Err(refused);
    }

    // The children the controller renders for every CDTarget.
    // The KEDA the controller would render for: the same discovery, the same rule.
    let keda = crate::apply::keda::discover_keda(&caller).await.map_err(|e| cluster_error("discovery", e))?;
    let scaling = render::scaling_for(keda, policy.keda.version);
    let mut client_side = BTreeSet::new();
    for target in set.cdtargets() {
        for (resource, body) in children(&tenant, namespace, target, policy, scaling).await? {
            let entry = entry_of(&body).unwrap_or_default();
            let live = match get(&caller, &resource, &entry).await {
                Ok(live) => live,
                Err(_) => get(&tenant, &resource, &entry).await.ok().flatten(),
            };
            let api: Api<DynamicObject> = Api::namespaced_with(caller.clone(), namespace, &resource);
            let params = PatchParams {
                dry_run: true,
                force: true,
                field_manager: Some(FIELD_MANAGER.to_owned()),
                field_validation: Some(ValidationDirective::Strict),
            };
            match api.patch(&entry.name, &params, &Patch::Apply(&body)).await {
                Ok(after) => {
                    let after = serde_json::to_value(after).unwrap_or_default();
                    changes.extend(compare(&entry, live, after, Preview::ServerDryRun));
                }
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    client_side.insert(entry.kind.clone());
                    changes.extend(compare_client_side(&entry, live, &body));
                }
                Err(e) => {
                    return Err(Refusal::of(entry, &e).problems(None));
                }
            }
        }
    }
    if !client_side.is_empty() {
        let kinds: Vec<String> = client_side.into_iter().collect();
        notes.push(format!(
            "CDTarget children ({}) previewed client-side: the caller may not write them, so the fields the controller sets are compared with the live objects",
            kinds.join(", ")
        ));
    }

    // What left Git, from the inventory the controller recorded.
    match inventory(&caller, namespace, args.registration.as_deref()).await {
        Ok(Some(previous)) => {
            let current: Vec<InventoryEntry> = objects.iter().filter_map(entry_of).collect();
            for entry in prune_plan(&previous, &current) {
                let Ok(resource) = resource(&discovery, &entry).await else { continue };
                if let Ok(Some(live)) = get(&tenant, &resource, &entry).await {
                    changes.extend(prune(&entry, live));
                }
            }
        }
        Ok(None) => notes.push(format!(
            "prunes are unknown: no SyncStatus of {} in {namespace} (give --registration-name NAME when several registrations target it)",
            args.registration.as_deref().unwrap_or("a registration")
        )),
        Err(message) => notes.push(format!("prunes are unknown: {message}")),
    }
    Ok((changes, notes))
}

/// The caller's client for `--kubeconfig` and `--context`, or the environment's.
async fn client(args: &DiffArgs) -> Result<Client, String> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    // A YAML parser's message can quote the file's values, a token among them.
    let said = |e: &KubeconfigError| match e {
        KubeconfigError::Parse(_) => "not a valid kubeconfig (YAML); its content is not shown".to_owned(),
        other => other.to_string(),
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|e| format!("--kubeconfig {}: {}", path.display(), said(&e)))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| format!("--kubeconfig {}: {}", path.display(), said(&e)))?
        }
        None if args.context.is_some() => {
            Config::from_kubeconfig(&options).await.map_err(|e| format!("--context: {}", said(&e)))?
        }
        None => {
            Config::infer().await.map_err(|_| "no cluster: give --kubeconfig FILE, or set KUBECONFIG".to_owned())?
        }
    };
    Client::try_from(config).map_err(|e| format!("cannot build a client: {e}"))
}

/// Whether the caller may impersonate the ServiceAccount (a SelfSubjectAccessReview).
async fn may_impersonate(caller: &Client, namespace: &str, service_account: &str) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("impersonate".into()),
                resource: Some("serviceaccounts".into()),
                namespace: Some(namespace.into()),
                name: Some(service_account.into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(caller.clone());
    api.create(&PostParams::default(), &review)
        .await
        .is_ok_and(|answer| answer.status.is_some_and(|status| status.allowed))
}

async fn resource(discovery: &Discovery, entry: &InventoryEntry) -> Result<ApiResource, kube::Error> {
    match discovery.lookup(&entry.api_version, &entry.kind).await? {
        Lookup::Served { resource, .. } => Ok(resource),
        _ => Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(entry.kind.clone()))),
    }
}

async fn get(client: &Client, resource: &ApiResource, entry: &InventoryEntry) -> Result<Option<Value>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, resource);
    Ok(api.get_opt(&entry.name).await?.and_then(|live| serde_json::to_value(live).ok()))
}

/// The children of `target` as the controller would send them: owned by the live CDTarget when
/// there is one, with the digests of the Secrets the caller can read (else the live
/// Deployment's digest, so that an unreadable Secret is not shown as a change).
async fn children(
    tenant: &Client,
    namespace: &str,
    target: &CDTarget,
    policy: &Policy,
    scaling: Scaling,
) -> Result<Vec<(ApiResource, Value)>, Vec<Problem>> {
    let mut target = target.clone();
    let name = target.metadata.name.clone().unwrap_or_default();
    let live: Api<CDTarget> = Api::namespaced(tenant.clone(), namespace);
    if let Ok(Some(live)) = live.get_opt(&name).await {
        target.metadata.uid = live.metadata.uid;
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(tenant.clone(), namespace);
    let mut digests = SecretDigests::new();
    for secret in render::referenced_secrets(&target).into_iter().chain(render::rolled_secrets(&target)) {
        if let Ok(Some(read)) = secrets.get_opt(secret).await {
            digests.insert(secret.to_owned(), render::secret_digest(&read.data.unwrap_or_default()));
        }
    }
    let rendered = render::render(&target, policy, &digests, scaling)?;
    let mut children: Vec<(ApiResource, Value)> =
        rendered.iter().map(|child| (child.kind().resource(), child.to_value())).collect();
    let unreadable = render::referenced_secrets(&target).iter().any(|s| !digests.contains_key(*s));
    let deployment = children.iter_mut().find(|(resource, _)| resource.kind == ChildKind::Deployment.kind());
    if unreadable && let Some((_, deployment)) = deployment {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(tenant.clone(), namespace);
        if let Ok(Some(live)) = api.get_opt(&name).await {
            let digest = live
                .spec
                .and_then(|spec| spec.template.metadata)
                .and_then(|meta| meta.annotations)
                .and_then(|annotations| annotations.get(labels::SECRETS_DIGEST).cloned());
            if let (Some(digest), Some(annotations)) =
                (digest, deployment.pointer_mut("/spec/template/metadata/annotations").and_then(Value::as_object_mut))
            {
                annotations.insert(labels::SECRETS_DIGEST.into(), Value::String(digest));
            }
        }
    }
    Ok(children)
}

/// The inventory of the registration's SyncStatus in `namespace`; `None` when there is none (or
/// several and no `registration` picks one).
async fn inventory(
    caller: &Client,
    namespace: &str,
    registration: Option<&str>,
) -> Result<Option<Vec<InventoryEntry>>, String> {
    let api: Api<SyncStatus> = Api::namespaced(caller.clone(), namespace);
    let list =
        api.list(&Default::default()).await.map_err(|e| format!("listing the SyncStatuses of {namespace}: {e}"))?;
    let mut matching: Vec<SyncStatus> = list
        .items
        .into_iter()
        .filter(|s| {
            registration.is_none_or(|name| s.spec.registration.name == name || s.metadata.name.as_deref() == Some(name))
        })
        .collect();
    if matching.len() != 1 {
        return Ok(None);
    }
    let status = matching.remove(0).status.unwrap_or_default();
    Ok(Some(status.inventory.into_iter().filter(|e| e.namespace == namespace).collect()))
}

/// The change from `live` to `after` (both as the API server returned them), if any.
pub fn compare(entry: &InventoryEntry, live: Option<Value>, after: Value, preview: Preview) -> Option<Change> {
    let before = live.map(|live| normalize(&live));
    let after = normalize(&after);
    if before.as_ref() == Some(&after) {
        return None;
    }
    let action = if before.is_some() { Action::Change } else { Action::Create };
    Some(change(entry, action, preview, before, Some(after)))
}

/// The change of a child the caller may not dry-run: only the fields the controller sets
/// (`desired`) are compared with the live object, so defaults and other managers' fields are
/// not shown as changes.
pub fn compare_client_side(entry: &InventoryEntry, live: Option<Value>, desired: &Value) -> Option<Change> {
    let desired = normalize(desired);
    match live {
        None => Some(change(entry, Action::Create, Preview::ClientSide, None, Some(desired))),
        Some(live) if live_matches(&desired, &live) => None,
        Some(live) => {
            let before = project(&live, &desired);
            Some(change(entry, Action::Change, Preview::ClientSide, Some(before), Some(desired)))
        }
    }
}

/// The prune of `live`.
pub fn prune(entry: &InventoryEntry, live: Value) -> Option<Change> {
    Some(change(entry, Action::Prune, Preview::Live, Some(normalize(&live)), None))
}

/// Every preview is made here, so a Secret is masked whichever way it was compared.
fn change(
    entry: &InventoryEntry,
    action: Action,
    preview: Preview,
    before: Option<Value>,
    after: Option<Value>,
) -> Change {
    let secret = entry.kind == SECRET
        || [&before, &after].into_iter().flatten().any(|side| side.get("kind").and_then(Value::as_str) == Some(SECRET));
    let (before, after) = if secret { mask_secret(before.as_ref(), after.as_ref()) } else { (before, after) };
    Change {
        action,
        api_version: entry.api_version.clone(),
        kind: entry.kind.clone(),
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        preview,
        diff: unified(entry, before.as_ref(), after.as_ref()),
    }
}

/// The fields of `live` at the places `desired` sets (lists element by element).
fn project(live: &Value, desired: &Value) -> Value {
    match (live, desired) {
        (Value::Object(have), Value::Object(want)) => Value::Object(
            want.iter().filter_map(|(key, value)| Some((key.clone(), project(have.get(key)?, value)))).collect(),
        ),
        (Value::Array(have), Value::Array(want)) => Value::Array(
            have.iter().enumerate().map(|(i, h)| want.get(i).map_or_else(|| h.clone(), |w| project(h, w))).collect(),
        ),
        (have, _) => have.clone(),
    }
}

/// Server-filled metadata and status removed: what is left is what a push decides.
pub fn normalize(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for noise in ["managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink"] {
                meta.remove(noise);
            }
            if meta.get("annotations").and_then(Value::as_object).is_some_and(Map::is_empty) {
                meta.remove("annotations");
            }
        }
    }
    object
}

// === Secrets ===

/// The kind whose previews are masked.
const SECRET: &str = "Secret";

/// How a preview shows one field of a Secret.
#[derive(Clone, Copy)]
enum Shown {
    /// As it is: it cannot hold the Secret's data.
    AsIs,
    /// A map: its keys, each value shown as the rule says.
    Fields(fn(&str) -> Shown),
    /// Only a mask saying whether it changes: it may hold data.
    Masked,
}

/// The allow-list of a Secret's top-level fields; whatever it does not name is masked, so a
/// field added to Secrets later cannot leak through a preview.
fn secret_field(name: &str) -> Shown {
    match name {
        "apiVersion" | "kind" | "type" | "immutable" => Shown::AsIs,
        "metadata" => Shown::Fields(secret_metadata_field),
        "data" | "stringData" => Shown::Fields(|_| Shown::Masked),
        _ => Shown::Masked,
    }
}

/// The allow-list of a Secret's metadata. Annotations show their keys only: any tool may store
/// data there, `kubectl apply` the whole manifest (`last-applied-configuration`).
fn secret_metadata_field(name: &str) -> Shown {
    match name {
        "name"
        | "namespace"
        | "generateName"
        | "labels"
        | "ownerReferences"
        | "finalizers"
        | "deletionTimestamp"
        | "deletionGracePeriodSeconds" => Shown::AsIs,
        "annotations" => Shown::Fields(|_| Shown::Masked),
        _ => Shown::Masked,
    }
}

/// A Secret as a preview may show it, both sides at once: its `apiVersion`, `kind`, `type`,
/// `immutable`, `metadata.name`, `namespace`, `labels` (and the other identity and lifecycle
/// metadata) as they are; the keys of `data`, `stringData` and `metadata.annotations` with every
/// value replaced as `kubectl diff` replaces data values, `***` where both sides hold the same
/// value or only one side has the key, `*** (before)` and `*** (after)` where it changes; any
/// other field (`managedFields`, a field unknown today) replaced whole the same way. Nothing
/// that can carry the Secret's data is shown, and a change is never hidden.
pub fn mask_secret(before: Option<&Value>, after: Option<&Value>) -> (Option<Value>, Option<Value>) {
    let (old, new) = masked_fields(before.and_then(Value::as_object), after.and_then(Value::as_object), secret_field);
    (before.map(|_| Value::Object(old)), after.map(|_| Value::Object(new)))
}

/// The fields of both sides of a map, each shown as `rule` says.
fn masked_fields(
    before: Option<&Map<String, Value>>,
    after: Option<&Map<String, Value>>,
    rule: fn(&str) -> Shown,
) -> (Map<String, Value>, Map<String, Value>) {
    let empty = Map::new();
    let (before, after) = (before.unwrap_or(&empty), after.unwrap_or(&empty));
    let (mut old, mut new) = (Map::new(), Map::new());
    for key in before.keys().chain(after.keys()).collect::<BTreeSet<_>>() {
        let (was, will) = (before.get(key), after.get(key));
        let maps = [was, will].into_iter().flatten().all(Value::is_object);
        let (was, will) = match rule(key) {
            Shown::AsIs => (was.cloned(), will.cloned()),
            Shown::Fields(inner) if maps => {
                let (a, b) = masked_fields(was.and_then(Value::as_object), will.and_then(Value::as_object), inner);
                (was.map(|_| Value::Object(a)), will.map(|_| Value::Object(b)))
            }
            Shown::Fields(_) | Shown::Masked => masks(was, will),
        };
        old.extend(was.map(|value| (key.clone(), value)));
        new.extend(will.map(|value| (key.clone(), value)));
    }
    (old, new)
}

/// The masks of one value on both sides, as `kubectl diff` writes them.
fn masks(before: Option<&Value>, after: Option<&Value>) -> (Option<Value>, Option<Value>) {
    let mask = |text: &str| Some(Value::String(text.to_owned()));
    match (before, after) {
        (Some(was), Some(will)) if was != will => (mask("*** (before)"), mask("*** (after)")),
        (was, will) => (was.and(mask("***")), will.and(mask("***"))),
    }
}

/// A unified diff between the YAML of `before` and `after`, headed like `kubectl diff`'s.
fn unified(entry: &InventoryEntry, before: Option<&Value>, after: Option<&Value>) -> String {
    let yaml = |value: Option<&Value>| value.map(crate::yaml::to_yaml).unwrap_or_default();
    let (old, new) = (yaml(before), yaml(after));
    let group_version = entry.api_version.replace('/', ".");
    let file = format!("{group_version}.{}.{}.{}", entry.kind, entry.namespace, entry.name);
    let text = similar::TextDiff::from_lines(&old, &new);
    let body =
        text.unified_diff().context_radius(3).header(&format!("live/{file}"), &format!("merged/{file}")).to_string();
    format!("diff -u -N live/{file} merged/{file}\n{body}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(kind: &str) -> InventoryEntry {
        InventoryEntry { api_version: "v1".into(), kind: kind.into(), namespace: "team-a".into(), name: "x".into() }
    }

    #[test]
    fn server_noise_is_no_difference() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "uid": "1", "resourceVersion": "7", "managedFields": [{}], "creationTimestamp": "t"}, "data": {"a": "1"}});
        let after = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "uid": "1", "resourceVersion": "8", "generation": 2}, "data": {"a": "1"}});
        assert_eq!(compare(&entry("ConfigMap"), Some(live), after, Preview::ServerDryRun), None);
    }

    #[test]
    fn a_changed_field_is_one_hunk_of_that_field() {
        let live =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}});
        let after =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1", "b": "3"}});
        let change = compare(&entry("ConfigMap"), Some(live), after, Preview::ServerDryRun).expect("a change");
        assert_eq!(change.action, Action::Change);
        assert!(change.diff.starts_with("diff -u -N live/v1.ConfigMap.team-a.x merged/v1.ConfigMap.team-a.x\n"));
        let changed: Vec<&str> = change
            .diff
            .lines()
            .filter(|l| l.starts_with(['+', '-']) && !l.starts_with("+++") && !l.starts_with("---"))
            .collect();
        assert_eq!(changed, ["-  b: \"2\"", "+  b: \"3\""], "{}", change.diff);
    }

    #[test]
    fn secret_values_never_show_only_whether_they_change() {
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"same": "c2VjcmV0LTE=", "rotated": "b2xkLXZhbHVl"}});
        let after = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"same": "c2VjcmV0LTE=", "rotated": "bmV3LXZhbHVl", "added": "YWRkZWQ="}});
        let change = compare(&entry("Secret"), Some(live), after, Preview::ServerDryRun).expect("a change");
        for value in ["c2VjcmV0LTE=", "b2xkLXZhbHVl", "bmV3LXZhbHVl", "YWRkZWQ="] {
            assert!(!change.diff.contains(value), "{value} shown:\n{}", change.diff);
        }
        assert!(
            change.diff.contains("-  rotated: '*** (before)'") || change.diff.contains("-  rotated: \"*** (before)\""),
            "{}",
            change.diff
        );
        assert!(change.diff.contains("*** (after)"), "{}", change.diff);
        let pruned =
            prune(&entry("Secret"), json!({"kind": "Secret", "data": {"k": "c2VjcmV0LTE="}})).expect("a prune");
        assert!(!pruned.diff.contains("c2VjcmV0LTE="), "{}", pruned.diff);
    }

    /// A Secret as client-side `kubectl apply` leaves it: the manifest, values and all, in the
    /// `last-applied-configuration` annotation (`data` base64, `stringData` plain).
    fn applied_with_kubectl(name: &str, password: &str, note: &str) -> Value {
        use base64::Engine as _;
        let manifest = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"annotations": {"example.com/note": note}, "name": name, "namespace": "team-a"}, "stringData": {"password": password}, "type": "Opaque"});
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": "team-a", "uid": "u", "resourceVersion": "1",
                "annotations": {"example.com/note": note, "kubectl.kubernetes.io/last-applied-configuration": format!("{manifest}\n")},
                "managedFields": [{"manager": "kubectl-client-side-apply", "fieldsV1": {"f:data": {"f:password": {}}}}]},
            "data": {"password": base64::engine::general_purpose::STANDARD.encode(password)}})
    }

    /// Whether `text` holds `value`, plain or base64.
    fn shows(text: &str, value: &str) -> bool {
        use base64::Engine as _;
        text.contains(value) || text.contains(&base64::engine::general_purpose::STANDARD.encode(value))
    }

    #[test]
    fn a_secret_applied_with_kubectl_shows_no_value_in_a_change_a_create_or_a_prune() {
        let live = applied_with_kubectl("x", "old-password", "old-note");
        let rotated = applied_with_kubectl("x", "new-password", "new-note");
        let previews = [
            compare(&entry("Secret"), Some(live.clone()), rotated.clone(), Preview::ServerDryRun).expect("a change"),
            compare(&entry("Secret"), None, rotated, Preview::ServerDryRun).expect("a create"),
            prune(&entry("Secret"), live).expect("a prune"),
        ];
        assert_eq!(previews.each_ref().map(|p| p.action), [Action::Change, Action::Create, Action::Prune]);
        for preview in &previews {
            let json = serde_json::to_string(preview).expect("JSON");
            for value in ["old-password", "new-password", "old-note", "new-note"] {
                assert!(!shows(&preview.diff, value) && !shows(&json, value), "{value} shown:\n{}", preview.diff);
            }
            assert!(preview.diff.contains("kubectl.kubernetes.io/last-applied-configuration: "), "{}", preview.diff);
            assert!(!preview.diff.contains("managedFields"), "{}", preview.diff);
        }
    }

    #[test]
    fn a_secret_shows_its_keys_as_is_and_every_value_or_unknown_field_as_a_mask_of_whether_it_changes() {
        let before = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": false,
            "metadata": {"name": "x", "namespace": "team-a", "labels": {"app": "web"}, "finalizers": ["f"],
                "annotations": {"same": "s", "rotated": "r1", "dropped": "d"}, "managedFields": [{"manager": "m"}]},
            "data": {"same": "czE=", "rotated": "cjE="}, "stringData": {"plain": "p1"}, "future": {"holds": "data"}});
        let after = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": true,
            "metadata": {"name": "x", "namespace": "team-a", "labels": {"app": "web"}, "finalizers": ["f"],
                "annotations": {"same": "s", "rotated": "r2", "added": "a"}, "managedFields": [{"manager": "m"}]},
            "data": {"same": "czE=", "rotated": "cjI=", "added": "YQ=="}, "future": {"holds": "other"}});
        let (masked_before, masked_after) = mask_secret(Some(&before), Some(&after));
        assert_eq!(
            masked_before,
            Some(json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": false,
                "metadata": {"name": "x", "namespace": "team-a", "labels": {"app": "web"}, "finalizers": ["f"],
                    "annotations": {"same": "***", "rotated": "*** (before)", "dropped": "***"}, "managedFields": "***"},
                "data": {"same": "***", "rotated": "*** (before)"}, "stringData": {"plain": "***"}, "future": "*** (before)"}))
        );
        assert_eq!(
            masked_after,
            Some(json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": true,
                "metadata": {"name": "x", "namespace": "team-a", "labels": {"app": "web"}, "finalizers": ["f"],
                    "annotations": {"same": "***", "rotated": "*** (after)", "added": "***"}, "managedFields": "***"},
                "data": {"same": "***", "rotated": "*** (after)", "added": "***"}, "future": "*** (after)"}))
        );
        // One side only (a create, a prune): every value `***`, the shape kept.
        let (none, created) = mask_secret(None, Some(&after));
        assert_eq!(none, None);
        assert_eq!(created.as_ref().and_then(|c| c.pointer("/data/rotated")), Some(&json!("***")));
        // Data where a map belongs is masked whole.
        let odd = json!({"kind": "Secret", "data": "c2VjcmV0", "metadata": {"annotations": ["c2VjcmV0"]}});
        assert_eq!(
            mask_secret(Some(&odd), None).0,
            Some(json!({"kind": "Secret", "data": "***", "metadata": {"annotations": "***"}}))
        );
    }

    #[test]
    fn a_secret_compared_client_side_is_masked_too() {
        let desired =
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"k": "c2VjcmV0LTE="}});
        let live =
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"k": "c2VjcmV0LTI="}});
        let created = compare_client_side(&entry("Secret"), None, &desired).expect("a create");
        let changed = compare_client_side(&entry("Secret"), Some(live), &desired).expect("a change");
        for preview in [created, changed] {
            assert!(!preview.diff.contains("c2VjcmV0"), "{}", preview.diff);
            assert!(preview.diff.contains("k: "), "{}", preview.diff);
        }
    }

    #[test]
    fn a_child_compared_client_side_shows_only_the_fields_the_controller_sets() {
        let desired = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "x"}, "spec": {"egress": [{"ports": [{"port": 443}]}]}});
        let same = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "x", "uid": "u"}, "spec": {"egress": [{"ports": [{"port": 443, "protocol": "TCP"}]}], "policyTypes": ["Egress"]}});
        assert_eq!(compare_client_side(&entry("NetworkPolicy"), Some(same), &desired), None);
        let drifted = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "x"}, "spec": {"egress": [], "policyTypes": ["Egress"]}});
        let change = compare_client_side(&entry("NetworkPolicy"), Some(drifted), &desired).expect("a change");
        assert_eq!((change.action, change.preview), (Action::Change, Preview::ClientSide));
        assert!(!change.diff.contains("policyTypes"), "{}", change.diff);
    }
}
