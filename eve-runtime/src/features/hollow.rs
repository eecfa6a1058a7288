//! The hollow-answer check (`hollow_check: true`): at the end of a turn, a final answer that
//! claims an action no tool call of the turn performed, or that is empty after failed tools, is
//! sent back to the model once with a note naming the mismatch.
//!
//! The check is structural, not a second model call: the answer's claims (first-person or
//! passive past tense action verbs in English, `已…`/`…了` action verbs in Chinese, negated
//! claims left out) are set against the journaled calls of the turn: a claim of a change
//! (created, sent, fixed, …) needs a successful call whose effect is not `read`; a claim of
//! running or checking needs a successful call of any kind. The nudge is a user message stored
//! with the turn, under a fixed prefix; a turn that holds one is never nudged again, so the check
//! cannot loop and a resumed turn sees the same history.

use async_trait::async_trait;

use crate::engine::RuntimeResult;
use crate::engine::events as ev;
use crate::engine::turn::seam::{AnswerVerdict, TurnExtension, TurnView};
use crate::store::{CallStatus, ToolCallRecord};

/// The hollow-answer check as a feature of the turn.
pub(crate) struct HollowCheck;

#[async_trait]
impl TurnExtension for HollowCheck {
    fn name(&self) -> &'static str {
        "hollow"
    }

    /// A final answer gets its one nudge (never twice in a turn, never past the step limit).
    async fn final_answer(
        &mut self,
        view: &TurnView<'_>,
        answer: &str,
    ) -> RuntimeResult<AnswerVerdict> {
        let turn = view.turn;
        let config = &view.build.manifest.agent.config;
        if !config.hollow_check
            || turn.step_index + 1 >= u64::from(config.limits.max_steps_per_turn)
        {
            return Ok(AnswerVerdict::Accept(Vec::new()));
        }
        let store = &view.rt.inner.store;
        let nudged = store.context(view.id()).await?.iter().any(|row| {
            row.turn_seq == Some(turn.seq)
                && row.body["role"] == "user"
                && row.body["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with(NUDGE_PREFIX))
        });
        if nudged {
            return Ok(AnswerVerdict::Accept(Vec::new()));
        }
        let calls = store.tool_calls(view.id(), turn.seq).await?;
        Ok(match check(answer, &calls) {
            Some(hollow) => AnswerVerdict::SendBack {
                message: hollow.nudge(),
                events: vec![(
                    ev::HOLLOW_NUDGED,
                    ev::hollow_nudged(turn, turn.step_index, &hollow.claims, &hollow.reason),
                )],
            },
            None => AnswerVerdict::Accept(Vec::new()),
        })
    }
}

/// The prefix of the nudge message, by which a turn that was already nudged is recognised.
pub(crate) const NUDGE_PREFIX: &str = "[eve hollow-answer check]";

/// What a claim needs a call to have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// A successful call that changes something (effect `write` or `idempotent`).
    Change,
    /// Any successful call.
    Run,
}

/// English claim verbs (past tense) and what they need.
const ENGLISH: &[(&str, Needs)] = &[
    ("created", Needs::Change),
    ("sent", Needs::Change),
    ("emailed", Needs::Change),
    ("fixed", Needs::Change),
    ("wrote", Needs::Change),
    ("written", Needs::Change),
    ("saved", Needs::Change),
    ("deleted", Needs::Change),
    ("removed", Needs::Change),
    ("updated", Needs::Change),
    ("deployed", Needs::Change),
    ("installed", Needs::Change),
    ("committed", Needs::Change),
    ("pushed", Needs::Change),
    ("merged", Needs::Change),
    ("uploaded", Needs::Change),
    ("booked", Needs::Change),
    ("scheduled", Needs::Change),
    ("posted", Needs::Change),
    ("published", Needs::Change),
    ("restarted", Needs::Change),
    ("ran", Needs::Run),
    ("run", Needs::Run),
    ("executed", Needs::Run),
    ("tested", Needs::Run),
    ("verified", Needs::Run),
    ("checked", Needs::Run),
    ("searched", Needs::Run),
    ("downloaded", Needs::Run),
    ("fetched", Needs::Run),
];

/// Words that make a claim a claim: a subject or auxiliary right before the verb.
const ENGLISH_CLAIMERS: &[&str] = &[
    "i",
    "i've",
    "we",
    "we've",
    "have",
    "has",
    "had",
    "been",
    "was",
    "were",
    "successfully",
    "just",
    "already",
    "now",
    "also",
    "and",
];

