//! The tree walk, the kustomization model and their refusals, over in-memory files. Names,
//! generators and fields are the other slices' and are tested there; these cases avoid them.

use serde_json::json;

use super::*;
use crate::kustomize::files::MemoryFiles;
use crate::kustomize::resource::PreviousId;

fn files(entries: &[(&str, &str)]) -> MemoryFiles {
    let mut files = MemoryFiles::new();
    for (path, text) in entries {
        files.insert(*path, *text);
    }
    files
}

fn deployment(name: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  template:\n    spec:\n      \
         containers:\n      - name: app\n        image: app:1\n"
    )
}

fn service(name: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports:\n  - port: 80\n")
}

fn config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: b\n")
}

fn ids(build: &Build) -> Vec<String> {
    build.resources.iter().map(|r| format!("{}/{}", r.kind(), r.name())).collect()
}

/// The problems of a build that must fail, printed one a line.
fn refused(files: &MemoryFiles, dir: &str) -> String {
    refused_within(files, dir, LIMITS)
}

fn refused_within(files: &MemoryFiles, dir: &str, limits: Limits) -> String {
    let problems = build_within(files, dir, limits).expect_err("the build is refused");
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

fn assert_says(said: &str, parts: &[&str]) {
    for part in parts {
        assert!(said.contains(part), "expected {part:?} in:\n{said}");
    }
}

// === resources ===

#[test]
fn files_and_nested_bases_are_built_in_kustomizes_print_order() {
    let d = deployment("web");
    let s = service("web");
    let c = config_map("settings");
    let files = files(&[
        ("base/kustomization.yaml", "resources:\n- deployment.yaml\n- service.yaml\n"),
        ("base/deployment.yaml", &d),
        ("base/service.yaml", &s),
        ("overlays/prod/kustomization.yaml", "resources:\n- ../../base\n- config.yaml\n"),
        ("overlays/prod/config.yaml", &c),
    ]);
    let build = build(&files, "overlays/prod").unwrap();
    assert_eq!(ids(&build), ["ConfigMap/settings", "Service/web", "Deployment/web"]);
    let read: Vec<&str> = build.kustomizations.iter().map(|k| k.path.as_str()).collect();
    assert_eq!(read, ["overlays/prod/kustomization.yaml", "base/kustomization.yaml"], "outermost first");
    assert_eq!(
        build.resources[2].origin,
        Origin::Document { file: "base/deployment.yaml".into(), index: 1, line: 1 },
        "an object remembers the file it came from"
    );
}

#[test]
fn fifo_order_is_the_order_of_accumulation() {
    let d = deployment("web");
    let c = config_map("settings");
    let files = files(&[
        ("kustomization.yaml", "resources:\n- base\n- config.yaml\nsortOptions:\n  order: fifo\n"),
        ("base/kustomization.yaml", "resources:\n- d.yaml\n"),
        ("base/d.yaml", &d),
        ("config.yaml", &c),
    ]);
    assert_eq!(ids(&build(&files, "").unwrap()), ["Deployment/web", "ConfigMap/settings"]);
}

#[test]
fn every_document_of_a_file_is_read_in_order_and_empty_ones_skipped() {
    let text = format!("{}---\n---\n{}", deployment("a"), deployment("b"));
    let files =
        files(&[("kustomization.yaml", "resources:\n- all.yaml\nsortOptions:\n  order: fifo\n"), ("all.yaml", &text)]);
    let build = build(&files, "").unwrap();
    assert_eq!(ids(&build), ["Deployment/a", "Deployment/b"]);
}

#[test]
fn the_deprecated_bases_come_after_resources() {
    let files = files(&[
        ("kustomization.yaml", "bases:\n- base\nresources:\n- c.yaml\nsortOptions:\n  order: fifo\n"),
        ("base/kustomization.yaml", "resources:\n- d.yaml\n"),
        ("base/d.yaml", &deployment("web")),
        ("c.yaml", &config_map("settings")),
    ]);
    assert_eq!(ids(&build(&files, "").unwrap()), ["ConfigMap/settings", "Deployment/web"]);
}

#[test]
fn a_directory_without_a_kustomization_is_an_error() {
    let files = files(&[("kustomization.yaml", "resources:\n- plain\n"), ("plain/d.yaml", &deployment("web"))]);
    assert_says(
        &refused(&files, ""),
        &["kustomization.yaml: resources[0]: `plain` has no kustomization.yaml", "list its files one by one"],
    );
    assert_says(&refused(&files, "plain"), &["plain: `plain` has no kustomization.yaml"]);
}

#[test]
fn a_missing_entry_is_an_error_naming_it() {
    let files =
        files(&[("app/kustomization.yaml", "resources:\n- d.yaml\n- gone.yaml\n"), ("app/d.yaml", &deployment("w"))]);
    assert_says(&refused(&files, "app"), &["app/kustomization.yaml: resources[1]: `gone.yaml` does not exist"]);
}

#[test]
fn several_kustomization_files_in_one_directory_are_an_error() {
    let files = files(&[("kustomization.yaml", "resources: []\n"), ("kustomization.yml", "resources: []\n")]);
    assert_says(&refused(&files, ""), &["several kustomization files", "keep one"]);
}

#[test]
fn the_same_object_from_two_resources_is_an_error_naming_both() {
    let files = files(&[
        ("kustomization.yaml", "resources:\n- a.yaml\n- b.yaml\n"),
        ("a.yaml", &deployment("web")),
        ("b.yaml", &deployment("web")),
    ]);
    assert_says(
        &refused(&files, ""),
        &[
            "kustomization.yaml: resources[1]: apps/v1 Deployment default/web is already in the build (from a.yaml:1)",
            "(from b.yaml:1)",
        ],
    );
}

#[test]
fn objects_differing_only_in_namespace_are_distinct_and_no_namespace_is_default() {
    let mut other = deployment("web");
    other = other.replace("  name: web\n", "  name: web\n  namespace: other\n");
    let files = files(&[
        ("kustomization.yaml", "resources:\n- a.yaml\n- b.yaml\n"),
        ("a.yaml", &deployment("web")),
        ("b.yaml", &other),
    ]);
    assert_eq!(build(&files, "").unwrap().resources.len(), 2);
    let explicit = deployment("web").replace("  name: web\n", "  name: web\n  namespace: default\n");
    let files = files_with(&files, &[("b.yaml", &explicit)]);
    assert_says(&refused(&files, ""), &["already in the build"]);
}

fn files_with(base: &MemoryFiles, entries: &[(&str, &str)]) -> MemoryFiles {
    let mut files = base.clone();
    for (path, text) in entries {
        files.insert(*path, *text);
    }
    files
}

#[test]
fn documents_that_are_not_objects_are_located() {
    let text =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n---\n- a list\n---\nkind: Service\nmetadata:\n  name: s\n";
    let files = files(&[("kustomization.yaml", "resources:\n- bad.yaml\n"), ("bad.yaml", text)]);
    assert_says(
        &refused(&files, ""),
        &[
            "bad.yaml:1: metadata.name: missing",
            "bad.yaml:2: expected a Kubernetes object (a map), found a list",
            "bad.yaml:3: apiVersion: missing",
        ],
    );
}

#[test]
fn lists_and_kustomizations_are_not_resources() {
    let list = "apiVersion: v1\nkind: ConfigMapList\nmetadata:\n  name: l\nitems: []\n";
    let files =
        files(&[("kustomization.yaml", "resources:\n- list.yaml\n- kustomization.yaml\n"), ("list.yaml", list)]);
    let said = refused(&files, "");
    assert_says(&said, &["list.yaml:1: kind: lists are not expanded"]);
    let files = files_with(
        &files,
        &[
            ("list.yaml", &config_map("c")),
            (
                "kustomization.yaml",
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nmetadata:\n  name: k\nresources:\n- list.yaml\n- kustomization.yaml\n",
            ),
        ],
    );
    assert_says(&refused(&files, ""), &["kustomization.yaml:1: kind: a Kustomization is not a resource"]);
}

#[test]
fn kustomizes_bookkeeping_annotations_are_refused_in_documents() {
    // An attacker's ConfigMap asking kustomize to hash it, or claiming an earlier name.
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n    internal.config.kubernetes.io/needsHashSuffix: enabled\n    config.kubernetes.io/path: x\n";
    let files = files(&[("kustomization.yaml", "resources:\n- c.yaml\n"), ("c.yaml", text)]);
    assert_says(
        &refused(&files, ""),
        &[
            "c.yaml:1: metadata.annotations.internal.config.kubernetes.io/needsHashSuffix: kustomize keeps",
            "metadata.annotations.config.kubernetes.io/path",
        ],
    );
}

#[test]
fn local_config_objects_are_dropped_from_the_output() {
    let local = config_map("values").replace(
        "  name: values\n",
        "  name: values\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n",
    );
    let kept = config_map("kept")
        .replace("  name: kept\n", "  name: kept\n  annotations:\n    config.kubernetes.io/local-config: \"false\"\n");
    let files =
        files(&[("kustomization.yaml", "resources:\n- a.yaml\n- b.yaml\n"), ("a.yaml", &local), ("b.yaml", &kept)]);
    assert_eq!(ids(&build(&files, "").unwrap()), ["ConfigMap/kept"]);
}

#[test]
fn secret_data_never_reaches_a_message() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\ndata:\n  password: aHVudGVyMg==\nstringData:\n  plain: hunter2\n";
    let broken = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: \"\"\nstringData:\n  plain: hunter2\n";
    for second in [secret, broken] {
        let files = files(&[
            ("kustomization.yaml", "resources:\n- a.yaml\n- b.yaml\n"),
            ("a.yaml", secret),
            ("b.yaml", second),
        ]);
        let said = refused(&files, "");
        assert!(!said.contains("hunter2") && !said.contains("aHVudGVyMg"), "{said}");
    }
}

