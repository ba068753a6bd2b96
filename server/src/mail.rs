//! The email sender (§7, docs/semantics.md): drains the outbox over SMTP on every replica.
//!
//! A row is claimed with a lease (a guarded UPDATE, `store::outbox`), sent as
//! text + HTML with Message-ID `<{idempotency key}@bizrq>`, and marked sent
//! only after the SMTP server accepted it; a failure is counted and retried
//! with exponential backoff. Delivery is at least once: a crash between the
//! server's acceptance and the `sent_at` write resends the same message, with
//! the same Message-ID, once the lease runs out — receivers (and their
//! mailbox software) can drop it by that Message-ID. See docs/email.md.

// An argument of `serve`, so its values are the config's.
use crate::config::ServeArgs;
use crate::config::SmtpSecurity;
use crate::metrics::Metrics;
use crate::service::Clock;
use crate::store::outbox::OutboxRow;
use crate::store::sql::SqlStore;
use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct SmtpConfig {
    pub host: String,
    pub port: u16,
    pub security: SmtpSecurity,
    pub username: Option<String>,
    pub password: Option<String>,
    pub from: String,
}

impl SmtpConfig {
    /// The SMTP settings of `bizrq serve`; None without `--smtp-host`.
    pub fn from_args(args: &ServeArgs) -> Option<SmtpConfig> {
        let host = args.smtp_host.as_deref().map(str::trim)?;
        (!host.is_empty()).then(|| SmtpConfig {
            host: host.to_string(),
            port: args.smtp_port,
            security: args.smtp_security,
            username: args.smtp_username.clone().filter(|u| !u.is_empty()),
            password: args.smtp_password.clone(),
            from: args.smtp_from.clone(),
        })
    }
}

/// How often an idle sender looks for due rows.
pub const POLL: Duration = Duration::from_secs(5);
/// How long a claim lasts; a sender that dies holding it delays its rows
/// this long.
pub const LEASE_MS: i64 = 60_000;
/// Rows claimed at once.
const BATCH: i64 = 20;
/// Each SMTP command's timeout; a send must fit in what is left of the lease.
const SMTP_TIMEOUT: Duration = Duration::from_secs(15);
/// A claimed row is sent only while this much of its lease is left.
const SEND_MARGIN_MS: i64 = 45_000;

/// Whether `email` is an address the sender will take (at most 254
/// bytes, as lettre parses it): any other would wait in the outbox
/// forever. The one check a typed or a provider's address passes.
pub fn deliverable(email: &str) -> bool {
    email.len() <= 254 && email.parse::<lettre::Address>().is_ok()
}

const BACKOFF_BASE_MS: i64 = 30_000;
const BACKOFF_CAP_MS: i64 = 3_600_000;

/// Wait after the `attempts`-th failure (1 = first): 30 s × 2^(attempts-1),
/// at most an hour, minus up to a fifth (`jitter` in 0..=1000 ‰) so that
/// replicas' retries spread out.
pub fn backoff_ms(attempts: i64, jitter_permille: i64) -> i64 {
    let doublings = (attempts - 1).clamp(0, 20) as u32;
    let delay = BACKOFF_BASE_MS
        .saturating_mul(1i64 << doublings)
        .min(BACKOFF_CAP_MS);
    delay - delay / 5 * jitter_permille.clamp(0, 1000) / 1000
}

/// The Message-ID of an outbox row: its idempotency key, with every byte
/// outside RFC 5322 `atext` (and `=` and `.`) written as `=XX`, so distinct
/// keys give distinct valid IDs.
pub fn message_id(key: &str) -> String {
    let mut id = String::with_capacity(key.len() + 8);
    for b in key.bytes() {
        let plain = b.is_ascii_alphanumeric() || b"!#$%&'*+/?^_`{|}~-".contains(&b);
        if plain {
            id.push(b as char);
        } else {
            id.push_str(&format!("={b:02X}"));
        }
    }
    format!("<{id}@bizrq>")
}

#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("invalid sender address {0:?} (--smtp-from): {1}")]
    From(String, String),
    #[error("SMTP server {0}: {1}")]
    Transport(String, String),
}

type Transport = AsyncSmtpTransport<Tokio1Executor>;

/// The SMTP side: a pooled connection to one server.
#[derive(Clone)]
pub struct Mailer {
    transport: Transport,
    from: Mailbox,
    server: String,
}

impl Mailer {
    pub fn new(config: &SmtpConfig) -> Result<Mailer, MailError> {
        let from: Mailbox = config
            .from
            .parse()
            .map_err(|e| MailError::From(config.from.clone(), format!("{e}")))?;
        let server = format!("{}:{}", config.host, config.port);
        let builder = match config.security {
            SmtpSecurity::Starttls => Transport::starttls_relay(&config.host),
            SmtpSecurity::Tls => Transport::relay(&config.host),
            SmtpSecurity::Plain => Ok(Transport::builder_dangerous(&config.host)),
        }
        .map_err(|e| MailError::Transport(server.clone(), e.to_string()))?;
        let mut builder = builder.port(config.port).timeout(Some(SMTP_TIMEOUT));
        if let Some(user) = &config.username {
            let password = config.password.clone().unwrap_or_default();
            builder = builder.credentials(Credentials::new(user.clone(), password));
        }
        Ok(Mailer {
            transport: builder.build(),
            from,
            server,
        })
    }

