//! Alerts (§7, docs/semantics.md), the pure part: from a quota, its rules and the alerts
//! open on it, which alerts open and which resolve; and the email an alert
//! sends. No I/O and no clock: time and samples come in as arguments.
//!
//! An alert is identified while open by its fingerprint: kind, quota and
//! level, and the key only for alerts that are not about keys of the quota
//! (a queued workload, a transfer). The database keeps it unique among open
//! alerts, so a condition that holds fires once, resolves when it clears and
//! fires again when it recurs. A condition on keys (a usage threshold, over
//! quota, a budget's forecast, an allocation notice) is one alert however
//! many keys it covers (`grouped`): one training job over six keys is one
//! alert that names the six, GPUs first, with the worst in its title; a key
//! that crosses later, or clears while others hold, updates it.
//!
//! [`engine`] is the imperative shell: it loads, calls these and stores.

use app::layout::escape_text;
use quota::forecast::Outlook as Forecast;
use quota::object::Quota;
use quota::{resources, KeyConfig, Quantity};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

pub mod real_usage;

pub const DEFAULT_WARN_PERCENT: i64 = 80;
pub const DEFAULT_CRIT_PERCENT: i64 = 100;
const MS_PER_HOUR: i64 = 3_600_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// What runs in the quota's subtree reached a share of its hard.
    Threshold,
    /// What the quota allocated to children and uses itself reached a share
    /// of its hard: a planning notice (info), off unless a rule asks.
    Allocation,
    OverQuota,
    CashForecast,
    ReclaimPending,
    /// A workload has waited in the quota's queue longer than its
    /// `queueing.alertAfterSeconds`: one alert per entry, resolved when it
    /// leaves the queue (admitted or deleted).
    QueueOverdue,
    TransferRequested,
    TransferApproved,
    TransferRejected,
    /// A workload's GPUs have been idle past its quota's `idle.after`
    /// (docs/real-usage.md): one alert per workload, to its submitter and
    /// the quota's owners, resolved when it gets busy or ends.
    IdleGpus,
    /// Prometheus has not answered for `--prometheus-alert-after-seconds`:
    /// real usage is unknown (to the admins; on no quota).
    RealUsageUnknown,
}

impl Kind {
    /// A filter's kind: empty for any, else a kind's name.
    pub fn parse_filter(k: &str) -> Result<Option<Kind>, String> {
        match k.trim() {
            "" => Ok(None),
            k => Kind::parse(k).map(Some).ok_or_else(|| {
                format!(
                    "unknown alert kind '{k}': one of {}",
                    Kind::ALL.map(Kind::as_str).join(", ")
                )
            }),
        }
    }

    pub const ALL: [Kind; 11] = [
        Kind::Threshold,
        Kind::Allocation,
        Kind::OverQuota,
        Kind::CashForecast,
        Kind::ReclaimPending,
        Kind::QueueOverdue,
        Kind::TransferRequested,
        Kind::TransferApproved,
        Kind::TransferRejected,
        Kind::IdleGpus,
        Kind::RealUsageUnknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Threshold => "threshold",
            Kind::Allocation => "allocation",
            Kind::OverQuota => "over_quota",
            Kind::CashForecast => "cash_forecast",
            Kind::ReclaimPending => "reclaim_pending",
            Kind::QueueOverdue => "queue_overdue",
            Kind::TransferRequested => "transfer_requested",
            Kind::TransferApproved => "transfer_approved",
            Kind::TransferRejected => "transfer_rejected",
            Kind::IdleGpus => "idle_gpus",
            Kind::RealUsageUnknown => "real_usage_unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Kinds whose alerts follow a condition of the quota's status; the
    /// others are events (a transfer decided) and are not resolved by an
    /// evaluation.
    pub fn is_condition(self) -> bool {
        matches!(
            self,
            Kind::Threshold
                | Kind::Allocation
                | Kind::OverQuota
                | Kind::CashForecast
                | Kind::ReclaimPending
                | Kind::QueueOverdue
                | Kind::IdleGpus
                | Kind::RealUsageUnknown
        )
    }

    /// Conditions judged by the reader of real usage after each reading
    /// (`alerts::real_usage`), not from a quota's status: the alert
    /// engine's evaluations leave them alone.
    pub fn judged_by_reader(self) -> bool {
        matches!(self, Kind::IdleGpus | Kind::RealUsageUnknown)
    }

    /// Transfers are the admins' business too; the rest go to owners only
    /// (but see `tells_admins`).
    pub fn notifies_admins(self) -> bool {
        !self.is_condition()
    }
}

/// The key of the `queue_overdue` alert on a queue whose held objects wait
/// by marks no replica folds (`marks_unfolded`).
pub const MARKS_OFF_KEY: &str = "queue marks off";

/// Whether an alert of `kind` about `key` is emailed to the admins besides
/// the quota's owners: transfers, and a queue stranded by turning queue
/// marks off, which only whoever runs bizrq can mend.
pub fn tells_admins(kind: Kind, key: &str) -> bool {
    kind.notifies_admins()
        || (kind == Kind::QueueOverdue && key == MARKS_OFF_KEY)
        || kind == Kind::RealUsageUnknown
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Info,
    Warning,
    Critical,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        [Level::Info, Level::Warning, Level::Critical]
            .into_iter()
            .find(|l| l.as_str() == s)
    }

    /// A filter's level: empty for any, else a level's name.
    pub fn parse_filter(s: &str) -> Result<Option<Level>, String> {
        match s.trim() {
            "" => Ok(None),
            l => Level::parse(l)
                .map(Some)
                .ok_or_else(|| format!("unknown level '{l}': info, warning or critical")),
        }
    }
}

/// A quota's rule for one key, or for every key without its own ('*').
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub key: String,
    /// Usage alerts: what runs in the subtree, in percent of hard.
    pub warn_percent: i64,
    pub crit_percent: i64,
    pub forecast_horizon_hours: Option<i64>,
    /// Allocation notices (info): allocated to children plus used here, in
    /// percent of hard; None (the default) sends none.
    pub allocation_percent: Option<i64>,
}

