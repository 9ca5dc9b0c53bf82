//! `webhook_verify_<type>`: an arbitrary delivery (headers, body, and whether the harness signs
//! it with the registration's secret) → `webhook::verify::verify` → `webhook::filter::decide`,
//! for every `spec.webhook.type`.
//!
//! The registration's secrets are random per process: the fuzzer cannot know them, so a delivery
//! it builds must never verify. To reach the code behind the checks, the input may ask the
//! harness to sign the delivery properly (it must then verify) or over other bytes (it must
//! not). For `gitlab` with a signing token, the attacker is given the `X-Gitlab-Token` (a leaked
//! token must not be enough). Answers are bounded, and a push to another ref never syncs.

use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use cdtarget::api::tenant_repository::WebhookType;
use cdtarget::webhook::filter::{self, Decision, Tracked};
use cdtarget::webhook::verify::{self, Rejection, Secrets, SigningKey, Verified};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The receiver's clock during the checks (any fixed instant).
const NOW: i64 = 1_800_000_000;
/// The Standard Webhooks tolerance used.
const TOLERANCE: Duration = verify::DEFAULT_TIMESTAMP_TOLERANCE;
/// Longest answer text a delivery may get back (what the receiver repeats is bounded).
const MAX_ANSWER: usize = 256;

/// What is fuzzed: the type, and for `gitlab` whether a signing token is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// `gitlab`, `X-Gitlab-Token` only.
    Gitlab,
    /// `gitlab` with a `signingToken` (Standard Webhooks signatures).
    GitlabSigned,
    /// `github`.
    Github,
    /// `generic-hmac`.
    GenericHmac,
    /// `generic`.
    Generic,
}

impl Scheme {
    fn kind(self) -> WebhookType {
        match self {
            Scheme::Gitlab | Scheme::GitlabSigned => WebhookType::Gitlab,
            Scheme::Github => WebhookType::Github,
            Scheme::GenericHmac => WebhookType::GenericHmac,
            Scheme::Generic => WebhookType::Generic,
        }
    }
}

/// Headers a sender might set: the ones the receiver reads, then any other.
const KNOWN_HEADERS: [&str; 12] = [
    verify::GITLAB_TOKEN,
    verify::GITHUB_SIGNATURE,
    verify::GENERIC_SIGNATURE,
    verify::WEBHOOK_ID,
    verify::WEBHOOK_TIMESTAMP,
    verify::WEBHOOK_SIGNATURE,
    filter::GITLAB_EVENT,
    filter::GITHUB_EVENT,
    filter::GENERIC_EVENT,
    "idempotency-key",
    "x-github-delivery",
    "content-type",
];

/// One delivery as the fuzzer describes it.
#[derive(Arbitrary, Debug)]
pub struct Delivery {
    headers: Vec<(HeaderChoice, Vec<u8>)>,
    body: Vec<u8>,
    proof: Proof,
    /// Seconds between the receiver's clock and a harness-made Standard Webhooks timestamp.
    skew: i16,
    /// The `webhook-id` of a harness-signed delivery.
    id: Vec<u8>,
    events: Vec<String>,
    tracked: TrackedChoice,
}

#[derive(Arbitrary, Debug)]
enum HeaderChoice {
    Known(u8),
    Other(String),
}

/// Whether the harness adds the registration's proof to the delivery.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
enum Proof {
    /// Only what the fuzzer wrote.
    None,
    /// The proof of exactly this delivery: it must verify.
    Valid,
    /// A proof of other bytes (or a stale one): it must not verify.
    Forged,
}

#[derive(Arbitrary, Debug)]
enum TrackedChoice {
    Branch(String),
    Tag(String),
    Commit([u8; 20]),
    Any,
}

/// The registration's secrets for this process: unknown to the fuzzer.
struct Keys {
    token: String,
    signing_key: Vec<u8>,
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let random = random_bytes(48);
        Keys { token: hex(&random[..16]), signing_key: random[16..].to_vec() }
    })
}