// === the attacker: remote, escapes, cycles, limits ===

#[test]
fn remote_resources_components_and_patches_are_refused_without_fetching() {
    for entry in [
        "https://github.com/org/repo//base?ref=v1",
        "git@github.com:org/repo.git",
        "github.com/org/repo/base",
        "ssh://git@example.com/repo.git",
        "git::https://example.com/repo",
        "base?ref=main",
        "example.com/org/repo",
        "https://example.com/deployment.yaml",
    ] {
        for field in ["resources", "components"] {
            let files = files(&[("kustomization.yaml", &format!("{field}:\n- {entry}\n"))]);
            assert_says(&refused(&files, ""), &[&format!("kustomization.yaml: {field}[0]: `{entry}` is remote")]);
        }
    }
    let files = files(&[
        ("kustomization.yaml", "resources:\n- d.yaml\npatches:\n- path: https://example.com/patch.yaml\n"),
        ("d.yaml", &deployment("web")),
    ]);
    assert_says(&refused(&files, ""), &["patches[0].path", "is remote"]);
}

#[test]
fn paths_leaving_the_repository_are_refused() {
    for entry in ["../../../etc/passwd", "../../outside", "/etc/passwd", "..\\x", "base/../../.."] {
        let files = files(&[("app/kustomization.yaml", &format!("resources:\n- '{entry}'\n")), ("base/x", "")]);
        let said = refused(&files, "app");
        assert!(said.contains("leaves the repository") || said.contains("is not a relative path"), "{entry}: {said}");
        assert!(said.starts_with("app/kustomization.yaml: resources[0]: "), "{said}");
    }
    let files = files(&[
        ("kustomization.yaml", "resources:\n- d.yaml\npatchesStrategicMerge:\n- ../../p.yaml\n"),
        ("d.yaml", &deployment("web")),
    ]);
    assert_says(&refused(&files, ""), &["patchesStrategicMerge[0]", "leaves the repository"]);
    assert_says(&refused(&files, "../x"), &["leaves the repository"]);
}

