//! `configMapGenerator`, `secretGenerator` and the content hash against `kubectl kustomize`:
//! generator-only kustomizations written to a temporary directory, built by kubectl and by
//! `kustomize::generator::generate` with the hash suffix appended as the build appends it.
//! One kubectl run per test (the property test: one per case, each case many objects).

use std::collections::BTreeMap;
use std::path::Path;

use cdtarget::kustomize::files::MemoryFiles;
use cdtarget::kustomize::generator::{absorb, content_hash, generate};
use cdtarget::kustomize::resource::{Origin, Resource};
use cdtarget::problem::Problem;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{assert_same, kubectl_available, kustomize};

/// The files of one kustomization directory (the kustomization itself at `kustomization.yaml`).
type Case = BTreeMap<String, Vec<u8>>;

fn case(kustomization: &str, files: &[(&str, &[u8])]) -> Case {
    let mut case: Case = files.iter().map(|(p, b)| (p.to_string(), b.to_vec())).collect();
    case.insert("kustomization.yaml".into(), kustomization.as_bytes().to_vec());
    case
}

/// A kustomization as JSON (which is YAML), with U+2028 and U+2029 escaped: kubectl's YAML reader
/// takes them raw for line breaks and folds the blanks before them, a YAML 1.2 reader does not.
fn json_text(kustomization: &Value) -> String {
    kustomization.to_string().replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029")
}

fn write(dir: &Path, case: &Case) {
    for (path, bytes) in case {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }
}

fn memory(case: &Case) -> MemoryFiles {
    let mut files = MemoryFiles::new();
    for (path, bytes) in case {
        files.insert(path.clone(), bytes.clone());
    }
    files
}

/// The generated objects of the kustomization at `file`, absorbed into `resources` and named
/// with their hash as the build names them.
fn ours_into(resources: &mut Vec<Resource>, files: &MemoryFiles, file: &str) -> Result<(), Vec<Problem>> {
    let text = String::from_utf8(cdtarget::kustomize::files::Files::read(files, file).expect("read")).expect("UTF-8");
    let kustomization = cdtarget::yaml::parse_one(&text).expect("YAML");
    for generated in generate(&kustomization, file, files)? {
        absorb(resources, generated, file).map_err(|p| vec![p])?;
    }
    Ok(())
}

fn hashed(resources: Vec<Resource>) -> Vec<Value> {
    resources
        .into_iter()
        .map(|r| {
            let mut object = r.object;
            if r.needs_hash {
                let hash = content_hash(&object).expect("a ConfigMap or Secret");
                let name = object["metadata"]["name"].as_str().expect("a name").to_owned();
                object["metadata"]["name"] = format!("{name}-{hash}").into();
            }
            object
        })
        .collect()
}

/// Drops the ConfigMap values holding U+2028 or U+2029: kubectl prints them in a single-quoted
/// scalar with indentation after each (its YAML emitter takes them for line breaks), which a YAML
/// 1.2 reader reads back with the spaces. The name still carries the hash of the whole data.
fn without_line_separators(objects: Vec<Value>) -> Vec<Value> {
    objects
        .into_iter()
        .map(|mut object| {
            if let Some(data) = object.get_mut("data").and_then(Value::as_object_mut) {
                data.retain(|_, v| !v.as_str().is_some_and(|s| s.contains(['\u{2028}', '\u{2029}'])));
            }
            object
        })
        .collect()
}

/// Builds a one-level generator-only case both ways and asserts the same objects.
fn same(test: &str, case: &Case) {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), case);
    let built = kustomize(dir.path()).unwrap_or_else(|said| panic!("{test}: kubectl kustomize failed: {said}"));
    let mut resources = Vec::new();
    ours_into(&mut resources, &memory(case), "kustomization.yaml")
        .unwrap_or_else(|p| panic!("{test}: ours failed: {p:?}"));
    assert_same(test, without_line_separators(built), without_line_separators(hashed(resources)));
}

