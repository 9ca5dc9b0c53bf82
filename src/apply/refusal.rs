//! What the API server said when it refused a tenant object, as plain data, and the located
//! problems a tenant reads from it (`deploy/app.yaml:2: spec.replicass: unknown field ...`).
//!
//! The loader knows where each object came from ([`Origin`]: file, document, line); the API
//! server knows which field it refused: a strict field validation error of server-side apply
//! (`.spec.replicass: field not declared in schema`, one per line when there are several), or
//! the causes of a `422 Invalid` (`spec.replicas: Invalid value: -1: ...`). Both are brought
//! together here, purely, so the controller's status and `cdtarget diff` say the same thing.

use std::collections::BTreeMap;

use crate::api::tenant_repository::InventoryEntry;
use crate::error::{Class, Classify};
use crate::problem::Problem;

/// Where the loader found an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The file, relative to the synced path.
    pub file: String,
    /// The 1-based document in the file.
    pub document: usize,
    /// The 1-based line where the document starts.
    pub line: usize,
    /// For an object a kustomize generator made, the generator entry (`configMapGenerator[0]`)
    /// of the kustomization `file`; `document` and `line` are then 0.
    pub generator: Option<String>,
}

impl Origin {
    /// Where the loader found `document`.
    pub fn of(document: &crate::manifests::Document) -> Origin {
        Origin {
            file: document.file.clone(),
            document: document.index,
            line: document.line,
            generator: document.generator.clone(),
        }
    }

    /// Places `problem` here (a generated object's at its generator entry).
    pub fn locate(&self, problem: Problem) -> Problem {
        match &self.generator {
            Some(field) => problem.under(field).located(&self.file, None, None),
            None => problem.located(&self.file, Some(self.document), Some(self.line)),
        }
    }
}

impl std::fmt::Display for Origin {
    /// `file:document`, or `file generator` for a generated object.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.generator {
            Some(field) => write!(f, "{} {field}", self.file),
            None => write!(f, "{}:{}", self.file, self.document),
        }
    }
}

/// The origin of every object of a set, keyed by its identity (the side table from the loader
/// to the apply).
pub(crate) type Origins = BTreeMap<InventoryEntry, Origin>;

/// One field the API server named in a refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// The field path, without a leading dot (`spec.replicass`); empty when none was named.
    pub field: String,
    /// What the API server said about it.
    pub message: String,
}

/// An object the API server refused (in a dry run or a real apply), as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The object.
    pub entry: InventoryEntry,
    /// The HTTP status code; 0 when no API server answered (a kind not served, a transport error).
    pub code: u16,
    /// The API server's whole message (or the error's, when none answered).
    pub message: String,
    /// The fields it named, when it named any.
    pub causes: Vec<Cause>,
    /// How the failure is handled.
    pub class: Class,
}

impl Refusal {
    /// The refusal of `entry` by `error`.
    pub fn of(entry: InventoryEntry, error: &kube::Error) -> Refusal {
        let class = error.class();
        match error {
            kube::Error::Api(status) => {
                let mut causes: Vec<Cause> = status
                    .details
                    .iter()
                    .flat_map(|details| &details.causes)
                    .filter(|cause| !cause.field.is_empty())
                    .map(|cause| Cause { field: field_path(&cause.field), message: cause.message.clone() })
                    .collect();
                let mut class = class;
                if causes.is_empty() {
                    causes = strict_validation_causes(&status.message);
                    // The object itself is wrong, whatever the code says: sending it again cannot help.
                    if !causes.is_empty() {
                        class = Class::Stalled;
                    }
                }
                Refusal { entry, code: status.code, message: status.message.clone(), causes, class }
            }
            other => Refusal { entry, code: 0, message: other.to_string(), causes: Vec::new(), class },
        }
    }

    /// `Kind namespace/name`.
    pub fn object(&self) -> String {
        format!("{} {}/{}", self.entry.kind, self.entry.namespace, self.entry.name)
    }

    /// The located problems a tenant reads: one per field the API server named, else one for
    /// the whole document; each names the object and carries the API server's words.
    pub fn problems(&self, origin: Option<&Origin>) -> Vec<Problem> {
        let object = self.object();
        let problems: Vec<Problem> = if self.causes.is_empty() {
            vec![Problem::field("", format!("{object} was refused by the API server: {}", self.message))]
        } else {
            self.causes
                .iter()
                .map(|cause| {
                    let message = if cause.message.contains("field not declared in schema")
                        || cause.message.starts_with("unknown field")
                    {
                        format!(
                            "unknown field: the API server's strict field validation refused {object} ({})",
                            cause.message
                        )
                    } else if cause.message.contains("duplicate field") {
                        format!(
                            "duplicate field: the API server's strict field validation refused {object} ({})",
                            cause.message
                        )
                    } else {
                        format!("{object} was refused by the API server: {}", cause.message)
                    };
                    Problem::field(cause.field.clone(), message)
                })
                .collect()
        };
        match origin {
            Some(origin) => problems.into_iter().map(|p| origin.locate(p)).collect(),
            None => problems,
        }
    }
}