/// Words that undo a claim when they come shortly before the verb.
const ENGLISH_NEGATIONS: &[&str] = &[
    "not", "never", "didn't", "haven't", "hasn't", "wasn't", "weren't", "couldn't", "can't",
    "cannot", "won't", "will", "would", "could", "should", "can", "may", "might", "to", "if",
    "unable", "no",
];

/// Chinese claim verbs (written `已X`, `X了` or `已经X`) and what they need.
const CHINESE: &[(&str, Needs)] = &[
    ("创建", Needs::Change),
    ("新建", Needs::Change),
    ("发送", Needs::Change),
    ("发出", Needs::Change),
    ("修复", Needs::Change),
    ("保存", Needs::Change),
    ("写入", Needs::Change),
    ("删除", Needs::Change),
    ("更新", Needs::Change),
    ("部署", Needs::Change),
    ("安装", Needs::Change),
    ("提交", Needs::Change),
    ("添加", Needs::Change),
    ("上传", Needs::Change),
    ("预订", Needs::Change),
    ("发布", Needs::Change),
    ("运行", Needs::Run),
    ("执行", Needs::Run),
    ("测试", Needs::Run),
    ("验证", Needs::Run),
    ("检查", Needs::Run),
    ("搜索", Needs::Run),
    ("下载", Needs::Run),
];

/// A mismatch the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hollow {
    /// The claims as written (`sent`, `已创建`), or empty for an empty answer.
    pub(crate) claims: Vec<String>,
    /// Why no call backs them.
    pub(crate) reason: String,
}

impl Hollow {
    /// The one nudge the model gets.
    pub(crate) fn nudge(&self) -> String {
        if self.claims.is_empty() {
            return format!(
                "{NUDGE_PREFIX} Your answer is empty, but {}. Tell the user what happened: what \
                 failed, what you tried, and what is still not done.",
                self.reason
            );
        }
        format!(
            "{NUDGE_PREFIX} Your answer says {} but {}. If that work is still to be done, do it \
             now with the tools; otherwise correct the answer and say plainly what was and was \
             not done. Do not claim work that no tool call did.",
            self.claims
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", "),
            self.reason
        )
    }
}

/// Checks a final answer against the calls of its turn.
pub(crate) fn check(answer: &str, calls: &[ToolCallRecord]) -> Option<Hollow> {
    let tool_calls: Vec<&ToolCallRecord> =
        calls.iter().filter(|c| c.kind != "load-skill").collect();
    let ok = |c: &&&ToolCallRecord| c.status == CallStatus::Completed && !c.is_error;
    let succeeded: Vec<&&ToolCallRecord> = tool_calls.iter().filter(ok).collect();
    let failed: Vec<&str> = tool_calls
        .iter()
        .filter(|c| c.status != CallStatus::Completed || c.is_error)
        .map(|c| c.name.as_str())
        .collect();
    if answer.trim().is_empty() {
        if failed.is_empty() {
            return None;
        }
        return Some(Hollow {
            claims: Vec::new(),
            reason: format!("these calls failed: {}", names(&failed)),
        });
    }
    let claims = claims(answer);
    if claims.is_empty() {
        return None;
    }
    let changed = succeeded.iter().any(|c| c.effect != "read");
    let unbacked: Vec<&(String, Needs)> = claims
        .iter()
        .filter(|(_, needs)| match needs {
            Needs::Change => !changed,
            Needs::Run => succeeded.is_empty(),
        })
        .collect();
    if unbacked.is_empty() {
        return None;
    }
    let reason = if tool_calls.is_empty() {
        "no tool was called in this turn".to_owned()
    } else if succeeded.is_empty() {
        format!(
            "no tool call of this turn succeeded ({} failed)",
            names(&failed)
        )
    } else {
        let read: Vec<&str> = succeeded.iter().map(|c| c.name.as_str()).collect();
        format!(
            "the only calls of this turn that succeeded only read ({}), none changed anything",
            names(&read)
        )
    };
    Some(Hollow {
        claims: unbacked.into_iter().map(|(c, _)| c.clone()).collect(),
        reason,
    })
}

