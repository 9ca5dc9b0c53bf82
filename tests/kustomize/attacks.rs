//! A hostile tenant's pushes against the revision budget (issue #26): each attack of a few
//! kilobytes that used to abort the process or exhaust its memory is refused with a located
//! problem naming the limit, on a loader thread with tokio's 2 MiB stack, and the `cdtarget`
//! binary refuses it with its memory limited to the deployment's 512 MiB.

use std::fmt::Write as _;
use std::fs;
use std::process::{Command, Stdio};
use std::rc::Rc;

use cdtarget::budget::{self, Budget, Overrun};
use cdtarget::manifests::{self, SourceFile};
use cdtarget::policy::Policy;
use cdtarget::problem::Problem;

use crate::common::attacks::deepening_json_patch;

const TENANT: &str = "team-a";
/// tokio's blocking threads (`spawn_blocking`), on which the loader used to run.
const TOKIO_STACK: usize = 2 << 20;
/// The memory limit of deploy/deployment.yaml.
const POD_MEMORY: libc::rlim_t = 512 << 20;

fn file(path: &str, text: String) -> SourceFile {
    SourceFile { path: path.into(), text }
}

/// `count` ConfigMaps `cm-<first>`..., one file's worth (the YAML reader takes at most 1,024
/// documents a file).
fn config_maps_from(first: usize, count: usize) -> String {
    let mut text = String::new();
    for i in first..first + count {
        writeln!(text, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}}}\ndata: {{k: v}}").unwrap();
    }
    text
}

/// Loads `files` on a thread with tokio's stack: a stack overflow would abort the whole test
/// binary, so getting an answer at all is the first assertion.
fn load_on_small_stack(files: Vec<SourceFile>) -> Result<usize, Vec<Problem>> {
    std::thread::Builder::new()
        .stack_size(TOKIO_STACK)
        .spawn(move || manifests::load(files, TENANT, &Policy::default()).map(|set| set.documents.len()))
        .expect("a thread")
        .join()
        .expect("the load does not panic")
}

/// The one problem of a refused revision, which must name `limit` and a file.
fn refused_for(files: Vec<SourceFile>, limit: &str) -> Problem {
    let problems = load_on_small_stack(files.clone()).expect_err("the attack is refused");
    assert_eq!(problems.len(), 1, "one problem, the first limit crossed: {problems:#?}");
    let problem = problems.into_iter().next().unwrap();
    assert!(problem.message.contains(limit), "names the limit `{limit}`: {problem}");
    assert!(problem.file.is_some(), "located: {problem}");
    assert_refused_within_pod_memory(&files, limit);
    problem
}

