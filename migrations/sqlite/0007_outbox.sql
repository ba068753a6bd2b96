-- The email outbox (SPEC §7): rows written by the alert engine in the same
-- transaction as the alert, sent by server/src/mail.rs. IF NOT EXISTS: the
-- alert engine's migration may create the same table first.
CREATE TABLE IF NOT EXISTS outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT UNIQUE NOT NULL,  -- also the Message-ID: <key@bizrq>
    recipient       TEXT NOT NULL,
    subject         TEXT NOT NULL,
    text_body       TEXT NOT NULL,
    html_body       TEXT NOT NULL,
    created_at      BIGINT NOT NULL,       -- epoch ms
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_until     BIGINT NULL,           -- a sender owns the row until then
    sent_at         BIGINT NULL,           -- the SMTP server accepted it
    last_error      TEXT NULL
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (sent_at, next_attempt_at);
