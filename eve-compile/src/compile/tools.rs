//! `tools/`: script tools (front matter in a comment block) and YAML tools (`run:` or `http:`),
//! their input schemas (checked as JSON Schema and hashed) and how each script is run.

use std::collections::BTreeMap;

use serde_json::Value;

use eve_discover::{AgentDir, Code, Diagnostic, SourceFile, ToolFile};

use super::{APPROVALS, Compiler, http_url};
use crate::fields::Fields;
use crate::hash::json_hash;
use crate::manifest::*;
use crate::yaml::Doc;

/// The interpreter eve uses for a script extension when the file is not executable.
pub fn interpreter_for(ext: Option<&str>) -> Option<&'static [&'static str]> {
    Some(match ext? {
        "py" => &["python3"],
        "js" | "mjs" | "cjs" => &["node"],
        "ts" | "mts" => &["node", "--experimental-strip-types"],
        "sh" => &["sh"],
        "bash" => &["bash"],
        "rb" => &["ruby"],
        "pl" => &["perl"],
        "php" => &["php"],
        "lua" => &["lua"],
        _ => return None,
    })
}

const TOOL_FIELDS: &[&str] = &[
    "description",
    "input",
    "approval",
    "effect",
    "timeout",
    "deferred",
    "env",
    "dynamic",
    "output_limit",
    "interpreter",
    "sandbox",
    "network",
    "phase",
    "ends_turn",
    "approval_prompt",
];
const EFFECTS: &[(&str, Effect)] = &[
    ("read", Effect::Read),
    ("idempotent", Effect::Idempotent),
    ("write", Effect::Write),
];
const DYNAMIC_EVENTS: &[&str] = &["session.started", "turn.started"];
const HTTP_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];
const SCHEMA_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string",
];
const KNOWN_SCHEMA_DIALECTS: &[&str] = &[
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
];

impl Compiler {
    pub(super) fn script_runner(
        &mut self,
        file: &SourceFile,
        interpreter: Option<Vec<String>>,
    ) -> Option<Runner> {
        self.files.insert(file.path.clone());
        let (_, ext) = eve_discover::split_ext(file.path.rsplit('/').next().unwrap_or(&file.path));
        let interpreter = match interpreter {
            Some(i) => i,
            None if file.executable && file.text.starts_with("#!") => Vec::new(),
            None => match interpreter_for(ext) {
                Some(i) => i.iter().map(|s| (*s).to_owned()).collect(),
                None => {
                    let what = match ext {
                        Some(ext) => format!("for `.{ext}` files"),
                        None => "for files without an extension".to_owned(),
                    };
                    self.push(
                        Diagnostic::new(
                            Code::NotRunnable,
                            file.path.clone(),
                            format!("script is not executable, and eve knows no interpreter {what}"),
                        )
                        .help("make it executable with a `#!` line (chmod +x), or set `interpreter:` in its front matter"),
                    );
                    return None;
                }
            },
        };
        Some(Runner::Script {
            path: file.path.clone(),
            interpreter,
        })
    }

    /// The agent's tools, sorted, and what those that say `sandbox:`/`network:` say, by name.
    pub(super) fn tools(
        &mut self,
        dir: &AgentDir,
        sandbox: &Sandbox,
    ) -> (Vec<Tool>, BTreeMap<String, SandboxOverride>) {
        let (modules, scripts) = super::modules::split_tools(dir);
        let mut both = self.parallel(&scripts, |c, t| c.tool(t, sandbox));
        both.extend(self.module_tools(&modules, sandbox));
        both.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let mut overrides = BTreeMap::new();
        let tools = both
            .into_iter()
            .map(|(tool, o)| {
                if !o.is_empty() {
                    overrides.insert(tool.name.clone(), o);
                }
                tool
            })
            .collect();
        (tools, overrides)
    }