impl Rule {
    pub fn default_for(key: &str) -> Rule {
        Rule {
            key: key.to_string(),
            warn_percent: DEFAULT_WARN_PERCENT,
            crit_percent: DEFAULT_CRIT_PERCENT,
            forecast_horizon_hours: None,
            allocation_percent: None,
        }
    }
}

/// The rule a quota set for `key`: its own, else '*'.
pub fn set_rule<'a>(rules: &'a [Rule], key: &str) -> Option<&'a Rule> {
    rules
        .iter()
        .find(|r| r.key == key)
        .or_else(|| rules.iter().find(|r| r.key == "*"))
}

/// The rule that applies to `key` of a quota whose default rule is
/// `defaults`: the one it set (`set_rule`), else the default thresholds
/// where they watch the key, else none (no usage threshold on it; over
/// quota and forecasts do not ask for a rule).
pub fn rule_for<'a>(
    rules: &'a [Rule],
    key: &str,
    defaults: Defaults,
    cfg: &KeyConfig,
) -> Option<std::borrow::Cow<'a, Rule>> {
    match set_rule(rules, key) {
        Some(r) => Some(std::borrow::Cow::Borrowed(r)),
        None => defaults
            .watches(key, cfg)
            .then(|| std::borrow::Cow::Owned(Rule::default_for(key))),
    }
}

/// Which keys of a quota the default rule (80 % warning, 100 % critical)
/// watches, where the quota set no rule for a key and no '*'.
///
/// GPUs and budgets are what people plan and pay by; a GPU job also takes
/// CPU, memory and pods, and warning on all of them made one job six
/// warnings. So a quota that limits GPUs or a budget (a GPU or budget key
/// with a hard above 0) is watched on those keys only. A quota that limits
/// neither (a CPU-only cluster, a CPU-only team) is watched on every key:
/// narrowing it would leave nobody told it is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defaults {
    GpusAndBudgets,
    EveryKey,
}

impl Defaults {
    pub fn of(quota: &Quota, cfg: &KeyConfig) -> Defaults {
        let limits_gpus_or_budgets = quota
            .spec
            .hard
            .iter()
            .any(|(k, hard)| hard.nanos() > 0 && quota::keys::is_gpu_or_budget(k, cfg));
        if limits_gpus_or_budgets {
            Defaults::GpusAndBudgets
        } else {
            Defaults::EveryKey
        }
    }

    pub fn watches(self, key: &str, cfg: &KeyConfig) -> bool {
        match self {
            Defaults::EveryKey => true,
            Defaults::GpusAndBudgets => quota::keys::is_gpu_or_budget(key, cfg),
        }
    }

    /// The default in words, as the rules page says it.
    pub fn words(self) -> String {
        let (w, c) = (DEFAULT_WARN_PERCENT, DEFAULT_CRIT_PERCENT);
        match self {
            Defaults::GpusAndBudgets => format!(
                "By default: GPU models and budgets at {w} % and {c} % (warning, critical); \
                 CPU, memory, pods and other keys raise no usage alert unless a rule asks"
            ),
            Defaults::EveryKey => format!(
                "By default: every key at {w} % and {c} % (warning, critical), as this quota \
                 limits neither GPUs nor budgets"
            ),
        }
    }
}

/// The cash forecast's horizon for `key` of `quota`, in hours: its alert
/// rule's when the rule sets one, else its budget policy's — 14 days by
/// default, none with `forecastDays: 0` (docs/budgets.md §7). Other keys:
/// only a rule's.
pub fn forecast_horizon(quota: &Quota, rules: &[Rule], key: &str) -> Option<i64> {
    let ruled = set_rule(rules, key).and_then(|r| r.forecast_horizon_hours);
    if ruled.is_some() || !key.starts_with(quota::keys::CASH_PREFIX) {
        return ruled;
    }
    quota
        .spec
        .budgets
        .get(key)
        .cloned()
        .unwrap_or_default()
        .forecast_horizon_hours()
}

/// An alert to open (or that should stay open).
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub kind: Kind,
    pub quota: String,
    /// The key its title names: for a condition on keys, the worst of
    /// `keys`; else what it is about (a workload, `#12` for a transfer).
    pub key: String,
    /// The keys a condition on keys covers, GPUs first (`grouped`); empty
    /// for the others.
    pub keys: Vec<String>,
    pub level: Level,
    pub message: String,
    pub numbers: serde_json::Value,
}

impl Condition {
    pub fn fingerprint(&self) -> String {
        fingerprint(self.kind, &self.quota, &self.key, self.level)
    }
}

/// An open alert's identity. The key is left out for the kinds on keys
/// (`per_key`): their alert is one per quota, kind and level, whichever
/// keys it covers now.
pub fn fingerprint(kind: Kind, quota: &str, key: &str, level: Level) -> String {
    let key = if per_key(kind) { "" } else { key };
    format!("{}|{quota}|{key}|{}", kind.as_str(), level.as_str())
}

/// An open alert as stored, as far as evaluation needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenAlert {
    pub id: i64,
    pub kind: Kind,
    pub fingerprint: String,
    /// The key its title names, and the keys it covers.
    pub key: String,
    pub keys: Vec<String>,
}

/// What one evaluation changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    pub open: Vec<Condition>,
    /// Ids of open alerts whose condition has cleared.
    pub resolve: Vec<i64>,
    /// Open alerts whose condition holds on other keys now (a key crossed,
    /// or cleared while others hold, or another key is the worst): the id,
    /// and the condition as it is now.
    pub update: Vec<(i64, Condition)>,
    /// The updates among `update` that ask for someone again
    /// (`escalates`): their acknowledgement and snooze are cleared and
    /// their recipients emailed once for the keys they cover now.
    pub escalate: BTreeSet<i64>,
}

impl Evaluation {
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.resolve.is_empty() && self.update.is_empty()
    }
}

