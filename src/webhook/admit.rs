//! What a request must show before a byte of its body is read. One pure function,
//! [`before_body`], over the registration, the headers and the body's framing; the server asks it
//! right after the path lookup and before it takes any shared budget.
//!
//! In this order (the first failing check answers):
//!
//! 1. **Length.** The body's length as framed (`Content-Length`, or none at all: 0) is at most
//!    the limit (`413`). A chunked body has no length: it is admitted, charged the full limit in
//!    the budget of bodies in flight, and cut at the limit while it is read.
//! 2. **Media type.** A body that may be non-empty is JSON: `Content-Type` absent,
//!    `application/json` or `application/<anything>+json`, parameters allowed (`415`).
//! 3. **Proof in the headers** ([`verify::verify_headers`]): the GitLab token (constant-time), the
//!    presence and form of every signature header, the freshness of a Standard Webhooks timestamp
//!    (`401`).
//! 4. **Event** ([`filter::event_ignored`]): a missing event header where events are filtered is
//!    `400`; an event the registration does not sync on is `200 ignored`.
//!
//! Checks 1 and 2 are the same for every registration, so they tell a client nothing about the
//! one behind the path.

use axum::http::{HeaderMap, header};

use super::filter::{self, BadRequest, Ignored};
use super::index::Registration;
use super::verify::{self, Pending, Rejection};

/// A request whose headers passed: what its body must still prove, and how many bytes of the
/// in-flight budget its read may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// The proof left to the body.
    pub pending: Pending,
    /// The bytes to hold in the budget of bodies in flight while the body is read: the framed
    /// length, or the body limit when the body is chunked.
    pub reserve: usize,
}

/// Why a request is answered before its body is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The framed length is past the limit (`413`).
    TooLarge {
        /// The limit, for the answer.
        limit: usize,
    },
    /// The body is declared as something other than JSON (`415`).
    UnsupportedMediaType,
    /// The headers do not prove the sender holds the secret (`401`).
    Unauthorized(Rejection),
    /// The event header is missing where events are filtered (`400`).
    BadRequest(BadRequest),
    /// The event does not trigger a sync (`200 ignored`).
    Ignored(Ignored),
}

/// The checks every request passes before its body is read (see the module documentation).
/// `framed_length` is the exact length of the body as framed by HTTP (`None`: chunked).
pub(crate) fn before_body(
    registration: &Registration,
    headers: &HeaderMap,
    framed_length: Option<u64>,
    max_body_bytes: usize,
    now_unix: i64,
    tolerance: std::time::Duration,
) -> Result<Admitted, Refusal> {
    let reserve = match framed_length {
        Some(length) if length > max_body_bytes as u64 => return Err(Refusal::TooLarge { limit: max_body_bytes }),
        Some(length) => length as usize,
        None => max_body_bytes,
    };
    if reserve > 0 && !is_json(headers) {
        return Err(Refusal::UnsupportedMediaType);
    }
    let pending = verify::verify_headers(registration.kind, headers, &registration.secrets, now_unix, tolerance)
        .map_err(Refusal::Unauthorized)?;
    match filter::event_ignored(registration.kind, headers, &registration.events) {
        Ok(None) => Ok(Admitted { pending, reserve }),
        Ok(Some(ignored)) => Err(Refusal::Ignored(ignored)),
        Err(bad) => Err(Refusal::BadRequest(bad)),
    }
}

