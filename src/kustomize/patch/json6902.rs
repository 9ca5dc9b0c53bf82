//! JSON patches (RFC 6902) as kustomize applies them: `add`, `remove`, `replace`, `move`,
//! `copy` and `test`, JSON pointers with `~0`/`~1` escapes and `-` to append, written as a JSON
//! array or as YAML. The operations are the `json-patch` crate's (the one kube already uses).

use json_patch::PatchOperation;
use serde_json::Value;

use crate::budget;
use crate::problem::Problem;

/// A parsed JSON patch: its operations, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPatch(pub Vec<PatchOperation>);

/// Parses the text of a JSON patch: JSON when it starts with `[`, YAML otherwise (as kustomize
/// decides). Problems name the operation's index.
pub fn parse(text: &str) -> Result<JsonPatch, Problem> {
    let value: Value = if text.starts_with('[') {
        // serde_json stops at 128 levels; the budget's depth and bytes are charged right after.
        let value = serde_json::from_str(text).map_err(|e| Problem::field("", format!("not a JSON patch: {e}")))?;
        budget::charge_value(&value).map_err(|overrun| Problem::field("", overrun.to_string()))?;
        value
    } else {
        crate::yaml::parse_one(text)
            .map_err(|e| Problem::field("", format!("not a JSON patch (YAML): {}", e.message)))?
    };
    from_value(&value)
}

/// Reads the operations of a JSON patch already parsed as a list.
pub fn from_value(value: &Value) -> Result<JsonPatch, Problem> {
    let Some(items) = value.as_array() else {
        return Err(Problem::field(
            "",
            "a JSON patch is a list of operations (`- op: add`, `path: /spec/x`, `value: ...`)",
        ));
    };
    let mut operations = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let operation: PatchOperation = serde_json::from_value(item.clone()).map_err(|e| {
            let op = item.get("op").and_then(Value::as_str).unwrap_or("?");
            Problem::field(
                format!("[{i}]"),
                format!("operation `{op}` is not valid: {e}; expected one of add, remove, replace, move, copy, test with `path` (and `value` or `from`)"),
            )
        })?;
        operations.push(operation);
    }
    Ok(JsonPatch(operations))
}

/// Applies `patch` to `target`; the problem of a failed operation names its index, its `op` and
/// `path`. Outside a load a failed patch leaves `target` as it was; within one, `target` may be
/// left partly patched (the builder patches a copy it drops on failure).
///
/// Within a load, the target is measured after every operation: an operation that would nest it
/// past the depth limit or grow it past the budget stops the patch before anything recurses over
/// the result (a few `copy` operations double an object each, a few `move`s deepen it); a `copy`
/// is measured before it copies.
pub fn apply(target: &mut Value, patch: &JsonPatch) -> Result<(), Problem> {
    let failed = |index: usize, e: json_patch::PatchError| {
        let op = patch.0.get(index).map(operation_name).unwrap_or("?");
        Problem::field(format!("[{index}]"), format!("`{op}` at `{}` failed: {}", e.path, e.kind))
    };
    let Some(budget) = budget::current() else {
        return json_patch::patch(target, &patch.0).map_err(|e| failed(e.operation, e));
    };
    let before = budget::measure(target, usize::MAX).bytes;
    let mut now = before;
    for (index, operation) in patch.0.iter().enumerate() {
        let refused = |overrun: budget::Overrun| {
            Problem::field(format!("[{index}]"), format!("`{}`: {overrun}", operation_name(operation)))
        };
        if let PatchOperation::Copy(copy) = operation
            && let Some(source) = target.pointer(copy.from.as_str())
        {
            let copied = budget.measure(source).map_err(refused)?.bytes;
            budget.check_growth(before, now + copied).map_err(refused)?;
        }
        json_patch::patch(target, std::slice::from_ref(operation)).map_err(|e| failed(index, e))?;
        now = budget.measure(target).map_err(refused)?.bytes;
        budget.check_growth(before, now).map_err(refused)?;
    }
    Ok(())
}

fn operation_name(operation: &PatchOperation) -> &'static str {
    match operation {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_and_json_forms_give_the_same_operations() {
        let yaml = parse("- op: add\n  path: /spec/a~1b/-\n  value: 1\n").unwrap();
        let json = parse(r#"[{"op": "add", "path": "/spec/a~1b/-", "value": 1}]"#).unwrap();
        assert_eq!(yaml, json);
        let mut target = json!({"spec": {"a/b": [0]}});
        apply(&mut target, &yaml).unwrap();
        assert_eq!(target, json!({"spec": {"a/b": [0, 1]}}));
    }

    #[test]
    fn a_failing_test_names_the_operation_and_leaves_the_target() {
        let patch = parse("- {op: replace, path: /a, value: 2}\n- {op: test, path: /a, value: 3}\n").unwrap();
        let mut target = json!({"a": 1});
        let problem = apply(&mut target, &patch).unwrap_err();
        assert_eq!(problem.field, "[1]");
        assert!(problem.message.contains("`test` at `/a` failed"), "{problem}");
        assert_eq!(target, json!({"a": 1}));
    }

    #[test]
    fn an_unknown_operation_is_located() {
        let problem = parse("- {op: add, path: /a, value: 1}\n- {op: frobnicate, path: /a}\n").unwrap_err();
        assert_eq!(problem.field, "[1]");
        assert!(problem.message.contains("frobnicate"), "{problem}");
    }
}
