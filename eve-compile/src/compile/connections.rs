//! `connections/`: MCP servers, over stdio (`command:`) or Streamable HTTP (`url:`), with the tool
//! filter, approval and timeout that apply to the tools they offer.

use eve_discover::{Code, Diagnostic, Named};

use super::{APPROVALS, Compiler, http_url};
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    pub(super) fn connection(&mut self, c: &Named) -> Option<(Connection, SandboxOverride)> {
        let mut ok = self.check_name(&c.name, &c.file.path, "connection");
        if c.name.contains("__") {
            self.push(
                Diagnostic::new(Code::InvalidName, c.file.path.clone(), format!("connection name `{}` contains `__`", c.name))
                    .help("`__` separates the connection from its tool names (`NAME__tool`); rename the file"),
            );
            ok = false;
        }
        let parsed = self.yaml_file(&c.file)?;
        let mut f = Fields::new(&c.file.path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(
            &[
                "command",
                "args",
                "env",
                "url",
                "headers",
                "tools",
                "approval",
                "timeout",
                "start_timeout",
                "description",
                "sandbox",
                "network",
                "oauth",
                "credentials",
            ],
            "connection",
        );
        let transport = match (f.has("command"), f.has("url")) {
            (true, false) => Transport::Stdio {
                command: f.string("command")?,
                args: f.string_list("args").unwrap_or_default(),
                env: f.string_map("env").unwrap_or_default(),
            },
            (false, true) => {
                let url = f.string("url")?;
                if !http_url(&url) {
                    f.report(
                        Code::InvalidConnection,
                        "url",
                        format!("`url` is `{url}`; it must start with http:// or https://"),
                        "an MCP server over HTTP is `url: https://…/mcp`; a local server is `command:` with `args:`",
                    );
                    return None;
                }
                Transport::Http {
                    url,
                    headers: f.string_map("headers").unwrap_or_default(),
                }
            }
            (both, _) => {
                let msg = if both {
                    "connection has both `command` and `url`"
                } else {
                    "connection has none of `command`, `url` and `openapi`"
                };
                f.push(
                    Diagnostic::new(Code::InvalidConnection, c.file.path.clone(), msg)
                        .at(1, 1)
                        .help("a stdio MCP server has `command:` (and `args:`); a Streamable HTTP server has `url:`; an HTTP API has `openapi:` (its OpenAPI document)"),
                );
                return None;
            }
        };
        let mut tools = ToolFilter::default();
        if f.has("tools") {
            let mut t = Fields::new(&c.file.path, &parsed.doc, "/tools", &mut self.diags);
            t.unknown_keys(&["allow", "block"], "tools");
            tools.allow = t.string_list("allow").unwrap_or_default();
            tools.block = t.string_list("block").unwrap_or_default();
        }
        let mut f = Fields::new(&c.file.path, &parsed.doc, "", &mut self.diags);
        let approval = f.choice("approval", APPROVALS).unwrap_or_default();
        let timeout_ms = f.duration_ms("timeout").unwrap_or(DEFAULT_MCP_TIMEOUT_MS);
        let start_timeout_ms = f.duration_ms("start_timeout");
        let own_sandbox = super::sandbox::read_override(&mut f);
        if !own_sandbox.is_empty() && matches!(transport, Transport::Http { .. }) {
            let key = if f.has("sandbox") {
                "sandbox"
            } else {
                "network"
            };
            f.report(
                Code::InvalidSandbox,
                key,
                format!("`{key}` applies to MCP servers eve starts (`command:`); this one is reached over `url:`"),
                "remove it: a server over HTTP runs elsewhere, not in eve's sandbox",
            );
        }
        let credentials = f
            .choice(
                "credentials",
                &[("app", Credentials::App), ("user", Credentials::User)],
            )
            .unwrap_or_default();
        let oauth = if f.has("oauth") {
            let is_http = matches!(transport, Transport::Http { .. });
            if !is_http {
                f.report(
                    Code::InvalidConnection,
                    "oauth",
                    "`oauth` applies to MCP servers reached over `url:`".to_owned(),
                    "a stdio server (`command:`) gets its credentials from `env:`",
                );
                ok = false;
            }
            let settings = self.oauth(c, &parsed.doc, credentials);
            ok &= settings.is_some();
            settings
        } else {
            if credentials == Credentials::User {
                let mut f = Fields::new(&c.file.path, &parsed.doc, "", &mut self.diags);
                f.report(
                    Code::InvalidConnection,
                    "credentials",
                    "`credentials: user` needs an `oauth:` block".to_owned(),
                    "per-user tokens come from OAuth: add `oauth:` (with `grant: authorization_code`)",
                );
                ok = false;
            }
            None
        };
        let conn = ok.then(|| Connection {
            name: c.name.clone(),
            source: c.file.path.clone(),
            transport,
            tools,
            approval,
            timeout_ms,
            start_timeout_ms,
            oauth,
            credentials,
        })?;
        Some((conn, own_sandbox))
    }

    /// Reads and checks the `oauth:` block; `None` (with diagnostics) when it is not usable.
    pub(super) fn oauth(
        &mut self,
        c: &Named,
        doc: &crate::yaml::Doc,
        who: Credentials,
    ) -> Option<OAuthSettings> {
        let mut o = Fields::new(&c.file.path, doc, "/oauth", &mut self.diags);
        o.unknown_keys(
            &["grant", "client_id", "client_secret", "scopes", "allow"],
            "oauth",
        );
        let grant = o
            .choice(
                "grant",
                &[
                    ("authorization_code", OAuthGrant::AuthorizationCode),
                    ("client_credentials", OAuthGrant::ClientCredentials),
                ],
            )
            .unwrap_or_default();
        let client_id = o.string("client_id");
        let client_secret = o.string("client_secret");
        let scopes = o.string_list("scopes").unwrap_or_default();
        let allow = o.string_list("allow").unwrap_or_default();
        let mut ok = true;
        if let Some(secret) = &client_secret
            && !is_reference(secret)
        {
            o.report(
                Code::InvalidConnection,
                "client_secret",
                "`client_secret` is written in the file; it must be a `${VAR}` reference".to_owned(),
                "put the secret in the environment (`.env`) and write `client_secret: ${MY_CLIENT_SECRET}`",
            );
            ok = false;
        }
        if client_secret.is_some() && client_id.is_none() {
            o.report(
                Code::InvalidConnection,
                "client_secret",
                "`client_secret` without `client_id`".to_owned(),
                "a pre-registered client has both; without `client_id` eve registers itself",
            );
            ok = false;
        }
        if grant == OAuthGrant::ClientCredentials
            && (client_id.is_none() || client_secret.is_none())
        {
            o.report(
                Code::InvalidConnection,
                "grant",
                "`grant: client_credentials` needs `client_id` and `client_secret`".to_owned(),
                "register the client with the authorization server and give both (the secret as `${VAR}`)",
            );
            ok = false;
        }
        for scope in &scopes {
            if scope.is_empty() || scope.chars().any(|ch| ch.is_whitespace() || ch == '"') {
                o.report(
                    Code::InvalidConnection,
                    "scopes",
                    format!("scope `{scope}` is not a valid OAuth scope"),
                    "a scope is one word without spaces or quotes; list each under `scopes:`",
                );
                ok = false;
            }
        }
        for entry in &allow {
            let valid = entry
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                o.report(
                    Code::InvalidConnection,
                    "allow",
                    format!("`{entry}` in `oauth.allow` is not `host:port`"),
                    "name an authorization server on a private address as `host:port`, e.g. `127.0.0.1:9000`",
                );
                ok = false;
            }
        }
        if grant == OAuthGrant::ClientCredentials && who == Credentials::User {
            let mut top = Fields::new(&c.file.path, doc, "", &mut self.diags);
            top.report(
                Code::InvalidConnection,
                "credentials",
                "`credentials: user` with `grant: client_credentials`".to_owned(),
                "client credentials carry no user: use `credentials: app`, or `grant: authorization_code` for per-user tokens",
            );
            ok = false;
        }
        ok.then_some(OAuthSettings {
            grant,
            client_id,
            client_secret,
            scopes,
            allow,
        })
    }
}

/// Whether `text` is exactly one `${VAR}` reference.
fn is_reference(text: &str) -> bool {
    text.strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        })
}
