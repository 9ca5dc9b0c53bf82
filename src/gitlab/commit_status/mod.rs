//! What a tenant sees on GitLab about a revision cdtarget evaluated: a commit status (`pending`
//! when fetched, then `success` or `failed`) and, for a refused revision, one commit comment
//! listing every problem. Pure decisions over what was remembered in `status.gitlab`
//! ([`pending`], [`verdict`], [`refusal_comment`]); [`post`] carries them out through the
//! client, one SHA at a time, and says what to remember next.
//!
//! GitLab's traps (contract §14): a finished record is never updated (a POST makes a new record
//! and retries the old one), an unchanged `pending` is refused with 400, descriptions over 255
//! characters are refused, and lines of a note starting with `/` run as quick actions with the
//! bot's rights. So nothing is posted twice for the same SHA, ref, name and state; descriptions
//! are cut; notes are fenced and every line that could be a command is escaped.

use std::collections::BTreeMap;
use std::fmt;

pub(crate) mod text;

use self::text::{MAX_NOTE_CHARS, MAX_STATUS_FIELD_CHARS, acceptable_target_url, cut_chars, single_line};
use super::client::{CommentPosted, CommitState, GitLabClient, StatusParams, StatusPosted};
use super::error::{ErrorKind, GitLabError};
use crate::api::tenant_repository::PostedCommitStatus;
use crate::problem::Problem;
use crate::text::redact_userinfo;
use crate::text::short_revision;

/// The default status name: one per registration, so that two registrations of one repository
/// never update each other's record.
pub const DEFAULT_STATUS_NAME: &str = "cdtarget:{namespace}/{name}";

/// The placeholders of `--gitlab-status-name` and `--gitlab-status-target-url`.
pub(crate) const PLACEHOLDERS: &[&str] = &["namespace", "name", "targetNamespace", "revision", "shortRevision"];

/// How commit statuses are posted (`--gitlab-status-name`, `--gitlab-status-target-url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSettings {
    /// The status name template, e.g. [`DEFAULT_STATUS_NAME`].
    pub name: String,
    /// The target URL template, e.g. `https://dash.example.com/{namespace}/{name}?rev={revision}`.
    pub target_url: Option<String>,
}

impl Default for StatusSettings {
    fn default() -> Self {
        StatusSettings { name: DEFAULT_STATUS_NAME.to_owned(), target_url: None }
    }
}

impl StatusSettings {
    /// Settings from the flags, checked: known placeholders only, a name that cannot expand to
    /// blank, and a target URL that is http(s) once expanded with sample values.
    pub fn new(name: &str, target_url: Option<&str>) -> Result<StatusSettings, String> {
        check_placeholders("--gitlab-status-name", name)?;
        let sample = Vars {
            namespace: "cdtarget-system",
            name: "team-a",
            target_namespace: "team-a",
            revision: "0123456789abcdef0123456789abcdef01234567",
        };
        if sample.expand(name).trim().is_empty() || name.chars().any(char::is_control) {
            return Err("--gitlab-status-name must not be blank or hold line breaks".into());
        }
        let target_url = target_url.map(str::trim).filter(|t| !t.is_empty());
        if let Some(template) = target_url {
            check_placeholders("--gitlab-status-target-url", template)?;
            if acceptable_target_url(&sample.expand_url(template)).is_none() {
                return Err(format!(
                    "--gitlab-status-target-url `{template}` is not an http(s) URL without credentials of at most 255 characters once expanded"
                ));
            }
        }
        Ok(StatusSettings { name: name.trim().to_owned(), target_url: target_url.map(str::to_owned) })
    }
}

fn check_placeholders(flag: &str, template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let Some(end) = rest[start..].find('}') else {
            return Err(format!("{flag} `{template}`: an unclosed `{{`"));
        };
        let name = &rest[start + 1..start + end];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "{flag} `{template}`: unknown placeholder `{{{name}}}`; known: {}",
                PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect::<Vec<_>>().join(", ")
            ));
        }
        rest = &rest[start + end + 1..];
    }
    Ok(())
}

/// The values of the placeholders for one registration and revision.
#[derive(Clone, Copy, Debug)]
pub struct Vars<'a> {
    /// The registration's namespace.
    pub namespace: &'a str,
    /// The registration's name.
    pub name: &'a str,
    /// `spec.targetNamespace`.
    pub target_namespace: &'a str,
    /// The full SHA.
    pub revision: &'a str,
}

