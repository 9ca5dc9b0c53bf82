//! Reading a snapshot never leaves it: `spec.path` is checked component by component, and the
//! manifests reader resolves every symlink beneath its root without the kernel following
//! anything, and never into `.git`. The secrets here stand for another tenant's snapshot beside
//! this one, and for the CI job token in a checkout's `.git/config`.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use cdtarget::manifests::{Limits as TreeLimits, read_and_load, read_tree};
use cdtarget::policy::Policy;
use cdtarget::problem::Problem;
use cdtarget::source::{Credentials, FailureKind, Snapshot};

use super::common::{self, GitDaemon, TestDir};
use super::hostile_trees::{blob, push_raw_commit, raw_tree};
use super::{CONFIG_MAP, fetch_updated, request};

const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: other-tenants-secret\n";

/// `repo/` (the tree read) and `other-tenant/secret.yaml` beside it.
struct Disk {
    dir: TestDir,
}

impl Disk {
    fn new() -> Self {
        let dir = common::test_dir();
        std::fs::create_dir_all(dir.path().join("repo")).unwrap();
        std::fs::create_dir_all(dir.path().join("other-tenant")).unwrap();
        std::fs::write(dir.path().join("other-tenant/secret.yaml"), SECRET).unwrap();
        Disk { dir }
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("other-tenant")
    }

