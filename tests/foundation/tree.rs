//! Reading a tenant tree from disk: order, skipped files, symlinks and limits.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use cdtarget::manifests::{Limits, read_tree};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("cdtarget-tree-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("repo")).unwrap();
        Scratch(dir)
    }

    fn repo(&self) -> PathBuf {
        self.0.join("repo")
    }

    fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.repo().join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn paths(root: &Path, limits: &Limits) -> Vec<String> {
    read_tree(root, limits).unwrap().into_iter().map(|f| f.path).collect()
}

#[test]
fn yaml_files_are_read_in_sorted_order_and_others_skipped() {
    let scratch = Scratch::new("order");
    scratch.write("b.yaml", "a: 1\n");
    scratch.write("a/z.yml", "a: 1\n");
    scratch.write("a/c.yaml", "a: 1\n");
    scratch.write("README.md", "# no\n");
    scratch.write("script.sh", "echo\n");
    scratch.write(".gitlab-ci.yml", "stages: []\n");
    scratch.write(".hidden/x.yaml", "a: 1\n");
    assert_eq!(paths(&scratch.repo(), &Limits::default()), ["a/c.yaml", "a/z.yml", "b.yaml"]);
}

#[test]
fn symlink_to_a_file_inside_the_tree_is_read() {
    let scratch = Scratch::new("inside");
    let target = scratch.write("real.yaml", "a: 1\n");
    symlink(&target, scratch.repo().join("link.yaml")).unwrap();
    assert_eq!(paths(&scratch.repo(), &Limits::default()), ["link.yaml", "real.yaml"]);
}

#[test]
fn symlink_leaving_the_tree_is_refused() {
    let scratch = Scratch::new("outside");
    let secret = scratch.0.join("outside.yaml");
    fs::write(&secret, "stolen: true\n").unwrap();
    symlink(&secret, scratch.repo().join("escape.yaml")).unwrap();
    symlink("/etc", scratch.repo().join("etc")).unwrap();
    let problems = read_tree(&scratch.repo(), &Limits::default()).unwrap_err();
    let files: Vec<&str> = problems.iter().map(|p| p.file.as_deref().unwrap()).collect();
    assert_eq!(files, ["escape.yaml", "etc"]);
    assert!(problems[0].message.contains("leaves the repository"), "{}", problems[0].message);
    assert!(problems[1].message.contains("symlinked directories are not followed"), "{}", problems[1].message);
}

#[test]
fn file_and_total_size_limits_are_enforced() {
    let scratch = Scratch::new("limits");
    scratch.write("a.yaml", &"a: 1\n".repeat(100));
    scratch.write("b.yaml", &"a: 1\n".repeat(100));
    let per_file =
        read_tree(&scratch.repo(), &Limits { max_file_bytes: 100, max_total_bytes: 1 << 20, ..Limits::default() })
            .unwrap_err();
    assert_eq!(per_file.len(), 2);
    assert!(per_file[0].message.contains("files of at most 100 bytes"), "{}", per_file[0].message);
    let total =
        read_tree(&scratch.repo(), &Limits { max_file_bytes: 1 << 20, max_total_bytes: 700, ..Limits::default() })
            .unwrap_err();
    assert_eq!(total.len(), 1);
    assert_eq!(total[0].file.as_deref(), Some("b.yaml"));
}

#[test]
fn a_missing_directory_is_a_clear_error() {
    let problems = read_tree(Path::new("/nonexistent/cdtarget"), &Limits::default()).unwrap_err();
    assert!(problems[0].message.contains("cannot read directory"), "{}", problems[0].message);
}
