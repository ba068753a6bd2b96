//! The alert engine's shell: load quotas' rules, open alerts and recent
//! samples, evaluate (pure, in `alerts`), and store the result with its
//! emails in one transaction. It runs on every replica: opening an alert is
//! idempotent across them (see `SqlStore::apply_evaluation`).

use crate::alerts::{Condition, Evaluation, Kind, Level, OpenAlert};

pub mod real_usage;
use quota::rollup::SubtreeUse;
use serde_json::json;
// What the service marks as written; the engine takes it from there.
use crate::service::changed::Seen;
use crate::service::transfers::TransferWatcher;
use crate::service::working::has_budget;
use crate::service::working::{Accrued, Working};
use crate::service::Service;
use crate::store::alerts::{AlertFilter, Observed, Recipient};
use crate::store::sql::SqlStore;
use crate::store::transfers::Transfer;
use crate::store::StoreError;
use quota::forecast::Outlook;
use quota::keys::cash_target;
use quota::lineage::Forest;
#[cfg(test)]
use quota::rollup::subtree_in_use;
use quota::Quota;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often every quota is evaluated. Writes are evaluated as they
/// happen (`Changed`); the sweep is the net under them (a process that
/// died between a write and its evaluation, kubectl changes nobody here
/// wrote) and the clock for the cash forecast. It reads every quota, which
/// on a large forest takes a core for a while: swept every few seconds, that
/// shows in admission latency (docs/benchmarks.md, "No stalls").
pub const EVERY: Duration = Duration::from_secs(300);
/// After a write, how long to wait for more before evaluating: a burst of
/// admissions is one evaluation.
pub const SETTLE: Duration = Duration::from_millis(250);
/// A sweep reads quotas from a list that may lag a little behind the
/// newest writes (cluster mode: the watch cache). It counts as having seen
/// them this much before it listed them, so it never reopens an alert that
/// a fresher evaluation resolved meanwhile (nor resolves one opened).
pub const SWEEP_SLACK_MS: i64 = 5_000;

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub opened: usize,
    pub resolved: usize,
    /// Open alerts whose keys changed.
    pub updated: usize,
}

/// The alert for a transfer event, on the receiving quota.
pub fn transfer_condition(kind: Kind, t: &Transfer) -> Condition {
    let amounts: Vec<String> = t.amounts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let from = match &t.top_up {
        Some(u) if u.source == quota::object::budgets::Source::Grant => "a grant".to_string(),
        _ => t.from_quota.as_deref().unwrap_or("its parent").to_string(),
    };
    let noun = if t.top_up.is_some() {
        "Top-up"
    } else {
        "Transfer"
    };
    let what = match kind {
        Kind::TransferApproved => "approved",
        Kind::TransferRejected => "rejected",
        _ => "requested",
    };
    let revalidated = t
        .decision_note
        .as_deref()
        .is_none_or(|n| n.trim().is_empty())
        && t.result.is_some();
    let by = match kind {
        Kind::TransferRequested => format!(" by {}", t.requested_by),
        // Approved by a person, refused by re-validation against the tree.
        Kind::TransferRejected if revalidated => " on re-validation".to_string(),
        _ => t
            .decided_by
            .as_deref()
            .map(|d| format!(" by {d}"))
            .unwrap_or_default(),
    };
    // A rejection says why: the decider's note, or what re-validation found.
    let why = match (kind, t.decision_note.as_deref(), t.result.as_deref()) {
        (Kind::TransferRejected, Some(n), _) if !n.trim().is_empty() => format!(": {}", n.trim()),
        (Kind::TransferRejected, _, Some(r)) => format!(": {r}"),
        _ => String::new(),
    };
    Condition {
        kind,
        quota: t.to_quota.clone(),
        key: format!("#{}", t.id),
        keys: Vec::new(),
        level: if kind == Kind::TransferRejected {
            Level::Warning
        } else {
            Level::Info
        },
        message: format!(
            "{noun} #{} of {} from {from} to {} {what}{by}{}",
            t.id,
            amounts.join(", "),
            t.to_quota,
            why
        ),
        numbers: json!({
            "transfer": t.id,
            "amounts": t.amounts.iter().map(|(k, v)| (k.clone(), v.to_string())).collect::<BTreeMap<_, _>>(),
            "reason": t.reason,
            "note": t.decision_note,
            "result": t.result,
        }),
    }
}

/// Evaluates every quota and stores what changed. `observed_at`: when
/// `quotas` were at the latest current.
/// Budgets are forecast at face price (no price list): the service's
/// sweep is `evaluate_forest`, with its prices.
#[cfg(test)]
pub async fn evaluate_all(
    sql: &SqlStore,
    quotas: &[Quota],
    observed_at: i64,
    now_ms: i64,
    public_url: &str,
) -> Result<Swept, StoreError> {
    let in_use = subtree_in_use(quotas);
    let pricing = quota::forecast::Pricing {
        now_ms,
        ..Default::default()
    };
    let keys = quota::KeyConfig::default();
    evaluate_listed(
        sql,
        quotas,
        &in_use,
        observed_at,
        &pricing,
        public_url,
        &keys,
    )
    .await
}

/// `evaluate_all` over the working copies of the forest the service
/// keeps (`accrue_in_chunks`), at `pricing.now_ms`: in standalone mode
/// every budget as accrued and its ended periods closed up to that `now`,
/// the figures the pages and the budgets API show at that moment.
pub async fn evaluate_forest(
    sql: &SqlStore,
    forest: &Accrued,
    observed_at: i64,
    pricing: &quota::forecast::Pricing,
    public_url: &str,
    keys: &quota::KeyConfig,
) -> Result<Swept, StoreError> {
    let quotas = forest.quotas();
    evaluate_listed(sql, &quotas, forest, observed_at, pricing, public_url, keys).await
}

/// `w.accrued(forest)`, copying at most `EVALUATE_CHUNK` quotas between
/// two rests (`util::Pace`): accruing every budget of a large forest is
/// CPU that admissions would otherwise wait behind. Only the quotas with
/// a budget are copied (none in cluster mode); the others are shared.
pub async fn accrue_in_chunks(w: &Working, forest: Arc<crate::service::forest::Forest>) -> Accrued {
    let places = w.to_accrue(&forest);
    let mut copies = Vec::with_capacity(places.len());
    let mut pace = crate::util::Pace::start();
    for chunk in places.chunks(EVALUATE_CHUNK) {
        copies.extend(w.copies_at(&forest, chunk));
        pace.rest().await;
    }
    Accrued::of(forest, copies)
}

async fn evaluate_listed<Q, U>(
    sql: &SqlStore,
    quotas: &[Q],
    in_use: &U,
    observed_at: i64,
    pricing: &quota::forecast::Pricing,
    public_url: &str,
    keys: &quota::KeyConfig,
) -> Result<Swept, StoreError>
where
    Q: std::borrow::Borrow<Quota> + Sync,
    U: SubtreeUse + Sync + ?Sized,
{
    let now_ms = pricing.now_ms;
    let rules = sql.all_alert_rules().await?;
    let mut open: BTreeMap<String, Vec<OpenAlert>> = BTreeMap::new();
    for a in sql.open_alerts().await? {
        open.entry(a.quota.clone()).or_default().push(a.as_open());
    }
    let forecasts = forecasts(quotas, &rules, pricing);
    let e = evaluate_in_chunks(quotas, in_use, &rules, &open, &forecasts, now_ms, keys).await;
    if e.is_empty() {
        return Ok(Swept::default());
    }
    let parents = Forest::from_quotas(quotas.iter().map(std::borrow::Borrow::borrow));
    store(
        sql,
        &e,
        &parents,
        &Observed::at(observed_at),
        now_ms,
        public_url,
        keys,
    )
    .await
}

