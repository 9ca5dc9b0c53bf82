use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::kustomize::comparisons::counted;
use crate::kustomize::files::MemoryFiles;
use crate::kustomize::resource::PreviousId;

fn kustomization(yaml: &str) -> Value {
    crate::yaml::parse_one(yaml).expect("test YAML")
}

fn run(files: &MemoryFiles, yaml: &str) -> Result<Vec<Generated>, Vec<Problem>> {
    generate(&kustomization(yaml), "app/kustomization.yaml", files)
}

fn problems(files: &MemoryFiles, yaml: &str) -> Vec<String> {
    run(files, yaml).expect_err("problems").iter().map(ToString::to_string).collect()
}

fn one(files: &MemoryFiles, yaml: &str) -> Generated {
    let mut made = run(files, yaml).expect("generated");
    assert_eq!(made.len(), 1);
    made.remove(0)
}

#[test]
fn a_config_map_holds_envs_literals_and_files_read_beside_the_kustomization() {
    let mut files = MemoryFiles::new();
    files
        .insert("app/app.env", "A=1\n")
        .insert("app/conf/app.properties", "x=y\n")
        .insert("app/raw", b"\xff\xfe".to_vec());
    let made = one(
        &files,
        "configMapGenerator:\n- name: cm\n  namespace: team\n  envs: [app.env]\n  literals: [\"B='two'\"]\n  files: [conf/app.properties, bin=raw]\n",
    );
    assert_eq!(
        made.object,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "team"},
            "data": {"A": "1", "B": "two", "app.properties": "x=y\n"}, "binaryData": {"bin": "//4="}})
    );
    assert_eq!(
        (made.behavior, made.needs_hash, made.field.as_str()),
        (Behavior::Create, true, "configMapGenerator[0]")
    );
}

#[test]
fn an_empty_config_map_has_no_data_and_an_empty_secret_an_empty_map() {
    let made = run(&MemoryFiles::new(), "configMapGenerator: [{name: c}]\nsecretGenerator: [{name: s}]\n").unwrap();
    assert_eq!(made[0].object, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
    assert_eq!(
        made[1].object,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}, "type": "Opaque"})
    );
    assert_eq!(made[1].field, "secretGenerator[0]");
}

#[test]
fn a_secret_holds_every_value_in_base64_with_its_type() {
    let mut files = MemoryFiles::new();
    files.insert("app/tls.crt", "CERT").insert("app/tls.key", b"\xff".to_vec());
    let made = one(&files, "secretGenerator:\n- name: tls\n  type: kubernetes.io/tls\n  files: [tls.crt, tls.key]\n");
    assert_eq!(made.object["data"], json!({"tls.crt": "Q0VSVA==", "tls.key": "/w=="}));
    assert_eq!(made.object["type"], "kubernetes.io/tls");
}

#[test]
fn entry_options_win_over_generator_options_and_either_can_disable_the_hash() {
    let made = one(
        &MemoryFiles::new(),
        "generatorOptions:\n  labels: {a: global, b: global}\n  annotations: {n: global}\n  disableNameSuffixHash: true\n  immutable: true\nconfigMapGenerator:\n- name: c\n  options: {labels: {a: local}, disableNameSuffixHash: false}\n",
    );
    assert_eq!(made.object["metadata"]["labels"], json!({"a": "local", "b": "global"}));
    assert_eq!(made.object["metadata"]["annotations"], json!({"n": "global"}));
    assert_eq!(made.object["immutable"], true);
    assert!(!made.needs_hash, "a global disableNameSuffixHash cannot be turned off by an entry");
    let made = one(&MemoryFiles::new(), "configMapGenerator: [{name: c, options: {disableNameSuffixHash: true}}]");
    assert!(!made.needs_hash);
}

#[test]
fn behaviors_are_read_and_an_unknown_one_is_refused() {
    let made = run(
        &MemoryFiles::new(),
        "configMapGenerator: [{name: a, behavior: merge}, {name: b, behavior: replace}, {name: c, behavior: create}]",
    )
    .unwrap();
    assert_eq!(
        made.iter().map(|g| g.behavior).collect::<Vec<_>>(),
        [Behavior::Merge, Behavior::Replace, Behavior::Create]
    );
    assert_eq!(
        problems(&MemoryFiles::new(), "configMapGenerator: [{name: a, behavior: Merge}]"),
        ["app/kustomization.yaml: configMapGenerator[0].behavior: must be `create`, `merge` or `replace`"]
    );
}

