//! The arrows of `src/` point down: no module below the controller knows it.

use std::path::Path;

/// The modules the controller builds on; none of them may import `crate::controller`.
const BELOW_THE_CONTROLLER: &[&str] = &[
    "webhook",
    "gitlab",
    "source",
    "apply",
    "render",
    "manifests",
    "policy",
    "api",
    "error.rs",
    "problem.rs",
    "health",
    "kustomize",
];

/// Every `.rs` file under `path` (or `path` itself), with its text.
fn sources(path: &Path) -> Vec<(String, String)> {
    if path.is_file() {
        return vec![(path.display().to_string(), std::fs::read_to_string(path).expect("readable source"))];
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(path).expect("readable directory") {
        let entry = entry.expect("directory entry").path();
        if entry.is_dir() || entry.extension().is_some_and(|e| e == "rs") {
            found.extend(sources(&entry));
        }
    }
    found
}

/// The lines of `text` that reach into the controller module.
fn controller_imports(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .filter(|line| line.contains("crate::controller") || line.contains("cdtarget::controller"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_module_below_the_controller_imports_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    for module in BELOW_THE_CONTROLLER {
        for (file, text) in sources(&src.join(module)) {
            offenders.extend(controller_imports(&text).into_iter().map(|line| format!("{file}: {}", line.trim())));
        }
    }
    assert!(offenders.is_empty(), "modules below the controller import it:\n{}", offenders.join("\n"));
}

#[test]
fn the_layout_check_sees_an_import_of_the_controller() {
    let text =
        "use crate::api::CDTarget;\nuse crate::controller::process::Trigger;\n// crate::controller in a comment\n";
    assert_eq!(controller_imports(text), ["use crate::controller::process::Trigger;"]);
}