#[test]
fn bases_may_sit_beside_the_overlay_but_files_must_be_beneath_it() {
    let files = files(&[
        ("base/kustomization.yaml", "resources:\n- d.yaml\n"),
        ("base/d.yaml", &deployment("web")),
        ("common/c.yaml", &config_map("c")),
        ("common/p.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n"),
        ("overlay/kustomization.yaml", "resources:\n- ../base\n"),
    ]);
    assert_eq!(ids(&build(&files, "overlay").unwrap()), ["Deployment/web"]);
    let with_file =
        files_with(&files, &[("overlay/kustomization.yaml", "resources:\n- ../base\n- ../common/c.yaml\n")]);
    assert_says(
        &refused(&with_file, "overlay"),
        &["resources[1]: `../common/c.yaml` is not in or below this kustomization's directory"],
    );
    let with_patch = files_with(
        &files,
        &[("overlay/kustomization.yaml", "resources:\n- ../base\npatches:\n- path: ../common/p.yaml\n")],
    );
    assert_says(
        &refused(&with_patch, "overlay"),
        &["patches[0].path", "not in or below this kustomization's directory"],
    );
}

#[test]
fn a_base_including_itself_or_an_overlay_above_it_is_a_cycle() {
    let itself = files(&[("base/kustomization.yaml", "resources:\n- .\n")]);
    assert_says(
        &refused(&itself, "base"),
        &["base/kustomization.yaml: resources[0]: a cycle: `base` is already being built"],
    );
    let parent = files(&[
        ("app/kustomization.yaml", "resources:\n- base\n"),
        ("app/base/kustomization.yaml", "resources:\n- ..\n"),
    ]);
    assert_says(
        &refused(&parent, "app"),
        &["app/base/kustomization.yaml: resources[0]: a cycle: `app` contains `app/base`"],
    );
    let mutual =
        files(&[("a/kustomization.yaml", "resources:\n- ../b\n"), ("b/kustomization.yaml", "resources:\n- ../a\n")]);
    assert_says(&refused(&mutual, "a"), &["b/kustomization.yaml: resources[0]: a cycle: `a` is already being built"]);
    let root =
        files(&[("kustomization.yaml", "resources:\n- sub\n"), ("sub/kustomization.yaml", "components:\n- ..\n")]);
    assert_says(&refused(&root, ""), &["components[0]: a cycle: the repository root contains `sub`"]);
}

