-- The budget ledger (docs/budgets.md §6): one row per `report::Entry`.
-- `id` is the entry's identity (a hash of quota, key, reason, workload,
-- model, QoS class, user, start, end and note), so writing an entry again
-- (a retried write, another replica, a restarted controller) is a no-op.
-- Amounts are acc as decimal text: they exceed 64 bits, and reports add
-- them exactly in the server.
CREATE TABLE budget_ledger (
    id         TEXT PRIMARY KEY,
    quota      TEXT NOT NULL,
    key        TEXT NOT NULL,
    workload   TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    model      TEXT,
    qos        TEXT,
    username   TEXT,
    start_ms   BIGINT NOT NULL,
    end_ms     BIGINT NOT NULL,
    amount     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    note       TEXT NOT NULL
);
-- Range reads: a report reads the entries that overlap [from, to).
CREATE INDEX budget_ledger_start ON budget_ledger (start_ms);
CREATE INDEX budget_ledger_quota ON budget_ledger (quota, key, start_ms);

-- Cluster mode: the accrual windows whose entries are in the ledger, one
-- row per quota and window start. The controller appends a window after
-- the status write that accrued it; a window already here is not written
-- again, and one overlapping a stored window is refused, so no stretch is
-- written twice (a retried append, a restarted or second controller).
CREATE TABLE budget_ledger_windows (
    quota     TEXT NOT NULL,
    start_ms  BIGINT NOT NULL,
    end_ms    BIGINT NOT NULL,
    PRIMARY KEY (quota, start_ms)
);
-- Records older than a day are dropped hourly (they only guard retries).
CREATE INDEX budget_ledger_windows_end ON budget_ledger_windows (end_ms);

-- The workload each pod run belongs to, so the controller's ledger entries
-- say whose run they charge ('' for runs stored before this).
ALTER TABLE pod_runs ADD COLUMN workload TEXT NOT NULL DEFAULT '';
