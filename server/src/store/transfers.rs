//! The `transfers` table (migration 0005): requests, decisions and the
//! progress of their execution. Every change of a row's status is one
//! guarded `UPDATE … WHERE status = …`, so two replicas acting on the same
//! transfer cannot both move it: the loser touches no row and says so.

use super::sql::rows::to_json;
use super::sql::SqlStore;
use super::StoreError;
use quota::object::transfers::Decision;
use quota::transfer::Plan;
use quota::ResourceList;
use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TransferStatus {
    /// Waiting for an approver (until `expires_at`).
    Requested,
    /// Approved, not running: waiting for another transfer holding the same
    /// quotas, or (a loan's return) for room. The sweep runs it.
    Approved,
    /// Refused by an approver, or by the re-validation at approval.
    Rejected,
    /// Nobody decided before `expires_at`.
    Expired,
    /// Running (an executor holds the lease, or crashed holding it).
    Executing,
    Done,
    /// Stopped after its commit because a quota on the way was changed
    /// behind its holds (see `result`).
    Failed,
}

impl TransferStatus {
    pub const ALL: [TransferStatus; 7] = [
        TransferStatus::Requested,
        TransferStatus::Approved,
        TransferStatus::Rejected,
        TransferStatus::Expired,
        TransferStatus::Executing,
        TransferStatus::Done,
        TransferStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TransferStatus::Requested => "requested",
            TransferStatus::Approved => "approved",
            TransferStatus::Rejected => "rejected",
            TransferStatus::Expired => "expired",
            TransferStatus::Executing => "executing",
            TransferStatus::Done => "done",
            TransferStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<TransferStatus> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// No further change will happen.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TransferStatus::Rejected
                | TransferStatus::Expired
                | TransferStatus::Done
                | TransferStatus::Failed
        )
    }
}

impl std::fmt::Display for TransferStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One transfer as stored. Times are epoch milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transfer {
    pub id: i64,
    /// None: from the parent of `to_quota`.
    pub from_quota: Option<String>,
    pub to_quota: String,
    pub amounts: ResourceList,
    pub reason: String,
    pub requested_by: String,
    pub requested_at: i64,
    pub expires_at: i64,
    pub status: TransferStatus,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub decision_note: Option<String>,
    /// Set when the execution starts changing quotas, never changed after.
    pub plan: Option<Plan>,
    /// The decision taken at the common ancestor, once it is known here.
    pub outcome: Option<Outcome>,
    /// Why it was rejected or failed; the plan's warnings when done.
    pub result: Option<String>,
    pub finished_at: Option<i64>,
    pub lease_until: Option<i64>,
    /// A loan: given back (by transfer `reverted_by`) at this time.
    pub revert_at: Option<i64>,
    /// This transfer gives back loan #`reverts`.
    pub reverts: Option<i64>,
    pub reverted_by: Option<i64>,
    /// `move` (keys of hard between quotas) or `topUp` (one cash key's
    /// current period of `to_quota`, docs/budgets.md §5).
    #[serde(default)]
    pub kind: TransferKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_up: Option<TopUp>,
}

/// What a transfer changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TransferKind {
    /// Moves amounts of keys of hard (the original transfers and loans).
    #[default]
    Move,
    /// Adds to one cash key's current period of `to_quota`.
    TopUp,
}

impl TransferKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferKind::Move => "move",
            TransferKind::TopUp => "topUp",
        }
    }
}

/// A top-up's own part of its row (column `top_up`, JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopUp {
    pub source: quota::object::budgets::Source,
    /// The parent that gives it (source `parent`), as at the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// When its unspent part is withdrawn (epoch ms); none: it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    /// The period start of a policy's scheduled top-up from the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_for: Option<String>,
    /// When the expiry was applied, and what it withdrew (resource-hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<quota::Quantity>,
}

impl Transfer {
    /// The id the quota ledgers know it by (`status.transfers`).
    pub fn key(&self) -> String {
        self.id.to_string()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Committed,
    Aborted,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::Aborted => "aborted",
        }
    }

    pub fn of(d: &Decision) -> Outcome {
        match d {
            Decision::Committed => Outcome::Committed,
            Decision::Aborted { .. } => Outcome::Aborted,
        }
    }
}

