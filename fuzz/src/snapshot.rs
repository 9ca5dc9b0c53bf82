//! `snapshot_writer`: arbitrary Git trees → the snapshot writer
//! (`cdtarget::source::snapshot::write_tree`) → the manifests reader over what it wrote.
//!
//! The input describes raw tree objects, written byte for byte to an in-memory object database
//! (so nothing deduplicates or sorts them as `TreeBuilder` would): entries of any mode (blob,
//! executable, symlink, tree, submodule commit, or an odd one), names from a list of hostile
//! ones (`..`, `.git`, `a/b`, duplicates) or arbitrary, symlink targets that point beside or
//! above the snapshot. Tree `i` may hold trees `0..i`; the last is the root.
//!
//! Invariants: no panic; nothing outside `sandbox/snap` is created, changed or removed (sentinel
//! files beside it, and the directories above it, are listed before and after without
//! following links); reading the written snapshot with the manifests reader never returns the
//! text of a file outside it.
//!
//! Safety of the harness itself, against a writer that does follow links: names never start
//! with `/`, every name and link target climbs at most two levels, and the sandbox sits
//! [`DEPTH`] directories below a temporary directory, so even a fully broken writer cannot
//! reach anything but that temporary directory (removed afterwards, without following links).

use std::fs;
use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use cdtarget::manifests;
use cdtarget::source::Limits;
use cdtarget::source::snapshot::write_tree;
use git2::{ObjectType, Odb, Oid, Repository};

/// Directories between the temporary directory and the sandbox: more than any input can climb
/// ([`MAX_ENTRIES`] entries, each name or link climbing at most two levels).
const DEPTH: usize = 4 * MAX_ENTRIES + 8;
/// Most tree entries (over all trees) taken from one input.
const MAX_ENTRIES: usize = 16;
/// Most trees taken from one input.
const MAX_TREES: usize = 8;
/// Text of the files beside the snapshot; a read that returns it read outside.
const SENTINEL: &str = "sentinel-outside-the-snapshot";

/// Names a hostile tree holds. None starts with `/`; none climbs more than two levels.
const NAMES: &[&str] = &[
    "a",
    "x",
    "x.yaml",
    "app.yaml",
    ".",
    "..",
    "...",
    ".git",
    ".GIT",
    ".git ",
    "",
    "a/b",
    "../outside",
    "../../up",
    "x/../../outside",
    "outside",
    "secret.yaml",
    "kustomization.yaml",
];

/// Symlink targets, relative to the link or (`{outside}`) absolute into the sandbox.
const TARGETS: &[&str] = &[
    "../outside",
    "../../outside",
    "{outside}",
    "{outside}/secret.yaml",
    "../outside/secret.yaml",
    "..",
    ".",
    "a",
    "x",
    "x.yaml",
    "../snap",
    "x/../..",
    "{outside}/dir",
];

