-- Alerts and their email (SPEC §7). Times are epoch milliseconds; flags
-- SMALLINT 0/1 as in 0004, so one query text serves both databases.

-- Thresholds per quota and key ('*': every key without its own row).
-- Without a row: warn at 80 %, critical at 100 % of hard, no forecast.
CREATE TABLE alert_rules (
    quota                   TEXT NOT NULL,
    key                     TEXT NOT NULL,
    warn_percent            INTEGER NOT NULL DEFAULT 80 CHECK (warn_percent > 0),
    crit_percent            INTEGER NOT NULL DEFAULT 100 CHECK (crit_percent > 0),
    forecast_horizon_hours  INTEGER CHECK (forecast_horizon_hours > 0),
    PRIMARY KEY (quota, key)
);

-- Every alert ever opened; resolved_at NULL while it is open. The
-- fingerprint (kind, quota, key, level) is unique among open alerts: that is
-- what makes a crossing fire once, also with several replicas evaluating.
CREATE TABLE alerts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint  TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('threshold', 'over_quota', 'cash_forecast',
                 'reclaim_pending', 'transfer_requested', 'transfer_approved', 'transfer_rejected')),
    quota        TEXT NOT NULL,
    key          TEXT NOT NULL DEFAULT '',
    level        TEXT NOT NULL CHECK (level IN ('info', 'warning', 'critical')),
    message      TEXT NOT NULL,
    numbers      TEXT NOT NULL DEFAULT '{}',   -- JSON: the figures behind the message
    opened_at    BIGINT NOT NULL,
    resolved_at  BIGINT
);
CREATE UNIQUE INDEX alerts_open ON alerts (fingerprint) WHERE resolved_at IS NULL;
CREATE INDEX alerts_quota ON alerts (quota, opened_at);
CREATE INDEX alerts_opened ON alerts (opened_at);

-- A user's choices per alert kind: muted kinds send no email; digest is
-- stored for a daily summary.
CREATE TABLE alert_prefs (
    user_id  BIGINT NOT NULL REFERENCES users (id),
    kind     TEXT NOT NULL,
    muted    SMALLINT NOT NULL DEFAULT 0 CHECK (muted IN (0, 1)),
    digest   SMALLINT NOT NULL DEFAULT 0 CHECK (digest IN (0, 1)),
    PRIMARY KEY (user_id, kind)
);

ALTER TABLE users ADD COLUMN email TEXT NULL;

-- Email to send, written in the same transaction as the alert; the sender
-- leases a row (lease_until), sends, and sets sent_at. idempotency_key
-- (alert id + recipient) keeps an email from being queued twice.
CREATE TABLE outbox (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key  TEXT UNIQUE NOT NULL,
    recipient        TEXT NOT NULL,
    subject          TEXT NOT NULL,
    text_body        TEXT NOT NULL,
    html_body        TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,
    lease_until      BIGINT NULL,
    sent_at          BIGINT NULL,
    last_error       TEXT NULL
);
CREATE INDEX outbox_due ON outbox (sent_at, next_attempt_at);
