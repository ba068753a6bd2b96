//! The `BizGroupResourceQuota` CRD, generated from these Rust types.
//! `bizrq crd` prints it; `deploy/crd.yaml` is the committed copy, kept equal
//! by a test. The object's JSON is exactly `quota::Quota`'s, so converting
//! between the two is a serde round trip. Columns, validations and what
//! only a real API server can check: docs/events-and-crd.md.

use kube::CustomResource;
use quota::object::budgets::BudgetPolicy;
use quota::object::fair_sharing::FairSharing;
use quota::object::idle::IdlePolicy;
use quota::object::queueing::QueuePolicy;
use quota::object::{Quota, QuotaStatus};
use quota::ResourceList;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A Kubernetes quantity without a sign (`16`, `500m`, `1.5Gi`, `1e3`),
/// as apimachinery's grammar writes it. The webhook parses the rest.
pub const QUANTITY_PATTERN: &str = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A DNS-1123 subdomain, as bizrq requires of quota names. In a cluster
/// a name is also at most 63 long: workloads name their quota in a label
/// value.
pub const NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Keys one quota may hold in `hard` (or `max`): `quota::tree::MAX_KEYS`,
/// which the service checks in both modes. Also bounds the cost the API
/// server estimates for the rules that iterate over them.
pub const MAX_KEYS: u64 = quota::tree::MAX_KEYS as u64;

/// Spec of a BizGroupResourceQuota: its place in the tree (`parent`), its
/// guarantee (`hard`) and how far it may borrow (`max`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bizrq.io",
    version = "v1",
    kind = "BizGroupResourceQuota",
    plural = "bizgroupresourcequotas",
    shortname = "bizrq",
    status = "Status",
    doc = "A business group's quota in a tree of quotas (bizrq). spec.hard is its guarantee, carved out of its parent's: amounts per resource key, per CPU/GPU model, and card-hour budgets (cash/ keys). spec.max lets it borrow idle capacity from its parent up to a ceiling. Workloads labelled biz.group.resource.quota=<name> are charged to it by bizrq's admission webhook, which refuses what does not fit; bizrq writes status (usage, ledgers, loans, reclaim marks, a readable summary).",
    validation = (
        "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",
        "metadata.name must be usable as the label value biz.group.resource.quota=<name>: at most 63 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
    ),
    validation = (
        "!has(self.spec) || !has(self.spec.parent) || self.spec.parent != self.metadata.name",
        "a quota cannot be its own parent"
    ),
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parent","description":"The parent quota (empty for a root)"}"#,
    printcolumn = r#"{"name":"GPU","type":"string","jsonPath":".status.summary.gpu","description":"GPU cards in use in the whole subtree / hard (a parent's carve-outs are not use)"}"#,
    printcolumn = r#"{"name":"Card-hours Left","type":"string","jsonPath":".status.summary.cardHoursLeft","description":"GPU card-hours left for its own new work: budget, carry-in and top-ups, less its spending and its children's carve-outs"}"#,
    printcolumn = r#"{"name":"Borrowing","type":"string","jsonPath":".status.summary.borrowing","description":"Used beyond hard, on loan from the parent"}"#,
    printcolumn = r#"{"name":"Weight","type":"string","jsonPath":".status.fairSharing.weight","description":"Weight among siblings sharing the parent's idle capacity"}"#,
    printcolumn = r#"{"name":"Share","type":"string","jsonPath":".status.fairSharing.share","description":"Dominant share of what the parent can lend, divided by the weight"}"#,
    printcolumn = r#"{"name":"Reclaim","type":"integer","jsonPath":".status.summary.reclaimPending","description":"Workloads marked to be reclaimed"}"#,
    printcolumn = r#"{"name":"Queued","type":"integer","jsonPath":".status.summary.queued","description":"Workloads waiting, suspended, in the queue"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_rules)]