#[test]
fn the_env_singular_field_is_read_after_envs() {
    let mut files = MemoryFiles::new();
    files.insert("app/a.env", "A=1").insert("app/b.env", "A=2");
    let found = problems(&files, "configMapGenerator: [{name: c, envs: [a.env], env: b.env}]");
    assert_eq!(
        found,
        ["app/kustomization.yaml: configMapGenerator[0].env line 1: the key `A` is already given by \
          configMapGenerator[0].envs[0] line 1; each key may appear once per entry"]
    );
}

#[test]
fn a_missing_name_unknown_fields_and_wrong_shapes_are_refused_by_name() {
    let found = problems(
        &MemoryFiles::new(),
        "configMapGenerator:\n- literals: [a=b]\n- name: x\n  colour: red\n  type: Opaque\n- name: yy\n  literals: a=b\n  options: {labels: {n: 1}}\nsecretGenerator: {name: s}\n",
    );
    assert_eq!(
        found,
        [
            "app/kustomization.yaml: configMapGenerator[0].name: a generated ConfigMap needs a name",
            "app/kustomization.yaml: configMapGenerator[1].colour: unknown field; a configMapGenerator entry takes name, namespace, behavior, literals, files, envs, env, options",
            "app/kustomization.yaml: configMapGenerator[1].type: unknown field; a configMapGenerator entry takes name, namespace, behavior, literals, files, envs, env, options",
            "app/kustomization.yaml: configMapGenerator[2].options.labels.n: must be a string; quote it",
            "app/kustomization.yaml: configMapGenerator[2].literals: must be a list of strings",
            "app/kustomization.yaml: secretGenerator: must be a list of generator entries (`- name: ...`)",
        ]
    );
}

#[test]
fn attacker_files_outside_the_kustomization_directory_are_refused() {
    let mut files = MemoryFiles::new();
    files.insert("secrets/key", "stolen").insert("app/ok", "x");
    let found = problems(
        &files,
        "configMapGenerator:\n- name: c\n  files: [ok, ../secrets/key, /etc/passwd, k=sub/../../secrets/key, https://example.com/x]\n  envs: [../secrets/key]\n",
    );
    assert_eq!(found.len(), 5, "{found:#?}");
    assert!(found[0].starts_with(
        "app/kustomization.yaml: configMapGenerator[0].envs[0]: leaves the kustomization's directory (`app`)"
    ));
    assert!(found[1].starts_with("app/kustomization.yaml: configMapGenerator[0].files[1]: leaves"));
    assert!(found[2].contains("files[2]: is an absolute path"));
    assert!(found[3].contains("files[3]: leaves"));
    assert!(found[4].contains("files[4]: is a URL; nothing is fetched"));
    assert!(found.iter().all(|p| !p.contains("stolen")));
}

#[test]
fn attacker_a_directory_a_missing_file_and_a_huge_file_are_refused() {
    let mut files = MemoryFiles::new();
    files.insert("app/dir/a", "x").insert("app/huge", vec![b'x'; MAX_GENERATED_BYTES + 1]);
    let found = problems(&files, "configMapGenerator: [{name: c, files: [dir, nothing, huge]}]");
    assert_eq!(
        found,
        [
            "app/kustomization.yaml: configMapGenerator[0].files[0]: `app/dir` is a directory; name each file (kustomize reads no directory)",
            "app/kustomization.yaml: configMapGenerator[0].files[1]: `app/nothing` does not exist",
            "app/kustomization.yaml: configMapGenerator[0].files[2]: `app/huge` has 1048577 bytes, more than the 1048576 a ConfigMap or Secret may hold",
        ]
    );
}

#[test]
fn attacker_many_sources_together_beyond_the_size_limit_are_refused() {
    let mut files = MemoryFiles::new();
    let half = vec![b'x'; MAX_GENERATED_BYTES / 2];
    files.insert("app/a", half.clone()).insert("app/b", half);
    assert_eq!(
        problems(&files, "configMapGenerator: [{name: c, files: [a, b]}]"),
        [
            "app/kustomization.yaml: configMapGenerator[0]: the generated ConfigMap would hold 1048578 bytes, more than Kubernetes' limit of 1048576"
        ]
    );
}

