//! Bare repositories standing in for tenant repositories, driven with the git CLI.

use std::path::{Path, PathBuf};

use super::{TestDir, git, test_dir};

/// A set of bare repositories under one root directory (the directory every server of the harness
/// serves), each with a working clone the test commits and pushes from. Created by the user
/// running the tests, so git's and libgit2's ownership checks pass.
pub struct Upstream {
    dir: TestDir,
}

impl Upstream {
    /// An empty set of repositories in a new temporary directory.
    pub fn new() -> Self {
        let dir = test_dir();
        std::fs::create_dir_all(dir.path().join("repos")).expect("create repos dir");
        std::fs::create_dir_all(dir.path().join("work")).expect("create work dir");
        Upstream { dir }
    }

    /// The directory holding the bare repositories: the root the servers serve.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("repos")
    }

    /// Creates the empty bare repository `root()/name` (HEAD on `main`) and its working clone.
    /// `name` is used as given, e.g. `"app.git"` or `"group/app.git"`.
    pub fn create(&self, name: &str) -> UpstreamRepo {
        let bare = self.root().join(name);
        std::fs::create_dir_all(&bare).expect("create bare repo dir");
        git(&bare, &["init", "--quiet", "--bare", "--initial-branch=main"]);
        let work = self.dir.path().join("work").join(name);
        std::fs::create_dir_all(work.parent().expect("work parent")).expect("create work parent");
        git(self.dir.path(), &["clone", "--quiet", &bare.to_string_lossy(), &work.to_string_lossy()]);
        git(&work, &["symbolic-ref", "HEAD", "refs/heads/main"]);
        UpstreamRepo { name: name.to_string(), bare, work }
    }

    /// The repository `name` created earlier with [`Upstream::create`].
    pub fn repo(&self, name: &str) -> UpstreamRepo {
        let bare = self.root().join(name);
        assert!(bare.is_dir(), "no upstream repository {name}");
        UpstreamRepo { name: name.to_string(), bare, work: self.dir.path().join("work").join(name) }
    }
}

impl Default for Upstream {
    fn default() -> Self {
        Self::new()
    }
}

/// One bare repository of an [`Upstream`] and its working clone. Commits happen in the working
/// clone on its current branch (`main` at first) and reach the bare repository only when pushed.
/// Every method panics with git's stderr when git fails. Valid while its `Upstream` lives.
#[derive(Clone, Debug)]
pub struct UpstreamRepo {
    name: String,
    bare: PathBuf,
    work: PathBuf,
}

impl UpstreamRepo {
    /// The name given to [`Upstream::create`], relative to the served root.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The absolute path of the bare repository.
    pub fn bare_path(&self) -> &Path {
        &self.bare
    }

    /// The absolute path of the working clone.
    pub fn work_path(&self) -> &Path {
        &self.work
    }

