//! The rendered ScaledObject and TriggerAuthentication validate against KEDA's real CRD schemas
//! (read from `../shared/contracts/keda/`, never copied into the project), plus the CEL rule
//! a JSON-schema validator does not evaluate; and every rendered ScaledJob (and ScaledObject)
//! validates against the CRDs of the KEDA releases it is rendered for, read from the Go module
//! cache (`go mod download` in `hack/tools/keda-v2.21` and `keda-v2.20`, the modules pinning them).

use std::path::PathBuf;
use std::process::Command;

use cdtarget::api::keda::KedaVersion;
use serde_json::Value;

use super::golden::{documents, example_output, example_output_for};
use super::support::project_dir;

/// The pinned KEDA releases, each with the module of `hack/tools/` that pins it.
const PINNED: [(KedaVersion, &str, &str); 2] = [
    (KedaVersion::V2_21_0, "hack/tools/keda-v2.21", "v2.21.0"),
    (KedaVersion::new(2, 20, 2), "hack/tools/keda-v2.20", "v2.20.2"),
];

/// The `openAPIV3Schema` of `file` in `config/crd/bases/` of KEDA's module at `tag`, downloaded
/// (or found in the module cache) by `go mod download` in `module`; `None`, saying so, where Go
/// or the module is not available (as for the contracts' CRDs above).
fn module_schema(module: &str, tag: &str, file: &str) -> Option<Value> {
    let output = Command::new("go")
        .args(["mod", "download", "-json", &format!("github.com/kedacore/keda/v2@{tag}")])
        .current_dir(project_dir().join(module))
        .output();
    let dir = output.ok().filter(|o| o.status.success()).and_then(|o| {
        let answer: Value = serde_json::from_slice(&o.stdout).ok()?;
        answer.get("Dir").and_then(Value::as_str).map(PathBuf::from)
    });
    let Some(dir) = dir else {
        eprintln!("SKIPPED: KEDA {tag} is not in the Go module cache and cannot be downloaded (no Go, or offline)");
        return None;
    };
    let path = dir.join("config/crd/bases").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let crd = cdtarget::yaml::parse_one(&text).expect("KEDA CRD is YAML");
    Some(crd.pointer("/spec/versions/0/schema/openAPIV3Schema").cloned().expect("CRD has a schema"))
}

/// Every `x-kubernetes-validations` rule in `schema`, with its path.
fn cel_rules(schema: &Value, path: &str, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "x-kubernetes-validations" {
                    out.push(format!("{path}: {value}"));
                } else {
                    cel_rules(value, &format!("{path}/{key}"), out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| cel_rules(item, path, out)),
        _ => {}
    }
}

fn rendered_for(version: KedaVersion, kind: &str) -> Vec<Value> {
    documents(&example_output_for(version))
        .into_iter()
        .filter(|(k, _, _)| k == kind)
        .map(|(_, _, text)| cdtarget::yaml::parse_one(&text).unwrap())
        .collect()
}

fn keda_schema(file: &str) -> Option<Value> {
    let path: PathBuf = project_dir().join("../shared/contracts/keda").join(file);
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!(
            "SKIPPED: KEDA CRD schema {} is absent (only CI and the developers' machines have it)",
            path.display()
        );
        return None;
    };
    let crd = cdtarget::yaml::parse_one(&text).expect("KEDA CRD is YAML");
    Some(crd.pointer("/spec/versions/0/schema/openAPIV3Schema").cloned().expect("CRD has a schema"))
}

fn rendered(kind: &str) -> Vec<Value> {
    documents(&example_output())
        .into_iter()
        .filter(|(k, _, _)| k == kind)
        .map(|(_, _, text)| cdtarget::yaml::parse_one(&text).unwrap())
        .collect()
}

fn assert_valid(schema: &Value, objects: &[Value]) {
    let validator = jsonschema::draft4::new(schema).expect("KEDA schema compiles");
    assert!(!objects.is_empty());
    for object in objects {
        let errors: Vec<String> =
            validator.iter_errors(object).map(|e| format!("{}: {e}", e.instance_path())).collect();
        assert!(errors.is_empty(), "{} does not satisfy KEDA's schema: {errors:#?}", object["metadata"]["name"]);
    }
}