/// Which transfers `list` returns, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferFilter {
    /// Any of these (empty: all).
    #[serde(default)]
    pub statuses: Vec<TransferStatus>,
    /// From or to this quota.
    #[serde(default)]
    pub quota: Option<String>,
    #[serde(default)]
    pub requested_by: Option<String>,
    /// Only ids below this (paging).
    #[serde(default)]
    pub before_id: Option<i64>,
    /// At most this many (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<i64>,
}

/// A row to insert.
pub struct NewTransfer<'a> {
    pub from_quota: Option<&'a str>,
    pub to_quota: &'a str,
    pub amounts: &'a ResourceList,
    pub reason: &'a str,
    pub requested_by: &'a str,
    pub requested_at: i64,
    pub expires_at: i64,
    pub revert_at: Option<i64>,
    pub top_up: Option<&'a TopUp>,
}

const COLUMNS: &str = "id, from_quota, to_quota, amounts, reason, requested_by, requested_at, \
     expires_at, status, decided_by, decided_at, decision_note, plan, outcome, result, \
     finished_at, lease_until, revert_at, reverts, reverted_by, kind, top_up";

fn from_row(row: &AnyRow) -> Result<Transfer, StoreError> {
    let id: i64 = row.try_get("id")?;
    let bad = |what: &str, e: String| {
        StoreError::Backend(format!("transfer {id}: stored {what} is unreadable: {e}"))
    };
    let status: String = row.try_get("status")?;
    let outcome: Option<String> = row.try_get("outcome")?;
    let plan: Option<String> = row.try_get("plan")?;
    let kind: String = row.try_get("kind")?;
    let top_up: Option<String> = row.try_get("top_up")?;
    Ok(Transfer {
        id,
        from_quota: row.try_get("from_quota")?,
        to_quota: row.try_get("to_quota")?,
        amounts: serde_json::from_str(&row.try_get::<String, _>("amounts")?)
            .map_err(|e| bad("amounts", e.to_string()))?,
        reason: row.try_get("reason")?,
        requested_by: row.try_get("requested_by")?,
        requested_at: row.try_get("requested_at")?,
        expires_at: row.try_get("expires_at")?,
        status: TransferStatus::parse(&status).ok_or_else(|| bad("status", status.clone()))?,
        decided_by: row.try_get("decided_by")?,
        decided_at: row.try_get("decided_at")?,
        decision_note: row.try_get("decision_note")?,
        plan: plan
            .map(|p| serde_json::from_str(&p))
            .transpose()
            .map_err(|e| bad("plan", e.to_string()))?,
        outcome: match outcome.as_deref() {
            None => None,
            Some("committed") => Some(Outcome::Committed),
            Some("aborted") => Some(Outcome::Aborted),
            Some(o) => return Err(bad("outcome", o.to_string())),
        },
        result: row.try_get("result")?,
        finished_at: row.try_get("finished_at")?,
        lease_until: row.try_get("lease_until")?,
        revert_at: row.try_get("revert_at")?,
        reverts: row.try_get("reverts")?,
        reverted_by: row.try_get("reverted_by")?,
        kind: match kind.as_str() {
            "move" => TransferKind::Move,
            "topUp" => TransferKind::TopUp,
            k => return Err(bad("kind", k.to_string())),
        },
        top_up: top_up
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| bad("top_up", e.to_string()))?,
    })
}

