//! What the controller keeps in the SQL database, so a restart or a new
//! leader loses nothing: the pod runs (every pod's run, restored at
//! start and flushed every `flush_every` with a watermark saying until
//! when it was current), and the usage samples behind the portal's charts.

use super::Context;
use crate::service::Service;
use crate::store::StoreError;
use quota::pods::PodRun;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Setting holding the last time the controller knew its pod picture was
/// current: pods persisted in the ledger but gone after a restart are
/// charged up to this moment.
pub const WATERMARK_SETTING: &str = "controller_watermark_ms";

/// What the controller keeps in the SQL database: its pod runs (so a
/// restart loses no stretch of any pod), a watermark, and usage samples.
#[async_trait::async_trait]
pub trait History: Send + Sync + 'static {
    async fn load_pod_runs(&self) -> Result<Vec<(String, PodRun)>, StoreError>;
    async fn save_pod_runs(
        &self,
        upserts: &[(String, PodRun)],
        deletes: &[String],
    ) -> Result<(), StoreError>;
    async fn setting(&self, key: &str) -> Result<Option<String>, StoreError>;
    async fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// One usage sample per quota (unchanged ones skipped); how many written.
    async fn record_samples(
        &self,
        at_ms: i64,
        quotas: &[quota::Quota],
    ) -> Result<usize, StoreError>;
    /// Downsampling and retention of old samples.
    async fn compact_samples(&self, now_ms: i64) -> Result<(), StoreError>;
    /// Append an entry to the audit log (what the controller did of its
    /// own accord: refunds, suspensions).
    async fn append_audit(&self, e: &crate::store::audit::AuditRecord) -> Result<(), StoreError>;
    /// Appends budget ledger entries (docs/budgets.md §6): refunds,
    /// top-ups, anything not accrued by a status window. Idempotent: an
    /// entry already stored (same quota, key, reason, workload, model, QoS,
    /// user, start, end and note) is left alone, so a retry writes it once.
    /// Returns how many were new. Any part of the server may call it
    /// (`Context::append_ledger` logs and counts failures).
    async fn append_ledger(
        &self,
        entries: &[quota::object::budgets::Entry],
    ) -> Result<u64, StoreError>;
    /// The entries of one status window of `quota`, `[from_ms, to_ms)`,
    /// appended after the status write that accrued it; written once
    /// (`store::ledger::SqlStore::append_window`).
    async fn append_ledger_window(
        &self,
        quota: &str,
        from_ms: i64,
        to_ms: i64,
        entries: &[quota::object::budgets::Entry],
    ) -> Result<crate::store::ledger::Appended, StoreError>;
    /// Drops the records of ledger windows that ended a day before
    /// `now_ms` (they guard against a window appended twice, which happens
    /// within seconds; each quota's newest stays, since its status's
    /// outbox may be appended again), and rolls the ledger up
    /// (`SqlStore::roll_up_ledger`); the entries' sums stay. Hourly, with
    /// the samples' compaction.
    async fn compact_ledger(&self, _now_ms: i64) -> Result<(), StoreError> {
        Ok(())
    }
    /// A quota was deleted: its role bindings and alert rules go with it.
    async fn forget_quota(&self, _name: &str, _now_ms: i64) -> Result<(), StoreError> {
        Ok(())
    }
    /// The usage of every submitter of `quotas` at `now_ms`, decayed with
    /// `half_life_ms` (docs/queueing.md §11, `SqlStore::submitter_usage`).
    async fn submitter_usage(
        &self,
        _quotas: &[String],
        _now_ms: i64,
        _half_life_ms: i64,
        _max_pairs: usize,
    ) -> Result<Result<quota::submitters::Tally, crate::store::shares::Refused>, StoreError> {
        Ok(Ok(quota::submitters::Tally::new()))
    }
    /// One reading of real usage (`store::real_usage`), written once.
    async fn record_reading(
        &self,
        _from_ms: i64,
        _to_ms: i64,
        _rows: &[quota::real_usage::reading::Row],
        _idle: &[quota::real_usage::idle::IdleNow],
    ) -> Result<crate::store::real_usage::Recorded, StoreError> {
        Ok(crate::store::real_usage::Recorded::Written)
    }
    /// Readings of real usage fail since `since_ms`, for `error`.
    async fn record_real_usage_down(&self, _since_ms: i64, _error: &str) -> Result<(), StoreError> {
        Ok(())
    }
    /// Where the readings of real usage stand.
    async fn real_usage_state(&self) -> Result<quota::real_usage::readings::Readings, StoreError> {
        Ok(Default::default())
    }
    /// The workloads idle at the last reading.
    async fn idle_now(&self) -> Result<Vec<quota::real_usage::idle::IdleNow>, StoreError> {
        Ok(Vec::new())
    }
    /// The reader's alerts judged and stored (`alert_engine::real_usage`):
    /// idle GPUs, and real usage unknown. `suspends`: whether a workload
    /// is batch work idle reclaim suspends.
    async fn judge_real_usage(
        &self,
        _judged: crate::alert_engine::real_usage::Judged<'_>,
        _suspends: for<'w> fn(&'w str) -> bool,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    /// Real usage older than `before_ms` goes.
    async fn forget_real_usage_before(&self, _before_ms: i64) -> Result<u64, StoreError> {
        Ok(0)
    }
    /// A complete list found these quotas: any other's roles and rules go.
    async fn forget_quotas_not_in(
        &self,
        _live: &BTreeSet<String>,
        _now_ms: i64,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl History for crate::store::sql::SqlStore {
    async fn load_pod_runs(&self) -> Result<Vec<(String, PodRun)>, StoreError> {
        crate::store::sql::SqlStore::load_pod_runs(self).await
    }
    async fn save_pod_runs(
        &self,
        upserts: &[(String, PodRun)],
        deletes: &[String],
    ) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::save_pod_runs(self, upserts, deletes).await
    }
    async fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        crate::store::sql::SqlStore::setting(self, key).await
    }
    async fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::set_setting(self, key, value).await
    }
    async fn record_samples(
        &self,
        at_ms: i64,
        quotas: &[quota::Quota],
    ) -> Result<usize, StoreError> {
        crate::store::sql::SqlStore::record_samples(self, at_ms, quotas).await
    }
    async fn compact_samples(&self, now_ms: i64) -> Result<(), StoreError> {
        let stats = crate::store::sql::SqlStore::compact_samples(self, now_ms).await?;
        tracing::debug!(?stats, "usage samples compacted");
        Ok(())
    }
    async fn append_audit(&self, e: &crate::store::audit::AuditRecord) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::append_audit(self, e).await?;
        Ok(())
    }
    async fn append_ledger(
        &self,
        entries: &[quota::object::budgets::Entry],
    ) -> Result<u64, StoreError> {
        crate::store::sql::SqlStore::append_ledger(self, entries).await
    }
    async fn append_ledger_window(
        &self,
        quota: &str,
        from_ms: i64,
        to_ms: i64,
        entries: &[quota::object::budgets::Entry],
    ) -> Result<crate::store::ledger::Appended, StoreError> {
        crate::store::sql::SqlStore::append_window(self, quota, from_ms, to_ms, entries).await
    }
    async fn compact_ledger(&self, now_ms: i64) -> Result<(), StoreError> {
        let n = self
            .forget_ledger_windows(now_ms - crate::store::ledger::KEEP_WINDOWS_MS)
            .await?;
        tracing::debug!(windows = n, "old ledger window records dropped");
        let policy = self.ledger_rollup();
        let rolled = self.roll_up_ledger(&policy, now_ms).await?;
        tracing::debug!(?rolled, "ledger rolled up");
        Ok(())
    }
    async fn forget_quota(&self, name: &str, now_ms: i64) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::forget_quota(self, name, now_ms).await?;
        Ok(())
    }
    async fn submitter_usage(
        &self,
        quotas: &[String],
        now_ms: i64,
        half_life_ms: i64,
        max_pairs: usize,
    ) -> Result<Result<quota::submitters::Tally, crate::store::shares::Refused>, StoreError> {
        crate::store::sql::SqlStore::submitter_usage(self, quotas, now_ms, half_life_ms, max_pairs)
            .await
    }
    async fn forget_quotas_not_in(
        &self,
        live: &BTreeSet<String>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::forget_quotas_not_in(self, live, now_ms).await?;
        Ok(())
    }
    async fn record_reading(
        &self,
        from_ms: i64,
        to_ms: i64,
        rows: &[quota::real_usage::reading::Row],
        idle: &[quota::real_usage::idle::IdleNow],
    ) -> Result<crate::store::real_usage::Recorded, StoreError> {
        crate::store::sql::SqlStore::record_reading(self, from_ms, to_ms, rows, idle).await
    }
    async fn record_real_usage_down(&self, since_ms: i64, error: &str) -> Result<(), StoreError> {
        crate::store::sql::SqlStore::record_real_usage_down(self, since_ms, error).await
    }
    async fn real_usage_state(&self) -> Result<quota::real_usage::readings::Readings, StoreError> {
        crate::store::sql::SqlStore::real_usage_state(self).await
    }
    async fn idle_now(&self) -> Result<Vec<quota::real_usage::idle::IdleNow>, StoreError> {
        crate::store::sql::SqlStore::idle_now(self, None).await
    }
    async fn forget_real_usage_before(&self, before_ms: i64) -> Result<u64, StoreError> {
        crate::store::sql::SqlStore::forget_real_usage_before(self, before_ms).await
    }
    async fn judge_real_usage(
        &self,
        judged: crate::alert_engine::real_usage::Judged<'_>,
        suspends: for<'w> fn(&'w str) -> bool,
    ) -> Result<(), StoreError> {
        let a = crate::alert_engine::real_usage::judge(self, judged, suspends).await?;
        if !a.opened.is_empty() || a.resolved > 0 {
            tracing::info!(
                opened = a.opened.len(),
                resolved = a.resolved,
                "real usage alerts"
            );
        }
        Ok(())
    }
}

