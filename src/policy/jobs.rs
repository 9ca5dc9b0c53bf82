//! The policy's agent modes (`agents.modes`), the settings of agents run as Jobs
//! (`agents.jobs`) and the KEDA the children are rendered for (`keda`): checked, with every
//! problem named by its field.

use crate::api::AgentMode;
use crate::api::keda::KedaVersion;
use crate::api::policy::{JobsDocument, KedaDocument, ModesDocument, RunOnceDocument};
use crate::problem::Problems;

/// The longest `agents.jobs.activeDeadlineSeconds` accepted: a week.
pub const MAX_ACTIVE_DEADLINE_SECONDS: i64 = 7 * 24 * 3600;
/// The most Jobs a history limit may keep.
pub const MAX_JOBS_HISTORY: i64 = 100;
/// The longest `keda.pollingIntervalSeconds` accepted: an hour.
pub const MAX_POLLING_INTERVAL_SECONDS: i64 = 3600;
/// The most `agents.jobs.runOnce` entries.
pub const MAX_RUN_ONCE_ENTRIES: usize = 64;
/// The longest run-once argument or variable value, in bytes.
const MAX_RUN_ONCE_TEXT: usize = 256;

/// The modes tenants may choose, and the one a CDTarget without `spec.mode` gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Modes {
    /// The mode of a CDTarget without `spec.mode` (always one of `allowed`).
    pub default: AgentMode,
    /// The modes a CDTarget may ask for, each once, in the order the policy lists them.
    pub allowed: Vec<AgentMode>,
}

impl Modes {
    /// The allowed modes as a message lists them: `Deployment, Job`.
    pub fn allowed_list(&self) -> String {
        self.allowed.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// Settings of the Jobs of a ScaledJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jobs {
    /// `activeDeadlineSeconds` of every Job.
    pub active_deadline_seconds: i64,
    /// Finished Jobs kept.
    pub successful_jobs_history_limit: i32,
    /// Failed Jobs kept.
    pub failed_jobs_history_limit: i32,
    /// How images run once, by prefix.
    pub run_once: Vec<RunOnce>,
}

impl Jobs {
    /// How `image` is made to run once: the entry with the longest prefix of `image`, if any.
    pub fn run_once_for(&self, image: &str) -> Option<&RunOnceConvention> {
        self.run_once
            .iter()
            .filter(|entry| image.starts_with(entry.image_prefix.as_str()))
            .max_by_key(|entry| entry.image_prefix.len())
            .map(|entry| &entry.convention)
    }

    /// The prefixes listed, quoted, for a message.
    pub fn prefixes(&self) -> String {
        self.run_once.iter().map(|entry| format!("`{}`", entry.image_prefix)).collect::<Vec<_>>().join(", ")
    }
}

/// The run-once convention of the images starting with `image_prefix`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOnce {
    /// The images it is for (`""` matches every image).
    pub image_prefix: String,
    /// What makes them run once.
    pub convention: RunOnceConvention,
}

/// What makes an agent image take one job and exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOnceConvention {
    /// A container argument (Microsoft's start.sh passes its arguments to run.sh: `--once`).
    Argument(String),
    /// An environment variable the image's entrypoint reads.
    Environment {
        /// Its name.
        name: String,
        /// Its value.
        value: String,
    },
    /// The image already runs once whatever it is given.
    BuiltIn,
}

/// The KEDA the children are rendered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KedaSettings {
    /// The release the admin pinned (`keda.version`), overriding the one the controller finds.
    pub version: Option<KedaVersion>,
    /// `pollingInterval` of every ScaledObject and ScaledJob.
    pub polling_interval_seconds: i32,
}

/// Checks `agents.modes`.
pub(crate) fn check_modes(document: &ModesDocument, problems: &mut Problems) -> Modes {
    let accepted = AgentMode::ALL.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ");
    let mut allowed = Vec::new();
    for (i, text) in document.allowed.iter().enumerate() {
        match AgentMode::parse(text) {
            Some(mode) if !allowed.contains(&mode) => allowed.push(mode),
            Some(_) => problems.push(format!("agents.modes.allowed[{i}]"), format!("`{text}` is listed twice")),
            None => problems.push(
                format!("agents.modes.allowed[{i}]"),
                format!("`{text}` is not an agent mode; expected one of {accepted}"),
            ),
        }
    }
    if document.allowed.is_empty() {
        problems.push("agents.modes.allowed", format!("must list at least one mode; expected some of {accepted}"));
    }
    let default = match AgentMode::parse(&document.default) {
        None => {
            problems.push(
                "agents.modes.default",
                format!("`{}` is not an agent mode; expected one of {accepted}", document.default),
            );
            AgentMode::Deployment
        }
        Some(mode) if !allowed.contains(&mode) && !allowed.is_empty() => {
            let listed = allowed.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ");
            problems.push(
                "agents.modes.default",
                format!(
                    "`{mode}` is not in agents.modes.allowed ({listed}); a CDTarget without spec.mode would get a mode it may not have; choose an allowed default or allow it"
                ),
            );
            mode
        }
        Some(mode) => mode,
    };
    Modes { default, allowed }
}