/// Runs `cdtarget render` on `files` written to a directory with its data memory limited to the
/// pod's (`RLIMIT_DATA`: heap and every writable private mapping): an allocation past it fails
/// and the process aborts, so a refusal with exit code 1 is a refusal within the pod's memory.
/// (The child's `ru_maxrss` cannot tell: a child spawned from this large test process inherits
/// the parent's high-water mark through the exec.)
fn assert_refused_within_pod_memory(files: &[SourceFile], limit: &str) {
    let dir = tempfile::tempdir().unwrap();
    for f in files {
        let path = dir.path().join(&f.path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, &f.text).unwrap();
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_cdtarget"));
    command.args(["render", dir.path().to_str().unwrap(), "--namespace", TENANT]);
    limit_data_memory(&mut command, POD_MEMORY);
    let output = command.stdin(Stdio::null()).output().expect("cdtarget runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "refused with exit code 1, not killed ({:?}): {stderr}", output.status);
    assert!(stderr.contains(limit), "the refusal names the limit `{limit}`: {stderr}");
}

/// Limits the data memory of the process `command` starts to `bytes`.
#[allow(unsafe_code)]
fn limit_data_memory(command: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
    // SAFETY: between fork and exec the closure calls only setrlimit, which is async-signal-safe,
    // on a value copied into it.
    unsafe {
        command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_DATA, &limit) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
}

fn config_maps(count: usize) -> String {
    config_maps_from(0, count)
}

/// `count` ConfigMaps in files of 1,000 (`cms-0.yaml`, ...), and the `resources` list naming them.
fn config_map_files(count: usize) -> (Vec<SourceFile>, String) {
    let files: Vec<SourceFile> = (0..count.div_ceil(1000))
        .map(|n| file(&format!("cms-{n}.yaml"), config_maps_from(n * 1000, (count - n * 1000).min(1000))))
        .collect();
    let names = files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>().join(", ");
    (files, format!("resources: [{names}]\n"))
}

fn kustomization(text: &str) -> SourceFile {
    file("kustomization.yaml", text.to_owned())
}

fn one_config_map() -> SourceFile {
    file("cm.yaml", config_maps(1))
}

#[test]
fn a_json_patch_deepening_an_object_by_moves_is_refused_at_the_operation() {
    let files = vec![
        kustomization("resources: [cm.yaml]\npatches:\n- path: deepen.json\n  target: {kind: ConfigMap}\n"),
        one_config_map(),
        file("deepen.json", deepening_json_patch()),
    ];
    let problem = refused_for(files, "nested more than 64 levels");
    assert_eq!(problem.file.as_deref(), Some("kustomization.yaml"));
    assert!(problem.field.starts_with("patches[0]"), "{problem}");
    assert!(problem.message.contains("`move`"), "names the operation: {problem}");
}

#[test]
fn json_patch_copies_doubling_an_object_are_refused_at_the_budget() {
    let mut ops = vec![format!(r#"{{"op": "add", "path": "/data/seed", "value": "{}"}}"#, "x".repeat(1000))];
    ops.extend((0..22).map(|i| format!(r#"{{"op": "copy", "from": "/data", "path": "/data/d{i}"}}"#)));
    let files = vec![
        kustomization("resources: [cm.yaml]\npatches:\n- path: double.json\n  target: {kind: ConfigMap}\n"),
        one_config_map(),
        file("double.json", format!("[{}]", ops.join(","))),
    ];
    let problem = refused_for(files, "more than 64 MiB of objects");
    assert!(problem.field.starts_with("patches[0]"), "{problem}");
}

#[test]
fn a_huge_name_prefix_is_refused_when_read() {
    let files = vec![
        kustomization(&format!("resources: [cms.yaml]\nnamePrefix: {}\n", "p".repeat(900_000))),
        file("cms.yaml", config_maps(500)),
    ];
    let problems = load_on_small_stack(files).expect_err("refused");
    assert!(problems.len() <= 2, "{problems:#?}");
    let problem = &problems[0];
    assert_eq!((problem.file.as_deref(), problem.field.as_str()), (Some("kustomization.yaml"), "namePrefix"));
    assert!(problem.message.contains("at most 252 may be added"), "{problem}");
}

#[test]
fn common_annotations_over_many_objects_are_refused_at_the_budget() {
    let mut annotations = String::from("commonAnnotations:\n");
    for i in 0..250 {
        writeln!(annotations, "  a{i}: {}", "v".repeat(1000)).unwrap();
    }
    let (mut files, resources) = config_map_files(2000);
    files.push(kustomization(&format!("{resources}{annotations}")));
    let problem = refused_for(files, "more than 64 MiB of objects");
    assert_eq!((problem.file.as_deref(), problem.field.as_str()), (Some("kustomization.yaml"), "commonAnnotations"));
}

#[test]
fn one_component_listed_thousands_of_times_is_refused() {
    let components: String = (0..1990).map(|_| "- comp\n").collect();
    let files = vec![
        kustomization(&format!("resources: [cms.yaml]\ncomponents:\n{components}")),
        file("cms.yaml", config_maps(500)),
        file(
            "comp/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nnamePrefix: a\n".to_owned(),
        ),
    ];
    let problems = load_on_small_stack(files).expect_err("refused");
    assert!(problems.len() <= 2, "{problems:#?}");
    assert!(problems[0].file.is_some(), "{}", problems[0]);
}

#[test]
fn yaml_aliases_expanding_across_files_are_refused_at_the_budget() {
    // About 2 KB a file; each expands to millions of bytes of strings.
    let mut text = format!("a0: &a0 \"{}\"\n", "x".repeat(1000));
    for level in 1..8 {
        let previous = format!("*a{}", level - 1);
        writeln!(text, "a{level}: &a{level} [{}]", [previous.as_str(); 8].join(", ")).unwrap();
    }
    let object = |i: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bomb-{i}}}\ndata:\n  x: y\nbomb:\n  {}",
            text.replace('\n', "\n  ")
        )
    };
    let files: Vec<SourceFile> = (0..30).map(|i| file(&format!("bomb-{i}.yaml"), object(i))).collect();
    let problem = refused_for(files, "more than 64 MiB of objects");
    assert!(problem.file.as_deref().is_some_and(|f| f.starts_with("bomb-")), "{problem}");
}

#[test]
fn reserved_labels_on_thousands_of_objects_keep_a_bounded_number_of_problems() {
    let mut labels = String::new();
    for i in 0..40 {
        write!(labels, "cdtarget.io/l{i}: x, ").unwrap();
    }
    let files: Vec<SourceFile> = (0..8)
        .map(|n| {
            let mut text = String::new();
            for i in n * 1000..(n + 1) * 1000 {
                writeln!(
                    text,
                    "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, labels: {{{labels}}}}}"
                )
                .unwrap();
            }
            file(&format!("labels-{n}.yaml"), text)
        })
        .collect();
    let problems = load_on_small_stack(files).expect_err("refused");
    assert_eq!(problems.len(), 101, "100 kept and one saying how many more");
    assert!(problems[0].message.contains("cdtarget.io/"), "{}", problems[0]);
    assert!(problems[100].message.starts_with("and 319900 more problems"), "{}", problems[100]);
}

#[test]
fn targeted_patches_times_objects_are_refused_at_the_work_budget() {
    let mut patches = String::from("patches:\n");
    for i in 0..20_000 {
        writeln!(patches, "- patch: '[]'\n  target: {{name: n{i}}}").unwrap();
    }
    let (mut files, resources) = config_map_files(8000);
    files.push(kustomization(&format!("{resources}{patches}")));
    // In-process, under a work budget of two million units: the default (200 million) is seconds
    // of CPU in a release build but minutes in this debug one, where the deadline would come first.
    // Memory is not what this attack spends.
    let problems = std::thread::Builder::new()
        .stack_size(TOKIO_STACK)
        .spawn(move || {
            let limits = budget::Limits { work: 2_000_000, ..budget::Limits::default() };
            let budget = Rc::new(Budget::new(limits));
            let _entered = budget.enter();
            let problems = manifests::load(files, TENANT, &Policy::default()).expect_err("refused");
            assert_eq!(budget.overrun(), Some(Overrun::Work(2_000_000)));
            problems
        })
        .expect("a thread")
        .join()
        .expect("the load does not panic");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].message.contains("steps of work"), "names the work limit: {}", problems[0]);
    assert!(problems[0].field.starts_with("patches["), "{}", problems[0]);
}

#[test]
fn too_many_objects_are_refused_at_the_file_that_crosses_the_limit() {
    let files: Vec<SourceFile> =
        (0..11).map(|n| file(&format!("f{n:02}.yaml"), config_maps_from(n * 1000, 1000))).collect();
    let problem = refused_for(files, "more than 10000 objects");
    assert_eq!(problem.file.as_deref(), Some("f10.yaml"));
}
