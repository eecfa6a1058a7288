//! `connections/NAME.yaml` with `openapi:`: an HTTP API described by an OpenAPI 3.0 or 3.1
//! document in the agent folder, offered as one tool per operation, `NAME__operationId`.
//!
//! The document is read and checked at build time (`document`), copied into the build with the
//! other run-time files (so its bytes are part of the build's hash: the build is pinned to it),
//! and each allowed operation becomes an ordinary tool whose runner ([`OpenApiCall`]) says how to
//! build the request: so approvals, effects, timeouts, output caps and the lean catalogue apply
//! to these tools exactly as to any other. An operation without `operationId` is named
//! `<method>_<path>` (`GET /items/{id}` → `get_items_id`); any name is reduced to the tool-name
//! rules (`[A-Za-z0-9_-]`, 64 characters, a hash suffix when cut). Credentials are `auth:` (a
//! static secret) or `oauth:` with `credentials:` (checked as an MCP connection's; the runtime
//! obtains the tokens), never both.

#[cfg(test)]
mod build_tests;
mod document;
mod fetched;
#[cfg(test)]
mod fetched_tests;

pub use fetched::{Fetch, Fetcher, MAX_DOCUMENT_BYTES};

use std::collections::{BTreeMap, BTreeSet};

use eve_discover::{Code, Diagnostic, Named};
use serde_json::{Map, Value, json};

use super::{APPROVALS, Compiler, http_url};
use crate::fields::Fields;
use crate::hash::json_hash;
use crate::manifest::*;
use crate::yaml;

const EFFECTS: &[(&str, Effect)] = &[
    ("read", Effect::Read),
    ("idempotent", Effect::Idempotent),
    ("write", Effect::Write),
];

/// The effect of an operation from its method: GET/HEAD/OPTIONS read, PUT/DELETE idempotent,
/// the rest (POST, PATCH) write.
pub fn method_effect(method: &str) -> Effect {
    match method {
        "GET" | "HEAD" | "OPTIONS" | "TRACE" => Effect::Read,
        "PUT" | "DELETE" => Effect::Idempotent,
        _ => Effect::Write,
    }
}

/// The stable name of an operation without `operationId`: its method and path, lower case,
/// every run of other characters one `_` (`GET /items/{item_id}` → `get_items_item_id`).
pub fn operation_name(method: &str, path: &str) -> String {
    sanitise(&format!("{}_{path}", method.to_ascii_lowercase()))
}

