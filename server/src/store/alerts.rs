//! Alerts in SQL (migration 0006): rules, alerts, users' preferences and the
//! email outbox. An evaluation's alerts and their emails are written in one
//! transaction; an alert already open (the same fingerprint, possibly opened
//! by another replica a moment ago) is skipped together with its emails.

use super::outbox::{self, NewMail};
use super::sql::SqlStore;
use super::StoreError;
use crate::alerts::{email, Condition, Evaluation, Kind, Level, OpenAlert, Rule};
use sqlx::any::AnyRow;
use sqlx::Row;
use std::collections::BTreeMap;

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
    pub opened_at: i64,
    pub resolved_at: Option<i64>,
}

impl Alert {
    pub fn as_open(&self) -> OpenAlert {
        OpenAlert {
            id: self.id,
            kind: self.kind,
            fingerprint: self.fingerprint.clone(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct AlertFilter {
    pub quota: Option<String>,
    pub kind: Option<Kind>,
    /// Some(true): open only; Some(false): resolved only.
    pub open: Option<bool>,
}

/// A user's choice for one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pref {
    pub muted: bool,
    pub digest: bool,
}

const ALERT_COLUMNS: &str =
    "id, fingerprint, kind, quota, key, level, message, numbers, opened_at, resolved_at";

fn alert_from_row(r: &AnyRow) -> Result<Alert, StoreError> {
    let kind: String = r.try_get("kind")?;
    let level: String = r.try_get("level")?;
    let numbers: String = r.try_get("numbers")?;
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
        opened_at: r.try_get("opened_at")?,
        resolved_at: r.try_get("resolved_at")?,
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
        },
    ))
}

const RULE_COLUMNS: &str = "quota, key, warn_percent, crit_percent, forecast_horizon_hours";

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

    pub async fn set_alert_rule(&self, quota: &str, rule: &Rule) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO alert_rules (quota, key, warn_percent, crit_percent, forecast_horizon_hours) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (quota, key) DO UPDATE SET \
             warn_percent = excluded.warn_percent, crit_percent = excluded.crit_percent, \
             forecast_horizon_hours = excluded.forecast_horizon_hours",
        )
        .bind(quota)
        .bind(&rule.key)
        .bind(rule.warn_percent as i32)
        .bind(rule.crit_percent as i32)
        .bind(rule.forecast_horizon_hours.map(|h| h as i32))
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

    /// Alerts matching `f`, newest first, at most `limit`.
    pub async fn alerts(&self, f: &AlertFilter, limit: i64) -> Result<Vec<Alert>, StoreError> {
        let mut sql = format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE 1 = 1");
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
        match f.open {
            Some(true) => sql.push_str(" AND resolved_at IS NULL"),
            Some(false) => sql.push_str(" AND resolved_at IS NOT NULL"),
            None => {}
        }
        sql.push_str(&format!(
            " ORDER BY opened_at DESC, id DESC LIMIT {}",
            arg()
        ));
        let mut q = sqlx::query(&sql);
        if let Some(quota) = &f.quota {
            q = q.bind(quota);
        }
        if let Some(kind) = f.kind {
            q = q.bind(kind.as_str());
        }
        let rows = q.bind(limit).fetch_all(&self.read).await?;
        rows.iter().map(alert_from_row).collect()
    }

    /// Who is emailed about an alert of `kind` on the first quota of
    /// `chain` (the quota, then its ancestors, nearest first): the owners
    /// of the nearest quota that has owners, and the admins for transfers;
    /// without users who muted the kind or have no email address.
    pub async fn alert_recipients(
        &self,
        chain: &[&str],
        kind: Kind,
    ) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for quota in chain {
            let rows = sqlx::query(
                "SELECT u.email AS email, \
                 (SELECT COUNT(*) FROM alert_prefs p WHERE p.user_id = u.id AND p.kind = $2 AND p.muted = 1) AS muted \
                 FROM role_bindings b JOIN users u ON u.id = b.user_id \
                 WHERE b.quota = $1 AND b.role = 'owner' AND u.disabled = 0 ORDER BY u.username",
            )
            .bind(*quota)
            .bind(kind.as_str())
            .fetch_all(&self.read)
            .await?;
            if rows.is_empty() {
                continue;
            }
            for r in &rows {
                let email: Option<String> = r.try_get("email")?;
                let muted: i64 = r.try_get("muted")?;
                if let Some(e) = email.filter(|e| !e.trim().is_empty()) {
                    if muted == 0 {
                        out.push(e);
                    }
                }
            }
            break;
        }
        if kind.notifies_admins() {
            let rows = sqlx::query(
                "SELECT u.email AS email FROM users u WHERE u.is_admin = 1 AND u.disabled = 0 \
                 AND u.email IS NOT NULL AND u.email <> '' AND NOT EXISTS \
                 (SELECT 1 FROM alert_prefs p WHERE p.user_id = u.id AND p.kind = $1 AND p.muted = 1) \
                 ORDER BY u.username",
            )
            .bind(kind.as_str())
            .fetch_all(&self.read)
            .await?;
            for r in &rows {
                out.push(r.try_get("email")?);
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Applies an evaluation in one transaction: opens its new alerts, each
    /// with one outbox row per recipient (`recipients` by fingerprint), and
    /// resolves the cleared ones. An alert already open is left alone and
    /// queues nothing, so replicas evaluating at once send one email.
    /// Event kinds (transfers) are stored resolved at once: they are news,
    /// not a condition. Returns the ids of the alerts this call opened.
    pub async fn apply_evaluation(
        &self,
        e: &Evaluation,
        recipients: &BTreeMap<String, Vec<String>>,
        public_url: &str,
        now_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let mut tx = self.write.begin().await?;
        for id in &e.resolve {
            sqlx::query("UPDATE alerts SET resolved_at = $1 WHERE id = $2 AND resolved_at IS NULL")
                .bind(now_ms)
                .bind(*id)
                .execute(&mut *tx)
                .await?;
        }
        let mut opened = Vec::new();
        for c in &e.open {
            let Some(id) = insert_alert(&mut tx, c, now_ms).await? else {
                continue;
            };
            opened.push(id);
            let mail = email(c, public_url);
            for to in recipients.get(&c.fingerprint()).into_iter().flatten() {
                let queued = NewMail {
                    idempotency_key: format!("alert-{id}-{to}"),
                    recipient: to.clone(),
                    subject: mail.subject.clone(),
                    text_body: mail.text.clone(),
                    html_body: mail.html.clone(),
                };
                outbox::enqueue(&mut *tx, &queued, now_ms).await?;
            }
        }
        tx.commit().await?;
        Ok(opened)
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

/// Inserts an alert unless one with its fingerprint is open: the id, or
/// None when another evaluation opened it first.
async fn insert_alert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    c: &Condition,
    now_ms: i64,
) -> Result<Option<i64>, StoreError> {
    let resolved_at =
        (!c.kind.is_condition() && c.kind != Kind::TransferRequested).then_some(now_ms);
    let row = sqlx::query(
        "INSERT INTO alerts (fingerprint, kind, quota, key, level, message, numbers, opened_at, resolved_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING id",
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
    .fetch_optional(&mut **tx)
    .await?;
    Ok(match row {
        Some(r) => Some(r.try_get("id")?),
        None => None,
    })
}

#[cfg(test)]
mod tests;