pub struct BizGroupResourceQuotaSpec {
    /// Name of the parent quota; "" for a root of the tree. Cannot change
    /// after creation.
    #[serde(default)]
    #[schemars(schema_with = "parent")]
    pub parent: String,
    /// Guaranteed amounts per key, carved out of the parent: standard keys
    /// (requests.cpu, limits.memory, requests.nvidia.com/gpu, pods),
    /// model-qualified keys (limits.cpu.A4, requests.nvidia.com/gpu.A100)
    /// and cash keys (cash/requests.nvidia.com/gpu: a budget of
    /// resource-hours, e.g. GPU card-hours). A child's hard holds every key
    /// of its parent's.
    #[serde(default)]
    #[schemars(schema_with = "spec_list")]
    pub hard: ResourceList,
    /// Optional ceilings including capacity borrowed from the parent, per
    /// key of hard (at least hard; cash keys cannot be borrowed).
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[schemars(schema_with = "spec_list")]
    pub max: ResourceList,
    /// Budget policies of cash keys of hard, by cash key: period (none,
    /// weekly, monthly with an anchor day, or a term), carry-over,
    /// overspend and the rest (docs/budgets.md). Absent: one budget for
    /// all time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "budgets")]
    pub budgets: BTreeMap<String, BudgetPolicy>,
    /// What happens to suspendable batch work (Jobs, Kubeflow jobs) that
    /// does not fit: Refuse (the default) or Queue, or {mode, order,
    /// preemption, alertAfterSeconds} (docs/queueing.md). bizrq's webhook
    /// checks the spelling and the ranges.
    #[serde(default, skip_serializing_if = "QueuePolicy::is_default")]
    #[schemars(schema_with = "queueing")]
    pub queueing: QueuePolicy,
    /// Its weight among its siblings when they share their parent's idle
    /// capacity: {weight: N}, 0 to 1000 (an integer, or a decimal string
    /// such as "0.5"); 1 when left out; 0 borrows last (docs/queueing.md,
    /// "Fair sharing").
    #[serde(default, skip_serializing_if = "FairSharing::is_default")]
    #[schemars(schema_with = "fair_sharing")]
    pub fair_sharing: FairSharing,
    /// When its workloads' GPUs count as idle and what then happens
    /// (docs/real-usage.md): {threshold: percent busy below which a GPU
    /// is idle (5), showAfter: idle this long shows as "idle now" (30m),
    /// after: idle this long is told to the submitter and owners (2h),
    /// action: Notify or Suspend (batch work is then reclaimed)}. Absent:
    /// the nearest ancestor's, or those defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "idle")]
    pub idle: Option<IdlePolicy>,
}

/// Status as bizrq writes it: `quota::QuotaStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Status(pub QuotaStatus);

/// Rules on the spec alone, checked by the API server even for a write
/// that bypasses the webhook. `max ≥ hard` per key is left to the webhook:
/// on int-or-string values the API server estimates a CEL `quantity()`
/// call at the size of a whole request, past the cost budget.
fn spec_rules(s: &mut Schema) {
    s.insert(
        "x-kubernetes-validations".into(),
        json!([
            {
                "rule": "!has(self.max) || self.max.all(k, has(self.hard) && k in self.hard)",
                "message": "every key of spec.max needs the same key in spec.hard (max is a ceiling over hard)"
            },
            {
                "rule": "!has(self.max) || self.max.all(k, !k.startsWith('cash/'))",
                "message": "spec.max cannot hold a cash/ key: card-hour budgets cannot be borrowed"
            }
        ]),
    );
}

/// `Refuse`, `Queue` or the long form: a string or an object, which a
/// structural schema can only leave open; the webhook refuses the rest
/// with the list of what is allowed.
fn queueing(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// `{weight}`: an integer 0 to 1000, or a decimal string of at most three
/// places; the webhook parses it exactly (`quota::object::fair_sharing`).
fn fair_sharing(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "weight": {
                "x-kubernetes-int-or-string": true,
                "minimum": 0,
                "maximum": 1000,
                "pattern": r"^([0-9]{1,4}(\.[0-9]{1,3})?|\.[0-9]{1,3})$",
                "description": "relative weight among siblings, 0 to 1000 (default 1; 0 = always last)"
            }
        }
    })
}

/// `spec.idle`: the webhook checks the rules (`IdlePolicy::validate`);
/// the schema bounds the shape a bypassing write can store.
fn idle(_: &mut SchemaGenerator) -> Schema {
    let span = |description: &str| json!({ "type": "string", "maxLength": 32, "pattern": r"^([0-9]+[dhms])+$|^[0-9]+$", "description": description });
    json_schema!({
        "type": "object",
        "properties": {
            "threshold": { "type": "integer", "minimum": 1, "maximum": 100, "description": "percent busy below which a workload's GPUs are idle (default 5)" },
            "showAfter": span("idle this long shows as idle now (default 30m)"),
            "after": span("idle this long is told to the submitter and the owners, and under Suspend reclaimed (default 2h)"),
            "action": { "type": "string", "enum": ["Notify", "Suspend"], "description": "Notify (default), or Suspend: batch work is reclaimed through the reclaim grace" }
        },
        "additionalProperties": false
    })
}

fn parent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "maxLength": 253,
        "pattern": format!("^$|{NAME_PATTERN}"),
        "x-kubernetes-validations": [
            { "rule": "self == oldSelf", "message": "spec.parent cannot change after creation" }
        ]
    })
}