#[test]
fn literals_with_characters_go_escapes_and_many_keys_hash_as_kustomize_hashes_them() {
    let test = "literals_with_characters_go_escapes_and_many_keys_hash_as_kustomize_hashes_them";
    if !kubectl_available(test) {
        return;
    }
    // JSON is YAML: every character reaches kustomize exactly
    let literals = json!([
        "html=<a href=\"x\">&amp;</a>",
        "separators=a\u{2028}b\u{2029}c",
        "controls=\u{8}\u{c}\u{1}\u{1f}\t",
        "unicode=é漢字😀",
        "multi=line one\nline two\n",
        "quoted='single'",
        "dquoted=\"double\"",
        "half='open",
        "equals=a=b=c",
        "empty=",
        "backslash=C:\\path\\\"q\"",
    ]);
    let many: Vec<String> = (0..300).map(|i| format!("key-{i:03}=value {i}")).collect();
    let kustomization = json!({
        "configMapGenerator": [{"name": "chars", "literals": literals}, {"name": "many", "literals": many}],
        "secretGenerator": [{"name": "chars", "literals": literals}, {"name": "many", "literals": many}],
    });
    same(test, &case(&json_text(&kustomization), &[]));
}

#[test]
fn files_envs_and_binary_data_are_generated_as_kustomize_generates_them() {
    let test = "files_envs_and_binary_data_are_generated_as_kustomize_generates_them";
    if !kubectl_available(test) {
        return;
    }
    let kustomization = "\
configMapGenerator:
- name: from-files
  files: [conf/app.properties, renamed=conf/app.properties, raw.bin, empty.txt]
- name: from-envs
  envs: [a.env, b.env]
  env: c.env
secretGenerator:
- name: from-files
  files: [conf/app.properties, raw.bin, big=big.txt]
- name: from-envs
  envs: [a.env]
";
    let big = "0123456789abcdef".repeat(40);
    let files: &[(&str, &[u8])] = &[
        ("conf/app.properties", b"a=1\nb = two\n# comment\n"),
        ("raw.bin", b"\x00\xff\xfe\x80binary"),
        ("empty.txt", b""),
        ("a.env", b"\xEF\xBB\xBFA=1\r\n# comment\n\n   B= spaced value \nC=x=y\nD=\"kept quotes\"\n"),
        ("b.env", b"E=<>&\nF=\xc3\xa9"),
        ("c.env", b"G=last"),
        ("big.txt", big.as_bytes()),
    ];
    same(test, &case(kustomization, files));
}

#[test]
fn options_types_namespaces_and_empty_generators_match_kustomize() {
    let test = "options_types_namespaces_and_empty_generators_match_kustomize";
    if !kubectl_available(test) {
        return;
    }
    let kustomization = "\
generatorOptions:
  labels: {team: a, tier: global}
  annotations: {note: global}
configMapGenerator:
- name: empty
- name: labelled
  namespace: team-a
  literals: [a=b]
  options:
    labels: {tier: local}
    annotations: {extra: \"yes\"}
    immutable: true
- name: unhashed
  literals: [a=b]
  options: {disableNameSuffixHash: true}
secretGenerator:
- name: empty
- name: tls
  type: kubernetes.io/tls
  literals: [tls.crt=CERT, tls.key=KEY]
- name: custom
  type: example.com/custom
  literals: [a=b]
  options: {immutable: true}
";
    same(test, &case(kustomization, &[]));
}

#[test]
fn labels_annotations_namespace_and_name_do_not_change_the_hash() {
    let test = "labels_annotations_namespace_and_name_do_not_change_the_hash";
    if !kubectl_available(test) {
        return;
    }
    let names = |kustomization: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), &case(kustomization, &[]));
        let built = kustomize(dir.path()).expect("kubectl kustomize builds");
        built.iter().map(|o| o["metadata"]["name"].as_str().unwrap_or_default().to_owned()).collect::<Vec<_>>()
    };
    let plain = names("configMapGenerator: [{name: c, literals: [a=b]}]");
    let decorated = names(
        "configMapGenerator: [{name: c, namespace: x, literals: [a=b], options: {labels: {l: v}, annotations: {note: v}, immutable: true}}]",
    );
    assert_eq!(plain, decorated, "kustomize hashes neither labels, annotations, namespace nor immutable");
    let renamed = names("namePrefix: p-\nconfigMapGenerator: [{name: other, literals: [a=b]}]");
    let suffix = |name: &str| name.rsplit('-').next().unwrap_or_default().to_owned();
    assert_eq!(suffix(&renamed[0]), suffix(&plain[0]), "nor the name (kyaml looks `metadata/name` up as one field)");
    let ours = |object: Value| format!("c-{}", content_hash(&object).unwrap());
    let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}});
    let mut labelled = base.clone();
    labelled["metadata"]["labels"] = json!({"l": "v"});
    labelled["metadata"]["annotations"] = json!({"note": "v"});
    labelled["metadata"]["namespace"] = "x".into();
    labelled["immutable"] = true.into();
    assert_eq!([ours(base), ours(labelled)], [plain[0].clone(), plain[0].clone()]);
}