/// Quotas evaluated between two rests (`util::Pace`): a sweep of 10,000
/// quotas is tens of ms of CPU (hundreds in a debug build) that
/// admissions would otherwise wait behind.
pub const EVALUATE_CHUNK: usize = 250;

/// `alerts::evaluate_quotas`, the same result in the same order, yielding
/// to the runtime after every `EVALUATE_CHUNK` quotas.
pub async fn evaluate_in_chunks<Q, U>(
    quotas: &[Q],
    in_use: &U,
    rules: &BTreeMap<String, Vec<crate::alerts::Rule>>,
    open: &BTreeMap<String, Vec<OpenAlert>>,
    forecasts: &BTreeMap<String, BTreeMap<String, Outlook>>,
    now_ms: i64,
    keys: &quota::KeyConfig,
) -> Evaluation
where
    Q: std::borrow::Borrow<Quota> + Sync,
    U: SubtreeUse + Sync + ?Sized,
{
    let mut out = Evaluation::default();
    let mut pace = crate::util::Pace::start();
    for chunk in quotas.chunks(EVALUATE_CHUNK) {
        let e = crate::alerts::evaluate_each(chunk, in_use, rules, open, forecasts, now_ms, keys);
        out.open.extend(e.open);
        out.resolve.extend(e.resolve);
        out.update.extend(e.update);
        out.escalate.extend(e.escalate);
        pace.rest().await;
    }
    out.resolve
        .extend(crate::alerts::resolve_deleted(quotas, open));
    out
}

/// How long the subtree usage `evaluate_changed` keeps is moved write by
/// write before it is built whole again from this process's cache (which
/// also brings in what other replicas wrote, as far as this one knows).
pub const REBUILD_SUBTREES: Duration = Duration::from_secs(10);

/// What `evaluate_forever` keeps between evaluations of what changed: the
/// subtree usage of every known quota (`quota::rollup::SubtreeUsage`),
/// moved by each batch's writes, and when it was built whole; what each
/// budgeted quota written here last held of what its budget's judgement
/// reads (`BudgetInputs`), so a write that changed none of it is not
/// judged again; and how many working copies the last evaluation made.
#[derive(Default)]
pub struct Kept {
    subtrees: Option<(quota::rollup::SubtreeUsage, std::time::Instant)>,
    budgets: std::collections::HashMap<String, BudgetInputs>,
    copied: usize,
}

impl Kept {
    /// How many working copies (budgets accrued to the evaluation's `now`)
    /// the last evaluation of what changed made.
    pub fn copied(&self) -> usize {
        self.copied
    }
}

/// What a budget's judgement reads of its own quota as stored (its
/// subtree's spending is its descendants'): the cash keys of hard, the
/// budgets' terms and periods, its own spending, and its alert rules. A write that changed
/// none of it (a loan grant writes the lending parent) changed nothing its
/// budget, nor any budget above it, is judged on.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetInputs {
    hard: Vec<(String, quota::Quantity)>,
    terms: BTreeMap<String, quota::object::budgets::BudgetPolicy>,
    periods: BTreeMap<String, quota::object::budgets::PeriodStatus>,
    spending: Vec<(String, quota::Quantity)>,
    /// Its alert rules (a threshold lowered judges it again).
    rules: Vec<crate::alerts::Rule>,
}

impl BudgetInputs {
    pub fn of(q: &Quota, rules: &[crate::alerts::Rule]) -> BudgetInputs {
        let cash = |l: &quota::ResourceList| -> Vec<(String, quota::Quantity)> {
            l.iter()
                .filter(|(k, _)| cash_target(k).is_some())
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        };
        BudgetInputs {
            hard: cash(&q.spec.hard),
            terms: q.spec.budgets.clone(),
            periods: q.status.budgets.clone(),
            spending: cash(&q.status.self_used),
            rules: rules.to_vec(),
        }
    }
}

/// The most quotas a write's evaluation walks below the budgets above it
/// to judge them at once (each accrued to `now`, paced): an ancestor whose
/// subtree holds more is left to the sweep, which reads every quota
/// anyway. A line has at most 16 levels (`quota::tree::MAX_DEPTH`), and
/// the subtrees along it nest, so the walk is one subtree's, at most this.
pub const ABOVE_AT_ONCE: usize = 2_000;

