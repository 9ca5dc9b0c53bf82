//! The sync plan, a pure function: from what a registration wants and what GitLab lists, the
//! exact calls to make, in order. No I/O here; [`super::executor`] runs the calls.
//!
//! **What is ours.** A deploy key is ours when its id is the one recorded in the registration's
//! status or its title is the registration's marker (`cdtarget:<namespace>/<name>`); the key
//! whose fingerprint is the registration's public key is used whatever its title. A hook is ours
//! when its id is the recorded one, its `name` is the marker, or its URL is exactly the
//! registration's receiver URL. Nothing else on the project is ever changed or removed.

use std::fmt;

use super::client::{DeployKey, Hook, HookParams, Secret};

/// How cdtarget recognises what it put on a project.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    /// `cdtarget:<namespace>/<name>`: the deploy key's title and the hook's name.
    pub marker: String,
    /// The deploy key id recorded in status.
    pub deploy_key_id: Option<i64>,
    /// The hook id recorded in status.
    pub hook_id: Option<i64>,
}

/// The read-only deploy key a registration wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredKey {
    /// Title given when the key is added (the marker).
    pub title: String,
    /// The public key line (`ssh-ed25519 AAAA... comment`).
    pub public_key: String,
    /// Its `SHA256:...` fingerprint, what listed keys are matched by.
    pub fingerprint: String,
}

/// The project hook a registration wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredHook {
    /// `<webhook external URL>/hook/<digest>`.
    pub url: String,
    /// The registration's webhook token; GitLab never shows it, so it is sent on every edit.
    pub token: Secret,
    /// Tag push events too (the registration follows a tag).
    pub tag_push_events: bool,
    /// Branch filter of push events: the followed branch, or empty for all.
    pub branch_filter: String,
}

/// Everything the plan is computed from, apart from GitLab's listings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    /// How ours is recognised.
    pub ownership: Ownership,
    /// The deploy key, when the registration manages it.
    pub key: Option<DesiredKey>,
    /// Fingerprints of keys of ours that stay although they are not the desired key: the key
    /// still in use while a rotation is under way.
    pub retain_key_fingerprints: Vec<String>,
    /// The hook, when the registration manages it.
    pub hook: Option<DesiredHook>,
}

/// One call of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `POST /projects/:id/deploy_keys` with `can_push=false`; the executor then corrects
    /// `can_push` if GitLab answered with an existing link that may push.
    CreateKey {
        /// Title.
        title: String,
        /// Public key line.
        key: String,
        /// Its fingerprint (for the printout).
        fingerprint: String,
    },
    /// `PUT /projects/:id/deploy_keys/:key_id` with `can_push=false`.
    FixKeyCanPush {
        /// The key.
        key_id: i64,
    },
    /// `DELETE /projects/:id/deploy_keys/:key_id`.
    DeleteKey {
        /// The key.
        key_id: i64,
        /// Why it goes.
        why: String,
    },
    /// `POST /projects/:id/hooks`.
    CreateHook(HookParams),
    /// `PUT /projects/:id/hooks/:hook_id` with every parameter, the token included.
    EditHook {
        /// The hook.
        hook_id: i64,
        /// What it is set to.
        params: HookParams,
        /// What differed.
        changes: Vec<String>,
    },
    /// `POST /projects/:id/hooks/:hook_id/test/push_events`: GitLab disabled the hook after
    /// failed deliveries; a test answered 2xx enables it again.
    TestHook {
        /// The hook.
        hook_id: i64,
    },
    /// `DELETE /projects/:id/hooks/:hook_id`.
    DeleteHook {
        /// The hook.
        hook_id: i64,
        /// Why it goes.
        why: String,
    },
}

/// The calls for one project, in order: additions and fixes first, removals last, so that a
/// rotated key is registered before the old one goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Numeric project id.
    pub project_id: i64,
    /// The calls.
    pub calls: Vec<Call>,
    /// The deploy key already in place (when no call creates it).
    pub deploy_key_id: Option<i64>,
    /// The hook already in place (when no call creates it).
    pub hook_id: Option<i64>,
}

