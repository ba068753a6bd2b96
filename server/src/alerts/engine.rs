//! The alert engine's shell: load quotas' rules, open alerts and recent
//! samples, evaluate (pure, in `alerts`), and store the result with its
//! emails in one transaction. It runs on every replica: opening an alert is
//! idempotent across them (see `SqlStore::apply_evaluation`).

use super::{evaluate_quotas, transfer_condition, Evaluation, Kind, OpenAlert};
use crate::service::Service;
use crate::store::sql::SqlStore;
use crate::store::transfers::Transfer;
use crate::store::StoreError;
use app::charts::{forecast, Sample, FORECAST_WINDOW_MS};
use quota::Quota;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often every quota is evaluated.
pub const EVERY: Duration = Duration::from_secs(30);

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub opened: usize,
    pub resolved: usize,
}

/// Evaluates every quota and stores what changed.
pub async fn evaluate_all(
    sql: &SqlStore,
    quotas: &[Quota],
    now_ms: i64,
    public_url: &str,
) -> Result<Swept, StoreError> {
    let rules = sql.all_alert_rules().await?;
    let mut open: BTreeMap<String, Vec<OpenAlert>> = BTreeMap::new();
    for a in sql.open_alerts().await? {
        open.entry(a.quota.clone()).or_default().push(a.as_open());
    }
    // Forecasts only where a rule asks for one: a query per such quota.
    let mut forecasts = BTreeMap::new();
    for q in quotas {
        let Some(rs) = rules.get(q.name()) else {
            continue;
        };
        let keys: Vec<&String> = q
            .spec
            .hard
            .keys()
            .filter(|k| k.starts_with(quota::keys::CASH_PREFIX))
            .filter(|k| super::rule_for(rs, k).forecast_horizon_hours.is_some())
            .collect();
        if keys.is_empty() {
            continue;
        }
        // The window and a little before it: the burn starts at the sample
        // just before the window when the window holds only one.
        let samples = sql
            .samples(q.name(), now_ms - 2 * FORECAST_WINDOW_MS, now_ms)
            .await?
            .into_iter()
            .map(|s| Sample {
                at_ms: s.at_ms,
                hard: s.hard,
                used: s.used,
                self_used: s.self_used,
            })
            .collect::<Vec<_>>();
        let by_key: BTreeMap<String, _> = keys
            .into_iter()
            .map(|k| (k.clone(), forecast(&samples, k, now_ms, FORECAST_WINDOW_MS)))
            .collect();
        forecasts.insert(q.name().to_string(), by_key);
    }
    let e = evaluate_quotas(quotas, &rules, &open, &forecasts, now_ms);
    if e.is_empty() {
        return Ok(Swept::default());
    }
    let parents: BTreeMap<&str, &str> = quotas
        .iter()
        .map(|q| (q.name(), q.spec.parent.as_str()))
        .collect();
    store(sql, &e, &parents, now_ms, public_url).await
}

/// Records a transfer event (requested, approved, rejected) as an alert
/// and queues its emails: owners of the receiving quota and the admins.
/// A decision resolves the transfer's "requested" alert.
pub async fn transfer_event(
    sql: &SqlStore,
    service: &Service,
    kind: Kind,
    t: &Transfer,
    public_url: &str,
) -> Result<(), StoreError> {
    let now_ms = service.now();
    let c = transfer_condition(kind, t);
    let mut e = Evaluation {
        open: vec![c],
        resolve: Vec::new(),
    };
    if kind != Kind::TransferRequested {
        e.resolve = open_requested(sql, t).await?;
    }
    let quotas = service.list().await.unwrap_or_default();
    let parents: BTreeMap<&str, &str> = quotas
        .iter()
        .map(|q| (q.name(), q.spec.parent.as_str()))
        .collect();
    store(sql, &e, &parents, now_ms, public_url).await?;
    Ok(())
}

/// The open "transfer requested" alert of `t` (its id, if open).
async fn open_requested(sql: &SqlStore, t: &Transfer) -> Result<Vec<i64>, StoreError> {
    let requested = transfer_condition(Kind::TransferRequested, t).fingerprint();
    Ok(sql
        .open_alerts()
        .await?
        .into_iter()
        .filter(|a| a.fingerprint == requested)
        .map(|a| a.id)
        .collect())
}

/// A request nobody decided in time: its alert resolves, no email.
pub async fn transfer_expired(sql: &SqlStore, t: &Transfer, now_ms: i64) -> Result<(), StoreError> {
    let resolve = open_requested(sql, t).await?;
    if !resolve.is_empty() {
        let e = Evaluation {
            open: Vec::new(),
            resolve,
        };
        sql.apply_evaluation(&e, &BTreeMap::new(), "", now_ms)
            .await?;
    }
    Ok(())
}

async fn store(
    sql: &SqlStore,
    e: &Evaluation,
    parents: &BTreeMap<&str, &str>,
    now_ms: i64,
    public_url: &str,
) -> Result<Swept, StoreError> {
    let mut recipients = BTreeMap::new();
    for c in &e.open {
        let chain = chain(&c.quota, parents);
        recipients.insert(c.fingerprint(), sql.alert_recipients(&chain, c.kind).await?);
    }
    let opened = sql
        .apply_evaluation(e, &recipients, public_url, now_ms)
        .await?;
    Ok(Swept {
        opened: opened.len(),
        resolved: e.resolve.len(),
    })
}

/// The quota and its ancestors, nearest first (a cycle stops the walk).
fn chain<'a>(quota: &'a str, parents: &BTreeMap<&'a str, &'a str>) -> Vec<&'a str> {
    let mut out = vec![quota];
    let mut at = quota;
    while let Some(&p) = parents.get(at) {
        if p.is_empty() || out.contains(&p) {
            break;
        }
        out.push(p);
        at = p;
    }
    out
}

/// Evaluates all quotas every `every`, forever.
pub async fn evaluate_forever(
    service: Arc<Service>,
    sql: Arc<SqlStore>,
    public_url: String,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
    loop {
        tick.tick().await;
        evaluate_now(&service, &sql, &public_url).await;
    }
}

/// One sweep, logged rather than failed: the next one retries.
pub async fn evaluate_now(service: &Service, sql: &SqlStore, public_url: &str) {
    match service.list().await {
        Ok(all) => match evaluate_all(sql, &all, service.now(), public_url).await {
            Ok(s) if s != Swept::default() => {
                tracing::info!(opened = s.opened, resolved = s.resolved, "alerts evaluated")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "evaluating alerts failed"),
        },
        Err(e) => tracing::warn!(error = %e, "cannot list quotas for alerts"),
    }
}

/// Records a transfer event, logging a failure: the transfer itself is
/// already decided and stays so.
pub async fn on_transfer(
    sql: &SqlStore,
    service: &Service,
    kind: Kind,
    t: &Transfer,
    public_url: &str,
) {
    if let Err(e) = transfer_event(sql, service, kind, t, public_url).await {
        tracing::warn!(error = %e, transfer = t.id, kind = kind.as_str(), "recording a transfer alert failed");
    }
}