/// Evaluates the quotas just written (`Changed::take`), from the objects
/// written, and their ancestors' usage: what runs below a parent changed
/// with them. The tree comes from this process's cache (no list; the
/// written quotas as written), so an ancestor's usage alert is only opened
/// here, never resolved: the sweep, which reads every quota, resolves it.
/// The subtree usage is `kept`'s, moved by these writes (a write's cost is
/// its depth): built whole — every known quota summed, tens of ms over
/// 10,000 of them, every `SETTLE` while admissions wrote, before — only at
/// first, every `REBUILD_SUBTREES`, and when a write cannot be placed (a
/// new, deleted or moved quota).
pub async fn evaluate_changed(
    service: &Service,
    sql: &SqlStore,
    changed: BTreeMap<String, Seen>,
    public_url: &str,
    kept: &mut Kept,
) -> Result<Swept, StoreError> {
    let Some(oldest) = changed.values().map(|s| s.at_ms).min() else {
        return Ok(Swept::default());
    };
    // Each quota as of its own write.
    let mut observed = Observed {
        default: oldest,
        by_quota: changed.iter().map(|(n, s)| (n.clone(), s.at_ms)).collect(),
        ..Observed::default()
    };
    let now_ms = service.now();
    let written: Vec<(String, Option<Arc<crate::store::Stored>>)> = changed
        .iter()
        .map(|(n, s)| (n.clone(), s.quota.clone()))
        .collect();
    // Moved by these writes (each costs its depth)…
    let moved = kept
        .subtrees
        .take()
        .filter(|(_, built)| built.elapsed() < REBUILD_SUBTREES)
        .and_then(|(mut s, built)| {
            written
                .iter()
                .all(|(_, q)| q.as_ref().is_some_and(|q| s.apply(&q.quota)))
                .then_some((s, built))
        });
    // …or built whole: tens of ms of CPU over 10,000 quotas (hundreds in a
    // debug build), off the async workers that answer admissions.
    let (subtrees, built) = match moved {
        Some(kept) => kept,
        None => {
            let cached = service.cached_quotas();
            let written = written.clone();
            tokio::task::spawn_blocking(move || {
                let tree = known_tree(cached, &written);
                let known: Vec<&Quota> = tree.values().map(|s| &s.quota).collect();
                (
                    quota::rollup::SubtreeUsage::build(&known),
                    std::time::Instant::now(),
                )
            })
            .await
            .map_err(|e| StoreError::Backend(format!("evaluating what changed: {e}")))?
        }
    };
    let names: std::collections::BTreeSet<&str> = written.iter().map(|(n, _)| n.as_str()).collect();
    let mut above: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for name in &names {
        for a in subtrees.ancestors(name) {
            if !names.contains(a.as_str()) && seen.insert(a.clone()) {
                above.push(a);
            }
        }
    }
    let (subtrees, _) = kept.subtrees.insert((subtrees, built));
    let w = service.working(now_ms);
    let all_names: Vec<String> = changed
        .keys()
        .cloned()
        .chain(above.iter().cloned())
        .collect();
    let rules = sql.alert_rules_of(&all_names).await?;
    let none = Vec::new();
    // In standalone mode, what each write changed of what budgets are
    // judged on: its quota's spending moves every budget above it, its
    // budget's terms, periods or spending its own. A write that changed
    // none of it (a loan grant writes the lending parent) calls for no
    // budget's judgement, nor for accruing what runs below it; the sweep
    // judges time passing. Kept once the evaluation is stored (a failed
    // one is retried as new).
    let mut spent: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut rejudged: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut inputs: Vec<(String, Option<BudgetInputs>)> = Vec::new();
    if w.accrues() {
        for (name, s) in &changed {
            let Some(s) = &s.quota else { continue };
            let now = has_budget(&s.quota)
                .then(|| BudgetInputs::of(&s.quota, rules.get(name).unwrap_or(&none)));
            let was = kept.budgets.get(name);
            if was.map(|b| &b.spending) != now.as_ref().map(|b| &b.spending) {
                spent.insert(name);
            }
            if now.is_some() && was != now.as_ref() {
                rejudged.insert(name);
            }
            inputs.push((name.clone(), now));
        }
    }
    // The budgets above a write that changed spending, judged here on the
    // working copies of every budget below them (as the sweep does, on
    // their subtree only), nearest first; the subtrees along a line nest,
    // so the farthest ones are dropped while what they hold passes
    // `ABOVE_AT_ONCE` (the sweep judges those).
    let budgeted_at = |n: &str| {
        service
            .cached_quota(n)
            .is_some_and(|s| s.quota.spec.hard.keys().any(|k| cash_target(k).is_some()))
    };
    let mut judged: Vec<(usize, String)> = Vec::new();
    for name in &spent {
        for (depth, a) in subtrees.ancestors(name).into_iter().rev().enumerate() {
            if !names.contains(a.as_str())
                && !judged.iter().any(|(_, j)| *j == a)
                && budgeted_at(&a)
            {
                judged.push((depth, a));
            }
        }
    }
    // Below a written quota whose budget is judged, and below a judged
    // budget above the writes, every quota with a budget: each is judged
    // on what its whole subtree spent. What the copies change of
    // `selfUsed` moves the usage of their lines.
    // A quota without a budget is its own copy: borrowed, not cloned.
    let copies: Vec<std::borrow::Cow<Quota>> = changed
        .values()
        .filter_map(|s| s.quota.as_ref().map(|s| &s.quota))
        .map(|q| match w.accrues() && has_budget(q) {
            true => std::borrow::Cow::Owned(w.copy(q)),
            false => std::borrow::Cow::Borrowed(q),
        })
        .collect();
    let below_of = |judged: &[(usize, String)]| {
        let roots: std::collections::BTreeSet<&str> = rejudged
            .iter()
            .copied()
            .filter(|n| {
                changed[*n]
                    .quota
                    .as_ref()
                    .is_some_and(|s| s.quota.spec.hard.keys().any(|k| cash_target(k).is_some()))
            })
            .chain(judged.iter().map(|(_, a)| a.as_str()))
            .collect();
        subtrees.below(&roots)
    };
    let mut below_names = below_of(&judged);
    while below_names.len() > ABOVE_AT_ONCE && !judged.is_empty() {
        let top = judged.iter().map(|(d, _)| *d).min().unwrap_or_default();
        judged.retain(|(d, _)| *d != top);
        below_names = below_of(&judged);
    }
    let mut below = Vec::new();
    let mut pace = crate::util::Pace::start();
    for chunk in below_names.chunks(EVALUATE_CHUNK) {
        below.extend(
            chunk
                .iter()
                .filter(|n| !changed.contains_key(*n))
                .filter_map(|n| service.cached_quota(n))
                .filter(|s| has_budget(&s.quota))
                .map(|s| w.copy(&s.quota)),
        );
        pace.rest().await;
    }
    let judged: BTreeMap<String, Quota> = judged
        .into_iter()
        .filter_map(|(_, a)| Some((a.clone(), w.copy(&service.cached_quota(&a)?.quota))))
        .collect();
    kept.copied = copies
        .iter()
        .filter(|c| matches!(c, std::borrow::Cow::Owned(_)))
        .count()
        + below.len()
        + judged.len();
    let moved = crate::service::working::moved(
        copies
            .iter()
            .map(|c| &**c)
            .chain(&below)
            .chain(judged.values())
            .filter_map(|c| {
                let was = subtrees.self_used_of(c.name())?;
                Some((was, c, subtrees.ancestors(c.name())))
            }),
        |n| subtrees.in_use().get(n),
    );
    let in_use = Moved {
        base: subtrees.in_use(),
        moved: &moved,
    };
    let mut open: BTreeMap<String, Vec<OpenAlert>> = BTreeMap::new();
    let mut gone = Vec::new();
    let of_changed = AlertFilter {
        open: Some(true),
        quotas_in: Some(all_names),
        ..AlertFilter::default()
    };
    for a in sql.alerts(&of_changed, i64::MAX).await? {
        match changed.get(&a.quota) {
            Some(Seen { quota: None, .. }) => gone.push(a.as_open()),
            // Deleted: its conditions went with it.
            _ => open.entry(a.quota.clone()).or_default().push(a.as_open()),
        }
    }
    let forecasts = forecasts(&copies, &rules, &w.pricing());
    // Only the quotas written: `open` holds their ancestors' alerts too,
    // which `evaluate_quotas` would take for a deleted quota's and resolve
    // (a child's write, in a batch of its own, resolved its parent's usage
    // alert, which then waited for the sweep to open again). A deleted
    // quota's alerts are `gone`'s.
    // A written budget whose write changed nothing it is judged on keeps
    // its budget keys as they are (its subtree's spending was not accrued).
    let (full, kept_budgets): (Vec<&Quota>, Vec<&Quota>) = copies
        .iter()
        .map(|c| &**c)
        .partition(|c| !w.accrues() || !has_budget(c) || rejudged.contains(c.name()));
    let mut e = crate::alerts::evaluate_each(
        &full,
        &in_use,
        &rules,
        &open,
        &forecasts,
        now_ms,
        &service.keys,
    );
    for q in kept_budgets {
        let cs = crate::alerts::conditions(
            q,
            in_use.of(q.name()),
            rules.get(q.name()).unwrap_or(&none),
            forecasts.get(q.name()).unwrap_or(&BTreeMap::new()),
            now_ms,
            &service.keys,
        );
        let was = open.get(q.name()).map(Vec::as_slice).unwrap_or_default();
        let found = keeping_budget_keys(
            crate::alerts::evaluate(
                crate::alerts::grouped(without_budgets(cs), &service.keys),
                was,
            ),
            was,
        );
        e.open.extend(found.open);
        e.resolve.extend(found.resolve);
        e.update.extend(found.update);
        e.escalate.extend(found.escalate);
    }
    e.resolve
        .extend(crate::alerts::evaluate(Vec::new(), &gone).resolve);
    for name in &above {
        let Some(q) = service.cached_quota(name) else {
            continue;
        };
        // A budget above the writes is judged here on its working copy and
        // those of every budget below it (`judged`). One left to the sweep
        // (the writes changed no spending below it, or its subtree is
        // larger than `ABOVE_AT_ONCE`) is not: its figure would lag. In a
        // cluster the stored spending is the working copy, so its budget
        // is judged here too, at once.
        let judged_copy = judged.get(name);
        let usage: Vec<Condition> = crate::alerts::conditions(
            judged_copy.unwrap_or(&q.quota),
            in_use.of(name),
            rules.get(name).unwrap_or(&none),
            &BTreeMap::new(),
            now_ms,
            &service.keys,
        )
        .into_iter()
        .filter(|c| {
            c.kind == Kind::Threshold
                && (!w.accrues() || judged_copy.is_some() || cash_target(&c.key).is_none())
        })
        .collect();
        let was = open.get(name).map(Vec::as_slice).unwrap_or_default();
        let found = crate::alerts::evaluate(crate::alerts::grouped(usage, &service.keys), was);
        e.open.extend(found.open);
        // Keys that crossed join its alert; none leaves it here (the
        // sweep, which reads every quota, takes them out).
        let joined: Vec<(i64, Condition)> = found
            .update
            .into_iter()
            .filter(|(id, c)| {
                was.iter()
                    .find(|a| a.id == *id)
                    .is_some_and(|a| a.keys.iter().all(|k| c.keys.contains(k)))
            })
            .collect();
        e.escalate.extend(
            joined
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| found.escalate.contains(id)),
        );
        e.update.extend(joined);
        // Its figures are this process's cache's, of no known moment: an
        // update keeps the moment of the view that last opened or updated
        // the alert, so a sweep's newer view may still clear it.
        observed.cached.insert(name.clone());
    }
    if e.is_empty() {
        kept.remember(inputs);
        return Ok(Swept::default());
    }
    let mut parents = Forest::default();
    let escalated = e
        .update
        .iter()
        .filter(|(id, _)| e.escalate.contains(id))
        .map(|(_, c)| c);
    for c in e.open.iter().chain(escalated) {
        ancestors(service, &c.quota, &mut parents).await;
    }
    let swept = store(
        sql,
        &e,
        &parents,
        &observed,
        now_ms,
        public_url,
        &service.keys,
    )
    .await?;
    kept.remember(inputs);
    Ok(swept)
}

