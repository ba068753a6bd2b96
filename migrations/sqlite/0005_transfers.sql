-- Quota transfers (SPEC §6): a request to move amounts of keys from one
-- quota to another (from_quota NULL: from the parent of to_quota), its
-- decision, and, once approved, its execution (server/src/transfers.rs).
-- Times are epoch milliseconds.
--
-- status: requested → approved → executing → done, or requested → rejected
-- | expired; executing → rejected (re-validation refused it: result says
-- why, nothing changed) | failed (result says why). 'approved' is also where
-- an execution waits for another transfer holding the same quotas.
CREATE TABLE transfers (
    id             INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: quota status holds carve-outs under it
    from_quota     TEXT,
    to_quota       TEXT NOT NULL,
    amounts        TEXT NOT NULL,              -- JSON key → quantity, each > 0
    reason         TEXT NOT NULL,
    requested_by   TEXT NOT NULL,
    requested_at   BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN
                   ('requested', 'approved', 'rejected', 'expired', 'executing', 'done', 'failed')),
    decided_by     TEXT,
    decided_at     BIGINT,
    decision_note  TEXT,
    plan           TEXT,                       -- JSON quota::transfer::Plan, stored before the first change
    outcome        TEXT CHECK (outcome IN ('committed', 'aborted')),
    result         TEXT,                       -- why rejected or failed; warnings when done
    finished_at    BIGINT,
    lease_until    BIGINT,                     -- an executor owns the row until then
    revert_at      BIGINT,                     -- a loan: given back at this time
    reverts        BIGINT REFERENCES transfers (id), -- this transfer gives back loan #reverts
    reverted_by    BIGINT REFERENCES transfers (id)
);
CREATE INDEX transfers_status ON transfers (status, expires_at);
CREATE INDEX transfers_to ON transfers (to_quota);
CREATE INDEX transfers_from ON transfers (from_quota);
-- A loan is given back by one transfer, however many sweeps race for it.
CREATE UNIQUE INDEX transfers_one_return ON transfers (reverts) WHERE reverts IS NOT NULL;
