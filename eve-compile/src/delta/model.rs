//! The model in the delta: `model`, `review_model` (who judges `approval: auto` calls) and a
//! critic's model. Another model widens nothing the agent may do by itself, but it answers
//! differently and may be served elsewhere, so a reviewer always sees the change.

use super::{ChangeKind, Differ};
use crate::manifest::*;

impl Differ {
    pub(super) fn model(&mut self, prefix: &str, old: &AgentConfig, new: &AgentConfig) {
        let critic = |c: &AgentConfig| c.critic.as_ref().and_then(|c| c.model.clone());
        for (what, a, b) in [
            ("model", old.model.clone(), new.model.clone()),
            (
                "review_model",
                old.review_model.clone(),
                new.review_model.clone(),
            ),
            ("critic.model", critic(old), critic(new)),
        ] {
            if a != b {
                let show = |m: Option<String>| m.unwrap_or_else(|| "(default)".to_owned());
                self.push(
                    ChangeKind::ModelChanged,
                    format!("{prefix}{what}"),
                    Some(show(a)),
                    Some(show(b)),
                    false,
                );
            }
        }
    }
}