/// `spec.budgets`: one policy per cash key of hard. The webhook checks
/// every rule (`BudgetPolicy::validate`); the schema bounds the size and
/// the shape a bypassing write can store, and that each key is a cash key
/// of hard.
fn budgets(_: &mut SchemaGenerator) -> Schema {
    let kind = |kinds: &[&str], description: &str| json!({ "type": "string", "enum": kinds, "description": description });
    let offset = json!({ "type": "integer", "minimum": -720, "maximum": 840, "description": "fixed UTC offset of local midnight, in minutes (no daylight saving)" });
    json_schema!({
        "type": "object",
        "maxProperties": MAX_KEYS,
        "x-kubernetes-validations": [
            {
                "rule": "self.all(k, k.startsWith('cash/'))",
                "message": "spec.budgets holds policies of cash/ keys only"
            }
        ],
        "additionalProperties": {
            "type": "object",
            "description": "a cash key's budget policy",
            "properties": {
                "period": {
                    "type": "object",
                    "description": "when the budget starts again",
                    "properties": {
                        "kind": kind(&["none", "weekly", "monthly", "term"], "none, weekly, monthly or term"),
                        "startsOn": kind(&["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"], "weekly: the day a week starts"),
                        "anchorDay": { "type": "integer", "minimum": 1, "maximum": 31, "description": "monthly: the day of the month a period starts (31: the last day)" },
                        "utcOffsetMinutes": offset,
                        "start": { "type": "string", "maxLength": 64, "description": "term: its start (RFC 3339)" },
                        "end": { "type": "string", "maxLength": 64, "description": "term: its end (RFC 3339)" }
                    },
                    "required": ["kind"]
                },
                "carry": {
                    "type": "object",
                    "description": "what of an unspent budget the next period inherits",
                    "properties": {
                        "kind": kind(&["none", "all", "percent", "amount"], "none, all, percent or amount"),
                        "percent": { "type": "integer", "minimum": 0, "maximum": 100, "description": "percent: at most this percentage of the period's budget" },
                        "amount": { "x-kubernetes-int-or-string": true, "pattern": QUANTITY_PATTERN, "description": "amount: at most this many resource-hours" }
                    },
                    "required": ["kind"]
                },
                "overspend": kind(&["carry", "forgive"], "carry: the next period starts in debt; forgive: the overspend is written off"),
                "withoutRunTime": { "type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "admission of a workload that declares no run time (admit, refuse, reserveDefault)" },
                "reservationCap": { "x-kubernetes-int-or-string": true, "pattern": QUANTITY_PATTERN, "description": "at most this many resource-hours held by open reservations" },
                "refund": { "type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "refunds for reclaimed work (none, lastStretch, wholeRun)" },
                "onExhausted": { "type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "what happens when the budget is spent (refuseNew, suspendBatch)" },
                "scheduledTopUp": {
                    "type": "object",
                    "description": "a top-up added at each period start (docs/budgets.md §5)",
                    "properties": {
                        "amount": { "x-kubernetes-int-or-string": true, "pattern": QUANTITY_PATTERN, "description": "resource-hours added at each period start" },
                        "source": kind(&["parent", "grant"], "parent: the parent's budget pays; grant: new budget")
                    },
                    "required": ["amount", "source"]
                },
                "forecastDays": { "type": "integer", "minimum": 0, "maximum": 366, "description": "the forecast alert's horizon in days (default 14; 0 turns it off)" }
            }
        }
    })
}

/// A quantity as bizrq writes it in status.
fn quantity() -> Value {
    json!({ "x-kubernetes-int-or-string": true })
}

/// A map of key → quantity in spec: bounded in size, each amount a
/// quantity that is not negative.
fn spec_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": MAX_KEYS,
        // `pattern` checks a string, `minimum` an integer; neither costs CEL.
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "pattern": QUANTITY_PATTERN,
            "minimum": 0
        }
    })
}