/// The conditions that hold for `quota` now. `in_use`: what runs in its
/// whole subtree (`quota::rollup::subtree_in_use`); None when only the
/// quota itself is known, which is exact for a leaf. `forecasts` holds the
/// one forecast (`quota::forecast::outlook`) of each cash key whose rule
/// has a horizon: the alert names the run-out in the words the pages show.
///
/// Usage alerts (threshold) follow what runs: at a parent, `status.used` is
/// mostly what it carved out for children, and a parent that allocated
/// everything while nothing runs is idle, not full. So do budget alerts:
/// a parent's budget is judged on its subtree's real spending. What it allocated is a
/// planning matter: an info notice, only where a rule asks for one.
pub fn conditions(
    quota: &Quota,
    in_use: Option<&quota::ResourceList>,
    rules: &[Rule],
    forecasts: &BTreeMap<String, Forecast>,
    now_ms: i64,
    cfg: &KeyConfig,
) -> Vec<Condition> {
    let name = quota.name();
    let mut out = Vec::new();
    let allocated = quota.status.allocated();
    let defaults = Defaults::of(quota, cfg);
    for (key, &hard) in &quota.spec.hard {
        let booked = resources::get(&quota.status.used, key);
        let cash = key.starts_with(quota::keys::CASH_PREFIX);
        // What runs in the subtree (a cash key: what the subtree spent, the
        // sum of each quota's own spending, never what a parent carved out
        // for its children's budgets).
        let used = match in_use {
            Some(sub) => resources::get(sub, key),
            None => resources::get(&quota.status.self_used, key),
        };
        let rule = rule_for(rules, key, defaults, cfg);
        // Amounts as people read them, whatever form the spec was written in.
        let show = |q: Quantity| quota::readable::amount(key, q);
        let carved = resources::get(&allocated, key);
        let allocation_percent = rule.as_ref().and_then(|r| r.allocation_percent);
        if let (Some(percent), false, false) = (allocation_percent, cash, carved.is_zero()) {
            if hard.nanos() > 0 && reaches(booked, hard, percent) {
                out.push(Condition {
                    kind: Kind::Allocation,
                    quota: name.to_string(),
                    key: key.clone(),
                    keys: vec![key.clone()],
                    level: Level::Info,
                    message: format!(
                        "{key} of {name} is {percent} % allocated: {} to children and \
                         {} used here, of {}; {} in use in its subtree",
                        show(carved),
                        show(booked.saturating_sub(carved)),
                        show(hard),
                        show(used)
                    ),
                    numbers: json!({
                        "allocated": carved.to_string(),
                        "booked": booked.to_string(),
                        "inUse": used.to_string(),
                        "hard": hard.to_string(),
                        "percent": percent,
                        "allocatedPercent": percent_of(booked, hard),
                    }),
                });
            }
        }
        let numbers = |used: Quantity, percent: Option<i64>| {
            json!({
                "used": used.to_string(),
                "hard": hard.to_string(),
                "percent": percent,
                "usedPercent": percent_of(used, hard),
            })
        };
        // Over quota: more booked than hard (a leaf that borrows, a parent
        // whose hard was lowered under its carve-outs).
        if booked > hard {
            out.push(Condition {
                kind: Kind::OverQuota,
                quota: name.to_string(),
                key: key.clone(),
                keys: vec![key.clone()],
                level: Level::Critical,
                message: format!(
                    "{key} of {name} is over quota: {} used of {}",
                    show(booked),
                    show(hard)
                ),
                numbers: numbers(booked, None),
            });
        }
        // Usage thresholds: where a rule, or the default, watches the key.
        if let (true, Some(rule)) = (hard.nanos() > 0, &rule) {
            for (level, percent) in [
                (Level::Warning, rule.warn_percent),
                (Level::Critical, rule.crit_percent),
            ] {
                if reaches(used, hard, percent) {
                    let what = if cash { "spent" } else { "in use" };
                    out.push(Condition {
                        kind: Kind::Threshold,
                        quota: name.to_string(),
                        key: key.clone(),
                        keys: vec![key.clone()],
                        level,
                        message: format!(
                            "{key} of {name} reached {percent} %: {} {what} of {}",
                            show(used),
                            show(hard)
                        ),
                        numbers: numbers(used, Some(percent)),
                    });
                }
            }
        }
        let forecast = forecasts
            .get(key)
            .and_then(|f| Some((forecast_horizon(quota, rules, key)?, f)));
        if let Some((hours, f)) = forecast {
            if let (Some(lasts), Some(at)) = (f.lasts_ms(), f.runs_out_ms()) {
                if lasts <= hours.saturating_mul(MS_PER_HOUR) {
                    out.push(Condition {
                        kind: Kind::CashForecast,
                        quota: name.to_string(),
                        key: key.clone(),
                        keys: vec![key.clone()],
                        level: Level::Warning,
                        message: format!("{key} of {name} {}", f.words()),
                        numbers: json!({
                            "remaining": f.left.to_string(),
                            "exhaustedAtMs": at,
                            "burnPerHour": f.burn_per_hour.to_string(),
                            "horizonHours": hours,
                        }),
                    });
                }
            }
        }
    }
    // A spent budget whose policy suspends batch work: critical while it
    // stays spent (the suspension is pending, then done).
    for (key, since) in &quota.status.exhausted {
        let Some(quota::object::budgets::Exhaustion::SuspendBatch { grace_seconds }) =
            quota.spec.budgets.get(key).map(|p| p.on_exhausted)
        else {
            continue;
        };
        let Some(since_ms) = quota::time::parse_rfc3339(since) else {
            continue;
        };
        let due = since_ms.saturating_add(grace_seconds.saturating_mul(1000));
        out.push(Condition {
            kind: Kind::CashForecast,
            quota: name.to_string(),
            key: key.clone(),
            keys: vec![key.clone()],
            level: Level::Critical,
            message: format!(
                "{key} of {name} is spent since {since}: its batch work is suspended from {} (onExhausted suspendBatch) unless the budget is raised or a new period starts",
                quota::time::format_rfc3339(due)
            ),
            numbers: json!({ "since": since, "dueMs": due, "graceSeconds": grace_seconds }),
        });
    }
    out.extend(queue_overdue(quota, now_ms));
    out.extend(marks_unfolded(quota));
    if !quota.status.reclaim.is_empty() {
        let workloads: Vec<&String> = quota.status.reclaim.keys().collect();
        let due = quota.status.reclaim.values().map(|m| m.due.as_str()).min();
        out.push(Condition {
            kind: Kind::ReclaimPending,
            quota: name.to_string(),
            key: String::new(),
            keys: Vec::new(),
            level: Level::Warning,
            message: format!(
                "{}: {} workload(s) marked for reclaim{}",
                reclaim_why(quota),
                workloads.len(),
                due.map(|d| format!(", first due {d}")).unwrap_or_default()
            ),
            numbers: json!({ "workloads": workloads, "due": due }),
        });
    }
    out
}