/// The class a set of refusals is handled as: passing trouble anywhere retries soon; otherwise
/// the first refusal's class.
pub(crate) fn class_of(refusals: &[Refusal]) -> Class {
    if refusals.iter().any(|r| r.class == Class::Transient) {
        return Class::Transient;
    }
    refusals.first().map_or(Class::Transient, |r| r.class)
}

/// The fields of a server-side apply refused by strict field validation. The API server writes
/// `failed to create typed patch object (ns/name; apps/v1, Kind=Deployment): .spec.replicass:
/// field not declared in schema`, or, for several, `errors:` followed by one `.path: message` per
/// line.
fn strict_validation_causes(message: &str) -> Vec<Cause> {
    let Some(at) = message.find(TYPED_PATCH).and_then(|start| message[start..].find("): ").map(|end| start + end))
    else {
        return Vec::new();
    };
    let tail = &message[at + 3..];
    tail.lines()
        .map(str::trim)
        .filter(|line| line.starts_with('.'))
        .filter_map(|line| {
            let (path, what) = line.split_once(": ")?;
            Some(Cause { field: field_path(path), message: what.trim().to_owned() })
        })
        .collect()
}

/// How the API server begins the refusal of an apply whose object does not fit the schema.
const TYPED_PATCH: &str = "failed to create typed patch object";

/// `.spec.template` → `spec.template`.
fn field_path(path: &str) -> String {
    path.trim().trim_start_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use kube::core::Status;
    use kube::core::response::{StatusCause, StatusDetails};

    use super::*;

    fn entry() -> InventoryEntry {
        InventoryEntry {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team-a".into(),
            name: "web".into(),
        }
    }

    fn origin() -> Origin {
        Origin { file: "deploy/web.yaml".into(), document: 2, line: 9, generator: None }
    }

    #[test]
    fn an_unknown_field_of_a_server_side_apply_is_located_in_the_document() {
        let status = Status::failure(
            "failed to create typed patch object (team-a/web; apps/v1, Kind=Deployment): .spec.replicass: field not declared in schema",
            "InternalError",
        )
        // What kube-apiserver 1.37 answers (500), though nothing but the object is at fault.
        .with_code(500);
        let refusal = Refusal::of(entry(), &kube::Error::Api(status.boxed()));
        assert_eq!(refusal.class, Class::Stalled, "a typo is not retried as passing trouble");
        let problems = refusal.problems(Some(&origin()));
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].to_string(),
            "deploy/web.yaml:2: spec.replicass: unknown field: the API server's strict field validation refused Deployment team-a/web (field not declared in schema)"
        );
        assert_eq!(problems[0].line, Some(9));
    }

    #[test]
    fn several_unknown_fields_are_each_a_problem() {
        let message = "failed to create typed patch object (team-a/web; apps/v1, Kind=Deployment): errors:\n  .spec.replicass: field not declared in schema\n  .spec.template.spec.containers[name=\"web\"].imagee: field not declared in schema";
        let status = Status::failure(message, "BadRequest").with_code(400);
        let problems = Refusal::of(entry(), &kube::Error::Api(status.boxed())).problems(None);
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["spec.replicass", "spec.template.spec.containers[name=\"web\"].imagee"]);
    }

    #[test]
    fn the_causes_of_an_invalid_object_name_their_fields() {
        let details = StatusDetails {
            causes: vec![StatusCause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: -1: must be greater than or equal to 0".into(),
                field: "spec.replicas".into(),
            }],
            name: "web".into(),
            group: "apps".into(),
            kind: "deployments".into(),
            uid: String::new(),
            retry_after_seconds: 0,
        };
        let status =
            Status::failure("Deployment.apps \"web\" is invalid: ...", "Invalid").with_code(422).with_details(details);
        let problems = Refusal::of(entry(), &kube::Error::Api(status.boxed())).problems(Some(&origin()));
        assert_eq!(
            problems[0].to_string(),
            "deploy/web.yaml:2: spec.replicas: Deployment team-a/web was refused by the API server: Invalid value: -1: must be greater than or equal to 0"
        );
    }

    #[test]
    fn a_forbidden_object_is_a_problem_of_the_whole_document() {
        let message = "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:team-a:cdtarget-tenant\" cannot patch resource \"deployments\"";
        let status = Status::failure(message, "Forbidden").with_code(403);
        let refusal = Refusal::of(entry(), &kube::Error::Api(status.boxed()));
        assert_eq!(refusal.class, Class::Waiting);
        let problems = refusal.problems(Some(&origin()));
        assert_eq!(problems[0].field, "");
        assert_eq!(
            problems[0].to_string(),
            format!("deploy/web.yaml:2: Deployment team-a/web was refused by the API server: {message}")
        );
    }

    #[test]
    fn passing_trouble_anywhere_retries_soon() {
        let forbidden =
            Refusal::of(entry(), &kube::Error::Api(Status::failure("forbidden", "Forbidden").with_code(403).boxed()));
        let unavailable = Refusal::of(
            entry(),
            &kube::Error::Api(Status::failure("etcd", "ServiceUnavailable").with_code(503).boxed()),
        );
        assert_eq!(class_of(std::slice::from_ref(&forbidden)), Class::Waiting);
        assert_eq!(class_of(&[forbidden, unavailable]), Class::Transient);
    }
}