impl JsonSchema for Status {
    fn schema_name() -> Cow<'static, str> {
        "BizGroupResourceQuotaStatus".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let list = |description: &str| json!({ "type": "object", "additionalProperties": quantity(), "description": description });
        let ledger = |description: &str| json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": description });
        let text = |description: &str| json!({ "type": "string", "description": description });
        json_schema!({
            "type": "object",
            "description": "Written by bizrq only. used and selfUsed are derived from the ledgers (children, workloads, cashAccrued); summary and readable are for people.",
            "properties": {
                "hard": list("spec.hard as last applied"),
                "used": list("selfUsed + the hard of every child (+ cash spent, in resource-hours), for the keys of hard; exact"),
                "selfUsed": list("usage of the workloads bound directly to this quota; exact"),
                "lastReconcileTime": { "type": "string", "format": "date-time", "description": "end of the last cash accrual window" },
                "qualityBilledTo": { "type": "string", "format": "date-time", "description": "billing by quality: the end of the last window of real usage billed here (a window before it is never billed again)" },
                "ledgerOutbox": ledger("the budget ledger entries of the last accrual window (from, to, entries) and of refunds taken since (extra), appended to the ledger after this write and again, as a no-op, by the next reconcile; kept until the next window"),
                "children": ledger("carve-out of each child, by child name: hard, since, uid of the creating request"),
                "workloads": ledger("charge of each bound workload (pod sets, HPA reservation), by group/Kind/namespace/name"),
                "loans": ledger("loans granted to children beyond their hard, by child name: amount, since, raised, generation"),
                "loanGeneration": { "type": "integer", "minimum": 0, "description": "as a lender: the generation of the latest loan granted here (each grant takes the next; loans carry theirs)" },
                "loanFence": { "type": "integer", "minimum": 0, "description": "as a borrower: no charge rides a loan its parent granted at this generation or before (raised by a release that gave its loan back at once)" },
                "deleted": { "type": "object", "maxProperties": quota::reconcile::MAX_DELETED, "additionalProperties": { "type": "object", "properties": { "uid": { "type": "string", "maxLength": quota::reconcile::MAX_DELETED_UID, "description": "the deleted object's uid" }, "at": { "type": "string", "format": "date-time", "description": "when its charge was released" } } }, "description": "workloads whose DELETE a review released, by group/Kind/namespace/name: the controller does not charge them again while its watch still shows that object" },
                "lent": list("sum of the loans granted to children"),
                "borrowed": list("used beyond hard on the keys of spec.max: on loan from the parent"),
                "reclaim": ledger("workloads marked for reclaim, by group/Kind/namespace/name: action, frees, marked, due, and origin (preempt for the queue's preemption of lower-priority work; idle for batch work idle past spec.idle.after under idle.action Suspend; left out for the reclaim of a loan)"),
                "queue": {
                    "type": "array",
                    "maxItems": quota::object::queueing::MAX_QUEUE,
                    "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    "description": "workloads waiting, suspended and not charged, in admission order: workloadRef, uid, priority, since, podSets, runMs, submittedBy, position, waiting, reason, estimatedStart; with queue marks on, only the first 20 (and those no mark backs), queueSummary counting all"
                },
                "queueSummary": {
                    "type": "object",
                    "description": "with queue marks on, the whole queue in numbers (queue then lists only the first entries in admission order): total, forQuota, forBudget, forTurn, never, head, oldest, oldestSince; with marks off, only while held objects wait by marks nothing folds (unfolded)",
                    "properties": {
                        "total": { "type": "integer", "minimum": 0, "description": "workloads waiting in all" },
                        "forQuota": { "type": "integer", "minimum": 0, "description": "of them, waiting for quota" },
                        "forBudget": { "type": "integer", "minimum": 0, "description": "of them, waiting for a card-hour budget" },
                        "forTurn": { "type": "integer", "minimum": 0, "description": "of them, waiting for their turn behind a blocked head" },
                        "never": { "type": "integer", "minimum": 0, "description": "of them, never admissible by waiting" },
                        "head": text("the head of the queue, group/Kind/namespace/name"),
                        "oldest": text("the entry waiting longest, group/Kind/namespace/name"),
                        "oldestSince": { "type": "string", "format": "date-time", "description": "since when the oldest entry waits" },
                        "unfolded": { "type": "integer", "minimum": 0, "description": "of them, held objects waiting by a queue mark that no replica folds (queue marks turned off): never admitted until marks are on again" }
                    }
                },
                "fairSharing": {
                    "type": "object",
                    "description": "for a quota that may borrow: its weight and its dominant share of what its parent can lend (use beyond hard ÷ lendable, largest over keys, ÷ weight), for people",
                    "properties": {
                        "weight": { "x-kubernetes-int-or-string": true, "description": "spec.fairSharing.weight as applied" },
                        "share": text("the dominant share, two decimals (∞ for weight 0 while borrowing)"),
                        "dominant": text("the key the share comes from; absent when nothing is borrowed")
                    }
                },
                "transfers": ledger("transfers in flight that hold children's carve-outs, by transfer id: children (their hard once done), since, decision (at the common ancestor)"),
                "budgets": ledger("the current period of each cash key with one: start, end, funded, carryIn (acc), and the last closed periods (closed, newest first)"),
                "reservations": ledger("open reservations of budgets, by cash key then group/Kind/namespace/name: reserved and used (acc), atMs and runMs; settled when the workload's charge goes"),
                "refunds": ledger("refunds for work stopped by reclaim, by group/Kind/namespace/name: the reclaim mark refunded, when, the stretch refunded (from, to) and the amounts per cash key (acc); one per mark"),
                "exhausted": {
                    "type": "object",
                    "additionalProperties": { "type": "string", "format": "date-time" },
                    "description": "since when each spent cash key has been spent (for onExhausted suspendBatch's grace period)"
                },
                "users": {
                    "type": "object",
                    "additionalProperties": { "type": "string", "maxLength": crate::service::MAX_USER_LEN },
                    "description": "who asked for each charged workload (the admission request's userInfo.username), by group/Kind/namespace/name; budget ledger entries carry it"
                },
                "cashAccrued": {
                    "type": "object",
                    "additionalProperties": { "type": "string" },
                    "description": "exact cash accumulators: nano-units × milliseconds × per-mille price"
                },
                "summary": {
                    "type": "object",
                    "description": "what kubectl get shows, derived from the rest at each status write; at a parent restated by the controller when its subtree changes",
                    "properties": {
                        "gpu": text("GPU cards in use in the whole subtree over hard, on the GPU keys of hard (e.g. 12/16); a parent's carve-outs are not use"),
                        "cardHoursLeft": text("GPU card-hours left for its own new work, rounded, never below 0: budget, carry-in and top-ups less its own spending and its children's carve-outs (the budgets API's left)"),
                        "borrowing": text("used beyond hard, on loan from the parent, key=amount, comma-separated; absent when nothing is borrowed"),
                        "reclaimPending": { "type": "integer", "description": "workloads marked for reclaim (see reclaim)" },
                        "queued": { "type": "integer", "description": "workloads waiting in the queue (see queue)" }
                    }
                },
                "readable": {
                    "type": "object",
                    "additionalProperties": { "type": "string" },
                    "description": "each cash key's balance in its unit, rounded (e.g. 0.42 of 1000 card-hours used, 999.58 left; at a parent what its own work used and what its children hold apart); the exact amounts are in used and cashAccrued"
                }
            }
        })
    }
}