/// Why a quota's workloads are marked: its lenders want their capacity
/// back, its own queue preempts lower-priority work (docs/queueing.md §6),
/// or both.
fn reclaim_why(quota: &Quota) -> String {
    use quota::object::marks::Origin;
    let name = quota.name();
    let count = |o: Origin| {
        quota
            .status
            .reclaim
            .values()
            .filter(|m| m.origin == o)
            .count()
    };
    let (borrow, preempt, idle) = (
        count(Origin::Borrow),
        count(Origin::Preempt),
        count(Origin::Idle),
    );
    match (borrow > 0, preempt > 0, idle > 0) {
        (true, true, _) => format!(
            "{name} borrows capacity its lenders need back, and its queue preempts lower-priority work"
        ),
        (false, true, _) => format!("{name}'s queue preempts lower-priority work for a waiting job"),
        (false, false, true) => {
            format!("{name}'s batch work sits on idle GPUs (idle.action Suspend)")
        }
        _ => format!("{name} borrows capacity its lenders need back"),
    }
}

/// One alert per entry of the quota's queue that has waited at least its
/// `queueing.alertAfterSeconds` (none without it): keyed by the workload,
/// so it fires once per crossing and resolves when the entry leaves.
fn queue_overdue(quota: &Quota, now_ms: i64) -> Vec<Condition> {
    let policy = &quota.spec.queueing;
    let Some(after) = policy.alert_after_seconds else {
        return Vec::new();
    };
    let name = quota.name();
    let span = quota::budget::runway::span;
    // With queue marks the status lists the head of the queue; the
    // oldest entry beyond it alerts by the summary (`oldest_beyond`).
    let beyond = oldest_beyond(quota, now_ms, after);
    quota
        .status
        .queue
        .iter()
        .filter(|e| policy.alerts(e.work.submitted_ms, now_ms))
        .map(|e| {
            let waited = now_ms.saturating_sub(e.work.submitted_ms);
            let wref = &e.work.workload_ref;
            Condition {
                kind: Kind::QueueOverdue,
                quota: name.to_string(),
                key: wref.clone(),
                keys: Vec::new(),
                level: Level::Warning,
                message: format!(
                    "{wref} has waited {} in the queue of {name}, longer than its {}: {}",
                    span(waited),
                    span((after as i64).saturating_mul(1000)),
                    e.reason
                ),
                numbers: json!({
                    "workload": wref,
                    "since": quota::time::format_rfc3339(e.work.submitted_ms),
                    "waitedSeconds": waited / 1000,
                    "alertAfterSeconds": after,
                    "position": e.position,
                    "reason": e.reason,
                }),
            }
        })
        .chain(beyond)
        .collect()
}

/// The oldest entry of a queue whose status lists only its head
/// (`status.queueSummary`, docs/queueing.md §12), when it is not listed
/// and has waited past the threshold `after` (seconds): one alert, keyed
/// by that workload, saying how many more wait unlisted.
fn oldest_beyond(quota: &Quota, now_ms: i64, after: u64) -> Option<Condition> {
    let s = quota.status.queue_summary.as_ref()?;
    let (wref, since) = (s.oldest.as_ref()?, s.oldest_ms()?);
    if quota
        .status
        .queue
        .iter()
        .any(|e| e.work.workload_ref == *wref)
        || !quota.spec.queueing.alerts(since, now_ms)
    {
        return None;
    }
    let span = quota::budget::runway::span;
    let name = quota.name();
    let waited = now_ms.saturating_sub(since);
    let unlisted = quota::queue::summary::waiting(&quota.status.queue, Some(s))
        .saturating_sub(quota.status.queue.len());
    Some(Condition {
        kind: Kind::QueueOverdue,
        quota: name.to_string(),
        key: wref.clone(),
        keys: Vec::new(),
        level: Level::Warning,
        message: format!(
            "{wref} has waited {} in the queue of {name}, longer than its {}; it is among {unlisted} \
             entries behind the {} the quota lists",
            span(waited),
            span((after as i64).saturating_mul(1000)),
            quota.status.queue.len()
        ),
        numbers: json!({
            "workload": wref,
            "since": quota::time::format_rfc3339(since),
            "waitedSeconds": waited / 1000,
            "alertAfterSeconds": after,
            "unlisted": unlisted,
        }),
    })
}

/// A queue whose status counts held objects waiting by queue marks that
/// no replica folds (`status.queueSummary.unfolded`, written by a
/// controller started without `--queue-mark-key-file`,
/// docs/queueing.md §12): they are never admitted until marks are on
/// again. Critical, to the owners and the admins; resolved when a round
/// finds none (marks back on, or the objects gone).
fn marks_unfolded(quota: &Quota) -> Option<Condition> {
    let s = quota.status.queue_summary.as_ref()?;
    if s.unfolded == 0 {
        return None;
    }
    let name = quota.name();
    let listed = quota.status.queue.len();
    Some(Condition {
        kind: Kind::QueueOverdue,
        quota: name.to_string(),
        key: MARKS_OFF_KEY.to_string(),
        keys: Vec::new(),
        level: Level::Critical,
        message: format!(
            "{} workloads bound to {name} wait held beyond the {listed} its queue lists, placed \
             by queue marks that no bizrq replica reads: queue marks are off (no \
             keys), so they will never be admitted. Give every replica its keys again \
             (BIZRQ_QUEUE_MARK_KEY_SECRET or BIZRQ_QUEUE_MARK_KEY_FILE) and, to turn marks off \
             for good, set BIZRQ_QUEUE_MARK_DRAIN=true until no quota raises this alert",
            s.unfolded
        ),
        numbers: json!({
            "unfolded": s.unfolded,
            "listed": listed,
            "waiting": s.total,
        }),
    })
}