/// A name reduced to `[A-Za-z0-9_-]`: every run of other characters becomes one `_`, and `_` at
/// either end goes.
fn sanitise(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

/// `NAME__suffix` within 64 characters: a longer one is cut and ends in 8 hex digits of the
/// whole name's hash, so two long names stay apart.
fn tool_name(connection: &str, suffix: &str) -> String {
    let full = format!("{connection}__{suffix}");
    if full.len() <= 64 {
        return full;
    }
    let hash = &json_hash(&Value::String(full.clone()))[..8];
    format!("{}_{hash}", &full[..64 - 9])
}

/// `*` any run of characters, `?` one; the rest literal.
fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// Whether a value holds a `${VAR}` reference (a secret must come from the environment).
fn has_reference(value: &str) -> bool {
    value.find("${").is_some_and(|i| value[i..].contains('}'))
}

/// Per-operation settings from `operations.override`.
#[derive(Default)]
struct Override {
    approval: Option<Approval>,
    effect: Option<Effect>,
}

impl Compiler {
    /// The tools of `c` when it is an OpenAPI connection (`openapi:`); `None` when it is not
    /// (then it is an MCP connection). `agent_path` is the folder of the agent that holds it.
    pub(super) fn openapi_connection(
        &mut self,
        c: &Named,
        agent_path: &str,
        sandbox: &Sandbox,
    ) -> Option<Vec<Tool>> {
        let doc = yaml::parse(&c.file.text, 0, 0).ok()?;
        doc.value.get("openapi")?;
        Some(
            self.openapi_tools(c, &doc, agent_path, sandbox)
                .unwrap_or_default(),
        )
    }

    fn openapi_tools(
        &mut self,
        c: &Named,
        doc: &yaml::Doc,
        agent_path: &str,
        sandbox: &Sandbox,
    ) -> Option<Vec<Tool>> {
        let file = c.file.path.clone();
        let mut ok = self.check_name(&c.name, &file, "connection");
        if c.name.contains("__") {
            self.push(
                Diagnostic::new(Code::InvalidName, file.clone(), format!("connection name `{}` contains `__`", c.name))
                    .help("`__` separates the connection from its tool names (`NAME__tool`); rename the file"),
            );
            ok = false;
        }
        let mut f = Fields::new(&file, doc, "", &mut self.diags);
        f.unknown_keys(
            &[
                "openapi",
                "openapi_sha256",
                "base_url",
                "auth",
                "operations",
                "approval",
                "timeout",
                "output_limit",
                "description",
                "oauth",
                "credentials",
            ],
            "OpenAPI connection",
        );
        for other in ["command", "url"] {
            if f.has(other) {
                f.report(
                    Code::InvalidConnection,
                    other,
                    format!("connection has both `openapi` and `{other}`"),
                    "an OpenAPI connection has `openapi:` (its document) and `base_url:`; an MCP server has `command:` or `url:`",
                );
                ok = false;
            }
        }
        let location = f.string("openapi")?;
        let pin = f.string("openapi_sha256");
        let base_url = f.string("base_url");
        let approval = f.choice("approval", APPROVALS).unwrap_or_default();
        let timeout_ms = f.duration_ms("timeout").unwrap_or(sandbox.timeout_ms);
        let output_limit = f.u64("output_limit").unwrap_or(sandbox.output_limit);
        let auth = self.connection_auth(&file, doc);
        let (oauth, credentials) = self.openapi_oauth(c, doc, auth.is_some());
        ok &= oauth.is_ok();
        let oauth = oauth.unwrap_or_default();
        let (allow, block, overrides) = self.operation_settings(&file, doc);

        // The document: fetched from its URL, or a file of the agent folder beside the agent
        // that holds the connection.
        let (rel, text, sha256) = if fetched::is_url(&location) {
            let fetched = self.fetch_document(&file, doc, &location, pin.as_deref())?;
            (location.clone(), fetched.text, Some(fetched.sha256))
        } else {
            if pin.is_some() {
                let mut f = Fields::new(&file, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidConnection,
                    "openapi_sha256",
                    "`openapi_sha256` pins a document fetched from a URL; this one is a file of the agent folder".to_owned(),
                    "remove `openapi_sha256`: the file's bytes are already part of the build",
                );
                ok = false;
            }
            let rel = self.document_path(&file, doc, &location)?;
            let rel = if agent_path.is_empty() {
                rel
            } else {
                format!("{agent_path}/{rel}")
            };
            self.documents.push(rel.clone());
            let text = self.read_document(&file, doc, &rel)?;
            (rel, text, None)
        };
        let spec = match yaml::parse(&text, 0, 0) {
            Ok(spec) => spec,
            Err(e) => {
                let mut d = Diagnostic::new(
                    Code::InvalidOpenApi,
                    rel.clone(),
                    format!("the OpenAPI document does not parse: {}", e.message),
                )
                .help("check the JSON or YAML syntax around this line");
                d.line = e.line;
                d.column = e.column;
                self.push(d);
                return None;
            }
        };
        let read = match document::read(&spec.value) {
            Ok(read) => read,
            Err(e) => {
                self.document_error(&rel, &spec, &e.pointer, e.message);
                return None;
            }
        };
        let base_url = match base_url.or(read.server.clone()) {
            Some(url) if http_url(&url) => url.trim_end_matches('/').to_owned(),
            Some(url) => {
                let mut f = Fields::new(&file, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidConnection,
                    if f.has("base_url") {
                        "base_url"
                    } else {
                        "openapi"
                    },
                    format!("the base URL `{url}` is not an absolute http:// or https:// URL"),
                    "set `base_url: https://api.example.com` in the connection file",
                );
                return None;
            }
            None => {
                let mut f = Fields::new(&file, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidConnection,
                    "openapi",
                    "the document lists no `servers` and the connection has no `base_url`"
                        .to_owned(),
                    "set `base_url: https://api.example.com` in the connection file",
                );
                return None;
            }
        };
        if sha256.is_none() {
            self.files.insert(rel.clone());
        }

        let mut tools: Vec<Tool> = Vec::new();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut offered_ops = BTreeSet::new();
        for op in &read.operations {
            let suffix = match &op.operation_id {
                Some(id) => sanitise(id),
                None => operation_name(&op.method, &op.path),
            };
            if suffix.is_empty() {
                self.document_error(
                    &rel,
                    &spec,
                    &op.pointer,
                    format!(
                        "`{} {}` has an `operationId` with no usable character",
                        op.method, op.path
                    ),
                );
                ok = false;
                continue;
            }
            let name = tool_name(&c.name, &suffix);
            let at = format!("{} {}", op.method, op.path);
            if let Some(first) = seen.insert(name.clone(), at.clone()) {
                self.document_error(
                    &rel,
                    &spec,
                    &op.pointer,
                    format!("`{at}` and `{first}` both become the tool `{name}`"),
                );
                ok = false;
                continue;
            }
            offered_ops.insert(suffix.clone());
            let allowed = (allow.is_empty() || allow.iter().any(|p| glob(p, &suffix)))
                && !block.iter().any(|p| glob(p, &suffix));
            if !allowed {
                continue;
            }
            let own = overrides.get(&suffix);
            let (input_schema, mut call) =
                build_call(&c.name, &rel, &base_url, op, auth.clone(), oauth.is_some());
            call.oauth = oauth.clone().map(Box::new);
            call.document_sha256.clone_from(&sha256);
            call.credentials = credentials;
            if let Err(e) = jsonschema::validator_for(&input_schema) {
                self.document_error(
                    &rel,
                    &spec,
                    &op.pointer,
                    format!("`{at}`: its parameters and body make no valid JSON Schema: {e}"),
                );
                ok = false;
                continue;
            }
            let mut description = [op.summary.as_deref(), op.description.as_deref()]
                .into_iter()
                .flatten()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("\n\n");
            if !description.is_empty() {
                description.push_str("\n\n");
            }
            description.push_str(&format!(
                "`{} {}` on the `{}` API.",
                op.method, op.path, c.name
            ));
            if let Some(body) = op.body.as_ref().filter(|b| b.content_type.is_none()) {
                description.push_str(&format!(
                    " Its request body ({}) is not JSON and is not sent.",
                    body.offered.join(", ")
                ));
            }
            tools.push(Tool {
                name,
                source: file.clone(),
                description,
                schema_hash: json_hash(&input_schema),
                input_schema,
                approval: own.and_then(|o| o.approval).unwrap_or(approval),
                effect: own
                    .and_then(|o| o.effect)
                    .unwrap_or_else(|| method_effect(&op.method)),
                timeout_ms,
                output_limit,
                deferred: false,
                env: Vec::new(),
                dynamic: Vec::new(),
                phase: None,
                runner: Runner::OpenApi(call),
                ends_turn: false,
                approval_prompt: None,
            });
        }
        for name in overrides.keys().filter(|n| !offered_ops.contains(*n)) {
            let mut f = Fields::new(&file, doc, "/operations/override", &mut self.diags);
            f.report(
                Code::InvalidConnection,
                name,
                format!("`operations.override` names `{name}`, which is not an operation of the document"),
                "use the operation's name as its tool has it after `NAME__`",
            );
            ok = false;
        }
        let auth_ok = !self.diags.iter().any(|d| {
            d.file.as_deref() == Some(file.as_str())
                && d.code.severity() == eve_discover::Severity::Error
        });
        (ok && auth_ok).then_some(tools)
    }

    /// `openapi:` as a path of the agent folder: relative, without `..`.
    fn document_path(&mut self, file: &str, doc: &yaml::Doc, location: &str) -> Option<String> {
        let mut f = Fields::new(file, doc, "", &mut self.diags);
        let path = std::path::Path::new(location);
        if location.is_empty()
            || path.is_absolute()
            || path
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            f.report(
                Code::InvalidConnection,
                "openapi",
                format!("`openapi: {location}` must be a relative path inside the agent folder, without `.` or `..`"),
                "put the document in the agent folder (`openapi: specs/api.json`)",
            );
            return None;
        }
        Some(location.to_owned())
    }

    /// The document named by URL (see [`fetched`]), checked against `openapi_sha256` when the
    /// file pins one. A stale copy is a W013; no document at all, or another than the pinned
    /// one, an E061 at `openapi:`.
    fn fetch_document(
        &mut self,
        file: &str,
        doc: &yaml::Doc,
        url: &str,
        pin: Option<&str>,
    ) -> Option<fetched::Document> {
        let got = fetched::document(url, self.fetch.as_ref(), self.cache_dir.as_deref());
        let mut f = Fields::new(file, doc, "", &mut self.diags);
        let document = match got {
            Ok(document) => document,
            Err(e) => {
                f.report(
                    Code::InvalidOpenApi,
                    "openapi",
                    format!("cannot fetch the OpenAPI document {url}: {e}"),
                    "check that the URL answers with the document, or download it into the agent folder and name its path (`openapi: specs/api.json`)",
                );
                return None;
            }
        };
        if let Some((why, at)) = &document.stale {
            f.report(
                Code::OpenApiStale,
                "openapi",
                format!(
                    "cannot fetch the OpenAPI document {url} ({why}): using the copy fetched at {}",
                    fetched::shown_time(*at)
                ),
                "the build's tools are those of that copy; build again when the URL answers",
            );
        }
        if let Some(pin) = pin.filter(|p| !p.eq_ignore_ascii_case(&document.sha256)) {
            f.report(
                Code::InvalidOpenApi,
                "openapi_sha256",
                format!(
                    "the document at {url} is not the pinned one: its SHA-256 is {}, the file pins {pin}",
                    document.sha256
                ),
                "read what changed in the document; when it is what you want, set `openapi_sha256` to the new value",
            );
            return None;
        }
        Some(document)
    }

    /// The document's text, from the agent folder only (no link may lead outside it).
    fn read_document(&mut self, file: &str, doc: &yaml::Doc, rel: &str) -> Option<String> {
        let read = || -> Result<String, String> {
            let root = self
                .agent_dir
                .as_ref()
                .ok_or("this build reads no files besides the discovered ones")?;
            let root = root.canonicalize().map_err(|e| e.to_string())?;
            let path = root.join(rel).canonicalize().map_err(|e| e.to_string())?;
            if !path.starts_with(&root) {
                return Err("it leads outside the agent folder".to_owned());
            }
            std::fs::read_to_string(&path).map_err(|e| e.to_string())
        };
        match read() {
            Ok(text) => Some(text),
            Err(e) => {
                let mut f = Fields::new(file, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidOpenApi,
                    "openapi",
                    format!("cannot read the OpenAPI document `{rel}`: {e}"),
                    "the path is relative to the agent folder holding `connections/`",
                );
                None
            }
        }
    }

    /// An E061 in the document, at the node `pointer` names (or its nearest ancestor that has a
    /// position).
    fn document_error(&mut self, rel: &str, spec: &yaml::Doc, pointer: &str, message: String) {
        let mut d = Diagnostic::new(Code::InvalidOpenApi, rel.to_owned(), message)
            .help("fix the document at this position (see docs/connections.md)");
        let mut p = pointer.to_owned();
        loop {
            if let Some((l, col)) = spec.position(&p) {
                d = d.at(l, col);
                break;
            }
            match p.rfind('/') {
                Some(i) => p.truncate(i),
                None => break,
            }
        }
        self.push(d);
    }

    /// `auth:` of a connection: `{type: bearer, token}`, `{type: header, name, value}` or
    /// `{type: basic, username, password}`; secrets as `${VAR}`.
    fn connection_auth(&mut self, file: &str, doc: &yaml::Doc) -> Option<ConnectionAuth> {
        doc.value.get("auth")?;
        let mut f = Fields::new(file, doc, "/auth", &mut self.diags);
        let kind = f.required_string("type", "`type: bearer`, `header` or `basic`")?;
        let secret = |f: &mut Fields, key: &str| -> Option<String> {
            let value = f.required_string(key, "a `${VAR}` reference to the environment")?;
            if !has_reference(&value) {
                f.report(
                    Code::InvalidConnection,
                    key,
                    format!("`auth.{key}` is written in the file: a secret must come from the environment"),
                    "write `${VAR}` and set VAR where eve runs",
                );
                return None;
            }
            Some(value)
        };
        match kind.as_str() {
            "bearer" => {
                f.unknown_keys(&["type", "token"], "auth");
                Some(ConnectionAuth::Bearer {
                    token: secret(&mut f, "token")?,
                })
            }
            "header" => {
                f.unknown_keys(&["type", "name", "value"], "auth");
                let name = f.required_string("name", "the header's name, such as `X-API-Key`")?;
                if reqwest_header_name_ok(&name) {
                    Some(ConnectionAuth::Header {
                        name,
                        value: secret(&mut f, "value")?,
                    })
                } else {
                    f.report(
                        Code::InvalidConnection,
                        "name",
                        format!("`{name}` is not a valid header name"),
                        "letters, digits and `-`",
                    );
                    None
                }
            }
            "basic" => {
                f.unknown_keys(&["type", "username", "password"], "auth");
                Some(ConnectionAuth::Basic {
                    username: f.required_string("username", "the user name")?,
                    password: secret(&mut f, "password")?,
                })
            }
            other => {
                f.report(
                    Code::InvalidConnection,
                    "type",
                    format!("`auth.type: {other}` is not supported for OpenAPI connections"),
                    "use `bearer`, `header` or `basic`",
                );
                None
            }
        }
    }

    /// `oauth:` and `credentials:` of an OpenAPI connection (checked as an MCP connection's are);
    /// `Err` (with diagnostics) when they cannot be used, or when `auth:` is given as well.
    fn openapi_oauth(
        &mut self,
        c: &Named,
        doc: &yaml::Doc,
        has_auth: bool,
    ) -> (Result<Option<OAuthSettings>, ()>, Credentials) {
        let mut f = Fields::new(&c.file.path, doc, "", &mut self.diags);
        let credentials = f
            .choice(
                "credentials",
                &[("app", Credentials::App), ("user", Credentials::User)],
            )
            .unwrap_or_default();
        if !f.has("oauth") {
            if credentials == Credentials::User {
                f.report(
                    Code::InvalidConnection,
                    "credentials",
                    "`credentials: user` needs an `oauth:` block".to_owned(),
                    "per-user tokens come from OAuth: add `oauth:` (with `grant: authorization_code`)",
                );
                return (Err(()), credentials);
            }
            return (Ok(None), credentials);
        }
        if has_auth {
            f.report(
                Code::InvalidConnection,
                "oauth",
                "the connection has both `auth` and `oauth`".to_owned(),
                "an API is reached with one kind of credentials: keep `oauth:` (tokens from its authorization server) or `auth:` (a static secret)",
            );
            return (Err(()), credentials);
        }
        match self.oauth(c, doc, credentials) {
            Some(settings) => (Ok(Some(settings)), credentials),
            None => (Err(()), credentials),
        }
    }

    /// `operations: {allow, block, override: {NAME: {approval, effect}}}`.
    fn operation_settings(
        &mut self,
        file: &str,
        doc: &yaml::Doc,
    ) -> (Vec<String>, Vec<String>, BTreeMap<String, Override>) {
        let mut overrides = BTreeMap::new();
        if doc.value.get("operations").is_none() {
            return (Vec::new(), Vec::new(), overrides);
        }
        let mut f = Fields::new(file, doc, "/operations", &mut self.diags);
        f.unknown_keys(&["allow", "block", "override"], "operations");
        let allow = f.string_list("allow").unwrap_or_default();
        let block = f.string_list("block").unwrap_or_default();
        let names: Vec<String> = doc
            .value
            .pointer("/operations/override")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for name in names {
            let base = format!("/operations/override/{}", yaml::escape_pointer(&name));
            let mut g = Fields::new(file, doc, &base, &mut self.diags);
            g.unknown_keys(&["approval", "effect"], "operation override");
            overrides.insert(
                name,
                Override {
                    approval: g.choice("approval", APPROVALS),
                    effect: g.choice("effect", EFFECTS),
                },
            );
        }
        (allow, block, overrides)
    }
}