impl BizGroupResourceQuota {
    /// The same object in the engine's type, field by field: the status (a
    /// busy quota's largest part) is cloned, not converted through JSON.
    /// Every read of the watch's copy (a create's judgement, a quota's
    /// children, a round) converts, so a JSON round trip here would be most of
    /// the controller's and the webhook's CPU at scale (docs/benchmarks.md,
    /// "where the CPU goes at scale"). `to_quota_via_json` is the
    /// reference it must equal.
    pub fn to_quota(&self) -> Result<Quota, serde_json::Error> {
        let m = &self.metadata;
        let creation_timestamp: Option<String> = match &m.creation_timestamp {
            Some(t) => serde_json::from_value(serde_json::to_value(t)?)?,
            None => None,
        };
        let mut status = self
            .status
            .as_ref()
            .map(|s| s.0.clone())
            .unwrap_or_default();
        // Never serialised, so never part of a stored object.
        status.ledger = Default::default();
        Ok(Quota {
            api_version: quota::object::api_version(),
            kind: quota::object::KIND.to_string(),
            metadata: quota::object::ObjectMeta {
                name: m.name.clone().ok_or_else(|| {
                    <serde_json::Error as serde::de::Error>::missing_field("name")
                })?,
                resource_version: m.resource_version.clone(),
                uid: m.uid.clone(),
                creation_timestamp,
                labels: m.labels.clone().unwrap_or_default(),
                annotations: m.annotations.clone().unwrap_or_default(),
            },
            spec: self.engine_spec(),
            status,
        })
    }

    /// The spec as the engine has it.
    pub fn engine_spec(&self) -> quota::QuotaSpec {
        quota::QuotaSpec {
            parent: self.spec.parent.clone(),
            hard: self.spec.hard.clone(),
            max: self.spec.max.clone(),
            budgets: self.spec.budgets.clone(),
            queueing: self.spec.queueing,
            fair_sharing: self.spec.fair_sharing,
            idle: self.spec.idle,
        }
    }

    /// `to_quota` through JSON: what the field-by-field conversion must
    /// equal (tests).
    #[cfg(test)]
    fn to_quota_via_json(&self) -> Result<Quota, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(self)?)
    }

    pub fn from_quota(q: &Quota) -> Result<BizGroupResourceQuota, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(q)?)
    }

    /// `from_quota` for a quota the caller gives up: the status (a busy
    /// quota's largest part: every workload's charge) is moved in, not
    /// converted through JSON; only the small metadata is.
    pub fn from_owned(q: Quota) -> Result<BizGroupResourceQuota, serde_json::Error> {
        let spec = BizGroupResourceQuotaSpec {
            parent: q.spec.parent,
            hard: q.spec.hard,
            max: q.spec.max,
            budgets: q.spec.budgets,
            queueing: q.spec.queueing,
            fair_sharing: q.spec.fair_sharing,
            idle: q.spec.idle,
        };
        Ok(BizGroupResourceQuota {
            metadata: serde_json::from_value(serde_json::to_value(&q.metadata)?)?,
            spec,
            status: Some(Status(q.status)),
        })
    }
}

