//! The email outbox (§7, docs/semantics.md): messages wait here until an SMTP server has
//! accepted them. Senders on any number of replicas claim due rows with a
//! guarded UPDATE (a lease), so no two send the same row at once.

use super::sql::SqlStore;
use super::StoreError;
use sqlx::Row;

/// A message to send, as the alert engine writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMail {
    /// Unique; also the Message-ID, so receivers can drop a resend.
    pub idempotency_key: String,
    pub recipient: String,
    pub subject: String,
    pub text_body: String,
    pub html_body: String,
}

/// A row of the outbox.
#[derive(Clone, Debug)]
pub struct OutboxRow {
    pub id: i64,
    pub idempotency_key: String,
    pub recipient: String,
    pub subject: String,
    pub text_body: String,
    pub html_body: String,
    pub created_at: i64,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub lease_until: Option<i64>,
    pub sent_at: Option<i64>,
    pub last_error: Option<String>,
}

const COLUMNS: &str = "id, idempotency_key, recipient, subject, text_body, html_body, \
     created_at, CAST(attempts AS BIGINT), next_attempt_at, lease_until, sent_at, last_error";

fn row(r: &sqlx::any::AnyRow) -> Result<OutboxRow, sqlx::Error> {
    Ok(OutboxRow {
        id: r.try_get(0)?,
        idempotency_key: r.try_get(1)?,
        recipient: r.try_get(2)?,
        subject: r.try_get(3)?,
        text_body: r.try_get(4)?,
        html_body: r.try_get(5)?,
        created_at: r.try_get(6)?,
        attempts: r.try_get(7)?,
        next_attempt_at: r.try_get(8)?,
        lease_until: r.try_get(9)?,
        sent_at: r.try_get(10)?,
        last_error: r.try_get(11)?,
    })
}

/// Queue `mail`, due at once, inside the caller's transaction (the alert's).
/// A key already queued is left alone: the message exists once.
pub async fn enqueue<'c, E>(executor: E, mail: &NewMail, now: i64) -> Result<bool, StoreError>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    let done = sqlx::query(
        "INSERT INTO outbox (idempotency_key, recipient, subject, text_body, html_body, \
         created_at, attempts, next_attempt_at) VALUES ($1, $2, $3, $4, $5, $6, 0, $6) \
         ON CONFLICT (idempotency_key) DO NOTHING",
    )
    .bind(&mail.idempotency_key)
    .bind(&mail.recipient)
    .bind(&mail.subject)
    .bind(&mail.text_body)
    .bind(&mail.html_body)
    .bind(now)
    .execute(executor)
    .await?;
    Ok(done.rows_affected() == 1)
}

impl SqlStore {
    pub async fn enqueue_mail(&self, mail: &NewMail, now: i64) -> Result<bool, StoreError> {
        enqueue(&self.write, mail, now).await
    }

    /// Claim up to `limit` due rows until `lease_until`. Each claim is its
    /// own guarded UPDATE: of two senders racing for a row, one wins.
    pub async fn claim_mail(
        &self,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let due = sqlx::query(
            "SELECT id FROM outbox WHERE sent_at IS NULL AND next_attempt_at <= $1 \
             AND (lease_until IS NULL OR lease_until < $1) ORDER BY next_attempt_at, id LIMIT $2",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        let mut claimed = Vec::new();
        for r in due {
            let id: i64 = r.try_get(0)?;
            let got = sqlx::query(&format!(
                "UPDATE outbox SET lease_until = $1 WHERE id = $2 AND sent_at IS NULL \
                 AND next_attempt_at <= $3 AND (lease_until IS NULL OR lease_until < $3) \
                 RETURNING {COLUMNS}"
            ))
            .bind(lease_until)
            .bind(id)
            .bind(now)
            .fetch_optional(&self.write)
            .await?;
            if let Some(r) = got {
                claimed.push(row(&r)?);
            }
        }
        Ok(claimed)
    }

    /// The SMTP server accepted the message. Not guarded by the lease: that
    /// is a fact whoever holds it, and recording it stops a second sender
    /// that claimed the row after our lease ran out from retrying it.
    /// False if the row was already marked sent.
    pub async fn mark_mail_sent(&self, id: i64, now: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE outbox SET sent_at = $1, lease_until = NULL, last_error = NULL \
             WHERE id = $2 AND sent_at IS NULL",
        )
        .bind(now)
        .bind(id)
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A failed attempt: count it, keep the error, wait until
    /// `next_attempt_at`. Guarded by our lease: a sender that lost it does
    /// not overwrite the schedule of the one that holds it now.
    pub async fn mark_mail_failed(
        &self,
        id: i64,
        lease_until: i64,
        error: &str,
        next_attempt_at: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE outbox SET attempts = attempts + 1, last_error = $1, next_attempt_at = $2, \
             lease_until = NULL WHERE id = $3 AND lease_until = $4 AND sent_at IS NULL",
        )
        .bind(error)
        .bind(next_attempt_at)
        .bind(id)
        .bind(lease_until)
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Give a claimed row back untried (its lease would run out mid-send).
    pub async fn release_mail(&self, id: i64, lease_until: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET lease_until = NULL WHERE id = $1 AND lease_until = $2")
            .bind(id)
            .bind(lease_until)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// Messages not yet accepted by an SMTP server.
    pub async fn mail_queue_depth(&self) -> Result<i64, StoreError> {
        let r = sqlx::query("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL")
            .fetch_one(&self.read)
            .await?;
        Ok(r.try_get(0)?)
    }

    /// Every row, oldest first.
    pub async fn outbox(&self) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM outbox ORDER BY id"))
            .fetch_all(&self.read)
            .await?;
        Ok(rows.iter().map(row).collect::<Result<_, _>>()?)
    }

    pub async fn mail_by_key(&self, key: &str) -> Result<Option<OutboxRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM outbox WHERE idempotency_key = $1"
        ))
        .bind(key)
        .fetch_optional(&self.read)
        .await?;
        Ok(r.as_ref().map(row).transpose()?)
    }
}
