//! The webhook receiver: a push announced by GitLab (or GitHub, or any sender of the generic
//! types) starts a sync of the registration within milliseconds, and nobody without the
//! registration's secrets can trigger it or flood it.
//!
//! Pure decisions, unit-tested without servers: [`verify`] (per-type verification, constant-time),
//! [`filter`] (event and ref filter), [`dedupe`] (bounded memory of delivery ids), [`rate`]
//! (token buckets). State: [`index`] (digest → registration). I/O: [`keeper`] (keeps the index in
//! step with the watches) and [`server`] (the axum router and its HTTP/1 server).
//!
//! `cdtarget controller` serves it on `--webhook-addr`; see `docs/webhooks.md`.

pub mod dedupe;
pub mod filter;
pub mod index;
pub mod keeper;
pub mod rate;
pub mod server;
pub mod verify;

pub use index::{Index, Registration};
pub use keeper::{keep_index, keep_index_on_streams};
pub use rate::Rate;
pub use server::{Fire, Limits, Receiver, router, serve};
