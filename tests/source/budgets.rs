//! Disk is bounded per registration: the pack of one fetch, the checked-out tree (bytes, one
//! file, entries), the whole cache directory, and the snapshots kept. A registration past a
//! budget stalls with a reason naming the budget and the figure, keeps its running snapshot, and
//! the others go on.

use std::path::Path;

use cdtarget::source::{Credentials, FailureKind, Fetched, Fetcher, Limits, SourceError};

use super::common::{self, GitDaemon};
use super::{CONFIG_MAP, Served, assert_running_intact, limits, read, request, snapshot_dirs};

fn expect(result: Result<Fetched, SourceError>, kind: FailureKind, figure: u64) -> String {
    match result {
        Err(e) if e.kind == kind => {
            assert!(e.message.contains(&figure.to_string()), "names the budget {figure}: {}", e.message);
            e.message
        }
        other => panic!("expected {kind:?}, got {other:?}"),
    }
}

/// Apparent bytes under `dir`, links not followed.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let kind = entry.file_type().unwrap();
        total += if kind.is_dir() { bytes_under(&entry.path()) } else { entry.metadata().unwrap().len() };
    }
    total
}

#[test]
fn a_tree_over_the_snapshot_budget_stalls_naming_it_and_keeps_the_running_snapshot() {
    let served = Served::start();
    let running = served.fetch_updated();
    // Two MiB of zeros: a pack of a few KiB, a tree of two MiB.
    served.repo.commit_and_push(&[("zeros.bin", vec![0u8; 2 << 20])], "zeros");
    let small = Limits { max_tree_bytes: 1 << 20, ..limits() };
    let message = expect(served.fetch(&small), FailureKind::SnapshotTooLarge, 1 << 20);
    assert!(message.contains("zeros.bin"), "{message}");
    assert_running_intact(served.cache.path(), &running);
}

#[test]
fn a_file_over_the_file_budget_stalls_naming_the_file() {
    let served = Served::start();
    let running = served.fetch_updated();
    served.repo.commit_and_push(&[("deploy/huge.yaml", vec![b'#'; 300 << 10])], "huge");
    let small = Limits { max_file_bytes: 256 << 10, ..limits() };
    let message = expect(served.fetch(&small), FailureKind::SnapshotTooLarge, 256 << 10);
    assert!(message.contains("`deploy/huge.yaml` is 307200 bytes"), "{message}");
    assert_running_intact(served.cache.path(), &running);
}

