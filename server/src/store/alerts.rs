//! Alerts in SQL (migration 0006): rules, alerts, users' preferences and the
//! email outbox. An evaluation's alerts and their emails are written in one
//! transaction; an alert already open (the same fingerprint, possibly opened
//! by another replica a moment ago) is skipped together with its emails.

use super::outbox::{self, NewMail};
use super::sql::query::Params;
use super::sql::SqlStore;
use super::StoreError;
use crate::alerts::{email, Condition, Evaluation, Kind, Level, Rule};
// The alert as stored is a plain type of the alert rules, which sit below the store.
use crate::alerts::Alert;
use sqlx::any::AnyRow;
use sqlx::Row;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default)]
pub struct AlertFilter {
    pub quota: Option<String>,
    pub kind: Option<Kind>,
    /// Some(true): open only; Some(false): resolved only.
    pub open: Option<bool>,
    /// Only on these quotas (what a non-admin may see).
    pub quotas_in: Option<Vec<String>>,
    /// Paging: only alerts older than this id.
    pub before: Option<i64>,
    /// Only alerts of this level.
    pub level: Option<Level>,
    /// Only alerts that still ask for someone at this time: not
    /// acknowledged, not snoozed past it.
    pub loud_at: Option<i64>,
}

/// A user an alert goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipient {
    pub user_id: i64,
    pub email: String,
    /// In the daily digest rather than an email of its own.
    pub digest: bool,
}

/// When an evaluation's view of each quota was current: `by_quota` where
/// known (a write's object: the moment before the write), else `default`
/// (a sweep: before its list).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub default: i64,
    pub by_quota: BTreeMap<String, i64>,
    /// Quotas seen only in this process's cache, of no known moment (a
    /// write's ancestors): an update of their alerts keeps the moment the
    /// alert has, as a view of unknown age must not make it newer.
    pub cached: BTreeSet<String>,
}

impl Observed {
    pub fn at(at_ms: i64) -> Observed {
        Observed {
            default: at_ms,
            ..Observed::default()
        }
    }

    pub fn of(&self, quota: &str) -> i64 {
        self.by_quota.get(quota).copied().unwrap_or(self.default)
    }
}

/// What `apply_evaluation` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Ids of the alerts it opened.
    pub opened: Vec<i64>,
    pub resolved: usize,
    /// Open alerts whose keys it updated.
    pub updated: usize,
    /// Ids of the updated alerts that asked for someone again
    /// (`alerts::escalates`): acknowledgement and snooze cleared, emailed.
    pub escalated: Vec<i64>,
}

/// A user's choice for one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pref {
    pub muted: bool,
    pub digest: bool,
}

const ALERT_COLUMNS: &str =
    "id, fingerprint, kind, quota, key, level, message, numbers, opened_at, resolved_at, \
     acked_by, acked_at, snoozed_until, snoozed_by, keys, merged_into";

fn alert_from_row(r: &AnyRow) -> Result<Alert, StoreError> {
    let kind: String = r.try_get("kind")?;
    let level: String = r.try_get("level")?;
    let numbers: String = r.try_get("numbers")?;
    let keys: String = r.try_get("keys")?;
    Ok(Alert {
        id: r.try_get("id")?,
        fingerprint: r.try_get("fingerprint")?,
        kind: Kind::parse(&kind)
            .ok_or_else(|| StoreError::Backend(format!("unknown alert kind '{kind}' stored")))?,
        quota: r.try_get("quota")?,
        key: r.try_get("key")?,
        level: Level::parse(&level)
            .ok_or_else(|| StoreError::Backend(format!("unknown alert level '{level}' stored")))?,
        message: r.try_get("message")?,
        numbers: serde_json::from_str(&numbers).unwrap_or(serde_json::Value::Null),
        keys: serde_json::from_str(&keys).unwrap_or_default(),
        opened_at: r.try_get("opened_at")?,
        resolved_at: r.try_get("resolved_at")?,
        merged_into: r.try_get("merged_into")?,
        acked: match (
            r.try_get::<Option<String>, _>("acked_by")?,
            r.try_get::<Option<i64>, _>("acked_at")?,
        ) {
            (Some(by), Some(at)) => Some((by, at)),
            _ => None,
        },
        snoozed: match (
            r.try_get::<Option<String>, _>("snoozed_by")?,
            r.try_get::<Option<i64>, _>("snoozed_until")?,
        ) {
            (Some(by), Some(until)) => Some((by, until)),
            _ => None,
        },
    })
}