/// The CRDs as YAML, as `bizrq crd` prints them: the quotas, then the
/// price list (`cluster::prices`).
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let quotas =
        serde_yaml_ng::to_string(&BizGroupResourceQuota::crd()).expect("the CRD serialises");
    let prices =
        serde_yaml_ng::to_string(&super::prices::PriceList::crd()).expect("the CRD serialises");
    format!("{quotas}---\n{prices}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    /// A structural schema prunes what it does not name: every field a
    /// status can carry must be in it, or the API server drops it.
    #[test]
    fn the_status_schema_names_every_status_field() {
        let full: quota::QuotaStatus = serde_json::from_value(serde_json::json!({
            "hard": {"pods": "1"}, "used": {"pods": "1"}, "selfUsed": {"pods": "1"},
            "lastReconcileTime": "2026-11-21T10:00:00Z",
            "children": {"c": {"hard": {"pods": "1"}, "since": "2026-11-21T10:00:00Z", "uid": "u"}},
            "workloads": {"apps/Deployment/ns/w": {"podSets": [], "since": "2026-11-21T10:00:00Z", "uid": "u"}},
            "cashAccrued": {"cash/pods": "1"},
            "loans": {"c": {"amount": {"pods": "1"}, "since": "2026-11-21T10:00:00Z"}},
            "lent": {"pods": "1"}, "borrowed": {"pods": "1"},
            "reclaim": {"apps/Deployment/ns/w": {"action": "suspend", "frees": {"pods": "1"}, "marked": "2026-11-21T10:00:00Z", "due": "2026-11-21T10:05:00Z"}},
            "transfers": {"7": {"children": {"c": {"pods": "2"}}, "since": "2026-11-21T10:00:00Z", "decision": {"outcome": "committed"}}},
            "summary": {"gpu": "1/2", "cardHoursLeft": "3", "borrowing": "pods=1", "reclaimPending": 1},
            "readable": {"cash/pods": "1 of 4 pod-hours used, 3 left"},
            "refunds": {"batch/Job/ns/j": {"mark": "2026-11-21T10:00:00Z", "at": "2026-11-21T10:05:00Z", "from": "2026-11-21T09:00:00Z", "to": "2026-11-21T10:05:00Z", "amounts": {"cash/pods": "1"}}},
            "exhausted": {"cash/pods": "2026-11-21T10:00:00Z"},
            "users": {"apps/Deployment/ns/w": "alice"},
            "fairSharing": {"weight": 2, "share": "0.25", "dominant": "pods"}
        }))
        .unwrap();
        let fields = serde_json::to_value(&full).unwrap();
        let crd = serde_json::to_value(<BizGroupResourceQuota as kube::CustomResourceExt>::crd())
            .unwrap();
        let props = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"];
        for k in fields.as_object().unwrap().keys() {
            assert!(
                props.get(k).is_some(),
                "status.{k} is missing from the CRD schema"
            );
        }
        assert_eq!(
            fields.as_object().unwrap().len(),
            18,
            "a new status field: add it to the schema"
        );
        let summary = serde_json::to_value(full.summary.unwrap()).unwrap();
        for k in summary.as_object().unwrap().keys() {
            assert!(
                props["summary"]["properties"].get(k).is_some(),
                "status.summary.{k} is missing from the CRD schema"
            );
        }
    }

    /// Moving the status in (the write path's `from_owned`) makes the
    /// object the JSON conversion (`from_quota`) makes, whatever it holds.
    #[test]
    fn an_owned_quota_becomes_the_object_its_json_would() {
        let q: Quota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "team", "resourceVersion": "42", "uid": "u-1",
                "creationTimestamp": "2026-11-21T10:00:00Z", "labels": {"a": "b"},
                "annotations": {"bizrq.io/x": "y"}},
            "spec": {"parent": "dept", "hard": {"pods": "4", "cash/pods": "10"},
                "max": {"pods": "6"}},
            "status": {
                "hard": {"pods": "4"}, "used": {"pods": "1"}, "selfUsed": {"pods": "1"},
                "workloads": {"apps/Deployment/ns/w": {"podSets": [], "since": "2026-11-21T10:00:00Z", "uid": "u"}},
                "cashAccrued": {"cash/pods": "1"},
                "loans": {"c": {"amount": {"pods": "1"}, "since": "2026-11-21T10:00:00Z"}},
                "summary": {"gpu": "1/2", "cardHoursLeft": "3", "borrowing": "pods=1", "reclaimPending": 1}
            }
        }))
        .unwrap();
        let converted = BizGroupResourceQuota::from_quota(&q).unwrap();
        let moved = BizGroupResourceQuota::from_owned(q.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&moved).unwrap(),
            serde_json::to_value(&converted).unwrap()
        );
        assert_eq!(moved.to_quota().unwrap(), q);
        assert_eq!(
            moved.to_quota().unwrap(),
            moved.to_quota_via_json().unwrap()
        );
    }

    /// The watch's copy becomes the quota its JSON would, whatever the
    /// object holds: metadata the engine ignores, an empty status, a
    /// queue, loans, budgets and a summary.
    #[test]
    fn a_watched_object_becomes_the_quota_its_json_would() {
        let objects = [
            serde_json::json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
                "metadata": {"name": "bare", "resourceVersion": "7"},
                "spec": {"hard": {"pods": "4"}}}),
            serde_json::json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
                "metadata": {"name": "team", "resourceVersion": "42", "uid": "u-1",
                    "generation": 3, "managedFields": [{"manager": "kubectl"}],
                    "creationTimestamp": "2026-11-21T10:00:00Z", "labels": {"a": "b"},
                    "annotations": {"bizrq.io/x": "y"}, "finalizers": ["f"]},
                "spec": {"parent": "dept", "hard": {"requests.cpu": "20", "cash/pods": "10"},
                    "max": {"requests.cpu": "120"},
                    "queueing": {"mode": "Queue", "order": {"kind": "BestEffortFifo", "agingSeconds": 60}},
                    "fairSharing": {"weight": 2}},
                "status": {
                    "hard": {"requests.cpu": "20"}, "used": {"requests.cpu": "1"},
                    "selfUsed": {"requests.cpu": "1"},
                    "workloads": {"batch/Job/ns/w": {"podSets": [], "since": "2026-11-21T10:00:00Z", "uid": "u"}},
                    "queue": [{"workloadRef": "batch/Job/ns/q", "since": "2026-11-21T10:00:01Z",
                        "podSets": [], "submittedBy": "alice", "position": 1,
                        "waiting": "Quota", "reason": "20 free, 25 needed"}],
                    "users": {"batch/Job/ns/w": "alice"},
                    "cashAccrued": {"cash/pods": "1"},
                    "loans": {"c": {"amount": {"requests.cpu": "1"}, "since": "2026-11-21T10:00:00Z"}},
                    "summary": {"gpu": "1/2", "cardHoursLeft": "3", "borrowing": "pods=1", "reclaimPending": 1}
                }
            }),
        ];
        for o in objects {
            let k: BizGroupResourceQuota = serde_json::from_value(o).unwrap();
            assert_eq!(k.to_quota().unwrap(), k.to_quota_via_json().unwrap());
        }
    }

    #[test]
    fn names_match_the_engine() {
        assert_eq!(BizGroupResourceQuota::group(&()), quota::object::API_GROUP);
        assert_eq!(
            BizGroupResourceQuota::version(&()),
            quota::object::API_VERSION
        );
        assert_eq!(BizGroupResourceQuota::kind(&()), quota::object::KIND);
        assert_eq!(BizGroupResourceQuota::plural(&()), quota::object::PLURAL);
        use kube::CustomResourceExt;
        assert_eq!(
            BizGroupResourceQuota::shortnames(),
            &[quota::object::SHORT_NAME]
        );
    }

    #[test]
    fn committed_crd_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crd.yaml");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == crd_yaml(),
            "deploy/crd.yaml differs from the Rust types; regenerate it with: cargo run -p bizrq -- crd > deploy/crd.yaml"
        );
    }

    #[test]
    fn crd_is_cluster_scoped_with_status_and_columns() {
        use kube::CustomResourceExt;
        let crd = BizGroupResourceQuota::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let v = &crd.spec.versions[0];
        assert!(v
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some());
        let cols: Vec<&str> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            cols,
            [
                "Parent",
                "GPU",
                "Card-hours Left",
                "Borrowing",
                "Weight",
                "Share",
                "Reclaim",
                "Queued",
                "Age"
            ]
        );
    }

    fn schema() -> Value {
        let crd = serde_json::to_value(<BizGroupResourceQuota as kube::CustomResourceExt>::crd())
            .unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    fn rules(node: &Value) -> Vec<String> {
        node["x-kubernetes-validations"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r["rule"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `kubectl explain` reads these: the object says what it is, and every
    /// field it names says what it holds.
    #[test]
    fn the_crd_describes_the_object_and_every_field() {
        let root = schema();
        let about = root["description"].as_str().unwrap();
        assert!(about.starts_with("A business group's quota"), "{about}");
        assert!(!about.contains("Auto-generated"));
        fn walk(path: &str, node: &Value) {
            for (k, v) in node["properties"].as_object().into_iter().flatten() {
                let p = format!("{path}.{k}");
                assert!(
                    v["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{p} has no description"
                );
                walk(&p, v);
            }
        }
        walk("", &root);
    }

    /// What needs only the object itself is enforced by the API server, so
    /// a write that bypasses the webhook still cannot store it.
    #[test]
    fn the_schema_carries_the_rules_a_bypassing_write_must_meet() {
        let root = schema();
        let root_rules = rules(&root);
        assert!(root_rules
            .iter()
            .any(|r| r.contains("self.metadata.name.matches(")));
        assert!(root_rules
            .iter()
            .any(|r| r.contains("self.spec.parent != self.metadata.name")));
        let spec = &root["properties"]["spec"];
        assert_eq!(
            rules(spec),
            [
                "!has(self.max) || self.max.all(k, has(self.hard) && k in self.hard)",
                "!has(self.max) || self.max.all(k, !k.startsWith('cash/'))"
            ]
        );
        let parent = &spec["properties"]["parent"];
        assert_eq!(rules(parent), ["self == oldSelf"]);
        assert_eq!(parent["maxLength"], 253);
        for list in ["hard", "max"] {
            let l = &spec["properties"][list];
            assert_eq!(l["maxProperties"], MAX_KEYS, "{list}");
            let v = &l["additionalProperties"];
            assert_eq!(v["x-kubernetes-int-or-string"], true, "{list}");
            assert_eq!(v["pattern"], QUANTITY_PATTERN, "{list}");
            assert_eq!(v["minimum"].as_f64(), Some(0.0), "{list}");
        }
    }

    /// CEL failures of `object` (with `old` for an update), evaluated as
    /// the API server would, by kube-cel.
    fn refusals(object: &Value, old: Option<&Value>) -> Vec<String> {
        match kube_cel::Validator::new().validate(&schema(), object, old) {
            Ok(()) => Vec::new(),
            Err(e) => e
                .into_vec()
                .into_iter()
                .map(|e| {
                    // Only a rule that ran and said no counts; a rule the
                    // evaluator could not run would hide a broken rule.
                    assert_eq!(e.kind, kube_cel::ErrorKind::ValidationFailure, "{e:?}");
                    e.message
                })
                .collect(),
        }
    }

    fn quota_object(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "bizrq.io/v1", "kind": "BizGroupResourceQuota",
            "metadata": {"name": name}, "spec": spec})
    }

    /// The rules pass real quotas and refuse each kind of nonsense a write
    /// that bypasses the webhook could bring.
    #[test]
    fn the_rules_refuse_nonsense_and_pass_real_quotas() {
        let good = json!({"parent": "ai", "hard": {"requests.nvidia.com/gpu": "16", "pods": 10,
            "cash/requests.nvidia.com/gpu": "1000"}, "max": {"requests.nvidia.com/gpu": "24"}});
        assert_eq!(
            refusals(&quota_object("nlp-team", good.clone()), None),
            Vec::<String>::new()
        );
        let root = json!({"parent": "", "hard": {"pods": 0}});
        assert_eq!(
            refusals(&quota_object("ai", root), None),
            Vec::<String>::new()
        );
        let refused = |name: &str, spec: Value, why: &str| {
            let r = refusals(&quota_object(name, spec), None);
            assert!(
                r.iter().any(|m| m.contains(why)),
                "{name}: {r:?} lacks {why:?}"
            );
        };
        refused(
            "nlp-team",
            json!({"parent": "ai", "hard": {"pods": 1}, "max": {"requests.cpu": 2}}),
            "every key of spec.max",
        );
        refused(
            "nlp-team",
            json!({"parent": "ai", "hard": {"cash/pods": 1}, "max": {"cash/pods": 2}}),
            "cannot hold a cash/ key",
        );
        refused(
            "nlp-team",
            json!({"parent": "nlp-team", "hard": {}}),
            "own parent",
        );
        refused(&"a".repeat(64), json!({"hard": {}}), "at most 63");
        refused("Nlp_Team", json!({"hard": {}}), "at most 63");
        let moved = quota_object("nlp-team", json!({"parent": "cv", "hard": {"pods": 10}}));
        let before = quota_object("nlp-team", good);
        let r = refusals(&moved, Some(&before));
        assert!(
            r.iter().any(|m| m.contains("spec.parent cannot change")),
            "{r:?}"
        );
    }

    /// The quotas `deploy/examples/` tells people to apply pass the rules.
    #[test]
    fn the_example_quotas_pass_the_rules() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/quotas.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let mut seen = 0;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let obj = Value::deserialize(doc).unwrap();
            if obj["kind"] == quota::object::KIND {
                assert_eq!(refusals(&obj, None), Vec::<String>::new(), "{obj}");
                seen += 1;
            }
        }
        assert!(seen > 0);
    }

    /// The pattern must accept every quantity bizrq writes and that a
    /// person may write, and refuse signs and garbage.
    #[test]
    fn the_quantity_pattern_agrees_with_the_parser() {
        let re = regex::Regex::new(QUANTITY_PATTERN).unwrap();
        for ok in [
            "16", "500m", "1.5Gi", "1e3", ".5", "2.", "100Mi", "4060278n", "3E-2", "+1",
        ] {
            assert!(re.is_match(ok), "{ok}");
            let q: quota::Quantity = ok.parse().unwrap();
            assert!(re.is_match(&q.to_string()), "{ok} prints as {q}");
        }
        for bad in ["-1", "1.5 Gi", "", "abc", "1Gb", "0x10", "1e"] {
            assert!(!re.is_match(bad), "{bad}");
        }
        let name = regex::Regex::new(NAME_PATTERN).unwrap();
        for ok in ["nlp-team", "a", "a.b-c", "0"] {
            assert!(name.is_match(ok), "{ok}");
            quota::tree::validate_name(ok).unwrap();
        }
        for bad in ["-a", "a-", "A", "a..b", "a_b", ""] {
            assert!(!name.is_match(bad), "{bad}");
        }
    }

    #[test]
    fn converts_both_ways_with_status_ledgers() {
        let mut q = Quota::new(
            "nlp-team",
            quota::QuotaSpec {
                parent: "ai".into(),
                hard: [("requests.nvidia.com/gpu".to_string(), "16".parse().unwrap())].into(),
                max: Default::default(),
                budgets: Default::default(),
                queueing: Default::default(),
                fair_sharing: Default::default(),
                idle: None,
            },
        );
        q.metadata.resource_version = Some("42".into());
        q.status.children.insert(
            "cv".into(),
            quota::object::Carve {
                hard: Default::default(),
                since: "2026-11-21T00:00:00.000Z".into(),
                uid: String::new(),
            },
        );
        let k = BizGroupResourceQuota::from_quota(&q).unwrap();
        assert_eq!(k.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(k.spec.hard, q.spec.hard);
        assert_eq!(k.to_quota().unwrap(), q);
    }
}
