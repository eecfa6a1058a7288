//! OpenAPI connections in the manifest: how one operation of a pinned OpenAPI document is called
//! (the runner of its tool `NAME__operationId`), and the auth a connection adds to every request.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a connection authenticates its requests. Every value is a template whose `${VAR}`s are
/// read from the environment at run time: no secret is stored in a build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ConnectionAuth {
    /// `Authorization: Bearer <token>`.
    Bearer {
        /// The token (`${VAR}`).
        token: String,
    },
    /// One header of the connection's choosing (`X-API-Key: <value>`).
    Header {
        /// Header name.
        name: String,
        /// Header value (`${VAR}`).
        value: String,
    },
    /// HTTP basic auth.
    Basic {
        /// User name.
        username: String,
        /// Password (`${VAR}`).
        password: String,
    },
}

/// Where an operation's parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParamLocation {
    /// A segment of the path (`/items/{id}`), percent-encoded as exactly one segment.
    Path,
    /// A query parameter.
    Query,
    /// A request header.
    Header,
    /// A cookie.
    Cookie,
}

/// One parameter of an operation, as the input field of the same name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApiParam {
    /// Name in the document (and in the request).
    pub name: String,
    /// The tool input's field holding the value (the name, unless two parameters share it).
    pub field: String,
    /// Where it goes.
    pub location: ParamLocation,
    /// Serialisation style (`form`, `simple`, `spaceDelimited`, `pipeDelimited`, `deepObject`,
    /// `label`, `matrix`).
    pub style: String,
    /// Arrays and objects as one parameter per item (`explode: true`).
    pub explode: bool,
    /// Whether the document requires it.
    pub required: bool,
}

/// The JSON request body of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApiBody {
    /// The tool input's field holding the body (`body`).
    pub field: String,
    /// Media type sent (`application/json`).
    pub content_type: String,
    /// Whether the document requires it.
    pub required: bool,
}

/// How one operation of an OpenAPI connection is called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApiCall {
    /// Connection name (the tool prefix `NAME__`).
    pub connection: String,
    /// The pinned document: a path relative to the root agent folder (also under `files/` in the
    /// build), or the URL it was fetched from.
    pub document: String,
    /// SHA-256 (hex) of the document fetched from the URL `document` when the build ran: the
    /// build is pinned to those bytes. `None` for a document of the agent folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_sha256: Option<String>,
    /// HTTP method, upper case.
    pub method: String,
    /// Base URL every request goes to (`${VAR}`s allowed); the only origin the tool may reach.
    pub base_url: String,
    /// Path template from the document (`/items/{item_id}`).
    pub path: String,
    /// Parameters, in document order.
    pub parameters: Vec<OpenApiParam>,
    /// The JSON request body, when the operation takes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<OpenApiBody>,
    /// Auth added to every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ConnectionAuth>,
    /// OAuth of the API (instead of `auth`): its token is sent as `Authorization: Bearer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<Box<super::OAuthSettings>>,
    /// Whose OAuth tokens the calls use: the app's or the session's principal's.
    #[serde(default, skip_serializing_if = "is_app")]
    pub credentials: super::Credentials,
}

fn is_app(c: &super::Credentials) -> bool {
    *c == super::Credentials::App
}
