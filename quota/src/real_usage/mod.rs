//! Real usage: what pods really do, against what they were allocated
//! (docs/real-usage.md). Prometheus is read by the server
//! (`server::real_usage`); everything that decides is here, pure:
//!
//! - `template` — the PromQL asked per metric, with its defaults;
//! - `answer` — Prometheus's answer read as hostile input, exactly;
//! - `measure` — one window's answers → each workload's figures and steps;
//! - `figures` — allocated, measured, busy, idle card-time and efficiency:
//!   the one definition every page, the API and the alerts read;
//! - `reading` — one reading whole: measured hour by hour, rows per
//!   workload and hour, streaks carried, the idle at its end;
//! - `readings` — where the readings stand ("unknown since …");
//! - `report` — real usage grouped and bucketed as a budget report;
//! - `idle` — idle streaks, "idle now", who is told, and its words;
//! - `billing` — billing by quality of service: use above requests,
//!   billed once per window;

pub mod answer;
pub mod billing;
pub mod figures;
pub mod idle;
pub mod measure;
pub mod reading;
pub mod readings;
pub mod report;
pub mod template;