impl Plan {
    /// Whether the project is in sync: nothing to call.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

impl fmt::Display for Plan {
    /// One line per call, as `cdtarget gitlab-sync --dry-run` prints it; tokens show as `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.calls.is_empty() {
            return writeln!(f, "project {}: in sync, nothing to do", self.project_id);
        }
        let project = format!("/projects/{}", self.project_id);
        for call in &self.calls {
            match call {
                Call::CreateKey { title, fingerprint, .. } => {
                    writeln!(f, "POST   {project}/deploy_keys title={title:?} key={fingerprint} can_push=false")?
                }
                Call::FixKeyCanPush { key_id } => {
                    writeln!(f, "PUT    {project}/deploy_keys/{key_id} can_push=false (it may push; read-only wanted)")?
                }
                Call::DeleteKey { key_id, why } => writeln!(f, "DELETE {project}/deploy_keys/{key_id} ({why})")?,
                Call::CreateHook(params) => writeln!(f, "POST   {project}/hooks {}", describe_hook(params))?,
                Call::EditHook { hook_id, params, changes } => writeln!(
                    f,
                    "PUT    {project}/hooks/{hook_id} {} (changed: {})",
                    describe_hook(params),
                    changes.join(", ")
                )?,
                Call::TestHook { hook_id } => {
                    writeln!(f, "POST   {project}/hooks/{hook_id}/test/push_events (GitLab disabled the hook)")?
                }
                Call::DeleteHook { hook_id, why } => writeln!(f, "DELETE {project}/hooks/{hook_id} ({why})")?,
            }
        }
        Ok(())
    }
}

fn describe_hook(params: &HookParams) -> String {
    let filter = if params.branch_filter.is_empty() { "all branches".to_owned() } else { params.branch_filter.clone() };
    format!(
        "url={} token={} name={:?} push_events=true ({filter}) tag_push_events={} other events off, enable_ssl_verification=true",
        crate::text::redact_hook_path(&params.url),
        params.token,
        params.name,
        params.tag_push_events
    )
}

// === sync ===

/// The calls that bring the project to `desired`, given every listed key and hook. With
/// `desired.key` (or `.hook`) `None` the keys (hooks) are left alone and need not be listed.
pub fn sync(project_id: i64, desired: &Desired, keys: &[DeployKey], hooks: &[Hook]) -> Plan {
    let mut plan = Plan { project_id, calls: Vec::new(), deploy_key_id: None, hook_id: None };
    let mut removals = Vec::new();
    if let Some(want) = &desired.key {
        match keys.iter().find(|key| same_key(key, want)) {
            Some(key) => {
                plan.deploy_key_id = Some(key.id);
                if key.can_push == Some(true) {
                    plan.calls.push(Call::FixKeyCanPush { key_id: key.id });
                }
            }
            None => plan.calls.push(Call::CreateKey {
                title: want.title.clone(),
                key: want.public_key.trim().to_owned(),
                fingerprint: want.fingerprint.clone(),
            }),
        }
        for key in keys.iter().filter(|key| key_is_ours(key, &desired.ownership) && !same_key(key, want)) {
            let retained = key.fingerprint_sha256.as_ref().is_some_and(|f| desired.retain_key_fingerprints.contains(f));
            if !retained {
                removals
                    .push(Call::DeleteKey { key_id: key.id, why: format!("ours, replaced by {}", want.fingerprint) });
            }
        }
    }
    if let Some(want) = &desired.hook {
        let ours: Vec<&Hook> =
            hooks.iter().filter(|hook| hook_is_ours(hook, &desired.ownership, Some(&want.url))).collect();
        let primary = ours
            .iter()
            .find(|hook| Some(hook.id) == desired.ownership.hook_id)
            .or_else(|| ours.iter().find(|hook| hook.url == want.url))
            .or_else(|| ours.iter().min_by_key(|hook| hook.id))
            .copied();
        match primary {
            None => plan.calls.push(Call::CreateHook(hook_params(want, &desired.ownership, None))),
            Some(hook) => {
                plan.hook_id = Some(hook.id);
                let changes = hook_changes(hook, want, &desired.ownership);
                if !changes.is_empty() {
                    let params = hook_params(want, &desired.ownership, Some(hook));
                    plan.calls.push(Call::EditHook { hook_id: hook.id, params, changes });
                }
                if hook.alert_status.as_deref() == Some("disabled") {
                    plan.calls.push(Call::TestHook { hook_id: hook.id });
                }
                for duplicate in ours.iter().filter(|other| other.id != hook.id) {
                    removals.push(Call::DeleteHook {
                        hook_id: duplicate.id,
                        why: format!("ours, duplicate of hook {}", hook.id),
                    });
                }
            }
        }
    }
    plan.calls.extend(removals);
    plan
}