impl Vars<'_> {
    fn pairs(&self) -> [(&'static str, &str); 5] {
        [
            ("namespace", self.namespace),
            ("name", self.name),
            ("targetNamespace", self.target_namespace),
            ("revision", self.revision),
            ("shortRevision", short_revision(self.revision)),
        ]
    }

    /// `template` with every placeholder replaced by its value.
    pub fn expand(&self, template: &str) -> String {
        self.pairs().iter().fold(template.to_owned(), |text, (key, value)| text.replace(&format!("{{{key}}}"), value))
    }

    /// Like [`Vars::expand`], values percent-encoded (they are Kubernetes names and hex, so
    /// this only matters if that ever changes).
    pub fn expand_url(&self, template: &str) -> String {
        self.pairs().iter().fold(template.to_owned(), |text, (key, value)| {
            let encoded: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
            text.replace(&format!("{{{key}}}"), &encoded)
        })
    }
}

/// Where a status goes and what it is called, for one evaluated revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The full SHA.
    pub sha: String,
    /// The branch or tag the registration follows; `None` for one pinned to a commit.
    pub git_ref: Option<String>,
    /// The expanded status name.
    pub name: String,
    /// The expanded target URL, when configured and acceptable.
    pub target_url: Option<String>,
    /// `namespace/name` of the registration: the comment's marker.
    pub registration: String,
    /// `spec.targetNamespace`, for the texts.
    pub target_namespace: String,
}

impl Target {
    /// The target of `settings` for one registration and revision.
    pub fn new(settings: &StatusSettings, vars: Vars<'_>, git_ref: Option<String>) -> Target {
        Target {
            sha: vars.revision.to_owned(),
            git_ref,
            name: vars.expand(&settings.name),
            target_url: settings.target_url.as_deref().and_then(|t| acceptable_target_url(&vars.expand_url(t))),
            registration: format!("{}/{}", vars.namespace, vars.name),
            target_namespace: vars.target_namespace.to_owned(),
        }
    }

    fn params(&self, state: CommitState, description: String, pipeline_id: Option<i64>) -> StatusParams {
        StatusParams {
            sha: self.sha.clone(),
            git_ref: self.git_ref.clone(),
            name: self.name.clone(),
            state,
            description,
            target_url: self.target_url.clone(),
            pipeline_id,
        }
    }

    /// Whether `posted` is a record of this SHA, ref and name.
    fn same_record(&self, posted: &PostedCommitStatus) -> bool {
        posted.sha == self.sha && posted.git_ref == self.git_ref && posted.name == self.name
    }
}

/// What the controller concluded about a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied: `success` with this description.
    Applied(String),
    /// Refused (validation, or objects the API server refused): `failed` with the first
    /// problem, and one comment with all of them.
    Refused(Vec<Problem>),
    /// Not applied for another reason a person must fix: `failed` with this description.
    Failed(String),
}

/// What is remembered in `status.gitlab` between reconciles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remembered {
    /// The last status posted.
    pub commit_status: Option<PostedCommitStatus>,
    /// The last revision whose refusal was commented.
    pub commented_sha: Option<String>,
}

/// One thing to do on GitLab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Post a status.
    Status(StatusParams),
    /// Comment on the commit unless a comment holding `marker` is there already.
    Comment {
        /// The commit.
        sha: String,
        /// The hidden line that finds the comment again (commit comments have no id).
        marker: String,
        /// The whole note.
        note: String,
    },
}

/// Before the apply: `pending` on a revision not reported yet, else nothing (an unchanged
/// `pending` is refused by GitLab, a finished record is never reopened for the same SHA).
pub fn pending(remembered: &Remembered, target: &Target) -> Option<Step> {
    if remembered.commit_status.as_ref().is_some_and(|posted| target.same_record(posted)) {
        return None;
    }
    let description = format!("cdtarget fetched this revision and is applying it into {}", target.target_namespace);
    Some(Step::Status(target.params(CommitState::Pending, description, None)))
}