/// Checks `agents.jobs`.
pub(crate) fn check_jobs(document: &JobsDocument, problems: &mut Problems) -> Jobs {
    let deadline = document.active_deadline_seconds;
    if !(1..=MAX_ACTIVE_DEADLINE_SECONDS).contains(&deadline) {
        problems.push(
            "agents.jobs.activeDeadlineSeconds",
            format!(
                "{deadline} is out of range; expected seconds from 1 to {MAX_ACTIVE_DEADLINE_SECONDS} (a week), long enough for the longest pipeline job, e.g. 21600"
            ),
        );
    }
    let history = |field: &str, value: i64, problems: &mut Problems| {
        let checked = i32::try_from(value).ok().filter(|v| (0..=MAX_JOBS_HISTORY).contains(&i64::from(*v)));
        if checked.is_none() {
            problems.push(
                format!("agents.jobs.{field}"),
                format!("{value} is out of range; expected a number of Jobs from 0 to {MAX_JOBS_HISTORY}"),
            );
        }
        checked.unwrap_or(0)
    };
    let successful = history("successfulJobsHistoryLimit", document.successful_jobs_history_limit, problems);
    let failed = history("failedJobsHistoryLimit", document.failed_jobs_history_limit, problems);
    let mut run_once: Vec<RunOnce> = Vec::new();
    if document.run_once.len() > MAX_RUN_ONCE_ENTRIES {
        problems.push(
            "agents.jobs.runOnce",
            format!("has {} entries; at most {MAX_RUN_ONCE_ENTRIES} are accepted", document.run_once.len()),
        );
    } else {
        for (i, entry) in document.run_once.iter().enumerate() {
            let field = format!("agents.jobs.runOnce[{i}]");
            if let Some(checked) = check_run_once(entry, &field, problems) {
                if run_once.iter().any(|r| r.image_prefix == checked.image_prefix) {
                    problems.push(
                        format!("{field}.imagePrefix"),
                        format!(
                            "`{}` is listed twice; each prefix has one convention, keep one entry",
                            checked.image_prefix
                        ),
                    );
                } else {
                    run_once.push(checked);
                }
            }
        }
    }
    Jobs {
        active_deadline_seconds: deadline.clamp(1, MAX_ACTIVE_DEADLINE_SECONDS),
        successful_jobs_history_limit: successful,
        failed_jobs_history_limit: failed,
        run_once,
    }
}

fn check_run_once(entry: &RunOnceDocument, field: &str, problems: &mut Problems) -> Option<RunOnce> {
    let mut ok = true;
    let mut refuse = |key: &str, message: String| {
        problems.push(format!("{field}{key}"), message);
        ok = false;
    };
    if entry.image_prefix.chars().any(char::is_whitespace) {
        refuse(
            ".imagePrefix",
            format!(
                "`{}` contains whitespace; expected an image prefix such as `ghcr.io/acme/` or `` for every image",
                entry.image_prefix
            ),
        );
    }
    let text_ok =
        |text: &str| !text.is_empty() && text.len() <= MAX_RUN_ONCE_TEXT && !text.chars().any(char::is_control);
    let convention = match entry.convention.as_str() {
        "argument" => {
            let argument = entry.argument.clone().unwrap_or_else(|| "--once".into());
            if !text_ok(&argument) {
                refuse(".argument", format!("must be 1 to {MAX_RUN_ONCE_TEXT} printable characters, e.g. `--once`"));
            }
            if entry.environment.is_some() {
                refuse(
                    ".environment",
                    "belongs to convention `environment`; remove it or change the convention".into(),
                );
            }
            Some(RunOnceConvention::Argument(argument))
        }
        "environment" => {
            if entry.argument.is_some() {
                refuse(".argument", "belongs to convention `argument`; remove it or change the convention".into());
            }
            match &entry.environment {
                None => {
                    refuse(".environment", "is required with convention `environment`; expected `{name: RUN_ONCE, value: \"true\"}` with the variable the image reads".into());
                    None
                }
                Some(environment) => {
                    if !is_variable_name(&environment.name) {
                        refuse(
                            ".environment.name",
                            format!(
                                "`{}` is not a variable name; expected letters, digits and `_`, not starting with a digit, e.g. `RUN_ONCE`",
                                environment.name
                            ),
                        );
                    }
                    if environment.value.len() > MAX_RUN_ONCE_TEXT || environment.value.chars().any(char::is_control) {
                        refuse(
                            ".environment.value",
                            format!("must be at most {MAX_RUN_ONCE_TEXT} printable characters"),
                        );
                    }
                    Some(RunOnceConvention::Environment {
                        name: environment.name.clone(),
                        value: environment.value.clone(),
                    })
                }
            }
        }
        "builtIn" => {
            if entry.argument.is_some() || entry.environment.is_some() {
                refuse("", "convention `builtIn` takes neither `argument` nor `environment`: the image runs once by itself; remove them".into());
            }
            Some(RunOnceConvention::BuiltIn)
        }
        other => {
            refuse(
                ".convention",
                format!("`{other}` is not a run-once convention; expected `argument`, `environment` or `builtIn`"),
            );
            None
        }
    };
    let convention = convention.filter(|_| ok)?;
    Some(RunOnce { image_prefix: entry.image_prefix.clone(), convention })
}