#[test]
fn attacker_an_env_key_without_a_value_never_reads_the_environment() {
    let mut files = MemoryFiles::new();
    files.insert("app/e.env", "HOME\n");
    let found = problems(&files, "secretGenerator: [{name: s, envs: [e.env]}]");
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("app/kustomization.yaml: secretGenerator[0].envs[0]: line 1 has no `=`"), "{found:?}");
}

#[test]
fn invalid_and_duplicate_keys_are_refused() {
    let mut files = MemoryFiles::new();
    files.insert("app/a b", "x").insert("app/dup", "x");
    let found = problems(&files, "configMapGenerator: [{name: c, literals: [dup=1, 'x/y=2'], files: [a b, dup]}]");
    assert_eq!(
        found,
        [
            "app/kustomization.yaml: configMapGenerator[0].literals[1]: the key `x/y` may hold only letters, digits, `-`, `_` and `.` (a ConfigMap or Secret key: letters, digits, `-`, `_`, `.`)",
            "app/kustomization.yaml: configMapGenerator[0].files[0]: the key `a b` may hold only letters, digits, `-`, `_` and `.` (a ConfigMap or Secret key: letters, digits, `-`, `_`, `.`)",
            "app/kustomization.yaml: configMapGenerator[0].files[1]: the key `dup` is already given by configMapGenerator[0].literals[0]; each key may appear once per entry",
        ]
    );
}

#[test]
fn attacker_a_secret_value_never_appears_in_a_message() {
    let marker = "s3cr3t-value";
    let mut files = MemoryFiles::new();
    files.insert("app/e.env", format!("{marker}\n=x{marker}\nA={marker}\n{marker} x=1\n"));
    let mut bad_utf8 = format!("B=\u{0}{marker}").into_bytes();
    bad_utf8.push(0xff);
    files.insert("app/f.env", bad_utf8);
    let yaml = format!(
        "secretGenerator:\n- name: s\n  literals: ['{marker}', '={marker}', '{marker} two=x', 'A={marker}']\n  envs: [e.env, f.env]\n  files: ['{marker}=x=y']\n"
    );
    let found = problems(&files, &yaml);
    // a path is not a value: only sources whose text holds values are tried here
    assert!(found.len() >= 6, "{found:#?}");
    for message in found {
        assert!(!message.contains(marker), "{message}");
    }
}

// === combine and absorb ===

fn existing(object: Value) -> Resource {
    Resource::from_document(object, Origin::Document { file: "base/cm.yaml".into(), index: 1, line: 1 })
}

fn generated(object: Value, behavior: Behavior, needs_hash: bool) -> Generated {
    Generated { object, behavior, needs_hash, field: "configMapGenerator[0]".into() }
}

#[test]
fn merge_keeps_the_existing_keys_labels_and_name_and_the_generated_values_win() {
    let mut old = existing(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "p-cm", "namespace": "team", "labels": {"a": "old", "b": "old"}, "annotations": {"x": "1"}},
        "data": {"k": "old", "keep": "1"}, "binaryData": {"bin": "//4="}}));
    old.needs_hash = true;
    let new = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"a": "new"}},
        "data": {"k": "new"}});
    combine(&mut old, generated(new, Behavior::Merge, true)).unwrap();
    assert_eq!(
        old.object,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "p-cm", "namespace": "team", "labels": {"a": "new", "b": "old"}, "annotations": {"x": "1"}},
            "data": {"k": "new", "keep": "1"}, "binaryData": {"bin": "//4="}})
    );
    assert!(old.needs_hash && old.generated);
}

#[test]
fn the_hash_is_kept_only_when_both_the_existing_object_and_the_entry_want_it() {
    for (old_hash, new_hash) in [(false, true), (true, false), (true, true)] {
        let mut old = existing(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}));
        old.needs_hash = old_hash;
        let new = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        combine(&mut old, generated(new, Behavior::Replace, new_hash)).unwrap();
        assert_eq!(old.needs_hash, old_hash && new_hash);
    }
}

#[test]
fn replace_drops_the_existing_data_but_keeps_its_labels_and_annotations() {
    let mut old =
        existing(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"a": "1"}},
        "type": "kubernetes.io/tls", "stringData": {"x": "y"}, "data": {"old": "eA=="}}));
    let new = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"n": "eQ=="}, "type": "Opaque"});
    combine(&mut old, generated(new, Behavior::Replace, true)).unwrap();
    assert_eq!(
        old.object,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"a": "1"}},
            "data": {"n": "eQ=="}, "type": "Opaque"})
    );
}

