//! Schedules: prompts run on a cron expression, and what happens to overlapping or missed fires.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What to do when a schedule fires while its previous run is still going.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Skip this fire.
    #[default]
    Skip,
    /// Run it after the previous one finishes.
    Queue,
}

/// What to do about fires missed while eve was down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// Drop missed fires.
    #[default]
    None,
    /// Run once for the most recent missed fire.
    Latest,
}

/// A prompt run on a cron schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Name from the path.
    pub name: String,
    /// Source file.
    pub source: String,
    /// Five-field cron expression, as written.
    pub cron: String,
    /// IANA time zone the cron is read in.
    pub timezone: String,
    /// Overlap policy.
    pub overlap: Overlap,
    /// Catch-up policy.
    pub catch_up: CatchUp,
    /// The prompt.
    pub prompt: String,
}
