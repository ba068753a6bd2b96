//! The JSON API, one module per resource (`quotas`, `samples`, `check`,
//! `transfers`, `alerts`, `live`, ...) plus `health` (probes, metrics, the
//! stylesheet) and `pkg` (the islands bundle). Their shared state, errors
//! and limits are in `edge`; which edges exist and how their routers
//! compose: `routes`. Authentication and the portal's pages are in
//! `portal`; the admission webhook is `webhook`.

pub mod alerts;
pub mod budgets;
pub mod check;
pub mod efficiency;
pub mod health;
pub mod live;
pub mod pkg;
pub mod prices;
pub mod queue;
pub mod quotas;
pub mod reports;
pub mod samples;
pub mod shares;
pub mod transfers;
