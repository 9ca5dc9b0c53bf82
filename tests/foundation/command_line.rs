//! The command line's conventions: every argument has help and a value name from one
//! vocabulary, a flag means the same in every subcommand, `render` and `validate` take the same
//! inputs, the docs show the flags as `--help` does; shell completions; `cdtarget version`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use cdtarget::cli::Cli;
use clap::CommandFactory;

use super::support::project_dir;

/// The value names of the command line and what each stands for (docs/install.md, "The command
/// line", lists them): a new flag takes one of these, or this list and the docs grow.
const VALUE_NAMES: &[(&str, &str)] = &[
    ("ADDRESS", "a listen address, `HOST:PORT` or `:PORT`"),
    ("BOOL", "`true` or `false`"),
    ("BYTES", "a number of bytes"),
    ("DIR", "a directory"),
    ("DIR|URL", "a directory, or a Git URL"),
    ("DURATION", "a Go duration: `90s`, `5m`, `1h30m`"),
    ("FILE", "a file (`-` for standard input where the help says so)"),
    ("FILTER", "a log filter such as `info,kube=warn`"),
    ("FORMAT", "an output or log format"),
    ("MIB", "a number of MiB"),
    ("N", "a count"),
    ("NAME", "a Kubernetes object name"),
    ("NAMESPACE", "a Kubernetes namespace"),
    ("PER_MINUTE", "a rate per minute"),
    ("PER_SECOND", "a rate per second"),
    ("REF", "a Git branch, `tags/NAME` or a commit SHA"),
    ("SELECTOR", "a Kubernetes label selector"),
    ("SHELL", "a shell: `bash`, `zsh`, `fish`, `elvish`, `powershell`"),
    ("SUBDIR", "a directory inside the repository"),
    ("URL", "an `http(s)://` URL"),
    ("VERSION", "a release number: `2.21.0`, `2.21` or `v2.21.0`"),
];

fn cdtarget(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdtarget")).args(args).current_dir(project_dir()).output().expect("binary runs")
}

/// Every subcommand with its path (`["reconcile", "tenantrepository"]`), the root included.
fn commands() -> Vec<(Vec<String>, clap::Command)> {
    fn walk(path: Vec<String>, command: &clap::Command, out: &mut Vec<(Vec<String>, clap::Command)>) {
        out.push((path.clone(), command.clone()));
        for sub in command.get_subcommands() {
            let mut path = path.clone();
            path.push(sub.get_name().to_owned());
            walk(path, sub, out);
        }
    }
    let mut out = Vec::new();
    walk(Vec::new(), &Cli::command(), &mut out);
    out
}

/// The arguments a user gives (clap's own `--help` and `--version` left out).
fn arguments(command: &clap::Command) -> impl Iterator<Item = &clap::Arg> {
    command.get_arguments().filter(|arg| !matches!(arg.get_id().as_str(), "help" | "version"))
}

fn value_names(arg: &clap::Arg) -> Option<Vec<String>> {
    arg.get_value_names().map(|names| names.iter().map(|name| name.to_string()).collect())
}

