//! Reading an OpenAPI document: 3.0 through `openapiv3`, 3.1 through `oas3`, both into one list
//! of [`Operation`]s with their parameters and JSON request body, local `$ref`s resolved (the
//! schemas inlined, a reference cut where it recurs or past a fixed depth). Errors carry the JSON pointer of the node at
//! fault, which the caller turns into a line and column of the document.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::manifest::ParamLocation;

/// How deep a schema's `$ref`s are inlined before a recursive one is cut to `{}`.
const MAX_REF_DEPTH: usize = 12;

/// A problem with the document, at the node `pointer` names (`""`: the whole document).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DocError {
    pub(super) pointer: String,
    pub(super) message: String,
}

impl DocError {
    fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// One parameter of an operation.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Parameter {
    pub(super) name: String,
    pub(super) location: ParamLocation,
    pub(super) required: bool,
    pub(super) style: String,
    pub(super) explode: bool,
    pub(super) schema: Value,
    pub(super) description: Option<String>,
}

/// The request body of an operation.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Body {
    pub(super) required: bool,
    /// The JSON media type offered (`None`: the operation takes no JSON body).
    pub(super) content_type: Option<String>,
    /// Every media type the document lists.
    pub(super) offered: Vec<String>,
    pub(super) schema: Value,
    pub(super) description: Option<String>,
}

/// One operation (a method on a path).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Operation {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) operation_id: Option<String>,
    pub(super) summary: Option<String>,
    pub(super) description: Option<String>,
    pub(super) parameters: Vec<Parameter>,
    pub(super) body: Option<Body>,
    /// Pointer of the operation in the document.
    pub(super) pointer: String,
}

/// What eve takes from a document.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Document {
    /// The first `servers` URL, if any.
    pub(super) server: Option<String>,
    pub(super) operations: Vec<Operation>,
}

/// Reads a parsed document (JSON or YAML, as a JSON value).
pub(super) fn read(raw: &Value) -> Result<Document, DocError> {
    let version = raw.get("openapi").and_then(Value::as_str).ok_or_else(|| {
        match raw.get("swagger") {
            Some(_) => DocError::new(
                "/swagger",
                "this is a Swagger 2.0 document: eve reads OpenAPI 3.0 and 3.1 (convert it first)",
            ),
            None => DocError::new(
                "",
                "no `openapi:` version field: this is not an OpenAPI document",
            ),
        }
    })?;
    if version.starts_with("3.0") {
        let spec: openapiv3::OpenAPI = typed(raw).map_err(|e| {
            closer::<
                openapiv3::ReferenceOr<openapiv3::Parameter>,
                openapiv3::ReferenceOr<openapiv3::RequestBody>,
            >(raw, e)
        })?;
        v30(raw, &spec)
    } else if version.starts_with("3.1") {
        let spec: oas3::Spec = typed(raw).map_err(|e| {
            closer::<
                oas3::spec::ObjectOrReference<oas3::spec::Parameter>,
                oas3::spec::ObjectOrReference<oas3::spec::RequestBody>,
            >(raw, e)
        })?;
        v31(raw, &spec)
    } else {
        Err(DocError::new(
            "/openapi",
            format!("OpenAPI version `{version}` is not supported: eve reads 3.0 and 3.1"),
        ))
    }
}

/// Deserialises the whole document into a parser crate's type, keeping the path of an error.
fn typed<T: DeserializeOwned>(raw: &Value) -> Result<T, DocError> {
    serde_path_to_error::deserialize(raw).map_err(|e| {
        let mut pointer = String::new();
        for segment in e.path().iter() {
            use serde_path_to_error::Segment;
            match segment {
                Segment::Seq { index } => pointer.push_str(&format!("/{index}")),
                Segment::Map { key } => {
                    pointer.push('/');
                    pointer.push_str(&crate::yaml::escape_pointer(key));
                }
                Segment::Enum { .. } | Segment::Unknown => {}
            }
        }
        DocError::new(
            pointer,
            format!("not a valid OpenAPI document: {}", e.inner()),
        )
    })
}

