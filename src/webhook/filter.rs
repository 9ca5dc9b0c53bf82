//! Does this verified delivery call for a sync? One pure function, [`decide`], over the event
//! header, the body and what the registration tracks.
//!
//! - **Events.** `gitlab` reads `X-Gitlab-Event` (default `Push Hook`, `Tag Push Hook`), `github`
//!   reads `X-GitHub-Event` (default `push`), `generic` and `generic-hmac` read `X-Event` and
//!   accept any event unless `spec.webhook.events` lists some. Names compare case-insensitively.
//!   Another event is answered "ignored".
//! - **Refs.** The body's `ref` (a full ref name) is matched against what the registration
//!   fetches: a branch registration syncs on `refs/heads/<branch>`, a tag registration on
//!   `refs/tags/<tag>`. A registration without `spec.ref` fetches the branch `main` (the
//!   controller's default, not the project's default branch), so it syncs on `refs/heads/main`
//!   only. A registration pinned to a commit syncs only when the pushed commit is that commit
//!   (it may just have become fetchable); nothing else can change what it applies.
//! - **Deleted refs** (`checkout_sha: null`, `after` all zeros, or `deleted: true`): a deletion
//!   of the tracked ref still syncs, so that the registration reports the missing ref at once
//!   (a failed fetch applies and prunes nothing); a deletion of another ref is ignored.
//! - **Bodies.** `gitlab` and `github` pushes must carry a JSON object with `ref`. `generic`
//!   bodies are optional: an empty body, or JSON without `ref`, means "sync now".

use axum::http::HeaderMap;
use serde::{Deserialize, Deserializer};

use crate::api::tenant_repository::{TenantRepositorySpec, WebhookType};
use crate::source::Reference;

/// GitLab's event header.
pub const GITLAB_EVENT: &str = "x-gitlab-event";
/// GitHub's event header.
pub const GITHUB_EVENT: &str = "x-github-event";
/// The event header of `generic` and `generic-hmac`.
pub const GENERIC_EVENT: &str = "x-event";

/// The events a `gitlab` registration syncs on when `spec.webhook.events` is empty.
pub(crate) const DEFAULT_GITLAB_EVENTS: [&str; 2] = ["Push Hook", "Tag Push Hook"];
/// The events a `github` registration syncs on when `spec.webhook.events` is empty.
pub(crate) const DEFAULT_GITHUB_EVENTS: [&str; 1] = ["push"];

/// Longest event name repeated in an answer.
const MAX_SHOWN: usize = 64;

/// What a registration fetches, as far as pushes are concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tracked {
    /// `refs/heads/<name>`.
    Branch(String),
    /// `refs/tags/<name>`.
    Tag(String),
    /// A full commit SHA (lower case).
    Commit(String),
    /// `spec.ref` cannot be read: every verified push syncs, and the reconcile reports the
    /// registration's `InvalidSpec`.
    Any,
}

impl Tracked {
    /// What `spec` fetches, read exactly as the reconciler reads it (no `ref`: branch `main`).
    pub fn of(spec: &TenantRepositorySpec) -> Tracked {
        match crate::source::registration::reference_of(spec) {
            Ok(Reference::Branch(name)) => Tracked::Branch(name),
            Ok(Reference::Tag(name)) => Tracked::Tag(name),
            Ok(Reference::Commit(sha)) => Tracked::Commit(sha),
            Err(_) => Tracked::Any,
        }
    }
}

/// The verdict on a verified delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start a sync.
    Sync {
        /// The tracked ref was deleted by this push.
        deleted: bool,
    },
    /// Acknowledge and do nothing (answered 200 with this reason).
    Ignore(Ignored),
}

/// Why a delivery triggers nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    /// The event type is not among the registration's events.
    #[error("event `{0}` does not trigger a sync")]
    Event(String),
    /// The push is to a ref the registration does not fetch.
    #[error("`{0}` is not the ref this registration tracks")]
    OtherRef(String),
    /// The registration is pinned to another commit.
    #[error("the registration is pinned to a commit this push does not point at")]
    Pinned,
}

/// Why a verified delivery cannot be read (answered 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// The type's event header is absent although events are filtered.
    #[error("missing header {0}")]
    MissingEvent(&'static str),
    /// The body is empty where a push payload is expected.
    #[error("the body is empty; a push event is a JSON object with `ref`")]
    EmptyBody,
    /// The body is not a JSON object of the expected shape.
    #[error("the body is not a push payload: {0}")]
    MalformedJson(String),
    /// The payload has no `ref`.
    #[error("the payload has no `ref`")]
    MissingRef,
}

