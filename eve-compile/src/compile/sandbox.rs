//! `sandbox/`: `sandbox.yaml` (provider, default tool timeout and output limit) and the workspace
//! seed files copied into each session's workspace.

use eve_discover::AgentDir;

use super::Compiler;
use crate::fields::Fields;
use crate::manifest::*;

impl Compiler {
    pub(super) fn sandbox(&mut self, dir: &AgentDir) -> Sandbox {
        let mut sandbox = Sandbox::default();
        let Some(sb) = &dir.sandbox else {
            return sandbox;
        };
        for file in &sb.workspace {
            self.files.insert(file.clone());
        }
        sandbox.workspace = sb.workspace.clone();
        if let Some(file) = &sb.config
            && let Some(parsed) = self.yaml_file(file)
        {
            let mut f = Fields::new(&file.path, &parsed.doc, "", &mut self.diags);
            f.unknown_keys(&["provider", "timeout", "output_limit"], "sandbox");
            if let Some(p) = f.choice(
                "provider",
                &[
                    ("isolated", Provider::Isolated),
                    ("host", Provider::Host),
                    ("local", Provider::Isolated),
                ],
            ) {
                sandbox.provider = p;
            }
            if let Some(t) = f.duration_ms("timeout") {
                sandbox.timeout_ms = t;
            }
            if let Some(o) = f.u64("output_limit") {
                sandbox.output_limit = o;
            }
        }
        sandbox
    }
}