#[test]
fn every_argument_and_subcommand_has_help_and_a_value_name_from_the_vocabulary() {
    let vocabulary: Vec<&str> = VALUE_NAMES.iter().map(|(name, _)| *name).collect();
    let mut problems = Vec::new();
    let mut arguments_seen = 0;
    for (path, command) in commands() {
        let shown = format!("cdtarget {}", path.join(" "));
        if !path.is_empty() && command.get_about().is_none_or(|about| about.to_string().trim().is_empty()) {
            problems.push(format!("{shown}: no help text"));
        }
        for arg in arguments(&command) {
            arguments_seen += 1;
            let flag = arg.get_long().map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"));
            if arg.get_help().is_none_or(|help| help.to_string().trim().is_empty()) {
                problems.push(format!("{shown} {flag}: no help text"));
            }
            if !arg.get_action().takes_values() {
                continue;
            }
            match value_names(arg) {
                None => problems.push(format!("{shown} {flag}: no value_name (one of {vocabulary:?})")),
                Some(names) => {
                    for name in names.iter().filter(|name| !vocabulary.contains(&name.as_str())) {
                        problems.push(format!("{shown} {flag}: value name {name} is not one of {vocabulary:?}"));
                    }
                }
            }
        }
    }
    assert!(arguments_seen > 60, "the walk saw only {arguments_seen} arguments");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_flag_takes_the_same_value_and_short_name_in_every_subcommand() {
    let mut by_long: BTreeMap<String, (Option<Vec<String>>, String)> = BTreeMap::new();
    let mut by_short: BTreeMap<char, (String, String)> = BTreeMap::new();
    let mut problems = Vec::new();
    for (path, command) in commands() {
        let shown = format!("cdtarget {}", path.join(" "));
        for arg in arguments(&command) {
            let Some(long) = arg.get_long() else { continue };
            let names = value_names(arg).filter(|_| arg.get_action().takes_values());
            match by_long.get(long) {
                Some((seen, where_seen)) if *seen != names => {
                    problems.push(format!("--{long}: {names:?} in `{shown}` but {seen:?} in `{where_seen}`"));
                }
                Some(_) => {}
                None => {
                    by_long.insert(long.to_owned(), (names, shown.clone()));
                }
            }
            if let Some(short) = arg.get_short() {
                match by_short.get(&short) {
                    Some((seen, where_seen)) if seen != long => {
                        problems.push(format!("-{short}: --{long} in `{shown}` but --{seen} in `{where_seen}`"));
                    }
                    Some(_) => {}
                    None => {
                        by_short.insert(short, (long.to_owned(), shown.clone()));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(by_long["timeout"].0.as_deref(), Some(&["DURATION".to_owned()][..]));
    assert_eq!(by_long["namespace"].0.as_deref(), Some(&["NAMESPACE".to_owned()][..]));
}

/// The arguments of a subcommand as `(id, value names, default)`, sorted.
fn signature(name: &str) -> Vec<(String, Option<Vec<String>>, Vec<String>)> {
    let root = Cli::command();
    let command = root.find_subcommand(name).unwrap_or_else(|| panic!("no subcommand {name}"));
    let mut args: Vec<_> = arguments(command)
        .map(|arg| {
            let defaults = arg.get_default_values().iter().map(|d| d.to_string_lossy().into_owned()).collect();
            (arg.get_id().to_string(), value_names(arg), defaults)
        })
        .collect();
    args.sort();
    args
}

#[test]
fn render_and_validate_take_the_same_inputs_and_validate_adds_only_its_output_format() {
    let render = signature("render");
    let validate: Vec<_> = signature("validate").into_iter().filter(|(id, _, _)| id != "output").collect();
    assert_eq!(render, validate);
    assert!(
        render.iter().any(|(id, names, _)| id == "source" && names.as_deref() == Some(&["DIR|URL".to_owned()][..]))
    );
    assert!(signature("validate").iter().any(|(id, _, _)| id == "output"));
}

#[test]
fn validate_reads_a_directory_with_every_render_flag_readme_shows() {
    // README's render line, verbatim in its flags, with validate instead of render.
    let out = cdtarget(&[
        "validate",
        "examples/tenant-repo",
        "--policy",
        "examples/platform/policy.yaml",
        "--namespace",
        "team-payments",
        "--max-file-bytes",
        "4194304",
        "--max-total-bytes",
        "67108864",
        "--ref",
        "main",
        "--timeout",
        "30s",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "valid: 5 documents, 4 CDTargets\n");
    // A bad duration is a usage error naming what would be accepted.
    let out = cdtarget(&["validate", "examples/tenant-repo", "--timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("such as `90s`"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The `cdtarget ...` usage lines of a doc's `sh` blocks (continuation lines joined) and, with
/// `flag_tables` (docs/operations.md), the rows of its controller flag table
/// (`| \`--flag VALUE\` |`), each as words.
fn documented_usages(text: &str, flag_tables: bool) -> Vec<Vec<String>> {
    let mut usages: Vec<Vec<String>> = Vec::new();
    let mut in_block = false;
    let mut continuing = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continuing = false;
            continue;
        }
        // A shell comment is not part of the usage.
        let code = line.split(" #").next().unwrap_or_default();
        let words = || code.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        if in_block && line.starts_with("cdtarget ") {
            usages.push(words());
            continuing = true;
        } else if in_block && continuing && line.starts_with(' ') {
            usages.last_mut().expect("a usage line before").extend(words());
        } else if let Some(cell) = line.strip_prefix("| `--").filter(|_| flag_tables) {
            let flag = cell.split('`').next().unwrap_or_default();
            usages.push(["cdtarget", "controller"].map(str::to_owned).into_iter().chain(flag_words(flag)).collect());
            continuing = false;
        } else {
            continuing = false;
        }
    }
    usages
}

fn flag_words(flag: &str) -> Vec<String> {
    format!("--{flag}").split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_docs_show_each_flag_with_the_value_name_of_its_help() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in ["README.md", "docs/operations.md", "docs/install.md"] {
        let text = std::fs::read_to_string(project_dir().join(doc)).expect("read the doc");
        for usage in documented_usages(&text, doc == "docs/operations.md") {
            // The subcommand: the leading words that name one.
            let mut command = Cli::command();
            for word in usage.iter().skip(1) {
                match command.find_subcommand(word) {
                    Some(sub) => command = sub.clone(),
                    None => break,
                }
            }
            for (i, word) in usage.iter().enumerate() {
                let word = word.trim_start_matches('[').trim_end_matches(']');
                let Some(long) = word.strip_prefix("--") else { continue };
                let (long, inline) = long.split_once('=').map_or((long, None), |(l, v)| (l, Some(v)));
                // clap's own, on every command.
                if long == "help" || long == "version" {
                    continue;
                }
                let Some(arg) = arguments(&command).find(|arg| arg.get_long() == Some(long)) else {
                    problems.push(format!("{doc}: `{}` shows --{long}, which it does not have", usage.join(" ")));
                    continue;
                };
                checked += 1;
                let shown = inline.map(str::to_owned).or_else(|| usage.get(i + 1).cloned()).unwrap_or_default();
                let shown = shown.trim_end_matches(']').trim_end_matches(',');
                // Only placeholders are compared (`--ref main` is an example value).
                let placeholder =
                    !shown.is_empty() && shown.chars().all(|c| c.is_ascii_uppercase() || "_|".contains(c));
                if !placeholder {
                    continue;
                }
                let expected = value_names(arg).unwrap_or_default();
                if !arg.get_action().takes_values() || expected != [shown.to_owned()] {
                    problems.push(format!("{doc}: --{long} {shown}, but its help says {expected:?}"));
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} documented flags found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn subcommand_names() -> Vec<String> {
    Cli::command().get_subcommands().map(|sub| sub.get_name().to_owned()).collect()
}

#[test]
fn every_shell_gets_a_completion_script_naming_every_subcommand() {
    use clap::ValueEnum;
    let names = subcommand_names();
    assert!(names.len() >= 9, "{names:?}");
    for shell in clap_complete::Shell::value_variants() {
        let shell = shell.to_possible_value().expect("a named shell").get_name().to_owned();
        let out = cdtarget(&["completion", &shell]);
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = String::from_utf8(out.stdout).expect("UTF-8 script");
        // (fish names flags without their dashes: `-l kubeconfig`.)
        for name in names.iter().chain(&["tenantrepository".to_owned(), "kubeconfig".to_owned()]) {
            assert!(script.contains(name.as_str()), "the {shell} script does not name {name}");
        }
    }
    let out = cdtarget(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: bash"), "{:?}", out);
}

/// What bash's completion offers for the words typed so far (`cdtarget rec`), with the script
/// from `cdtarget completion bash` loaded into a real `bash`, as a user's shell would.
fn bash_completes(script: &Path, words: &[&str]) -> Vec<String> {
    let line = words.join(" ");
    let program = format!(
        "source {script}\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\nCOMP_LINE='{line}'\nCOMP_POINT=${{#COMP_LINE}}\n_cdtarget cdtarget '{current}' '{previous}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script = script.display(),
        words = words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" "),
        cword = words.len() - 1,
        current = words[words.len() - 1],
        previous = words[words.len() - 2],
    );
    let out = Command::new("bash").args(["--noprofile", "--norc", "-c", &program]).output().expect("bash runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).filter(|l| !l.is_empty()).collect()
}

#[test]
fn bash_completes_subcommands_kinds_and_flags_from_the_generated_script() {
    if Command::new("bash").arg("--version").output().is_err() {
        eprintln!("SKIP bash_completes_subcommands_kinds_and_flags_from_the_generated_script: no bash");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("cdtarget.bash");
    let out = cdtarget(&["completion", "bash"]);
    assert!(out.status.success());
    std::fs::write(&script, out.stdout).unwrap();

    assert_eq!(bash_completes(&script, &["cdtarget", "rec"]), ["reconcile"]);
    assert_eq!(bash_completes(&script, &["cdtarget", "reconcile", "ten"]), ["tenantrepository"]);
    assert_eq!(bash_completes(&script, &["cdtarget", "reconcile", "tenantrepository", "--wa"]), ["--wait"]);
    assert_eq!(bash_completes(&script, &["cdtarget", "completion", "fi"]), ["fish"]);
    assert_eq!(bash_completes(&script, &["cdtarget", "validate", "--out"]), ["--output"]);
}

#[test]
fn version_agrees_with_dash_dash_version_and_names_the_commit_it_was_built_from() {
    let long = cdtarget(&["--version"]);
    assert!(long.status.success());
    let long = String::from_utf8(long.stdout).unwrap();
    let text = cdtarget(&["version"]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert_eq!(text.lines().next(), long.lines().next(), "`cdtarget version` starts with the --version line");
    assert!(long.starts_with(&format!("cdtarget {} (", env!("CARGO_PKG_VERSION"))), "{long}");

    let json = cdtarget(&["version", "--output", "json"]);
    assert!(json.status.success());
    let info: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert!(info["rustc"].as_str().is_some_and(|r| r.starts_with("rustc 1.")), "{info}");
    assert!(info["target"].as_str().is_some_and(|t| t.split('-').count() >= 3), "{info}");
    assert!(matches!(info["profile"].as_str(), Some("debug" | "release")), "{info}");
    let features: Vec<&str> = info["features"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(features.contains(&"fixtures"), cfg!(feature = "fixtures"), "{info}");
    for line in ["commit:", "tree:", "rustc:", "target:", "profile:", "features:"] {
        assert!(text.contains(&format!("\n{line}")), "{text}");
    }

    // Built from this checkout: the commit is HEAD's, and the tree state what git says of the
    // sources the binary is built from (cargo builds again when either changes).
    let git = |args: &[&str]| {
        Command::new("git").args(args).current_dir(project_dir()).output().ok().filter(|o| o.status.success())
    };
    let (Some(head), Some(status)) = (
        git(&["rev-parse", "HEAD"]),
        git(&["status", "--porcelain", "--", "src", "build.rs", "Cargo.toml", "Cargo.lock"]),
    ) else {
        eprintln!("SKIP the commit check: not a Git checkout, or no git");
        return;
    };
    let head = String::from_utf8(head.stdout).unwrap().trim().to_owned();
    assert_eq!(info["gitCommit"], head.as_str(), "{info}");
    let state = if status.stdout.is_empty() { "clean" } else { "dirty" };
    assert_eq!(info["gitTreeState"], state, "{info}");
    let short = format!("({}{})", &head[..12], if state == "dirty" { "-dirty" } else { "" });
    assert!(long.contains(&short), "{long} should name {short}");
}

/// Runs `build.rs`, compiled on its own with `rustc`, as cargo would for a crate at `manifest_dir`,
/// with `env` on top; returns the `cargo:rustc-env` values it prints.
fn run_build_script(manifest_dir: &Path, env: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("build-script");
    let compiled = Command::new("rustc")
        .args(["--edition", "2024", "-o"])
        .arg(&script)
        .arg(project_dir().join("build.rs"))
        .output()
        .ok()?;
    assert!(compiled.status.success(), "{}", String::from_utf8_lossy(&compiled.stderr));
    let mut command = Command::new(&script);
    // What this process has of the variables the script reads; the rest (PATH, HOME for rustup's
    // `rustc`) stays.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_FEATURE_") || name.starts_with("CDTARGET_GIT_") {
            command.env_remove(name.as_ref());
        }
    }
    let out = command
        .env("CARGO_MANIFEST_DIR", manifest_dir)
        .env("CARGO_PKG_VERSION", "9.8.7")
        .env("TARGET", "x86_64-unknown-linux-gnu")
        .env("PROFILE", "release")
        .env("RUSTC", "rustc")
        .envs(env.iter().copied())
        .output()
        .expect("the build script runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .filter_map(|line| line.strip_prefix("cargo:rustc-env="))
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect(),
    )
}

#[test]
fn the_build_script_takes_the_commit_from_the_environment_where_there_is_no_git_checkout() {
    let test = "the_build_script_takes_the_commit_from_the_environment_where_there_is_no_git_checkout";
    // A source tree without .git, as a container build context or an unpacked archive.
    let tree = tempfile::tempdir().unwrap();
    let Some(unknown) = run_build_script(tree.path(), &[("CARGO_FEATURE_FIXTURES", "1")]) else {
        eprintln!("SKIP {test}: no rustc on PATH");
        return;
    };
    assert_eq!(unknown["CDTARGET_BUILD_VERSION_LINE"], "9.8.7 (commit unknown)");
    assert_eq!(
        (unknown["CDTARGET_BUILD_GIT_COMMIT"].as_str(), unknown["CDTARGET_BUILD_GIT_TREE_STATE"].as_str()),
        ("", "")
    );
    assert_eq!(unknown["CDTARGET_BUILD_FEATURES"], "fixtures");
    assert_eq!(unknown["CDTARGET_BUILD_PROFILE"], "release");
    assert!(unknown["CDTARGET_BUILD_RUSTC"].starts_with("rustc "), "{unknown:?}");

    let commit = "0123456789abcdef0123456789abcdef01234567";
    let given = [("CDTARGET_GIT_COMMIT", commit), ("CDTARGET_GIT_TREE_STATE", "dirty")];
    let passed = run_build_script(tree.path(), &given).expect("rustc ran before");
    assert_eq!(passed["CDTARGET_BUILD_VERSION_LINE"], "9.8.7 (0123456789ab-dirty)");
    assert_eq!(passed["CDTARGET_BUILD_GIT_COMMIT"], commit);
    assert_eq!(passed["CDTARGET_BUILD_GIT_TREE_STATE"], "dirty");
    // The environment wins over a checkout too (a builder that knows better).
    let over_checkout = run_build_script(&project_dir(), &given).expect("rustc ran before");
    assert_eq!(over_checkout["CDTARGET_BUILD_GIT_COMMIT"], commit);
}
