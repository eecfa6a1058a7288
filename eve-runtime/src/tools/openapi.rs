//! Tools of OpenAPI connections: one request per call, built from the operation's parameters
//! (see `eve_compile::OpenApiCall`).
//!
//! Each path parameter becomes exactly one path segment: its value is percent-encoded with
//! everything but the unreserved characters escaped (so `/`, `%`, `?` and `#` stay inside the
//! segment), and a value that would make the segment `.` or `..` is refused. Query parameters
//! follow their style (`form` exploded or not, `spaceDelimited`, `pipeDelimited`, `deepObject`);
//! header values are checked by the HTTP library (no line breaks) and may not name the headers
//! the request itself controls. The connection's auth (bearer, header, basic) is read from the
//! environment at each call and marked sensitive; an `oauth:` connection's token comes from the
//! runtime's store (`crate::mcp::oauth::api`), is marked sensitive, and is cut from the answer.
//! The request may reach the origin of the connection's `base_url` only, through the same
//! guarded client as `http:` tools (names resolved once, every address checked, redirects kept
//! to that origin); the answer is read up to the tool's output limit while it streams, and a
//! non-2xx status is a failed result with the status and the tail of the body.

use std::time::Instant;

use base64::Engine as _;
use eve_compile::{ConnectionAuth, OpenApiCall, OpenApiParam, ParamLocation, Tool};
use eve_sandbox::egress::{EgressPolicy, Rule};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, COOKIE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::error::ToolError;
use super::guarded::Egress;
use super::http::{IDEMPOTENCY_KEY, Prepared, send};
use super::template::{expand_env, value_text};
use super::{ToolContext, ToolResult, effective_limit, effective_timeout};

/// Debug builds only: with this variable at `1` in the tool's environment, path values are put
/// in the path as they are, unencoded and unchecked (for the test that shows why they must not).
pub const TEST_RAW_PATH_VALUES: &str = "EVE_TEST_OPENAPI_RAW_PATH";

/// What a path value keeps unescaped: the unreserved characters only.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Headers the request itself sets; a parameter may not.
const OWN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "authorization",
    "cookie",
    "idempotency-key",
];

/// Runs a tool of an OpenAPI connection.
pub(crate) async fn run_openapi_tool(
    tool: &Tool,
    call: &OpenApiCall,
    input: &Value,
    ctx: &ToolContext,
    cancel: CancellationToken,
) -> ToolResult {
    let start = Instant::now();
    let timeout = effective_timeout(tool.timeout_ms);
    let limit = effective_limit(tool.output_limit);
    let bearer = match &call.oauth {
        Some(_) => match crate::mcp::oauth::api::bearer(call, ctx).await {
            Ok(token) => Some(token),
            Err(e) => return ToolResult::failure(e, start.elapsed()),
        },
        None => None,
    };
    let planned = prepare(call, input, ctx, bearer.as_deref()).and_then(|prepared| {
        let egress = egress(&prepared.0, ctx)?;
        Ok((prepared.1, egress))
    });
    match planned {
        Ok((prepared, egress)) => {
            let mut result = send(prepared, egress, ctx, limit, timeout, cancel, start).await;
            if let Some(token) = &bearer {
                if result
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("HTTP 401"))
                {
                    crate::mcp::oauth::api::refused(call, ctx).await;
                }
                // An API that echoes the token does not hand it to the model.
                hide(&mut result.output, token);
                if let Some(error) = &mut result.error {
                    *error = error.replace(token.as_str(), "[redacted]");
                }
            }
            result
        }
        Err(e) => {
            let mut result = ToolResult::failure(e.to_string(), start.elapsed());
            result.input_refused = matches!(
                e,
                ToolError::PathSegment { .. } | ToolError::InvalidHeader { .. }
            );
            result
        }
    }
}