/// `used ≥ percent % of hard`, exactly.
fn reaches(used: Quantity, hard: Quantity, percent: i64) -> bool {
    used.nanos().saturating_mul(100) >= hard.nanos().saturating_mul(percent as i128)
}

/// ⌊used · 100 / hard⌋, for display only.
fn percent_of(used: Quantity, hard: Quantity) -> Option<i128> {
    (hard.nanos() > 0).then(|| used.nanos().saturating_mul(100) / hard.nanos())
}

/// What changes for one quota: conditions without an open alert open;
/// open alerts whose condition holds on other keys (or with another worst
/// key) are updated; open condition alerts whose condition no longer holds
/// resolve. `conditions` are one per fingerprint (`grouped`).
pub fn evaluate(conditions: Vec<Condition>, open: &[OpenAlert]) -> Evaluation {
    evaluate_where(conditions, open, |k| !k.judged_by_reader())
}

/// `evaluate`, resolving only open alerts of the kinds `judged` judges.
pub fn evaluate_where(
    conditions: Vec<Condition>,
    open: &[OpenAlert],
    judged: impl Fn(Kind) -> bool,
) -> Evaluation {
    let holding: BTreeSet<String> = conditions.iter().map(Condition::fingerprint).collect();
    let opened: BTreeMap<&str, &OpenAlert> =
        open.iter().map(|a| (a.fingerprint.as_str(), a)).collect();
    let mut out = Evaluation {
        resolve: open
            .iter()
            .filter(|a| {
                a.kind.is_condition()
                    && judged(a.kind)
                    && !holding.contains(&condition_of(&a.fingerprint))
            })
            .map(|a| a.id)
            .collect(),
        ..Evaluation::default()
    };
    for c in conditions {
        match opened.get(c.fingerprint().as_str()) {
            None => out.open.push(c),
            Some(a) if a.keys != c.keys || a.key != c.key => {
                if escalates(a, &c) {
                    out.escalate.insert(a.id);
                }
                out.update.push((a.id, c))
            }
            Some(_) => {}
        }
    }
    out
}

/// Whether updating the open alert `a` to `c` asks for someone again: a
/// key joins it (one it did not cover, whichever), or another key becomes
/// the worst while the one that was the worst still holds (one got worse
/// than it). A key leaving, or the worst leaving so that the next one is
/// the worst, is quieter news and keeps an acknowledgement or a snooze;
/// so does an alert the migration merged (its worst key not yet named).
pub fn escalates(a: &OpenAlert, c: &Condition) -> bool {
    let joined = c.keys.iter().any(|k| !a.keys.contains(k));
    let overtaken = !a.key.is_empty() && c.key != a.key && c.keys.contains(&a.key);
    joined || overtaken
}

/// The condition an open alert stands for, as a fingerprint: its own, or
/// for an alert of one key of a condition on keys (the fingerprint before
/// migration 0020, `kind|quota|key|level`, which a replica not yet
/// upgraded still writes) the condition's, the key left out. Such an alert
/// resolves when its condition no longer holds, not because its
/// fingerprint is of the old form: an upgraded replica and an old one
/// would otherwise resolve each other's alerts on every evaluation.
pub fn condition_of(fingerprint: &str) -> String {
    let mut parts = fingerprint.splitn(3, '|');
    let (Some(kind), Some(quota), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return fingerprint.to_string();
    };
    let Some((key, level)) = rest.rsplit_once('|') else {
        return fingerprint.to_string();
    };
    match (Kind::parse(kind), Level::parse(level)) {
        (Some(k), Some(l)) if per_key(k) && !key.is_empty() => fingerprint_of(k, quota, l),
        _ => fingerprint.to_string(),
    }
}

fn fingerprint_of(kind: Kind, quota: &str, level: Level) -> String {
    format!("{}|{quota}||{}", kind.as_str(), level.as_str())
}

/// The conditions of one quota as alerts: those on keys (`per_key`) of one
/// kind and level made one, in the order each first appears; the others
/// as they are. The one made of several names them all in `keys`, GPUs
/// first, each with its figure in the message (raw keys, which pages and
/// emails name, `words`), and the worst in its title (the worst GPU or
/// budget key where it has one, else the worst key); its `numbers` are the
/// worst key's, with `keys` (each key's figure and numbers, in that order),
/// `worst` and `title`.
pub fn grouped(conditions: Vec<Condition>, cfg: &KeyConfig) -> Vec<Condition> {
    group_by(&conditions, |c| {
        per_key(c.kind).then_some((c.quota.as_str(), c.kind, c.level))
    })
    .into_iter()
    .map(|g| {
        if per_key(g[0].kind) {
            merge(&g, cfg)
        } else {
            g[0].clone()
        }
    })
    .collect()
}

/// The keys a message or an email lists, GPUs first: a quota may have
/// hundreds; the others are counted ("and 3 more"), and all of them are in
/// the alert's `keys` and its `numbers`.
pub const LISTED_KEYS: usize = 10;

/// " and N more" after `LISTED_KEYS` of `n` keys, or nothing.
fn more(n: usize) -> String {
    if n > LISTED_KEYS {
        format!(" and {} more", n - LISTED_KEYS)
    } else {
        String::new()
    }
}