/// The fields of a push payload the decision needs (GitLab, GitHub, Gitea and most generic
/// senders use these names); everything else is skipped unread.
#[derive(Debug, Default, Deserialize)]
struct Push {
    #[serde(default, rename = "ref")]
    git_ref: Option<String>,
    #[serde(default)]
    after: Option<String>,
    /// Absent: `None`; `null` (GitLab's deleted ref): `Some(None)`.
    #[serde(default, deserialize_with = "present")]
    checkout_sha: Option<Option<String>>,
    #[serde(default)]
    deleted: Option<bool>,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// The events that trigger a sync for a registration of type `kind` with `configured` events.
/// Empty means every event.
pub fn effective_events(kind: WebhookType, configured: &[String]) -> Vec<String> {
    if !configured.is_empty() {
        return configured.to_vec();
    }
    let defaults: &[&str] = match kind {
        WebhookType::Gitlab => &DEFAULT_GITLAB_EVENTS,
        WebhookType::Github => &DEFAULT_GITHUB_EVENTS,
        WebhookType::GenericHmac | WebhookType::Generic => &[],
    };
    defaults.iter().map(|e| (*e).to_owned()).collect()
}

/// The event header of `kind`.
pub fn event_header(kind: WebhookType) -> &'static str {
    match kind {
        WebhookType::Gitlab => GITLAB_EVENT,
        WebhookType::Github => GITHUB_EVENT,
        WebhookType::GenericHmac | WebhookType::Generic => GENERIC_EVENT,
    }
}

/// The event half of [`decide`], which needs no body: `Ok(None)` when the event header names one
/// of `events` (or `events` is empty), `Ok(Some(_))` when the delivery is to be ignored. The
/// receiver asks this before it reads a body, so an event nobody syncs on costs no body read.
pub(crate) fn event_ignored(
    kind: WebhookType,
    headers: &HeaderMap,
    events: &[String],
) -> Result<Option<Ignored>, BadRequest> {
    if events.is_empty() {
        return Ok(None);
    }
    let name = event_header(kind);
    let event = headers.get(name).ok_or(BadRequest::MissingEvent(name))?;
    let event = String::from_utf8_lossy(event.as_bytes());
    let event = event.trim();
    if events.iter().any(|e| e.trim().eq_ignore_ascii_case(event)) {
        Ok(None)
    } else {
        Ok(Some(Ignored::Event(shown(event))))
    }
}

/// Decides what a verified delivery does (see the module documentation). `events` are the
/// registration's [`effective_events`].
pub fn decide(
    kind: WebhookType,
    headers: &HeaderMap,
    body: &[u8],
    events: &[String],
    tracked: &Tracked,
) -> Result<Decision, BadRequest> {
    if let Some(ignored) = event_ignored(kind, headers, events)? {
        return Ok(Decision::Ignore(ignored));
    }
    let generic = matches!(kind, WebhookType::Generic | WebhookType::GenericHmac);
    if body.iter().all(u8::is_ascii_whitespace) {
        return if generic { Ok(Decision::Sync { deleted: false }) } else { Err(BadRequest::EmptyBody) };
    }
    // serde would also read a struct from a JSON array; a payload is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(BadRequest::MalformedJson("expected a JSON object".into()));
    }
    let push: Push = serde_json::from_slice(body).map_err(|e| BadRequest::MalformedJson(json_problem(&e)))?;
    let Some(git_ref) = push.git_ref.as_deref() else {
        return if generic { Ok(Decision::Sync { deleted: false }) } else { Err(BadRequest::MissingRef) };
    };
    let deleted = push.deleted == Some(true)
        || push.checkout_sha == Some(None)
        || push.after.as_deref().is_some_and(|after| !after.is_empty() && after.bytes().all(|b| b == b'0'));
    let other = || Ok(Decision::Ignore(Ignored::OtherRef(shown(git_ref))));
    match tracked {
        Tracked::Any => Ok(Decision::Sync { deleted }),
        Tracked::Branch(branch) => match git_ref.strip_prefix("refs/heads/") {
            Some(name) if name == branch => Ok(Decision::Sync { deleted }),
            _ => other(),
        },
        Tracked::Tag(tag) => match git_ref.strip_prefix("refs/tags/") {
            Some(name) if name == tag => Ok(Decision::Sync { deleted }),
            _ => other(),
        },
        Tracked::Commit(sha) => {
            let pushed = [push.checkout_sha.flatten(), push.after];
            let hit = !deleted && pushed.iter().flatten().any(|p| p.eq_ignore_ascii_case(sha));
            Ok(if hit { Decision::Sync { deleted: false } } else { Decision::Ignore(Ignored::Pinned) })
        }
    }
}

