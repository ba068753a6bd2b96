//! Real usage read from Prometheus (docs/real-usage.md): its settings, the
//! client (`prometheus`) and the reader that, on the controller's leader,
//! turns a window of answers into figures, idle streaks and their alerts
//! (`reader`, with `cluster::controller`'s pods). What decides is
//! `quota::real_usage`; what is stored is `store::real_usage`.

pub mod prometheus;

use quota::real_usage::template::{Metric, Template};
use std::path::PathBuf;
use std::time::Duration;

/// The reader's settings, from `--prometheus-*`.
#[derive(Clone, Debug)]
pub struct RealUsageConfig {
    pub url: String,
    pub token_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub every: Duration,
    pub step_ms: i64,
    pub delay_ms: i64,
    pub rate_range_seconds: u64,
    pub timeout: Duration,
    pub max_series: usize,
    pub max_bytes: usize,
    pub max_steps: i64,
    pub catch_up_ms: i64,
    /// Admins are told once Prometheus has been unreachable this long.
    pub alert_after_ms: i64,
    /// Where people reach the portal: the links in the reader's alerts.
    pub public_url: String,
    pub queries: Vec<(Metric, Template)>,
}