#[test]
fn nesting_deeper_than_the_limit_is_refused() {
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut dir = String::from("l");
    for _ in 0..MAX_DEPTH + 1 {
        entries.push((format!("{dir}/kustomization.yaml"), "resources:\n- next\n".to_owned()));
        dir.push_str("/next");
    }
    entries.push((format!("{dir}/kustomization.yaml"), "resources: []\n".to_owned()));
    let mut files = MemoryFiles::new();
    for (path, text) in &entries {
        files.insert(path.clone(), text.clone());
    }
    assert_says(&refused(&files, "l"), &[&format!("nested more than {MAX_DEPTH} deep")]);
}

#[test]
fn a_base_reached_exponentially_often_hits_the_kustomization_limit() {
    // Each level lists both directories of the next: 2^20 visits for 40 files.
    let mut files = MemoryFiles::new();
    for level in 0..20 {
        for side in ["a", "b"] {
            files.insert(
                format!("l{level}/{side}/kustomization.yaml"),
                format!("resources:\n- ../../l{}/a\n- ../../l{}/b\n", level + 1, level + 1),
            );
        }
    }
    for side in ["a", "b"] {
        files.insert(format!("l20/{side}/kustomization.yaml"), "resources: []\n");
    }
    assert_says(&refused(&files, "l0/a"), &[&format!("more than {MAX_KUSTOMIZATIONS} kustomization files")]);
}

