//! The arrows of `src/` point down: no module below the controller knows it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
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

// === import circles ===

/// Every module of the library (`src/main.rs` is another crate) with its text: `lib.rs` is
/// `crate`, `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`.
fn modules(src: &Path) -> Vec<(String, String)> {
    sources(src)
        .into_iter()
        .filter_map(|(file, text)| {
            let relative = Path::new(&file).strip_prefix(src).expect("under src").with_extension("");
            let mut segments: Vec<String> =
                relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            match segments.as_slice() {
                [only] if only == "main" => return None,
                [only] if only == "lib" => segments.clear(),
                [.., last] if last == "mod" => {
                    segments.pop();
                }
                _ => {}
            }
            Some((module_name(&segments), text))
        })
        .collect()
}

fn module_name(segments: &[String]) -> String {
    if segments.is_empty() { "crate".to_owned() } else { segments.join("::") }
}

/// `text` without comments and without the contents of string and character literals, so that
/// neither a path in a comment nor a brace in a string is read as code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let starts_word = i == 0 || !ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if starts_word && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            chars.get(j) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while chars[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < chars.len() && !(chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#'))) {
                j += 1;
            }
            i = j + hashes + 1;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('{', '\n', '\''), not a lifetime.
            i += if next == Some('\\') { 3 } else { 2 };
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Reads a path or a `use` tree at `chars[*at..]`: every full path it names, segment by segment
/// (`a::{b, c::{self, d}}` names `a::b`, `a::c` and `a::c::d`).
fn use_tree(chars: &[char], at: &mut usize, prefix: Vec<String>) -> Vec<Vec<String>> {
    let skip_blanks = |at: &mut usize| {
        while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
            *at += 1;
        }
    };
    let mut path = prefix;
    loop {
        skip_blanks(at);
        match chars.get(*at) {
            Some('{') => {
                *at += 1;
                let mut found = Vec::new();
                loop {
                    skip_blanks(at);
                    match chars.get(*at) {
                        None => return found,
                        Some('}') => {
                            *at += 1;
                            return found;
                        }
                        Some(',') => *at += 1,
                        Some(_) => {
                            found.extend(use_tree(chars, at, path.clone()));
                            // `as alias` and anything else up to the next item.
                            while chars.get(*at).is_some_and(|c| *c != ',' && *c != '}' && *c != '{') {
                                *at += 1;
                            }
                        }
                    }
                }
            }
            Some('*') => {
                *at += 1;
                return vec![path];
            }
            _ => {}
        }
        let start = *at;
        while chars.get(*at).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
            *at += 1;
        }
        if *at == start {
            return vec![path];
        }
        let segment: String = chars[start..*at].iter().collect();
        if segment != "self" || path.is_empty() {
            path.push(segment);
        }
        let mut after = *at;
        while chars.get(after).is_some_and(|c| c.is_whitespace()) {
            after += 1;
        }
        if chars.get(after) == Some(&':') && chars.get(after + 1) == Some(&':') {
            *at = after + 2;
        } else {
            return vec![path];
        }
    }
}