#[test]
fn a_tree_of_too_many_entries_stalls_naming_the_count() {
    let served = Served::start();
    let running = served.fetch_updated();
    let names: Vec<String> = (0..40).map(|i| format!("many/empty-{i:02}")).collect();
    let files: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "")).collect();
    served.repo.commit_and_push(&files, "empty files cost inodes");
    let few = Limits { max_tree_entries: 25, ..limits() };
    let message = expect(served.fetch(&few), FailureKind::SnapshotTooLarge, 25);
    assert!(message.contains("entries"), "{message}");
    assert_running_intact(served.cache.path(), &running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_over_its_cache_budget_stalls_and_the_others_go_on() {
    super::setup();
    let (big_upstream, big) = super::tenant_repo();
    let (small_upstream, _small) = super::tenant_repo();
    let big_daemon = GitDaemon::start(&big_upstream.root());
    let small_daemon = GitDaemon::start(&small_upstream.root());
    let cache_root = common::test_dir();
    let budget = 600 << 10;
    let fetcher = Fetcher::new(cache_root.path(), Limits { max_cache_bytes: budget, ..limits() }, 2);
    let big_request = request(&big_daemon.url("tenant.git"), Credentials::None);
    let running = fetcher.fetch("team-big/repo", big_request.clone()).await.unwrap().snapshot().clone();

    // Incompressible: the pack and the tree are each about 400 KiB, together over 600 KiB.
    big.commit_large_random(400 << 10);
    big.push("main");
    let message = expect(fetcher.fetch("team-big/repo", big_request).await, FailureKind::CacheTooLarge, budget);
    assert!(message.contains("running snapshot"), "{message}");
    let big_cache = fetcher.cache_dir("team-big/repo");
    assert_running_intact(&big_cache, &running);
    assert!(bytes_under(&big_cache) <= budget, "the disk is given back: {} bytes", bytes_under(&big_cache));

    let small = fetcher.fetch("team-small/repo", request(&small_daemon.url("tenant.git"), Credentials::None)).await;
    assert!(matches!(small, Ok(Fetched::Updated(_))), "the other registration goes on: {small:?}");
}

#[test]
fn a_cache_grown_by_history_is_compacted_instead_of_stalled() {
    let served = Served::start();
    let budget = 2 << 20;
    let limits = Limits { max_cache_bytes: budget, ..limits() };
    let mut latest = String::new();
    // Each commit replaces a 500 KiB random file: the tree stays small, the history grows.
    for round in 0..4 {
        served.repo.commit_and_push(&[("large.bin", random_bytes(round, 500 << 10))], "replace");
        latest = match served.fetch(&limits) {
            Ok(Fetched::Updated(snapshot)) => snapshot.revision,
            other => panic!("a compacted cache fits: {other:?}"),
        };
        assert!(bytes_under(served.cache.path()) <= budget, "{} bytes on disk", bytes_under(served.cache.path()));
    }
    assert_eq!(snapshot_dirs(served.cache.path()).len(), 1);
    assert!(snapshot_dirs(served.cache.path())[0].ends_with(&latest));
    let repository = bytes_under(&served.cache.path().join("repo.git"));
    assert!(repository < 3 * (500 << 10), "the repository holds at most two versions, not four: {repository} bytes");
}

/// `len` incompressible bytes, different for every `seed` (splitmix64).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(seed + 1);
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        bytes.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

#[test]
fn only_the_running_snapshot_is_kept_after_each_update() {
    let served = Served::start();
    for round in 0..3 {
        served.repo.commit_and_push(&[(format!("round-{round}.yaml").as_str(), CONFIG_MAP)], "more");
        let snapshot = served.fetch_updated();
        assert_eq!(snapshot_dirs(served.cache.path()), [snapshot.root]);
    }
}

#[test]
fn what_an_interrupted_write_or_prune_left_is_removed_and_never_taken_for_a_snapshot() {
    let served = Served::start();
    let first = served.fetch_updated();
    let second = served.repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");
    // A crash while writing the second snapshot, and one while removing an older one.
    let trees = served.cache.path().join("trees");
    std::fs::create_dir_all(trees.join(format!("{second}.partial/half"))).unwrap();
    std::fs::create_dir_all(trees.join(format!("{}.stale/half", first.revision))).unwrap();
    let snapshot = served.fetch_updated();
    assert_eq!(snapshot.revision, second);
    assert_eq!(snapshot_dirs(served.cache.path()), std::slice::from_ref(&snapshot.root));
    assert_eq!(read(&snapshot, "more.yaml"), CONFIG_MAP, "written whole, not the partial one");
}

#[test]
fn a_tree_object_too_large_for_the_entry_budget_is_refused_before_it_is_parsed() {
    let served = Served::start();
    let running = served.fetch_updated();
    // 300 entries in one directory: a tree object of about 11 KiB, small in a pack.
    let names: Vec<String> = (0..300).map(|i| format!("many/file-{i:03}.yaml")).collect();
    let files: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "")).collect();
    served.repo.commit_and_push(&files, "a wide directory");
    let few = Limits { max_tree_entries: 10, ..limits() };
    let message = expect(served.fetch(&few), FailureKind::SnapshotTooLarge, 10);
    assert!(message.contains("`many` is a tree object of"), "{message}");
    assert_running_intact(served.cache.path(), &running);
}