/// Whether the declared media type is JSON (or not declared at all).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return true };
    let Ok(text) = value.to_str() else { return false };
    let essence = text.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json"
        || essence.strip_prefix("application/").is_some_and(|subtype| subtype.ends_with("+json") && subtype.len() > 5)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::HeaderValue;

    use super::*;
    use crate::api::TenantRepository;
    use crate::api::tenant_repository::WebhookType;
    use crate::fixtures;
    use crate::webhook::filter::{GITHUB_EVENT, GITLAB_EVENT};
    use crate::webhook::verify::{GITHUB_SIGNATURE, GITLAB_TOKEN, hex_signature};

    const LIMIT: usize = 1000;
    const NOW: i64 = 1_800_000_000;

    fn registration(kind: WebhookType) -> Registration {
        let repo = TenantRepository::test().with_name("repo").in_namespace("platform").with_webhook(kind, "hook");
        Registration::from_parts(&repo, Some(&fixtures::secret_data(&[("token", "s3cret")]))).unwrap().unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (header::HeaderName::from_static(name), HeaderValue::from_str(value).unwrap()))
            .collect()
    }

    fn check(kind: WebhookType, pairs: &[(&'static str, &str)], length: Option<u64>) -> Result<Admitted, Refusal> {
        before_body(&registration(kind), &headers(pairs), length, LIMIT, NOW, Duration::from_secs(300))
    }

    const GITLAB_OK: [(&str, &str); 3] =
        [(GITLAB_TOKEN, "s3cret"), (GITLAB_EVENT, "Push Hook"), ("content-type", "application/json")];

    #[test]
    fn a_length_past_the_limit_is_refused_whatever_else_the_request_lacks() {
        assert_eq!(check(WebhookType::Gitlab, &[], Some(LIMIT as u64 + 1)), Err(Refusal::TooLarge { limit: LIMIT }));
        assert_eq!(check(WebhookType::Gitlab, &GITLAB_OK, Some(LIMIT as u64)).map(|a| a.reserve), Ok(LIMIT));
    }

    #[test]
    fn a_chunked_body_is_charged_the_whole_limit_and_no_body_nothing() {
        assert_eq!(check(WebhookType::Gitlab, &GITLAB_OK, None).map(|a| a.reserve), Ok(LIMIT));
        assert_eq!(check(WebhookType::Gitlab, &GITLAB_OK, Some(0)).map(|a| a.reserve), Ok(0));
    }

    #[test]
    fn a_body_declared_as_anything_but_json_is_415_before_the_token_is_looked_at() {
        for content_type in ["application/x-www-form-urlencoded", "text/plain", "application/+json", "json"] {
            let pairs = [("content-type", content_type)];
            assert_eq!(
                check(WebhookType::Gitlab, &pairs, Some(10)),
                Err(Refusal::UnsupportedMediaType),
                "{content_type}"
            );
        }
        for content_type in ["application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"] {
            let mut pairs = GITLAB_OK.to_vec();
            pairs[2] = ("content-type", content_type);
            assert!(check(WebhookType::Gitlab, &pairs, Some(10)).is_ok(), "{content_type}");
        }
        // No body, no media type to check; no Content-Type at all is taken as JSON.
        let form = [(GITLAB_TOKEN, "s3cret"), (GITLAB_EVENT, "Push Hook"), ("content-type", "text/plain")];
        assert!(check(WebhookType::Gitlab, &form, Some(0)).is_ok());
        assert!(check(WebhookType::Gitlab, &GITLAB_OK[..2], Some(10)).is_ok());
    }

    #[test]
    fn a_wrong_gitlab_token_is_refused_before_the_body() {
        let mut pairs = GITLAB_OK.to_vec();
        pairs[0] = (GITLAB_TOKEN, "guess");
        assert_eq!(check(WebhookType::Gitlab, &pairs, Some(10)), Err(Refusal::Unauthorized(Rejection::TokenMismatch)));
        assert_eq!(
            check(WebhookType::Gitlab, &pairs[1..], Some(10)),
            Err(Refusal::Unauthorized(Rejection::MissingHeader(GITLAB_TOKEN)))
        );
        assert_eq!(check(WebhookType::Gitlab, &GITLAB_OK, Some(10)).map(|a| a.pending), Ok(Pending::Nothing));
    }

    #[test]
    fn a_body_signature_is_checked_for_form_only_and_left_to_the_body() {
        let signature = hex_signature(b"anything", b"");
        let pairs = [(GITHUB_SIGNATURE, signature.as_str()), (GITHUB_EVENT, "push")];
        let admitted = check(WebhookType::Github, &pairs, Some(10)).unwrap();
        assert!(admitted.pending.needs_body(), "{admitted:?}");
        let malformed = [(GITHUB_SIGNATURE, "sha256=zz"), (GITHUB_EVENT, "push")];
        assert_eq!(
            check(WebhookType::Github, &malformed, Some(10)),
            Err(Refusal::Unauthorized(Rejection::MalformedHeader(GITHUB_SIGNATURE)))
        );
    }

    #[test]
    fn events_are_decided_from_the_header_after_the_proof() {
        let mut pairs = GITLAB_OK.to_vec();
        pairs[1] = (GITLAB_EVENT, "Merge Request Hook");
        assert_eq!(
            check(WebhookType::Gitlab, &pairs, Some(10)),
            Err(Refusal::Ignored(Ignored::Event("Merge Request Hook".into())))
        );
        let no_event = [GITLAB_OK[0], GITLAB_OK[2]];
        assert_eq!(
            check(WebhookType::Gitlab, &no_event, Some(10)),
            Err(Refusal::BadRequest(BadRequest::MissingEvent(GITLAB_EVENT)))
        );
        // A stranger learns nothing about the events: the token is checked first.
        let stranger = [(GITLAB_TOKEN, "guess"), (GITLAB_EVENT, "Merge Request Hook")];
        assert_eq!(
            check(WebhookType::Gitlab, &stranger, Some(0)),
            Err(Refusal::Unauthorized(Rejection::TokenMismatch))
        );
    }
}