fn names(list: &[&str]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for n in list {
        if !seen.contains(n) {
            seen.push(n);
        }
    }
    seen.iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The action claims of a text, each once, in order.
fn claims(text: &str) -> Vec<(String, Needs)> {
    let mut found: Vec<(String, Needs)> = Vec::new();
    let mut add = |claim: String, needs: Needs| {
        if !found.iter().any(|(c, _)| *c == claim) {
            found.push((claim, needs));
        }
    };
    let lower = text.to_lowercase();
    for sentence in lower.split(['.', '!', '?', '\n', ';', ':']) {
        let words: Vec<&str> = sentence
            .split(|c: char| !(c.is_alphanumeric() || c == '\''))
            .filter(|w| !w.is_empty())
            .collect();
        for (i, word) in words.iter().enumerate() {
            let Some((verb, needs)) = ENGLISH.iter().find(|(v, _)| v == word) else {
                continue;
            };
            let before = &words[i.saturating_sub(4)..i];
            if before.iter().any(|w| ENGLISH_NEGATIONS.contains(w)) {
                continue;
            }
            if before.last().is_some_and(|w| ENGLISH_CLAIMERS.contains(w)) {
                add((*verb).to_owned(), *needs);
            }
        }
    }
    for (verb, needs) in CHINESE {
        for marker in [
            format!("已{verb}"),
            format!("已经{verb}"),
            format!("{verb}了"),
        ] {
            for (at, _) in text.match_indices(&marker) {
                let head: Vec<char> = text[..at].chars().rev().take(2).collect();
                // 未/没/不/尚 right before undo the claim (没有发送了, 尚未…).
                if head
                    .iter()
                    .any(|c| matches!(c, '未' | '没' | '不' | '尚' | '无'))
                {
                    continue;
                }
                add(marker.clone(), *needs);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ApprovalState;

    fn call(name: &str, effect: &str, ok: bool) -> ToolCallRecord {
        ToolCallRecord {
            session_id: "s".into(),
            call_id: format!("c_{name}"),
            turn_seq: 0,
            step_index: 0,
            position: 0,
            kind: "tool-call".into(),
            name: name.into(),
            input: serde_json::json!({}),
            idempotency_key: String::new(),
            effect: effect.into(),
            status: if ok {
                CallStatus::Completed
            } else {
                CallStatus::Failed
            },
            approval: ApprovalState::None,
            output: None,
            is_error: !ok,
            attempts: 1,
            started_at: None,
            ended_at: None,
        }
    }

    fn claimed(text: &str) -> Vec<String> {
        claims(text).into_iter().map(|(c, _)| c).collect()
    }

    #[test]
    fn english_claims_are_found_and_negated_or_future_ones_are_not() {
        assert_eq!(
            claimed("I created the file and sent it to Ana."),
            ["created", "sent"]
        );
        assert_eq!(claimed("The ticket has been created."), ["created"]);
        assert_eq!(claimed("Done: I've fixed the bug."), ["fixed"]);
        assert!(claimed("I have not created the file.").is_empty());
        assert!(claimed("I will send it tomorrow. I can create it if you want.").is_empty());
        assert!(claimed("The created_at field is a timestamp.").is_empty());
    }

    #[test]
    fn chinese_claims_are_found_and_negated_ones_are_not() {
        assert_eq!(
            claimed("我已创建文件，并且已发送给你。"),
            ["已创建", "已发送"]
        );
        assert_eq!(claimed("测试运行了，修复了两个问题"), ["修复了", "运行了"]);
        assert!(claimed("我还没有发送了邮件，尚未创建文件").is_empty());
        assert!(claimed("请问需要我创建文件吗？").is_empty());
    }

    #[test]
    fn a_claim_needs_a_call_that_did_it() {
        let none: Vec<ToolCallRecord> = Vec::new();
        let hollow = check("I sent the email.", &none).unwrap();
        assert_eq!(hollow.claims, ["sent"]);
        assert!(hollow.reason.contains("no tool was called"));

        let read_only = [call("lookup", "read", true)];
        let hollow = check("I sent the email.", &read_only).unwrap();
        assert!(hollow.reason.contains("`lookup`"), "{}", hollow.reason);
        assert_eq!(check("I checked the record.", &read_only), None);

        let sent = [call("send", "write", true)];
        assert_eq!(check("I sent the email.", &sent), None);
        let failed = [call("send", "write", false)];
        assert!(
            check("已发送邮件。", &failed)
                .unwrap()
                .reason
                .contains("`send`")
        );
    }

    #[test]
    fn an_empty_answer_after_failed_tools_is_hollow_and_otherwise_not() {
        assert_eq!(check("", &[call("lookup", "read", true)]), None);
        let hollow = check("  ", &[call("send", "write", false)]).unwrap();
        assert!(hollow.claims.is_empty());
        assert!(hollow.nudge().contains("empty"));
        assert_eq!(check("", &[]), None);
    }
}