    fn tool(&mut self, t: &ToolFile, sandbox: &Sandbox) -> Option<(Tool, SandboxOverride)> {
        let name_ok = self.check_name(&t.name, &t.file.path, "tool");
        let mut parsed = if t.yaml {
            self.yaml_file(&t.file)?
        } else {
            self.script_file(
                &t.file,
                "start the script with a comment block:\n# ---\n# description: What the tool does\n# input:\n#   type: object\n# ---",
            )?
        };
        let file = &t.file;
        let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
        let mut known: Vec<&str> = TOOL_FIELDS.to_vec();
        if t.yaml {
            known.retain(|k| *k != "interpreter");
            known.extend(["run", "http"]);
        }
        f.unknown_keys(&known, "tool");
        let description = f.string("description").unwrap_or_default();
        if description.trim().is_empty() && f.raw("description").is_none() {
            f.push(
                Diagnostic::new(
                    Code::MissingToolDescription,
                    file.path.clone(),
                    format!("tool `{}` has no description", t.name),
                )
                .help("add `description:` so the model knows when to call it"),
            );
        }
        let approval = f.choice("approval", APPROVALS).unwrap_or_default();
        let effect = f.choice("effect", EFFECTS).unwrap_or_default();
        let timeout_ms = f.duration_ms("timeout").unwrap_or(sandbox.timeout_ms);
        let output_limit = f.u64("output_limit").unwrap_or(sandbox.output_limit);
        let deferred = f.bool("deferred").unwrap_or(false);
        let phase = f.choice("phase", &[("explore", Phase::Explore)]);
        let ends_turn = f.bool("ends_turn").unwrap_or(false);
        let approval_prompt = f.string("approval_prompt");
        if let Some(prompt) = &approval_prompt
            && let Err(why) = crate::prompt_template::check(prompt)
        {
            f.report(
                Code::InvalidField,
                "approval_prompt",
                format!("`approval_prompt` {why}"),
                "use `{{input.<field>}}` for a field of the call's input, e.g. \
                 `Refund {{input.amount}} to {{input.charge_id}}?`",
            );
        }
        let own_sandbox = super::sandbox::read_override(&mut f);
        let env = f.string_list("env").unwrap_or_default();
        let dynamic = f.string_list("dynamic").unwrap_or_default();
        for ev in &dynamic {
            if !DYNAMIC_EVENTS.contains(&ev.as_str()) {
                f.report(
                    Code::InvalidField,
                    "dynamic",
                    format!("`dynamic` lists `{ev}`, which is not a dynamic-tool event"),
                    "dynamic tools resolve at `session.started` and `turn.started`",
                );
            }
        }
        let interpreter = if t.yaml {
            None
        } else {
            f.string_list("interpreter")
        };
        let has_input = f.raw("input").is_some();
        let has_run = f.has("run");
        let has_http = f.has("http");
        let run_raw = f.raw("run").cloned();
        drop(f);

        if has_input {
            self.input_schema(file, &parsed.doc)?;
        }
        let runner = if t.yaml {
            match (has_run, has_http) {
                (true, false) => {
                    let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
                    match run_raw {
                        Some(Value::String(s)) => Runner::Command {
                            argv: vec!["sh".to_owned(), "-c".to_owned(), s],
                        },
                        Some(Value::Array(_)) => {
                            let argv = f.string_list("run")?;
                            if argv.is_empty() {
                                f.report(
                                    Code::InvalidField,
                                    "run",
                                    "`run` is an empty list".to_owned(),
                                    "give the program and its arguments",
                                );
                                return None;
                            }
                            Runner::Command { argv }
                        }
                        Some(other) => {
                            f.report(
                                Code::InvalidField,
                                "run",
                                format!(
                                    "`run` must be a command string or an argv list, found {}",
                                    crate::fields::kind(&other)
                                ),
                                "for example `run: [python3, _bin/weather.py]`",
                            );
                            return None;
                        }
                        None => return None,
                    }
                }
                (false, true) => Runner::Http(self.http(file, &parsed.doc)?),
                (run, _) => {
                    let msg = if run {
                        "tool has both `run:` and `http:`"
                    } else {
                        "tool has neither `run:` nor `http:`"
                    };
                    self.push(
                        Diagnostic::new(Code::ToolRunner, file.path.clone(), msg)
                            .at(1, 1)
                            .help("a YAML tool runs a command (`run: [prog, args…]`) or makes a request (`http: {method, url}`), exactly one of them"),
                    );
                    return None;
                }
            }
        } else {
            self.script_runner(file, interpreter)?
        };
        if !name_ok {
            return None;
        }
        // The checked schema moves out of the document: nothing reads it there any more.
        let input_schema = match parsed.doc.value.get_mut("input") {
            Some(schema) if has_input => schema.take(),
            _ => serde_json::json!({"type": "object", "properties": {}}),
        };
        let tool = Tool {
            name: t.name.clone(),
            source: file.path.clone(),
            description,
            schema_hash: json_hash(&input_schema),
            input_schema,
            approval,
            effect,
            timeout_ms,
            output_limit,
            deferred,
            env,
            dynamic,
            phase,
            runner,
            ends_turn,
            approval_prompt,
        };
        Some((tool, own_sandbox))
    }

