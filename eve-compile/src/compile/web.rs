//! `web:` in `agent.yaml` (documented in docs/tools.md): where the built-in `web_fetch` may go,
//! its caps, and the provider `web_search` asks. Root agent only: the rules are the agent's.

use std::net::IpAddr;

use serde_json::Value;

use eve_discover::Code;

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    /// `web: {public, allow, deny, max_bytes, timeout, search}`.
    pub(super) fn web_config(
        &mut self,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
        root: bool,
    ) -> Web {
        let mut web = Web::default();
        let Some(raw) = doc.value.get("web") else {
            return web;
        };
        if !raw.is_object() {
            let mut f = Fields::new(&file.path, doc, "", &mut self.diags);
            f.report(
                Code::InvalidField,
                "web",
                format!("`web` must be a mapping, found {}", crate::fields::kind(raw)),
                "write `web:` with `public:`, `allow:`, `deny:`, `max_bytes:`, `timeout:` or `search:` under it",
            );
            return web;
        }
        let mut w = Fields::new(&file.path, doc, "/web", &mut self.diags);
        if !root {
            w.report_at(
                Code::InvalidField,
                "/web",
                "`web` is set in a subagent's agent.yaml; the web rules are the whole agent's"
                    .to_owned(),
                "move `web:` to the root `agent/agent.yaml`",
            );
            return web;
        }
        w.unknown_keys(
            &["public", "allow", "deny", "max_bytes", "timeout", "search"],
            "web",
        );
        if let Some(public) = w.bool("public") {
            web.public = public;
        }
        for key in ["allow", "deny"] {
            let Some(entries) = w.string_list(key) else {
                continue;
            };
            for (i, entry) in entries.iter().enumerate() {
                if let Err(why) = check_entry(entry) {
                    let pointer = format!("/web/{key}/{i}");
                    w.report_at(
                        Code::InvalidField,
                        &pointer,
                        format!("`web.{key}` entry `{entry}`: {why}"),
                        "write `host`, `host:port`, `*.example.com`, an IP address or a CIDR range such as `10.1.0.0/16`",
                    );
                }
            }
            if key == "allow" {
                web.allow = entries;
            } else {
                web.deny = entries;
            }
        }
        if let Some(n) = w.u64("max_bytes") {
            web.max_bytes = n.max(1024);
        }
        if let Some(ms) = w.duration_ms("timeout") {
            web.timeout_ms = ms.max(100);
        }
        if doc.value.pointer("/web/search").is_some() {
            web.search = self.web_search(file, doc);
        }
        web
    }

    /// `web.search: {provider, url, key_env, max_results}`.
    fn web_search(
        &mut self,
        file: &eve_discover::SourceFile,
        doc: &crate::yaml::Doc,
    ) -> Option<WebSearch> {
        let mut s = Fields::new(&file.path, doc, "/web/search", &mut self.diags);
        if !matches!(doc.value.pointer("/web/search"), Some(Value::Object(_))) {
            s.report_at(
                Code::InvalidField,
                "/web/search",
                "`web.search` must be a mapping".to_owned(),
                "write `search: {provider: brave}` (or `tavily`, or `searxng` with `url:`)",
            );
            return None;
        }
        s.unknown_keys(&["provider", "url", "key_env", "max_results"], "web.search");
        let provider = s.choice(
            "provider",
            &[
                ("brave", SearchProvider::Brave),
                ("tavily", SearchProvider::Tavily),
                ("searxng", SearchProvider::Searxng),
            ],
        );
        let Some(provider) = provider else {
            if !s.has("provider") {
                s.report_at(
                    Code::InvalidField,
                    "/web/search",
                    "`web.search` names no `provider`".to_owned(),
                    "add `provider: brave`, `provider: tavily` or `provider: searxng`",
                );
            }
            return None;
        };
        let url = s.string("url");
        if let Some(u) = &url
            && !(u.starts_with("https://") || u.starts_with("http://"))
        {
            s.report(
                Code::InvalidField,
                "url",
                format!("`url` is `{u}`, which is not an http or https URL"),
                "write the endpoint, such as `https://search.example.org`",
            );
            return None;
        }
        if provider == SearchProvider::Searxng && url.is_none() {
            s.report_at(
                Code::InvalidField,
                "/web/search",
                "`provider: searxng` needs the instance's `url`".to_owned(),
                "add `url: https://searx.example.org` (its JSON format must be enabled)",
            );
            return None;
        }
        let key_env = s.string("key_env");
        if let Some(name) = &key_env
            && (name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            s.report(
                Code::InvalidField,
                "key_env",
                format!("`key_env` is `{name}`, which is not an environment variable name"),
                "write the variable's name, such as `BRAVE_API_KEY` (never the key itself)",
            );
        }
        let max_results = s
            .u64("max_results")
            .map_or(DEFAULT_SEARCH_RESULTS, |n| n.clamp(1, 20) as u32);
        Some(WebSearch {
            provider,
            url,
            key_env,
            max_results,
        })
    }
}

/// Checks one `web.allow`/`web.deny` entry's form; the runtime matches it.
fn check_entry(entry: &str) -> Result<(), String> {
    let e = entry.trim();
    if e.is_empty() {
        return Err("empty entry".to_owned());
    }
    if e.contains("://") {
        return Err("a URL is not a host: write the host only".to_owned());
    }
    if e.contains(['@', '?', '#']) || e.chars().any(char::is_whitespace) {
        return Err("a host may not contain `@`, `?`, `#` or spaces".to_owned());
    }
    if let Some((ip, prefix)) = e.split_once('/') {
        let ip: IpAddr = ip
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("`{ip}` before `/` is not an IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        match prefix.parse::<u8>() {
            Ok(p) if p <= max => Ok(()),
            _ => Err(format!(
                "`/{prefix}` is not a prefix length from 0 to {max}"
            )),
        }
    } else {
        Ok(())
    }
}
