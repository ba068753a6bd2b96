-- Alert kinds of real usage (docs/real-usage.md): 'idle_gpus' (a
-- workload's GPUs idle past its quota's idle.after, to its submitter and
-- the quota's owners) and 'real_usage_unknown' (Prometheus has not
-- answered for a while, to the admins). SQLite cannot change a CHECK in
-- place: the table is rebuilt with its rows (0020's columns included),
-- and alert_digest (which references it) with it, child first so no
-- foreign key is ever broken, as 0013 did.
CREATE TABLE alerts_new (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint  TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('threshold', 'allocation', 'over_quota',
                 'cash_forecast', 'reclaim_pending', 'queue_overdue', 'transfer_requested',
                 'transfer_approved', 'transfer_rejected', 'idle_gpus', 'real_usage_unknown')),
    quota        TEXT NOT NULL,
    key          TEXT NOT NULL DEFAULT '',
    level        TEXT NOT NULL CHECK (level IN ('info', 'warning', 'critical')),
    message      TEXT NOT NULL,
    numbers      TEXT NOT NULL DEFAULT '{}',
    opened_at    BIGINT NOT NULL,
    resolved_at  BIGINT,
    opened_seen_at BIGINT NULL,
    resolved_seen_at BIGINT NULL,
    acked_by TEXT,
    acked_at BIGINT,
    snoozed_until BIGINT,
    snoozed_by TEXT,
    keys TEXT NOT NULL DEFAULT '[]',
    merged_into BIGINT NULL
);
INSERT INTO alerts_new (id, fingerprint, kind, quota, key, level, message, numbers, opened_at,
    resolved_at, opened_seen_at, resolved_seen_at, acked_by, acked_at, snoozed_until, snoozed_by,
    keys, merged_into)
SELECT id, fingerprint, kind, quota, key, level, message, numbers, opened_at,
    resolved_at, opened_seen_at, resolved_seen_at, acked_by, acked_at, snoozed_until, snoozed_by,
    keys, merged_into
FROM alerts;

CREATE TABLE alert_digest_copy AS SELECT id, user_id, alert_id, created_at, batch FROM alert_digest;
DROP TABLE alert_digest;
DROP TABLE alerts;
ALTER TABLE alerts_new RENAME TO alerts;
CREATE UNIQUE INDEX alerts_open ON alerts (fingerprint) WHERE resolved_at IS NULL;
CREATE INDEX alerts_quota ON alerts (quota, opened_at);
CREATE INDEX alerts_opened ON alerts (opened_at);
CREATE INDEX alerts_fingerprint ON alerts (fingerprint);
CREATE UNIQUE INDEX alerts_transfer_once ON alerts (fingerprint)
    WHERE kind IN ('transfer_requested', 'transfer_approved', 'transfer_rejected');

CREATE TABLE alert_digest (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     BIGINT NOT NULL REFERENCES users (id),
    alert_id    BIGINT NOT NULL REFERENCES alerts (id),
    created_at  BIGINT NOT NULL,
    batch       TEXT NULL,
    UNIQUE (user_id, alert_id)
);
INSERT INTO alert_digest (id, user_id, alert_id, created_at, batch)
SELECT id, user_id, alert_id, created_at, batch FROM alert_digest_copy;
DROP TABLE alert_digest_copy;
CREATE INDEX alert_digest_waiting ON alert_digest (batch, created_at);