    /// Checks a tool's `input` schema: an object schema that is valid JSON Schema.
    fn input_schema(&mut self, file: &SourceFile, doc: &Doc) -> Option<()> {
        let schema = doc.value.get("input")?;
        let pos = |p: &str| doc.position(p);
        let err = |msg: String, at: Option<(u32, u32)>, help: &str| {
            let mut d =
                Diagnostic::new(Code::InvalidSchema, file.path.clone(), msg).help(help.to_owned());
            if let Some((l, c)) = at {
                d = d.at(l, c);
            }
            d
        };
        let Value::Object(map) = schema else {
            self.push(err(
                format!(
                    "`input` is not a JSON Schema object: found {}",
                    crate::fields::kind(schema)
                ),
                pos("/input"),
                "write `input:` as a schema mapping with `type: object` and `properties:`",
            ));
            return None;
        };
        if let Some(dialect) = map.get("$schema") {
            let known = dialect
                .as_str()
                .is_some_and(|d| KNOWN_SCHEMA_DIALECTS.contains(&d));
            if !known {
                self.push(err(
                    format!("`$schema` is {dialect}, a dialect eve does not know"),
                    pos("/input/$schema"),
                    "remove `$schema` (draft 2020-12 is assumed) or use a standard draft URL",
                ));
                return None;
            }
        }
        // Building a validator meta-validates the schema too; only when it fails is the schema
        // meta-validated on its own, to tell a wrong keyword from a bad pattern or reference.
        let built = jsonschema::validator_for(schema);
        let meta = match &built {
            Ok(_) => Ok(()),
            Err(_) => jsonschema::meta::validate(schema),
        };
        if let Err(e) = meta {
            let path = e.instance_path().as_str().to_owned();
            let pointer = format!("/input{path}");
            let shown = if path.is_empty() {
                "input".to_owned()
            } else {
                format!("input{}", path.replace('/', "."))
            };
            let bad_type = (path.ends_with("/type") || path.contains("/type/"))
                .then(|| doc.value.pointer(&pointer).and_then(Value::as_str))
                .flatten()
                .filter(|t| !SCHEMA_TYPES.contains(t));
            let d = match bad_type {
                Some(t) => err(
                    format!("`{shown}` is `{t}`, which is not a JSON Schema type"),
                    pos(&pointer),
                    &match crate::fields::closest(t, SCHEMA_TYPES) {
                        Some(c) => {
                            format!("did you mean `{c}`? types are: {}", SCHEMA_TYPES.join(", "))
                        }
                        None => format!("types are: {}", SCHEMA_TYPES.join(", ")),
                    },
                ),
                None => err(
                    format!(
                        "`{shown}` is not valid JSON Schema: {}",
                        short(&e.to_string())
                    ),
                    pos(&pointer),
                    "see https://json-schema.org/understanding-json-schema for the allowed keywords and types",
                ),
            };
            self.push(d);
            return None;
        }
        if let Err(e) = built {
            self.push(err(
                format!(
                    "`input` cannot be compiled as a JSON Schema: {}",
                    short(&e.to_string())
                ),
                pos("/input"),
                "check patterns (regular expressions) and references in the schema",
            ));
            return None;
        }
        if map.get("type").and_then(Value::as_str) != Some("object") {
            self.push(err(
                "`input` is not a JSON Schema object: expected `type: object`".to_owned(),
                pos("/input/type").or(pos("/input")),
                "tool input is always an object: add `type: object` and describe fields under `properties:`",
            ));
            return None;
        }
        Some(())
    }

    fn http(&mut self, file: &SourceFile, doc: &Doc) -> Option<HttpRequest> {
        let mut f = Fields::new(&file.path, doc, "/http", &mut self.diags);
        f.unknown_keys(&["method", "url", "headers", "body"], "http");
        let method = f
            .string("method")
            .unwrap_or_else(|| "GET".to_owned())
            .to_uppercase();
        if !HTTP_METHODS.contains(&method.as_str()) {
            f.report(
                Code::InvalidField,
                "method",
                format!("`method` is `{method}`, not an HTTP method eve sends"),
                "use GET, POST, PUT, PATCH, DELETE or HEAD",
            );
            return None;
        }
        let url = f.required_string(
            "url",
            "add `url: https://…` (templates like {{input.city}} and ${VAR} are allowed)",
        )?;
        if !http_url(&url) {
            f.report(
                Code::InvalidField,
                "url",
                format!("`url` is `{url}`; it must start with http:// or https://"),
                "write the full URL, such as `https://api.example.com/v1/{{input.city}}`",
            );
            return None;
        }
        let headers = f.string_map("headers").unwrap_or_default();
        let body = f.raw("body").cloned();
        Some(HttpRequest {
            method,
            url,
            headers,
            body,
        })
    }
}

fn short(msg: &str) -> String {
    let one = msg.lines().next().unwrap_or(msg);
    if one.chars().count() > 200 {
        let cut: String = one.chars().take(200).collect();
        format!("{cut}…")
    } else {
        one.to_owned()
    }
}