/// Bytes from the standard library's randomly seeded hasher (no cryptographic claim: they only
/// have to be unknown to the fuzzer).
fn random_bytes(count: usize) -> Vec<u8> {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    (0..count.div_ceil(8) as u64)
        .flat_map(|i| {
            let mut hasher = state.build_hasher();
            hasher.write_u64(i);
            hasher.finish().to_le_bytes()
        })
        .take(count)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The fuzz target for `scheme`.
pub fn check(scheme: Scheme, data: &[u8]) {
    if let Ok(delivery) = Delivery::arbitrary_take_rest(Unstructured::new(data)) {
        check_delivery(scheme, &delivery);
    }
}

fn check_delivery(scheme: Scheme, delivery: &Delivery) {
    let keys = keys();
    let secrets = match scheme {
        Scheme::GitlabSigned => Secrets::new(keys.token.clone(), Some(SigningKey::Key(keys.signing_key.clone()))),
        _ => Secrets::new(keys.token.clone(), None),
    };
    let kind = scheme.kind();
    let mut headers = HeaderMap::new();
    for (choice, value) in &delivery.headers {
        let name = match choice {
            HeaderChoice::Known(i) => HeaderName::from_static(KNOWN_HEADERS[usize::from(*i) % KNOWN_HEADERS.len()]),
            HeaderChoice::Other(name) => match HeaderName::from_bytes(name.as_bytes()) {
                Ok(name) => name,
                Err(_) => continue,
            },
        };
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
    let expected_id = add_proof(scheme, delivery.proof, delivery, keys, &mut headers);

    let verdict = verify::verify(kind, &headers, &delivery.body, &secrets, NOW, TOLERANCE);
    match (scheme, delivery.proof, &verdict) {
        (Scheme::Generic, _, verdict) => assert_eq!(verdict, &Ok(Verified::default()), "generic is the path alone"),
        (_, Proof::Valid, Ok(verified)) => {
            assert_eq!(verified.signed_id, expected_id, "signed id is not the one signed")
        }
        (_, Proof::Valid, Err(rejection)) => panic!("{scheme:?}: a properly signed delivery was refused: {rejection}"),
        (_, _, Ok(_)) => panic!("{scheme:?}: a delivery without the secret verified"),
        (_, _, Err(rejection)) => check_rejection(rejection, keys),
    }

    let events: Vec<String> = if delivery.events.is_empty() {
        filter::effective_events(kind, &[])
    } else {
        delivery.events.iter().take(8).cloned().collect()
    };
    let tracked = match &delivery.tracked {
        TrackedChoice::Branch(name) => Tracked::Branch(name.clone()),
        TrackedChoice::Tag(name) => Tracked::Tag(name.clone()),
        TrackedChoice::Commit(sha) => Tracked::Commit(hex(sha)),
        TrackedChoice::Any => Tracked::Any,
    };
    match filter::decide(kind, &headers, &delivery.body, &events, &tracked) {
        Ok(Decision::Sync { .. }) => check_synced_ref(&delivery.body, &tracked),
        Ok(Decision::Ignore(why)) => check_answer(&why.to_string()),
        Err(bad) => check_answer(&bad.to_string()),
    }
}

/// Adds the harness's proof to `headers`; returns the `webhook-id` a valid signature covers.
fn add_proof(
    scheme: Scheme,
    proof: Proof,
    delivery: &Delivery,
    keys: &Keys,
    headers: &mut HeaderMap,
) -> Option<String> {
    let mut set = |name: &'static str, value: String| {
        headers.insert(name, HeaderValue::from_str(&value).expect("harness headers are visible ASCII"));
    };
    let mut other_body = delivery.body.clone();
    other_body.push(b'\n');
    let signed_body = if proof == Proof::Forged { &other_body } else { &delivery.body };
    match scheme {
        Scheme::Generic => None,
        Scheme::GitlabSigned => {
            // The attacker knows the token; only the signing key proves the delivery.
            set(verify::GITLAB_TOKEN, keys.token.clone());
            if proof == Proof::None {
                return None;
            }
            let id = if delivery.id.is_empty() { "msg".to_owned() } else { hex(&delivery.id) };
            let tolerance = TOLERANCE.as_secs() as i64;
            let skew = i64::from(delivery.skew);
            let fresh = NOW + skew.clamp(-tolerance, tolerance);
            // A forged proof is a good signature of another body, or of this body but stale.
            let (signed_at, body) = match proof {
                Proof::Forged if skew % 2 != 0 => (NOW + skew.signum() * (tolerance + 1) + skew, &delivery.body),
                _ => (fresh, signed_body),
            };
            set(verify::WEBHOOK_ID, id.clone());
            set(verify::WEBHOOK_TIMESTAMP, signed_at.to_string());
            set(
                verify::WEBHOOK_SIGNATURE,
                verify::standard_webhooks_signature(&keys.signing_key, &id, signed_at, body),
            );
            (proof == Proof::Valid).then_some(id)
        }
        _ if proof == Proof::None => None,
        Scheme::Gitlab => {
            let token = if proof == Proof::Valid { keys.token.clone() } else { format!("{}0", keys.token) };
            set(verify::GITLAB_TOKEN, token);
            None
        }
        Scheme::Github | Scheme::GenericHmac => {
            let header = if scheme == Scheme::Github { verify::GITHUB_SIGNATURE } else { verify::GENERIC_SIGNATURE };
            set(header, verify::hex_signature(keys.token.as_bytes(), signed_body));
            None
        }
    }
}

/// A refusal names headers, never a value, and never a secret.
fn check_rejection(rejection: &Rejection, keys: &Keys) {
    let text = rejection.to_string();
    assert!(text.len() <= MAX_ANSWER, "rejection of {} bytes", text.len());
    assert!(!text.contains(&keys.token), "rejection shows the token");
}

/// What the receiver answers is bounded and printable.
fn check_answer(text: &str) {
    assert!(text.len() <= MAX_ANSWER, "answer of {} bytes: {text:?}", text.len());
    assert!(!text.chars().any(char::is_control), "answer with control characters: {text:?}");
}

/// A sync is only for the tracked ref (or, for generic senders, a body without `ref`).
fn check_synced_ref(body: &[u8], tracked: &Tracked) {
    let Ok(serde_json::Value::Object(push)) = serde_json::from_slice::<serde_json::Value>(body) else { return };
    let Some(git_ref) = push.get("ref").and_then(serde_json::Value::as_str) else { return };
    match tracked {
        Tracked::Branch(branch) => assert_eq!(git_ref, format!("refs/heads/{branch}"), "synced on another ref"),
        Tracked::Tag(tag) => assert_eq!(git_ref, format!("refs/tags/{tag}"), "synced on another ref"),
        Tracked::Commit(sha) => {
            let pushed = ["checkout_sha", "after"].map(|k| push.get(k).and_then(serde_json::Value::as_str));
            let hit = pushed.into_iter().flatten().any(|p| p.eq_ignore_ascii_case(sha));
            assert!(hit, "a registration pinned to {sha} synced on another commit");
        }
        Tracked::Any => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMES: [Scheme; 5] =
        [Scheme::Gitlab, Scheme::GitlabSigned, Scheme::Github, Scheme::GenericHmac, Scheme::Generic];

    fn delivery(proof: Proof, skew: i16) -> Delivery {
        Delivery {
            headers: vec![(HeaderChoice::Known(6), b"Push Hook".to_vec()), (HeaderChoice::Known(7), b"push".to_vec())],
            body: br#"{"ref":"refs/heads/main","after":"0123"}"#.to_vec(),
            proof,
            skew,
            id: b"id".to_vec(),
            events: Vec::new(),
            tracked: TrackedChoice::Branch("main".into()),
        }
    }

    #[test]
    fn the_harness_proof_verifies_and_its_forgeries_do_not_for_every_scheme() {
        // check_delivery panics when a valid proof is refused or a forged one accepted.
        for scheme in SCHEMES {
            for (proof, skew) in
                [(Proof::Valid, 0), (Proof::Valid, -300), (Proof::Forged, 2), (Proof::Forged, 3), (Proof::None, 0)]
            {
                check_delivery(scheme, &delivery(proof, skew));
            }
        }
    }

    #[test]
    #[should_panic(expected = "synced on another ref")]
    fn the_oracle_sees_a_sync_on_another_ref() {
        check_synced_ref(br#"{"ref":"refs/heads/dev"}"#, &Tracked::Branch("main".into()));
    }
}