/// `conditions` without a budget's threshold (a cash key's: what its
/// subtree spent).
fn without_budgets(cs: Vec<Condition>) -> Vec<Condition> {
    cs.into_iter()
        .filter(|c| c.kind != Kind::Threshold || cash_target(&c.key).is_none())
        .collect()
}

/// `e` (of conditions `without_budgets`) leaving every open threshold
/// alert that covers a budget key as it is: neither resolved nor updated,
/// since its budget's spending was not judged.
fn keeping_budget_keys(mut e: Evaluation, was: &[OpenAlert]) -> Evaluation {
    let budget = |id: i64| {
        was.iter().any(|a| {
            a.id == id
                && a.kind == Kind::Threshold
                && (cash_target(&a.key).is_some()
                    || a.keys.iter().any(|k| cash_target(k).is_some()))
        })
    };
    e.resolve.retain(|id| !budget(*id));
    e.update.retain(|(id, _)| !budget(*id));
    e.escalate.retain(|id| !budget(*id));
    e
}

impl Kept {
    fn remember(&mut self, inputs: Vec<(String, Option<BudgetInputs>)>) {
        for (name, i) in inputs {
            match i {
                Some(i) => self.budgets.insert(name, i),
                None => self.budgets.remove(&name),
            };
        }
    }
}

/// Subtree usage as `Kept` sums it, with the lines of working copies
/// moved (`service::working::moved`).
struct Moved<'a> {
    base: &'a BTreeMap<String, quota::ResourceList>,
    moved: &'a std::collections::HashMap<String, quota::ResourceList>,
}

impl SubtreeUse for Moved<'_> {
    fn of(&self, name: &str) -> Option<&quota::ResourceList> {
        self.moved.get(name).or_else(|| self.base.get(name))
    }
}

/// The tree as this process knows it: its cache of every quota, with the
/// quotas just written as written (and those deleted gone).
fn known_tree(
    cached: Vec<Arc<crate::store::Stored>>,
    changed: &[(String, Option<Arc<crate::store::Stored>>)],
) -> BTreeMap<String, Arc<crate::store::Stored>> {
    let mut tree: BTreeMap<String, Arc<crate::store::Stored>> = cached
        .into_iter()
        .map(|s| (s.quota.name().to_string(), s))
        .collect();
    for (name, seen) in changed {
        match seen {
            Some(s) => tree.insert(name.clone(), s.clone()),
            None => tree.remove(name),
        };
    }
    tree
}

/// Fills `parents` with `quota`'s line up to its root, each parent's name
/// from the newest copy this replica knows (`Service::recent`: with a
/// watch, no request; a whole read only for the name of its parent was a
/// twentieth of the quota GETs in Kueue's baseline). A quota that cannot
/// be read ends the line.
async fn ancestors(service: &Service, quota: &str, parents: &mut Forest) {
    while let Some(at) = parents.next_unknown(quota).map(str::to_string) {
        let Ok(s) = service.recent(&at).await else {
            return;
        };
        parents.insert(at, s.quota.spec.parent.clone());
    }
}

/// The one forecast (`quota::forecast::outlook`) of every cash key that
/// has a horizon (by default all, `alerts::forecast_horizon`), at what
/// runs now: no samples are read.
fn forecasts<Q: std::borrow::Borrow<Quota>>(
    quotas: &[Q],
    rules: &BTreeMap<String, Vec<crate::alerts::Rule>>,
    pricing: &quota::forecast::Pricing,
) -> BTreeMap<String, BTreeMap<String, Outlook>> {
    let mut out = BTreeMap::new();
    for q in quotas {
        let q = q.borrow();
        let rs = rules.get(q.name()).map(Vec::as_slice).unwrap_or_default();
        let by_key: BTreeMap<String, Outlook> = q
            .spec
            .hard
            .keys()
            .filter(|k| k.starts_with(quota::keys::CASH_PREFIX))
            .filter(|k| crate::alerts::forecast_horizon(q, rs, k).is_some())
            .map(|k| {
                let o = quota::forecast::outlook(q, k, pricing.now_ms, &pricing.qos, &pricing.list);
                (k.clone(), o)
            })
            .collect();
        if !by_key.is_empty() {
            out.insert(q.name().to_string(), by_key);
        }
    }
    out
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
        ..Evaluation::default()
    };
    if kind != Kind::TransferRequested {
        e.resolve = open_requested(sql, t).await?;
    }
    let mut parents = Forest::default();
    ancestors(service, &t.to_quota, &mut parents).await;
    store(
        sql,
        &e,
        &parents,
        &Observed::at(now_ms),
        now_ms,
        public_url,
        &service.keys,
    )
    .await?;
    Ok(())
}

/// The open "transfer requested" alert of `t` (its id, if open).
async fn open_requested(sql: &SqlStore, t: &Transfer) -> Result<Vec<i64>, StoreError> {
    let requested = transfer_condition(Kind::TransferRequested, t).fingerprint();
    sql.open_alert_ids(&requested).await
}

/// A request nobody decided in time: its alert resolves, no email.
async fn transfer_expired(sql: &SqlStore, t: &Transfer, now_ms: i64) -> Result<(), StoreError> {
    let resolve = open_requested(sql, t).await?;
    if !resolve.is_empty() {
        let e = Evaluation {
            resolve,
            ..Evaluation::default()
        };
        // Resolutions only: no email, whatever the keys are called.
        let keys = quota::KeyConfig::default();
        sql.apply_evaluation(
            &e,
            &BTreeMap::new(),
            "",
            &keys,
            &Observed::at(now_ms),
            now_ms,
        )
        .await?;
    }
    Ok(())
}

/// Alerts opened per transaction: a sweep that opens hundreds (a first
/// start, a parent's hard lowered) must not hold the database's writer for
/// long, as admissions wait on it. An alert and its emails are always in
/// one transaction.
const OPEN_PER_TX: usize = 25;
/// Alerts resolved per transaction.
const RESOLVE_PER_TX: usize = 200;

/// Who is told of `c`: the recipients on its quota's line, looked up once
/// per quota and kind (`by_quota`).
async fn recipients_of<'a>(
    sql: &SqlStore,
    parents: &Forest,
    by_quota: &mut BTreeMap<(&'a str, Kind, bool), Vec<Recipient>>,
    c: &'a Condition,
) -> Result<Vec<Recipient>, StoreError> {
    let admins = crate::alerts::tells_admins(c.kind, &c.key);
    if let Some(to) = by_quota.get(&(c.quota.as_str(), c.kind, admins)) {
        return Ok(to.clone());
    }
    let to = sql
        .alert_recipients(&parents.line(&c.quota).names, c.kind, admins)
        .await?;
    by_quota.insert((c.quota.as_str(), c.kind, admins), to.clone());
    Ok(to)
}

