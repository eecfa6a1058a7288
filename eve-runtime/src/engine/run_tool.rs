//! Running a tool of a build: the build files it will execute are checked first.
//!
//! Every build tool, `tool.before` hook, observe hook and dynamic-tool provider the engine runs
//! goes through [`Runtime::run_tool`]. Before the process starts, the build files it will execute
//! are compared with the manifest of the build they belong to (`workspace::integrity`, with the
//! digests this runtime's build store keeps). An altered file comes back by value: the call
//! fails with a sentence the model sees, the session gets a `build.tampered` event, the build's
//! files are put back from its pack, and the altered file never runs.

use std::time::Instant;

use eve_compile::Tool;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Runtime;
use crate::store::Batch;
use crate::tools::{ToolContext, ToolResult};
use crate::workspace::integrity::{self, BUILD_TAMPERED, Refusal};

impl Runtime {
    /// Runs one call of `tool` ([`crate::tools::run_tool`]) once every build file it will
    /// execute is the one `eve build` recorded; otherwise fails it without running anything.
    pub(crate) async fn run_tool(
        &self,
        tool: &Tool,
        input: &Value,
        ctx: &ToolContext,
        cancel: CancellationToken,
    ) -> ToolResult {
        let start = Instant::now();
        if let Err(refusal) = self.check_build_files(tool, ctx).await {
            let message = match refusal {
                Refusal::Unchecked(message) => message,
                Refusal::Altered(altered) => {
                    let message = altered.tampered.to_string();
                    tracing::warn!(
                        build = %altered.hash,
                        tool = %tool.name,
                        path = %altered.tampered.path,
                        "build file altered"
                    );
                    let mut batch = Batch::new();
                    batch.event(&ctx.session_id, BUILD_TAMPERED, altered.event(&tool.name));
                    if let Err(e) = self.commit(batch).await {
                        tracing::warn!(error = %e, "cannot record build.tampered");
                    }
                    altered.restore().await;
                    message
                }
            };
            return ToolResult::failure(message, start.elapsed());
        }
        crate::tools::run_tool(tool, input, ctx, cancel).await
    }

    /// Checks the build files a call of `tool` will execute against the manifest of the build
    /// `ctx.agent_dir` belongs to: this runtime's loaded build when it is one of its own, else
    /// the `manifest.json` beside it. A folder that is not a build's `files/` (no manifest next
    /// to it), or a build written before digests existed, is not checked.
    async fn check_build_files(&self, tool: &Tool, ctx: &ToolContext) -> Result<(), Refusal> {
        let rels = integrity::executed_files(tool, ctx);
        if rels.is_empty() {
            return Ok(());
        }
        let Some((build_dir, hash)) = integrity::build_of(&ctx.agent_dir) else {
            return Ok(());
        };
        let builds = &self.inner.builds;
        let Some(digests) = builds.digests(&hash, &build_dir) else {
            return Ok(());
        };
        if digests.is_empty() {
            // A build written before digests existed: nothing to compare with.
            return Ok(());
        }
        integrity::check(
            builds.file_checks(),
            ctx.agent_dir.clone(),
            (build_dir, hash),
            rels,
            digests,
        )
        .await
    }
}
