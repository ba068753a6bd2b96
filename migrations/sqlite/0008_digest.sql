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

-- A stale evaluation must not reopen what a fresher one resolved: it looks
-- up the fingerprint's latest resolution.
CREATE INDEX alerts_fingerprint ON alerts (fingerprint, resolved_at);

-- A transfer is requested, approved or rejected once: its alert exists once
-- too, whichever replica (or recovery after a crash) reports it.
CREATE UNIQUE INDEX alerts_transfer_once ON alerts (fingerprint)
    WHERE kind IN ('transfer_requested', 'transfer_approved', 'transfer_rejected');
