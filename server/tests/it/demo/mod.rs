//! `serve --demo`: a sample organisation seeded through the service layer
//! on an empty database, and left alone on a database with quotas.
//!
//! Its tests: `seeds`, `figures` (the figures agree everywhere, mail
//! included), `pages` (the quota pages' order and weight).

mod figures;
mod pages;
mod seeds;

use crate::common::*;
use bizrq::demo::{Outcome, HISTORY_MS, ROOT};
use bizrq::store::history::HOUR_MS;
use bizrq::store::sql::SqlStore;
use bizrq::store::transfers::{TransferFilter, TransferStatus};
use quota::resources;
use reqwest::StatusCode;

const PASSWORD: &str = "demo-password-for-tests";

fn demo_args(url: &str) -> bizrq::config::ServeArgs {
    let mut args = bizrq::config::ServeArgs::for_tests(url);
    args.demo = true;
    args.demo_password = Some(PASSWORD.into());
    args.admin_password = Some(ADMIN_PASSWORD.into());
    args.alert_sweep_seconds = 1;
    args
}

/// Where `what` first stands in `page` (panics when it does not).
fn at(page: &str, what: &str, name: &str) -> usize {
    page.find(what)
        .unwrap_or_else(|| panic!("{name}'s page has {what}"))
}
