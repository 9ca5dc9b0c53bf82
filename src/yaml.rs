//! YAML in and out: multi-document parsing that keeps each document's position, and emission.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;

use crate::budget::{self, ENTRY_BYTES, NODE_BYTES};

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
///
/// Within a load every node is charged to the revision's budget as it is made (so YAML aliases
/// cost what they expand to) and nesting stops at its depth limit; a parse stopped by the
/// budget reports the limit crossed.
pub fn parse_documents(text: &str) -> Result<Vec<YamlDocument>, YamlSyntaxError> {
    let mut options = serde_saphyr::Options::default();
    if let Some(parser) = options.budget.as_mut() {
        parser.max_depth = budget::depth_limit();
    }
    let documents: Vec<Spanned<Charged>> = serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
        if let Some(overrun) = budget::current().and_then(|b| b.overrun()) {
            return YamlSyntaxError { line: None, message: overrun.to_string() };
        }
        let line = e.location().map(|l| l.line() as usize);
        YamlSyntaxError { line, message: first_line(&e.to_string()) }
    })?;
    Ok(documents
        .into_iter()
        .enumerate()
        .map(|(i, spanned)| YamlDocument {
            index: i + 1,
            line: spanned.referenced.line() as usize,
            value: spanned.value.0,
        })
        .collect())
}

/// A value parsed node by node against the current budget (serde_json's own `Value` visitor,
/// plus the charges and a depth bound).
struct Charged(Value);

impl<'de> Deserialize<'de> for Charged {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ChargedSeed { depth: 1 }.deserialize(deserializer).map(Charged)
    }
}

/// Deserialises one node at `depth`.
#[derive(Clone, Copy)]
struct ChargedSeed {
    depth: usize,
}

impl ChargedSeed {
    fn charge<E: de::Error>(self, bytes: u64) -> Result<(), E> {
        budget::charge(|b| {
            b.check_depth(self.depth)?;
            b.charge_work(1)?;
            b.charge_bytes(bytes)
        })
        .map_err(E::custom)
    }
}

impl<'de> DeserializeSeed<'de> for ChargedSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ChargedSeed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.charge(NODE_BYTES)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.charge(NODE_BYTES)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.charge(NODE_BYTES)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.charge(NODE_BYTES)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge(NODE_BYTES + v.len() as u64)?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.charge(NODE_BYTES + v.len() as u64)?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.charge(NODE_BYTES)?;
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.charge(NODE_BYTES)?;
        let item = ChargedSeed { depth: self.depth + 1 };
        let mut items = Vec::new();
        while let Some(value) = seq.next_element_seed(item)? {
            items.push(value);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.charge(NODE_BYTES)?;
        let item = ChargedSeed { depth: self.depth + 1 };
        let mut values = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.charge(ENTRY_BYTES + key.len() as u64)?;
            let value = map.next_value_seed(item)?;
            values.insert(key, value);
        }
        Ok(Value::Object(values))
    }
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