#[test]
fn too_many_objects_and_too_many_bytes_are_refused() {
    let text = (0..6).map(|i| config_map(&format!("c{i}"))).collect::<Vec<_>>().join("---\n");
    let files = files(&[("kustomization.yaml", "resources:\n- many.yaml\n"), ("many.yaml", &text)]);
    assert_says(
        &refused_within(&files, "", Limits { objects: 5, ..LIMITS }),
        &["resources[0]: the build holds more than 5 objects"],
    );
    assert_says(
        &refused_within(&files, "", Limits { bytes: 200, ..LIMITS }),
        &["many.yaml: cannot be read: is larger than 200 bytes"],
    );
    let big = format!("resources: []\n#{}\n", "x".repeat(MAX_KUSTOMIZATION_BYTES));
    let files = files_with(&files, &[("kustomization.yaml", &big)]);
    assert_says(&refused(&files, ""), &["kustomization.yaml: cannot be read: is larger than"]);
}

// === the kustomization model ===

#[test]
fn fields_outside_the_subset_are_refused_by_name() {
    for (field, says) in [
        ("helmCharts:\n- name: x\n", "helmCharts: not supported: Helm charts are not inflated"),
        ("helmGlobals:\n  chartHome: x\n", "helmGlobals: not supported"),
        ("helmChartInflationGenerator: []\n", "helmChartInflationGenerator: not supported"),
        (
            "generators:\n- plugin.yaml\n",
            "generators: not supported: generator plugins (exec or KRM functions) are not run",
        ),
        ("transformers:\n- t.yaml\n", "transformers: not supported: transformer plugins"),
        ("validators:\n- v.yaml\n", "validators: not supported"),
        ("openapi:\n  path: schema.json\n", "openapi: not supported"),
        ("configurations:\n- c.yaml\n", "configurations: not supported"),
        ("crds:\n- crd.yaml\n", "crds: not supported"),
        ("replacements: []\n", "replacements: not supported"),
        ("vars: []\n", "vars: not supported"),
        ("buildMetadata: [originAnnotations]\n", "buildMetadata: not supported"),
        ("imageTags: []\n", "imageTags: not supported"),
        ("colour: red\n", "colour: unknown field; a kustomization has resources, bases, components"),
        ("Resources: []\n", "Resources: unknown field; did you mean `resources`?"),
    ] {
        let files = files(&[("kustomization.yaml", &format!("resources: []\n{field}"))]);
        assert_says(&refused(&files, ""), &[&format!("kustomization.yaml: {says}")]);
    }
}

#[test]
fn kind_and_api_version_are_checked() {
    for (text, says) in [
        ("kind: Deployment\nresources: []\n", "kind: `Deployment`: expected Kustomization or Component"),
        (
            "apiVersion: v1\nresources: []\n",
            "apiVersion: `v1`: a Kustomization has apiVersion kustomize.config.k8s.io/v1beta1",
        ),
        (
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Component\nresources: []\n",
            "a Component has apiVersion kustomize.config.k8s.io/v1alpha1",
        ),
        ("- resources\n", "a kustomization is a map of fields"),
        ("kind: Kustomization\n", "the kustomization is empty"),
        ("resources: base\n", "resources: expected a list of paths, found a string"),
        ("resources:\n- {a: b}\n", "resources[0]: expected a path (a string), found a map"),
        ("namespace: [a]\nresources: []\n", "namespace: expected a string, found a list"),
        ("resources: []\n---\nresources: []\n", "holds one YAML document"),
        ("resources: [\n", "not YAML"),
        ("resources: []\nsortOptions:\n  order: random\n", "sortOptions.order: expected legacy or fifo"),
        ("resources: []\nsortOptions:\n  order: fifo\n  legacySortOptions: {}\n", "only with `order: legacy`"),
    ] {
        let files = files(&[("kustomization.yaml", text)]);
        assert_says(&refused(&files, ""), &[says]);
    }
    let ok = files(&[(
        "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nmetadata:\n  name: ignored\nresources: []\n",
    )]);
    assert!(build(&ok, "").unwrap().resources.is_empty());
}