impl SqlStore {
    /// How many requests `actor` has open (waiting for a decision), how
    /// many it made since an instant and when the first of those was: the
    /// per-user caps on requests.
    pub async fn requests_by(
        &self,
        actor: &str,
        since_ms: i64,
    ) -> Result<(i64, i64, Option<i64>), StoreError> {
        let row = sqlx::query(
            "SELECT \
               COALESCE(SUM(CASE WHEN status = 'requested' THEN 1 ELSE 0 END), 0), \
               COALESCE(SUM(CASE WHEN requested_at >= $2 THEN 1 ELSE 0 END), 0), \
               MIN(CASE WHEN requested_at >= $2 THEN requested_at END) \
             FROM transfers WHERE requested_by = $1 AND reverts IS NULL",
        )
        .bind(actor)
        .bind(since_ms)
        .fetch_one(&self.read)
        .await?;
        Ok((
            row.try_get::<i64, _>(0)?,
            row.try_get::<i64, _>(1)?,
            row.try_get::<Option<i64>, _>(2)?,
        ))
    }

    pub async fn insert_transfer(&self, t: &NewTransfer<'_>) -> Result<Transfer, StoreError> {
        let row = sqlx::query(&format!(
            "INSERT INTO transfers (from_quota, to_quota, amounts, reason, requested_by, \
             requested_at, expires_at, status, revert_at, kind, top_up, top_up_until) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'requested', $8, $9, $10, $11) RETURNING {COLUMNS}"
        ))
        .bind(t.from_quota)
        .bind(t.to_quota)
        .bind(to_json(t.amounts)?)
        .bind(t.reason)
        .bind(t.requested_by)
        .bind(t.requested_at)
        .bind(t.expires_at)
        .bind(t.revert_at)
        .bind(match t.top_up {
            Some(_) => TransferKind::TopUp.as_str(),
            None => TransferKind::Move.as_str(),
        })
        .bind(t.top_up.map(to_json).transpose()?)
        .bind(t.top_up.and_then(|u| u.until))
        .fetch_one(&self.write)
        .await?;
        from_row(&row)
    }

