//! YAML in and out: multi-document parsing that keeps each document's position, and emission.

use serde::Serialize;
use serde_json::Value;
use serde_saphyr::Spanned;

/// One non-empty YAML document of a file.
#[derive(Clone, Debug, PartialEq)]
pub struct YamlDocument {
    /// 1-based position among the file's non-empty documents.
    pub index: usize,
    /// 1-based line where the document's content starts.
    pub line: usize,
    /// The document's content.
    pub value: Value,
}

/// A file that is not valid YAML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlSyntaxError {
    /// 1-based line of the error, when known.
    pub line: Option<usize>,
    /// What the parser said.
    pub message: String,
}

/// Parses every document of `text`; empty documents are skipped.
pub fn parse_documents(text: &str) -> Result<Vec<YamlDocument>, YamlSyntaxError> {
    let documents: Vec<Spanned<Value>> = serde_saphyr::from_multiple(text).map_err(|e| {
        let line = e.location().map(|l| l.line() as usize);
        YamlSyntaxError { line, message: first_line(&e.to_string()) }
    })?;
    Ok(documents
        .into_iter()
        .enumerate()
        .map(|(i, spanned)| YamlDocument {
            index: i + 1,
            line: spanned.referenced.line() as usize,
            value: spanned.value,
        })
        .collect())
}

/// Parses a text that holds at most one YAML document (none gives `null`).
pub fn parse_one(text: &str) -> Result<Value, YamlSyntaxError> {
    let mut documents = parse_documents(text)?;
    match documents.len() {
        0 => Ok(Value::Null),
        1 => Ok(documents.remove(0).value),
        n => Err(YamlSyntaxError {
            line: Some(documents[1].line),
            message: format!("expected one YAML document, found {n}"),
        }),
    }
}

/// Serialises `value` as one YAML document (without the `---` separator).
pub fn to_yaml<T: Serialize>(value: &T) -> String {
    serde_saphyr::to_string(value).expect("serialising plain data to YAML cannot fail")
}

fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or(message).trim().to_owned()
}
