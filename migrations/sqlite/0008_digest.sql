-- Daily digests (SPEC §7, per-user preferences): an alert of a kind the
-- user takes as a digest is not queued as its own email but waits here,
-- written in the alert's transaction. Once a day the digest job claims a
-- user's waiting rows (batch NULL -> the digest's idempotency key, one
-- guarded UPDATE, so replicas racing claim each row once) and queues one
-- email with all of them in the same transaction.
CREATE TABLE alert_digest (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     BIGINT NOT NULL REFERENCES users (id),
    alert_id    BIGINT NOT NULL REFERENCES alerts (id),
    created_at  BIGINT NOT NULL,
    batch       TEXT NULL,
    UNIQUE (user_id, alert_id)
);
CREATE INDEX alert_digest_waiting ON alert_digest (batch, created_at);

-- When the view of the evaluation that opened / resolved an alert was
-- current (epoch ms; NULL on older rows: opened_at / resolved_at stand in).
-- An evaluation with an older view neither reopens nor resolves it.
ALTER TABLE alerts ADD COLUMN opened_seen_at BIGINT NULL;
ALTER TABLE alerts ADD COLUMN resolved_seen_at BIGINT NULL;
CREATE INDEX alerts_fingerprint ON alerts (fingerprint);

-- A transfer is requested, approved or rejected once: its alert exists once
-- too, whichever replica (or recovery after a crash) reports it.
DELETE FROM alerts
    WHERE kind IN ('transfer_requested', 'transfer_approved', 'transfer_rejected')
    AND id NOT IN (SELECT MIN(id) FROM alerts
        WHERE kind IN ('transfer_requested', 'transfer_approved', 'transfer_rejected')
        GROUP BY fingerprint);
CREATE UNIQUE INDEX alerts_transfer_once ON alerts (fingerprint)
    WHERE kind IN ('transfer_requested', 'transfer_approved', 'transfer_rejected');