async fn store(
    sql: &SqlStore,
    e: &Evaluation,
    parents: &Forest,
    observed: &Observed,
    now_ms: i64,
    public_url: &str,
    keys: &quota::KeyConfig,
) -> Result<Swept, StoreError> {
    let mut swept = Swept::default();
    // Alerts on one quota share their recipients: looked up once.
    let mut by_quota: BTreeMap<(&str, Kind, bool), Vec<Recipient>> = BTreeMap::new();
    let mut pace = crate::util::Pace::start();
    for chunk in e.resolve.chunks(RESOLVE_PER_TX) {
        let part = Evaluation {
            resolve: chunk.to_vec(),
            ..Evaluation::default()
        };
        let applied = sql
            .apply_evaluation(&part, &BTreeMap::new(), public_url, keys, observed, now_ms)
            .await?;
        swept.resolved += applied.resolved;
        pace.rest().await;
    }
    for chunk in e.update.chunks(RESOLVE_PER_TX) {
        let mut recipients = BTreeMap::new();
        for (_, c) in chunk.iter().filter(|(id, _)| e.escalate.contains(id)) {
            let to = recipients_of(sql, parents, &mut by_quota, c).await?;
            recipients.insert(c.fingerprint(), to);
        }
        let part = Evaluation {
            update: chunk.to_vec(),
            escalate: chunk
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| e.escalate.contains(id))
                .collect(),
            ..Evaluation::default()
        };
        let applied = sql
            .apply_evaluation(&part, &recipients, public_url, keys, observed, now_ms)
            .await?;
        swept.updated += applied.updated;
        pace.rest().await;
    }
    for chunk in open_chunks(&e.open) {
        let mut recipients = BTreeMap::new();
        for c in chunk {
            let to = recipients_of(sql, parents, &mut by_quota, c).await?;
            recipients.insert(c.fingerprint(), to);
        }
        let part = Evaluation {
            open: chunk.to_vec(),
            ..Evaluation::default()
        };
        let applied = sql
            .apply_evaluation(&part, &recipients, public_url, keys, observed, now_ms)
            .await?;
        swept.opened += applied.opened.len();
        pace.rest().await;
    }
    Ok(swept)
}

/// `open` in transactions of about `OPEN_PER_TX` alerts, never splitting
/// one quota's.
fn open_chunks(open: &[Condition]) -> Vec<&[Condition]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=open.len() {
        let full = i - start >= OPEN_PER_TX;
        if i == open.len() || (full && open[i].quota != open[i - 1].quota) {
            out.push(&open[start..i]);
            start = i;
        }
    }
    out
}

/// Evaluates what this process writes within `SETTLE`, and all quotas
/// every `every` (writes of other replicas, the controller's, time-driven
/// conditions such as forecasts), forever.
pub async fn evaluate_forever(
    service: Arc<Service>,
    sql: Arc<SqlStore>,
    public_url: String,
    every: Duration,
    digest_hour: u8,
) {
    let every = every.max(Duration::from_secs(1));
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(start + every, every);
    let start_up = wait_out_slack(&service, service.now());
    let mut start_up = std::pin::pin!(start_up);
    let mut started = false;
    let mut kept = Kept::default();
    loop {
        tokio::select! {
            _ = &mut start_up, if !started => {
                started = true;
                sweep(&service, &sql, &public_url, digest_hour).await;
            }
            _ = tick.tick() => sweep(&service, &sql, &public_url, digest_hour).await,
            _ = service.changed.wait() => {
                tokio::time::sleep(SETTLE).await;
                let changed = service.changed.take();
                if !changed.is_empty() {
                    let batch = changed.clone();
                    let done =
                        evaluate_changed(&service, &sql, changed, &public_url, &mut kept).await;
                    if done.is_err() {
                        // Again after `SETTLE`, with anything newer marked since.
                        service.changed.restore(batch);
                    }
                    log(done);
                }
            }
        }
    }
}

async fn sweep(service: &Service, sql: &SqlStore, public_url: &str, digest_hour: u8) {
    evaluate_now(service, sql, public_url).await;
    if let Err(e) = queue_digests(sql, service.now(), digest_hour, public_url, &service.keys).await
    {
        tracing::warn!(error = %e, "queueing alert digests failed");
    }
}