#[test]
fn a_merge_that_would_silently_drop_fields_is_refused() {
    let cases = [
        (json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"}), "`type`"),
        (json!({"metadata": {"name": "s"}, "stringData": {"x": "y"}}), "`stringData`"),
        (json!({"metadata": {"name": "s", "finalizers": ["f"]}}), "`metadata.finalizers`"),
        (json!({"metadata": {"name": "s"}, "immutable": true}), "`immutable`"),
    ];
    for (mut old, dropped) in cases {
        old["apiVersion"] = "v1".into();
        old["kind"] = "Secret".into();
        let mut old = existing(old);
        let new =
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}, "type": "Opaque"});
        let problem = combine(&mut old, generated(new, Behavior::Merge, true)).unwrap_err();
        assert!(problem.message.contains(&format!("drop the existing object's {dropped}")), "{problem}");
    }
    // the same type and immutability are no loss
    let mut old = existing(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque", "immutable": false}),
    );
    let new = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}, "type": "Opaque"});
    combine(&mut old, generated(new, Behavior::Merge, true)).unwrap();
    assert_eq!(old.object.get("data"), None, "kustomize clears a merged map left empty");
}

#[test]
fn create_over_an_existing_object_is_refused() {
    let mut old = existing(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}));
    let new = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
    let problem = combine(&mut old, generated(new, Behavior::Create, true)).unwrap_err();
    assert_eq!(
        problem.to_string(),
        "behavior: a ConfigMap named `cm` already exists; set `behavior: merge` or `behavior: replace` to change it, \
         or choose another name"
    );
}

#[test]
fn absorb_appends_merges_by_an_earlier_name_and_refuses_a_merge_into_nothing() {
    let mut renamed = existing(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p-cm", "namespace": "team"}, "data": {"a": "1"}}),
    );
    renamed.previous.push(PreviousId { name: "cm".into(), namespace: None });
    let mut resources = vec![renamed];
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"b": "2"}});
    absorb(&mut resources, generated(cm("cm"), Behavior::Merge, true), "over/kustomization.yaml").unwrap();
    assert_eq!(resources.len(), 1);
    assert_eq!(resources[0].object["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(resources[0].name(), "p-cm");

    absorb(&mut resources, generated(cm("other"), Behavior::Create, true), "over/kustomization.yaml").unwrap();
    assert_eq!(resources.len(), 2);
    assert_eq!(
        resources[1].origin,
        Origin::Generator { file: "over/kustomization.yaml".into(), field: "configMapGenerator[0]".into() }
    );
    assert!(resources[1].generated && resources[1].needs_hash);

    let problem = absorb(&mut resources, generated(cm("absent"), Behavior::Replace, true), "over/kustomization.yaml")
        .unwrap_err();
    assert_eq!(
        problem.to_string(),
        "over/kustomization.yaml: configMapGenerator[0].behavior: there is no ConfigMap `absent` in namespace \
         `default` to replace: declare or generate it in a base, or drop `behavior`"
    );

    // a problem of `combine` is placed under the entry and in the kustomization file
    resources[1].object["immutable"] = true.into();
    let problem =
        absorb(&mut resources, generated(cm("other"), Behavior::Merge, true), "over/kustomization.yaml").unwrap_err();
    assert!(
        problem.to_string().starts_with(
            "over/kustomization.yaml: configMapGenerator[0].behavior: merging would drop the existing object's `immutable`"
        ),
        "{problem}"
    );
}

// === absorb: the index against the scan it replaced ===

/// `absorb` as it was before the index: a scan of every object for each entry.
fn absorb_before(resources: &mut Vec<Resource>, generated: Generated, kustomization_file: &str) -> Result<(), Problem> {
    let effective = |ns: Option<&str>| match ns {
        None | Some("") => "default".to_owned(),
        Some(ns) => ns.to_owned(),
    };
    let (kind, name, namespace) =
        (generated.kind().to_owned(), generated.name().to_owned(), effective(generated.namespace()));
    let matches: Vec<usize> = resources
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.kind() == kind
                && r.object.get("apiVersion").and_then(Value::as_str) == Some("v1")
                && ((r.name() == name
                    && effective(r.object.pointer("/metadata/namespace").and_then(Value::as_str)) == namespace)
                    || r.previous.iter().any(|p| p.name == name && effective(p.namespace.as_deref()) == namespace))
        })
        .map(|(i, _)| i)
        .collect();
    let located = |p: Problem| p.located(kustomization_file, None, None);
    match (matches.as_slice(), generated.behavior) {
        ([], Behavior::Create) => {
            resources.push(generated.into_resource(kustomization_file));
            Ok(())
        }
        ([], behavior) => Err(located(Problem::field(
            format!("{}.behavior", generated.field),
            format!(
                "there is no {kind} `{name}` in namespace `{namespace}` to {}: declare or generate it in a base, or \
                 drop `behavior`",
                if behavior == Behavior::Merge { "merge into" } else { "replace" }
            ),
        ))),
        ([one], _) => {
            let field = generated.field.clone();
            combine(&mut resources[*one], generated).map_err(|p| located(p.under(&field)))
        }
        (_, _) => Err(located(Problem::field(
            generated.field.clone(),
            format!("{} objects answer to {kind} `{name}` in namespace `{namespace}`; rename one", matches.len()),
        ))),
    }
}