/// One append of a window: written, or written before (both final); an
/// overlap with another stored window is logged and final too (a
/// confirmed status window never overlaps another).
async fn append_once(
    h: &dyn History,
    quota: &str,
    from_ms: i64,
    to_ms: i64,
    entries: &[quota::object::budgets::Entry],
) -> Result<(), StoreError> {
    if let crate::store::ledger::Appended::Overlaps { start_ms, end_ms } = h
        .append_ledger_window(quota, from_ms, to_ms, entries)
        .await?
    {
        tracing::error!(quota = %quota, from_ms, to_ms, start_ms, end_ms, "ledger window overlaps one already written; not written");
    }
    Ok(())
}

impl Context {
    /// Load the pod runs an earlier life persisted; returns the
    /// watermark to end runs of pods that vanished meanwhile.
    pub(super) async fn restore(&self) -> anyhow::Result<i64> {
        let Some(h) = &self.history else {
            return Ok(self.now());
        };
        let runs = h.load_pod_runs().await?;
        let n = runs.len();
        self.view.lock().unwrap().restore_runs(runs);
        let watermark = h
            .setting(WATERMARK_SETTING)
            .await?
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| self.now());
        if n > 0 {
            tracing::info!(runs = n, watermark, "pod runs restored");
        }
        Ok(watermark)
    }

    /// Persist pod-run changes and the watermark, so a restart loses no
    /// stretch of any pod.
    pub(super) async fn flush_loop(self: Arc<Self>, h: Arc<dyn History>) {
        loop {
            tokio::time::sleep(self.cfg.flush_every).await;
            if let Err(e) = self.flush(h.as_ref()).await {
                tracing::warn!(error = %e, "persisting pod runs failed; will retry");
            }
        }
    }

    pub async fn flush(&self, h: &dyn History) -> anyhow::Result<()> {
        let now = self.now();
        let (up, del) = self.view.lock().unwrap().take_dirty_runs();
        if !up.is_empty() || !del.is_empty() {
            if let Err(e) = h.save_pod_runs(&up, &del).await {
                self.view.lock().unwrap().redirty(up, del);
                return Err(e.into());
            }
        }
        h.set_setting(WATERMARK_SETTING, &now.to_string()).await?;
        Ok(())
    }

    /// Appends ledger entries (scheduled grants) through the history, if
    /// the controller has one; false when they could not be written (the
    /// caller keeps them to try again: appending is idempotent).
    pub async fn append_ledger(&self, entries: &[quota::object::budgets::Entry]) -> bool {
        let Some(h) = &self.history else {
            return true;
        };
        match h.append_ledger(entries).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, entries = entries.len(), "could not append to the budget ledger");
                false
            }
        }
    }

    /// Appends entries (a refund's) in the background, retried as a
    /// window's append is (6 attempts, backing off from 200 ms; appending
    /// is idempotent). Spawned, so it outlives the reconcile that took
    /// them: a controller stopped the moment its leader lost the Lease
    /// still appends what it wrote, if the process lives on. A process that
    /// dies first leaves them in the status's outbox (`Outbox::extra`),
    /// which the next reconcile appends before it writes over it.
    pub(super) fn append_ledger_soon(&self, entries: Vec<quota::object::budgets::Entry>) {
        let Some(h) = self.history.clone() else {
            return;
        };
        tokio::spawn(async move {
            let mut wait = Duration::from_millis(200);
            for attempt in 1..=6 {
                match h.append_ledger(&entries).await {
                    Ok(_) => return,
                    Err(e) if attempt < 6 => {
                        tracing::debug!(error = %e, entries = entries.len(), "ledger append failed; retrying");
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, entries = ?entries, "could not append to the budget ledger; these entries are not in it");
                    }
                }
            }
        });
    }

    /// One status window's entries, after the write that accrued it
    /// (and carried them in `status.ledgerOutbox`). A failed append is
    /// retried a few times in the background; if all fail, the next
    /// reconcile appends the outbox before it writes again
    /// (`replay_outbox`), so a window is never lost, and never written
    /// twice (the window records).
    pub(super) fn append_window(
        &self,
        quota: &str,
        from_ms: i64,
        to_ms: i64,
        entries: Vec<quota::object::budgets::Entry>,
    ) {
        let Some(h) = self.history.clone() else {
            return;
        };
        let quota = quota.to_string();
        let confirmed = self.ledger_confirmed.clone();
        tokio::spawn(async move {
            let mut wait = Duration::from_millis(200);
            for attempt in 1..=6 {
                match append_once(h.as_ref(), &quota, from_ms, to_ms, &entries).await {
                    Ok(()) => {
                        confirmed
                            .lock()
                            .unwrap()
                            .insert(quota.clone(), (from_ms, to_ms, 0));
                        return;
                    }
                    Err(e) if attempt < 6 => {
                        tracing::debug!(quota = %quota, error = %e, "ledger append failed; retrying");
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                    Err(e) => {
                        tracing::warn!(quota = %quota, from_ms, to_ms, error = %e, "ledger window not appended yet: the next reconcile appends it from the status's outbox");
                    }
                }
            }
        });
    }

    /// Before a status write replaces `outbox` (the window the stored
    /// status accrued): make sure its entries are in the ledger. Appending
    /// is a no-op for a window already written, so this is what recovers a
    /// window whose append was lost (a controller stopped between its
    /// status write and the append). False: not appended now, so the
    /// caller must not write over it.
    pub(super) async fn replay_outbox(
        &self,
        quota: &str,
        outbox: Option<&quota::object::budgets::Outbox>,
    ) -> bool {
        let (Some(h), Some(o)) = (&self.history, outbox) else {
            return true;
        };
        if self.ledger_confirmed.lock().unwrap().get(quota) == Some(&o.key()) {
            return true;
        }
        let appended = async {
            if o.has_window() {
                append_once(h.as_ref(), quota, o.from_ms, o.to_ms, &o.entries).await?;
            }
            if !o.extra.is_empty() {
                h.append_ledger(&o.extra).await?;
            }
            Ok::<_, StoreError>(())
        };
        match appended.await {
            Ok(()) => {
                self.ledger_confirmed
                    .lock()
                    .unwrap()
                    .insert(quota.to_string(), o.key());
                true
            }
            Err(e) => {
                tracing::warn!(quota = %quota, from_ms = o.from_ms, to_ms = o.to_ms, error = %e, "could not append the status's ledger outbox; not writing over it");
                false
            }
        }
    }

    /// A quota was deleted: its roles and alert rules go.
    pub(super) async fn forget_quota(&self, name: &str) {
        // Its copy of the last round's queue goes too (a quota created
        // again under the name starts with none).
        self.service.forget_rounds(|q| q != name);
        self.scheduler.forget(|q| q != name);
        self.view.lock().unwrap().forget_arrivals(|q| q != name);
        self.deleted_checks.forget(name);
        if let Some(h) = &self.history {
            if let Err(e) = h.forget_quota(name, self.now()).await {
                tracing::warn!(quota = %name, error = %e, "could not remove the roles and alert rules of a deleted quota");
            }
        }
    }

    /// Roles and alert rules of quotas not in `live` (a complete list) go:
    /// their deletion was missed.
    pub(super) async fn forget_quotas_not_in(&self, live: &BTreeSet<String>) {
        self.service.forget_rounds(|q| live.contains(q));
        self.scheduler.forget(|q| live.contains(q));
        self.view
            .lock()
            .unwrap()
            .forget_arrivals(|q| live.contains(q));
        if let Some(h) = &self.history {
            if let Err(e) = h.forget_quotas_not_in(live, self.now()).await {
                tracing::warn!(error = %e, "could not remove the roles and alert rules of deleted quotas");
            }
        }
    }
}

/// Usage samples for the portal's charts: every quota once per `every`
/// (the store skips unchanged ones), compacted hourly. Both modes run it.
pub async fn sample_forever(service: Arc<Service>, h: Arc<dyn History>, every: Duration) {
    let every = every.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    let mut last_compaction: Option<i64> = None;
    loop {
        tick.tick().await;
        let now = service.now();
        // The forest the service keeps (`Service::forest`): each tick reads
        // again only the quotas written since the last one read it.
        let started = std::time::Instant::now();
        match service.forest().await {
            Ok(all) => {
                if let Err(e) = h.record_samples(now, &all.quotas).await {
                    tracing::warn!(error = %e, "recording usage samples failed");
                }
                service
                    .metrics
                    .background_done("usage_sample", started, all.quotas.len());
            }
            Err(e) => tracing::warn!(error = %e, "cannot list quotas for samples"),
        }
        if last_compaction.is_none_or(|t| now - t >= 3_600_000) {
            last_compaction = Some(now);
            if let Err(e) = h.compact_samples(now).await {
                tracing::warn!(error = %e, "compacting usage samples failed");
            }
            if let Err(e) = h.compact_ledger(now).await {
                tracing::warn!(error = %e, "dropping old ledger window records failed");
            }
        }
    }
}