/// Until the clock has passed `started_ms + SWEEP_SLACK_MS` (in real time
/// at most that long, for a clock that stands still). A sweep counts its
/// view as `SWEEP_SLACK_MS` older than its list; run at once on start, that
/// view would predate what the previous process evaluated, and a condition
/// whose evaluation died with its replica (within `SETTLE` of its write)
/// would be taken for stale and wait 5 min for the next sweep. After the
/// wait, the first sweep's view is at least as new as this process.
async fn wait_out_slack(service: &Service, started_ms: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(SWEEP_SLACK_MS as u64);
    while service.now() < started_ms + SWEEP_SLACK_MS && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One sweep over all quotas, logged rather than failed: the next one
/// retries.
pub async fn evaluate_now(service: &Service, sql: &SqlStore, public_url: &str) {
    // One `now` for the whole sweep: every budget is judged on its working
    // copy at it, as a page read at that moment shows it.
    let now = service.now();
    let observed_at = now - SWEEP_SLACK_MS;
    // The forest the service keeps: a sweep reads again only what was
    // written since the forest was last read (by a page, the sampler or
    // the last sweep).
    let started = std::time::Instant::now();
    match service.forest().await {
        Ok(all) => {
            let w = service.working(now);
            let all = accrue_in_chunks(&w, all).await;
            log(evaluate_forest(
                sql,
                &all,
                observed_at,
                &w.pricing(),
                public_url,
                &service.keys,
            )
            .await);
            service
                .metrics
                .background_done("alert_sweep", started, all.len());
        }
        Err(e) => tracing::warn!(error = %e, "cannot list quotas for alerts"),
    }
}

/// Queues the digest of every user with alerts waiting from before the
/// last digest hour. On every replica: a row is claimed once (see
/// `SqlStore::queue_digest`). Returns how many digests it queued.
pub async fn queue_digests(
    sql: &SqlStore,
    now_ms: i64,
    digest_hour: u8,
    public_url: &str,
    keys: &quota::KeyConfig,
) -> Result<usize, StoreError> {
    let cutoff = crate::alerts::digest_cutoff(now_ms, digest_hour);
    let mut queued = 0;
    for user in sql.digest_users(cutoff).await? {
        if sql
            .queue_digest(user, cutoff, public_url, keys, now_ms)
            .await?
        {
            queued += 1;
        }
    }
    if queued > 0 {
        tracing::info!(queued, "alert digests queued");
    }
    Ok(queued)
}

fn log(r: Result<Swept, StoreError>) {
    match r {
        Ok(s) if s != Swept::default() => {
            tracing::info!(
                opened = s.opened,
                resolved = s.resolved,
                updated = s.updated,
                "alerts evaluated"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "evaluating alerts failed"),
    }
}

/// The alerts of transfers: what the transfer service tells, recorded
/// (and mailed through the outbox). A failure is logged: the transfer
/// itself is already decided and stays so.
pub struct TransferAlerts {
    pub sql: Arc<SqlStore>,
    pub service: Arc<Service>,
    /// The portal's address, for links in the emails.
    pub public_url: String,
}

#[async_trait::async_trait]
impl TransferWatcher for TransferAlerts {
    async fn decided(&self, kind: Kind, t: &Transfer) {
        if let Err(e) = transfer_event(&self.sql, &self.service, kind, t, &self.public_url).await {
            tracing::warn!(error = %e, transfer = t.id, kind = kind.as_str(), "recording a transfer alert failed");
        }
    }

    async fn expired(&self, t: &Transfer, now_ms: i64) {
        if let Err(e) = transfer_expired(&self.sql, t, now_ms).await {
            tracing::warn!(error = %e, transfer = t.id, "resolving an expired request's alert failed");
        }
    }
}

#[cfg(test)]
mod start_up {
    use super::*;
    use crate::store::testdb::on_both_databases;
    use crate::store::QuotaStore;
    use quota::{Quantity, QuotaSpec};

    const GPU: &str = "requests.nvidia.com/gpu";
    const T: i64 = 1_800_000_000_000;
    const URL: &str = "http://bizrq.test";

    fn org(used: i64) -> Quota {
        let spec = QuotaSpec {
            hard: [(GPU.to_string(), Quantity::from_units(10))].into(),
            ..QuotaSpec::default()
        };
        let mut q = Quota::new("org", spec);
        q.status.used.insert(GPU.into(), Quantity::from_units(used));
        q.status
            .self_used
            .insert(GPU.into(), Quantity::from_units(used));
        q
    }

    /// org's alert was resolved from a view at T − 1 s; a write at T
    /// crossed the threshold again and its replica died before evaluating
    /// it. A fresh process must open the alert with its start-up sweep,
    /// not 5 min later.
    async fn a_crossing_whose_evaluation_died_opens_at_the_next_start(db: &SqlStore) {
        let (held, clear) = ([org(9)], [org(1)]);
        let opened = evaluate_all(db, &held, T - 3_000, T - 3_000, URL).await;
        assert_eq!(opened.unwrap().opened, 1);
        let resolved = evaluate_all(db, &clear, T - 1_000, T - 1_000, URL).await;
        assert_eq!(resolved.unwrap().resolved, 1);
        db.create(&held[0]).await.unwrap();

        // The new process: its clock runs 20 times faster than real time.
        let begun = std::time::Instant::now();
        let clock: crate::service::Clock =
            Arc::new(move || T + begun.elapsed().as_millis() as i64 * 20);
        let service = Service::new(
            Arc::new(db.clone()),
            quota::KeyConfig::default(),
            quota::cash::QosMultipliers::default(),
            Default::default(),
        )
        .with_clock(clock);
        let engine = tokio::spawn(evaluate_forever(
            Arc::new(service),
            Arc::new(db.clone()),
            URL.into(),
            EVERY,
            0,
        ));
        let open = loop {
            let open = db.open_alerts().await.unwrap();
            if !open.is_empty() || begun.elapsed() > Duration::from_secs(3) {
                break open;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        engine.abort();
        assert_eq!(open.len(), 1, "the start-up sweep opened it");
        assert_eq!(open[0].quota, "org");
    }

    on_both_databases!(a_crossing_whose_evaluation_died_opens_at_the_next_start);
}

/// A write's evaluation reads its ancestors' open alerts (to open their
/// usage alerts, never to resolve them). Whether a parent's write and its
/// child's are one batch is a matter of timing (both within `SETTLE`, or
/// not): as two, the child's must leave the parent's alerts as they are.
#[cfg(test)]
mod batches {
    use super::*;
    use crate::store::testdb::on_both_databases;
    use crate::store::{QuotaStore, Stored};
    use quota::{Quantity, QuotaSpec};

    const GPU: &str = "requests.nvidia.com/gpu";
    const T: i64 = 1_800_000_000_000;
    const URL: &str = "http://bizrq.test";

    fn quota(name: &str, parent: &str, hard: i64, running: i64) -> Quota {
        let spec = QuotaSpec {
            parent: parent.into(),
            hard: [(GPU.to_string(), Quantity::from_units(hard))].into(),
            ..QuotaSpec::default()
        };
        let mut q = Quota::new(name, spec);
        q.status
            .self_used
            .insert(GPU.into(), Quantity::from_units(running));
        q.status
            .used
            .insert(GPU.into(), Quantity::from_units(running));
        q
    }

    fn seen(q: &Stored, at_ms: i64) -> (String, Seen) {
        let s = Seen {
            quota: Some(Arc::new(q.clone())),
            at_ms,
        };
        (q.quota.name().to_string(), s)
    }

    /// org runs 8 of its 10 cards: its warning opens. Then team, below it,
    /// starts 1 card, in a batch of its own: org (9 of 10) is still over
    /// its line, and its warning stays open.
    async fn a_childs_write_leaves_its_parents_alert_open(db: &SqlStore) {
        let org = db.create(&quota("org", "", 10, 8)).await.unwrap();
        let idle = db.create(&quota("team", "org", 4, 0)).await.unwrap();
        let service = Service::new(
            Arc::new(db.clone()),
            quota::KeyConfig::default(),
            quota::cash::QosMultipliers::default(),
            Default::default(),
        )
        .with_clock(Arc::new(|| T + 5_000));
        let mut kept = Kept::default();
        let first = [seen(&org, T), seen(&idle, T)].into();
        let done = evaluate_changed(&service, db, first, URL, &mut kept).await;
        assert_eq!(done.unwrap().opened, 1);
        let open = db.open_alerts().await.unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].quota, "org");

        let mut busy = idle.quota.clone();
        busy.status
            .self_used
            .insert(GPU.into(), Quantity::from_units(1));
        busy.status.used.insert(GPU.into(), Quantity::from_units(1));
        let busy = db.replace_status(&idle, &busy.status).await.unwrap();
        let team = db.get("team").await.unwrap().unwrap();
        assert_eq!(team.version, busy);
        let second = [seen(&team, T + 1_000)].into();
        let done = evaluate_changed(&service, db, second, URL, &mut kept).await;
        assert_eq!(done.unwrap(), Swept::default(), "nothing changed for org");
        let open = db.open_alerts().await.unwrap();
        assert_eq!(
            open.iter().map(|a| a.quota.as_str()).collect::<Vec<_>>(),
            ["org"],
            "org's warning is still open"
        );
    }

    on_both_databases!(a_childs_write_leaves_its_parents_alert_open);

    const CASH: &str = "cash/requests.nvidia.com/gpu";

    /// A quota with a monthly budget of `cash` card-hours.
    fn budgeted(name: &str, parent: &str, cash: i64) -> Quota {
        let mut q = quota(name, parent, 16, 0);
        q.spec.hard.insert(CASH.into(), Quantity::from_units(cash));
        let monthly = json!({"period": {"kind": "monthly", "anchorDay": 1}, "forecastDays": 0});
        q.spec
            .budgets
            .insert(CASH.into(), serde_json::from_value(monthly).unwrap());
        q
    }

    /// team runs 10 cards from `t0`, accrued up to then.
    fn running_from(mut q: Quota, t0: i64) -> Quota {
        let since = quota::time::format_rfc3339(t0);
        let c = quota::Charge {
            pod_sets: vec![quota::workload::PodSet {
                name: "main".into(),
                count: 10,
                per_pod: [(GPU.to_string(), Quantity::from_units(1))].into(),
                qos: None,
            }],
            hpa: None,
            since: since.clone(),
            uid: "u".into(),
            admitted: None,
        };
        quota::admission::charge(&mut q, "batch/Job/ml/a", c).unwrap();
        q.status.last_reconcile_time = Some(since);
        q
    }

    /// `team` written as the service writes it at `at`: its spending
    /// accrued up to then (a new stored version).
    async fn accrued_write(db: &SqlStore, name: &str, at: i64) -> Stored {
        let s = db.get(name).await.unwrap().unwrap();
        let mut q = s.quota.clone();
        let Quota { spec, status, .. } = &mut q;
        status.accrue_ledger_priced(
            spec,
            at,
            &quota::cash::QosMultipliers::default(),
            &quota::budget::PriceList::default(),
        );
        db.replace_status(&s, &q.status).await.unwrap();
        db.get(name).await.unwrap().unwrap()
    }

    fn standalone(db: &SqlStore, clock: Arc<std::sync::atomic::AtomicI64>) -> Service {
        Service::new(
            Arc::new(db.clone()),
            quota::KeyConfig::default(),
            quota::cash::QosMultipliers::default(),
            Default::default(),
        )
        .with_clock(Arc::new(move || {
            clock.load(std::sync::atomic::Ordering::SeqCst)
        }))
    }

    /// A write's evaluation judges the written quota's budget on its
    /// working copy at the evaluation's `now`, not on the figure stored
    /// with the write: team, written when it started 10 cards and
    /// evaluated 84 hours later, has spent 840 of its 1,000 (root, 840 of
    /// 1,200 below it, stays under its line). A write that changed no
    /// spending judges no budget and accrues nothing below it (time
    /// passing is the sweep's); team's next write (its spending accrued
    /// at 96 hours) judges root's budget at once, on the copies of every
    /// budget below it: 960 of 1,200, a warning. root's own write and the
    /// sweep then agree.
    async fn a_writes_evaluation_reads_the_budget_as_of_now(db: &SqlStore) {
        let t0 = quota::time::parse_rfc3339("2026-11-26T04:00:00Z").unwrap();
        db.create(&budgeted("root", "", 1200)).await.unwrap();
        let team = db
            .create(&running_from(budgeted("team", "root", 1000), t0))
            .await
            .unwrap();
        let hours = |h: i64| t0 + h * 3_600_000;
        let clock = Arc::new(std::sync::atomic::AtomicI64::new(hours(84)));
        let service = standalone(db, clock.clone());
        service.warm_cache().await.unwrap();
        let mut kept = Kept::default();
        let written = [seen(&team, t0)].into();
        let done = evaluate_changed(&service, db, written, URL, &mut kept).await;
        assert_eq!(done.unwrap().opened, 1);
        let open = db.open_alerts().await.unwrap();
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0].quota, "team");
        assert!(
            open[0].message.contains("840 card-hours spent of 1,000"),
            "{}",
            open[0].message
        );
        assert_eq!(kept.copied(), 2, "team, and root above it");

        clock.store(hours(96), std::sync::atomic::Ordering::SeqCst);
        let written = [seen(&team, hours(96))].into();
        let done = evaluate_changed(&service, db, written, URL, &mut kept).await;
        assert_eq!(done.unwrap(), Swept::default(), "nothing written changed");
        assert_eq!(kept.copied(), 1, "team's own copy, no budget above it");

        let team = accrued_write(db, "team", hours(96)).await;
        service.warm_cache().await.unwrap();
        let written = [seen(&team, hours(96))].into();
        let done = evaluate_changed(&service, db, written, URL, &mut kept).await;
        assert_eq!(done.unwrap().opened, 1, "root, at once");
        let open = db.open_alerts().await.unwrap();
        let warned = open.iter().find(|a| a.quota == "root").expect("root warns");
        assert!(
            warned.message.contains("960 card-hours spent of 1,200"),
            "{}",
            warned.message
        );
        // root itself written (as a change of its spec would): its budget
        // is judged on the copies of every budget below it, and holds.
        let root = service.get("root").await.unwrap();
        let written = [seen(&root, hours(96))].into();
        let done = evaluate_changed(&service, db, written, URL, &mut kept).await;
        assert_eq!(done.unwrap(), Swept::default());
        // The sweep agrees: nothing to open, nothing to resolve.
        evaluate_now(&service, db, URL).await;
        assert_eq!(db.open_alerts().await.unwrap().len(), 2);
    }

    on_both_databases!(a_writes_evaluation_reads_the_budget_as_of_now);

    /// In a cluster the controller accrues from pods and the stored
    /// spending is what every page shows, so a child's write judges its
    /// parent's budget at once, on the subtree's real spending (not on
    /// what the parent carved out): team, stored with 96 hours of 10
    /// cards accrued, is written; root warns with 960 of 1,200 spent
    /// below it, without waiting for the sweep.
    async fn in_a_cluster_a_childs_write_judges_its_parents_budget_at_once(db: &SqlStore) {
        let t0 = quota::time::parse_rfc3339("2026-11-26T04:00:00Z").unwrap();
        let at = t0 + 96 * 3_600_000;
        db.create(&budgeted("root", "", 1200)).await.unwrap();
        let mut team = running_from(budgeted("team", "root", 1000), t0);
        {
            let Quota { spec, status, .. } = &mut team;
            status.accrue_ledger_priced(
                spec,
                at,
                &quota::cash::QosMultipliers::default(),
                &quota::budget::PriceList::default(),
            );
        }
        let team = db.create(&team).await.unwrap();
        let service = Service::new(
            Arc::new(db.clone()),
            quota::KeyConfig::default(),
            quota::cash::QosMultipliers::default(),
            Default::default(),
        )
        .with_accrual_from_pods()
        .with_clock(Arc::new(move || at));
        service.warm_cache().await.unwrap();
        let mut kept = Kept::default();
        let written = [seen(&team, at)].into();
        let done = evaluate_changed(&service, db, written, URL, &mut kept).await;
        assert_eq!(done.unwrap().opened, 2, "team's budget and root's");
        let open = db.open_alerts().await.unwrap();
        let warned = open.iter().find(|a| a.quota == "root").expect("root warns");
        assert!(
            warned.message.contains("960 card-hours spent of 1,200"),
            "{}",
            warned.message
        );
    }

    on_both_databases!(in_a_cluster_a_childs_write_judges_its_parents_budget_at_once);

    /// root: 12 cards and a budget of 1,200 card-hours, owned by alice;
    /// team below it (owned by bob) running 10 cards from `t0`, with a
    /// budget of 1,000 (a budget of 50,000 when `quiet_team`).
    async fn owned_line(db: &SqlStore, t0: i64, quiet_team: bool) -> Stored {
        use crate::authz::Role;
        let mut root = budgeted("root", "", 1200);
        root.spec.hard.insert(GPU.into(), Quantity::from_units(12));
        db.create(&root).await.unwrap();
        let cash = if quiet_team { 50_000 } else { 1000 };
        let team = db
            .create(&running_from(budgeted("team", "root", cash), t0))
            .await
            .unwrap();
        for (user, quota) in [("alice", "root"), ("bob", "team")] {
            let u = db.create_user(user, "x", false, T).await.unwrap();
            let email = format!("{user}@example.com");
            db.set_user_email(u.id, Some(&email)).await.unwrap();
            db.set_binding(u.id, quota, Role::Owner, T).await.unwrap();
        }
        team
    }

    /// Standalone: team's write at 96 hours (10 of root's 12 cards run,
    /// 960 of its 1,200 card-hours spent below it) opens root's one
    /// warning with both keys, and alice gets one email; the sweep after
    /// it finds nothing new and sends none (it once joined the budget key
    /// to the alert the write had opened on the GPU key alone, and asked
    /// again).
    async fn a_childs_write_opens_its_parents_alert_with_its_budget_in_one_email(db: &SqlStore) {
        let t0 = quota::time::parse_rfc3339("2026-11-26T04:00:00Z").unwrap();
        let at = t0 + 96 * 3_600_000;
        owned_line(db, t0, true).await;
        let team = accrued_write(db, "team", at).await;
        let clock = Arc::new(std::sync::atomic::AtomicI64::new(at));
        let service = standalone(db, clock);
        service.warm_cache().await.unwrap();
        let mut kept = Kept::default();
        let written = [seen(&team, at)].into();
        let done = evaluate_changed(&service, db, written, URL, &mut kept).await;
        assert_eq!(done.unwrap().opened, 1, "root's; team spent 960 of 50,000");
        let open = db.open_alerts().await.unwrap();
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0].quota, "root");
        let both = |keys: &[String]| {
            let mut keys = keys.to_vec();
            keys.sort();
            keys == [CASH, GPU]
        };
        assert!(both(&open[0].keys), "{}", open[0].message);
        let to_alice = || async {
            let out = db.outbox().await.unwrap();
            out.iter()
                .filter(|m| m.recipient == "alice@example.com")
                .count()
        };
        assert_eq!(to_alice().await, 1);
        evaluate_now(&service, db, URL).await;
        let open = db.open_alerts().await.unwrap();
        assert_eq!(open.len(), 1, "{open:?}");
        assert!(both(&open[0].keys), "{}", open[0].message);
        assert_eq!(to_alice().await, 1, "the sweep asks nobody again");
        assert!(
            db.outbox().await.unwrap().len() == 1,
            "nobody else was asked"
        );
    }

    on_both_databases!(a_childs_write_opens_its_parents_alert_with_its_budget_in_one_email);

    /// A loan grant writes the lending parent without changing any
    /// spending: its evaluation copies the parent alone (its budgets below
    /// are not accrued again) and leaves its budget's alert as it is. A
    /// write that changes the parent's budget judges it again, on every
    /// budget below it.
    async fn a_parents_write_that_changed_no_spending_accrues_nothing_below(db: &SqlStore) {
        let t0 = quota::time::parse_rfc3339("2026-11-26T04:00:00Z").unwrap();
        let at = t0 + 96 * 3_600_000;
        owned_line(db, t0, false).await;
        for i in 0..5 {
            let q = running_from(budgeted(&format!("other-{i}"), "root", 10), t0);
            db.create(&q).await.unwrap();
        }
        let clock = Arc::new(std::sync::atomic::AtomicI64::new(at));
        let service = standalone(db, clock.clone());
        service.warm_cache().await.unwrap();
        let mut kept = Kept::default();
        let root = db.get("root").await.unwrap().unwrap();
        let written = [seen(&root, at)].into();
        evaluate_changed(&service, db, written, URL, &mut kept)
            .await
            .unwrap();
        assert_eq!(kept.copied(), 7, "root and the six budgets below it");
        let open = db.open_alerts().await.unwrap();
        let warned = open.iter().find(|a| a.quota == "root").expect("root warns");
        assert!(warned.keys.contains(&CASH.to_string()), "{warned:?}");
        let before = warned.clone();

        // A grant: root's CPUs raised, its spending and budget untouched.
        let mut granted = root.quota.clone();
        granted
            .spec
            .hard
            .insert("requests.cpu".into(), Quantity::from_units(100));
        granted.status.hard = granted.spec.hard.clone();
        db.replace(&root, &granted).await.unwrap();
        let root = db.get("root").await.unwrap().unwrap();
        service.warm_cache().await.unwrap();
        clock.store(at + 60_000, std::sync::atomic::Ordering::SeqCst);
        let written = [seen(&root, at + 60_000)].into();
        evaluate_changed(&service, db, written, URL, &mut kept)
            .await
            .unwrap();
        assert_eq!(kept.copied(), 1, "root alone: nothing below it accrued");
        let open = db.open_alerts().await.unwrap();
        let still = open.iter().find(|a| a.id == before.id).expect("kept open");
        assert_eq!(still.keys, before.keys, "its budget key stays");
        assert_eq!(still.message, before.message);

        // Its budget lowered: judged again, on every budget below it.
        let mut lowered = root.quota.clone();
        lowered
            .spec
            .hard
            .insert(CASH.into(), Quantity::from_units(1100));
        db.replace(&root, &lowered).await.unwrap();
        let root = db.get("root").await.unwrap().unwrap();
        service.warm_cache().await.unwrap();
        let written = [seen(&root, at + 60_000)].into();
        evaluate_changed(&service, db, written, URL, &mut kept)
            .await
            .unwrap();
        assert_eq!(kept.copied(), 7);
    }

    on_both_databases!(a_parents_write_that_changed_no_spending_accrues_nothing_below);
}