/// The calls that remove everything of ours from the project (registration deleted): keys and
/// hooks recognised as ours, plus the key with the registration's fingerprint and hooks with its
/// receiver URL, given in `desired` when known.
pub fn removal(project_id: i64, desired: &Desired, keys: &[DeployKey], hooks: &[Hook]) -> Plan {
    let mut plan = Plan { project_id, calls: Vec::new(), deploy_key_id: None, hook_id: None };
    for key in keys {
        let same = desired.key.as_ref().is_some_and(|want| same_key(key, want));
        if same || key_is_ours(key, &desired.ownership) {
            plan.calls.push(Call::DeleteKey { key_id: key.id, why: "registration deleted".into() });
        }
    }
    let url = desired.hook.as_ref().map(|hook| hook.url.as_str());
    for hook in hooks.iter().filter(|hook| hook_is_ours(hook, &desired.ownership, url)) {
        plan.calls.push(Call::DeleteHook { hook_id: hook.id, why: "registration deleted".into() });
    }
    plan
}

// === matching ===

/// The same public key: by `fingerprint_sha256`, or, when GitLab does not send it, by
/// algorithm and base64 body (comments and whitespace differ between stored and sent keys).
fn same_key(key: &DeployKey, want: &DesiredKey) -> bool {
    match &key.fingerprint_sha256 {
        Some(fingerprint) => *fingerprint == want.fingerprint,
        None => key_material(&key.key).is_some() && key_material(&key.key) == key_material(&want.public_key),
    }
}

fn key_material(line: &str) -> Option<(&str, &str)> {
    let mut fields = line.split_whitespace();
    Some((fields.next()?, fields.next()?))
}

fn key_is_ours(key: &DeployKey, ownership: &Ownership) -> bool {
    Some(key.id) == ownership.deploy_key_id || (!ownership.marker.is_empty() && key.title == ownership.marker)
}

fn hook_is_ours(hook: &Hook, ownership: &Ownership, url: Option<&str>) -> bool {
    Some(hook.id) == ownership.hook_id
        || (!ownership.marker.is_empty() && hook.name.as_deref() == Some(ownership.marker.as_str()))
        || url == Some(hook.url.as_str())
}

/// What differs between a listed hook and the wanted one. The token cannot be read back; the
/// receiver URL holds a digest of it, so a new token shows as a new URL, and GitLab 19+'s
/// `token_present: false` shows a token wiped by a URL edit made elsewhere.
fn hook_changes(hook: &Hook, want: &DesiredHook, ownership: &Ownership) -> Vec<String> {
    let mut changes = Vec::new();
    if hook.url != want.url {
        changes.push("url (and token)".to_owned());
    }
    if hook.token_present == Some(false) {
        changes.push("token (GitLab has none)".to_owned());
    }
    if hook.name.as_ref().is_some_and(|name| *name != ownership.marker) {
        changes.push("name".to_owned());
    }
    if !hook.push_events {
        changes.push("push_events".to_owned());
    }
    if hook.tag_push_events != want.tag_push_events {
        changes.push("tag_push_events".to_owned());
    }
    changes.extend(hook.other_events.iter().cloned());
    if !hook.enable_ssl_verification {
        changes.push("enable_ssl_verification".to_owned());
    }
    if hook.push_events_branch_filter.as_deref().unwrap_or("") != want.branch_filter {
        changes.push("push_events_branch_filter".to_owned());
    }
    let strategy = if want.branch_filter.is_empty() { "all_branches" } else { "wildcard" };
    if hook.branch_filter_strategy.as_deref().is_some_and(|listed| listed != strategy) {
        changes.push("branch_filter_strategy".to_owned());
    }
    changes
}

