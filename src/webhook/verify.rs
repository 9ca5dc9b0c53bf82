//! Is this delivery from whoever holds the registration's secrets? One pure function,
//! [`verify`], over the headers, the raw body, the registration's [`Secrets`] and the clock.
//!
//! | `spec.webhook.type` | what is checked |
//! | --- | --- |
//! | `gitlab` | `X-Gitlab-Token` equals the `token`; with a `signingToken`, also the Standard Webhooks headers `webhook-id`, `webhook-timestamp` (within the tolerance) and `webhook-signature` (`v1,<base64 HMAC-SHA256(key, "id.timestamp.body")>`) |
//! | `github` | `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(token, body)>` |
//! | `generic-hmac` | `X-Signature: sha256=<hex HMAC-SHA256(token, body)>` |
//! | `generic` | nothing: knowing the path (derived from the token) is the proof |
//!
//! The check is split in two so that the receiver reads no body for a request the headers
//! already refuse: [`verify_headers`] does everything that needs no body (the GitLab token, the
//! form of every signature header, the Standard Webhooks timestamp) and returns the [`Pending`]
//! proof, which [`verify_body`] checks against the body once it is read. [`verify`] is both.
//!
//! Every comparison with a secret is constant-time: tokens are compared as SHA-256 digests with
//! `subtle` (equal lengths, so the length of the token does not leak either), HMACs with
//! `Mac::verify_slice`, which compares in constant time.

use std::fmt;
use std::time::Duration;

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::api::tenant_repository::WebhookType;

/// GitLab's secret token header.
pub const GITLAB_TOKEN: &str = "x-gitlab-token";
/// GitHub's body signature header.
pub const GITHUB_SIGNATURE: &str = "x-hub-signature-256";
/// The body signature header of `generic-hmac`.
pub const GENERIC_SIGNATURE: &str = "x-signature";
/// Standard Webhooks: the delivery id (GitLab sets it to the `Idempotency-Key`).
pub const WEBHOOK_ID: &str = "webhook-id";
/// Standard Webhooks: Unix seconds of the signing.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// Standard Webhooks: space-separated `v1,<base64>` signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// How far a Standard Webhooks timestamp may be from the receiver's clock, either way (the
/// specification's 5 minutes).
pub const DEFAULT_TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Shortest signing key accepted, in bytes (GitLab generates 32).
pub(crate) const MIN_SIGNING_KEY_BYTES: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// The secrets of one registration, from its webhook Secret. `Debug` shows no value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secrets {
    /// The `token`: the path's secret, GitLab's `X-Gitlab-Token`, and the HMAC key of `github` and
    /// `generic-hmac`.
    pub token: Vec<u8>,
    /// SHA-256 of `token`, compared in constant time with the digest of a presented token.
    token_digest: [u8; 32],
    /// GitLab's Standard Webhooks signing key (`signingToken`), when one is configured.
    pub signing_key: Option<SigningKey>,
}

/// A configured Standard Webhooks signing secret.
#[derive(Clone, PartialEq, Eq)]
pub enum SigningKey {
    /// The decoded key bytes.
    Key(Vec<u8>),
    /// The Secret holds something that is not `whsec_<base64>`: every delivery is refused (fail
    /// closed) and the reason is logged when the registration is indexed.
    Unusable(String),
}

impl Secrets {
    /// Secrets with `token` and an optional signing key.
    pub fn new(token: impl Into<Vec<u8>>, signing_key: Option<SigningKey>) -> Self {
        let token = token.into();
        let token_digest = Sha256::digest(&token).into();
        Secrets { token, token_digest, signing_key }
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigningKey::Key(_) => f.write_str("Key(<redacted>)"),
            SigningKey::Unusable(reason) => f.debug_tuple("Unusable").field(reason).finish(),
        }
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let signing = match &self.signing_key {
            None => "none",
            Some(SigningKey::Key(_)) => "set",
            Some(SigningKey::Unusable(_)) => "unusable",
        };
        f.debug_struct("Secrets").field("token", &"<redacted>").field("signing_key", &signing).finish()
    }
}

