//! YAML with positions: parse once into a JSON value plus a map from JSON pointer to line/column.
//!
//! Every later check (typed fields, unknown keys, JSON Schema meta-validation) reports the position
//! of the exact node it complains about by looking its pointer up here, so all YAML errors carry a
//! line even when they are found long after parsing.

use std::collections::HashMap;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use serde_saphyr::Spanned;

/// A parsed YAML document.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    /// The document as JSON.
    pub value: Value,
    /// JSON pointer (`/input/properties/city/type`) → (line, column), 1-based, in the file.
    pub positions: HashMap<String, (u32, u32)>,
    /// Positions of mapping keys (pointer of the value → position of its key).
    pub key_positions: HashMap<String, (u32, u32)>,
}

impl Doc {
    /// Position of the node at `pointer`, or of its nearest ancestor that has one.
    pub fn position(&self, pointer: &str) -> Option<(u32, u32)> {
        let mut p = pointer;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return Some(*pos);
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return None,
            }
        }
    }

    /// Position of the key naming the value at `pointer` (falls back to the value's position).
    pub fn key_position(&self, pointer: &str) -> Option<(u32, u32)> {
        self.key_positions
            .get(pointer)
            .copied()
            .or_else(|| self.position(pointer))
    }
}

/// A YAML syntax error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// What the parser said.
    pub message: String,
    /// 1-based line in the file.
    pub line: Option<u32>,
    /// 1-based column.
    pub column: Option<u32>,
}

/// How deep YAML may nest. Deeper documents are an error, not a stack overflow: parsing recurses
/// once per level, and a small thread stack (2 MiB) holds about 60 levels in a debug build.
pub const MAX_DEPTH: usize = 40;

/// How many values one YAML document may hold, aliases counted each time they are used: a few
/// lines of nested aliases can otherwise expand to millions of values (seconds and gigabytes).
/// The largest tool schema seen in practice holds a few thousand.
pub const MAX_NODES: usize = 20_000;

/// How many alias uses (`*name`) one YAML document may hold.
pub const MAX_ALIASES: usize = 1_000;

/// Parses YAML. `line_offset` is added to every line (for front matter inside a larger file);
/// `column_offset` to every column (for front matter inside comment prefixes).
pub fn parse(text: &str, line_offset: u32, column_offset: u32) -> Result<Doc, SyntaxError> {
    if text.trim().is_empty() {
        return Ok(Doc {
            value: Value::Null,
            ..Doc::default()
        });
    }
    let options = serde_saphyr::options! {
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_nodes: MAX_NODES,
            max_aliases: MAX_ALIASES,
        },
    };
    let node: Spanned<Node> = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        let loc = e.location();
        SyntaxError {
            message: clean_message(&e.to_string()),
            line: loc.map(|l| clamp(l.line()) + line_offset),
            column: loc.map(|l| clamp(l.column()) + column_offset),
        }
    })?;
    let mut doc = Doc::default();
    doc.value = flatten(node, String::new(), &mut doc, line_offset, column_offset);
    Ok(doc)
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Drops the parser's own position suffix: positions are reported separately.
fn clean_message(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or(msg).trim();
    let first = first.strip_prefix("error:").unwrap_or(first).trim();
    let first = match first.find(" at line ") {
        Some(i) => &first[..i],
        None => first,
    };
    if first.contains("Depth {") || first.contains("recursion limit") {
        return format!("the document nests deeper than {MAX_DEPTH} levels");
    }
    if first.contains("Nodes {") {
        return format!(
            "the document holds more than {MAX_NODES} values (an alias counts every time it is used)"
        );
    }
    if first.contains("Aliases {") || first.contains("AliasAnchorRatio") {
        return format!("the document uses aliases (`*name`) more than {MAX_ALIASES} times");
    }
    match first.strip_prefix("budget breached:") {
        Some(what) => format!("the document exceeds eve's YAML limits ({})", what.trim()),
        None => first.to_owned(),
    }
}

fn flatten(node: Spanned<Node>, pointer: String, doc: &mut Doc, lo: u32, co: u32) -> Value {
    let pos = (
        clamp(node.referenced.line()) + lo,
        clamp(node.referenced.column()) + co,
    );
    doc.positions.insert(pointer.clone(), pos);
    match node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Int(i) => Value::from(i),
        Node::UInt(u) => Value::from(u),
        Node::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Node::Str(s) => Value::String(s),
        Node::Seq(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| flatten(item, format!("{pointer}/{i}"), doc, lo, co))
                .collect(),
        ),
        Node::Map(entries) => {
            let mut map = Map::new();
            for (k, v) in entries {
                let child = format!("{pointer}/{}", escape_pointer(&k.value.0));
                doc.key_positions.insert(
                    child.clone(),
                    (
                        clamp(k.referenced.line()) + lo,
                        clamp(k.referenced.column()) + co,
                    ),
                );
                let value = flatten(v, child, doc, lo, co);
                map.insert(k.value.0, value);
            }
            Value::Object(map)
        }
    }
}

/// Escapes one JSON pointer segment (RFC 6901).
pub fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// A YAML node whose children carry their own spans.
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(Spanned<MapKey>, Spanned<Node>)>),
}

/// Mapping keys: scalars of any kind, kept as their string form.
struct MapKey(String);

impl<'de> Deserialize<'de> for MapKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MapKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E>(self, v: &str) -> Result<MapKey, E> {
                Ok(MapKey(v.to_owned()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<MapKey, E> {
                Ok(MapKey("null".to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Node, D2::Error> {
                Node::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::UInt(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = a.next_entry()? {
                    entries.push(entry);
                }
                Ok(Node::Map(entries))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_nested_nodes() {
        let doc = parse(
            "description: hi\ninput:\n  type: object\n  properties:\n    city:\n      type: objekt\n",
            0,
            0,
        )
        .unwrap();
        assert_eq!(doc.value["input"]["properties"]["city"]["type"], "objekt");
        assert_eq!(doc.position("/input/properties/city/type"), Some((6, 13)));
        assert_eq!(
            doc.key_position("/input/properties/city/type"),
            Some((6, 7))
        );
        assert_eq!(
            doc.position("/input/properties/city/type/nothing"),
            Some((6, 13))
        );
    }

    #[test]
    fn syntax_error_has_a_line() {
        let err = parse("a: [1, 2\nb: c\n", 10, 0).unwrap_err();
        assert_eq!(err.line, Some(12));
        assert!(!err.message.is_empty());
    }
}