// === components ===

#[test]
fn components_must_be_components_and_resources_must_not_be() {
    let files = files(&[
        ("kustomization.yaml", "resources:\n- comp\n"),
        ("comp/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: []\n"),
        ("plain/kustomization.yaml", "resources: []\n"),
    ]);
    assert_says(
        &refused(&files, ""),
        &["resources[0]: `comp/kustomization.yaml` is a Component: list it under `components`"],
    );
    let files = files_with(&files, &[("kustomization.yaml", "components:\n- plain\n")]);
    assert_says(&refused(&files, ""), &["components[0]: `plain/kustomization.yaml` is not a Component"]);
    let files = files_with(&files, &[("kustomization.yaml", "components:\n- comp/kustomization.yaml\n")]);
    assert_says(&refused(&files, ""), &["components[0]: `comp/kustomization.yaml` is a file"]);
}

#[test]
fn a_component_works_on_what_its_parent_accumulated_and_the_parent_patches_what_it_adds() {
    let component = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources:\n- extra.yaml\npatches:\n- target:\n    kind: Deployment\n  patch: |\n    - op: replace\n      path: /spec/replicas\n      value: 2\n";
    let files = files(&[
        (
            "kustomization.yaml",
            "resources:\n- d.yaml\ncomponents:\n- comp\npatches:\n- target:\n    kind: ConfigMap\n  patch: |\n    - op: add\n      path: /data/patched\n      value: by-parent\n",
        ),
        ("d.yaml", &deployment("web")),
        ("comp/kustomization.yaml", component),
        ("comp/extra.yaml", &config_map("extra")),
    ]);
    let build = build(&files, "").unwrap();
    assert_eq!(ids(&build), ["ConfigMap/extra", "Deployment/web"]);
    assert_eq!(
        build.resources[1].object["spec"]["replicas"],
        json!(2),
        "the component patched the parent's Deployment"
    );
    assert_eq!(
        build.resources[0].object["data"]["patched"],
        json!("by-parent"),
        "the parent patched the component's ConfigMap"
    );
}

// === transformers ===

#[test]
fn patches_apply_in_kustomizes_order_strategic_merge_then_patches_then_json6902() {
    let kustomization = "resources:\n- d.yaml\npatchesJson6902:\n- target:\n    kind: Deployment\n    name: web\n  patch: |\n    - op: test\n      path: /spec/replicas\n      value: 3\n    - op: replace\n      path: /spec/replicas\n      value: 4\npatches:\n- target:\n    kind: Deployment\n  patch: |\n    - op: test\n      path: /spec/replicas\n      value: 2\n    - op: replace\n      path: /spec/replicas\n      value: 3\npatchesStrategicMerge:\n- smp.yaml\n";
    let files = files(&[
        ("kustomization.yaml", kustomization),
        ("d.yaml", &deployment("web")),
        ("smp.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n"),
    ]);
    assert_eq!(build(&files, "").unwrap().resources[0].object["spec"]["replicas"], json!(4));
}

#[test]
fn an_overlay_patches_what_its_base_built_and_problems_name_the_overlay() {
    let files = files(&[
        ("base/kustomization.yaml", "resources:\n- d.yaml\n"),
        ("base/d.yaml", &deployment("web")),
        ("overlay/kustomization.yaml", "resources:\n- ../base\npatches:\n- path: p.yaml\n"),
        ("overlay/p.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 5\n"),
    ]);
    assert_eq!(build(&files, "overlay").unwrap().resources[0].object["spec"]["replicas"], json!(5));
    let wrong = files_with(
        &files,
        &[("overlay/p.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  replicas: 5\n")],
    );
    assert_says(
        &refused(&wrong, "overlay"),
        &["overlay/kustomization.yaml: patches[0]: no object matches the strategic merge patch"],
    );
}

