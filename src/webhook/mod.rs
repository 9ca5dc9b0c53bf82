//! The webhook receiver: a push announced by GitLab (or GitHub, or any sender of the generic
//! types) starts a sync of the registration within milliseconds, and nobody without the
//! registration's secrets can trigger it or flood it.
//!
//! The receiver spends nothing on the unauthenticated: an unknown path is a 404 that uses no shared
//! budget, everything the headers can refuse is refused before the body is read, and only then
//! are the rate limits taken and the body read, within a budget of bodies in flight.
//!
//! Pure decisions, unit-tested without servers: [`admit`] (the checks before the body),
//! [`verify`] (per-type verification, constant-time), [`filter`] (event and ref filter),
//! [`dedupe`] (bounded memory of delivery ids), [`rate`] (token buckets), [`budget`] (bytes of
//! bodies in flight). State: [`index`] (digest → registration and its budgets). I/O: [`keeper`]
//! (keeps the index in step with the registrations), [`server`] (the axum router and its HTTP/1
//! server) and [`trigger`] (the receiver's way into the TenantRepository controller).
//!
//! `cdtarget controller` serves it on `--webhook-addr`; see `docs/webhooks.md`.

pub(crate) mod admit;
pub(crate) mod budget;
pub mod dedupe;
pub mod filter;
pub(crate) mod index;
pub(crate) mod keeper;
pub(crate) mod rate;
pub(crate) mod server;
pub(crate) mod trigger;
pub mod verify;

pub use index::{Index, Registration};
pub use keeper::keep_index_on_streams;
pub use rate::Rate;
pub use server::{Fire, Limits, Receiver, router, serve};
pub use trigger::{Trigger, TriggerClosed};
