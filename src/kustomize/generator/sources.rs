//! The key/value sources of a generator entry (`literals`, `files`, `envs`), parsed as kustomize
//! v5.5's `api/kv` parses them, with the refusals cdtarget adds where kustomize is silent.

use base64::Engine as _;

use super::super::files::{Files, GIT_PATH_REFUSED, Kind, is_git_name};

/// The largest line of an env file: kustomize's line scanner (Go's `bufio.Scanner`) stops at a
/// longer one and silently drops the rest of the file; cdtarget refuses it.
pub(crate) const MAX_ENV_LINE: usize = 64 * 1024 - 1;

/// A `literals` entry: `KEY=value`, the value unquoted when one pair of matching quotes
/// surrounds it. `Err` never contains the entry's text (it may be a secret).
pub(crate) fn parse_literal(source: &str) -> Result<(String, String), String> {
    match source.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), remove_quotes(value).to_owned())),
        Some(_) => Err("the key before `=` is empty; write `KEY=value`".into()),
        None => Err("has no `=`; write `KEY=value`".into()),
    }
}

/// kustomize's `removeQuotes`: one pair of matching `"` or `'` around the whole value goes.
fn remove_quotes(value: &str) -> &str {
    let bytes = value.as_bytes();
    if bytes.len() >= 2 && bytes[0] == bytes[bytes.len() - 1] && (bytes[0] == b'"' || bytes[0] == b'\'') {
        &value[1..value.len() - 1]
    } else {
        value
    }
}

/// A `files` entry: `path` (the key is the path's last element) or `key=path`.
pub(crate) fn parse_file_source(source: &str) -> Result<(String, &str), String> {
    match source.matches('=').count() {
        0 => Ok((go_path_base(source), source)),
        1 => match source.split_once('=') {
            Some(("", _)) => Err("the key before `=` is empty; write `KEY=path` or `path`".into()),
            Some((_, "")) => Err("the path after `=` is empty; write `KEY=path`".into()),
            Some((key, path)) => Ok((key.to_owned(), path)),
            None => unreachable!("one `=` was counted"),
        },
        _ => Err("has more than one `=`; write `KEY=path` (neither may contain `=`)".into()),
    }
}

/// Go's `path.Base`: the last element, trailing slashes dropped (`""` gives `.`, `/` gives `/`).
fn go_path_base(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".into();
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed).to_owned()
}

