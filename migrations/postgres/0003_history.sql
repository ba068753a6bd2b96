-- Usage history for the portal's charts. One row per quota and instant with
-- the three lists as JSON of exact quantity strings: a chart reads every key
-- of one quota over a time range, which is then one range scan of the
-- primary key, and a sample of 10,000 quotas is 10,000 rows, not one per key.
-- grain: 0 = a raw sample, 1 = one hour folded, 2 = one day folded (at_ms is
-- then the start of the bucket). Folding is done by the store (history.rs).
CREATE TABLE usage_samples (
    quota      TEXT NOT NULL,
    at_ms      BIGINT NOT NULL,
    grain      SMALLINT NOT NULL CHECK (grain IN (0, 1, 2)),
    hard       TEXT NOT NULL,
    used       TEXT NOT NULL,
    self_used  TEXT NOT NULL,
    PRIMARY KEY (quota, at_ms)
);
-- Compaction finds what to fold or delete by age, per grain.
CREATE INDEX usage_samples_grain_at ON usage_samples (grain, at_ms);

-- The latest raw sample written per quota, as a digest of what it recorded
-- (hard, used, selfUsed, cash accrued): recording compares against this
-- instead of looking up each quota's newest sample.
CREATE TABLE usage_latest (
    quota   TEXT PRIMARY KEY,
    at_ms   BIGINT NOT NULL,
    digest  TEXT NOT NULL
);

-- The controller's pod ledger, so a restart still charges the last stretch
-- of pods that ended while it was down.
CREATE TABLE pod_runs (
    uid       TEXT PRIMARY KEY,
    quota     TEXT NOT NULL,
    usage     TEXT NOT NULL,
    qos       TEXT CHECK (qos IN ('Guaranteed', 'Burstable', 'BestEffort')),
    start_ms  BIGINT NOT NULL,
    end_ms    BIGINT
);
CREATE INDEX pod_runs_quota ON pod_runs (quota);