/// One condition of several keys' (same quota, kind and level).
fn merge(group: &[&Condition], cfg: &KeyConfig) -> Condition {
    let mut by_order: Vec<&Condition> = group.to_vec();
    by_order.sort_by_cached_key(|c| quota::keys::display_order(&c.key, cfg));
    // The worst: the highest figure, the first in display order on a tie;
    // of the GPU and budget keys where the alert has one (a title saying
    // "CPU cores … 91 %" above a GPU-first list read as the wrong alert).
    let gpu_or_budget = |c: &Condition| quota::keys::display_order(&c.key, cfg).0 <= 2;
    let lead = by_order.iter().any(|c| gpu_or_budget(c));
    let worst = by_order
        .iter()
        .enumerate()
        .filter(|(_, c)| !lead || gpu_or_budget(c))
        .max_by_key(|(i, c)| (severity(c), std::cmp::Reverse(*i)))
        .map(|(_, c)| *c)
        .unwrap_or(group[0]);
    let keys: Vec<serde_json::Value> = by_order
        .iter()
        .map(|c| {
            let mut entry = serde_json::Map::new();
            entry.insert("key".into(), json!(c.key));
            entry.insert("figure".into(), json!(figure(c)));
            if let Some(o) = c.numbers.as_object() {
                for (k, v) in o {
                    entry.insert(k.clone(), v.clone());
                }
            }
            serde_json::Value::Object(entry)
        })
        .collect();
    let mut numbers = worst.numbers.as_object().cloned().unwrap_or_default();
    numbers.insert("worst".into(), json!(worst.key));
    numbers.insert("title".into(), json!(worst.message));
    numbers.insert("keys".into(), serde_json::Value::Array(keys));
    let message = if by_order.len() == 1 {
        worst.message.clone()
    } else {
        let list: Vec<String> = by_order
            .iter()
            .take(LISTED_KEYS)
            .map(|c| format!("{} {}", c.key, figure(c)))
            .collect();
        format!(
            "{}; {} keys: {}{}",
            worst.message,
            by_order.len(),
            list.join(", "),
            more(by_order.len())
        )
    };
    Condition {
        kind: worst.kind,
        quota: worst.quota.clone(),
        key: worst.key.clone(),
        keys: by_order.iter().map(|c| c.key.clone()).collect(),
        level: worst.level,
        message,
        numbers: serde_json::Value::Object(numbers),
    }
}

/// How bad one key's condition is, to pick the worst of a group: the share
/// in use (or allocated), or how soon a budget runs out.
fn severity(c: &Condition) -> i128 {
    let n = &c.numbers;
    let int = |k: &str| n.get(k).and_then(serde_json::Value::as_i64);
    match c.kind {
        Kind::Allocation => int("allocatedPercent").unwrap_or(0) as i128,
        Kind::CashForecast => {
            -(int("exhaustedAtMs")
                .or_else(|| int("dueMs"))
                .unwrap_or(i64::MAX) as i128)
        }
        _ => {
            let q = |k: &str| n.get(k).and_then(|v| v.as_str()?.parse::<Quantity>().ok());
            match (q("used"), q("hard")) {
                (Some(used), Some(hard)) if hard.nanos() > 0 => {
                    used.nanos().saturating_mul(1_000_000) / hard.nanos()
                }
                _ => 0,
            }
        }
    }
}

/// One key's figure as a group's list says it, amounts in words
/// (`quota::readable`): `8 of 8 (100 %)`, `runs out 2026-12-07`.
fn figure(c: &Condition) -> String {
    let n = &c.numbers;
    let text = |k: &str| n.get(k).and_then(|v| v.as_str()).unwrap_or_default();
    let amount = |k: &str| {
        text(k)
            .parse::<Quantity>()
            .map(|q| quota::readable::amount(&c.key, q))
            .unwrap_or_default()
    };
    let day = |k: &str| {
        n.get(k)
            .and_then(serde_json::Value::as_i64)
            .map(|ms| quota::time::format_rfc3339(ms)[..10].to_string())
            .unwrap_or_default()
    };
    let percent = n
        .get("usedPercent")
        .and_then(serde_json::Value::as_i64)
        .map(|p| format!(" ({p} %)"))
        .unwrap_or_default();
    match c.kind {
        Kind::Allocation => format!(
            "{} % allocated",
            n.get("allocatedPercent")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0)
        ),
        Kind::CashForecast if n.get("exhaustedAtMs").is_some() => {
            format!("runs out {}", day("exhaustedAtMs"))
        }
        Kind::CashForecast => format!("spent, batch work suspended from {}", day("dueMs")),
        _ => format!("{} of {}{percent}", amount("used"), amount("hard")),
    }
}

/// What runs in each quota's subtree: `subtree_in_use`'s map, or the
/// working copies' (`service::working::Accrued`).
use quota::rollup::SubtreeUse;

/// One evaluation over many quotas: `in_use` what runs in each one's
/// subtree (a quota it lacks: only the quota itself is known), `open`
/// every open alert by quota, `forecasts` the cash forecasts by quota and
/// key.
pub fn evaluate_quotas<Q: std::borrow::Borrow<Quota>, U: SubtreeUse + ?Sized>(
    quotas: &[Q],
    in_use: &U,
    rules: &BTreeMap<String, Vec<Rule>>,
    open: &BTreeMap<String, Vec<OpenAlert>>,
    forecasts: &BTreeMap<String, BTreeMap<String, Forecast>>,
    now_ms: i64,
    cfg: &KeyConfig,
) -> Evaluation {
    let mut out = evaluate_each(quotas, in_use, rules, open, forecasts, now_ms, cfg);
    out.resolve.extend(resolve_deleted(quotas, open));
    out
}