    /// Done top-ups whose expiry is due at `now` and not applied yet.
    pub async fn top_ups_due(&self, now: i64) -> Result<Vec<Transfer>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM transfers WHERE top_up_until IS NOT NULL \
             AND top_up_until <= $1 AND status = 'done' ORDER BY id LIMIT 1000"
        ))
        .bind(now)
        .fetch_all(&self.write)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Records a top-up's applied expiry, once: false when another caller
    /// recorded it first.
    pub async fn set_top_up_expired(&self, id: i64, top_up: &TopUp) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET top_up = $1, top_up_until = NULL \
                 WHERE id = $2 AND top_up_until IS NOT NULL",
            )
            .bind(to_json(top_up)?)
            .bind(id),
        )
        .await
    }

    /// Inserts a policy's scheduled top-up from the parent, approved by
    /// `actor`, under its `schedule_key`: None when a row for that period
    /// exists already (another sweep, another replica).
    #[allow(clippy::too_many_arguments)]
    pub async fn insert_scheduled(
        &self,
        to_quota: &str,
        amounts: &ResourceList,
        top_up: &TopUp,
        schedule_key: &str,
        reason: &str,
        actor: &str,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO transfers (from_quota, to_quota, amounts, reason, requested_by, \
             requested_at, expires_at, status, decided_by, decided_at, kind, top_up, schedule_key) \
             VALUES (NULL, $1, $2, $3, $4, $5, $5, 'approved', $4, $5, 'topUp', $6, $7) RETURNING id",
        )
        .bind(to_quota)
        .bind(to_json(amounts)?)
        .bind(reason)
        .bind(actor)
        .bind(now)
        .bind(to_json(top_up)?)
        .bind(schedule_key)
        .fetch_one(&self.write)
        .await;
        match inserted {
            Ok(row) => Ok(Some(row.try_get(0)?)),
            Err(e) if super::is_unique_violation(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn transfer(&self, id: i64) -> Result<Option<Transfer>, StoreError> {
        // On the writer, as quota reads are: a row just moved is seen moved.
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM transfers WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.write)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    pub async fn transfers(&self, f: &TransferFilter) -> Result<Vec<Transfer>, StoreError> {
        let mut sql = format!("SELECT {COLUMNS} FROM transfers WHERE 1 = 1");
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        if !f.statuses.is_empty() {
            let ps: Vec<String> = f.statuses.iter().map(|_| next()).collect();
            sql.push_str(&format!(" AND status IN ({})", ps.join(", ")));
        }
        if f.quota.is_some() {
            let (a, b) = (next(), next());
            sql.push_str(&format!(" AND (from_quota = {a} OR to_quota = {b})"));
        }
        if f.requested_by.is_some() {
            sql.push_str(&format!(" AND requested_by = {}", next()));
        }
        if f.before_id.is_some() {
            sql.push_str(&format!(" AND id < {}", next()));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", next()));
        let mut q = sqlx::query(&sql);
        for s in &f.statuses {
            q = q.bind(s.as_str());
        }
        if let Some(quota) = &f.quota {
            q = q.bind(quota.as_str()).bind(quota.as_str());
        }
        if let Some(by) = &f.requested_by {
            q = q.bind(by.as_str());
        }
        if let Some(id) = f.before_id {
            q = q.bind(id);
        }
        q = q.bind(f.limit.unwrap_or(100).clamp(1, 1000));
        let rows = q.fetch_all(&self.read).await?;
        rows.iter().map(from_row).collect()
    }

    /// requested → executing, by `actor`, if still requested and not expired
    /// at `now`; the caller then owns it until `lease_until`.
    pub async fn approve_transfer(
        &self,
        id: i64,
        actor: &str,
        now: i64,
        lease_until: i64,
    ) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET status = 'executing', decided_by = $1, decided_at = $2, \
                 lease_until = $3 WHERE id = $4 AND status = 'requested' AND expires_at > $2",
            )
            .bind(actor)
            .bind(now)
            .bind(lease_until)
            .bind(id),
        )
        .await
    }

    /// requested → rejected by `actor`.
    pub async fn reject_transfer(
        &self,
        id: i64,
        actor: &str,
        note: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET status = 'rejected', decided_by = $1, decided_at = $2, \
                 decision_note = $3, finished_at = $2 WHERE id = $4 AND status = 'requested'",
            )
            .bind(actor)
            .bind(now)
            .bind(note)
            .bind(id),
        )
        .await
    }

    /// requested → expired for every request due by `now`; the rows this
    /// call expired (one UPDATE: replicas sweeping at once each get theirs,
    /// so each expiry is reported, and audited, once).
    pub async fn expire_transfers(&self, now: i64) -> Result<Vec<Transfer>, StoreError> {
        let rows = sqlx::query(&format!(
            "UPDATE transfers SET status = 'expired', finished_at = $1 \
             WHERE status = 'requested' AND expires_at <= $1 RETURNING {COLUMNS}"
        ))
        .bind(now)
        .fetch_all(&self.write)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Take (or renew) the lease of an approved or executing transfer whose
    /// lease is free or already ours (`held` = the lease we hold, if any).
    pub async fn lease_transfer(
        &self,
        id: i64,
        now: i64,
        held: Option<i64>,
        lease_until: i64,
    ) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET status = 'executing', lease_until = $1 \
                 WHERE id = $2 AND status IN ('approved', 'executing') \
                 AND (lease_until IS NULL OR lease_until < $3 OR lease_until = $4)",
            )
            .bind(lease_until)
            .bind(id)
            .bind(now)
            .bind(held.unwrap_or(i64::MIN)),
        )
        .await
    }

    /// Transfers with work left that nobody holds the lease of at `now`:
    /// approved or executing ones, and final ones with holds to let go.
    pub async fn transfers_to_run(&self, now: i64) -> Result<Vec<i64>, StoreError> {
        let rows = sqlx::query(
            "SELECT id FROM transfers WHERE \
             (status IN ('approved', 'executing') AND (lease_until IS NULL OR lease_until < $1)) \
             OR (status IN ('done', 'rejected', 'failed') AND lease_until < $1) ORDER BY id",
        )
        .bind(now)
        .fetch_all(&self.write)
        .await?;
        rows.iter()
            .map(|r| r.try_get::<i64, _>(0).map_err(Into::into))
            .collect()
    }

    /// Record the plan, once, before the first quota changes.
    pub async fn set_transfer_plan(&self, id: i64, plan: &Plan) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET plan = $1 \
                 WHERE id = $2 AND status = 'executing' AND plan IS NULL",
            )
            .bind(to_json(plan)?)
            .bind(id),
        )
        .await
    }

    /// Record the decision taken at the common ancestor, once.
    pub async fn set_transfer_outcome(
        &self,
        id: i64,
        outcome: Outcome,
    ) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET outcome = $1 \
                 WHERE id = $2 AND status = 'executing' AND outcome IS NULL",
            )
            .bind(outcome.as_str())
            .bind(id),
        )
        .await
    }

    /// executing → a final status, with what to say about it. The lease
    /// stays until `clear_transfer_lease`: holds may remain to let go.
    pub async fn finish_transfer(
        &self,
        id: i64,
        status: TransferStatus,
        result: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET status = $1, result = $2, finished_at = $3 \
                 WHERE id = $4 AND status = 'executing'",
            )
            .bind(status.as_str())
            .bind(result)
            .bind(now)
            .bind(id),
        )
        .await
    }

    /// Nothing is left to do for this transfer.
    pub async fn clear_transfer_lease(&self, id: i64) -> Result<bool, StoreError> {
        self.changed(sqlx::query("UPDATE transfers SET lease_until = NULL WHERE id = $1").bind(id))
            .await
    }

    /// Take over a final transfer whose lease `held` ran out (its holds are
    /// still to let go).
    pub async fn take_final_lease(
        &self,
        id: i64,
        held: i64,
        lease_until: i64,
    ) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET lease_until = $1 WHERE id = $2 AND lease_until = $3 \
                 AND status IN ('done', 'rejected', 'failed')",
            )
            .bind(lease_until)
            .bind(id)
            .bind(held),
        )
        .await
    }

    /// executing → approved, to run again later from the start (plan and
    /// outcome cleared): it waits for other transfers' holds, or (a loan's
    /// return) for room. `note` says which.
    pub async fn park_transfer(&self, id: i64, note: &str) -> Result<bool, StoreError> {
        self.changed(
            sqlx::query(
                "UPDATE transfers SET status = 'approved', result = $1, lease_until = NULL, \
                 plan = NULL, outcome = NULL WHERE id = $2 AND status = 'executing'",
            )
            .bind(note)
            .bind(id),
        )
        .await
    }

    /// Loans due to be given back at `now`.
    pub async fn loans_due(&self, now: i64) -> Result<Vec<Transfer>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM transfers WHERE status = 'done' AND revert_at IS NOT NULL \
             AND revert_at <= $1 AND reverted_by IS NULL ORDER BY id"
        ))
        .bind(now)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// The transfer giving back `loan`, approved by `actor`, in one
    /// transaction with the loan's `reverted_by`; None if another sweep
    /// made it first.
    pub async fn insert_return(
        &self,
        loan: &Transfer,
        from_quota: &str,
        to_quota: &str,
        actor: &str,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let mut tx = self.write.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO transfers (from_quota, to_quota, amounts, reason, requested_by, \
             requested_at, expires_at, status, decided_by, decided_at, reverts) \
             VALUES ($1, $2, $3, $4, $5, $6, $6, 'approved', $5, $6, $7) RETURNING id",
        )
        .bind(from_quota)
        .bind(to_quota)
        .bind(to_json(&loan.amounts)?)
        .bind(format!("return of loan #{}", loan.id))
        .bind(actor)
        .bind(now)
        .bind(loan.id)
        .fetch_one(&mut *tx)
        .await;
        let id: i64 = match inserted {
            Ok(row) => row.try_get(0)?,
            Err(e) if super::is_unique_violation(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let marked = sqlx::query(
            "UPDATE transfers SET reverted_by = $1 WHERE id = $2 AND reverted_by IS NULL",
        )
        .bind(id)
        .bind(loan.id)
        .execute(&mut *tx)
        .await?;
        if marked.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(id))
    }

    async fn changed<'q>(
        &self,
        q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> Result<bool, StoreError> {
        Ok(q.execute(&self.write).await?.rows_affected() == 1)
    }
}
