//! Controller tests against kube-fake-client (an in-memory API server): reconcilers are called
//! directly, as the watches would call them (the fake serves no watches).

#[path = "../common/mod.rs"]
mod common;

mod borrowing;
mod cdtarget;
mod commit_status;
mod discovery;
mod e2e;
mod feedback;
mod gitlab;
mod leaks;
mod run;
mod support;
mod takeover;
mod tenant_repository;
mod tenant_text;