/// A header or payload value as repeated in an answer: printable ASCII, bounded.
/// What is wrong with a body, by position only: serde_json's own message quotes the offending
/// value in full, and the answer and the log must not repeat an unbounded part of the body.
fn json_problem(error: &serde_json::Error) -> String {
    let (line, column) = (error.line(), error.column());
    match error.classify() {
        serde_json::error::Category::Data => format!(
            "a field has the wrong type at line {line}, column {column}; `ref`, `after` and `checkout_sha` are strings, `deleted` is a boolean"
        ),
        _ => format!("not valid JSON at line {line}, column {column}"),
    }
}

fn shown(text: &str) -> String {
    text.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(MAX_SHOWN).collect()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::api::TenantRepository;
    use crate::api::tenant_repository::GitRef;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
    const ZEROS: &str = "0000000000000000000000000000000000000000";

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(name, HeaderValue::from_str(value).unwrap());
        map
    }

    fn gitlab(event: &str, body: &str, tracked: &Tracked) -> Result<Decision, BadRequest> {
        let events = effective_events(WebhookType::Gitlab, &[]);
        decide(WebhookType::Gitlab, &headers(GITLAB_EVENT, event), body.as_bytes(), &events, tracked)
    }

    fn push(git_ref: &str, after: &str, checkout: &str) -> String {
        format!(
            r#"{{"object_kind":"push","ref":"{git_ref}","before":"{ZEROS}","after":"{after}","checkout_sha":{checkout}}}"#
        )
    }

    fn main() -> Tracked {
        Tracked::Branch("main".into())
    }

    const SYNC: Decision = Decision::Sync { deleted: false };

    #[test]
    fn a_push_to_the_tracked_branch_syncs_and_other_refs_are_ignored() {
        let body = push("refs/heads/main", SHA, &format!("\"{SHA}\""));
        assert_eq!(gitlab("Push Hook", &body, &main()), Ok(SYNC));
        let other = push("refs/heads/feature", SHA, &format!("\"{SHA}\""));
        assert_eq!(
            gitlab("Push Hook", &other, &main()),
            Ok(Decision::Ignore(Ignored::OtherRef("refs/heads/feature".into())))
        );
        // A tag named like the branch is another ref.
        let tag = push("refs/tags/main", SHA, &format!("\"{SHA}\""));
        assert!(matches!(gitlab("Tag Push Hook", &tag, &main()), Ok(Decision::Ignore(_))));
    }

    #[test]
    fn a_tag_registration_syncs_on_its_tag_only() {
        let tracked = Tracked::Tag("v1.0.0".into());
        let body = push("refs/tags/v1.0.0", SHA, &format!("\"{SHA}\""));
        assert_eq!(gitlab("Tag Push Hook", &body, &tracked), Ok(SYNC));
        let other = push("refs/tags/v1.0.1", SHA, &format!("\"{SHA}\""));
        assert!(matches!(gitlab("Tag Push Hook", &other, &tracked), Ok(Decision::Ignore(Ignored::OtherRef(_)))));
    }

    #[test]
    fn a_registration_without_ref_tracks_the_branch_main() {
        assert_eq!(Tracked::of(&TenantRepository::test().spec), main());
        let spec = |git_ref: GitRef| TenantRepository::test().with_git_ref(Some(git_ref)).spec;
        assert_eq!(
            Tracked::of(&spec(GitRef { tag: Some("v1".into()), ..GitRef::default() })),
            Tracked::Tag("v1".into())
        );
        assert_eq!(
            Tracked::of(&spec(GitRef { commit: Some(SHA.to_uppercase()), ..GitRef::default() })),
            Tracked::Commit(SHA.into())
        );
        let both = GitRef { branch: Some("a".into()), tag: Some("b".into()), commit: None };
        assert_eq!(Tracked::of(&spec(both)), Tracked::Any);
    }

    #[test]
    fn a_deleted_tracked_ref_syncs_and_says_so_a_deleted_other_ref_is_ignored() {
        let deleted = push("refs/heads/main", ZEROS, "null");
        assert_eq!(gitlab("Push Hook", &deleted, &main()), Ok(Decision::Sync { deleted: true }));
        let other = push("refs/heads/old", ZEROS, "null");
        assert!(matches!(gitlab("Push Hook", &other, &main()), Ok(Decision::Ignore(_))));
        // `checkout_sha: null` alone (GitLab's marker) is enough.
        let null_only = format!(r#"{{"ref":"refs/heads/main","after":"{SHA}","checkout_sha":null}}"#);
        assert_eq!(gitlab("Push Hook", &null_only, &main()), Ok(Decision::Sync { deleted: true }));
        // GitHub's marker.
        let github = format!(r#"{{"ref":"refs/heads/main","after":"{SHA}","deleted":true}}"#);
        let events = effective_events(WebhookType::Github, &[]);
        let decision = decide(WebhookType::Github, &headers(GITHUB_EVENT, "push"), github.as_bytes(), &events, &main());
        assert_eq!(decision, Ok(Decision::Sync { deleted: true }));
    }

    #[test]
    fn a_pinned_registration_syncs_only_on_a_push_of_its_commit() {
        let tracked = Tracked::Commit(SHA.into());
        let body = push("refs/heads/main", &SHA.to_uppercase(), &format!("\"{SHA}\""));
        assert_eq!(gitlab("Push Hook", &body, &tracked), Ok(SYNC));
        let other = push("refs/heads/main", "1111111111111111111111111111111111111111", "\"1111\"");
        assert_eq!(gitlab("Push Hook", &other, &tracked), Ok(Decision::Ignore(Ignored::Pinned)));
    }

    #[test]
    fn events_are_filtered_case_insensitively_with_per_type_defaults() {
        let body = push("refs/heads/main", SHA, &format!("\"{SHA}\""));
        assert_eq!(gitlab("push hook", &body, &main()), Ok(SYNC));
        assert_eq!(
            gitlab("Merge Request Hook", &body, &main()),
            Ok(Decision::Ignore(Ignored::Event("Merge Request Hook".into())))
        );
        let events = effective_events(WebhookType::Gitlab, &[]);
        let none = decide(WebhookType::Gitlab, &HeaderMap::new(), body.as_bytes(), &events, &main());
        assert_eq!(none, Err(BadRequest::MissingEvent(GITLAB_EVENT)));
        // Configured events replace the defaults.
        let only_tags = effective_events(WebhookType::Gitlab, &["Tag Push Hook".into()]);
        let push_hook =
            decide(WebhookType::Gitlab, &headers(GITLAB_EVENT, "Push Hook"), body.as_bytes(), &only_tags, &main());
        assert!(matches!(push_hook, Ok(Decision::Ignore(Ignored::Event(_)))));
        // GitHub's ping is acknowledged, not synced.
        let github = effective_events(WebhookType::Github, &[]);
        let ping = decide(WebhookType::Github, &headers(GITHUB_EVENT, "ping"), b"{}", &github, &main());
        assert!(matches!(ping, Ok(Decision::Ignore(Ignored::Event(_)))));
    }

    #[test]
    fn a_malformed_body_is_described_by_position_without_repeating_it() {
        let hook = headers(GITLAB_EVENT, "Push Hook");
        let events = effective_events(WebhookType::Gitlab, &[]);
        let long = "x".repeat(10_000);
        for body in [format!(r#"{{"ref":"refs/heads/main","deleted":"{long}"}}"#), format!(r#"{{"ref":"{long}"#)] {
            let Err(BadRequest::MalformedJson(message)) =
                decide(WebhookType::Gitlab, &hook, body.as_bytes(), &events, &main())
            else {
                panic!("a malformed body is a bad request");
            };
            assert!(message.len() < 200 && !message.contains("xxxx"), "{message}");
            assert!(message.contains("line 1, column"), "{message}");
        }
    }

    #[test]
    fn generic_bodies_are_optional_but_must_be_json_when_given() {
        let any: Vec<String> = effective_events(WebhookType::Generic, &[]);
        assert!(any.is_empty());
        let none = HeaderMap::new();
        for kind in [WebhookType::Generic, WebhookType::GenericHmac] {
            assert_eq!(decide(kind, &none, b"", &any, &main()), Ok(SYNC));
            assert_eq!(decide(kind, &none, b"{}", &any, &main()), Ok(SYNC));
            assert!(matches!(decide(kind, &none, b"{\"ref\":", &any, &main()), Err(BadRequest::MalformedJson(_))));
            let other = decide(kind, &none, br#"{"ref":"refs/heads/dev"}"#, &any, &main());
            assert!(matches!(other, Ok(Decision::Ignore(_))));
        }
        let gitlab = effective_events(WebhookType::Gitlab, &[]);
        let hook = headers(GITLAB_EVENT, "Push Hook");
        assert_eq!(decide(WebhookType::Gitlab, &hook, b" ", &gitlab, &main()), Err(BadRequest::EmptyBody));
        assert_eq!(decide(WebhookType::Gitlab, &hook, b"{}", &gitlab, &main()), Err(BadRequest::MissingRef));
        assert!(matches!(
            decide(WebhookType::Gitlab, &hook, b"[1]", &gitlab, &main()),
            Err(BadRequest::MalformedJson(_))
        ));
    }

    #[test]
    fn answers_repeat_only_a_bounded_printable_part_of_what_was_sent() {
        let long = format!("refs/heads/{}\u{7}", "x".repeat(500));
        let body = format!(r#"{{"ref":"{}"}}"#, long.replace('\u{7}', "\\u0007"));
        let Ok(Decision::Ignore(Ignored::OtherRef(shown))) = gitlab("Push Hook", &body, &main()) else { panic!() };
        assert_eq!(shown.len(), MAX_SHOWN);
    }
}