/// A closer position for an error the whole-document parse placed at a path or operation: the
/// first parameter or request body below it that does not parse on its own (the parsers' untagged
/// reference types stop the error path where they start).
fn closer<P: DeserializeOwned, B: DeserializeOwned>(raw: &Value, error: DocError) -> DocError {
    let Some(Value::Object(paths)) = raw.get("paths") else {
        return error;
    };
    for (path, item) in paths {
        let item_at = format!("/paths/{}", crate::yaml::escape_pointer(path));
        if !item_at.starts_with(&error.pointer) && !error.pointer.starts_with(&item_at) {
            continue;
        }
        let mut places: Vec<(String, &Value, bool)> = Vec::new();
        fn params<'v>(
            places: &mut Vec<(String, &'v Value, bool)>,
            at: &str,
            node: Option<&'v Value>,
        ) {
            for (i, p) in node
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                places.push((format!("{at}/{i}"), p, true));
            }
        }
        params(
            &mut places,
            &format!("{item_at}/parameters"),
            item.get("parameters"),
        );
        let Some(methods) = item.as_object() else {
            continue;
        };
        let mut bodies = Vec::new();
        for (method, op) in methods.iter().filter(|(_, op)| op.is_object()) {
            let at = format!("{item_at}/{method}");
            params(
                &mut places,
                &format!("{at}/parameters"),
                op.get("parameters"),
            );
            if let Some(body) = op.get("requestBody") {
                bodies.push((format!("{at}/requestBody"), body));
            }
        }
        places.extend(bodies.into_iter().map(|(at, b)| (at, b, false)));
        for (at, node, is_param) in places {
            let failed = if is_param {
                serde_json::from_value::<P>(node.clone()).err()
            } else {
                serde_json::from_value::<B>(node.clone()).err()
            };
            if let Some(e) = failed {
                return DocError::new(at, format!("not a valid OpenAPI document: {e}"));
            }
        }
    }
    error
}

/// The value a local `$ref` (`#/components/...`) points at.
fn target<'a>(raw: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let Some(pointer) = reference.strip_prefix('#') else {
        return Err(format!(
            "`$ref: {reference}` points outside this document: eve resolves local references \
             (`#/components/...`) only"
        ));
    };
    raw.pointer(pointer)
        .ok_or_else(|| format!("`$ref: {reference}` points at nothing in this document"))
}

/// A referenced object, read as the parser crate's type.
fn deref<T: DeserializeOwned>(raw: &Value, reference: &str, at: &str) -> Result<T, DocError> {
    let value = target(raw, reference).map_err(|m| DocError::new(at, m))?;
    serde_json::from_value(value.clone())
        .map_err(|e| DocError::new(at, format!("`$ref: {reference}`: {e}")))
}

/// A schema with every local `$ref` inlined.
pub(super) fn inline(raw: &Value, schema: &Value, at: &str) -> Result<Value, DocError> {
    let mut stack = Vec::new();
    inline_in(raw, schema, &mut stack).map_err(|m| DocError::new(at, m))
}