/// The module graph of `modules` (name, text): an edge `a → b` when `a` names an item of `b`
/// through a `crate::`, `super::` or `self::` path, in a `use` line or inline. Edges between a
/// module and its own ancestors or descendants are left out: a parent declares and re-exports
/// its children, and a child uses its parent's items. Paths in inline modules count for the file
/// that holds them, but for `#[cfg(test)]` ones: a unit test may check its result through a
/// sibling. An item named through a module that re-exports it (`super::Plan`, with
/// `pub use plan::Plan` in the parent) is an arrow to the module it comes from, so a circle
/// cannot hide behind a parent's re-export.
fn import_graph(modules: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<&str> = modules.iter().map(|(name, _)| name.as_str()).collect();
    let segments_of = |name: &str| -> Vec<String> {
        if name == "crate" { Vec::new() } else { name.split("::").map(str::to_owned).collect() }
    };
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    // A path from `from` (a module and its open inline modules): the deepest module of the
    // library it reaches, and the item it names there, if any.
    let resolve = |from: &[String], path: Vec<String>| -> (Vec<String>, Option<String>) {
        let mut full: Vec<String> = from.to_vec();
        let mut segments = path.into_iter();
        match segments.next() {
            Some(first) if first == "crate" => full.clear(),
            Some(first) if first == "super" => {
                full.pop();
            }
            Some(first) if first == "self" => {}
            // A `use` relative to the module (`pub use plan::Plan`) starts at one of its children.
            Some(first) => full.push(first),
            None => {}
        }
        for segment in segments {
            match segment.as_str() {
                "super" => {
                    full.pop();
                }
                "self" => {}
                _ => full.push(segment),
            }
        }
        let mut module = full.clone();
        while !module.is_empty() && !known.contains(module_name(&module).as_str()) {
            module.pop();
        }
        let item = full.get(module.len()).cloned();
        (module, item)
    };
    // What each module re-exports (`pub use`, `pub(crate) use`, …): item name → the module it
    // comes from, so that `super::Plan` is an arrow to the sibling `plan`, not to the parent.
    let mut reexports: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (name, text) in modules {
        let here = segments_of(name);
        let code = code_only(text);
        let chars: Vec<char> = code.chars().collect();
        for (start, _) in code.match_indices("use ") {
            let before = code[..start].trim_end();
            let public = before.ends_with("pub") || (before.ends_with(')') && before.contains("pub("));
            let line_start = code[..start].rfind('\n').map_or(0, |i| i + 1);
            if !public || !code[line_start..start].trim_start().starts_with("pub") {
                continue;
            }
            let mut at = code[..start + 4].chars().count();
            for path in use_tree(&chars, &mut at, Vec::new()) {
                let (module, item) = resolve(&here, path);
                if let Some(item) = item.filter(|_| module != here) {
                    reexports.entry(name.clone()).or_default().insert(item, module);
                }
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in modules {
        let here = segments_of(name);
        let chars: Vec<char> = code_only(text).chars().collect();
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let mut depth = 0usize;
        // Inline modules open at this point: name, brace depth, and whether it is `#[cfg(test)]`.
        let mut inline: Vec<(String, usize, bool)> = Vec::new();
        let mut pending_mod: Option<(String, bool)> = None;
        let mut at = 0;
        let edges = graph.entry(name.clone()).or_default();
        while at < chars.len() {
            let c = chars[at];
            if c == '{' {
                depth += 1;
                if let Some((module, test)) = pending_mod.take() {
                    inline.push((module, depth, test));
                }
                at += 1;
                continue;
            }
            if c == '}' {
                if inline.last().is_some_and(|(_, d, _)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                at += 1;
                continue;
            }
            if !ident(c) || (at > 0 && ident(chars[at - 1])) {
                if c == ';' {
                    pending_mod = None;
                }
                at += 1;
                continue;
            }
            let start = at;
            while at < chars.len() && ident(chars[at]) {
                at += 1;
            }
            let word: String = chars[start..at].iter().collect();
            if word == "mod" {
                let mut j = at;
                while chars.get(j).is_some_and(|c| c.is_whitespace()) {
                    j += 1;
                }
                let name_start = j;
                while chars.get(j).is_some_and(|c| ident(*c)) {
                    j += 1;
                }
                let before: String = chars[..start].iter().collect();
                let before = before.trim_end();
                // `pub(super) mod tests`, `pub mod tests`: the attribute stands before the visibility.
                let before = match before.rfind("pub") {
                    Some(i) if before[i..].chars().all(|c| c.is_alphanumeric() || "()_: ".contains(c)) => &before[..i],
                    _ => before,
                };
                let test = before.trim_end().ends_with("#[cfg(test)]");
                pending_mod = Some((chars[name_start..j].iter().collect(), test));
                at = j;
                continue;
            }
            let mut after = at;
            while chars.get(after).is_some_and(|c| c.is_whitespace()) {
                after += 1;
            }
            let is_path = chars.get(after) == Some(&':') && chars.get(after + 1) == Some(&':');
            if !matches!(word.as_str(), "crate" | "super" | "self") || !is_path {
                continue;
            }
            // A unit test may use a sibling to check its result: the arrows are the code's.
            if inline.iter().any(|(_, _, test)| *test) {
                continue;
            }
            at = start;
            for path in use_tree(&chars, &mut at, Vec::new()) {
                let from: Vec<String> = here.iter().cloned().chain(inline.iter().map(|(m, _, _)| m.clone())).collect();
                let (mut current, item) = resolve(&from, path);
                // Through re-exports (a few deep) to the module the item comes from.
                if let Some(item) = item {
                    for _ in 0..4 {
                        match reexports.get(&module_name(&current)).and_then(|r| r.get(&item)) {
                            Some(source) if *source != current => current = source.clone(),
                            _ => break,
                        }
                    }
                }
                if !related(&here, &current) {
                    edges.insert(module_name(&current));
                }
            }
        }
    }
    graph
}

/// Every cycle of `graph`, each once, as `a → b → … → a` starting at its least module: for
/// each edge `a → b` inside a strongly connected part, the shortest way back from `b` to `a`.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let empty = BTreeSet::new();
    let shortest_path = |from: &str, to: &str| -> Option<Vec<String>> {
        let mut previous: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = VecDeque::from([from.to_owned()]);
        let mut seen = BTreeSet::from([from.to_owned()]);
        while let Some(node) = queue.pop_front() {
            if node == to {
                let mut path = vec![node];
                while let Some(before) = previous.get(path.last().expect("non-empty")) {
                    path.push(before.clone());
                }
                path.reverse();
                return Some(path);
            }
            for next in graph.get(&node).unwrap_or(&empty) {
                if seen.insert(next.clone()) {
                    previous.insert(next.clone(), node.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        None
    };
    let mut found = BTreeSet::new();
    for (a, targets) in graph {
        for b in targets {
            let Some(back) = shortest_path(b, a) else { continue };
            let mut cycle: Vec<String> =
                std::iter::once(a.clone()).chain(back.into_iter().take_while(|m| m != a)).collect();
            let least = cycle.iter().enumerate().min_by_key(|(_, m)| *m).map(|(i, _)| i).expect("non-empty");
            cycle.rotate_left(least);
            cycle.push(cycle[0].clone());
            found.insert(cycle.join(" → "));
        }
    }
    found.into_iter().collect()
}

#[test]
fn no_modules_of_src_import_each_other_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph(&modules(&src));
    let found = cycles(&graph);
    assert!(found.is_empty(), "modules of src/ import each other in a circle:\n{}", found.join("\n"));
}

#[test]
fn the_layout_check_sees_an_import_circle() {
    let module = |name: &str, text: &str| (name.to_owned(), text.to_owned());
    let modules = [
        module("crate", "pub mod a;\npub mod b;\npub use a::Thing;\n"),
        module(
            "a",
            "mod c;\nuse crate::text::short;\n// use crate::b::Commented;\nfn f() { let s = \"crate::b::X\"; }\n",
        ),
        module("a::c", "use super::Parent;\nuse crate::{b::{self, Other as O}, text};\n"),
        module(
            "b",
            "fn g() { crate::a::c::helper('{'); }\n#[cfg(test)]\npub(super) mod tests {\n    use super::super::a::Thing;\n}\n",
        ),
        module("text", "pub fn short() {}\n#[cfg(test)]\nmod tests {\n    use super::short;\n}\n"),
    ];
    let graph = import_graph(&modules);
    assert_eq!(graph["a"], BTreeSet::from(["text".to_owned()]));
    assert_eq!(graph["a::c"], BTreeSet::from(["b".to_owned(), "text".to_owned()]));
    assert_eq!(
        graph["b"],
        BTreeSet::from(["a::c".to_owned()]),
        "the `super::super::a` of b's `#[cfg(test)] mod tests` does not count"
    );
    assert_eq!(graph["text"], BTreeSet::new());
    assert_eq!(cycles(&graph), ["a::c → b → a::c"]);
}

#[test]
fn the_layout_check_sees_a_circle_through_a_reexport() {
    let module = |name: &str, text: &str| (name.to_owned(), text.to_owned());
    // `a::y` names `Thing` through its parent, which re-exports it from `a::x`; `a::x` uses `a::y`.
    let modules = [
        module("crate", "pub mod a;\n"),
        module("a", "mod x;\nmod y;\npub use x::Thing;\npub(crate) use self::y::{Other, Third};\n"),
        module("a::x", "pub struct Thing;\nfn f() -> super::y::Other { super::y::Other }\n"),
        module("a::y", "use super::Thing;\npub struct Other;\npub struct Third;\n"),
    ];
    let graph = import_graph(&modules);
    assert_eq!(graph["a::y"], BTreeSet::from(["a::x".to_owned()]), "super::Thing is a::x's");
    assert_eq!(cycles(&graph), ["a::x → a::y → a::x"]);
}
