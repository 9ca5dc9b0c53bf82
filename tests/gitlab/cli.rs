//! `cdtarget gitlab-sync`: the built binary against the fake GitLab.

use std::path::PathBuf;
use std::process::{Command, Output};

use cdtarget::api::tenant_repository::webhook_path;

use super::common::fake_gitlab::{BOT_TOKEN, FakeGitLab, Fault};
use super::common::{TestDir, test_dir};
use super::{HOOK_TOKEN, pair};

const EXTERNAL: &str = "https://cd.example.com";

/// The files an onboarding script has at hand.
struct Files {
    dir: TestDir,
    public_key: String,
}

impl Files {
    fn new() -> Files {
        let dir = test_dir();
        let pair = pair();
        let registration = "apiVersion: cdtarget.io/v1alpha1\nkind: TenantRepository\nmetadata:\n  name: app\n  namespace: platform\nspec:\n  url: ssh://git@gitlab.example.com/team-a/app.git\n  ref:\n    branch: main\n  targetNamespace: team-a\n  serviceAccountName: deployer\n  gitlab: {}\n";
        std::fs::write(dir.path().join("registration.yaml"), registration).unwrap();
        std::fs::write(dir.path().join("token"), format!("{BOT_TOKEN}\n")).unwrap();
        std::fs::write(dir.path().join("identity.pub"), format!("{}\n", pair.public_openssh)).unwrap();
        std::fs::write(dir.path().join("webhook-token"), format!("{HOOK_TOKEN}\n")).unwrap();
        Files { dir, public_key: pair.public_openssh }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn gitlab_sync(fake: &FakeGitLab, files: &Files, extra: &[&str]) -> Output {
    let arg = |p: PathBuf| p.to_str().unwrap().to_owned();
    Command::new(env!("CARGO_BIN_EXE_cdtarget"))
        .arg("gitlab-sync")
        .args(["--registration", &arg(files.path("registration.yaml"))])
        .args(["--gitlab-url", &fake.url()])
        .args(["--token-file", &arg(files.path("token"))])
        .args(["--ssh-public-key", &arg(files.path("identity.pub"))])
        .args(["--webhook-token-file", &arg(files.path("webhook-token"))])
        .args(["--webhook-external-url", EXTERNAL])
        .args(extra)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    let files = Files::new();
    let out = gitlab_sync(&fake, &files, &["--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("dry run, nothing sent but reads:\n"), "{stdout}");
    assert!(stdout.contains(&format!("POST   /projects/{id}/deploy_keys title=\"cdtarget:platform/app\"")), "{stdout}");
    // The hook goes to the receiver; its path is as secret as the token, so it is not printed.
    let external = EXTERNAL.trim_end_matches('/');
    assert!(stdout.contains(&format!("POST   /projects/{id}/hooks url={external}/hook/*** token=***")), "{stdout}");
    assert!(!stdout.contains(&webhook_path(HOOK_TOKEN, "app", "platform")), "{stdout}");
    assert!(stdout.contains("token=***") && !stdout.contains(HOOK_TOKEN) && !stdout.contains(BOT_TOKEN), "{stdout}");
    let counts = fake.counts();
    assert_eq!((counts.method("GET"), counts.writes()), (3, 0), "{:?}", fake.log());
    assert!(fake.deploy_keys(id).is_empty() && fake.hooks(id).is_empty());
}

#[test]
fn sync_then_in_sync_then_delete() {
    let fake = FakeGitLab::start();
    let id = fake.add_project("team-a/app");
    let files = Files::new();

    let out = gitlab_sync(&fake, &files, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let keys = fake.deploy_keys(id);
    let hooks = fake.hooks(id);
    assert_eq!((keys.len(), hooks.len()), (1, 1));
    assert_eq!(keys[0].key, files.public_key.trim());
    let stdout = text(&out.stdout);
    let summary = format!(
        "synced: deploy key {} (read-only) and webhook {} on project team-a/app (id {id}); 2 changes\n",
        keys[0].id, hooks[0].id
    );
    assert!(stdout.ends_with(&summary), "{stdout}");

    let again = gitlab_sync(&fake, &files, &[]);
    assert!(text(&again.stdout).contains("in sync, nothing to do"), "{}", text(&again.stdout));
    assert!(text(&again.stdout).ends_with("no change\n"));

    let dry_delete = gitlab_sync(&fake, &files, &["--delete", "--dry-run"]);
    assert!(text(&dry_delete.stdout).contains(&format!("DELETE /projects/{id}/hooks/{}", hooks[0].id)));
    assert_eq!(fake.hooks(id).len(), 1);

    let deleted = gitlab_sync(&fake, &files, &["--delete"]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    assert!(
        text(&deleted.stdout)
            .ends_with("removed: nothing of cdtarget:platform/app left on project team-a/app (2 removals sent)\n")
    );
    assert!(fake.deploy_keys(id).is_empty() && fake.hooks(id).is_empty());
}

#[test]
fn gitlab_errors_exit_1_with_the_reason_and_never_the_token() {
    let fake = FakeGitLab::start();
    fake.add_project("team-a/app");
    let files = Files::new();
    std::fs::write(files.path("token"), "glpat-not-a-known-token\n").unwrap();
    let out = gitlab_sync(&fake, &files, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("cdtarget gitlab-sync: GitLabUnauthorized: "), "{stderr}");
    assert!(!stderr.contains("glpat-not-a-known-token"), "{stderr}");

    std::fs::write(files.path("token"), BOT_TOKEN).unwrap();
    fake.inject(None, None, Fault::ServerError, 100);
    let out = gitlab_sync(&fake, &files, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("GitLabUnavailable"), "{}", text(&out.stderr));
}

#[test]
fn bad_files_exit_2_naming_the_flag() {
    let fake = FakeGitLab::start();
    let files = Files::new();
    std::fs::write(files.path("identity.pub"), "not a key\n").unwrap();
    let out = gitlab_sync(&fake, &files, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("`identity.pub`"), "{}", text(&out.stderr));

    let files = Files::new();
    std::fs::write(files.path("registration.yaml"), "kind: CDTarget\n").unwrap();
    let out = gitlab_sync(&fake, &files, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("expected a TenantRepository"), "{}", text(&out.stderr));

    let files = Files::new();
    std::fs::write(files.path("webhook-token"), "").unwrap();
    let out = gitlab_sync(&fake, &files, &[]);
    assert!(
        text(&out.stderr).contains("--webhook-token-file") && text(&out.stderr).contains("is empty"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fake.counts().total(), 0, "nothing is sent with bad inputs");
}

#[test]
fn missing_flags_are_usage_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_cdtarget")).args(["gitlab-sync", "--dry-run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--registration"), "{}", text(&out.stderr));
}