fn rule_from_row(r: &AnyRow) -> Result<(String, Rule), StoreError> {
    Ok((
        r.try_get("quota")?,
        Rule {
            key: r.try_get("key")?,
            warn_percent: r.try_get::<i64, _>("warn_percent")?,
            crit_percent: r.try_get::<i64, _>("crit_percent")?,
            forecast_horizon_hours: r.try_get::<Option<i64>, _>("forecast_horizon_hours")?,
            allocation_percent: r.try_get::<Option<i64>, _>("allocation_percent")?,
        },
    ))
}

const RULE_COLUMNS: &str =
    "quota, key, warn_percent, crit_percent, forecast_horizon_hours, allocation_percent";

impl SqlStore {
    pub async fn alert_rules(&self, quota: &str) -> Result<Vec<Rule>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE quota = $1 ORDER BY key"
        ))
        .bind(quota)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| rule_from_row(r).map(|(_, r)| r))
            .collect()
    }

    /// Every quota's rules, for a sweep over all quotas.
    pub async fn all_alert_rules(&self) -> Result<BTreeMap<String, Vec<Rule>>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules ORDER BY quota, key"
        ))
        .fetch_all(&self.read)
        .await?;
        let mut out: BTreeMap<String, Vec<Rule>> = BTreeMap::new();
        for r in &rows {
            let (quota, rule) = rule_from_row(r)?;
            out.entry(quota).or_default().push(rule);
        }
        Ok(out)
    }

    /// The rules of `quotas`, by quota.
    pub async fn alert_rules_of(
        &self,
        quotas: &[String],
    ) -> Result<BTreeMap<String, Vec<Rule>>, StoreError> {
        let mut out: BTreeMap<String, Vec<Rule>> = BTreeMap::new();
        if quotas.is_empty() {
            return Ok(out);
        }
        let sql = format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE quota IN ({}) ORDER BY quota, key",
            Params::on(self.backend).list(quotas.len())
        );
        let mut q = sqlx::query(&sql);
        for name in quotas {
            q = q.bind(name);
        }
        for r in &q.fetch_all(&self.read).await? {
            let (quota, rule) = rule_from_row(r)?;
            out.entry(quota).or_default().push(rule);
        }
        Ok(out)
    }

    pub async fn set_alert_rule(&self, quota: &str, rule: &Rule) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO alert_rules (quota, key, warn_percent, crit_percent, forecast_horizon_hours, \
             allocation_percent) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (quota, key) DO UPDATE SET \
             warn_percent = excluded.warn_percent, crit_percent = excluded.crit_percent, \
             forecast_horizon_hours = excluded.forecast_horizon_hours, \
             allocation_percent = excluded.allocation_percent",
        )
        .bind(quota)
        .bind(&rule.key)
        .bind(rule.warn_percent as i32)
        .bind(rule.crit_percent as i32)
        .bind(rule.forecast_horizon_hours.map(|h| h as i32))
        .bind(rule.allocation_percent.map(|p| p as i32))
        .execute(&self.write)
        .await?;
        Ok(())
    }

    pub async fn delete_alert_rule(&self, quota: &str, key: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM alert_rules WHERE quota = $1 AND key = $2")
            .bind(quota)
            .bind(key)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Every open alert, oldest first.
    pub async fn open_alerts(&self) -> Result<Vec<Alert>, StoreError> {
        self.alerts(
            &AlertFilter {
                open: Some(true),
                ..AlertFilter::default()
            },
            i64::MAX,
        )
        .await
    }

    /// How many alerts match `f` (the navigation's badge: one count, not
    /// every open alert of a big tree read for it).
    pub async fn count_alerts(&self, f: &AlertFilter) -> Result<i64, StoreError> {
        if f.quotas_in.as_ref().is_some_and(|q| q.is_empty()) {
            return Ok(0);
        }
        let rows = self
            .alert_rows("SELECT COUNT(*) AS n FROM alerts WHERE 1 = 1", f, None)
            .await?;
        match rows.first() {
            Some(row) => Ok(row.try_get::<i64, _>("n")?),
            None => Ok(0),
        }
    }

    /// Alerts matching `f`, newest first (by id), at most `limit`.
    pub async fn alerts(&self, f: &AlertFilter, limit: i64) -> Result<Vec<Alert>, StoreError> {
        if f.quotas_in.as_ref().is_some_and(|q| q.is_empty()) {
            return Ok(Vec::new());
        }
        let select = format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE 1 = 1");
        let rows = self.alert_rows(&select, f, Some(limit)).await?;
        rows.iter().map(alert_from_row).collect()
    }

    /// The rows of `select` (ending in a WHERE clause) narrowed by `f`,
    /// newest first and at most `limit` when given.
    async fn alert_rows(
        &self,
        select: &str,
        f: &AlertFilter,
        limit: Option<i64>,
    ) -> Result<Vec<AnyRow>, StoreError> {
        let mut sql = select.to_string();
        let mut n = 0;
        let mut arg = || {
            n += 1;
            format!("${n}")
        };
        if f.quota.is_some() {
            sql.push_str(&format!(" AND quota = {}", arg()));
        }
        if f.kind.is_some() {
            sql.push_str(&format!(" AND kind = {}", arg()));
        }
        if f.before.is_some() {
            sql.push_str(&format!(" AND id < {}", arg()));
        }
        if f.level.is_some() {
            sql.push_str(&format!(" AND level = {}", arg()));
        }
        if let Some(names) = &f.quotas_in {
            let list: Vec<String> = names.iter().map(|_| arg()).collect();
            sql.push_str(&format!(" AND quota IN ({})", list.join(", ")));
        }
        if f.loud_at.is_some() {
            let at = arg();
            sql.push_str(&format!(
                " AND acked_at IS NULL AND (snoozed_until IS NULL OR snoozed_until <= {at})"
            ));
        }
        match f.open {
            Some(true) => sql.push_str(" AND resolved_at IS NULL"),
            Some(false) => sql.push_str(" AND resolved_at IS NOT NULL"),
            None => {}
        }
        if limit.is_some() {
            sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", arg()));
        }
        let mut q = sqlx::query(&sql);
        if let Some(quota) = &f.quota {
            q = q.bind(quota);
        }
        if let Some(kind) = f.kind {
            q = q.bind(kind.as_str());
        }
        if let Some(before) = f.before {
            q = q.bind(before);
        }
        if let Some(level) = f.level {
            q = q.bind(level.as_str());
        }
        for name in f.quotas_in.iter().flatten() {
            q = q.bind(name);
        }
        if let Some(at) = f.loud_at {
            q = q.bind(at);
        }
        if let Some(limit) = limit {
            q = q.bind(limit);
        }
        Ok(q.fetch_all(&self.read).await?)
    }

    /// Acknowledges an open alert. False: no such open alert (resolved
    /// meanwhile, or never there).
    pub async fn ack_alert(&self, id: i64, by: &str, now_ms: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE alerts SET acked_by = $1, acked_at = $2 WHERE id = $3 AND resolved_at IS NULL",
        )
        .bind(by)
        .bind(now_ms)
        .bind(id)
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Snoozes an open alert until `until_ms`. False as for [`Self::ack_alert`].
    pub async fn snooze_alert(&self, id: i64, by: &str, until_ms: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE alerts SET snoozed_by = $1, snoozed_until = $2 WHERE id = $3 AND resolved_at IS NULL",
        )
        .bind(by)
        .bind(until_ms)
        .bind(id)
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The ids of the open alerts with `fingerprint` (one at most).
    pub async fn open_alert_ids(&self, fingerprint: &str) -> Result<Vec<i64>, StoreError> {
        let rows =
            sqlx::query("SELECT id FROM alerts WHERE fingerprint = $1 AND resolved_at IS NULL")
                .bind(fingerprint)
                .fetch_all(&self.read)
                .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<i64, _>("id")?))
            .collect()
    }

    /// One alert by id.
    pub async fn alert(&self, id: i64) -> Result<Option<Alert>, StoreError> {
        let row = sqlx::query(&format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(alert_from_row).transpose()
    }

    /// Who is emailed about an alert of `kind` on the first quota of
    /// `chain` (the quota, then its ancestors, nearest first): the owners
    /// of the nearest quota that has owners, and with `admins` the admins
    /// (`alerts::tells_admins`); without users who muted the kind or have
    /// no email address. Each says whether the user takes this kind as a
    /// daily digest.
    pub async fn alert_recipients(
        &self,
        chain: &[&str],
        kind: Kind,
        admins: bool,
    ) -> Result<Vec<Recipient>, StoreError> {
        // Per user: email, and the kind's mute and digest choices.
        const USER: &str = "u.id AS id, u.email AS email, \
             (SELECT COUNT(*) FROM alert_prefs p WHERE p.user_id = u.id AND p.kind = $1 AND p.muted = 1) AS muted, \
             (SELECT COUNT(*) FROM alert_prefs p WHERE p.user_id = u.id AND p.kind = $1 AND p.digest = 1) AS digest";
        let mut rows = Vec::new();
        for quota in chain {
            let owners = sqlx::query(&format!(
                "SELECT {USER} FROM role_bindings b JOIN users u ON u.id = b.user_id \
                 WHERE b.quota = $2 AND b.role = 'owner' AND u.disabled = 0 ORDER BY u.username"
            ))
            .bind(kind.as_str())
            .bind(*quota)
            .fetch_all(&self.read)
            .await?;
            if !owners.is_empty() {
                rows.extend(owners);
                break;
            }
        }
        if admins {
            rows.extend(
                sqlx::query(&format!(
                    "SELECT {USER} FROM users u WHERE u.is_admin = 1 AND u.disabled = 0 \
                     ORDER BY u.username"
                ))
                .bind(kind.as_str())
                .fetch_all(&self.read)
                .await?,
            );
        }
        let mut out: Vec<Recipient> = Vec::new();
        for r in &rows {
            let email: Option<String> = r.try_get("email")?;
            let Some(email) = email.filter(|e| !e.trim().is_empty()) else {
                continue;
            };
            if r.try_get::<i64, _>("muted")? > 0 {
                continue;
            }
            out.push(Recipient {
                user_id: r.try_get("id")?,
                email,
                digest: r.try_get::<i64, _>("digest")? > 0,
            });
        }
        out.sort_by(|a, b| (&a.email, a.user_id).cmp(&(&b.email, b.user_id)));
        out.dedup_by_key(|r| r.user_id);
        Ok(out)
    }

    /// The portal user a workload's submitter (`username`, as the API
    /// server named it) is — the user linked to that Kubernetes username
    /// (sign-in's `kube_username`, docs/oidc.md), else the user of that
    /// name — as a recipient of an alert of `kind`: None when there is no
    /// such enabled user with an email address and the kind unmuted.
    pub async fn alert_recipient_named(
        &self,
        username: &str,
        kind: Kind,
    ) -> Result<Option<Recipient>, StoreError> {
        if username.is_empty() {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT u.id AS id, u.email AS email, \
             (SELECT COUNT(*) FROM alert_prefs p WHERE p.user_id = u.id AND p.kind = $1 AND p.muted = 1) AS muted, \
             (SELECT COUNT(*) FROM alert_prefs p WHERE p.user_id = u.id AND p.kind = $1 AND p.digest = 1) AS digest \
             FROM users u WHERE (u.kube_username = $2 OR u.username = $2) AND u.disabled = 0 \
             ORDER BY CASE WHEN u.kube_username = $2 THEN 0 ELSE 1 END LIMIT 1",
        )
        .bind(kind.as_str())
        .bind(username)
        .fetch_optional(&self.read)
        .await?;
        let Some(r) = row else {
            return Ok(None);
        };
        let email: Option<String> = r.try_get("email")?;
        let Some(email) = email.filter(|e| !e.trim().is_empty()) else {
            return Ok(None);
        };
        if r.try_get::<i64, _>("muted")? > 0 {
            return Ok(None);
        }
        Ok(Some(Recipient {
            user_id: r.try_get("id")?,
            email,
            digest: r.try_get::<i64, _>("digest")? > 0,
        }))
    }

    /// Applies an evaluation in one transaction: opens its new alerts, each
    /// with one outbox row per recipient (`recipients` by fingerprint),
    /// updates the open ones whose keys changed, and resolves the cleared
    /// ones. An alert already open is left alone and queues nothing, so
    /// replicas evaluating at once send one email. An update keeps an
    /// acknowledgement or a snooze and sends nothing, unless it escalates
    /// (`e.escalate`: a key joined, or another got worse than the worst):
    /// then both are cleared and its recipients (`recipients` by
    /// fingerprint) get one email per set of keys and worst key.
    ///
    /// `observed`: when the evaluation's view of each quota was current,
    /// kept with what it opens, updates and resolves (`opened_seen_at`: the
    /// view that last opened or updated it). A view older than the one that
    /// last changed an alert is stale there: it does not reopen an alert
    /// whose resolution came from a view as new as its own or newer, nor
    /// update or resolve one opened or updated from a newer view (the next
    /// evaluation decides again).
    ///
    /// Event kinds (transfers decided) are stored resolved at once: they
    /// are news, not a condition.
    pub async fn apply_evaluation(
        &self,
        e: &Evaluation,
        recipients: &BTreeMap<String, Vec<Recipient>>,
        public_url: &str,
        cfg: &quota::KeyConfig,
        observed: &Observed,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        let mut tx = self.write.begin().await?;
        let mut applied = Applied::default();
        // Whose alerts they are matters only when views differ by quota.
        let mut quota_of: BTreeMap<i64, String> = BTreeMap::new();
        if !observed.by_quota.is_empty() && !e.resolve.is_empty() {
            let sql = format!(
                "SELECT id, quota FROM alerts WHERE id IN ({})",
                Params::of(&tx).list(e.resolve.len())
            );
            let mut q = sqlx::query(&sql);
            for id in &e.resolve {
                q = q.bind(*id);
            }
            for r in q.fetch_all(&mut *tx).await? {
                quota_of.insert(r.try_get("id")?, r.try_get("quota")?);
            }
        }
        for id in &e.resolve {
            // Unknown: the oldest view of the evaluation, the cautious one.
            let seen = quota_of
                .get(id)
                .map_or(observed.default, |q| observed.of(q));
            let done = sqlx::query(
                "UPDATE alerts SET resolved_at = $1, resolved_seen_at = $2 WHERE id = $3 \
                 AND resolved_at IS NULL AND COALESCE(opened_seen_at, opened_at) <= $2",
            )
            .bind(now_ms)
            .bind(seen)
            .bind(*id)
            .execute(&mut *tx)
            .await?;
            applied.resolved += done.rows_affected() as usize;
        }
        // What asks for someone, for the emails below: (id, condition,
        // the email's key without its recipient).
        let mut mail_for: Vec<(i64, &Condition, String)> = Vec::new();
        for (id, c) in &e.update {
            let seen = observed.of(&c.quota);
            let keep_seen = i32::from(observed.cached.contains(&c.quota));
            let escalate = e.escalate.contains(id);
            // An escalation asks again: acknowledgement and snooze go.
            let quiet = if escalate {
                ", acked_by = NULL, acked_at = NULL, snoozed_until = NULL, snoozed_by = NULL"
            } else {
                ""
            };
            let done = sqlx::query(&format!(
                "UPDATE alerts SET key = $1, keys = $2, message = $3, numbers = $4, \
                 opened_seen_at = CASE WHEN $7 = 1 THEN opened_seen_at ELSE $5 END{quiet} \
                 WHERE id = $6 AND resolved_at IS NULL \
                 AND COALESCE(opened_seen_at, opened_at) <= $5"
            ))
            .bind(&c.key)
            .bind(keys_json(c))
            .bind(&c.message)
            .bind(c.numbers.to_string())
            .bind(seen)
            .bind(*id)
            .bind(keep_seen)
            .execute(&mut *tx)
            .await?;
            applied.updated += done.rows_affected() as usize;
            if escalate && done.rows_affected() == 1 {
                applied.escalated.push(*id);
                mail_for.push((*id, c, format!("alert-{id}-{}", keys_tag(c))));
                digest(&mut tx, *id, recipients.get(&c.fingerprint()), now_ms).await?;
            }
        }
        // What opened here, for the emails below.
        let mut opened: Vec<(i64, &Condition)> = Vec::new();
        for c in &e.open {
            let seen = observed.of(&c.quota);
            if c.kind.is_condition() && resolved_since(&mut tx, c, seen).await? {
                continue;
            }
            let Some(id) = insert_alert(&mut tx, c, seen, now_ms).await? else {
                continue;
            };
            applied.opened.push(id);
            opened.push((id, c));
            digest(&mut tx, id, recipients.get(&c.fingerprint()), now_ms).await?;
        }
        // One email per alert opened: a condition on keys is one alert, its
        // keys listed inside (one training job over six keys, one email).
        // And one per escalation, keyed by the keys it covers and the worst
        // of them: the same escalation evaluated twice (two replicas, a
        // retry, a key flapping back to a set already mailed) mails once.
        let opened = opened
            .into_iter()
            .map(|(id, c)| (id, c, format!("alert-{id}")));
        for (_, c, key) in opened.chain(mail_for) {
            let mail = email(c, public_url, cfg);
            let mut sent: BTreeSet<&str> = BTreeSet::new();
            for to in recipients.get(&c.fingerprint()).into_iter().flatten() {
                if to.digest || !sent.insert(to.email.as_str()) {
                    continue;
                }
                let queued = NewMail {
                    idempotency_key: format!("{key}-{}", to.email),
                    recipient: to.email.clone(),
                    subject: mail.subject.clone(),
                    text_body: mail.text.clone(),
                    html_body: mail.html.clone(),
                };
                outbox::enqueue(&mut *tx, &queued, now_ms).await?;
            }
        }
        tx.commit().await?;
        Ok(applied)
    }

    /// Users with digest rows waiting from before `cutoff_ms`.
    pub async fn digest_users(&self, cutoff_ms: i64) -> Result<Vec<i64>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT user_id FROM alert_digest WHERE batch IS NULL AND created_at < $1 \
             ORDER BY user_id",
        )
        .bind(cutoff_ms)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<i64, _>("user_id")?))
            .collect()
    }

    /// Queues `user_id`'s digest: claims the rows waiting from before
    /// `cutoff_ms` and queues one email with them, in one transaction.
    /// The digest's key (its Message-ID) is the user and the first row's id:
    /// replicas racing build the same key, and a claim whose email is
    /// already queued rolls back, so a row is in exactly one sent digest.
    /// A user without an email address (or disabled) loses the claim: the
    /// rows are done. Returns whether an email was queued.
    pub async fn queue_digest(
        &self,
        user_id: i64,
        cutoff_ms: i64,
        public_url: &str,
        cfg: &quota::KeyConfig,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write.begin().await?;
        let first: Option<i64> = sqlx::query(
            "SELECT MIN(id) AS first FROM alert_digest WHERE user_id = $1 AND batch IS NULL \
             AND created_at < $2",
        )
        .bind(user_id)
        .bind(cutoff_ms)
        .fetch_one(&mut *tx)
        .await?
        .try_get("first")?;
        let Some(first) = first else {
            return Ok(false);
        };
        let key = format!("digest-{user_id}-{first}");
        let claimed = sqlx::query(
            "UPDATE alert_digest SET batch = $1 WHERE user_id = $2 AND batch IS NULL \
             AND created_at < $3",
        )
        .bind(&key)
        .bind(user_id)
        .bind(cutoff_ms)
        .execute(&mut *tx)
        .await?;
        if claimed.rows_affected() == 0 {
            return Ok(false);
        }
        let alerts: Vec<Alert> = sqlx::query(&format!(
            "SELECT {} FROM alert_digest d JOIN alerts a ON a.id = d.alert_id \
             WHERE d.batch = $1 ORDER BY a.opened_at, a.id",
            ALERT_COLUMNS
                .split(", ")
                .map(|c| format!("a.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(&key)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(alert_from_row)
        .collect::<Result<_, _>>()?;
        let to: Option<String> = sqlx::query(
            "SELECT email FROM users WHERE id = $1 AND disabled = 0 AND email IS NOT NULL \
             AND email <> ''",
        )
        .bind(user_id)
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| r.try_get("email"))
        .transpose()?;
        let Some(to) = to else {
            tx.commit().await?;
            return Ok(false);
        };
        let mail = crate::alerts::digest_email(&alerts, cutoff_ms, public_url, cfg);
        let queued = NewMail {
            idempotency_key: key,
            recipient: to,
            subject: mail.subject,
            text_body: mail.text,
            html_body: mail.html,
        };
        if !outbox::enqueue(&mut *tx, &queued, now_ms).await? {
            // Rows that came in late under a key already sent: back they go,
            // for a digest of their own.
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    pub async fn user_email(&self, user_id: i64) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT email FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(&self.read)
            .await?;
        Ok(match row {
            Some(r) => r.try_get::<Option<String>, _>("email")?,
            None => None,
        })
    }

    /// Every user's email address, by user id (users without one left out).
    pub async fn user_emails(&self) -> Result<BTreeMap<i64, String>, StoreError> {
        let rows = sqlx::query("SELECT id, email FROM users WHERE email IS NOT NULL")
            .fetch_all(&self.read)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("email")?)))
            .collect()
    }

    /// Sets (or with None clears) a user's email address.
    pub async fn set_user_email(
        &self,
        user_id: i64,
        email: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET email = $1 WHERE id = $2")
            .bind(email)
            .bind(user_id)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    pub async fn alert_prefs(&self, user_id: i64) -> Result<BTreeMap<Kind, Pref>, StoreError> {
        let rows = sqlx::query("SELECT kind, muted, digest FROM alert_prefs WHERE user_id = $1")
            .bind(user_id)
            .fetch_all(&self.read)
            .await?;
        let mut out = BTreeMap::new();
        for r in &rows {
            let kind: String = r.try_get("kind")?;
            if let Some(kind) = Kind::parse(&kind) {
                out.insert(
                    kind,
                    Pref {
                        muted: r.try_get::<i64, _>("muted")? != 0,
                        digest: r.try_get::<i64, _>("digest")? != 0,
                    },
                );
            }
        }
        Ok(out)
    }

    pub async fn set_alert_pref(
        &self,
        user_id: i64,
        kind: Kind,
        pref: Pref,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO alert_prefs (user_id, kind, muted, digest) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (user_id, kind) DO UPDATE SET muted = excluded.muted, digest = excluded.digest",
        )
        .bind(user_id)
        .bind(kind.as_str())
        .bind(pref.muted as i16)
        .bind(pref.digest as i16)
        .execute(&self.write)
        .await?;
        Ok(())
    }
}