/// The root-relative path of `source`, a path relative to the kustomization's directory `dir`,
/// refused when it is a URL, absolute, leaves `dir` (kustomize's default load restrictor,
/// `LoadRestrictionsRootOnly`), or has a `.git` segment in any letter case.
pub(crate) fn resolve(dir: &str, source: &str) -> Result<String, String> {
    if source.is_empty() {
        return Err("is empty; name a file in the kustomization's directory".into());
    }
    if source.contains("://") || source.starts_with("http:") || source.starts_with("https:") {
        return Err("is a URL; nothing is fetched: put the file in the repository beside the kustomization".into());
    }
    if source.starts_with('/') {
        return Err("is an absolute path; write it relative to the kustomization's directory".into());
    }
    if source.split('/').any(|part| is_git_name(part.as_bytes())) {
        return Err(GIT_PATH_REFUSED.to_owned());
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    let floor = parts.len();
    for part in source.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.len() == floor => {
                let shown = if dir.is_empty() { "the repository root".to_owned() } else { format!("`{dir}`") };
                return Err(format!(
                    "leaves the kustomization's directory ({shown}); kustomize reads generator files only in \
                     or below it: move the file there"
                ));
            }
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// Reads the file at the root-relative `path`, refusing directories and files over `limit`.
pub(crate) fn read_file(files: &dyn Files, path: &str, limit: usize) -> Result<Vec<u8>, String> {
    match files.stat(path) {
        Ok(Some(Kind::File)) => {}
        Ok(Some(Kind::Directory)) => {
            return Err(format!("`{path}` is a directory; name each file (kustomize reads no directory)"));
        }
        Ok(None) => return Err(format!("`{path}` does not exist")),
        Err(e) => return Err(format!("`{path}`: {e}")),
    }
    let bytes = files.read(path).map_err(|e| format!("`{path}`: {e}"))?;
    if bytes.len() > limit {
        return Err(format!(
            "`{path}` has {} bytes, more than the {limit} a ConfigMap or Secret may hold",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// One parsed line of an env file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct EnvPair {
    /// 1-based line number.
    pub line: usize,
    pub key: String,
    pub value: String,
}

/// An env file: `KEY=value` per line, blank lines and `#` comments skipped, leading whitespace
/// dropped, the value verbatim (no unquoting), a UTF-8 byte order mark allowed on the first line.
/// Refused where kustomize is silent: a line without `=` (kustomize sets `""`; Docker would read
/// the environment, which cdtarget never does), a line with an empty key (kustomize skips it),
/// and a line too long for kustomize's reader. `Err` names the line, never its text.
pub(crate) fn parse_env(content: &[u8]) -> Result<Vec<EnvPair>, String> {
    let mut pairs = Vec::new();
    if content.is_empty() {
        return Ok(pairs);
    }
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    for (i, raw) in body.split(|b| *b == b'\n').enumerate() {
        let number = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() > MAX_ENV_LINE {
            return Err(format!(
                "line {number} is longer than {MAX_ENV_LINE} bytes (kustomize silently drops the rest of the file \
                 from there); put large values in `files`"
            ));
        }
        let raw = if i == 0 { raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw) } else { raw };
        let line = std::str::from_utf8(raw).map_err(|_| format!("line {number} is not UTF-8"))?;
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some(("", _)) => {
                return Err(format!(
                    "line {number} has an empty key before `=` (kustomize skips it); write `KEY=value`"
                ));
            }
            Some((key, value)) => pairs.push(EnvPair { line: number, key: key.to_owned(), value: value.to_owned() }),
            None => {
                return Err(format!(
                    "line {number} has no `=`: write `KEY=` for an empty value (kustomize sets it empty, Docker reads \
                     the environment; cdtarget reads no environment)"
                ));
            }
        }
    }
    Ok(pairs)
}

/// Why `key` is not a valid ConfigMap or Secret key (Kubernetes' `IsConfigMapKey`), if it is not.
pub(crate) fn invalid_key(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("is empty")
    } else if key.len() > 253 {
        Some("is longer than 253 characters")
    } else if !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        Some("may hold only letters, digits, `-`, `_` and `.`")
    } else if key == "." || key.starts_with("..") {
        Some("may not be `.` or `..` or start with `..`")
    } else {
        None
    }
}

/// kustomize's base64 of a Secret value or a ConfigMap's binary value: standard encoding, in
/// lines of 70 characters each ending in `\n` once the text is 70 characters or more.
pub(crate) fn encode_base64(bytes: &[u8]) -> String {
    const LINE: usize = 70;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    if encoded.len() < LINE {
        return encoded;
    }
    let mut out = String::with_capacity(encoded.len() + encoded.len() / LINE + 1);
    for chunk in encoded.as_bytes().chunks(LINE) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::super::files::MemoryFiles;
    use super::*;

    #[test]
    fn literals_split_at_the_first_equals_and_lose_one_pair_of_matching_quotes() {
        assert_eq!(parse_literal("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert_eq!(parse_literal("a=").unwrap(), ("a".into(), "".into()));
        assert_eq!(parse_literal("a='x'").unwrap().1, "x");
        assert_eq!(parse_literal("a=\"x\"").unwrap().1, "x");
        assert_eq!(parse_literal("a=\"x'").unwrap().1, "\"x'");
        assert_eq!(parse_literal("a=\"").unwrap().1, "\"");
        assert_eq!(parse_literal("a=''").unwrap().1, "");
    }

    #[test]
    fn a_literal_without_key_or_equals_is_refused_without_echoing_it() {
        for bad in ["=hunter2", "hunter2"] {
            let message = parse_literal(bad).unwrap_err();
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    #[test]
    fn file_sources_take_the_base_name_or_the_given_key() {
        assert_eq!(parse_file_source("conf/app.properties").unwrap(), ("app.properties".into(), "conf/app.properties"));
        assert_eq!(parse_file_source("k=conf/app").unwrap(), ("k".into(), "conf/app"));
        assert_eq!(parse_file_source("dir/").unwrap().0, "dir");
        assert!(parse_file_source("=a").is_err());
        assert!(parse_file_source("a=").is_err());
        assert!(parse_file_source("a=b=c").is_err());
    }

    #[test]
    fn paths_resolve_inside_the_kustomization_directory_only() {
        assert_eq!(resolve("over", "a.txt").unwrap(), "over/a.txt");
        assert_eq!(resolve("over", "./sub/../a.txt").unwrap(), "over/a.txt");
        assert_eq!(resolve("", "sub//a").unwrap(), "sub/a");
        assert!(resolve("over", "../base/a.txt").unwrap_err().contains("leaves the kustomization's directory"));
        assert!(resolve("over", "sub/../../x").is_err());
        assert!(resolve("", "../etc/passwd").is_err());
        assert!(resolve("over", "/etc/passwd").unwrap_err().contains("absolute"));
        assert!(resolve("over", "https://example.com/x").unwrap_err().contains("URL"));
        assert!(resolve("over", "").is_err());
    }

    #[test]
    fn generator_paths_through_git_are_refused_in_any_case() {
        for source in [".git/config", ".GIT/config", "sub/../.Git/config", "./.git/HEAD", "sub/.git"] {
            let refused = resolve("over", source).expect_err(source);
            assert!(refused.contains("passes through `.git`") && refused.contains("outside `.git`"), "{refused}");
        }
        assert_eq!(resolve("over", ".gitattributes").unwrap(), "over/.gitattributes");
    }

    #[test]
    fn reading_refuses_directories_missing_and_oversized_files() {
        let mut files = MemoryFiles::new();
        files.insert("d/f", "x").insert("big", vec![b'x'; 11]);
        assert!(read_file(&files, "d", 10).unwrap_err().contains("is a directory"));
        assert!(read_file(&files, "nope", 10).unwrap_err().contains("does not exist"));
        assert!(read_file(&files, "big", 10).unwrap_err().contains("11 bytes"));
        assert_eq!(read_file(&files, "d/f", 10).unwrap(), b"x");
    }

    #[test]
    fn env_files_skip_comments_and_blanks_and_keep_values_verbatim() {
        let pairs = parse_env(b"\xEF\xBB\xBFA=1\n# c\n\n   B=' x ' \r\nC=a=b\n\tD=").unwrap();
        let got: Vec<(&str, &str)> = pairs.iter().map(|p| (p.key.as_str(), p.value.as_str())).collect();
        assert_eq!(got, [("A", "1"), ("B", "' x ' "), ("C", "a=b"), ("D", "")]);
        assert_eq!(pairs[1].line, 4);
    }

    #[test]
    fn an_env_line_without_equals_is_refused_and_the_environment_is_never_read() {
        // PATH is set in every test environment; kustomize would give "" and Docker the variable
        let message = parse_env(b"A=1\nPATH\n").unwrap_err();
        assert!(message.contains("line 2") && message.contains("no `=`"), "{message}");
    }

    #[test]
    fn env_lines_with_an_empty_key_bad_utf8_or_too_long_are_refused_without_their_text() {
        let message = parse_env(b"=s3cr3t\n").unwrap_err();
        assert!(message.contains("line 1") && !message.contains("s3cr3t"), "{message}");
        assert!(parse_env(b"A=\xff\n").unwrap_err().contains("not UTF-8"));
        let long = format!("A={}\nB=2\n", "x".repeat(MAX_ENV_LINE));
        assert!(parse_env(long.as_bytes()).unwrap_err().contains("line 1 is longer"));
        // the byte order mark is allowed on the first line only
        assert!(parse_env(b"A=1\n\xEF\xBB\xBFB=2").is_ok_and(|p| p[1].key == "\u{feff}B"));
    }

    #[test]
    fn keys_follow_kubernetes_config_map_key_rules() {
        for good in ["a", "A-b_c.d", "1", ".a", "a..b"] {
            assert_eq!(invalid_key(good), None, "{good}");
        }
        for bad in ["", ".", "..", "..a", "a b", "a/b", "é", &"k".repeat(254)] {
            assert!(invalid_key(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn base64_breaks_lines_at_seventy_characters_once_that_long() {
        assert_eq!(encode_base64(b"b"), "Yg==");
        let long = encode_base64(&[b'a'; 103]);
        let lines: Vec<&str> = long.split_terminator('\n').collect();
        assert_eq!(lines.iter().map(|l| l.len()).collect::<Vec<_>>(), [70, 70]);
        assert!(long.ends_with('\n'));
        // 68 characters stay on one line; 72 make a line of 70 and one of 2, each with its newline
        assert_eq!(encode_base64(&[b'a'; 51]).len(), 68);
        let two = encode_base64(&[b'a'; 52]);
        assert_eq!(two.split_terminator('\n').map(str::len).collect::<Vec<_>>(), [70, 2]);
        assert!(two.ends_with('\n'));
    }
}
