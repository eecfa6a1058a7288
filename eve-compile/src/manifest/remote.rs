//! Remote agents: `subagents/NAME.yaml` names another eve deployment's session API, called as a
//! subagent (a task). `${VAR}` references in its URL, headers and token are kept as written and
//! resolved from the environment at each request.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a remote agent is reached and how this deployment authenticates to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteAgent {
    /// Base URL of the other deployment (`https://research.example.com`); its session API is
    /// under `/eve/v1/`. May hold `${VAR}` references.
    pub url: String,
    /// Headers sent with every request, values with `${VAR}` references unresolved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `Authorization: Bearer <token>`: a `${VAR}` reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<String>,
    /// Whether the calling turn's principal is asserted to the remote (`forwardedPrincipal`); a
    /// remote that does not list this deployment under `trusted_forwarders` refuses it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forward_principal: bool,
}