const NAMES: [&str; 3] = ["a", "b", "c"];
const NAMESPACES: [Option<&str>; 4] = [None, Some(""), Some("default"), Some("team")];

/// An object of the build: a ConfigMap or Secret (or, to be skipped, a ConfigMap of another
/// apiVersion), maybe renamed from an earlier name and namespace.
fn build_object() -> impl Strategy<Value = Resource> {
    (0..3usize, 0..3usize, 0..4usize, proptest::option::of((0..3usize, 0..4usize))).prop_map(
        |(kind, name, namespace, earlier)| {
            let (api_version, kind) = [("v1", "ConfigMap"), ("v1", "Secret"), ("example.com/v1", "ConfigMap")][kind];
            let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": NAMES[name]}});
            if let Some(namespace) = NAMESPACES[namespace] {
                object["metadata"]["namespace"] = json!(namespace);
            }
            let mut resource = existing(object);
            if let Some((name, namespace)) = earlier {
                resource
                    .previous
                    .push(PreviousId { name: NAMES[name].into(), namespace: NAMESPACES[namespace].map(str::to_owned) });
            }
            resource
        },
    )
}

/// A generator's object of either kind, name and namespace, with any behavior.
fn generator_object() -> impl Strategy<Value = Generated> {
    (any::<bool>(), 0..3usize, 0..4usize, 0..3usize).prop_map(|(secret, name, namespace, behavior)| {
        let kind = if secret { "Secret" } else { "ConfigMap" };
        let mut object =
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": NAMES[name]}, "data": {"k": "v"}});
        if let Some(namespace) = NAMESPACES[namespace] {
            object["metadata"]["namespace"] = json!(namespace);
        }
        let behavior = [Behavior::Create, Behavior::Merge, Behavior::Replace][behavior];
        generated(object, behavior, true)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn absorbing_through_the_index_gives_what_the_scan_gave(
        resources in proptest::collection::vec(build_object(), 0..6),
        generated in proptest::collection::vec(generator_object(), 0..6),
    ) {
        let mut indexed = resources.clone();
        let absorbed = absorb_all(&mut indexed, generated.clone(), "k.yaml");
        let mut before = resources;
        let scanned = generated.into_iter().try_for_each(|made| absorb_before(&mut before, made, "k.yaml"));
        prop_assert_eq!(absorbed, scanned);
        prop_assert_eq!(indexed, before);
    }
}

#[test]
fn attacker_five_thousand_merges_into_five_thousand_objects_take_linear_work() {
    let count = 5_000;
    let cm = |name: String, key: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {key: "v"}});
    let mut resources: Vec<Resource> = (0..count).map(|i| existing(cm(format!("cm-{i}"), "old"))).collect();
    let merges: Vec<Generated> =
        (0..count).map(|i| generated(cm(format!("cm-{i}"), "new"), Behavior::Merge, true)).collect();
    let creates: Vec<Generated> =
        (0..count).map(|i| generated(cm(format!("new-{i}"), "new"), Behavior::Create, true)).collect();
    let all = merges.into_iter().chain(creates).collect();
    let (absorbed, work) = counted(|| absorb_all(&mut resources, all, "k.yaml"));
    absorbed.expect("absorbed");
    assert_eq!(resources.len(), 2 * count);
    assert_eq!(resources[count - 1].object["data"], json!({"old": "v", "new": "v"}));
    // A hash or two per object and per entry; the scan compared every entry with every object.
    assert!(work <= 3 * (count + 2 * count), "{work} comparisons for {} entries", 2 * count);
}
