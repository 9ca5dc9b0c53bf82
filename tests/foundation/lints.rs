//! The lint arrangement holds (Cargo.toml `[lints]`, src/lib.rs): unsafe code is forbidden in
//! every module but `libgit2_globals`, and the test fixtures never reach a normal build.

use std::path::{Path, PathBuf};

use super::support::project_dir;

/// The one file allowed to hold unsafe code: libgit2's process-wide options.
const UNSAFE_MODULE: &str = "src/libgit2_globals.rs";

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// `(line number, line)` of the code lines of `text` that use unsafe code or relax the lint:
/// `unsafe` blocks, functions, impls, traits and extern blocks, and `allow`, `expect` or `warn`
/// of `unsafe_code`. Comment lines are skipped (documentation may name the lint).
fn unsafe_lines(text: &str) -> Vec<(usize, String)> {
    let keyword_uses = ["{", "fn ", "impl", "trait ", "extern "];
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| {
            let uses_keyword = line.match_indices("unsafe").any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + "unsafe".len()..].trim_start();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && keyword_uses.iter().any(|k| after.starts_with(k))
            });
            let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            let relaxes = ["allow(", "expect(", "warn("].iter().any(|level| {
                compact
                    .match_indices(level)
                    .any(|(at, _)| compact[at..].split(')').next().unwrap().contains("unsafe_code"))
            });
            uses_keyword || relaxes
        })
        .map(|(number, line)| (number + 1, line.to_owned()))
        .collect()
}

#[test]
fn no_file_of_the_crate_but_the_libgit2_module_holds_or_allows_unsafe_code() {
    let root = project_dir();
    let mut found = Vec::new();
    for file in rust_files(&root.join("src")) {
        let relative = file.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        if relative == UNSAFE_MODULE {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        found.extend(unsafe_lines(&text).into_iter().map(|(n, line)| format!("{relative}:{n}: {}", line.trim())));
    }
    assert!(found.is_empty(), "unsafe code outside {UNSAFE_MODULE}:\n{}", found.join("\n"));
    let allowed = std::fs::read_to_string(root.join(UNSAFE_MODULE)).unwrap();
    assert!(allowed.contains("// SAFETY:"), "the unsafe module says why it is sound");
}

#[test]
fn the_scan_finds_unsafe_blocks_functions_and_relaxed_lints_but_not_names_or_comments() {
    let text = "fn a() { unsafe { x() } }\n#[allow(dead_code, unsafe_code)]\nunsafe fn b() {}\n\
                #![expect( unsafe_code )]\nfn unsafe_tree() {}\n// an unsafe { block } in a comment\n\
                let s = \"unsafe_code\";\n#[forbid(unsafe_code)]\n";
    let lines: Vec<usize> = unsafe_lines(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, [1, 2, 3, 4]);
}

/// The modules a crate root declares, each with whether `#[forbid(unsafe_code)]` is among its
/// attributes.
fn declared_modules(root: &str) -> Vec<(String, bool)> {
    let mut modules = Vec::new();
    let mut forbidden = false;
    for line in root.lines().map(str::trim) {
        if line.starts_with("#[") {
            forbidden |= line == "#[forbid(unsafe_code)]";
            continue;
        }
        let declaration = line.strip_prefix("pub ").or_else(|| line.strip_prefix("pub(crate) ")).unwrap_or(line);
        if let Some(name) = declaration.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')) {
            modules.push((name.trim().to_owned(), forbidden));
        }
        if !line.starts_with("///") {
            forbidden = false;
        }
    }
    modules
}

#[test]
fn every_module_but_the_libgit2_one_is_declared_under_forbid_unsafe_code() {
    let root = project_dir();
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let modules = declared_modules(&lib);
    assert!(modules.len() >= 10, "the modules of src/lib.rs are read: {modules:?}");
    let open: Vec<&str> = modules.iter().filter(|(_, forbidden)| !forbidden).map(|(name, _)| name.as_str()).collect();
    assert_eq!(open, ["libgit2_globals"], "modules of src/lib.rs not declared #[forbid(unsafe_code)]");
    assert!(!lib.contains("#![allow(unsafe_code)]") && !lib.contains("#![deny(unsafe_code)]"), "Cargo.toml sets it");
    let main = std::fs::read_to_string(root.join("src/main.rs")).unwrap();
    assert!(main.contains("#![forbid(unsafe_code)]"), "the binary's root forbids unsafe code");
}

/// The lines of `section` (`[name]` up to the next header) of a TOML text.
fn toml_section<'a>(text: &'a str, section: &str) -> Vec<&'a str> {
    let header = format!("[{section}]");
    text.lines()
        .skip_while(|line| line.trim() != header)
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect()
}

#[test]
fn the_fixtures_feature_is_enabled_by_the_tests_alone() {
    let manifest = std::fs::read_to_string(project_dir().join("Cargo.toml")).unwrap();
    let features = toml_section(&manifest, "features");
    assert!(features.iter().any(|l| l.trim() == "fixtures = []"), "the feature exists and enables nothing else");
    assert!(!features.iter().any(|l| l.trim_start().starts_with("default")), "no default features: {features:?}");
    let dependencies = toml_section(&manifest, "dependencies");
    assert!(!dependencies.iter().any(|l| l.contains("fixtures") || l.starts_with("cdtarget")), "{dependencies:?}");
    let dev = toml_section(&manifest, "dev-dependencies");
    assert!(
        dev.iter().any(|l| l.starts_with("cdtarget = ") && l.contains(r#"features = ["fixtures"]"#)),
        "the integration tests enable it through the dev-dependency on the crate itself"
    );
    // A normal build (`cargo build`, `cargo install`) leaves dev-dependencies out, so the binary
    // and the library of a release have no `cdtarget::fixtures`.
}