/// `evaluate_quotas` of each quota given, and nothing of the quotas not
/// given: a part of a sweep, which calls `resolve_deleted` once at its end.
pub fn evaluate_each<Q: std::borrow::Borrow<Quota>, U: SubtreeUse + ?Sized>(
    quotas: &[Q],
    in_use: &U,
    rules: &BTreeMap<String, Vec<Rule>>,
    open: &BTreeMap<String, Vec<OpenAlert>>,
    forecasts: &BTreeMap<String, BTreeMap<String, Forecast>>,
    now_ms: i64,
    cfg: &KeyConfig,
) -> Evaluation {
    let none = BTreeMap::new();
    let mut out = Evaluation::default();
    for q in quotas {
        let q = q.borrow();
        let name = q.name();
        let rules = rules.get(name).map(Vec::as_slice).unwrap_or_default();
        let cs = conditions(
            q,
            in_use.of(name),
            rules,
            forecasts.get(name).unwrap_or(&none),
            now_ms,
            cfg,
        );
        let e = evaluate(
            grouped(cs, cfg),
            open.get(name).map(Vec::as_slice).unwrap_or_default(),
        );
        out.open.extend(e.open);
        out.resolve.extend(e.resolve);
        out.update.extend(e.update);
        out.escalate.extend(e.escalate);
    }
    out
}

/// The open alerts of quotas not among `quotas` (deleted: their
/// conditions are gone with them), to resolve.
pub fn resolve_deleted<Q: std::borrow::Borrow<Quota>>(
    quotas: &[Q],
    open: &BTreeMap<String, Vec<OpenAlert>>,
) -> Vec<i64> {
    // No quota at all is more likely a cache not filled yet than an empty
    // tree: resolving everything then would send every alert again on the
    // next sweep.
    if quotas.is_empty() {
        return Vec::new();
    }
    let seen: BTreeSet<&str> = quotas.iter().map(|q| q.borrow().name()).collect();
    open.iter()
        .filter(|(name, _)| !seen.contains(name.as_str()))
        .flat_map(|(_, alerts)| evaluate(Vec::new(), alerts).resolve)
        .collect()
}

/// An alert as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub id: i64,
    pub fingerprint: String,
    pub kind: Kind,
    pub quota: String,
    pub key: String,
    pub level: Level,
    pub message: String,
    pub numbers: serde_json::Value,
    /// The keys it covers (a condition on keys), GPUs first.
    pub keys: Vec<String>,
    pub opened_at: i64,
    pub resolved_at: Option<i64>,
    /// Resolved by the migration that made one alert of a condition's
    /// alerts per key: the alert that carries on for it.
    pub merged_into: Option<i64>,
    /// Who acknowledged it, and when (it stays open while its condition holds).
    pub acked: Option<(String, i64)>,
    /// Quiet until then, and who asked.
    pub snoozed: Option<(String, i64)>,
}

impl Alert {
    /// Acknowledged, or snoozed at `now_ms`: left out of the badge and the
    /// overview, still listed on /alerts.
    pub fn is_quiet(&self, now_ms: i64) -> bool {
        self.acked.is_some()
            || self
                .snoozed
                .as_ref()
                .is_some_and(|(_, until)| *until > now_ms)
    }

    pub fn as_open(&self) -> OpenAlert {
        OpenAlert {
            id: self.id,
            kind: self.kind,
            fingerprint: self.fingerprint.clone(),
            key: self.key.clone(),
            keys: self.keys.clone(),
        }
    }
}

/// An email: subject, plain text and HTML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Email {
    pub subject: String,
    pub text: String,
    pub html: String,
}

/// Whether `kind`'s alerts are about keys of the quota, one alert per
/// quota, kind and level whichever keys it covers (`grouped`): one
/// training job over six keys is one alert, one row, one email.
pub fn per_key(kind: Kind) -> bool {
    app::alerts::PER_KEY_KINDS.contains(&kind.as_str())
}

/// The keys an alert's words name: its key, the keys it covers (each
/// with its budget's target), a transfer's amounts.
pub fn named_keys<'a>(key: &'a str, numbers: &'a serde_json::Value) -> Vec<&'a str> {
    let amounts = numbers.get("amounts").and_then(|v| v.as_object());
    let covered = numbers
        .get("keys")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("key")?.as_str());
    std::iter::once(key)
        .chain(covered)
        .flat_map(|k| [k, quota::keys::cash_target(k).unwrap_or("")])
        .chain(
            amounts
                .into_iter()
                .flat_map(|m| m.keys().map(String::as_str)),
        )
        .filter(|k| !k.is_empty())
        .collect()
}

/// Each key a condition covers with its figure, in words and in its
/// order (GPUs first): `("A100 GPUs", "requests.nvidia.com/gpu.A100",
/// "8 of 8 (100 %)")`. Empty for an alert not on keys.
pub fn key_figures(numbers: &serde_json::Value, cfg: &KeyConfig) -> Vec<(String, String, String)> {
    numbers
        .get("keys")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let key = e.get("key")?.as_str()?;
            let figure = e.get("figure").and_then(|f| f.as_str()).unwrap_or_default();
            Some((
                quota::keys::display_name(key, cfg),
                key.to_string(),
                figure.to_string(),
            ))
        })
        .collect()
}

/// An alert's stored message (raw keys, as the API keeps it) as people
/// read it: each key it names by its display name ("A100 GPUs of nlp
/// reached 80 %", `quota::keys::with_names`).
pub fn words(message: &str, key: &str, numbers: &serde_json::Value, cfg: &KeyConfig) -> String {
    quota::keys::with_names(message, named_keys(key, numbers), cfg)
}