#[cfg(test)]
mod chunks {
    use super::*;
    use crate::alerts::evaluate_quotas;
    use quota::{Quantity, QuotaSpec};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const GPU: &str = "requests.nvidia.com/gpu";
    const T: i64 = 1_800_000_000_000;

    /// `n` teams under one root, every third one over its warning line.
    fn forest(n: usize) -> Vec<Quota> {
        let mut out = vec![Quota::new("root", QuotaSpec::default())];
        for i in 0..n {
            let spec = QuotaSpec {
                parent: "root".into(),
                hard: [(GPU.to_string(), Quantity::from_units(10))].into(),
                ..QuotaSpec::default()
            };
            let mut q = Quota::new(&format!("team-{i:05}"), spec);
            let used = Quantity::from_units(if i % 3 == 0 { 9 } else { 1 });
            q.status.hard = q.spec.hard.clone();
            q.status.used.insert(GPU.into(), used);
            q.status.self_used.insert(GPU.into(), used);
            out.push(q);
        }
        out
    }

    /// The sweep's accrual of 10,000 budgeted quotas gives the runtime
    /// back between its chunks, as its evaluation does, and ends where
    /// accruing them all at once does.
    #[tokio::test(flavor = "current_thread")]
    async fn accruing_10000_budgets_yields_between_chunks() {
        const CASH: &str = "cash/requests.nvidia.com/gpu";
        let quotas: Vec<Quota> = forest(10_000)
            .into_iter()
            .map(|mut q| {
                q.spec.hard.insert(CASH.into(), Quantity::from_units(100));
                q.status.last_reconcile_time = Some(quota::time::format_rfc3339(T));
                q
            })
            .collect();
        let f = Arc::new(crate::service::forest::Forest::of(quotas));
        let w = Working::for_tests(true, T + 3_600_000);
        let ticks = std::sync::Arc::new(AtomicUsize::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        };
        let chunked = accrue_in_chunks(&w, f.clone()).await;
        let ran = ticks.load(Ordering::SeqCst);
        ticker.abort();
        let whole = w.accrued(f);
        assert_eq!(chunked.copied(), 10_001, "the teams and their root");
        assert_eq!(chunked.quotas(), whole.quotas());
        assert_eq!(chunked.in_use_of("root"), whole.in_use_of("root"));
        let chunks = 10_001usize.div_ceil(EVALUATE_CHUNK);
        assert!(
            ran + 1 >= chunks,
            "a task beside the accrual ran {ran} times over its {chunks} chunks"
        );
    }