fn hook_params(want: &DesiredHook, ownership: &Ownership, listed: Option<&Hook>) -> HookParams {
    HookParams {
        url: want.url.clone(),
        token: want.token.clone(),
        name: ownership.marker.clone(),
        tag_push_events: want.tag_push_events,
        branch_filter: want.branch_filter.clone(),
        switch_off: listed.map(|hook| hook.other_events.clone()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKER: &str = "cdtarget:platform/app";
    const URL: &str = "https://cd.example.com/hook/abc";

    fn key(id: i64, title: &str, fingerprint: &str, can_push: bool) -> DeployKey {
        DeployKey {
            id,
            title: title.into(),
            key: format!("ssh-ed25519 AAAA{fingerprint}"),
            fingerprint_sha256: Some(fingerprint.into()),
            can_push: Some(can_push),
        }
    }

    fn hook(id: i64, url: &str, name: Option<&str>) -> Hook {
        Hook {
            id,
            url: url.into(),
            name: name.map(str::to_owned),
            push_events: true,
            tag_push_events: false,
            enable_ssl_verification: true,
            push_events_branch_filter: Some("main".into()),
            branch_filter_strategy: Some("wildcard".into()),
            token_present: Some(true),
            alert_status: Some("executable".into()),
            other_events: vec![],
        }
    }

    fn desired_key(fingerprint: &str) -> DesiredKey {
        DesiredKey {
            title: MARKER.into(),
            public_key: format!("ssh-ed25519 AAAA{fingerprint} c"),
            fingerprint: fingerprint.into(),
        }
    }

    fn desired() -> Desired {
        Desired {
            ownership: Ownership { marker: MARKER.into(), deploy_key_id: None, hook_id: None },
            key: Some(desired_key("SHA256:new")),
            retain_key_fingerprints: vec![],
            hook: Some(DesiredHook {
                url: URL.into(),
                token: Secret::new("tok"),
                tag_push_events: false,
                branch_filter: "main".into(),
            }),
        }
    }

    fn kinds(plan: &Plan) -> Vec<String> {
        plan.calls
            .iter()
            .map(|call| match call {
                Call::CreateKey { .. } => "create-key".to_owned(),
                Call::FixKeyCanPush { key_id } => format!("fix-key {key_id}"),
                Call::DeleteKey { key_id, .. } => format!("delete-key {key_id}"),
                Call::CreateHook(_) => "create-hook".to_owned(),
                Call::EditHook { hook_id, .. } => format!("edit-hook {hook_id}"),
                Call::TestHook { hook_id } => format!("test-hook {hook_id}"),
                Call::DeleteHook { hook_id, .. } => format!("delete-hook {hook_id}"),
            })
            .collect()
    }

    #[test]
    fn empty_project_gets_a_key_and_a_hook() {
        let plan = sync(42, &desired(), &[], &[]);
        assert_eq!(kinds(&plan), ["create-key", "create-hook"]);
        let Call::CreateHook(params) = &plan.calls[1] else { unreachable!() };
        assert_eq!((params.url.as_str(), params.name.as_str(), params.token.expose()), (URL, MARKER, "tok"));
        assert_eq!((params.tag_push_events, params.branch_filter.as_str()), (false, "main"));
    }

    #[test]
    fn project_in_sync_needs_nothing_and_reports_the_ids() {
        let keys = [key(7, MARKER, "SHA256:new", false), key(8, "a human's key", "SHA256:other", true)];
        let hooks = [hook(9, URL, Some(MARKER)), hook(10, "https://ci.example.com/x", Some("ci"))];
        let plan = sync(42, &desired(), &keys, &hooks);
        assert!(plan.is_empty(), "{plan}");
        assert_eq!((plan.deploy_key_id, plan.hook_id), (Some(7), Some(9)));
        assert_eq!(plan.to_string(), "project 42: in sync, nothing to do\n");
    }

    #[test]
    fn our_key_that_may_push_is_made_read_only_whatever_its_title() {
        let plan = sync(42, &desired(), &[key(7, "added by hand", "SHA256:new", true)], &[hook(9, URL, Some(MARKER))]);
        assert_eq!(kinds(&plan), ["fix-key 7"]);
        assert_eq!(plan.deploy_key_id, Some(7));
    }

    #[test]
    fn keys_are_matched_by_material_when_gitlab_sends_no_sha256_fingerprint() {
        let mut listed = key(7, "x", "", false);
        listed.fingerprint_sha256 = None;
        listed.key = "ssh-ed25519 AAAASHA256:new other-comment".into();
        let plan = sync(42, &Desired { hook: None, ..desired() }, &[listed], &[]);
        assert!(plan.is_empty(), "{plan}");
    }

    #[test]
    fn old_keys_of_ours_go_after_the_new_one_is_added() {
        let mut want = desired();
        want.ownership.deploy_key_id = Some(5);
        let keys = [
            key(5, "renamed", "SHA256:old", false),
            key(6, MARKER, "SHA256:older", false),
            key(8, "human", "SHA256:h", false),
        ];
        let plan = sync(42, &want, &keys, &[hook(9, URL, Some(MARKER))]);
        assert_eq!(kinds(&plan), ["create-key", "delete-key 5", "delete-key 6"]);
    }

    #[test]
    fn rotation_keeps_the_key_in_use_until_the_next_pass() {
        // Pass 1: the new key is wanted, the old one (still in the Secret) is retained.
        let mut want = desired();
        want.retain_key_fingerprints = vec!["SHA256:old".into()];
        let keys = [key(5, MARKER, "SHA256:old", false)];
        let hooks = [hook(9, URL, Some(MARKER))];
        assert_eq!(kinds(&sync(42, &want, &keys, &hooks)), ["create-key"]);
        // Pass 2, after the Secret holds the new key: the old one goes.
        want.retain_key_fingerprints.clear();
        let keys = [key(5, MARKER, "SHA256:old", false), key(11, MARKER, "SHA256:new", false)];
        let plan = sync(42, &want, &keys, &hooks);
        assert_eq!(kinds(&plan), ["delete-key 5"]);
        assert_eq!(plan.deploy_key_id, Some(11));
    }

    #[test]
    fn a_new_receiver_url_edits_the_hook_in_place_with_its_token() {
        let mut want = desired();
        want.ownership.hook_id = Some(9);
        let plan = sync(
            42,
            &want,
            &[key(7, MARKER, "SHA256:new", false)],
            &[hook(9, "https://old.example.com/hook/zzz", Some(MARKER))],
        );
        assert_eq!(kinds(&plan), ["edit-hook 9"]);
        let Call::EditHook { params, changes, .. } = &plan.calls[0] else { unreachable!() };
        assert_eq!(params.url, URL);
        assert_eq!(params.token.expose(), "tok", "a URL change wipes the token unless it is sent along");
        assert_eq!(changes, &["url (and token)"]);
    }

    #[test]
    fn hooks_are_recognised_by_name_even_without_the_recorded_id() {
        let plan = sync(
            42,
            &Desired { key: None, ..desired() },
            &[],
            &[hook(9, "https://old.example.com/hook/zzz", Some(MARKER))],
        );
        assert_eq!(kinds(&plan), ["edit-hook 9"]);
    }

    #[test]
    fn drifted_flags_and_a_wiped_token_are_corrected() {
        let mut listed = hook(9, URL, Some(MARKER));
        listed.token_present = Some(false);
        listed.tag_push_events = true;
        listed.enable_ssl_verification = false;
        listed.other_events = vec!["merge_requests_events".into()];
        listed.push_events_branch_filter = None;
        let plan = sync(42, &Desired { key: None, ..desired() }, &[], &[listed]);
        let Call::EditHook { params, changes, .. } = &plan.calls[0] else { panic!("{plan}") };
        assert_eq!(
            changes,
            &[
                "token (GitLab has none)",
                "tag_push_events",
                "merge_requests_events",
                "enable_ssl_verification",
                "push_events_branch_filter"
            ]
        );
        assert_eq!(params.switch_off, ["merge_requests_events"]);
    }

    #[test]
    fn duplicates_of_ours_are_removed_and_foreign_hooks_kept() {
        let mut want = desired();
        want.ownership.hook_id = Some(12);
        let hooks = [
            hook(9, URL, None),
            hook(10, "https://other.example.com/x", Some(MARKER)),
            hook(11, "https://ci.example.com/x", Some("ci")),
            hook(12, URL, Some(MARKER)),
        ];
        let plan = sync(42, &Desired { key: None, ..want }, &[], &hooks);
        assert_eq!(kinds(&plan), ["delete-hook 9", "delete-hook 10"]);
        assert_eq!(plan.hook_id, Some(12));
    }

    #[test]
    fn a_disabled_hook_is_tested_to_enable_it_again() {
        let mut listed = hook(9, URL, Some(MARKER));
        listed.alert_status = Some("disabled".into());
        assert_eq!(kinds(&sync(42, &Desired { key: None, ..desired() }, &[], &[listed])), ["test-hook 9"]);
    }

    #[test]
    fn tag_registrations_want_tag_pushes_and_all_branches() {
        let mut want = desired();
        let hook_want = want.hook.as_mut().unwrap();
        hook_want.tag_push_events = true;
        hook_want.branch_filter = String::new();
        let plan = sync(42, &want, &[key(7, MARKER, "SHA256:new", false)], &[hook(9, URL, Some(MARKER))]);
        let Call::EditHook { changes, params, .. } = &plan.calls[0] else { panic!("{plan}") };
        assert_eq!(changes, &["tag_push_events", "push_events_branch_filter", "branch_filter_strategy"]);
        assert!(params.tag_push_events);
    }

    #[test]
    fn unmanaged_parts_are_left_alone() {
        let want = Desired { key: None, hook: None, ..desired() };
        assert!(sync(42, &want, &[key(5, MARKER, "SHA256:old", false)], &[hook(9, "x", Some(MARKER))]).is_empty());
    }

    #[test]
    fn removal_takes_only_ours() {
        let mut want = desired();
        want.ownership.deploy_key_id = Some(5);
        want.ownership.hook_id = Some(20);
        let keys = [
            key(5, "renamed", "SHA256:old", false),
            key(6, MARKER, "SHA256:older", false),
            key(7, "by hand", "SHA256:new", false),
            key(8, "human", "SHA256:h", false),
        ];
        let hooks =
            [hook(9, URL, None), hook(11, "https://ci.example.com/x", Some("ci")), hook(20, "https://x/y", None)];
        let plan = removal(42, &want, &keys, &hooks);
        assert_eq!(kinds(&plan), ["delete-key 5", "delete-key 6", "delete-key 7", "delete-hook 9", "delete-hook 20"]);
    }

    #[test]
    fn the_printout_names_every_call_and_hides_the_token() {
        let mut want = desired();
        want.ownership.hook_id = Some(9);
        let hooks = [hook(9, "https://old/hook/1", Some(MARKER)), hook(10, URL, None)];
        let text = sync(42, &want, &[key(3, MARKER, "SHA256:old", true)], &hooks).to_string();
        assert!(!text.contains("tok "), "{text}");
        assert!(!text.contains("/hook/abc"), "the receiver path is secret: {text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with(
                "POST   /projects/42/deploy_keys title=\"cdtarget:platform/app\" key=SHA256:new can_push=false"
            ),
            "{text}"
        );
        assert!(
            lines[1].starts_with("PUT    /projects/42/hooks/9 url=https://cd.example.com/hook/*** token=***"),
            "{text}"
        );
        assert!(lines[1].ends_with("(changed: url (and token))"), "{text}");
        assert_eq!(lines[2], "DELETE /projects/42/deploy_keys/3 (ours, replaced by SHA256:new)");
        assert_eq!(lines[3], "DELETE /projects/42/hooks/10 (ours, duplicate of hook 9)");
    }
}