/// A portable environment variable name: what every shell and entrypoint reads.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 128
}

/// Checks `keda`.
pub(crate) fn check_keda(document: &KedaDocument, problems: &mut Problems) -> KedaSettings {
    let version = match document.version.trim() {
        "" => None,
        text => match text.parse::<KedaVersion>() {
            Ok(version) if version < KedaVersion::OLDEST_SUPPORTED => {
                problems.push(
                    "keda.version",
                    format!(
                        "{version} is older than the oldest KEDA cdtarget renders for ({}); upgrade KEDA or leave the version empty",
                        KedaVersion::OLDEST_SUPPORTED
                    ),
                );
                None
            }
            Ok(version) => Some(version),
            Err(e) => {
                problems.push("keda.version", format!("{e}; or leave it empty to let the controller find out"));
                None
            }
        },
    };
    let interval = document.polling_interval_seconds;
    let polling = i32::try_from(interval).ok().filter(|s| (1..=MAX_POLLING_INTERVAL_SECONDS).contains(&i64::from(*s)));
    if polling.is_none() {
        problems.push(
            "keda.pollingIntervalSeconds",
            format!("{interval} is out of range; expected seconds from 1 to {MAX_POLLING_INTERVAL_SECONDS}, e.g. 30"),
        );
    }
    KedaSettings { version, polling_interval_seconds: polling.unwrap_or(30) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::policy::{PolicyDocument, RunOnceEnvironmentDocument};
    use crate::policy::from_document;

    fn problems(change: impl FnOnce(&mut PolicyDocument)) -> Vec<(String, String)> {
        let mut document = PolicyDocument::default();
        change(&mut document);
        let problems = from_document(&document).expect_err("an invalid policy");
        problems.into_iter().map(|p| (p.field, p.message)).collect()
    }

    fn entry(prefix: &str, convention: &str) -> RunOnceDocument {
        RunOnceDocument {
            image_prefix: prefix.into(),
            convention: convention.into(),
            argument: None,
            environment: None,
        }
    }

    #[test]
    fn the_defaults_allow_both_modes_deployment_first_and_run_microsofts_image_once_with_an_argument() {
        let policy = crate::policy::Policy::default();
        assert_eq!(policy.modes, Modes { default: AgentMode::Deployment, allowed: AgentMode::ALL.to_vec() });
        assert_eq!(
            (
                policy.jobs.active_deadline_seconds,
                policy.jobs.successful_jobs_history_limit,
                policy.jobs.failed_jobs_history_limit
            ),
            (21600, 3, 5)
        );
        assert_eq!(policy.jobs.run_once_for("anything:1"), Some(&RunOnceConvention::Argument("--once".into())));
        assert_eq!(policy.keda, KedaSettings { version: None, polling_interval_seconds: 30 });
    }

    #[test]
    fn the_longest_matching_prefix_decides_how_an_image_runs_once() {
        let mut document = PolicyDocument::default();
        document.agents.jobs.run_once.push(entry("ghcr.io/acme/", "builtIn"));
        document.agents.jobs.run_once.push(RunOnceDocument {
            environment: Some(RunOnceEnvironmentDocument { name: "RUN_ONCE".into(), value: "1".into() }),
            ..entry("ghcr.io/acme/env-agent", "environment")
        });
        let jobs = from_document(&document).unwrap().jobs;
        assert_eq!(jobs.run_once_for("ghcr.io/acme/agent:1"), Some(&RunOnceConvention::BuiltIn));
        assert_eq!(
            jobs.run_once_for("ghcr.io/acme/env-agent:2"),
            Some(&RunOnceConvention::Environment { name: "RUN_ONCE".into(), value: "1".into() })
        );
        assert_eq!(jobs.run_once_for("docker.io/x:1"), Some(&RunOnceConvention::Argument("--once".into())));
        let none = Jobs { run_once: vec![], ..jobs };
        assert_eq!(none.run_once_for("docker.io/x:1"), None);
    }

    #[test]
    fn a_default_mode_the_policy_does_not_allow_is_refused() {
        let found =
            problems(|d| d.agents.modes = ModesDocument { default: "Deployment".into(), allowed: vec!["Job".into()] });
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "agents.modes.default");
        assert!(found[0].1.contains("not in agents.modes.allowed (Job)"), "{found:?}");
    }

    #[test]
    fn unknown_repeated_or_no_modes_are_refused_by_their_field() {
        let found = problems(|d| {
            d.agents.modes =
                ModesDocument { default: "Pod".into(), allowed: vec!["Job".into(), "job".into(), "Job".into()] }
        });
        let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["agents.modes.allowed[1]", "agents.modes.allowed[2]", "agents.modes.default"], "{found:?}");
        assert!(found[0].1.contains("expected one of Deployment, Job"));
        let found = problems(|d| d.agents.modes.allowed.clear());
        assert_eq!(found[0].0, "agents.modes.allowed");
    }

    #[test]
    fn deadlines_history_limits_and_polling_intervals_out_of_bounds_are_refused() {
        for deadline in [0, -1, i64::MIN, MAX_ACTIVE_DEADLINE_SECONDS + 1, i64::MAX] {
            let found = problems(|d| d.agents.jobs.active_deadline_seconds = deadline);
            assert_eq!(found[0].0, "agents.jobs.activeDeadlineSeconds", "{deadline}");
            assert!(found[0].1.contains("expected seconds from 1 to 604800"), "{found:?}");
        }
        for limit in [-1, MAX_JOBS_HISTORY + 1, i64::from(i32::MAX) + 1] {
            let found = problems(|d| {
                d.agents.jobs.successful_jobs_history_limit = limit;
                d.agents.jobs.failed_jobs_history_limit = limit;
            });
            let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
            assert_eq!(fields, ["agents.jobs.successfulJobsHistoryLimit", "agents.jobs.failedJobsHistoryLimit"]);
        }
        for interval in [0, -30, MAX_POLLING_INTERVAL_SECONDS + 1] {
            let found = problems(|d| d.keda.polling_interval_seconds = interval);
            assert_eq!(found[0].0, "keda.pollingIntervalSeconds");
        }
    }

    #[test]
    fn a_keda_version_pin_must_be_a_supported_release() {
        let found = problems(|d| d.keda.version = "latest".into());
        assert_eq!(found[0].0, "keda.version");
        assert!(found[0].1.contains("expected e.g. `2.21.0`"), "{found:?}");
        let found = problems(|d| d.keda.version = "2.19.0".into());
        assert!(found[0].1.contains("older than the oldest KEDA cdtarget renders for (2.20.0)"), "{found:?}");
        let mut document = PolicyDocument::default();
        document.keda.version = "v2.20".into();
        assert_eq!(from_document(&document).unwrap().keda.version, Some(KedaVersion::V2_20_0));
    }

    #[test]
    fn bad_run_once_entries_are_refused_by_their_field() {
        let found = problems(|d| {
            d.agents.jobs.run_once = vec![
                entry("ghcr.io/a /", "argument"),
                entry("x/", "once"),
                entry("y/", "environment"),
                RunOnceDocument {
                    environment: Some(RunOnceEnvironmentDocument { name: "1-BAD".into(), value: "a\nb".into() }),
                    ..entry("z/", "environment")
                },
                RunOnceDocument { argument: Some("--once".into()), ..entry("w/", "builtIn") },
                RunOnceDocument { argument: Some(String::new()), ..entry("v/", "argument") },
                entry("", "argument"),
                entry("", "builtIn"),
            ]
        });
        let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "agents.jobs.runOnce[0].imagePrefix",
                "agents.jobs.runOnce[1].convention",
                "agents.jobs.runOnce[2].environment",
                "agents.jobs.runOnce[3].environment.name",
                "agents.jobs.runOnce[3].environment.value",
                "agents.jobs.runOnce[4]",
                "agents.jobs.runOnce[5].argument",
                "agents.jobs.runOnce[7].imagePrefix",
            ],
            "{found:?}"
        );
        assert!(found[1].1.contains("expected `argument`, `environment` or `builtIn`"));
        assert!(found[7].1.contains("listed twice"));
    }
}