#[test]
fn merge_and_replace_over_a_base_match_kustomize() {
    let test = "merge_and_replace_over_a_base_match_kustomize";
    if !kubectl_available(test) {
        return;
    }
    let base = "\
resources: [res.yaml]
configMapGenerator:
- name: gen
  literals: [a=1, b=2]
  options: {labels: {base: \"yes\"}, annotations: {ba: \"1\"}}
- name: gen2
  literals: [a=1]
  options: {disableNameSuffixHash: true}
secretGenerator:
- name: sec
  literals: [user=admin]
";
    let res = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: plain, labels: {pl: x}}
data: {a: \"1\"}
";
    let over = "\
resources: [../base]
configMapGenerator:
- name: plain
  behavior: merge
  literals: [b=2]
- name: gen
  behavior: merge
  literals: [b=3, c=4]
  options: {labels: {over: \"yes\"}}
- name: gen2
  behavior: merge
  literals: [z=1]
- name: gen
  behavior: replace
  literals: [only=1]
secretGenerator:
- name: sec
  behavior: merge
  literals: [password=hunter2]
";
    let mut case = case("", &[("base/kustomization.yaml", base.as_bytes()), ("base/res.yaml", res.as_bytes())]);
    case.remove("kustomization.yaml");
    case.insert("over/kustomization.yaml".into(), over.as_bytes().to_vec());
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &case);
    let built = kustomize(&dir.path().join("over")).unwrap_or_else(|said| panic!("kubectl kustomize failed: {said}"));

    // the base's resources, then its generators, then the overlay's (the tree slice's order)
    let files = memory(&case);
    let object = cdtarget::yaml::parse_one(res).expect("YAML");
    let mut resources =
        vec![Resource::from_document(object, Origin::Document { file: "base/res.yaml".into(), index: 1, line: 1 })];
    ours_into(&mut resources, &files, "base/kustomization.yaml").expect("base generators");
    ours_into(&mut resources, &files, "over/kustomization.yaml").expect("overlay generators");
    assert_same(test, built, hashed(resources));
}

#[test]
fn kustomize_sets_an_env_key_without_equals_empty_and_cdtarget_refuses_it() {
    let test = "kustomize_sets_an_env_key_without_equals_empty_and_cdtarget_refuses_it";
    if !kubectl_available(test) {
        return;
    }
    let case = case("configMapGenerator: [{name: c, envs: [e.env]}]", &[("e.env", b"PATH\n")]);
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &case);
    let built = kustomize(dir.path()).expect("kubectl kustomize builds it");
    assert_eq!(built[0]["data"], json!({"PATH": ""}), "kustomize v5.5 reads no environment either");
    let problems = ours_into(&mut Vec::new(), &memory(&case), "kustomization.yaml").expect_err("refused");
    assert!(problems[0].to_string().contains("configMapGenerator[0].envs[0]: line 1 has no `=`"), "{problems:?}");
}

#[test]
fn kustomize_turns_a_tls_secret_opaque_on_merge_and_cdtarget_refuses_it() {
    let test = "kustomize_turns_a_tls_secret_opaque_on_merge_and_cdtarget_refuses_it";
    if !kubectl_available(test) {
        return;
    }
    let secret =
        "apiVersion: v1\nkind: Secret\nmetadata: {name: tls}\ntype: kubernetes.io/tls\ndata: {tls.crt: Q0VSVA==}\n";
    let case = case(
        "resources: [secret.yaml]\nsecretGenerator: [{name: tls, behavior: merge, literals: [tls.key=KEY]}]",
        &[("secret.yaml", secret.as_bytes())],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &case);
    let built = kustomize(dir.path()).expect("kubectl kustomize builds it");
    assert_eq!(built[0]["type"], "Opaque", "kustomize v5.5 keeps only the generated type");
    let object = cdtarget::yaml::parse_one(secret).expect("YAML");
    let mut resources =
        vec![Resource::from_document(object, Origin::Document { file: "secret.yaml".into(), index: 1, line: 1 })];
    let problems = ours_into(&mut resources, &memory(&case), "kustomization.yaml").expect_err("refused");
    assert!(problems[0].to_string().contains("merging would drop the existing object's `type`"), "{problems:?}");
}

#[test]
fn kustomize_refuses_a_generator_file_above_the_kustomization_and_so_does_cdtarget() {
    let test = "kustomize_refuses_a_generator_file_above_the_kustomization_and_so_does_cdtarget";
    if !kubectl_available(test) {
        return;
    }
    let mut case = case(
        "",
        &[
            ("outside.txt", b"x"),
            ("app/kustomization.yaml", b"configMapGenerator: [{name: c, files: [../outside.txt]}]"),
        ],
    );
    case.remove("kustomization.yaml");
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &case);
    let said = kustomize(&dir.path().join("app")).expect_err("kubectl kustomize refuses it");
    assert!(said.contains("security") || said.contains("outside"), "{said}");
    let problems = ours_into(&mut Vec::new(), &memory(&case), "app/kustomization.yaml").expect_err("refused");
    assert!(problems[0].to_string().contains("files[0]: leaves the kustomization's directory"), "{problems:?}");
}

#[test]
fn a_key_kustomize_reads_as_a_number_fails_it_and_builds_here() {
    let test = "a_key_kustomize_reads_as_a_number_fails_it_and_builds_here";
    if !kubectl_available(test) {
        return;
    }
    let case = case("configMapGenerator: [{name: c, literals: ['0=zero', 'true=yes']}]", &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &case);
    let said = kustomize(dir.path()).expect_err("kustomize v5.5 fails on its own output");
    assert!(said.contains("unsupported type"), "{said}");
    let mut resources = Vec::new();
    ours_into(&mut resources, &memory(&case), "kustomization.yaml").expect("a valid ConfigMap key builds");
    assert_eq!(resources[0].object["data"], json!({"0": "zero", "true": "yes"}));
}

// === the property test ===

/// Each case spawns kubectl once for several objects; `KUSTOMIZE_PROPTEST_CASES` raises it.
fn cases() -> u32 {
    std::env::var("KUSTOMIZE_PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(4)
}

/// A ConfigMap key (Kubernetes' `IsConfigMapKey`) that YAML reads as a string: kustomize fails on
/// one that reads as a number or a boolean (`a_key_kustomize_reads_as_a_number_fails_it_and_builds_here`).
fn key() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9._-]{0,7}".prop_filter("a YAML boolean or null", |k| {
        !["true", "false", "null", "yes", "no", "on", "off", "y", "n"].contains(&k.to_lowercase().as_str())
    })
}