#[test]
fn patch_targets_match_a_resources_original_name_and_namespace() {
    let mut resource = Resource::from_document(
        serde_json::from_str(r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"prod-web","namespace":"team-a"},"spec":{"replicas":1}}"#).unwrap(),
        Origin::Document { file: "d.yaml".into(), index: 1, line: 1 },
    );
    resource.previous = vec![
        PreviousId { name: "web".into(), namespace: None },
        PreviousId { name: "mid-web".into(), namespace: None },
    ];
    let kustomization = |patches: &str| crate::yaml::parse_one(patches).unwrap();
    let replicas = |text: &str| {
        let mut load = |_: &str| Err("no files".to_owned());
        let patches = Patches::read(&kustomization(text), &mut load).unwrap();
        let mut resources = vec![resource.clone()];
        patches.apply_patches_to(&mut resources).unwrap();
        resources[0].object["spec"]["replicas"].clone()
    };
    let by = |target: &str| {
        format!(
            "patches:\n- target:\n    {target}\n  patch: '[{{\"op\": \"replace\", \"path\": \"/spec/replicas\", \"value\": 9}}]'\n"
        )
    };
    assert_eq!(replicas(&by("name: web")), json!(9), "the original name");
    assert_eq!(replicas(&by("name: prod-web")), json!(9), "the current name");
    assert_eq!(replicas(&by("name: mid-web")), json!(1), "kustomize's Select does not look at names in between");
    assert_eq!(replicas(&by("namespace: default")), json!(9), "the original (effective) namespace");
    let smp = |name: &str, namespace: &str| {
        format!(
            "patches:\n- patch: |\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: {name}\n      namespace: {namespace}\n    spec:\n      replicas: 7\n"
        )
    };
    assert_eq!(replicas(&smp("web", "default")), json!(7), "a strategic merge patch names any earlier id");
    assert_eq!(replicas(&smp("mid-web", "default")), json!(7));
    assert_eq!(replicas(&smp("prod-web", "team-a")), json!(7));
}

#[test]
fn a_patch_that_renames_leaves_the_earlier_name_behind() {
    let mut resources = vec![Resource::from_document(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
        Origin::Document { file: "d.yaml".into(), index: 1, line: 1 },
    )];
    let kustomization = crate::yaml::parse_one(
        "patches:\n- target:\n    name: web\n  patch: '[{\"op\": \"replace\", \"path\": \"/metadata/name\", \"value\": \"api\"}]'\n",
    )
    .unwrap();
    let patches = Patches::read(&kustomization, &mut |_: &str| Err("no files".to_owned())).unwrap();
    patches.apply_patches_to(&mut resources).unwrap();
    assert_eq!(resources[0].name(), "api");
    assert_eq!(
        resources[0].previous,
        [PreviousId { name: "web".into(), namespace: None }],
        "references to `web` still find it"
    );
    patches.apply_patches_to(&mut resources).unwrap();
    assert_eq!(resources[0].previous.len(), 1, "a patch that changes nothing records nothing");
}

#[test]
fn strategic_merge_patches_find_their_objects_after_an_earlier_one_deleted_or_renamed() {
    let text = [deployment("a"), deployment("b"), deployment("c")].join("---\n");
    let kustomization = "resources:\n- all.yaml\nsortOptions:\n  order: fifo\npatches:\n- patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: a\n    $patch: delete\n- patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: c\n    spec:\n      replicas: 3\n- options:\n    allowNameChange: true\n  patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: b\n    spec:\n      replicas: 2\n- patch: |-\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: b\n    spec:\n      paused: true\n";
    let files = files(&[("kustomization.yaml", kustomization), ("all.yaml", &text)]);
    let built = build(&files, "").unwrap();
    assert_eq!(ids(&built), ["Deployment/b", "Deployment/c"]);
    assert_eq!(built.resources[0].object["spec"]["replicas"], json!(2));
    assert_eq!(built.resources[0].object["spec"]["paused"], json!(true));
    assert_eq!(built.resources[1].object["spec"]["replicas"], json!(3), "c, not the object that moved into a's place");
}
