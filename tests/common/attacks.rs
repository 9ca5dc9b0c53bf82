//! Hostile tenant input shared by the test binaries that play it (issue #26).

/// A JSON 6902 patch whose thirty rounds each add a 40-level chain, move the target's `/data` to
/// its bottom and move the chain back to `/data`: each round deepens the object by 40 levels.
/// Without a depth bound, rounds of it built objects thousands of levels deep and the loader
/// overflowed its stack.
pub fn deepening_json_patch() -> String {
    let chain = (0..40).fold("{}".to_owned(), |inner, _| format!("{{\"a\": {inner}}}"));
    let bottom = "/a".repeat(40);
    let mut ops = Vec::new();
    for _ in 0..30 {
        ops.push(format!(r#"{{"op": "add", "path": "/tmp", "value": {chain}}}"#));
        ops.push(format!(r#"{{"op": "move", "from": "/data", "path": "/tmp{bottom}/data"}}"#));
        ops.push(r#"{"op": "move", "from": "/tmp", "path": "/data"}"#.to_owned());
    }
    format!("[{}]", ops.join(",\n"))
}
