//! One object of a build, with what kustomize remembers about it while building.

use serde_json::Value;

use crate::budget;
use crate::problem::Problem;

/// Where a built object came from, for problems and for the loader's locations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A document of a resource file.
    Document {
        /// The file, relative to the root.
        file: String,
        /// 1-based position among the file's non-empty documents.
        index: usize,
        /// 1-based line where the document starts.
        line: usize,
    },
    /// Made by a generator of a kustomization.
    Generator {
        /// The kustomization file, relative to the root.
        file: String,
        /// The generator entry, such as `configMapGenerator[1]`.
        field: String,
    },
}

/// A name and namespace an object had before a rename in the build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviousId {
    /// `metadata.name` then.
    pub name: String,
    /// `metadata.namespace` then, if it had one.
    pub namespace: Option<String>,
}

/// One object of a build.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    /// The object as it stands now.
    pub object: Value,
    /// Where it came from.
    pub origin: Origin,
    /// Names and namespaces it had before each rename, oldest first (kustomize's
    /// `previousNames`/`previousNamespaces`): references and targets written against an earlier
    /// name still find it.
    pub previous: Vec<PreviousId>,
    /// Prefixes added to its name so far, in the order they were added (kustomize compares a
    /// referrer's and a candidate's to decide which object a reference means).
    pub prefixes: Vec<String>,
    /// Suffixes added to its name so far, in the order they were added.
    pub suffixes: Vec<String>,
    /// Whether the content hash suffix is still to be appended (a generated object without
    /// `disableNameSuffixHash`).
    pub needs_hash: bool,
    /// Whether a generator made it (a later generator's `behavior` may merge into or replace it).
    pub generated: bool,
    /// The bytes charged to the revision's budget for it (the object and the names it keeps),
    /// as last measured.
    pub charged: u64,
}

impl Resource {
    /// A resource read from a document, as written.
    ///
    /// Its bytes are measured, not charged: whatever parsed or made the object charged them.
    pub fn from_document(object: Value, origin: Origin) -> Self {
        let charged = budget::current().map_or(0, |_| budget::measure(&object, usize::MAX).bytes);
        Resource {
            object,
            origin,
            previous: Vec::new(),
            prefixes: Vec::new(),
            suffixes: Vec::new(),
            needs_hash: false,
            generated: false,
            charged,
        }
    }

    /// Charges the revision's budget for what the object and the names it keeps grew by since
    /// last measured (giving back what they shrank by), checking the object's depth before
    /// anything recurses over it again. Outside a load nothing is measured.
    pub fn recharge(&mut self) -> Result<(), Problem> {
        let Some(budget) = budget::current() else { return Ok(()) };
        let refused = |overrun: budget::Overrun| Problem::field("", overrun.to_string());
        let kept = self
            .previous
            .iter()
            .map(|p| p.name.len() + p.namespace.as_ref().map_or(0, String::len))
            .chain(self.prefixes.iter().chain(&self.suffixes).map(String::len))
            .map(|len| len as u64 + budget::NODE_BYTES)
            .sum::<u64>();
        let now = budget.measure(&self.object).map_err(refused)?.bytes + kept;
        if now >= self.charged {
            budget.charge_bytes(now - self.charged).map_err(refused)?;
        } else {
            budget.release_bytes(self.charged - now);
        }
        self.charged = now;
        Ok(())
    }

    /// `metadata.name` now.
    pub fn name(&self) -> &str {
        self.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.object.get("kind").and_then(Value::as_str).unwrap_or_default()
    }
}

// === impl Resource: identity helpers (names slice) ===

impl Resource {
    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.object.get("apiVersion").and_then(Value::as_str).unwrap_or_default()
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version().split_once('/').map_or("", |(group, _)| group)
    }

    /// `metadata.namespace`, when it is a non-empty string.
    pub fn namespace(&self) -> Option<&str> {
        self.object.pointer("/metadata/namespace").and_then(Value::as_str).filter(|n| !n.is_empty())
    }

    /// Sets `metadata.name`, creating `metadata` if needed.
    pub fn set_name(&mut self, name: &str) {
        set_metadata(&mut self.object, "name", name);
    }

    /// Remembers the current name and namespace as an earlier one, before a rename (kustomize's
    /// `StorePreviousId`).
    pub fn remember_id(&mut self) {
        let id = PreviousId { name: self.name().to_owned(), namespace: self.namespace().map(str::to_owned) };
        self.previous.push(id);
    }

    /// The namespace it had before any rename in the build (kustomize's "original id").
    pub fn original_namespace(&self) -> Option<&str> {
        match self.previous.first() {
            Some(first) => first.namespace.as_deref().filter(|n| !n.is_empty()),
            None => self.namespace(),
        }
    }

    /// Places `problem` where the object came from.
    pub fn locate(&self, problem: Problem) -> Problem {
        match &self.origin {
            Origin::Document { file, index, line } => problem.located(file, Some(*index), Some(*line)),
            Origin::Generator { file, field } => problem.under(field).located(file, None, None),
        }
    }

    /// The object for a message: `ConfigMap ns/name (base/cm.yaml, document 1)`.
    pub fn describe(&self) -> String {
        let id = match self.namespace() {
            Some(namespace) => format!("{} {namespace}/{}", self.kind(), self.name()),
            None => format!("{} {}", self.kind(), self.name()),
        };
        match &self.origin {
            Origin::Document { file, index, .. } => format!("{id} ({file}, document {index})"),
            Origin::Generator { file, field } => format!("{id} ({file}, {field})"),
        }
    }
}

/// Sets `metadata.<field>` to `text`, making `metadata` a map if it is missing or not one.
fn set_metadata(object: &mut Value, field: &str, text: &str) {
    if let Some(map) = object.as_object_mut() {
        let metadata = map.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
        if !metadata.is_object() {
            *metadata = Value::Object(Default::default());
        }
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert(field.to_owned(), Value::String(text.to_owned()));
        }
    }
}