    fn file(&self, relative: &str, text: &str) {
        let path = self.repo().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn link(&self, relative: &str, target: impl AsRef<Path>) {
        let path = self.repo().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot { revision: "0123456789abcdef0123456789abcdef01234567".into(), root: self.repo() }
    }
}

fn problems(root: &Path) -> Vec<Problem> {
    read_tree(root, &TreeLimits::default()).expect_err("the tree must be refused")
}

fn assert_refused(problems: &[Problem], file: &str, says: &str) {
    let found = problems.iter().find(|p| p.file.as_deref() == Some(file));
    let problem = found.unwrap_or_else(|| panic!("no problem for {file}: {problems:?}"));
    assert!(problem.message.contains(says), "{file}: {}", problem.message);
    for problem in problems {
        assert!(!problem.message.contains("other-tenants-secret"), "nothing of the secret is shown");
    }
}

// === spec.path ===

#[test]
fn spec_path_through_a_symlink_at_any_depth_is_refused_naming_the_component() {
    let disk = Disk::new();
    disk.file("real/deploy/app.yaml", CONFIG_MAP);
    disk.link("escape", disk.outside());
    disk.link("inner-link", "real");
    disk.link("real/deploy/hop", "../../../other-tenant");
    let snapshot = disk.snapshot();
    for (path, component) in
        [("escape", "`escape`"), ("inner-link/deploy", "`inner-link`"), ("real/deploy/hop", "`real/deploy/hop`")]
    {
        let error = snapshot.dir(Some(path)).unwrap_err();
        assert_eq!(error.kind, FailureKind::InvalidRequest, "{path}");
        assert!(error.message.contains(&format!("{component} is a symlink")), "{path}: {}", error.message);
    }
    assert_eq!(snapshot.dir(Some("real/./deploy/")).unwrap(), disk.repo().join("real/deploy"));
}

#[test]
fn spec_path_that_is_absolute_climbs_or_is_odd_is_refused_before_touching_the_disk() {
    let disk = Disk::new();
    let snapshot = disk.snapshot();
    for (path, says) in [
        ("../other-tenant", "no `..`"),
        ("real/../../other-tenant", "no `..`"),
        ("/etc", "not absolute"),
        ("a\0b", "NUL"),
        ("a\nb", "control character"),
    ] {
        let error = snapshot.dir(Some(path)).unwrap_err();
        assert_eq!(error.kind, FailureKind::InvalidRequest, "{path}");
        assert!(error.message.contains(says), "{path}: {}", error.message);
        assert!(!error.message.contains('\n'), "the path is escaped in the message: {}", error.message);
    }
    let long = "a/".repeat(600);
    assert!(snapshot.dir(Some(&long)).unwrap_err().message.contains("longer than 1024 bytes"));
}

#[test]
fn spec_path_naming_a_file_or_nothing_is_refused() {
    let disk = Disk::new();
    disk.file("file.yaml", CONFIG_MAP);
    let snapshot = disk.snapshot();
    assert!(snapshot.dir(Some("file.yaml")).unwrap_err().message.contains("`file.yaml` is a file"));
    assert!(snapshot.dir(Some("missing/deeper")).unwrap_err().message.contains("`missing` does not exist"));
}

#[test]
fn a_pushed_symlink_named_by_spec_path_is_refused_with_the_revision() {
    let (upstream, repo) = super::tenant_repo();
    let daemon = GitDaemon::start(&upstream.root());
    let cache = common::test_dir();
    let disk = Disk::new();
    push_raw_commit(&repo, |r| {
        let link = blob(r, disk.outside().to_str().unwrap().as_bytes());
        let settings = blob(r, CONFIG_MAP.as_bytes());
        raw_tree(r, &[("120000", b"deploy", link), ("100644", b"settings.yaml", settings)])
    });
    let snapshot = fetch_updated(cache.path(), &request(&daemon.url("tenant.git"), Credentials::None));
    let error = snapshot.dir(Some("deploy")).unwrap_err();
    assert!(error.message.contains("`deploy` is a symlink"), "{}", error.message);
    assert!(error.message.contains(&snapshot.revision), "{}", error.message);
}

// === Links the reader resolves ===

#[test]
fn a_link_chain_that_climbs_out_through_an_inner_link_is_refused() {
    let disk = Disk::new();
    disk.file("ok.yaml", CONFIG_MAP);
    disk.link("a/first.yaml", "../b/second.yaml");
    disk.link("b/second.yaml", "../../other-tenant/secret.yaml");
    assert_refused(&problems(&disk.repo()), "a/first.yaml", "leaves the repository");
}

#[test]
fn a_link_through_a_symlinked_directory_that_leaves_the_tree_is_refused() {
    let disk = Disk::new();
    disk.link("dirlink", disk.outside());
    disk.link("via.yaml", "dirlink/secret.yaml");
    disk.link("relative-dirlink", "../other-tenant");
    disk.link("via-relative.yaml", "relative-dirlink/secret.yaml");
    let found = problems(&disk.repo());
    assert_refused(&found, "via.yaml", "leaves the repository");
    assert_refused(&found, "via-relative.yaml", "leaves the repository");
    assert_refused(&found, "dirlink", "leaves the repository");
}

#[test]
fn an_absolute_link_that_only_looks_inside_is_resolved_beneath_the_root() {
    let disk = Disk::new();
    // Starts with the root's path, then climbs out of it.
    disk.link("sneaky.yaml", disk.repo().join("../other-tenant/secret.yaml"));
    disk.link("inside.yaml", disk.repo().join("real.yaml"));
    disk.file("real.yaml", CONFIG_MAP);
    let found = problems(&disk.repo());
    assert_refused(&found, "sneaky.yaml", "leaves the repository");
    assert!(found.iter().all(|p| p.file.as_deref() != Some("inside.yaml")), "{found:?}");
}

#[test]
fn links_inside_the_tree_through_inner_directory_links_are_read() {
    let disk = Disk::new();
    disk.file("sub/real.yaml", CONFIG_MAP);
    // Hidden, so the walk skips it; links may still pass through it.
    disk.link(".subdir", "sub");
    disk.link("through.yaml", ".subdir/./real.yaml");
    disk.link("nested/back.yaml", "../sub/real.yaml");
    let files = read_tree(&disk.repo(), &TreeLimits::default()).unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["nested/back.yaml", "sub/real.yaml", "through.yaml"]);
    assert!(files.iter().all(|f| f.text == CONFIG_MAP));
}