fn inline_in(raw: &Value, schema: &Value, stack: &mut Vec<String>) -> Result<Value, String> {
    match schema {
        Value::Object(map) => {
            if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                if stack.iter().any(|r| r == reference) || stack.len() >= MAX_REF_DEPTH {
                    return Ok(json!({"description": format!("(recursive: {reference})")}));
                }
                let resolved = target(raw, reference)?;
                stack.push(reference.to_owned());
                let mut inlined = inline_in(raw, resolved, stack)?;
                stack.pop();
                // 3.1 allows siblings of `$ref`; they add to the target.
                if let Value::Object(out) = &mut inlined {
                    for (k, v) in map.iter().filter(|(k, _)| *k != "$ref") {
                        out.insert(k.clone(), inline_in(raw, v, stack)?);
                    }
                }
                return Ok(inlined);
            }
            let mut out = Map::new();
            for (k, v) in map {
                out.insert(k.clone(), inline_in(raw, v, stack)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => items
            .iter()
            .map(|v| inline_in(raw, v, stack))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => Ok(other.clone()),
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The style as the document spells it.
fn style_name<T: serde::Serialize>(style: &T) -> String {
    to_value(style).as_str().unwrap_or_default().to_owned()
}

/// The JSON media type among `offered` (`application/json`, then any `…+json`).
fn json_type(offered: &[String]) -> Option<String> {
    offered
        .iter()
        .find(|t| t.as_str() == "application/json")
        .or_else(|| {
            offered.iter().find(|t| {
                let base = t.split(';').next().unwrap_or_default().trim();
                base == "application/json" || base.ends_with("+json")
            })
        })
        .cloned()
}

/// Path-level parameters merged under the operation's own (same name and location: the
/// operation's wins).
fn merged(path_level: Vec<Parameter>, own: Vec<Parameter>) -> Vec<Parameter> {
    let mut out: Vec<Parameter> = path_level
        .into_iter()
        .filter(|p| {
            !own.iter()
                .any(|o| o.name == p.name && o.location == p.location)
        })
        .collect();
    out.extend(own);
    out
}

fn op_pointer(path: &str, method: &str) -> String {
    format!("/paths/{}/{method}", crate::yaml::escape_pointer(path))
}

// ---- OpenAPI 3.0 (openapiv3) ----

/// A 3.0 schema as JSON Schema 2020-12 reads it: `nullable: true` adds `null` to `type`, and
/// boolean `exclusiveMinimum`/`exclusiveMaximum` become the numbers they qualify.
fn from_30(schema: Value) -> Value {
    match schema {
        Value::Object(mut map) => {
            if let Some(Value::Bool(nullable)) = map.get("nullable").cloned() {
                map.remove("nullable");
                if nullable && let Some(Value::String(t)) = map.get("type").cloned() {
                    map.insert("type".into(), json!([t, "null"]));
                }
            }
            for (flag, bound) in [
                ("exclusiveMinimum", "minimum"),
                ("exclusiveMaximum", "maximum"),
            ] {
                if let Some(Value::Bool(on)) = map.get(flag).cloned() {
                    map.remove(flag);
                    if on && let Some(limit) = map.remove(bound) {
                        map.insert(flag.into(), limit);
                    }
                }
            }
            Value::Object(map.into_iter().map(|(k, v)| (k, from_30(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(from_30).collect()),
        other => other,
    }
}

fn v30(raw: &Value, spec: &openapiv3::OpenAPI) -> Result<Document, DocError> {
    use openapiv3::ReferenceOr;
    let mut operations = Vec::new();
    for (path, item) in spec.paths.iter() {
        let item_at = format!("/paths/{}", crate::yaml::escape_pointer(path));
        let item: openapiv3::PathItem = match item {
            ReferenceOr::Item(item) => item.clone(),
            ReferenceOr::Reference { reference } => deref(raw, reference, &item_at)?,
        };
        let path_level = v30_params(raw, &item.parameters, &format!("{item_at}/parameters"))?;
        for (method, op) in item.iter() {
            let at = op_pointer(path, method);
            let own = v30_params(raw, &op.parameters, &format!("{at}/parameters"))?;
            let body = match &op.request_body {
                None => None,
                Some(body) => {
                    let body_at = format!("{at}/requestBody");
                    let body: openapiv3::RequestBody = match body {
                        ReferenceOr::Item(b) => b.clone(),
                        ReferenceOr::Reference { reference } => deref(raw, reference, &body_at)?,
                    };
                    let offered: Vec<String> = body.content.keys().cloned().collect();
                    let content_type = json_type(&offered);
                    let schema = match content_type
                        .as_ref()
                        .and_then(|t| body.content.get(t))
                        .and_then(|m| m.schema.as_ref())
                    {
                        Some(s) => from_30(inline(raw, &to_value(s), &body_at)?),
                        None => json!({}),
                    };
                    Some(Body {
                        required: body.required,
                        content_type,
                        offered,
                        schema,
                        description: body.description.clone(),
                    })
                }
            };
            operations.push(Operation {
                method: method.to_ascii_uppercase(),
                path: path.clone(),
                operation_id: op.operation_id.clone(),
                summary: op.summary.clone(),
                description: op.description.clone(),
                parameters: merged(path_level.clone(), own),
                body,
                pointer: at,
            });
        }
    }
    Ok(Document {
        server: spec.servers.first().map(|s| s.url.clone()),
        operations,
    })
}

fn v30_params(
    raw: &Value,
    list: &[openapiv3::ReferenceOr<openapiv3::Parameter>],
    at: &str,
) -> Result<Vec<Parameter>, DocError> {
    use openapiv3::{Parameter as P, ParameterSchemaOrContent, ReferenceOr};
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let here = format!("{at}/{i}");
        let p: P = match p {
            ReferenceOr::Item(p) => p.clone(),
            ReferenceOr::Reference { reference } => deref(raw, reference, &here)?,
        };
        let (location, style) = match &p {
            P::Query { style, .. } => (ParamLocation::Query, style_name(style)),
            P::Header { style, .. } => (ParamLocation::Header, style_name(style)),
            P::Path { style, .. } => (ParamLocation::Path, style_name(style)),
            P::Cookie { style, .. } => (ParamLocation::Cookie, style_name(style)),
        };
        let data = p.parameter_data_ref();
        let schema = match &data.format {
            ParameterSchemaOrContent::Schema(s) => to_value(s),
            ParameterSchemaOrContent::Content(content) => content
                .values()
                .next()
                .and_then(|m| m.schema.as_ref())
                .map(to_value)
                .unwrap_or_else(|| json!({})),
        };
        out.push(Parameter {
            name: data.name.clone(),
            location,
            required: data.required || location == ParamLocation::Path,
            explode: data.explode.unwrap_or(style == "form"),
            style,
            schema: from_30(inline(raw, &schema, &here)?),
            description: data.description.clone(),
        });
    }
    Ok(out)
}

// ---- OpenAPI 3.1 (oas3) ----

fn v31(raw: &Value, spec: &oas3::Spec) -> Result<Document, DocError> {
    use oas3::spec::ObjectOrReference;
    let mut operations = Vec::new();
    for (path, item) in spec.paths.iter().flatten() {
        let item_at = format!("/paths/{}", crate::yaml::escape_pointer(path));
        let item: oas3::spec::PathItem = match &item.reference {
            Some(reference) => deref(raw, reference, &item_at)?,
            None => item.clone(),
        };
        let path_level = v31_params(raw, &item.parameters, &format!("{item_at}/parameters"))?;
        for (method, op) in item.methods() {
            let method = method.as_str().to_ascii_lowercase();
            let at = op_pointer(path, &method);
            let own = v31_params(raw, &op.parameters, &format!("{at}/parameters"))?;
            let body = match &op.request_body {
                None => None,
                Some(body) => {
                    let body_at = format!("{at}/requestBody");
                    let body: oas3::spec::RequestBody = match body {
                        ObjectOrReference::Object(b) => b.clone(),
                        ObjectOrReference::Ref { ref_path, .. } => deref(raw, ref_path, &body_at)?,
                    };
                    let offered: Vec<String> = body.content.keys().cloned().collect();
                    let content_type = json_type(&offered);
                    let schema = match content_type
                        .as_ref()
                        .and_then(|t| body.content.get(t))
                        .and_then(|m| m.schema.as_ref())
                    {
                        Some(s) => inline(raw, &to_value(s), &body_at)?,
                        None => json!({}),
                    };
                    Some(Body {
                        required: body.required.unwrap_or(false),
                        content_type,
                        offered,
                        schema,
                        description: body.description.clone(),
                    })
                }
            };
            operations.push(Operation {
                method: method.to_ascii_uppercase(),
                path: path.clone(),
                operation_id: op.operation_id.clone(),
                summary: op.summary.clone(),
                description: op.description.clone(),
                parameters: merged(path_level.clone(), own),
                body,
                pointer: at,
            });
        }
    }
    Ok(Document {
        server: spec.servers.first().map(|s| s.url.clone()),
        operations,
    })
}

fn v31_params(
    raw: &Value,
    list: &[oas3::spec::ObjectOrReference<oas3::spec::Parameter>],
    at: &str,
) -> Result<Vec<Parameter>, DocError> {
    use oas3::spec::{ObjectOrReference, ParameterIn};
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let here = format!("{at}/{i}");
        let p: oas3::spec::Parameter = match p {
            ObjectOrReference::Object(p) => p.clone(),
            ObjectOrReference::Ref { ref_path, .. } => deref(raw, ref_path, &here)?,
        };
        let location = match p.location {
            ParameterIn::Path => ParamLocation::Path,
            ParameterIn::Query => ParamLocation::Query,
            ParameterIn::Header => ParamLocation::Header,
            ParameterIn::Cookie => ParamLocation::Cookie,
        };
        let style = match &p.style {
            Some(s) => style_name(s),
            None => match location {
                ParamLocation::Query | ParamLocation::Cookie => "form".to_owned(),
                ParamLocation::Path | ParamLocation::Header => "simple".to_owned(),
            },
        };
        let schema = p.schema.as_ref().map(to_value).unwrap_or_else(|| json!({}));
        out.push(Parameter {
            name: p.name.clone(),
            location,
            required: p.required.unwrap_or(false) || location == ParamLocation::Path,
            explode: p.explode.unwrap_or(style == "form"),
            style,
            schema: inline(raw, &schema, &here)?,
            description: p.description.clone(),
        });
    }
    Ok(out)
}
