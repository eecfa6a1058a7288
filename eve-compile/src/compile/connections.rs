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
        let conn = ok.then(|| Connection {
            name: c.name.clone(),
            source: c.file.path.clone(),
            transport,
            tools,
            approval,
            timeout_ms,
            start_timeout_ms,
        })?;
        Some((conn, own_sandbox))
    }
}