/// The only destination: the origin of the base URL.
fn egress(base: &Url, ctx: &ToolContext) -> Result<Egress, ToolError> {
    let (Some(host), Some(port)) = (base.host_str(), base.port_or_known_default()) else {
        return Err(ToolError::InvalidUrl {
            url: base.to_string(),
            reason: "no host".to_owned(),
        });
    };
    let rule = format!("{host}:{port}")
        .parse::<Rule>()
        .map_err(|e| ToolError::Network(format!("the base URL cannot be a destination: {e}")))?;
    Ok(Egress {
        policy: EgressPolicy::Allow(vec![rule]),
        own: ctx.exec.own_listeners(),
    })
}

/// The base URL and the request of one call.
fn prepare(
    call: &OpenApiCall,
    input: &Value,
    ctx: &ToolContext,
    bearer: Option<&str>,
) -> Result<(Url, Prepared), ToolError> {
    let lookup = |name: &str| ctx.lookup(name);
    let method = Method::from_bytes(call.method.as_bytes())
        .map_err(|_| ToolError::InvalidMethod(call.method.clone()))?;
    let base_text = expand_env(&call.base_url, &lookup, "base_url")?;
    let base = Url::parse(&base_text).map_err(|e| ToolError::InvalidUrl {
        url: base_text.clone(),
        reason: e.to_string(),
    })?;
    let raw = cfg!(debug_assertions) && ctx.lookup(TEST_RAW_PATH_VALUES).as_deref() == Some("1");
    let field = |p: &OpenApiParam| input.get(&p.field).filter(|v| !v.is_null());

    // The path: the template's text as written, each `{name}` one encoded segment.
    let mut path = String::new();
    let mut rest = call.path.as_str();
    while let Some(open) = rest.find('{') {
        path.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        rest = &rest[open + close + 1..];
        let param = call
            .parameters
            .iter()
            .find(|p| p.location == ParamLocation::Path && p.name == name);
        let value = param.and_then(field).ok_or_else(|| {
            ToolError::InvalidInput(format!("path parameter `{name}` is required"))
        })?;
        let param = param.ok_or_else(|| ToolError::InvalidInput(name.to_owned()))?;
        let segment = if raw {
            value_text(Some(value))
        } else {
            path_value(param, value)?
        };
        path.push_str(&segment);
    }
    path.push_str(rest);
    let joined = format!("{}{path}", base_text.trim_end_matches('/'));
    let mut url = Url::parse(&joined).map_err(|e| ToolError::InvalidUrl {
        url: joined.clone(),
        reason: e.to_string(),
    })?;
    if url.origin() != base.origin() {
        return Err(ToolError::InvalidUrl {
            url: joined,
            reason: "it leaves the connection's base URL".to_owned(),
        });
    }

    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut headers = HeaderMap::new();
    let mut cookies: Vec<String> = Vec::new();
    for param in &call.parameters {
        let Some(value) = field(param) else {
            continue;
        };
        match param.location {
            ParamLocation::Path => {}
            ParamLocation::Query => query_pairs(param, value, &mut pairs),
            ParamLocation::Header => {
                let invalid = |reason: String| ToolError::InvalidHeader {
                    name: param.name.clone(),
                    reason,
                };
                if OWN_HEADERS.contains(&param.name.to_ascii_lowercase().as_str()) {
                    return Err(invalid("eve sets this header itself".to_owned()));
                }
                let name = HeaderName::from_bytes(param.name.as_bytes())
                    .map_err(|e| invalid(e.to_string()))?;
                let text = joined_value(value, ",", param.explode);
                let value = HeaderValue::from_str(&text).map_err(|e| invalid(e.to_string()))?;
                headers.insert(name, value);
            }
            ParamLocation::Cookie => cookies.push(format!(
                "{}={}",
                utf8_percent_encode(&param.name, SEGMENT),
                utf8_percent_encode(&joined_value(value, ",", false), SEGMENT)
            )),
        }
    }
    if !pairs.is_empty() {
        let mut query = url.query_pairs_mut();
        for (k, v) in &pairs {
            query.append_pair(k, v);
        }
    }
    if !cookies.is_empty()
        && let Ok(value) = HeaderValue::from_str(&cookies.join("; "))
    {
        headers.insert(COOKIE, value);
    }

    let body = match &call.body {
        Some(spec) => match input.get(&spec.field) {
            Some(value) => {
                let content_type = HeaderValue::from_str(&spec.content_type)
                    .unwrap_or(HeaderValue::from_static("application/json"));
                headers.insert(CONTENT_TYPE, content_type);
                Some(
                    serde_json::to_vec(value)
                        .map_err(|e| ToolError::InvalidInput(e.to_string()))?,
                )
            }
            None => None,
        },
        None => None,
    };

    if let Some(auth) = &call.auth {
        let (name, value) = match auth {
            ConnectionAuth::Bearer { token } => (
                AUTHORIZATION,
                format!("Bearer {}", expand_env(token, &lookup, "auth.token")?),
            ),
            ConnectionAuth::Header { name, value } => (
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| ToolError::InvalidHeader {
                    name: name.clone(),
                    reason: e.to_string(),
                })?,
                expand_env(value, &lookup, "auth.value")?,
            ),
            ConnectionAuth::Basic { username, password } => {
                let user = expand_env(username, &lookup, "auth.username")?;
                let pass = expand_env(password, &lookup, "auth.password")?;
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
                (AUTHORIZATION, format!("Basic {encoded}"))
            }
        };
        let mut value = HeaderValue::from_str(&value).map_err(|e| ToolError::InvalidHeader {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    if let Some(token) = bearer {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| {
            ToolError::InvalidHeader {
                name: "authorization".to_owned(),
                reason: e.to_string(),
            }
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) && let Ok(value) = HeaderValue::from_str(&ctx.idempotency_key)
    {
        headers.insert(HeaderName::from_static(IDEMPOTENCY_KEY), value);
    }
    Ok((
        base,
        Prepared {
            method,
            url,
            headers,
            body,
        },
    ))
}

/// Replaces `secret` wherever it appears in the strings of `value`.
fn hide(value: &mut Value, secret: &str) {
    match value {
        Value::String(s) if s.contains(secret) => *s = s.replace(secret, "[redacted]"),
        Value::Array(items) => items.iter_mut().for_each(|v| hide(v, secret)),
        Value::Object(map) => map.values_mut().for_each(|v| hide(v, secret)),
        _ => {}
    }
}

/// One path segment for a value, by the parameter's style (`simple`, `label`, `matrix`), every
/// piece percent-encoded; `.` and `..` refused.
fn path_value(param: &OpenApiParam, value: &Value) -> Result<String, ToolError> {
    let enc = |s: &str| utf8_percent_encode(s, SEGMENT).to_string();
    let pieces: Vec<(Option<String>, String)> = match value {
        Value::Array(items) => items
            .iter()
            .map(|v| (None, enc(&value_text(Some(v)))))
            .collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (Some(enc(k)), enc(&value_text(Some(v)))))
            .collect(),
        other => vec![(None, enc(&value_text(Some(other))))],
    };
    let join = |sep: &str, pair: &str| {
        pieces
            .iter()
            .map(|(k, v)| match k {
                Some(k) => format!("{k}{pair}{v}"),
                None => v.clone(),
            })
            .collect::<Vec<_>>()
            .join(sep)
    };
    let kv = if param.explode { "=" } else { "," };
    let segment = match param.style.as_str() {
        "label" => format!(".{}", join(if param.explode { "." } else { "," }, kv)),
        "matrix" => {
            let name = enc(&param.name);
            if param.explode && matches!(value, Value::Array(_)) {
                pieces.iter().map(|(_, v)| format!(";{name}={v}")).collect()
            } else if param.explode && matches!(value, Value::Object(_)) {
                format!(";{}", join(";", "="))
            } else {
                format!(";{name}={}", join(",", ","))
            }
        }
        _ => join(",", kv),
    };
    if segment == "." || segment == ".." || segment.is_empty() {
        return Err(ToolError::PathSegment {
            field: param.field.clone(),
            segment,
        });
    }
    Ok(segment)
}

/// Query pairs of a parameter, by its style.
fn query_pairs(param: &OpenApiParam, value: &Value, pairs: &mut Vec<(String, String)>) {
    let name = param.name.clone();
    match (param.style.as_str(), value) {
        ("deepObject", Value::Object(map)) => {
            for (k, v) in map {
                pairs.push((format!("{name}[{k}]"), value_text(Some(v))));
            }
        }
        ("spaceDelimited", Value::Array(_)) if !param.explode => {
            pairs.push((name, joined_value(value, " ", false)));
        }
        ("pipeDelimited", Value::Array(_)) if !param.explode => {
            pairs.push((name, joined_value(value, "|", false)));
        }
        (_, Value::Array(items)) if param.explode => {
            for item in items.iter().filter(|v| !v.is_null()) {
                pairs.push((name.clone(), value_text(Some(item))));
            }
        }
        (_, Value::Object(map)) if param.explode => {
            for (k, v) in map {
                pairs.push((k.clone(), value_text(Some(v))));
            }
        }
        _ => pairs.push((name, joined_value(value, ",", false))),
    }
}

/// A value as one text: array items joined by `sep`, an object as `k,v,…` (or `k=v,…` when
/// `explode`), anything else as itself.
fn joined_value(value: &Value, sep: &str, explode: bool) -> String {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|v| value_text(Some(v)))
            .collect::<Vec<_>>()
            .join(sep),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                if explode {
                    format!("{k}={}", value_text(Some(v)))
                } else {
                    format!("{k}{sep}{}", value_text(Some(v)))
                }
            })
            .collect::<Vec<_>>()
            .join(sep),
        other => value_text(Some(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(style: &str, explode: bool) -> OpenApiParam {
        OpenApiParam {
            name: "id".into(),
            field: "id".into(),
            location: ParamLocation::Path,
            style: style.into(),
            explode,
            required: true,
        }
    }

    #[test]
    fn path_values_are_one_segment() {
        let p = param("simple", false);
        let seg = |v: Value| path_value(&p, &v);
        assert_eq!(
            seg(Value::from("../admin")).ok().as_deref(),
            Some("..%2Fadmin")
        );
        assert_eq!(seg(Value::from("a/b")).ok().as_deref(), Some("a%2Fb"));
        assert_eq!(
            seg(Value::from("%2e%2e")).ok().as_deref(),
            Some("%252e%252e")
        );
        assert_eq!(seg(Value::from("a?b#c")).ok().as_deref(), Some("a%3Fb%23c"));
        assert!(seg(Value::from("..")).is_err());
        assert!(seg(Value::from(".")).is_err());
        assert!(seg(Value::from("")).is_err());
        assert_eq!(seg(serde_json::json!([1, 2])).ok().as_deref(), Some("1,2"));
        assert_eq!(
            path_value(&param("label", false), &serde_json::json!(["a", "b"]))
                .ok()
                .as_deref(),
            Some(".a,b")
        );
        assert_eq!(
            path_value(&param("matrix", true), &serde_json::json!(["a", "b"]))
                .ok()
                .as_deref(),
            Some(";id=a;id=b")
        );
    }

    #[test]
    fn query_styles() {
        let mut p = param("form", true);
        p.location = ParamLocation::Query;
        let mut pairs = Vec::new();
        query_pairs(&p, &serde_json::json!(["a", "b"]), &mut pairs);
        assert_eq!(
            pairs,
            [("id".into(), "a".into()), ("id".into(), "b".into())]
        );
        p.explode = false;
        pairs.clear();
        query_pairs(&p, &serde_json::json!(["a", "b"]), &mut pairs);
        assert_eq!(pairs, [("id".to_owned(), "a,b".to_owned())]);
        p.style = "pipeDelimited".into();
        pairs.clear();
        query_pairs(&p, &serde_json::json!(["a", "b"]), &mut pairs);
        assert_eq!(pairs, [("id".to_owned(), "a|b".to_owned())]);
        p.style = "deepObject".into();
        pairs.clear();
        query_pairs(&p, &serde_json::json!({"x": 1}), &mut pairs);
        assert_eq!(pairs, [("id[x]".to_owned(), "1".to_owned())]);
    }
}