#[test]
fn link_loops_and_links_to_directories_are_refused_not_followed() {
    let disk = Disk::new();
    disk.link("a.yaml", "b.yaml");
    disk.link("b.yaml", "a.yaml");
    disk.link("self.yaml", "self.yaml");
    disk.file("sub/x.yaml", CONFIG_MAP);
    disk.link("dir.yaml", "sub");
    disk.link("up", "..");
    let found = problems(&disk.repo());
    assert_refused(&found, "a.yaml", "does not resolve within 40 links");
    assert_refused(&found, "self.yaml", "does not resolve within 40 links");
    assert_refused(&found, "dir.yaml", "symlink to a directory");
    assert_refused(&found, "up", "leaves the repository");
}

#[test]
fn the_read_root_is_spec_path_so_links_to_the_rest_of_the_repository_are_refused() {
    let disk = Disk::new();
    disk.file("secrets/db.yaml", SECRET);
    disk.link("deploy/db.yaml", "../secrets/db.yaml");
    assert_refused(&problems(&disk.repo().join("deploy")), "db.yaml", "leaves the repository");
}

#[test]
fn special_files_are_never_opened() {
    let disk = Disk::new();
    disk.file("ok.yaml", CONFIG_MAP);
    // A FIFO would block a reader that opened it.
    let fifo = disk.repo().join("fifo.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("SKIP special_files_are_never_opened: mkfifo is not available");
        return;
    }
    disk.link("to-fifo.yaml", "fifo.yaml");
    let found = problems(&disk.repo());
    assert_refused(&found, "to-fifo.yaml", "something other than a file");
    assert!(found.iter().all(|p| p.file.as_deref() != Some("fifo.yaml")), "a FIFO itself is skipped: {found:?}");
}

// === .git: skipped when it is the checkout's own, refused when anything points into it ===

/// The CI job token a runner writes into a checkout's `.git/config`.
const TOKEN: &str = "glcbt-FAKE-JOB-TOKEN";

/// A checkout: `.git/config` with the job token in the remote URL, and one plain ConfigMap.
fn checkout() -> Disk {
    let disk = Disk::new();
    disk.file(
        ".git/config",
        &format!("[remote \"origin\"]\n\turl = https://gitlab-ci-token:{TOKEN}@gitlab.example/t.git\n"),
    );
    disk.file(".git/HEAD", "ref: refs/heads/main\n");
    disk.file("settings.yaml", CONFIG_MAP);
    disk
}

fn assert_no_token(problems: &[Problem]) {
    assert!(!format!("{problems:?}").contains(TOKEN), "the token must never be shown: {problems:?}");
}

#[test]
fn a_checkouts_own_git_directory_is_skipped_silently() {
    let disk = checkout();
    let files = read_tree(&disk.repo(), &TreeLimits::default()).unwrap();
    assert_eq!(files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["settings.yaml"]);
    let set = read_and_load(&disk.repo(), "", &TreeLimits::default(), "team-a", &Policy::default()).unwrap();
    assert_eq!(set.documents.len(), 1);
}

#[test]
fn links_into_git_are_refused_by_the_tree_walk_in_any_case_and_however_they_get_there() {
    let disk = checkout();
    disk.link("token.yaml", ".git/config");
    disk.link("upper.yaml", ".GIT/config");
    disk.link("mixed.yaml", "./.Git/config");
    disk.link("dotdot.yaml", "sub/../.git/config");
    disk.link("sub/up.yaml", "../.git/config");
    disk.link("absolute.yaml", disk.repo().join(".git/config"));
    disk.link("chain.yaml", "token.yaml");
    disk.link("gitdir", ".git");
    disk.link("through.yaml", "gitdir/config");
    // Not YAML, so never read as a document; still a link into `.git`.
    disk.link("config.txt", ".git/config");
    let found = problems(&disk.repo());
    for file in [
        "token.yaml",
        "upper.yaml",
        "mixed.yaml",
        "dotdot.yaml",
        "sub/up.yaml",
        "absolute.yaml",
        "chain.yaml",
        "gitdir",
        "through.yaml",
        "config.txt",
    ] {
        assert_refused(&found, file, "is a symlink into `.git`, which is never read");
    }
    assert!(found.iter().all(|p| p.message.contains("point it at a file outside `.git`")), "{found:?}");
    assert_no_token(&found);
}