/// Reads a Standard Webhooks secret: `whsec_` followed by the base64 of the key (the prefix may
/// be left out, as the specification's libraries allow). The error never contains the value.
pub(crate) fn parse_signing_secret(text: &str) -> Result<Vec<u8>, String> {
    let encoded = text.trim();
    let encoded = encoded.strip_prefix("whsec_").unwrap_or(encoded);
    let key = STANDARD.decode(encoded).map_err(|_| "is not `whsec_` followed by base64".to_owned())?;
    if key.len() < MIN_SIGNING_KEY_BYTES {
        return Err(format!(
            "decodes to {} bytes; at least {MIN_SIGNING_KEY_BYTES} are required (GitLab generates 32)",
            key.len()
        ));
    }
    Ok(key)
}

/// What a verified delivery proved beyond its origin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// The `webhook-id` covered by a valid Standard Webhooks signature: the duplicate key that a
    /// replay cannot change.
    pub signed_id: Option<String>,
}

/// Why a delivery was refused (answered 401). The text names headers, never a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// A header the type requires is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header is present but not in the expected form.
    #[error("header {0} is malformed")]
    MalformedHeader(&'static str),
    /// The presented token is not the registration's.
    #[error("{GITLAB_TOKEN} does not match")]
    TokenMismatch,
    /// No presented signature matches the body.
    #[error("{0} does not match the body")]
    SignatureMismatch(&'static str),
    /// The Standard Webhooks timestamp is outside the tolerance (a replay, or a skewed clock).
    #[error("{WEBHOOK_TIMESTAMP} is more than {0} s away from the receiver's clock")]
    StaleTimestamp(u64),
    /// The registration's signing secret is unusable, so nothing can be verified.
    #[error("the signature cannot be verified")]
    SigningKeyUnusable,
}

/// What the headers left to the body: the proof a body must match, once it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    /// The headers were the whole proof (`gitlab` without a signing token, `generic`).
    Nothing,
    /// `sha256=<hex HMAC-SHA256(token, body)>` presented in header `name` (`github`,
    /// `generic-hmac`).
    BodyHmac {
        /// The header it came from, for the answer.
        name: &'static str,
        /// The decoded HMAC.
        presented: [u8; 32],
    },
    /// Standard Webhooks: one of `signatures` must be the HMAC of `id.timestamp.body`.
    StandardWebhooks {
        /// `webhook-id`, already checked to be non-empty.
        id: String,
        /// `webhook-timestamp`, already checked to be fresh.
        timestamp: String,
        /// The decoded `v1` signatures of the right length.
        signatures: Vec<[u8; 32]>,
    },
}

impl Pending {
    /// Whether only the body can tell whether the sender holds the secret: until then, anyone who
    /// knows the path can get this far.
    pub fn needs_body(&self) -> bool {
        !matches!(self, Pending::Nothing)
    }
}

/// Everything [`verify`] can check without the body: the token of `gitlab` (constant-time), the
/// presence and form of every signature header, the freshness of a Standard Webhooks timestamp.
/// A delivery refused here is refused before a byte of its body is read.
pub(crate) fn verify_headers(
    kind: WebhookType,
    headers: &HeaderMap,
    secrets: &Secrets,
    now_unix: i64,
    tolerance: Duration,
) -> Result<Pending, Rejection> {
    match kind {
        WebhookType::Gitlab => {
            let token = header(headers, GITLAB_TOKEN)?;
            let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            if !bool::from(presented.ct_eq(&secrets.token_digest)) {
                return Err(Rejection::TokenMismatch);
            }
            match &secrets.signing_key {
                None => Ok(Pending::Nothing),
                Some(SigningKey::Unusable(_)) => Err(Rejection::SigningKeyUnusable),
                Some(SigningKey::Key(_)) => standard_webhooks_headers(headers, now_unix, tolerance),
            }
        }
        WebhookType::Github => hex_signature_header(headers, GITHUB_SIGNATURE),
        WebhookType::GenericHmac => hex_signature_header(headers, GENERIC_SIGNATURE),
        WebhookType::Generic => Ok(Pending::Nothing),
    }
}

