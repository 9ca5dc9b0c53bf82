//! The webhook receiver over real HTTP: the server runs on `127.0.0.1:0` with a trigger that
//! records what it fires, and each test sends deliveries the way each sender makes them.
//!
//! Every case runs for every sender flavour, in a module per flavour: `gitlab` (token),
//! `gitlab_signed` (token + Standard Webhooks signature), `github`, `hmac` (`generic-hmac`) and
//! `generic`; e.g. `gitlab::replay_of_the_same_delivery_id_triggers_once`. Cases that a type has
//! no means for are left out of its module, not faked:
//!
//! - only signed GitLab deliveries carry a timestamp, so `stale_timestamp_past_or_future_is_401` is `gitlab_signed`'s;
//! - `generic` has no header and no signature: its "wrong token" is the path of another token
//!   (404), and "missing header" is replaced by "no header at all is enough";
//! - unsigned GitLab has nothing to tamper with (`tampered_body_fails_the_signature_with_401` needs a signature).
//!
//! Server-wide behaviour (slow clients, connection cap, follower, metrics) is in `server.rs`; the
//! attacker without the secret (junk paths, forged proofs, slow and oversized bodies against the
//! limits and the budget of bodies in flight) in `unauthenticated.rs`.

mod cases;
mod server;
mod support;
mod unauthenticated;

/// One module of tests per sender flavour: the cases every type has, then `$extra` cases.
macro_rules! every_case {
    ($module:ident, $kind:expr, [$($extra:ident),* $(,)?]) => {
        mod $module {
            use crate::cases;
            use crate::support::Kind;

            const KIND: Kind = $kind;

            #[tokio::test]
            async fn valid_push_to_the_tracked_branch_is_accepted_and_triggers() {
                cases::valid(KIND).await;
            }

            #[tokio::test]
            async fn wrong_token_is_refused_and_triggers_nothing() {
                cases::wrong_token(KIND).await;
            }

            #[tokio::test]
            async fn replay_of_the_same_delivery_id_triggers_once() {
                cases::replay(KIND).await;
            }

            #[tokio::test]
            async fn other_ref_push_is_acknowledged_as_ignored_and_triggers_nothing() {
                cases::other_ref(KIND).await;
            }

            #[tokio::test]
            async fn tag_push_triggers_a_tag_registration_and_is_ignored_by_a_branch_one() {
                cases::tag_push(KIND).await;
            }

            #[tokio::test]
            async fn oversize_body_is_413_before_it_is_read() {
                cases::oversize(KIND).await;
            }

            #[tokio::test]
            async fn wrong_method_is_405_naming_post() {
                cases::wrong_method(KIND).await;
            }

            #[tokio::test]
            async fn unknown_path_is_404_like_any_path_not_served() {
                cases::unknown_path(KIND).await;
            }

            #[tokio::test]
            async fn malformed_json_is_400_and_triggers_nothing() {
                cases::malformed_json(KIND).await;
            }

            #[tokio::test]
            async fn rate_limit_of_the_registration_reached_is_429_with_retry_after() {
                cases::rate_limit(KIND).await;
            }

            #[tokio::test]
            async fn answers_never_echo_the_token_or_the_path() {
                cases::answers_never_echo_secrets(KIND).await;
            }

            $(
                #[tokio::test]
                async fn $extra() {
                    cases::$extra(KIND).await;
                }
            )*
        }
    };
}

every_case!(
    gitlab,
    Kind::Gitlab,
    [
        missing_proof_header_is_401,
        deleted_branch_triggers_a_sync,
        other_events_are_ignored_and_a_missing_event_header_is_400,
        configured_events_replace_the_defaults,
    ]
);
every_case!(
    gitlab_signed,
    Kind::GitlabSigned,
    [
        missing_proof_header_is_401,
        tampered_body_fails_the_signature_with_401,
        stale_timestamp_past_or_future_is_401,
        replay_of_a_signed_id_under_a_new_idempotency_key_is_a_duplicate,
        signature_alone_is_not_enough_the_token_is_required_too,
        deleted_branch_triggers_a_sync,
    ]
);
every_case!(
    github,
    Kind::Github,
    [missing_proof_header_is_401, tampered_body_fails_the_signature_with_401, ping_event_is_acknowledged_and_ignored]
);
every_case!(
    hmac,
    Kind::Hmac,
    [
        missing_proof_header_is_401,
        tampered_body_fails_the_signature_with_401,
        empty_body_means_sync_now_and_pinned_commits_are_matched
    ]
);
every_case!(
    generic,
    Kind::Generic,
    [no_header_at_all_is_enough, empty_body_means_sync_now_and_pinned_commits_are_matched]
);
