//! `subagents/NAME.yaml`: a remote agent, another eve deployment called as a subagent. Its
//! `url` must be an absolute http(s) URL (or start with a `${VAR}` resolved at run time),
//! secrets (`auth.token`, an `Authorization` header) must be `${VAR}` references, and every
//! `${…}` must name a variable.

use eve_discover::{Code, Named};

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    /// The remote agent `named` declares, under the agent folder `parent` (`""`: the root).
    /// `None` after reporting what is wrong.
    pub(super) fn remote_agent(&mut self, named: &Named, parent: &str) -> Option<Agent> {
        let parsed = self.yaml_file(&named.file)?;
        let path = named.file.path.clone();
        let mut f = Fields::new(&path, &parsed.doc, "", &mut self.diags);
        f.unknown_keys(
            &["url", "description", "headers", "auth", "forward_principal"],
            "remote agent",
        );
        let mut ok = true;
        let url = f.required_string(
            "url",
            "add `url: https://other-agent.example.com`, the base URL of the other eve deployment",
        );
        if let Some(url) = &url {
            if let Err(why) = check_url(url) {
                f.report(
                    Code::InvalidRemoteAgent,
                    "url",
                    format!("`url` is `{url}`: {why}"),
                    "give the other deployment's base URL, such as `https://research.example.com` \
                     (or `${RESEARCH_URL}`, read from the environment at run time)",
                );
                ok = false;
            }
        } else {
            ok = false;
        }
        let description = f.string("description").filter(|d| !d.trim().is_empty());
        if description.is_none() {
            f.report_at(
                Code::MissingDescription,
                "",
                "remote agent has no `description`".to_owned(),
                "add `description: <what this agent does>`: the parent model sees it as the \
                 tool's description",
            );
            ok = false;
        }
        let headers = f.string_map("headers").unwrap_or_default();
        for (name, value) in &headers {
            let pointer = format!("/headers/{name}");
            if let Err(why) = check_vars(value) {
                f.report_at(
                    Code::InvalidRemoteAgent,
                    &pointer,
                    format!("header `{name}`: {why}"),
                    "write a variable as `${NAME}` (letters, digits and `_`)",
                );
                ok = false;
            } else if name.eq_ignore_ascii_case("authorization") && !value.contains("${") {
                f.report_at(
                    Code::InvalidRemoteAgent,
                    &pointer,
                    "the `Authorization` header is a secret written in the file".to_owned(),
                    "reference it as `Bearer ${AGENT_TOKEN}`, or use `auth: {type: bearer, \
                     token: ${AGENT_TOKEN}}`: secrets are read from the environment at run time",
                );
                ok = false;
            }
        }
        let forward_principal = f.bool("forward_principal").unwrap_or(false);
        let auth = f.raw("auth").cloned();
        let bearer = match auth {
            None => None,
            Some(serde_json::Value::Object(_)) => {
                let mut a = Fields::new(&path, &parsed.doc, "/auth", &mut self.diags);
                a.unknown_keys(&["type", "token"], "auth");
                let kind = a.choice("type", &[("bearer", 0)]);
                let token = a.required_string("token", "add `token: ${AGENT_TOKEN}`");
                match (kind, token) {
                    (Some(_), Some(token)) if super::is_env_ref(&token.clone().into()) => {
                        Some(token)
                    }
                    (Some(_), Some(_)) => {
                        a.report(
                            Code::InvalidRemoteAgent,
                            "token",
                            "`auth.token` is a secret written in the file".to_owned(),
                            "reference it as `${AGENT_TOKEN}`: secrets are read from the \
                             environment at run time and never stored in builds",
                        );
                        ok = false;
                        None
                    }
                    _ => {
                        ok = false;
                        None
                    }
                }
            }
            Some(other) => {
                let mut f = Fields::new(&path, &parsed.doc, "", &mut self.diags);
                f.report(
                    Code::InvalidRemoteAgent,
                    "auth",
                    format!(
                        "`auth` must be a mapping, found {}",
                        crate::fields::kind(&other)
                    ),
                    "write `auth: {type: bearer, token: ${AGENT_TOKEN}}`",
                );
                ok = false;
                None
            }
        };
        if !ok {
            return None;
        }
        let dir = eve_discover::AgentDir {
            path: format!("{}subagents/{}", super::agent::prefix(parent), named.name),
            ..Default::default()
        };
        let (mut config, _) = self.config(&dir, true);
        config.default_tools = false;
        config.builtins = Some(Vec::new());
        Some(Agent {
            name: named.name.clone(),
            path: dir.path,
            description,
            instructions: String::new(),
            config,
            tools: Vec::new(),
            skills: Vec::new(),
            subagents: Vec::new(),
            schedules: Vec::new(),
            hooks: Vec::new(),
            connections: Vec::new(),
            channels: Vec::new(),
            sandbox: Sandbox::default(),
            remote: Some(RemoteAgent {
                url: url?,
                headers,
                bearer,
                forward_principal,
            }),
        })
    }
}

/// Whether `url` can be a remote's base URL: its `${VAR}` references well formed, and absolute
/// http(s) with a host unless it starts with a reference (resolved at run time).
fn check_url(url: &str) -> Result<(), String> {
    check_vars(url)?;
    if url.starts_with("${") {
        return Ok(());
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("it is not an absolute URL".to_owned());
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!("`{scheme}:` is not http or https"));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err("it has no host".to_owned());
    }
    if rest.contains(['?', '#']) {
        return Err("a base URL has no query or fragment".to_owned());
    }
    Ok(())
}

/// Whether every `${…}` in `text` names a variable (`$${` is a literal `${`).
fn check_vars(text: &str) -> Result<(), String> {
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        if at > 0 && rest.as_bytes()[at - 1] == b'$' {
            rest = &rest[at + 2..];
            continue;
        }
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err("a `${` is never closed".to_owned());
        };
        let name = &after[..end];
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`${{{name}}}` does not name a variable"));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_variables() {
        assert!(check_url("https://a.example.com").is_ok());
        assert!(check_url("http://127.0.0.1:8080/").is_ok());
        assert!(check_url("${REMOTE_URL}").is_ok());
        assert!(check_url("ftp://a.example.com").is_err());
        assert!(check_url("a.example.com").is_err());
        assert!(check_url("https://").is_err());
        assert!(check_url("https://a.example.com/?x=1").is_err());
        assert!(check_url("${REMOTE URL}").is_err());
        assert!(check_vars("Bearer ${TOKEN}").is_ok());
        assert!(check_vars("Bearer ${TOKEN").is_err());
        assert!(check_vars("Bearer ${}").is_err());
        assert!(check_vars("$${literal}").is_ok());
    }
}