/// What a build of `kustomization` at the root of a checkout (with `links` made first) refuses.
fn build_refused(kustomization: &str, links: &[(&str, &str)]) -> Vec<Problem> {
    let disk = checkout();
    disk.file("kustomization.yaml", kustomization);
    for (link, target) in links {
        disk.link(link, target);
    }
    let loaded = read_and_load(&disk.repo(), "", &TreeLimits::default(), "team-a", &Policy::default());
    let found = loaded.expect_err("a build reading `.git` must be refused");
    assert_no_token(&found);
    found
}

fn assert_located(found: &[Problem], field: &str, says: &str) {
    let problem = found.iter().find(|p| p.field == field).unwrap_or_else(|| panic!("nothing at {field}: {found:?}"));
    assert_eq!(problem.file.as_deref(), Some("kustomization.yaml"), "{problem:?}");
    assert!(problem.message.contains(says), "{field}: {}", problem.message);
    assert!(problem.message.contains("outside `.git`"), "says what is accepted: {}", problem.message);
}

#[test]
fn a_generator_never_reads_git_by_path_or_through_a_link() {
    let generator = "configMapGenerator:\n- name: leak\n  files:\n  - x=.git/config\n  - y=sub/../.GIT/config\n  - link\n  - gitdir/config\n";
    let found = build_refused(generator, &[("link", ".git/config"), ("gitdir", ".Git/../.git")]);
    assert_located(&found, "configMapGenerator[0].files[0]", "passes through `.git`");
    assert_located(&found, "configMapGenerator[0].files[1]", "passes through `.git`");
    assert_located(&found, "configMapGenerator[0].files[2]", "symlink into `.git`");
    assert_located(&found, "configMapGenerator[0].files[3]", "symlink into `.git`");
    let envs = build_refused("secretGenerator:\n- name: leak\n  envs:\n  - .Git/config\n", &[]);
    assert_located(&envs, "secretGenerator[0].envs[0]", "passes through `.git`");
}

#[test]
fn a_resource_or_patch_never_reads_git_by_path_or_through_a_link() {
    for (kustomization, links, field, says) in [
        ("resources:\n- .GIT/x.yaml\n", &[][..], "resources[0]", "passes through `.git`"),
        ("resources:\n- base/../.git/config\n", &[], "resources[0]", "passes through `.git`"),
        (
            "resources:\n- leak.yaml\n",
            &[("leak.yaml", "./.Git/../.git/config")][..],
            "resources[0]",
            "symlink into `.git`",
        ),
        ("resources:\n- gitdir\n", &[("gitdir", ".git")], "resources[0]", "symlink into `.git`"),
        ("patches:\n- path: .git/config\n", &[], "patches[0].path", "passes through `.git`"),
        ("patches:\n- path: patch.yaml\n", &[("patch.yaml", ".git/config")], "patches[0].path", "symlink into `.git`"),
    ] {
        let found = build_refused(kustomization, links);
        assert_located(&found, field, says);
    }
}

#[test]
fn a_synced_directory_inside_git_is_refused() {
    let disk = checkout();
    disk.file(".git/x/cm.yaml", CONFIG_MAP);
    let found = read_and_load(&disk.repo(), ".git/x", &TreeLimits::default(), "team-a", &Policy::default())
        .expect_err("`.git` is never read");
    assert_eq!(found[0].file.as_deref(), Some(".git/x"));
    assert!(found[0].message.contains("passes through `.git`"), "{found:?}");
}