    /// The message of an outbox row.
    pub fn message(&self, row: &OutboxRow) -> Result<Message, String> {
        let to: Mailbox = row
            .recipient
            .parse()
            .map_err(|e| format!("invalid recipient {:?}: {e}", row.recipient))?;
        Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(row.subject.clone())
            .message_id(Some(message_id(&row.idempotency_key)))
            .multipart(
                MultiPart::alternative()
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_PLAIN)
                            .body(row.text_body.clone()),
                    )
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_HTML)
                            .body(row.html_body.clone()),
                    ),
            )
            .map_err(|e| format!("cannot build the message: {e}"))
    }

    /// Ok once the server accepted the message.
    pub async fn send(&self, row: &OutboxRow) -> Result<(), String> {
        let message = self.message(row)?;
        self.transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| format!("SMTP server {}: {e}", self.server))
    }
}

/// What one pass over the outbox did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    pub claimed: usize,
    pub sent: usize,
    pub failed: usize,
}

/// Drains the outbox: on every replica, safe by the leases.
#[derive(Clone)]
pub struct Sender {
    store: Arc<SqlStore>,
    mailer: Option<Mailer>,
    metrics: Arc<Metrics>,
    clock: Clock,
}

impl Sender {
    /// Without a mailer (no `--smtp-host`) rows wait; only the queue depth
    /// is reported.
    pub fn new(
        store: Arc<SqlStore>,
        mailer: Option<Mailer>,
        metrics: Arc<Metrics>,
        clock: Clock,
    ) -> Sender {
        Sender {
            store,
            mailer,
            metrics,
            clock,
        }
    }

    /// Claim due rows and send them; Err only when the database fails.
    pub async fn pass(&self) -> Result<Pass, crate::store::StoreError> {
        let mut pass = Pass::default();
        if let Some(mailer) = &self.mailer {
            let now = (self.clock)();
            let lease = now + LEASE_MS;
            let rows = self.store.claim_mail(now, lease, BATCH).await?;
            pass.claimed = rows.len();
            let mut rows = rows.into_iter();
            for row in rows.by_ref() {
                if (self.clock)() > lease - SEND_MARGIN_MS {
                    // The batch took long; give the rest back rather than
                    // send after the lease (another sender may hold it).
                    self.store.release_mail(row.id, lease).await?;
                    break;
                }
                match mailer.send(&row).await {
                    Ok(()) => {
                        pass.sent += 1;
                        self.metrics.mail_sent.inc();
                        if !self.store.mark_mail_sent(row.id, (self.clock)()).await? {
                            tracing::warn!(key = %row.idempotency_key, "email sent again: another sender had sent it after our lease ran out");
                        }
                    }
                    Err(e) => {
                        pass.failed += 1;
                        self.metrics.mail_failures.inc();
                        let attempts = row.attempts + 1;
                        let jitter = rand::random_range(0..=1000);
                        let next = (self.clock)() + backoff_ms(attempts, jitter);
                        tracing::warn!(key = %row.idempotency_key, to = %row.recipient, attempts, error = %e, "email not sent; will retry");
                        self.store.mark_mail_failed(row.id, lease, &e, next).await?;
                    }
                }
            }
            for row in rows {
                self.store.release_mail(row.id, lease).await?;
            }
        }
        self.metrics
            .mail_queue_depth
            .set(self.store.mail_queue_depth().await?);
        Ok(pass)
    }

    /// Pass after pass until the task is aborted: at once again after a full
    /// batch, else after `poll`.
    pub async fn run(self, poll: Duration) {
        loop {
            let more = match self.pass().await {
                Ok(p) => p.claimed as i64 >= BATCH,
                Err(e) => {
                    tracing::warn!(error = %e, "outbox pass failed; retrying");
                    false
                }
            };
            if !more {
                tokio::time::sleep(poll).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_30_seconds_up_to_an_hour() {
        assert_eq!(backoff_ms(1, 0), 30_000);
        assert_eq!(backoff_ms(2, 0), 60_000);
        assert_eq!(backoff_ms(3, 0), 120_000);
        assert_eq!(backoff_ms(8, 0), 3_600_000);
        assert_eq!(backoff_ms(500, 0), 3_600_000);
        // Jitter shortens by at most a fifth, never past the cap.
        assert_eq!(backoff_ms(1, 1000), 24_000);
        assert_eq!(backoff_ms(500, 1000), 2_880_000);
    }

    #[test]
    fn message_ids_are_valid_and_distinct() {
        assert_eq!(message_id("alert-42-x"), "<alert-42-x@bizrq>");
        assert_eq!(message_id("a:b c"), "<a=3Ab=20c@bizrq>");
        assert_ne!(message_id("a.b"), message_id("a=2Eb"));
        assert_eq!(message_id("a.b"), "<a=2Eb@bizrq>");
    }
}
