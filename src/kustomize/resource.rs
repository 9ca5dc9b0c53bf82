//! One object of a build, with what kustomize remembers about it while building.

use serde_json::Value;

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
}

impl Resource {
    /// A resource read from a document, as written.
    pub fn from_document(object: Value, origin: Origin) -> Self {
        Resource {
            object,
            origin,
            previous: Vec::new(),
            prefixes: Vec::new(),
            suffixes: Vec::new(),
            needs_hash: false,
            generated: false,
        }
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