/// Whether `name` is a header name (RFC 9110 token characters).
fn reqwest_header_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The input schema and runner of one operation: each parameter an input field of its name
/// (`query_NAME`-style prefixes when two locations share a name), the JSON body under `body`.
fn build_call(
    connection: &str,
    document: &str,
    base_url: &str,
    op: &document::Operation,
    auth: Option<ConnectionAuth>,
    oauth: bool,
) -> (Value, OpenApiCall) {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut parameters = Vec::new();
    // A header the connection's auth sets is not the model's to give.
    let auth_header = match &auth {
        Some(ConnectionAuth::Header { name, .. }) => Some(name.to_ascii_lowercase()),
        Some(ConnectionAuth::Bearer { .. } | ConnectionAuth::Basic { .. }) => {
            Some("authorization".to_owned())
        }
        None if oauth => Some("authorization".to_owned()),
        None => None,
    };
    for p in op.parameters.iter().filter(|p| {
        p.location != ParamLocation::Header
            || auth_header.as_deref() != Some(p.name.to_ascii_lowercase().as_str())
    }) {
        let clash = op.parameters.iter().filter(|q| q.name == p.name).count() > 1;
        let location = match p.location {
            ParamLocation::Path => "path",
            ParamLocation::Query => "query",
            ParamLocation::Header => "header",
            ParamLocation::Cookie => "cookie",
        };
        let field = if clash {
            format!("{location}_{}", p.name)
        } else {
            p.name.clone()
        };
        let mut schema = p.schema.clone();
        if let (Some(text), Value::Object(map)) = (&p.description, &mut schema) {
            map.entry("description").or_insert_with(|| json!(text));
        }
        properties.insert(field.clone(), schema);
        if p.required {
            required.push(json!(field));
        }
        parameters.push(OpenApiParam {
            name: p.name.clone(),
            field,
            location: p.location,
            style: p.style.clone(),
            explode: p.explode,
            required: p.required,
        });
    }
    let body = op.body.as_ref().and_then(|b| {
        let content_type = b.content_type.clone()?;
        let field = if properties.contains_key("body") {
            "request_body".to_owned()
        } else {
            "body".to_owned()
        };
        let mut schema = b.schema.clone();
        if let (Some(text), Value::Object(map)) = (&b.description, &mut schema) {
            map.entry("description").or_insert_with(|| json!(text));
        }
        properties.insert(field.clone(), schema);
        if b.required {
            required.push(json!(field));
        }
        Some(OpenApiBody {
            field,
            content_type,
            required: b.required,
        })
    });
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    let call = OpenApiCall {
        connection: connection.to_owned(),
        document: document.to_owned(),
        document_sha256: None,
        method: op.method.clone(),
        base_url: base_url.to_owned(),
        path: op.path.clone(),
        parameters,
        body,
        auth,
        oauth: None,
        credentials: Credentials::App,
    };
    (schema, call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_fit_the_rules() {
        assert_eq!(
            operation_name("GET", "/items/{item_id}"),
            "get_items_item_id"
        );
        assert_eq!(operation_name("DELETE", "/"), "delete");
        assert_eq!(sanitise("list pets/v2.json"), "list_pets_v2_json");
        let long = tool_name("api", &"x".repeat(80));
        assert_eq!(long.len(), 64);
        assert_ne!(long, tool_name("api", &format!("{}y", "x".repeat(80))));
        assert!(super::super::valid_name(&long));
    }

    #[test]
    fn globs_and_effects() {
        assert!(glob("list_*", "list_pets"));
        assert!(!glob("list_*", "get_pet"));
        assert!(glob("get_?", "get_a"));
        assert_eq!(method_effect("GET"), Effect::Read);
        assert_eq!(method_effect("PUT"), Effect::Idempotent);
        assert_eq!(method_effect("DELETE"), Effect::Idempotent);
        assert_eq!(method_effect("POST"), Effect::Write);
        assert_eq!(method_effect("PATCH"), Effect::Write);
    }
}
