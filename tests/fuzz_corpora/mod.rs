//! Replays the committed fuzz corpora on stable Rust: every file of `fuzz/corpus/<target>/` (the
//! minimized seeds) and of `fuzz/artifacts/<target>/` (reproducers of fixed findings, when any)
//! goes through exactly the check its libFuzzer target runs (`fuzz/src`, included here), so a
//! finding once fixed stays fixed. How to run the campaigns: docs/security.md.

#[path = "../../fuzz/src/lib.rs"]
mod checks;

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use checks::webhook::Scheme;

/// The targets replayed here: every target of `fuzz/fuzz_targets/`.
const REPLAYED: [&str; 11] = [
    "manifests_load",
    "kustomize_build",
    "policy_parse",
    "address_parse",
    "known_hosts_parse",
    "webhook_verify_gitlab",
    "webhook_verify_gitlab_signed",
    "webhook_verify_github",
    "webhook_verify_generic_hmac",
    "webhook_verify_generic",
    "snapshot_writer",
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `fuzz/<kind>/<target>/`, sorted; none when the directory is absent.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(fuzz_dir().join(kind).join(target)) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

/// Runs `check` over every seed and reproducer of `target`; fails naming each input that
/// breaks an invariant (the panic message above the failure says which).
fn replay(target: &str, check: impl Fn(&[u8])) {
    let seeds = inputs("corpus", target);
    assert!(!seeds.is_empty(), "fuzz/corpus/{target}/ holds no seed");
    let failures: Vec<String> = seeds
        .iter()
        .chain(&inputs("artifacts", target))
        .filter(|path| {
            let data = fs::read(path).expect("read a corpus file");
            catch_unwind(AssertUnwindSafe(|| check(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(failures.is_empty(), "{target}: {} input(s) break an invariant: {failures:#?}", failures.len());
}

#[test]
fn every_fuzz_target_is_replayed_and_has_seeds() {
    let mut targets: Vec<String> = fs::read_dir(fuzz_dir().join("fuzz_targets"))
        .expect("fuzz/fuzz_targets")
        .filter_map(|e| e.ok()?.path().file_stem()?.to_str().map(str::to_owned))
        .collect();
    targets.sort();
    let mut replayed = REPLAYED.map(str::to_owned).to_vec();
    replayed.sort();
    assert_eq!(targets, replayed, "a fuzz target without a replay test here, or the other way round");
    for target in REPLAYED {
        assert!(!inputs("corpus", target).is_empty(), "fuzz/corpus/{target}/ holds no seed");
    }
}

#[test]
fn manifests_load_corpus_keeps_every_object_in_the_tenant_namespace_and_refusals_located() {
    replay("manifests_load", checks::manifests::check);
}

#[test]
fn kustomize_build_corpus_is_refused_located_or_built_within_the_budget() {
    replay("kustomize_build", checks::kustomize::check);
}

#[test]
fn policy_parse_corpus_yields_only_policies_the_renderer_can_trust() {
    replay("policy_parse", checks::policy::check);
}

#[test]
fn address_parse_corpus_never_opens_a_forbidden_range_in_any_spelling() {
    replay("address_parse", checks::address::check);
}

#[test]
fn known_hosts_parse_corpus_trusts_only_keys_the_text_lists() {
    replay("known_hosts_parse", checks::known_hosts::check);
}

#[test]
fn webhook_verify_gitlab_corpus_never_verifies_without_the_token() {
    replay("webhook_verify_gitlab", |data| checks::webhook::check(Scheme::Gitlab, data));
}

#[test]
fn webhook_verify_gitlab_signed_corpus_never_verifies_with_the_token_alone() {
    replay("webhook_verify_gitlab_signed", |data| checks::webhook::check(Scheme::GitlabSigned, data));
}

#[test]
fn webhook_verify_github_corpus_never_verifies_without_the_hmac_key() {
    replay("webhook_verify_github", |data| checks::webhook::check(Scheme::Github, data));
}

#[test]
fn webhook_verify_generic_hmac_corpus_never_verifies_without_the_hmac_key() {
    replay("webhook_verify_generic_hmac", |data| checks::webhook::check(Scheme::GenericHmac, data));
}

#[test]
fn webhook_verify_generic_corpus_gets_bounded_answers_and_syncs_only_the_tracked_ref() {
    replay("webhook_verify_generic", |data| checks::webhook::check(Scheme::Generic, data));
}

#[test]
fn snapshot_writer_corpus_never_writes_or_reads_outside_the_snapshot() {
    replay("snapshot_writer", checks::snapshot::check);
}