/// Whether `c`'s alert was resolved from a view as new as `observed_at`
/// or newer.
async fn resolved_since(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    c: &Condition,
    observed_at: i64,
) -> Result<bool, StoreError> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n FROM alerts WHERE fingerprint = $1 \
         AND COALESCE(resolved_seen_at, resolved_at) >= $2",
    )
    .bind(c.fingerprint())
    .bind(observed_at)
    .fetch_one(&mut **tx)
    .await?;
    Ok(row.try_get::<i64, _>("n")? > 0)
}

/// The keys a condition covers as stored: a JSON array.
fn keys_json(c: &Condition) -> String {
    serde_json::Value::from(c.keys.clone()).to_string()
}

/// What an escalation's email is about, for its idempotency key: a hash
/// of the worst key and the keys covered (16 hex digits of SHA-256; a key
/// may be long, an idempotency key must not be).
fn keys_tag(c: &Condition) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(c.key.as_bytes());
    for k in &c.keys {
        h.update([0u8]);
        h.update(k.as_bytes());
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Queues `alert_id` for the digest of each recipient who takes its kind
/// as one.
async fn digest(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    alert_id: i64,
    to: Option<&Vec<Recipient>>,
    now_ms: i64,
) -> Result<(), StoreError> {
    for to in to.into_iter().flatten().filter(|t| t.digest) {
        sqlx::query(
            "INSERT INTO alert_digest (user_id, alert_id, created_at) \
             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(to.user_id)
        .bind(alert_id)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Inserts an alert unless one with its fingerprint is open: the id, or
/// None when another evaluation opened it first.
async fn insert_alert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    c: &Condition,
    seen_at: i64,
    now_ms: i64,
) -> Result<Option<i64>, StoreError> {
    let resolved_at =
        (!c.kind.is_condition() && c.kind != Kind::TransferRequested).then_some(now_ms);
    let row = sqlx::query(
        "INSERT INTO alerts (fingerprint, kind, quota, key, level, message, numbers, opened_at, \
         resolved_at, opened_seen_at, keys) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING RETURNING id",
    )
    .bind(c.fingerprint())
    .bind(c.kind.as_str())
    .bind(&c.quota)
    .bind(&c.key)
    .bind(c.level.as_str())
    .bind(&c.message)
    .bind(c.numbers.to_string())
    .bind(now_ms)
    .bind(resolved_at)
    .bind(seen_at)
    .bind(keys_json(c))
    .fetch_optional(&mut **tx)
    .await?;
    Ok(match row {
        Some(r) => Some(r.try_get("id")?),
        None => None,
    })
}

#[cfg(test)]
mod tests;