/// The email of one alert as it opens: what happened in words, its
/// figures (for a condition on keys, each key it covers, GPUs first, the
/// raw key in the HTML's `title`), a link to the quota. The subject is its
/// title: the worst key's figure, and how many keys.
pub fn email(c: &Condition, public_url: &str, cfg: &KeyConfig) -> Email {
    // An alert on no quota (real usage unknown) links to the overview.
    let link = match c.quota.as_str() {
        "" => format!("{}/", public_url.trim_end_matches('/')),
        q => format!("{}/quotas/{q}", public_url.trim_end_matches('/')),
    };
    let figures = key_figures(&c.numbers, cfg);
    let said = words(&c.message, &c.key, &c.numbers, cfg);
    let title = c
        .numbers
        .get("title")
        .and_then(|t| t.as_str())
        .map(|t| words(t, &c.key, &c.numbers, cfg))
        .unwrap_or_else(|| said.clone());
    let subject = if figures.len() > 1 {
        format!(
            "[bizrq {}] {title} (and {} more keys)",
            c.level.as_str(),
            figures.len() - 1
        )
    } else {
        format!("[bizrq {}] {title}", c.level.as_str())
    };
    let mut text = format!("{title}\n\n");
    let mut html = format!(
        "<!DOCTYPE html><html><body><p title=\"{}\">{}</p>",
        escape_text(&c.key),
        escape_text(&title)
    );
    if figures.len() > 1 {
        text.push_str(&format!(
            "{} ({}) on {}, {} keys:\n",
            app::alerts::kind_label(c.kind.as_str()),
            c.level.as_str(),
            c.quota,
            figures.len()
        ));
        html.push_str("<table>");
        for (name, key, figure) in figures.iter().take(LISTED_KEYS) {
            text.push_str(&format!("- {name}: {figure}\n"));
            html.push_str(&format!(
                "<tr><th title=\"{}\">{}</th><td>{}</td></tr>",
                escape_text(key),
                escape_text(name),
                escape_text(figure)
            ));
        }
        html.push_str("</table>");
        if figures.len() > LISTED_KEYS {
            let more = format!("and {} more keys", figures.len() - LISTED_KEYS);
            text.push_str(&format!("- {more}\n"));
            html.push_str(&format!("<p>{more}, listed on the alert's page</p>"));
        }
    } else {
        let numbers = numbers_of(c);
        for (k, v) in &numbers {
            text.push_str(&format!("  {k}: {v}\n"));
        }
        let rows: String = numbers
            .iter()
            .map(|(k, v)| {
                format!(
                    "<tr><th>{}</th><td>{}</td></tr>",
                    escape_text(k),
                    escape_text(v)
                )
            })
            .collect();
        html.push_str(&format!("<table>{rows}</table>"));
    }
    text.push_str(&format!("\nQuota: {link}\n"));
    html.push_str(&format!(
        "<p><a href=\"{}\">Open {} in bizrq</a></p></body></html>",
        escape_text(&link),
        escape_text(if c.quota.is_empty() {
            "the overview"
        } else {
            c.quota.as_str()
        })
    ));
    Email {
        subject,
        text,
        html,
    }
}

/// A condition's numbers as `name: value` lines, by name.
fn numbers_of(c: &Condition) -> Vec<(String, String)> {
    let mut numbers: Vec<(String, String)> = c
        .numbers
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, v)| !v.is_null() && !matches!(k.as_str(), "keys" | "title" | "worst"))
                .map(|(k, v)| {
                    let v = v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string());
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    numbers.sort();
    numbers
}

/// `items` in groups, in the order each group first appears: those
/// whose `key` is the same together, those without one alone (`grouped`:
/// a quota's conditions on keys by kind and level).
pub fn group_by<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> Option<K>,
) -> Vec<Vec<&'a T>> {
    let mut out: Vec<Vec<&'a T>> = Vec::new();
    let mut at: std::collections::HashMap<K, usize> = std::collections::HashMap::new();
    for item in items {
        let Some(k) = key(item) else {
            out.push(vec![item]);
            continue;
        };
        match at.get(&k) {
            Some(&i) => out[i].push(item),
            None => {
                at.insert(k, out.len());
                out.push(vec![item]);
            }
        }
    }
    out
}

/// Where a day's digest ends: the last `hour`:00 UTC at or before `now_ms`.
/// Alerts opened before it go into the digest sent from then on.
pub fn digest_cutoff(now_ms: i64, hour: u8) -> i64 {
    const DAY: i64 = 86_400_000;
    let offset = i64::from(hour.min(23)) * 3_600_000;
    (now_ms - offset).div_euclid(DAY) * DAY + offset
}

/// One email for a user's waiting alerts (oldest first): each with its
/// level, quota, message, when it opened and, if so, when it resolved.
pub fn digest_email(alerts: &[Alert], cutoff_ms: i64, public_url: &str, cfg: &KeyConfig) -> Email {
    let day = &quota::time::format_rfc3339(cutoff_ms)[..10];
    let url = public_url.trim_end_matches('/');
    let open = alerts.iter().filter(|a| a.resolved_at.is_none()).count();
    let subject = format!(
        "[bizrq digest] {} alert{} ({open} still open) up to {day}",
        alerts.len(),
        if alerts.len() == 1 { "" } else { "s" }
    );
    let utc = quota::time::format_when;
    let when = |a: &Alert| {
        let opened = utc(a.opened_at);
        match a.resolved_at {
            Some(r) if r != a.opened_at => format!("opened {opened}, resolved {}", utc(r)),
            Some(_) => opened,
            None => format!("opened {opened}, still open"),
        }
    };
    let mut text = format!(
        "Your bizrq alerts of the kinds you take as a daily digest, up to {}:\n\n",
        utc(cutoff_ms)
    );
    let mut rows = String::new();
    for a in alerts {
        let link = format!("{url}/quotas/{}", a.quota);
        let said = words(&a.message, &a.key, &a.numbers, cfg);
        text.push_str(&format!(
            "- [{}] {}\n  {}\n  {link}\n",
            a.level.as_str(),
            said,
            when(a)
        ));
        rows.push_str(&format!(
            "<tr><td>{}</td><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
            escape_text(a.level.as_str()),
            escape_text(&link),
            escape_text(&a.quota),
            escape_text(&said),
            escape_text(&when(a))
        ));
    }
    text.push_str(&format!(
        "\nAll alerts: {url}/alerts\nYour settings: {url}/account\n"
    ));
    let html = format!(
        "<!DOCTYPE html><html><body><p>Your bizrq alerts of the kinds you take as a daily \
         digest, up to {}:</p><table><tr><th>Level</th><th>Quota</th><th>Alert</th><th>When</th></tr>\
         {rows}</table><p><a href=\"{}/alerts\">All alerts</a> · \
         <a href=\"{}/account\">Your settings</a></p></body></html>",
        escape_text(&utc(cutoff_ms)),
        escape_text(url),
        escape_text(url)
    );
    Email {
        subject,
        text,
        html,
    }
}

#[cfg(test)]
mod tests;