/// After the apply: the final status unless that very state is already posted for this SHA,
/// ref and name (a re-post would add a record), in the pipeline of the first answer; and the
/// refusal comment once per SHA.
pub fn verdict(remembered: &Remembered, target: &Target, outcome: &Outcome) -> Vec<Step> {
    let (state, description) = match outcome {
        Outcome::Applied(message) => (CommitState::Success, message.clone()),
        Outcome::Refused(problems) => {
            let first = problems.first().map(problem_line).unwrap_or_else(|| "the revision was refused".into());
            let more = match problems.len() {
                0 | 1 => String::new(),
                n => format!(" (and {} more, see the commit comment)", n - 1),
            };
            (CommitState::Failed, format!("{first}{more}"))
        }
        Outcome::Failed(message) => (CommitState::Failed, message.clone()),
    };
    let mut steps = Vec::new();
    let posted = remembered.commit_status.as_ref().filter(|posted| target.same_record(posted));
    if posted.is_none_or(|posted| posted.state != state.as_str()) {
        let description = cut_description(&description);
        steps.push(Step::Status(target.params(state, description, posted.and_then(|p| p.pipeline_id))));
    }
    if let Outcome::Refused(problems) = outcome
        && remembered.commented_sha.as_deref() != Some(target.sha.as_str())
    {
        let marker = marker(target);
        steps.push(Step::Comment { sha: target.sha.clone(), note: refusal_comment(target, &marker, problems), marker });
    }
    steps
}

/// `description` as GitLab takes it: URL userinfo redacted, one line, at most 255 characters,
/// an ellipsis when cut.
pub(crate) fn cut_description(description: &str) -> String {
    let line = single_line(&redact_userinfo(description));
    let line = line.trim();
    if line.chars().count() <= MAX_STATUS_FIELD_CHARS {
        return line.to_owned();
    }
    format!("{}…", cut_chars(line, MAX_STATUS_FIELD_CHARS - 1))
}

/// The hidden line that marks the refusal comment of a registration on a revision.
pub fn marker(target: &Target) -> String {
    format!("<!-- cdtarget:{} refused {} -->", target.registration, target.sha)
}

/// `path/file.yaml:LINE (document N): field: message`, leaving out what is unknown, on one
/// line (line breaks and control characters shown as `\n`, `\u{…}`), URL userinfo redacted.
pub(crate) fn problem_line(problem: &Problem) -> String {
    let mut line = String::new();
    if let Some(file) = &problem.file {
        line.push_str(file);
        if let Some(number) = problem.line {
            line.push_str(&format!(":{number}"));
        }
        if let Some(document) = problem.document {
            line.push_str(&format!(" (document {document})"));
        }
        line.push_str(": ");
    }
    if !problem.field.is_empty() {
        line.push_str(&problem.field);
        line.push_str(": ");
    }
    line.push_str(&problem.message);
    escape_controls(&redact_userinfo(&line))
}

fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                out.push_str(&c.escape_unicode().to_string())
            }
            c => out.push(c),
        }
    }
    out
}