#[test]
fn rendered_scaled_objects_satisfy_kedas_crd_schema_and_cel_rule() {
    let Some(schema) = keda_schema("keda.sh_scaledobjects.yaml") else { return };
    let objects = rendered("ScaledObject");
    assert_valid(&schema, &objects);
    for object in &objects {
        let spec = &object["spec"];
        // The CEL rule: minReplicaCount <= (maxReplicaCount or 100).
        let min = spec["minReplicaCount"].as_i64().unwrap_or(0);
        let max = spec["maxReplicaCount"].as_i64().unwrap_or(100);
        assert!(min <= max, "{}: min {min} > max {max}", object["metadata"]["name"]);
        // KEDA names the HPA keda-hpa-<name> and rejects it past 63 characters.
        assert!(object["metadata"]["name"].as_str().unwrap().len() <= 54);
        for trigger in spec["triggers"].as_array().unwrap() {
            assert!(trigger["metadata"].as_object().unwrap().values().all(Value::is_string));
        }
    }
}

#[test]
fn rendered_trigger_authentications_satisfy_kedas_crd_schema() {
    let Some(schema) = keda_schema("keda.sh_triggerauthentications.yaml") else { return };
    assert_valid(&schema, &rendered("TriggerAuthentication"));
}

#[test]
fn keda_schema_check_catches_a_broken_scaled_object() {
    let Some(schema) = keda_schema("keda.sh_scaledobjects.yaml") else { return };
    let mut object = rendered("ScaledObject").remove(0);
    // A bare number in trigger metadata is what the seed could emit; KEDA's schema refuses it.
    object["spec"]["triggers"][0]["metadata"]["targetPipelinesQueueLength"] = Value::from(1);
    let validator = jsonschema::draft4::new(&schema).unwrap();
    assert!(!validator.is_valid(&object));
}

#[test]
fn rendered_scaled_jobs_satisfy_the_scaled_job_crd_of_each_keda_release_they_are_rendered_for() {
    for (version, module, tag) in PINNED {
        let Some(schema) = module_schema(module, tag, "keda.sh_scaledjobs.yaml") else { return };
        // No CEL rule to evaluate by hand: KEDA's ScaledJob CRD has none (its ScaledObject CRD has
        // the one checked above). Should a release add one, this fails until it is checked here.
        let mut rules = Vec::new();
        cel_rules(&schema, "", &mut rules);
        assert_eq!(rules, Vec::<String>::new(), "KEDA {tag}'s ScaledJob CRD has CEL rules");
        let jobs = rendered_for(version, "ScaledJob");
        assert_valid(&schema, &jobs);
        for job in &jobs {
            let spec = &job["spec"];
            let name = job["metadata"]["name"].as_str().unwrap();
            // KEDA labels the Jobs' pods `scaledjob.keda.sh/name: <name>` (a label value) and names
            // the Jobs `<name>-<random>`: the name must fit a label value.
            assert!(name.len() <= 63, "{name}");
            assert!(spec["minReplicaCount"].as_i64() <= spec["maxReplicaCount"].as_i64(), "{name}");
            assert_eq!(spec["jobTargetRef"]["template"]["spec"]["restartPolicy"], "Never", "{name}");
            assert_eq!(spec["jobTargetRef"]["backoffLimit"], 0, "{name}");
            for trigger in spec["triggers"].as_array().unwrap() {
                assert!(trigger["metadata"].as_object().unwrap().values().all(Value::is_string));
            }
        }
    }
}

#[test]
fn rendered_scaled_objects_satisfy_the_scaled_object_crd_of_each_keda_release_they_are_rendered_for() {
    for (version, module, tag) in PINNED {
        let Some(schema) = module_schema(module, tag, "keda.sh_scaledobjects.yaml") else { return };
        assert_valid(&schema, &rendered_for(version, "ScaledObject"));
    }
}

#[test]
fn the_scaled_job_schema_check_catches_a_broken_scaled_job() {
    let (_, module, tag) = PINNED[0];
    let Some(schema) = module_schema(module, tag, "keda.sh_scaledjobs.yaml") else { return };
    let validator = jsonschema::draft4::new(&schema).unwrap();
    let mut job = rendered_for(KedaVersion::V2_21_0, "ScaledJob").remove(0);
    assert!(validator.is_valid(&job));
    job["spec"]["scalingStrategy"]["strategy"] = Value::from("fastest");
    assert!(!validator.is_valid(&job), "an unknown strategy");
    let mut job = rendered_for(KedaVersion::V2_21_0, "ScaledJob").remove(0);
    job["spec"]["triggers"][0]["metadata"]["scaleOnInFlight"] = Value::from(true);
    assert!(!validator.is_valid(&job), "a bare boolean in trigger metadata");
}
