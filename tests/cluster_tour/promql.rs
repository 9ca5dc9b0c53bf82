//! Metric names in PromQL queries and on a `/metrics` page, for the test that the dashboard and
//! the alerts only use metrics the controller exposes (`monitoring.rs`).
//!
//! The tokenizer knows just enough PromQL to tell a metric name from everything else that looks
//! like an identifier: function names (followed by `(`), aggregation operators and their
//! modifiers, keywords, label names (inside `{...}` before a matcher, and in the label lists of
//! `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`), strings, numbers, durations and
//! Grafana's `$variables`.

use std::collections::{BTreeMap, BTreeSet};

/// Words that are never metric names where they stand as a bare identifier.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "atan2",
    "inf",
    "nan",
];
/// Words followed by a parenthesised list of label names, not expressions.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names `query` selects (sorted, each once).
pub fn metric_names(query: &str) -> BTreeSet<String> {
    let chars: Vec<char> = query.chars().collect();
    let mut names = BTreeSet::new();
    // Depth of `{...}`: identifiers there are label names (values are strings).
    let mut in_braces = 0usize;
    // The previous identifier awaited a label list: the next `(...)` holds label names.
    let mut label_list_next = false;
    let mut in_label_list = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                // A string: skipped whole, escapes included (raw strings have none).
                i += 1;
                while i < chars.len() && chars[i] != c {
                    if chars[i] == '\\' && c != '`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            '#' => {
                // A comment, to the end of the line.
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' => {
                // A Grafana variable: `$name`, `${name}`, `$__rate_interval`.
                i += 1;
                if i < chars.len() && chars[i] == '{' {
                    while i < chars.len() && chars[i] != '}' {
                        i += 1;
                    }
                    i += 1;
                } else {
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            '{' => {
                in_braces += 1;
                i += 1;
            }
            '}' => {
                in_braces = in_braces.saturating_sub(1);
                i += 1;
            }
            '(' => {
                in_label_list = label_list_next;
                label_list_next = false;
                i += 1;
            }
            ')' => {
                in_label_list = false;
                i += 1;
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) => {
                // A number or a duration (`1.5`, `1e3`, `0x1f`, `5m`, `1h30m`): digits with the
                // letters, dots and signs of an exponent that go with them.
                i += 1;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric()
                        || chars[i] == '.'
                        || chars[i] == '_'
                        || ((chars[i] == '+' || chars[i] == '-') && matches!(chars[i - 1], 'e' | 'E')))
                {
                    i += 1;
                }
            }
            // A name may hold colons but not begin with one (`[30m:1m]` is a subquery's step).
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    // `group_left` may stand without a list.
                    label_list_next = next == Some('(');
                } else if in_braces > 0 || in_label_list {
                    // A label name.
                } else if next == Some('(') {
                    // A function or an aggregation operator.
                } else if KEYWORDS.contains(&lower.as_str()) || is_aggregation(&lower) {
                    // `sum by (x) (...)`: the operator comes before its modifier.
                } else {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn is_aggregation(word: &str) -> bool {
    [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ]
    .contains(&word)
}

/// The names a `/metrics` page (Prometheus text or OpenMetrics) answers to: every sample's name,
/// and for every family announced by `# TYPE` the names its samples take (so a family with no
/// sample yet, e.g. a labelled counter nothing has counted, still counts). The value of each
/// entry is whether a sample of that name is on the page.
pub fn exposed_names(page: &str) -> BTreeMap<String, bool> {
    let mut names = BTreeMap::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(family), Some(kind)) = (words.next(), words.next()) else { continue };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            for suffix in suffixes {
                // A Prometheus-text counter's family already ends in `_total`.
                let name = if family.ends_with(suffix) { family.to_owned() } else { format!("{family}{suffix}") };
                names.entry(name).or_insert(false);
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let name: String =
                line.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
            names.insert(name, true);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(query: &str) -> Vec<String> {
        metric_names(query).into_iter().collect()
    }

    #[test]
    fn functions_aggregations_modifiers_and_label_names_are_not_metric_names() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (kind, le) (rate(cdtarget_reconcile_duration_seconds_bucket{kind=~"CDTarget|TenantRepository", instance=~"$instance"}[$__rate_interval])))"#
            ),
            ["cdtarget_reconcile_duration_seconds_bucket"]
        );
        assert_eq!(
            names(
                "sum(rate(a_total[5m])) / ignoring (result) group_left (kind) sum without (result) (b_total offset 1h)"
            ),
            ["a_total", "b_total"]
        );
        assert_eq!(
            names("process_open_fds / process_max_fds > 0.8 and on (instance) cdtarget_leader"),
            ["cdtarget_leader", "process_max_fds", "process_open_fds"]
        );
        assert_eq!(names("absent(up) or vector(1) > bool 1e3 unless count(x) by (y)"), ["up", "x"]);
    }

    #[test]
    fn strings_durations_numbers_and_variables_hide_nothing_and_invent_nothing() {
        assert_eq!(names(r#"m{a="not_a_metric (x)", b!~'y\'z'} offset 1h30m"#), ["m"]);
        assert_eq!(names("changes(process_start_time_seconds[30m:1m]) > 2"), ["process_start_time_seconds"]);
        assert_eq!(names("${ds_name} + $job + 0x1F + 1.5e-3 + .5 + Inf + NaN"), Vec::<String>::new());
        // A name with a colon (recording rules) is one name.
        assert_eq!(names("job:requests:rate5m"), ["job:requests:rate5m"]);
    }

    #[test]
    fn exposed_names_cover_samples_and_the_families_that_have_none() {
        let page = "# HELP cdtarget_reconciles Reconciles.\n# TYPE cdtarget_reconciles counter\n\
                    cdtarget_reconciles_total{kind=\"CDTarget\"} 1\n\
                    # TYPE cdtarget_gitlab_requests counter\n\
                    # TYPE cdtarget_fetch_seconds histogram\n\
                    cdtarget_fetch_seconds_bucket{le=\"1\"} 0\n\
                    # TYPE process_open_fds gauge\nprocess_open_fds 9\n# EOF\n";
        let exposed = exposed_names(page);
        assert_eq!(exposed.get("cdtarget_reconciles_total"), Some(&true));
        assert_eq!(exposed.get("cdtarget_gitlab_requests_total"), Some(&false));
        assert_eq!(exposed.get("cdtarget_fetch_seconds_count"), Some(&false));
        assert_eq!(exposed.get("process_open_fds"), Some(&true));
        // The check the monitoring test makes: a name nobody exposes is caught.
        let used = metric_names("rate(cdtarget_reconciles_total[5m]) + cdtarget_no_such_metric");
        let missing: Vec<&String> = used.iter().filter(|name| !exposed.contains_key(*name)).collect();
        assert_eq!(missing, ["cdtarget_no_such_metric"]);
    }
}