    /// A sweep of 10,000 quotas decides what `evaluate_quotas` decides, in
    /// the same order, and gives the runtime back between its chunks: a
    /// task beside it on the same thread runs at least once per chunk.
    /// (No I/O here, so nothing but the sweep's own yields lets it run.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_sweep_of_10000_quotas_yields_between_chunks() {
        let quotas = forest(10_000);
        let in_use = subtree_in_use(&quotas);
        let (rules, forecasts) = (BTreeMap::new(), BTreeMap::new());
        // Alerts open on two quotas that are gone and on one that recovered.
        let mut open: BTreeMap<String, Vec<OpenAlert>> = BTreeMap::new();
        let keys = quota::KeyConfig::default();
        let held = evaluate_quotas(&quotas[1..3], &in_use, &rules, &open, &forecasts, T, &keys);
        for (i, c) in held.open.iter().enumerate() {
            let a = OpenAlert {
                id: i as i64 + 1,
                fingerprint: c.fingerprint(),
                kind: c.kind,
                key: c.key.clone(),
                keys: c.keys.clone(),
            };
            open.entry("gone".into()).or_default().push(a.clone());
            open.entry("team-00001".into()).or_default().push(a);
        }
        let whole = evaluate_quotas(&quotas, &in_use, &rules, &open, &forecasts, T, &keys);
        assert!(whole.open.len() >= 3_000, "{} alerts", whole.open.len());
        assert!(!whole.resolve.is_empty());

        let ticks = std::sync::Arc::new(AtomicUsize::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        };
        let chunked =
            evaluate_in_chunks(&quotas, &in_use, &rules, &open, &forecasts, T, &keys).await;
        let ran = ticks.load(Ordering::SeqCst);
        ticker.abort();
        assert_eq!(chunked, whole, "the same decisions in the same order");
        let chunks = quotas.len().div_ceil(EVALUATE_CHUNK);
        assert!(
            ran + 1 >= chunks,
            "a task beside the sweep ran {ran} times over its {chunks} chunks"
        );
    }
}