/// Checks the body against what [`verify_headers`] left `pending`.
pub(crate) fn verify_body(pending: &Pending, body: &[u8], secrets: &Secrets) -> Result<Verified, Rejection> {
    match pending {
        Pending::Nothing => Ok(Verified::default()),
        Pending::BodyHmac { name, presented } => {
            let mut mac = mac(&secrets.token);
            mac.update(body);
            mac.verify_slice(presented).map_err(|_| Rejection::SignatureMismatch(name))?;
            Ok(Verified::default())
        }
        Pending::StandardWebhooks { id, timestamp, signatures } => {
            // A configured key is what made the headers ask for a signature; without it (the
            // Secret changed in between) nothing can match.
            let Some(SigningKey::Key(key)) = &secrets.signing_key else {
                return Err(Rejection::SigningKeyUnusable);
            };
            let mut signed = mac(key);
            signed.update(id.as_bytes());
            signed.update(b".");
            signed.update(timestamp.as_bytes());
            signed.update(b".");
            signed.update(body);
            if signatures.iter().any(|presented| signed.clone().verify_slice(presented).is_ok()) {
                Ok(Verified { signed_id: Some(id.clone()) })
            } else {
                Err(Rejection::SignatureMismatch(WEBHOOK_SIGNATURE))
            }
        }
    }
}

/// Verifies one delivery for a registration of type `kind` (see the module documentation):
/// [`verify_headers`], then [`verify_body`]. `now_unix` is the receiver's clock in Unix seconds.
pub fn verify(
    kind: WebhookType,
    headers: &HeaderMap,
    body: &[u8],
    secrets: &Secrets,
    now_unix: i64,
    tolerance: Duration,
) -> Result<Verified, Rejection> {
    let pending = verify_headers(kind, headers, secrets, now_unix, tolerance)?;
    verify_body(&pending, body, secrets)
}

/// A header as text; absent and non-visible-ASCII values are refused.
fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, Rejection> {
    let value = headers.get(name).ok_or(Rejection::MissingHeader(name))?;
    value.to_str().map_err(|_| Rejection::MalformedHeader(name))
}

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; the error case cannot happen.
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC accepts every key length"))
}

/// `sha256=<64 hex digits>` in header `name`.
fn hex_signature_header(headers: &HeaderMap, name: &'static str) -> Result<Pending, Rejection> {
    let value = header(headers, name)?;
    let hex_digest = value.trim().strip_prefix("sha256=").ok_or(Rejection::MalformedHeader(name))?;
    let mut presented = [0u8; 32];
    hex::decode_to_slice(hex_digest, &mut presented).map_err(|_| Rejection::MalformedHeader(name))?;
    Ok(Pending::BodyHmac { name, presented })
}

/// The Standard Webhooks headers: an id, a timestamp within `tolerance`, and at least one `v1`
/// signature (a `v1` entry that is not 32 bytes of base64 cannot match any body).
fn standard_webhooks_headers(headers: &HeaderMap, now_unix: i64, tolerance: Duration) -> Result<Pending, Rejection> {
    let id = header(headers, WEBHOOK_ID)?;
    let timestamp = header(headers, WEBHOOK_TIMESTAMP)?;
    let signatures = header(headers, WEBHOOK_SIGNATURE)?;
    if id.is_empty() {
        return Err(Rejection::MalformedHeader(WEBHOOK_ID));
    }
    if timestamp.is_empty() || !timestamp.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Rejection::MalformedHeader(WEBHOOK_TIMESTAMP));
    }
    let signed_at: i64 = timestamp.parse().map_err(|_| Rejection::MalformedHeader(WEBHOOK_TIMESTAMP))?;
    let tolerance_secs = tolerance.as_secs();
    if now_unix.abs_diff(signed_at) > tolerance_secs {
        return Err(Rejection::StaleTimestamp(tolerance_secs));
    }
    let mut any_v1 = false;
    let mut decoded = Vec::new();
    for entry in signatures.split_ascii_whitespace() {
        // Other versions (e.g. asymmetric `v1a`) are not ours to check.
        let Some(encoded) = entry.strip_prefix("v1,") else { continue };
        any_v1 = true;
        if let Some(signature) = STANDARD.decode(encoded).ok().and_then(|bytes| <[u8; 32]>::try_from(bytes).ok()) {
            decoded.push(signature);
        }
    }
    match (any_v1, decoded.is_empty()) {
        (false, _) => Err(Rejection::MalformedHeader(WEBHOOK_SIGNATURE)),
        (true, true) => Err(Rejection::SignatureMismatch(WEBHOOK_SIGNATURE)),
        (true, false) => {
            Ok(Pending::StandardWebhooks { id: id.to_owned(), timestamp: timestamp.to_owned(), signatures: decoded })
        }
    }
}