/// Values with what Go's JSON encoder escapes (HTML characters, controls), quotes kustomize's
/// literal parser strips, and multi-byte characters; YAML-printable only. Not U+2028 and U+2029:
/// kubectl prints them raw in block scalars too, where a YAML 1.2 reader takes the text after them
/// for new keys (`"\n\u{2028}"` read back as a key `\u{2028}kind`); the literals test covers
/// their escaping in the hash.
fn value() -> impl Strategy<Value = String> {
    "[a-z0-9 =<>&'\"\\\\\n\t\u{8}\u{c}\u{1}\u{1b}é漢😀#:-]{0,12}"
}

fn entry() -> impl Strategy<Value = (bool, Option<&'static str>, BTreeMap<String, String>)> {
    (
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["Opaque", "kubernetes.io/tls", "example.com/x"])),
        prop::collection::btree_map(key(), value(), 0..6),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_data_hashes_as_kubectl_kustomize_hashes_it(entries in prop::collection::vec(entry(), 1..8)) {
        let test = "random_data_hashes_as_kubectl_kustomize_hashes_it";
        if !kubectl_available(test) {
            return Ok(());
        }
        let (mut config_maps, mut secrets) = (Vec::new(), Vec::new());
        for (i, (secret, kind, data)) in entries.iter().enumerate() {
            let literals: Vec<String> = data.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let mut entry = json!({"name": format!("g{i}"), "literals": literals});
            if *secret {
                if let Some(kind) = kind {
                    entry["type"] = (*kind).into();
                }
                secrets.push(entry);
            } else {
                config_maps.push(entry);
            }
        }
        let kustomization = json!({"configMapGenerator": config_maps, "secretGenerator": secrets});
        same(test, &case(&json_text(&kustomization), &[]));
    }
}
