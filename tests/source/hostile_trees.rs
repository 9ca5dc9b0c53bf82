//! Trees a hostile tenant can push: raw tree objects written byte by byte (git2's TreeBuilder
//! would sort and de-duplicate them), pushed with stock `git push` (receive-pack accepts them) and
//! fetched through a real `git daemon`, or handed to the snapshot writer directly. Nothing may
//! appear outside the snapshot directory: a sentinel directory beside it stays untouched, and the
//! running snapshot stays intact.

use std::path::{Path, PathBuf};

use cdtarget::source::snapshot::write_tree;
use cdtarget::source::{FailureKind, Fetched, Limits, SourceError};
use git2::{ObjectType, Oid, Repository, Signature};
use proptest::prelude::*;

use super::common::{self, TestDir};
use super::{CONFIG_MAP, Served, assert_running_intact, limits, read};

const FILE: &str = "100644";
const EXECUTABLE: &str = "100755";
const DIRECTORY: &str = "40000";
const SYMLINK: &str = "120000";

/// One entry of a raw tree object: mode, name bytes, object.
pub type Entry<'a> = (&'a str, &'a [u8], Oid);

/// Writes a tree object holding exactly `entries`, in this order, duplicates and all.
pub fn raw_tree(repo: &Repository, entries: &[Entry<'_>]) -> Oid {
    let mut bytes = Vec::new();
    for (mode, name, id) in entries {
        bytes.extend_from_slice(mode.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend_from_slice(id.as_bytes());
    }
    repo.odb().unwrap().write(ObjectType::Tree, &bytes).unwrap()
}

pub fn blob(repo: &Repository, content: &[u8]) -> Oid {
    repo.blob(content).unwrap()
}

/// A scratch directory holding `snap/` (where the writer writes) and `sentinel/` beside it.
pub struct Sandbox {
    dir: TestDir,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = common::test_dir();
        std::fs::create_dir(dir.path().join("sentinel")).unwrap();
        std::fs::write(dir.path().join("sentinel/keep"), "untouched").unwrap();
        Sandbox { dir }
    }

    pub fn snap(&self) -> PathBuf {
        self.dir.path().join("snap")
    }

    pub fn sentinel(&self) -> PathBuf {
        self.dir.path().join("sentinel")
    }

    /// Panics unless the sandbox holds nothing but `snap/` and the untouched sentinel.
    pub fn assert_nothing_outside(&self) {
        let top: Vec<String> = names(self.dir.path());
        assert!(top.iter().all(|n| n == "snap" || n == "sentinel" || n == "repo.git"), "written beside: {top:?}");
        assert_eq!(names(&self.sentinel()), ["keep"], "something was written into the sentinel");
        assert_eq!(std::fs::read_to_string(self.sentinel().join("keep")).unwrap(), "untouched");
    }

    /// Everything in the snapshot directory (empty when nothing was written).
    pub fn written(&self) -> Vec<String> {
        let mut found = Vec::new();
        walk(&self.snap(), "", &mut found);
        found
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn walk(dir: &Path, prefix: &str, found: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let entry = entry.unwrap();
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            walk(&entry.path(), &format!("{name}/"), found);
        }
        found.push(name);
    }
    found.sort();
}

/// A bare repository beside the sandbox for the writer's objects.
fn scratch_repo(sandbox: &Sandbox) -> Repository {
    Repository::init_bare(sandbox.dir.path().join("repo.git")).unwrap()
}

fn write(repo: &Repository, tree: Oid, sandbox: &Sandbox) -> Result<(), SourceError> {
    let tree = repo.find_tree(tree).unwrap();
    write_tree(repo, &tree, &sandbox.snap(), &Limits::default())
}

fn expect_refused(result: Result<(), SourceError>, naming: &str) -> String {
    match result {
        Err(e) if e.kind == FailureKind::UnsafeTree => {
            assert!(e.message.contains(naming), "the message names `{naming}`: {}", e.message);
            e.message
        }
        other => panic!("expected UnsafeTree naming `{naming}`, got {other:?}"),
    }
}

// === The attack of the issue, through a real transport ===

/// Commits the tree `build` writes on `main` of the working clone, after its tip, and pushes it
/// with stock `git push` (`git receive-pack` accepts such trees). Returns the commit's sha.
pub fn push_raw_commit(upstream: &common::UpstreamRepo, build: impl FnOnce(&Repository) -> Oid) -> String {
    let repo = Repository::open(upstream.work_path()).unwrap();
    let tree = build(&repo);
    let tree = repo.find_tree(tree).unwrap();
    let parent = repo.find_reference("refs/heads/main").unwrap().peel_to_commit().unwrap();
    let who = Signature::now("tenant", "tenant@example.invalid").unwrap();
    let sha = repo.commit(Some("refs/heads/main"), &who, &who, "hostile", &tree, &[&parent]).unwrap().to_string();
    upstream.push("main");
    assert_eq!(upstream.head("main").as_deref(), Some(sha.as_str()), "the push was accepted");
    sha
}

#[test]
fn symlink_then_blob_of_same_name_is_refused_and_nothing_written_outside() {
    let served = Served::start();
    let sandbox = Sandbox::new();
    let running = served.fetch_updated();

    let target = sandbox.sentinel().join("pwned");
    let sha = push_raw_commit(&served.repo, |r| {
        let link = blob(r, target.to_str().unwrap().as_bytes());
        let payload = blob(r, b"[url \"git://evil/\"]\n\tinsteadOf = https://\n");
        let settings = blob(r, CONFIG_MAP.as_bytes());
        raw_tree(r, &[(FILE, b"settings.yaml", settings), (SYMLINK, b"x", link), (FILE, b"x", payload)])
    });
    let error = served.fetch(&limits()).unwrap_err();
    assert_eq!(error.kind, FailureKind::UnsafeTree, "{error}");
    assert!(error.message.contains("`x` appears more than once"), "{}", error.message);
    assert!(error.message.contains(&sha), "names the commit: {}", error.message);
    sandbox.assert_nothing_outside();
    assert!(!target.exists());
    assert_running_intact(served.cache.path(), &running);
}

#[test]
fn symlink_then_directory_of_same_name_is_refused_and_nothing_written_outside() {
    let served = Served::start();
    let sandbox = Sandbox::new();
    let running = served.fetch_updated();

    push_raw_commit(&served.repo, |r| {
        let link = blob(r, sandbox.sentinel().to_str().unwrap().as_bytes());
        let payload = blob(r, b"written through the link\n");
        let inner = raw_tree(r, &[(FILE, b"pwned", payload)]);
        let settings = blob(r, CONFIG_MAP.as_bytes());
        let deep = raw_tree(r, &[(SYMLINK, b"x", link), (DIRECTORY, b"x", inner)]);
        raw_tree(r, &[(FILE, b"settings.yaml", settings), (DIRECTORY, b"nested", deep)])
    });
    let error = served.fetch(&limits()).unwrap_err();
    assert_eq!(error.kind, FailureKind::UnsafeTree, "{error}");
    assert!(error.message.contains("`nested/x` appears more than once"), "{}", error.message);
    sandbox.assert_nothing_outside();
    assert_running_intact(served.cache.path(), &running);
}

// === Duplicate names, whatever the kinds ===

#[test]
fn every_pair_of_entries_with_one_name_is_refused_before_anything_is_written() {
    let kinds = [FILE, EXECUTABLE, DIRECTORY, SYMLINK];
    for first in kinds {
        for second in kinds {
            let sandbox = Sandbox::new();
            let repo = scratch_repo(&sandbox);
            let object = |mode: &str| match mode {
                DIRECTORY => raw_tree(&repo, &[(FILE, b"inner", blob(&repo, b"inner\n"))]),
                SYMLINK => blob(&repo, sandbox.sentinel().to_str().unwrap().as_bytes()),
                _ => blob(&repo, b"content\n"),
            };
            let before = blob(&repo, b"first in the tree\n");
            let tree = raw_tree(
                &repo,
                &[(FILE, b"a-before", before), (first, b"same", object(first)), (second, b"same", object(second))],
            );
            expect_refused(write(&repo, tree, &sandbox), "`same` appears more than once");
            assert!(sandbox.written().is_empty(), "{first}+{second}: the tree is checked before writing");
            sandbox.assert_nothing_outside();
        }
    }
}

// === Odd names ===

#[test]
fn names_that_could_leave_the_directory_or_confuse_a_reader_are_refused_naming_the_path() {
    let long = vec![b'n'; 256];
    let cases: [(&[u8], &str); 10] = [
        (b"..", "`dir/..`"),
        (b".", "`dir/.`"),
        (b".git", "`dir/.git`"),
        (b".GiT", "`dir/.GiT`"),
        (b"a/b", "`dir/a/b`"),
        (b"../../sentinel", "`dir/../../sentinel`"),
        (b"\xff\xfe.yaml", "`dir/\\xff\\xfe.yaml`"),
        (b"new\nline.yaml", "`dir/new\\nline.yaml`"),
        (b"\x1b[31mred", "`dir/\\x1b[31mred`"),
        (&long, "`dir/nnnn"),
    ];
    for (name, shown) in cases {
        let sandbox = Sandbox::new();
        let repo = scratch_repo(&sandbox);
        let content = blob(&repo, b"x: 1\n");
        let inner = raw_tree(&repo, &[(FILE, name, content)]);
        let tree = raw_tree(&repo, &[(DIRECTORY, b"dir", inner)]);
        let message = expect_refused(write(&repo, tree, &sandbox), shown);
        assert!(message.contains("cannot be checked out"), "{message}");
        assert!(sandbox.written().is_empty(), "{shown}: nothing written");
        sandbox.assert_nothing_outside();
    }
}

#[test]
fn an_entry_with_an_empty_name_makes_the_tree_unreadable_and_is_refused() {
    let sandbox = Sandbox::new();
    let repo = scratch_repo(&sandbox);
    let content = blob(&repo, b"x: 1\n");
    let inner = raw_tree(&repo, &[(FILE, b"", content)]);
    let tree = raw_tree(&repo, &[(DIRECTORY, b"dir", inner)]);
    expect_refused(write(&repo, tree, &sandbox), "`dir` cannot be read as a Git object");
    sandbox.assert_nothing_outside();
}

// === Modes and object types ===

#[test]
fn modes_other_than_file_directory_symlink_and_submodule_are_refused() {
    for mode in ["100000", "100600", "140000", "60000", "20000", "10000", "40755", "0"] {
        let sandbox = Sandbox::new();
        let repo = scratch_repo(&sandbox);
        let content = blob(&repo, b"x: 1\n");
        let tree = raw_tree(&repo, &[(mode, b"odd", content)]);
        let message = expect_refused(write(&repo, tree, &sandbox), "`odd` has file mode");
        assert!(message.contains("100644"), "says what is accepted: {message}");
        assert!(sandbox.written().is_empty(), "{mode}");
    }
}

#[test]
fn an_entry_whose_object_is_not_of_its_mode_is_refused() {
    let sandbox = Sandbox::new();
    let repo = scratch_repo(&sandbox);
    let content = blob(&repo, b"x: 1\n");
    let subtree = raw_tree(&repo, &[(FILE, b"f", content)]);
    let directory_of_a_blob = raw_tree(&repo, &[(DIRECTORY, b"dir", content)]);
    expect_refused(
        write(&repo, directory_of_a_blob, &sandbox),
        "`dir` is listed as a directory, but its object is a blob",
    );
    let file_of_a_tree = raw_tree(&repo, &[(FILE, b"file", subtree)]);
    expect_refused(write(&repo, file_of_a_tree, &sandbox), "`file` is listed as a file, but its object is a tree");
    let link_of_a_tree = raw_tree(&repo, &[(SYMLINK, b"link", subtree)]);
    expect_refused(write(&repo, link_of_a_tree, &sandbox), "`link` is listed as a symlink, but its object is a tree");
    sandbox.assert_nothing_outside();
}

#[test]
fn symlink_targets_that_are_not_plain_text_are_refused() {
    for (target, why) in [(&b""[..], "is empty"), (b"a\0b", "NUL"), (b"\xff", "not UTF-8"), (b"a\nb", "control")] {
        let sandbox = Sandbox::new();
        let repo = scratch_repo(&sandbox);
        let link = blob(&repo, target);
        let tree = raw_tree(&repo, &[(SYMLINK, b"link.yaml", link)]);
        let message = expect_refused(write(&repo, tree, &sandbox), "`link.yaml` is a symlink whose target");
        assert!(message.contains(why), "{message}");
    }
}

// === Depth and length ===

#[test]
fn a_tree_nested_deeper_than_the_limit_is_refused() {
    let sandbox = Sandbox::new();
    let repo = scratch_repo(&sandbox);
    let mut tree = raw_tree(&repo, &[(FILE, b"deep.yaml", blob(&repo, b"x: 1\n"))]);
    for _ in 0..70 {
        tree = raw_tree(&repo, &[(DIRECTORY, b"d", tree)]);
    }
    expect_refused(write(&repo, tree, &sandbox), "directories deep");
    assert!(sandbox.written().is_empty());
}

#[test]
fn a_path_longer_than_the_limit_is_refused() {
    let sandbox = Sandbox::new();
    let repo = scratch_repo(&sandbox);
    let name = vec![b'n'; 250];
    let mut tree = raw_tree(&repo, &[(FILE, b"f.yaml", blob(&repo, b"x: 1\n"))]);
    for _ in 0..5 {
        tree = raw_tree(&repo, &[(DIRECTORY, &name, tree)]);
    }
    expect_refused(write(&repo, tree, &sandbox), "is longer than 1024 bytes");
    assert!(sandbox.written().is_empty());
}

// === The write itself never follows a link ===

#[test]
fn a_symlink_already_in_the_snapshot_directory_is_never_written_through() {
    let sandbox = Sandbox::new();
    let repo = scratch_repo(&sandbox);
    std::fs::create_dir(sandbox.snap()).unwrap();
    // Something put there behind the plan's back: the write must refuse, not follow.
    std::os::unix::fs::symlink(sandbox.sentinel().join("file"), sandbox.snap().join("file")).unwrap();
    std::os::unix::fs::symlink(sandbox.sentinel(), sandbox.snap().join("dir")).unwrap();
    let content = blob(&repo, b"x: 1\n");
    let file = raw_tree(&repo, &[(FILE, b"file", content)]);
    expect_refused(write(&repo, file, &sandbox), "`file` already exists");
    let inner = raw_tree(&repo, &[(FILE, b"pwned", content)]);
    let dir = raw_tree(&repo, &[(DIRECTORY, b"dir", inner)]);
    expect_refused(write(&repo, dir, &sandbox), "`dir` already exists");
    sandbox.assert_nothing_outside();
}

#[test]
fn symlinks_are_written_as_links_whatever_they_point_at() {
    let sandbox = Sandbox::new();
    let repo = scratch_repo(&sandbox);
    let outside = blob(&repo, sandbox.sentinel().join("keep").to_str().unwrap().as_bytes());
    let relative = blob(&repo, b"../../sentinel/keep");
    let content = blob(&repo, b"x: 1\n");
    let tree = raw_tree(
        &repo,
        &[
            (SYMLINK, b"absolute.yaml", outside),
            (SYMLINK, b"relative.yaml", relative),
            (EXECUTABLE, b"run.sh", content),
        ],
    );
    write(&repo, tree, &sandbox).unwrap();
    assert_eq!(sandbox.written(), ["absolute.yaml", "relative.yaml", "run.sh"]);
    for link in ["absolute.yaml", "relative.yaml"] {
        assert!(std::fs::symlink_metadata(sandbox.snap().join(link)).unwrap().file_type().is_symlink());
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(sandbox.snap().join("run.sh")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o111, 0, "nothing in a snapshot is executable");
    sandbox.assert_nothing_outside();
}

// === Any tree at all ===

fn arbitrary_entry() -> impl Strategy<Value = (usize, usize, usize)> {
    // (mode, name, object) as indexes into the tables below.
    (0..7usize, 0..12usize, 0..4usize)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Raw trees of arbitrary hostile entries: written or refused, never a byte outside.
    #[test]
    fn arbitrary_hostile_trees_never_write_outside_the_snapshot(
        top in prop::collection::vec(arbitrary_entry(), 0..8),
        inner in prop::collection::vec(arbitrary_entry(), 0..6),
    ) {
        let sandbox = Sandbox::new();
        let repo = scratch_repo(&sandbox);
        let modes = [FILE, EXECUTABLE, DIRECTORY, SYMLINK, "160000", "100664", "140000"];
        let names: [&[u8]; 12] =
            [b"x", b"x", b"y.yaml", b"..", b".", b".git", b"a/b", b"sentinel", b"\xff", b"snap", b"y.yaml", b"z"];
        let leaf = raw_tree(&repo, &[(FILE, b"pwned", blob(&repo, b"pwned\n"))]);
        let sentinel = sandbox.sentinel();
        let objects = [
            blob(&repo, b"x: 1\n"),
            blob(&repo, sentinel.to_str().unwrap().as_bytes()),
            blob(&repo, b"../sentinel"),
            leaf,
        ];
        let build = |entries: &[(usize, usize, usize)], child: Option<Oid>| {
            let entries: Vec<Entry<'_>> = entries
                .iter()
                .map(|&(m, n, o)| {
                    let object = if modes[m] == DIRECTORY { child.unwrap_or(leaf) } else { objects[o] };
                    (modes[m], names[n], object)
                })
                .collect();
            raw_tree(&repo, &entries)
        };
        let child = build(&inner, None);
        let tree = build(&top, Some(child));
        let _ = write(&repo, tree, &sandbox);
        sandbox.assert_nothing_outside();
    }
}

// === What an ordinary tree looks like after all this ===

#[test]
fn a_fetched_tree_with_only_safe_entries_is_written_whole() {
    let served = Served::start();
    let sha = push_raw_commit(&served.repo, |r| {
        let settings = blob(r, CONFIG_MAP.as_bytes());
        let link = blob(r, b"settings.yaml");
        let deploy = raw_tree(r, &[(FILE, b"app.yaml", settings)]);
        raw_tree(r, &[(DIRECTORY, b"deploy", deploy), (FILE, b"settings.yaml", settings), (SYMLINK, b"z.yaml", link)])
    });
    let snapshot = match served.fetch(&limits()).unwrap() {
        Fetched::Updated(snapshot) => snapshot,
        other => panic!("{other:?}"),
    };
    assert_eq!(snapshot.revision, sha);
    assert_eq!(read(&snapshot, "deploy/app.yaml"), CONFIG_MAP);
    assert_eq!(read(&snapshot, "z.yaml"), CONFIG_MAP);
}