/// Signs like a sender: `sha256=<hex>` of `body` with `key` (for `github` and `generic-hmac`).
/// Used by tests, benchmarks and anyone scripting a `generic-hmac` sender in Rust.
pub fn hex_signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = mac(key);
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Signs like a Standard Webhooks sender: the `webhook-signature` value (`v1,<base64>`) for
/// `id`, `timestamp` and `body` with the decoded `key`.
pub fn standard_webhooks_signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = mac(key);
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const NOW: i64 = 1_800_000_000;
    const BODY: &[u8] = br#"{"ref":"refs/heads/main"}"#;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn check(kind: WebhookType, pairs: &[(&'static str, &str)], secrets: &Secrets) -> Result<Verified, Rejection> {
        verify(kind, &headers(pairs), BODY, secrets, NOW, DEFAULT_TIMESTAMP_TOLERANCE)
    }

    fn key() -> Vec<u8> {
        (0u8..32).collect()
    }

    fn signed(token: &str) -> Secrets {
        Secrets::new(token, Some(SigningKey::Key(key())))
    }

    #[test]
    fn gitlab_token_must_be_present_and_equal() {
        let secrets = Secrets::new("s3cret", None);
        assert_eq!(check(WebhookType::Gitlab, &[(GITLAB_TOKEN, "s3cret")], &secrets), Ok(Verified::default()));
        assert_eq!(check(WebhookType::Gitlab, &[(GITLAB_TOKEN, "s3cret2")], &secrets), Err(Rejection::TokenMismatch));
        assert_eq!(check(WebhookType::Gitlab, &[(GITLAB_TOKEN, "")], &secrets), Err(Rejection::TokenMismatch));
        assert_eq!(check(WebhookType::Gitlab, &[], &secrets), Err(Rejection::MissingHeader(GITLAB_TOKEN)));
    }

    #[test]
    fn gitlab_with_a_signing_key_requires_a_valid_fresh_signature_of_id_timestamp_and_body() {
        let secrets = signed("tok");
        let signature = standard_webhooks_signature(&key(), "msg-1", NOW - 10, BODY);
        let timestamp = (NOW - 10).to_string();
        let good = [(GITLAB_TOKEN, "tok"), (WEBHOOK_ID, "msg-1"), (WEBHOOK_TIMESTAMP, &timestamp)];
        let with = |signature: &str| {
            let mut pairs = good.to_vec();
            pairs.push((WEBHOOK_SIGNATURE, signature));
            check(WebhookType::Gitlab, &pairs, &secrets)
        };
        assert_eq!(with(&signature), Ok(Verified { signed_id: Some("msg-1".into()) }));
        // Several signatures (key rotation): any valid v1 entry is enough.
        let other = standard_webhooks_signature(b"another key of 16+ bytes", "msg-1", NOW - 10, BODY);
        assert!(with(&format!("v1a,xyz {other} {signature}")).is_ok());
        assert_eq!(with(&other), Err(Rejection::SignatureMismatch(WEBHOOK_SIGNATURE)));
        assert_eq!(with("v1,not base64!"), Err(Rejection::SignatureMismatch(WEBHOOK_SIGNATURE)));
        assert_eq!(with("v2,abc"), Err(Rejection::MalformedHeader(WEBHOOK_SIGNATURE)));
        // The id and timestamp are covered by the signature.
        let moved = [(GITLAB_TOKEN, "tok"), (WEBHOOK_ID, "msg-2"), (WEBHOOK_TIMESTAMP, &timestamp)];
        let mut pairs = moved.to_vec();
        pairs.push((WEBHOOK_SIGNATURE, &signature));
        assert_eq!(check(WebhookType::Gitlab, &pairs, &secrets), Err(Rejection::SignatureMismatch(WEBHOOK_SIGNATURE)));
        // The token is still required next to the signature.
        let no_token =
            [(WEBHOOK_ID, "msg-1"), (WEBHOOK_TIMESTAMP, timestamp.as_str()), (WEBHOOK_SIGNATURE, &signature)];
        assert_eq!(check(WebhookType::Gitlab, &no_token, &secrets), Err(Rejection::MissingHeader(GITLAB_TOKEN)));
        assert_eq!(
            check(WebhookType::Gitlab, &[(GITLAB_TOKEN, "tok")], &secrets),
            Err(Rejection::MissingHeader(WEBHOOK_ID))
        );
    }

    #[test]
    fn the_published_standard_webhooks_test_vector_verifies() {
        // The specification's reference vector: a signature made by its reference libraries.
        let key = parse_signing_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(standard_webhooks_signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body), expected);
        let pairs = [
            (GITLAB_TOKEN, "tok"),
            (WEBHOOK_ID, "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            (WEBHOOK_TIMESTAMP, "1614265330"),
            (WEBHOOK_SIGNATURE, expected),
        ];
        let secrets = Secrets::new("tok", Some(SigningKey::Key(key)));
        let verified =
            verify(WebhookType::Gitlab, &headers(&pairs), body, &secrets, 1614265330, DEFAULT_TIMESTAMP_TOLERANCE);
        assert_eq!(verified.unwrap().signed_id.as_deref(), Some("msg_p5jXN8AQM9LWM0D4loKWxJek"));
    }

    #[test]
    fn gitlab_timestamps_outside_the_tolerance_are_refused_both_ways() {
        let secrets = signed("tok");
        for (offset, ok) in [(-301, false), (-300, true), (300, true), (301, false)] {
            let at = NOW + offset;
            let signature = standard_webhooks_signature(&key(), "id", at, BODY);
            let timestamp = at.to_string();
            let pairs = [
                (GITLAB_TOKEN, "tok"),
                (WEBHOOK_ID, "id"),
                (WEBHOOK_TIMESTAMP, &timestamp),
                (WEBHOOK_SIGNATURE, &signature),
            ];
            let result = check(WebhookType::Gitlab, &pairs, &secrets);
            assert_eq!(result.is_ok(), ok, "offset {offset}: {result:?}");
            if !ok {
                assert_eq!(result, Err(Rejection::StaleTimestamp(300)));
            }
        }
        let pairs = [(GITLAB_TOKEN, "tok"), (WEBHOOK_ID, "id"), (WEBHOOK_TIMESTAMP, "-5"), (WEBHOOK_SIGNATURE, "v1,x")];
        assert_eq!(check(WebhookType::Gitlab, &pairs, &secrets), Err(Rejection::MalformedHeader(WEBHOOK_TIMESTAMP)));
    }

    #[test]
    fn an_unusable_signing_key_refuses_everything() {
        let secrets = Secrets::new("tok", Some(SigningKey::Unusable("bad".into())));
        assert_eq!(check(WebhookType::Gitlab, &[(GITLAB_TOKEN, "tok")], &secrets), Err(Rejection::SigningKeyUnusable));
    }

    #[test]
    fn github_and_generic_hmac_check_the_hex_hmac_of_the_body_with_the_token() {
        let secrets = Secrets::new("tok", None);
        let good = hex_signature(b"tok", BODY);
        let bad = hex_signature(b"other", BODY);
        for (kind, name) in [(WebhookType::Github, GITHUB_SIGNATURE), (WebhookType::GenericHmac, GENERIC_SIGNATURE)] {
            assert_eq!(check(kind, &[(name, &good)], &secrets), Ok(Verified::default()));
            assert_eq!(check(kind, &[(name, &bad)], &secrets), Err(Rejection::SignatureMismatch(name)));
            assert_eq!(check(kind, &[], &secrets), Err(Rejection::MissingHeader(name)));
            assert_eq!(check(kind, &[(name, &good[7..])], &secrets), Err(Rejection::MalformedHeader(name)));
            assert_eq!(check(kind, &[(name, "sha256=abcd")], &secrets), Err(Rejection::MalformedHeader(name)));
        }
        // Each type reads its own header only.
        assert!(check(WebhookType::Github, &[(GENERIC_SIGNATURE, &good)], &secrets).is_err());
    }

    #[test]
    fn header_checks_refuse_a_wrong_token_and_malformed_signatures_without_a_body() {
        let now = |pairs: &[(&'static str, &str)], kind, secrets: &Secrets| {
            verify_headers(kind, &headers(pairs), secrets, NOW, DEFAULT_TIMESTAMP_TOLERANCE)
        };
        let plain = Secrets::new("tok", None);
        assert_eq!(now(&[(GITLAB_TOKEN, "guess")], WebhookType::Gitlab, &plain), Err(Rejection::TokenMismatch));
        assert_eq!(now(&[(GITLAB_TOKEN, "tok")], WebhookType::Gitlab, &plain), Ok(Pending::Nothing));
        for (kind, name) in [(WebhookType::Github, GITHUB_SIGNATURE), (WebhookType::GenericHmac, GENERIC_SIGNATURE)] {
            assert_eq!(now(&[(name, "sha256=00")], kind, &plain), Err(Rejection::MalformedHeader(name)));
            let forged = hex_signature(b"not the token", BODY);
            let pending = now(&[(name, &forged)], kind, &plain).unwrap();
            assert!(pending.needs_body(), "only the body can tell a forged HMAC");
            assert_eq!(verify_body(&pending, BODY, &plain), Err(Rejection::SignatureMismatch(name)));
        }
        // Standard Webhooks: a v1 entry that is not 32 bytes of base64 cannot match any body.
        let secrets = signed("tok");
        let timestamp = NOW.to_string();
        let short = STANDARD.encode([0u8; 16]);
        let pairs = [
            (GITLAB_TOKEN, "tok"),
            (WEBHOOK_ID, "id"),
            (WEBHOOK_TIMESTAMP, timestamp.as_str()),
            (WEBHOOK_SIGNATURE, &format!("v1,{short} v1,***")),
        ];
        assert_eq!(now(&pairs, WebhookType::Gitlab, &secrets), Err(Rejection::SignatureMismatch(WEBHOOK_SIGNATURE)));
    }

    #[test]
    fn generic_needs_nothing_but_the_path() {
        assert_eq!(check(WebhookType::Generic, &[], &Secrets::new("tok", None)), Ok(Verified::default()));
    }

    #[test]
    fn signing_secrets_are_whsec_base64_of_at_least_16_bytes() {
        let encoded = STANDARD.encode(key());
        assert_eq!(parse_signing_secret(&format!("whsec_{encoded}")), Ok(key()));
        assert_eq!(parse_signing_secret(&encoded), Ok(key()));
        let error = parse_signing_secret("whsec_***").unwrap_err();
        assert!(!error.contains("***"), "the value is never echoed: {error}");
        assert!(parse_signing_secret(&format!("whsec_{}", STANDARD.encode([1u8; 8]))).is_err());
    }

    #[test]
    fn debug_output_hides_the_secrets() {
        let text = format!("{:?}", signed("s3cret-value"));
        assert!(!text.contains("s3cret"), "{text}");
    }
}