/// File contents.
const BLOBS: &[&str] =
    &["apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "[url \"file:///\"]\n\tinsteadOf = https://\n", ""];

/// The trees the fuzzer describes.
#[derive(Arbitrary, Debug)]
pub struct Forest {
    trees: Vec<Vec<EntrySpec>>,
}

#[derive(Arbitrary, Debug)]
struct EntrySpec {
    mode: Mode,
    name: Name,
    content: Content,
}

#[derive(Arbitrary, Clone, Copy, Debug)]
enum Mode {
    Blob,
    Executable,
    Symlink,
    Tree,
    Commit,
    Odd(u32),
}

#[derive(Arbitrary, Debug)]
enum Name {
    Listed(u8),
    Arbitrary(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Content {
    Listed(u8),
    Arbitrary(Vec<u8>),
}

/// The fuzz target.
pub fn check(data: &[u8]) {
    let Ok(forest) = Forest::arbitrary_take_rest(Unstructured::new(data)) else { return };
    // Memory-backed when the machine has it: thousands of directories per second on a disk
    // wait for the disk, not for the writer.
    let shm = Path::new("/dev/shm");
    let base =
        if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.expect("a temporary directory");
    let sandbox = (0..DEPTH).fold(base.path().to_path_buf(), |p, _| p.join("d")).join("sandbox");
    let outside = sandbox.join("outside");
    let snap = sandbox.join("snap");
    fs::create_dir_all(outside.join("dir")).expect("sandbox");
    fs::create_dir_all(&snap).expect("snapshot directory");
    fs::write(outside.join("secret.yaml"), format!("kind: Secret # {SENTINEL}\n")).expect("sentinel");
    fs::write(sandbox.join("beside.yaml"), format!("# {SENTINEL}\n")).expect("sentinel");
    fs::write(base.path().join("top.yaml"), format!("# {SENTINEL}\n")).expect("sentinel");
    let before = listing(base.path(), &snap);

    let odb = Odb::new().expect("an object database");
    odb.add_new_mempack_backend(1).expect("an in-memory backend");
    let repo = Repository::from_odb(odb).expect("a repository over it");
    if let Some(root) = build(&repo, &forest, &outside)
        && let Ok(tree) = repo.find_tree(root)
    {
        let limits = Limits { max_tree_bytes: 1 << 20, ..Limits::default() };
        let _ = write_tree(&repo, &tree, &snap, &limits);
    }

    let after = listing(base.path(), &snap);
    if before != after {
        let now: Vec<_> = after.iter().filter(|e| !before.contains(e)).collect();
        let was: Vec<_> = before.iter().filter(|e| !after.contains(e)).collect();
        panic!("the writer changed something outside the snapshot directory: now {now:?}, was {was:?}");
    }
    if let Ok(files) = manifests::read_tree(&snap, &manifests::Limits::default()) {
        for file in files {
            assert!(!file.text.contains(SENTINEL), "reading the snapshot read `{}` from outside it", file.path);
        }
    }
}

/// Writes the described trees; returns the root's id.
fn build(repo: &Repository, forest: &Forest, outside: &Path) -> Option<Oid> {
    let odb = repo.odb().ok()?;
    let mut trees: Vec<Oid> = Vec::new();
    let mut entries_left = MAX_ENTRIES;
    for spec in forest.trees.iter().take(MAX_TREES) {
        let mut raw = Vec::new();
        for entry in spec.iter().take(entries_left) {
            entries_left -= 1;
            let (mode, id) = match entry.mode {
                Mode::Tree => {
                    let id = match (&entry.content, trees.is_empty()) {
                        (_, true) => odb.write(ObjectType::Tree, b"").ok()?,
                        (Content::Listed(i), false) => trees[usize::from(*i) % trees.len()],
                        (Content::Arbitrary(bytes), false) => trees[bytes.len() % trees.len()],
                    };
                    ("40000".to_owned(), id)
                }
                Mode::Symlink => {
                    ("120000".to_owned(), odb.write(ObjectType::Blob, &link_target(&entry.content, outside)).ok()?)
                }
                Mode::Commit => {
                    let mut sha = [7u8; 20];
                    if let Content::Arbitrary(bytes) = &entry.content {
                        sha.iter_mut().zip(bytes).for_each(|(s, b)| *s = *b);
                    }
                    ("160000".to_owned(), Oid::from_bytes(&sha).ok()?)
                }
                Mode::Blob | Mode::Executable | Mode::Odd(_) => {
                    let mode = match entry.mode {
                        Mode::Blob => "100644".to_owned(),
                        Mode::Executable => "100755".to_owned(),
                        Mode::Odd(bits) => format!("{:o}", bits % 0o200000),
                        _ => unreachable!("matched above"),
                    };
                    let content = match &entry.content {
                        Content::Listed(i) => BLOBS[usize::from(*i) % BLOBS.len()].as_bytes().to_vec(),
                        Content::Arbitrary(bytes) => bytes.clone(),
                    };
                    (mode, odb.write(ObjectType::Blob, &content).ok()?)
                }
            };
            raw.extend_from_slice(mode.as_bytes());
            raw.push(b' ');
            raw.extend_from_slice(&name(&entry.name));
            raw.push(0);
            raw.extend_from_slice(id.as_bytes());
        }
        trees.push(odb.write(ObjectType::Tree, &raw).ok()?);
    }
    trees.last().copied()
}

/// An entry name: listed, or arbitrary bytes as one component (no `/`, no NUL).
fn name(name: &Name) -> Vec<u8> {
    match name {
        Name::Listed(i) => NAMES[usize::from(*i) % NAMES.len()].as_bytes().to_vec(),
        Name::Arbitrary(bytes) => bytes.iter().map(|b| if matches!(b, b'/' | 0) { b'_' } else { *b }).collect(),
    }
}

/// A symlink target: listed, or arbitrary bytes as one relative component (at most `..`).
fn link_target(content: &Content, outside: &Path) -> Vec<u8> {
    match content {
        Content::Listed(i) => {
            let target = TARGETS[usize::from(*i) % TARGETS.len()];
            target.replace("{outside}", &outside.display().to_string()).into_bytes()
        }
        Content::Arbitrary(bytes) => bytes.iter().map(|b| if matches!(b, b'/' | 0) { b'_' } else { *b }).collect(),
    }
}

/// Everything under `root` except `skip`, without following links: path, type, and the
/// contents of files and links.
fn listing(root: &Path, skip: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            if path == skip {
                continue;
            }
            let Ok(meta) = fs::symlink_metadata(&path) else { continue };
            let what = if meta.file_type().is_symlink() {
                format!("link to {:?}", fs::read_link(&path).ok())
            } else if meta.is_dir() {
                pending.push(path.clone());
                "dir".to_owned()
            } else {
                let text = fs::read(&path).map(|b| String::from_utf8_lossy(&b).into_owned()).ok();
                format!("file {text:?} mode {:o}", std::os::unix::fs::PermissionsExt::mode(&meta.permissions()))
            };
            // Shown from the sandbox (`…/sandbox/outside/secret.yaml`), not through 72 levels.
            let shown = match path.strip_prefix(skip.parent().unwrap_or(root)) {
                Ok(inside) => Path::new("…/sandbox").join(inside),
                Err(_) => path.strip_prefix(root).unwrap_or(&path).to_path_buf(),
            };
            found.push((shown, what));
        }
    }
    found
}
