//! The turn behaviours `agent.yaml` tunes (docs/behaviours.md): the `critic` of
//! `strategy: reflect`, the `limits.phases` a turn moves through, and `lean_context`.

use serde_json::Value;

use eve_discover::Code;

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    /// `critic: {model?, instructions?, max_rounds?}` of `strategy: reflect`.
    pub(super) fn critic(
        &mut self,
        path: &str,
        doc: &crate::yaml::Doc,
        strategy: Strategy,
    ) -> Option<Critic> {
        let mut c = Fields::new(path, doc, "/critic", &mut self.diags);
        if !doc.value.get("critic").is_some_and(Value::is_object) {
            c.report_at(
                Code::InvalidField,
                "/critic",
                "`critic` must be a mapping".to_owned(),
                "for example `critic: {model: openai/gpt-4.1-mini, instructions: \"Check the facts.\", max_rounds: 2}`",
            );
            return None;
        }
        c.unknown_keys(&["model", "instructions", "max_rounds"], "critic");
        if strategy != Strategy::Reflect {
            c.report_at(
                Code::InvalidField,
                "/critic",
                format!(
                    "`critic` is set but `strategy` is `{}`: only `strategy: reflect` uses a critic",
                    strategy.as_str()
                ),
                "add `strategy: reflect`, or remove `critic`",
            );
        }
        let model = c.string("model");
        if let Some(m) = &model
            && !m.contains('/')
        {
            c.report(
                Code::InvalidField,
                "model",
                format!("`critic.model` is `{m}`; expected `provider/name`"),
                "for example `openai/gpt-4.1-mini` or `mock/echo`",
            );
        }
        let instructions = c
            .string("instructions")
            .filter(|i| !i.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_CRITIC_INSTRUCTIONS.to_owned());
        let mut max_rounds = 2;
        if let Some(n) = c.u64("max_rounds") {
            if (1..=10).contains(&n) {
                max_rounds = n as u32;
            } else {
                c.report(
                    Code::InvalidField,
                    "max_rounds",
                    format!("`critic.max_rounds` is {n}; it is between 1 and 10"),
                    "use a small number of review rounds, such as 2",
                );
            }
        }
        Some(Critic {
            model,
            instructions,
            max_rounds,
        })
    }

    /// `limits.phases: {explore, execute, converge, explore_tools?}`: three shares of the turn's
    /// budget, each in 0..=1, adding up to 1.
    pub(super) fn phases(&mut self, path: &str, doc: &crate::yaml::Doc) -> Option<Phases> {
        let mut p = Fields::new(path, doc, "/limits/phases", &mut self.diags);
        if !doc
            .value
            .pointer("/limits/phases")
            .is_some_and(Value::is_object)
        {
            p.report_at(
                Code::InvalidField,
                "/limits/phases",
                "`limits.phases` must be a mapping of shares".to_owned(),
                "for example `phases: {explore: 0.25, execute: 0.5, converge: 0.25}`",
            );
            return None;
        }
        p.unknown_keys(
            &["explore", "execute", "converge", "explore_tools"],
            "limits.phases",
        );
        let mut shares = [0.0; 3];
        let mut ok = true;
        for (slot, key) in shares.iter_mut().zip(["explore", "execute", "converge"]) {
            match p.f64(key) {
                Some(v) if (0.0..=1.0).contains(&v) => *slot = v,
                Some(v) => {
                    p.report(
                        Code::InvalidField,
                        key,
                        format!("`limits.phases.{key}` is {v}; a share is between 0 and 1"),
                        "give each phase a fraction of the turn's budget, such as 0.25",
                    );
                    ok = false;
                }
                None if p.has(key) => ok = false,
                None => {
                    p.report_at(
                        Code::InvalidField,
                        "/limits/phases",
                        format!("`limits.phases` has no `{key}` share"),
                        "give all three shares: `{explore: 0.25, execute: 0.5, converge: 0.25}`",
                    );
                    ok = false;
                }
            }
        }
        let explore_tools = p.string_list("explore_tools").unwrap_or_default();
        if !ok {
            return None;
        }
        let sum: f64 = shares.iter().sum();
        if (sum - 1.0).abs() > 1e-6 {
            p.report_at(
                Code::InvalidField,
                "/limits/phases",
                format!("the shares of `limits.phases` add up to {sum}, not 1"),
                "make explore + execute + converge = 1, such as 0.25 + 0.5 + 0.25",
            );
            return None;
        }
        Some(Phases {
            explore: shares[0],
            execute: shares[1],
            converge: shares[2],
            explore_tools,
        })
    }

    /// `lean_context: {max_inline_tools, keep_inline, cut_lines}` (or `false`: all off).
    pub(super) fn lean_context(&mut self, path: &str, doc: &crate::yaml::Doc) -> LeanContext {
        let mut lean = LeanContext::default();
        match doc.value.get("lean_context") {
            Some(Value::Bool(false)) => {
                lean.max_inline_tools = 0;
                lean.cut_lines = 0;
                return lean;
            }
            Some(Value::Bool(true)) => return lean,
            Some(Value::Object(_)) => {}
            other => {
                let found = other.map(crate::fields::kind).unwrap_or_default();
                let mut f = Fields::new(path, doc, "", &mut self.diags);
                f.report(
                    Code::InvalidField,
                    "lean_context",
                    format!("`lean_context` must be true, false or a mapping, found {found}"),
                    "write a mapping such as `lean_context: {max_inline_tools: 30, keep_inline: 8, cut_lines: 40}`",
                );
                return lean;
            }
        }
        let mut l = Fields::new(path, doc, "/lean_context", &mut self.diags);
        l.unknown_keys(
            &["max_inline_tools", "keep_inline", "cut_lines"],
            "lean_context",
        );
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(n) = l.u64("max_inline_tools") {
            lean.max_inline_tools = clamp(n);
        }
        if let Some(n) = l.u64("keep_inline") {
            lean.keep_inline = clamp(n);
        }
        if let Some(n) = l.u64("cut_lines") {
            if n > 0 && n < 4 {
                l.report(
                    Code::InvalidField,
                    "cut_lines",
                    format!("`lean_context.cut_lines` is {n}; an output is cut to a head and a tail, so it needs at least 4 lines"),
                    "use 0 to keep outputs whole, or 4 or more (default 40)",
                );
            } else {
                lean.cut_lines = clamp(n);
            }
        }
        if lean.max_inline_tools > 0 && lean.keep_inline > lean.max_inline_tools {
            l.report(
                Code::InvalidField,
                "keep_inline",
                format!(
                    "`lean_context.keep_inline` ({}) is more than `max_inline_tools` ({})",
                    lean.keep_inline, lean.max_inline_tools
                ),
                "keep fewer tools inline than the count that turns the catalogue on",
            );
            lean.keep_inline = lean.max_inline_tools;
        }
        lean
    }
}
