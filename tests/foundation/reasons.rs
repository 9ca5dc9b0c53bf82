//! The reason tables of `docs/operations.md` ("Troubleshooting by condition") against the
//! vocabulary the controller sets (`cdtarget::api::conditions`): every reason a table names is
//! one the controller sets on that condition type, and every reason it sets is in a table.

use std::collections::BTreeSet;

use cdtarget::api::conditions::{self, Kind};

/// One table of the docs: the object and condition type it is about, and the reasons its rows
/// name (every backticked word of the first column).
#[derive(Debug)]
struct Table {
    kind: Kind,
    condition: String,
    reasons: Vec<String>,
}

fn backticked(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The tables of the troubleshooting section. A table's condition type is the first backticked
/// condition type in the paragraph before it (a CDTarget's table without one is about `Ready`).
fn tables(doc: &str) -> Vec<Table> {
    let start = doc.find("## Troubleshooting by condition").expect("the troubleshooting section");
    let end = doc[start..].find("### What a CDTarget may reference").map_or(doc.len(), |e| start + e);
    let types = [
        conditions::SOURCE_READY,
        conditions::APPLIED,
        conditions::READY,
        conditions::GITLAB_SYNCED,
        conditions::COMMIT_STATUS_POSTED,
        conditions::SYNC_STATUS_WRITTEN,
        conditions::BUSY_AGENTS_COUNTED,
    ];
    let (mut kind, mut paragraph, mut tables) = (None, String::new(), Vec::<Table>::new());
    let mut in_table = false;
    for line in doc[start..end].lines() {
        if line.starts_with("### TenantRepository") {
            kind = Some(Kind::TenantRepository);
        } else if line.starts_with("### CDTarget") {
            kind = Some(Kind::CDTarget);
            paragraph.clear();
        }
        let Some(kind) = kind else { continue };
        if !line.starts_with('|') {
            if in_table {
                paragraph.clear();
            }
            in_table = false;
            paragraph.push_str(line);
            paragraph.push(' ');
            continue;
        }
        let first = line.trim_start_matches('|').split('|').next().unwrap_or_default();
        if !in_table {
            in_table = true;
            let condition = backticked(&paragraph)
                .into_iter()
                .find(|word| types.contains(&word.as_str()))
                .unwrap_or_else(|| conditions::READY.to_owned());
            tables.push(Table { kind, condition, reasons: Vec::new() });
            continue; // the header row
        }
        tables.last_mut().expect("a table").reasons.extend(backticked(first));
    }
    tables
}

#[test]
fn the_reason_tables_of_the_operations_guide_match_the_reasons_the_controller_sets() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md")).unwrap();
    let tables = tables(&doc);
    assert!(tables.len() >= 6, "{tables:#?}");
    let mut documented = BTreeSet::new();
    for table in &tables {
        let defined = conditions::reasons(table.kind)
            .into_iter()
            .find(|(condition, _)| *condition == table.condition)
            .map(|(_, reasons)| reasons)
            .unwrap_or_else(|| panic!("{:?} has no condition {}", table.kind, table.condition));
        for reason in &table.reasons {
            assert!(
                defined.contains(&reason.as_str()),
                "docs/operations.md lists `{reason}` for {:?} {}, which the controller does not set there",
                table.kind,
                table.condition
            );
            documented.insert(reason.clone());
        }
    }
    let undocumented: Vec<&str> =
        conditions::all_reasons().into_iter().filter(|reason| !documented.contains(*reason)).collect();
    assert!(undocumented.is_empty(), "reasons missing from docs/operations.md's tables: {undocumented:?}");
}
