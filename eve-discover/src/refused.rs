//! What eve does not take over from eve projects, each a coded diagnostic that says what
//! to write instead: TypeScript channels (E121), sandbox providers (E122), workflow tools (E123),
//! extensions (E124) and eve's Vercel-specific helpers (E125).
//!
//! These stay when TypeScript modules are supported: they are refusals, not gaps. The walker
//! asks [`module`] about every JavaScript or TypeScript module it meets before anything else.

use crate::{Code, Diagnostic};

/// Extensions of JavaScript and TypeScript modules.
const MODULE_EXTS: [&str; 7] = ["ts", "mts", "cts", "js", "mjs", "cjs", "tsx"];

/// Whether a file name is a JavaScript or TypeScript module.
pub(crate) fn is_module_file(name: &str) -> bool {
    crate::split_ext(name)
        .1
        .is_some_and(|e| MODULE_EXTS.contains(&e))
}

/// eve's Vercel-specific helpers and imports, with what each is for.
const VERCEL: [(&str, &str); 10] = [
    ("eve/vercel", "the `eve/vercel` deployment integration"),
    ("eve/next", "the `eve/next` Next.js integration"),
    (
        "eve/sandbox/vercel",
        "Vercel Sandbox (`eve/sandbox/vercel`)",
    ),
    ("VercelSandbox", "Vercel Sandbox (`VercelSandbox`)"),
    ("withEve", "`withEve`"),
    ("vercelOidc", "Vercel OIDC auth (`vercelOidc`)"),
    ("vercelSubject", "Vercel OIDC auth (`vercelSubject`)"),
    (
        "getVercelOidcToken",
        "Vercel OIDC auth (`getVercelOidcToken`)",
    ),
    ("vercelBlob", "Vercel Blob storage (`vercelBlob`)"),
    (
        "defineWorkspaceAgent",
        "Vercel workspace peers (`defineWorkspaceAgent`)",
    ),
];

/// The 1-based line of the first occurrence of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> u32 {
    let at = text.find(needle).unwrap_or(0);
    u32::try_from(text[..at].matches('\n').count() + 1).unwrap_or(u32::MAX)
}

/// A module that uses something eve does not take over, as the diagnostic saying so.
pub(crate) fn module(path: &str, text: &str) -> Option<Diagnostic> {
    if text.contains("defineWorkflowTool") {
        return Some(
            Diagnostic::new(
                Code::WorkflowTool,
                path.to_owned(),
                "`defineWorkflowTool` is not supported: workflow tools need the workflow engine of \
                 eve 0.80.1, and here every tool call is already durable",
            )
            .at(line_of(text, "defineWorkflowTool"), 1)
            .help(
                "write an ordinary tool (a script with front matter, or `tools/NAME.yaml`); every \
                 tool call is already durable here, and long waits are a `schedules/` entry or a \
                 subagent (see docs/tools.md)",
            ),
        );
    }
    if text.contains("defineSandbox") {
        return Some(sandbox_provider(path, text, "defineSandbox("));
    }
    if let Some((needle, what)) = VERCEL.iter().find(|(n, _)| text.contains(n)) {
        return Some(
            Diagnostic::new(
                Code::VercelHelper,
                path.to_owned(),
                format!("{what} is specific to Vercel's hosting, which eve does not use"),
            )
            .at(line_of(text, needle), 1)
            .help(
                "eve is one binary: deploy with `eve serve` (docs/operations.md), authenticate \
                 callers with `auth:` in `channels/eve.yaml` (docs/api.md), reach other agents with \
                 `connections/` or remote subagents, and keep the sandbox the built-in one \
                 (`sandbox/sandbox.yaml`)",
            ),
        );
    }
    None
}

/// `sandbox.ts` or a `defineSandbox` module: a sandbox provider.
pub(crate) fn sandbox_provider(path: &str, text: &str, needle: &str) -> Diagnostic {
    let mut d = Diagnostic::new(
        Code::SandboxProvider,
        path.to_owned(),
        "sandbox providers (`defineSandbox`, `sandbox.ts`) are not supported: eve runs every \
         tool in its own sandbox",
    )
    .help(
        "write `sandbox/sandbox.yaml` (network, paths, limits: docs/security.md) and seed files \
         under `sandbox/workspace/`; remove this file or prefix its name with `_`",
    );
    if text.contains(needle) {
        d = d.at(line_of(text, needle), 1);
    }
    d
}

/// A TypeScript or JavaScript channel.
pub(crate) fn channel(path: &str) -> Diagnostic {
    Diagnostic::new(
        Code::TypeScriptChannel,
        path.to_owned(),
        "channels written in TypeScript are not supported",
    )
    .help(
        "write `channels/NAME.yaml` with `kind: slack`, `discord`, `telegram` or `webhook` and its \
         secrets as `${VAR}` (docs/channels.md); eve's HTTP API is `channels/eve.yaml` with \
         `kind: http` (docs/api.md)",
    )
}

/// An `extensions/` folder.
pub(crate) fn extensions(path: String) -> Diagnostic {
    Diagnostic::new(
        Code::Extension,
        path,
        "extensions are not supported: eve mounts no packages into an agent",
    )
    .help(
        "copy the extension's tools, skills and hooks into this agent's `tools/`, `skills/` and \
         `hooks/`, or reach its service through `connections/` (MCP or OpenAPI)",
    )
}
