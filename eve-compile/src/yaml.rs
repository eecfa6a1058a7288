//! YAML with positions: parse once into a JSON value plus a map from JSON pointer to line/column.
//!
//! Every later check (typed fields, unknown keys, JSON Schema meta-validation) reports the position
//! of the exact node it complains about by looking its pointer up here, so all YAML errors carry a
//! line even when they are found long after parsing.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use serde_saphyr::Spanned;

/// A line and column, 1-based, in the file.
type Pos = (u32, u32);

/// A parsed YAML document.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    /// The document as JSON.
    pub value: Value,
    /// Positions of the nodes, in document order; see [`Positions`].
    positions: Positions,
}

/// Where each node of a document is: for every JSON pointer (`/input/properties/city/type`), the
/// node's line and column and, for a mapping value, those of its key.
///
/// Parsing records one entry per node, with all pointers in one string, and nothing else: most
/// documents are never asked for a position (only diagnostics are), so the lookup table is built
/// on the first question.
#[derive(Debug, Clone, Default)]
struct Positions {
    /// Every pointer, one after another.
    pointers: String,
    /// One per node in document order: where its pointer ends in `pointers` (it starts where the
    /// previous one ends), its position, and its key's position for a mapping value.
    nodes: Vec<(usize, Pos, Option<Pos>)>,
    /// Pointer → (position, key position), later nodes overriding earlier ones (as a mapping's
    /// repeated key does).
    index: OnceLock<HashMap<String, (Pos, Option<Pos>)>>,
}

impl Positions {
    fn push(&mut self, pointer: &str, pos: Pos, key: Option<Pos>) {
        self.pointers.push_str(pointer);
        self.nodes.push((self.pointers.len(), pos, key));
    }

    fn get(&self, pointer: &str) -> Option<&(Pos, Option<Pos>)> {
        self.index
            .get_or_init(|| {
                let mut index: HashMap<String, (Pos, Option<Pos>)> =
                    HashMap::with_capacity(self.nodes.len());
                let mut start = 0;
                for &(end, pos, key) in &self.nodes {
                    let pointer = self.pointers.get(start..end).unwrap_or_default();
                    start = end;
                    let entry = index.entry(pointer.to_owned()).or_insert((pos, key));
                    entry.0 = pos;
                    if key.is_some() {
                        entry.1 = key;
                    }
                }
                index
            })
            .get(pointer)
    }
}

impl Doc {
    /// Position of the node at `pointer`, or of its nearest ancestor that has one.
    pub fn position(&self, pointer: &str) -> Option<(u32, u32)> {
        let mut p = pointer;
        loop {
            if let Some((pos, _)) = self.positions.get(p) {
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
        self.positions
            .get(pointer)
            .and_then(|(_, key)| *key)
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
        return Ok(Doc::default());
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
    let mut positions = Positions::default();
    let mut pointer = String::new();
    let at = |l: &serde_saphyr::Location| {
        (
            clamp(l.line()) + line_offset,
            clamp(l.column()) + column_offset,
        )
    };
    let value = flatten(node, None, &mut pointer, &mut positions, &at);
    Ok(Doc { value, positions })
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

/// Turns a node into JSON, recording its position (and `key`'s) under `pointer`, then its
/// children's under `pointer/segment`. `pointer` is one buffer grown and shrunk along the walk.
fn flatten(
    node: Spanned<Node>,
    key: Option<Pos>,
    pointer: &mut String,
    positions: &mut Positions,
    at: &dyn Fn(&serde_saphyr::Location) -> Pos,
) -> Value {
    positions.push(pointer, at(&node.referenced), key);
    let len = pointer.len();
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
                .map(|(i, item)| {
                    use std::fmt::Write;
                    let _ = write!(pointer, "/{i}");
                    let value = flatten(item, None, pointer, positions, at);
                    pointer.truncate(len);
                    value
                })
                .collect(),
        ),
        Node::Map(entries) => {
            let mut map = Map::with_capacity(entries.len());
            for (k, v) in entries {
                pointer.push('/');
                push_escaped(pointer, &k.value.0);
                let value = flatten(v, Some(at(&k.referenced)), pointer, positions, at);
                pointer.truncate(len);
                map.insert(k.value.0, value);
            }
            Value::Object(map)
        }
    }
}

/// Appends one escaped JSON pointer segment (RFC 6901) to `pointer`.
fn push_escaped(pointer: &mut String, segment: &str) {
    for c in segment.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
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