/// The refusal comment: the marker, a sentence, every problem on its own line in a code fence
/// longer than any run of backticks in them, within GitLab's 1,000,000 characters, with every
/// line that could be a quick action escaped ([`neutralise_quick_actions`]).
pub(crate) fn refusal_comment(target: &Target, marker: &str, problems: &[Problem]) -> String {
    let lines: Vec<String> = problems.iter().map(problem_line).collect();
    let longest_run = lines.iter().map(|l| longest_backtick_run(l)).max().unwrap_or(0);
    let fence = "`".repeat((longest_run + 1).max(3));
    let count = match problems.len() {
        1 => "1 problem".to_owned(),
        n => format!("{n} problems"),
    };
    let short = short_revision(&target.sha);
    let head = format!(
        "{marker}\n**cdtarget** refused revision `{short}` for namespace `{}` ({count}); nothing of it was applied and what runs stays as it was. Push a fix.\n\n{fence}text\n",
        target.target_namespace
    );
    let tail = format!("{fence}\n");
    // Room for the head, the tail and the "more" line, in characters.
    let budget = MAX_NOTE_CHARS - head.chars().count() - tail.chars().count() - 200;
    let mut body = String::new();
    let mut used = 0;
    let mut shown = 0;
    for line in &lines {
        let length = line.chars().count() + 1;
        if used + length > budget {
            break;
        }
        body.push_str(line);
        body.push('\n');
        used += length;
        shown += 1;
    }
    if shown < lines.len() {
        body.push_str(&format!(
            "... and {} more problems, not shown (GitLab keeps notes under 1,000,000 characters)\n",
            lines.len() - shown
        ));
    }
    neutralise_quick_actions(&format!("{head}{body}{tail}"))
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// Every line whose first non-blank character is `/` gets a `\` before it, so GitLab never reads
/// it as a quick action (`/merge`, `/assign @x`, `/tag`), in a code block or not.
pub(crate) fn neutralise_quick_actions(note: &str) -> String {
    note.split('\n')
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with('/') {
                let indent = &line[..line.len() - trimmed.len()];
                format!("{indent}\\{trimmed}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What [`post`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Posted {
    /// What to remember now (the input's, updated by every step that went through).
    pub remembered: Remembered,
    /// Writing requests sent (statuses and comments).
    pub writes: usize,
    /// The first failure; the steps after it were not tried.
    pub error: Option<GitLabError>,
    /// Warnings to report (e.g. a comment GitLab read as commands only).
    pub notes: Vec<String>,
}

impl fmt::Display for Posted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.remembered.commit_status {
            Some(status) => write!(
                f,
                "commit status `{}` named `{}` on {}{}",
                status.state,
                status.name,
                short_revision(&status.sha),
                status.git_ref.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
            )?,
            None => f.write_str("no commit status posted yet")?,
        }
        if self.remembered.commented_sha.is_some() {
            f.write_str("; refusal commented")?;
        }
        Ok(())
    }
}

/// Carries out `steps` in order on project `project_id`, stopping at the first failure: a
/// status that is "already there" is read back for its pipeline; a comment is posted only when
/// listing the commit's comments finds no `marker`.
pub async fn post(client: &GitLabClient, project_id: i64, remembered: &Remembered, steps: &[Step]) -> Posted {
    let mut done = Posted { remembered: remembered.clone(), ..Posted::default() };
    for step in steps {
        let result = match step {
            Step::Status(params) => post_status(client, project_id, params, &mut done).await,
            Step::Comment { sha, marker, note } => post_comment(client, project_id, sha, marker, note, &mut done).await,
        };
        if let Err(error) = result {
            done.error = Some(error);
            break;
        }
    }
    done
}

async fn post_status(
    client: &GitLabClient,
    project_id: i64,
    params: &StatusParams,
    done: &mut Posted,
) -> Result<(), GitLabError> {
    done.writes += 1;
    let pipeline_id = match client.set_commit_status(project_id, params).await? {
        StatusPosted::Stored(stored) => stored.pipeline_id.or(params.pipeline_id),
        StatusPosted::AlreadyThere => {
            // The open record is ours already (a previous attempt whose answer was lost): its
            // pipeline, read back by full SHA and name, pins the posts that follow.
            let records =
                client.commit_statuses(project_id, &params.sha, &params.name, params.git_ref.as_deref()).await?;
            records
                .iter()
                .filter(|r| matches!(r.status.as_str(), "pending" | "running" | "created"))
                .max_by_key(|r| r.id)
                .and_then(|r| r.pipeline_id)
                .or(params.pipeline_id)
        }
    };
    done.remembered.commit_status = Some(PostedCommitStatus {
        sha: params.sha.clone(),
        git_ref: params.git_ref.clone(),
        name: params.name.clone(),
        state: params.state.as_str().to_owned(),
        pipeline_id,
    });
    Ok(())
}

async fn post_comment(
    client: &GitLabClient,
    project_id: i64,
    sha: &str,
    marker: &str,
    note: &str,
    done: &mut Posted,
) -> Result<(), GitLabError> {
    let existing = client.commit_comments(project_id, sha).await?;
    if !existing.iter().any(|comment| comment.note.contains(marker)) {
        done.writes += 1;
        if client.comment_on_commit(project_id, sha, note).await? == CommentPosted::CommandsOnly {
            // Never posted again: each attempt would run the commands once more.
            done.notes.push("GitLab read the refusal comment as quick actions only (202) and stored nothing".into());
        }
    }
    done.remembered.commented_sha = Some(sha.to_owned());
    Ok(())
}

/// Counts of steps by kind, for logs: `{"status": 1, "comment": 1}`.
pub fn summary(steps: &[Step]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for step in steps {
        *counts.entry(if matches!(step, Step::Status(_)) { "status" } else { "comment" }).or_default() += 1;
    }
    counts
}

/// The error for a registration whose status cannot be posted at all (no project path).
pub fn unusable(message: impl Into<String>) -> GitLabError {
    GitLabError::new(ErrorKind::InvalidConfig, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
    const OTHER: &str = "fedcba9876543210fedcba9876543210fedcba98";

    fn target(sha: &str) -> Target {
        let settings = StatusSettings::new(
            DEFAULT_STATUS_NAME,
            Some("https://dash.example.com/{namespace}/{name}?rev={revision}"),
        )
        .unwrap();
        let vars = Vars { namespace: "cdtarget-system", name: "team-a", target_namespace: "team-a", revision: sha };
        Target::new(&settings, vars, Some("main".into()))
    }

    fn posted(sha: &str, state: &str) -> Remembered {
        Remembered {
            commit_status: Some(PostedCommitStatus {
                sha: sha.into(),
                git_ref: Some("main".into()),
                name: "cdtarget:cdtarget-system/team-a".into(),
                state: state.into(),
                pipeline_id: Some(7),
            }),
            commented_sha: None,
        }
    }

    fn status_of(step: &Step) -> &StatusParams {
        match step {
            Step::Status(params) => params,
            other => panic!("not a status: {other:?}"),
        }
    }

    fn problem(file: &str, line: usize, field: &str, message: &str) -> Problem {
        Problem::field(field, message).located(file, Some(1), Some(line))
    }

    #[test]
    fn a_new_revision_gets_pending_with_our_name_ref_and_target_url() {
        let step = pending(&posted(OTHER, "success"), &target(SHA)).expect("pending");
        let params = status_of(&step);
        assert_eq!(params.state, CommitState::Pending);
        assert_eq!(
            (params.name.as_str(), params.git_ref.as_deref()),
            ("cdtarget:cdtarget-system/team-a", Some("main"))
        );
        assert_eq!(
            params.target_url.as_deref(),
            Some(format!("https://dash.example.com/cdtarget-system/team-a?rev={SHA}").as_str())
        );
        assert_eq!(params.pipeline_id, None, "a new SHA: GitLab chooses the pipeline");
    }

    #[test]
    fn a_revision_already_reported_gets_no_pending_again() {
        for state in ["pending", "running", "success", "failed"] {
            assert_eq!(pending(&posted(SHA, state), &target(SHA)), None, "{state}");
        }
    }

    #[test]
    fn the_verdict_lands_in_the_pending_pipeline_and_is_never_posted_twice() {
        let outcome = Outcome::Applied("applied 3 objects".into());
        let steps = verdict(&posted(SHA, "pending"), &target(SHA), &outcome);
        let params = status_of(&steps[0]);
        assert_eq!((params.state, params.pipeline_id), (CommitState::Success, Some(7)));
        assert!(verdict(&posted(SHA, "success"), &target(SHA), &outcome).is_empty(), "finished: nothing new");
        // A changed verdict on the same SHA (RBAC fixed, same revision) is a new record, once.
        let steps = verdict(&posted(SHA, "failed"), &target(SHA), &outcome);
        assert_eq!(status_of(&steps[0]).state, CommitState::Success);
    }

    #[test]
    fn a_refusal_fails_with_the_first_problem_and_comments_once_per_sha() {
        let problems = vec![
            problem("deploy/a.yaml", 3, "spec.ip[0]", "10.0.0.300 is not an IPv4 address"),
            problem("deploy/b.yaml", 12, "kind", "Secret is not allowed"),
        ];
        let outcome = Outcome::Refused(problems);
        let steps = verdict(&posted(SHA, "pending"), &target(SHA), &outcome);
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert_eq!(
            status_of(&steps[0]).description,
            "deploy/a.yaml:3 (document 1): spec.ip[0]: 10.0.0.300 is not an IPv4 address (and 1 more, see the commit comment)"
        );
        let Step::Comment { note, marker, .. } = &steps[1] else { panic!("{steps:?}") };
        assert!(note.starts_with(marker.as_str()) && marker.contains(SHA), "{note}");
        assert!(note.contains("deploy/b.yaml:12 (document 1): kind: Secret is not allowed\n"), "{note}");
        let mut remembered = posted(SHA, "failed");
        remembered.commented_sha = Some(SHA.into());
        assert!(verdict(&remembered, &target(SHA), &outcome).is_empty(), "commented and failed: nothing");
    }

    #[test]
    fn descriptions_are_cut_to_255_characters_not_bytes() {
        let long = "é".repeat(300);
        let cut = cut_description(&long);
        assert_eq!(cut.chars().count(), 255);
        assert!(cut.ends_with('…') && cut.len() > 255, "multibyte characters count once");
        assert_eq!(cut_description("two\nlines"), "two lines");
        let body = StatusParams {
            sha: SHA.into(),
            git_ref: Some("main".into()),
            name: "n".into(),
            state: CommitState::Failed,
            description: "ü".repeat(400),
            target_url: Some("javascript:alert(1)".into()),
            pipeline_id: None,
        }
        .body();
        assert_eq!(body["description"].as_str().unwrap().chars().count(), 255);
        assert!(body.get("target_url").is_none(), "only http(s) target URLs are sent");
    }

    #[test]
    fn hostile_problems_cannot_run_quick_actions_or_break_the_fence() {
        let problems = vec![
            Problem::field("/merge", "x").located("deploy/a.yaml", Some(1), Some(1)),
            Problem::field("", "ok\n/assign @mallory\n```\n/close").located("deploy/```.yaml", Some(2), Some(5)),
            Problem::field("/label ~x", "no file"),
        ];
        let note = refusal_comment(&target(SHA), &marker(&target(SHA)), &problems);
        for line in note.lines() {
            assert!(!line.trim_start().starts_with('/'), "a line could be a quick action: {line:?}\n{note}");
        }
        assert!(note.contains("\\n/assign @mallory\\n```\\n/close"), "line breaks shown, not kept: {note}");
        let fence = note.lines().find(|l| l.starts_with("````")).expect("a fence longer than the backticks inside");
        assert_eq!(fence, "````text");
        assert!(note.trim_end().ends_with("````"), "{note}");
        assert!(note.contains("\\/label ~x: no file"), "{note}");
    }

    #[test]
    fn url_credentials_never_reach_gitlab() {
        let problem = Problem::field("spec.url", "cannot reach https://bot:glpat-secret@git.example.com/x.git")
            .located("deploy/a.yaml", Some(1), Some(1));
        let steps = verdict(&Remembered::default(), &target(SHA), &Outcome::Refused(vec![problem]));
        let Step::Comment { note, .. } = &steps[1] else { panic!("{steps:?}") };
        let description = &status_of(&steps[0]).description;
        for text in [note, description] {
            assert!(!text.contains("glpat-secret") && text.contains("https://***@git.example.com"), "{text}");
        }
        let failed = verdict(&Remembered::default(), &target(SHA), &Outcome::Failed("as https://u:p@h/x".into()));
        assert_eq!(status_of(&failed[0]).description, "as https://***@h/x");
    }

    #[test]
    fn a_huge_refusal_stays_under_a_million_characters() {
        let problems: Vec<Problem> =
            (0..20_000).map(|n| problem("deploy/a.yaml", n, "data.key", &"x".repeat(100))).collect();
        let note = refusal_comment(&target(SHA), "<!-- m -->", &problems);
        assert!(note.chars().count() <= MAX_NOTE_CHARS, "{}", note.chars().count());
        assert!(note.contains("more problems, not shown"), "the cut is said");
    }

    #[test]
    fn settings_are_checked_at_start() {
        assert!(StatusSettings::new("cdtarget", None).is_ok());
        let error = StatusSettings::new("cd-{nope}", None).unwrap_err();
        assert!(error.contains("unknown placeholder `{nope}`"), "{error}");
        assert!(StatusSettings::new("{namespace}", Some("ftp://x/{name}")).unwrap_err().contains("http(s)"));
        assert!(StatusSettings::new("n", Some("https://bot:secret@x.example/{name}")).is_err(), "no credentials");
        let long = format!("https://x.example/{}", "a".repeat(300));
        assert!(StatusSettings::new("n", Some(&long)).is_err());
        assert!(StatusSettings::new("  ", None).is_err());
    }

    #[test]
    fn a_target_url_too_long_once_expanded_is_left_out() {
        let settings =
            StatusSettings::new("n", Some(&format!("https://x.example/{}/{{name}}", "a".repeat(200)))).unwrap();
        let name = "b".repeat(100);
        let vars = Vars { namespace: "ns", name: &name, target_namespace: "t", revision: SHA };
        assert_eq!(Target::new(&settings, vars, None).target_url, None);
    }
}
