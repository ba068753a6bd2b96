//! Real usage: what pods really do, against what they were allocated
//! (docs/real-usage.md). Prometheus is read by the server
//! (`server::real_usage`); everything that decides is here, pure:
//!
//! - `template` — the PromQL asked per metric, with its defaults;
//! - `answer` — Prometheus's answer read as hostile input, exactly;
//! - `measure` — one window's answers → each workload's figures and steps;
//! - `figures` — allocated, measured, busy, idle card-time and efficiency:
//!   the one definition every page, the API and the alerts read;
//! - `idle` — idle streaks, "idle now", who is told, and its words;
//! - `quality` — `billing: ByQuality`: real use priced by QoS class.

pub mod answer;
pub mod figures;
pub mod idle;
pub mod measure;
pub mod template;