    /// `file:///abs/path/of/the/bare/repo`.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.bare.display())
    }

    /// Writes `files` (path relative to the repository root, content), creating parent
    /// directories, and commits everything changed in the working clone with `message` on the
    /// current branch, even when nothing changed. Returns the full sha of the new commit.
    pub fn commit<C: AsRef<[u8]>>(&self, files: &[(&str, C)], message: &str) -> String {
        for (path, content) in files {
            let target = self.work.join(path);
            std::fs::create_dir_all(target.parent().expect("file parent")).expect("create file parent");
            std::fs::write(&target, content).expect("write file");
        }
        self.commit_all(message)
    }

    /// [`commit`](Self::commit), then pushes the current branch. Returns the commit's sha.
    pub fn commit_and_push<C: AsRef<[u8]>>(&self, files: &[(&str, C)], message: &str) -> String {
        let sha = self.commit(files, message);
        self.push(&self.current_branch());
        sha
    }

    /// Removes `path` (a file or directory) and commits with `message`. Returns the commit's sha.
    pub fn remove_file(&self, path: &str, message: &str) -> String {
        git(&self.work, &["rm", "-r", "--quiet", "--", path]);
        self.commit_all(message)
    }

    /// Commits a new file of `bytes` random, incompressible bytes under `large/` (a different
    /// file with different content on every call, deterministic across runs). Returns the sha.
    pub fn commit_large_random(&self, bytes: usize) -> String {
        let dir = self.work.join("large");
        std::fs::create_dir_all(&dir).expect("create large/");
        let index = std::fs::read_dir(&dir).expect("read large/").count();
        let mut random = SplitMix64(0x5eed_0000 + index as u64);
        let mut content = Vec::with_capacity(bytes + 8);
        while content.len() < bytes {
            content.extend_from_slice(&random.next().to_le_bytes());
        }
        content.truncate(bytes);
        std::fs::write(dir.join(format!("random-{index}.bin")), content).expect("write random file");
        self.commit_all(&format!("{bytes} random bytes"))
    }

    /// Switches the working clone to `branch`, creating it from the current commit if it does
    /// not exist yet.
    pub fn checkout(&self, branch: &str) {
        let exists = git(&self.work, &["branch", "--list", branch]);
        if exists.is_empty() {
            git(&self.work, &["checkout", "--quiet", "-b", branch]);
        } else {
            git(&self.work, &["checkout", "--quiet", branch]);
        }
    }

    /// The branch checked out in the working clone.
    pub fn current_branch(&self) -> String {
        git(&self.work, &["symbolic-ref", "--short", "HEAD"])
    }

    /// Pushes the working clone's `branch` to the bare repository (fast-forward only).
    pub fn push(&self, branch: &str) {
        git(&self.work, &["push", "--quiet", "origin", &format!("refs/heads/{branch}:refs/heads/{branch}")]);
    }

    /// Rewrites the tip of `branch` (amends its last commit with a new message, so the old tip is
    /// no longer an ancestor) and force-pushes it. Returns the new tip's sha.
    pub fn force_push_rewritten_history(&self, branch: &str) -> String {
        let previous = self.current_branch();
        self.checkout(branch);
        let message = git(&self.work, &["log", "-1", "--format=%B"]);
        git(&self.work, &["commit", "--quiet", "--amend", "--allow-empty", "-m", &format!("{message}\n\n(rewritten)")]);
        let sha = git(&self.work, &["rev-parse", "HEAD"]);
        git(&self.work, &["push", "--quiet", "--force", "origin", &format!("refs/heads/{branch}:refs/heads/{branch}")]);
        self.checkout(&previous);
        sha
    }

    /// Deletes `branch` from the bare repository, and from the working clone unless checked out.
    pub fn delete_branch(&self, branch: &str) {
        git(&self.work, &["push", "--quiet", "origin", "--delete", branch]);
        if self.current_branch() != branch {
            git(&self.work, &["branch", "--quiet", "-D", branch]);
        }
    }

    /// Creates the lightweight tag `name` on the working clone's current commit and pushes it.
    /// Returns the tagged commit's sha.
    pub fn tag(&self, name: &str) -> String {
        git(&self.work, &["tag", name]);
        git(&self.work, &["push", "--quiet", "origin", &format!("refs/tags/{name}")]);
        git(&self.work, &["rev-parse", "HEAD"])
    }

    /// Creates the annotated tag `name` on the current commit and pushes it. Returns the tagged
    /// commit's sha (not the tag object's).
    pub fn tag_annotated(&self, name: &str, message: &str) -> String {
        git(&self.work, &["tag", "-a", name, "-m", message]);
        git(&self.work, &["push", "--quiet", "origin", &format!("refs/tags/{name}")]);
        git(&self.work, &["rev-parse", "HEAD"])
    }

    /// The sha `refs/heads/<branch>` points to in the bare repository, if the branch exists.
    pub fn head(&self, branch: &str) -> Option<String> {
        let output = super::git_command()
            .current_dir(&self.bare)
            .args(["rev-parse", "--verify", "--quiet", &format!("refs/heads/{branch}^{{commit}}")])
            .output()
            .expect("run git rev-parse");
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// Points the bare repository's HEAD (its default branch) at `branch`.
    pub fn set_default_branch(&self, branch: &str) {
        git(&self.bare, &["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")]);
    }

    fn commit_all(&self, message: &str) -> String {
        git(&self.work, &["add", "--all"]);
        git(&self.work, &["commit", "--quiet", "--allow-empty", "-m", message]);
        git(&self.work, &["rev-parse", "HEAD"])
    }
}

/// SplitMix64: a fast deterministic generator; its output does not compress, which is all the
/// large-repository cases need.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
