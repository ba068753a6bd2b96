-- Real usage (docs/real-usage.md): what each workload's pods held and did,
-- hour by hour, as the controller read it from Prometheus. One row per
-- quota, hour and workload; each reading adds its window to the rows of
-- the hours it covers. Amounts are whole: GPU card-milliseconds, CPU
-- core-milliseconds, memory MiB-seconds, so that sums stay inside 64 bits
-- for thousands of cards over years.
CREATE TABLE real_usage (
    quota             TEXT NOT NULL,
    hour_ms           BIGINT NOT NULL,
    workload          TEXT NOT NULL,
    namespace         TEXT NOT NULL,
    username          TEXT NOT NULL DEFAULT '',
    gpu_allocated     BIGINT NOT NULL DEFAULT 0,
    gpu_measured      BIGINT NOT NULL DEFAULT 0,
    gpu_busy          BIGINT NOT NULL DEFAULT 0,
    gpu_idle          BIGINT NOT NULL DEFAULT 0,
    cpu_requested     BIGINT NOT NULL DEFAULT 0,
    cpu_used          BIGINT NOT NULL DEFAULT 0,
    memory_requested  BIGINT NOT NULL DEFAULT 0,
    memory_used       BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (quota, hour_ms, workload)
);
-- Reports and the retention read by time across quotas.
CREATE INDEX real_usage_hour ON real_usage (hour_ms);

-- The windows read and written, one row per reading: a reading written
-- again (a retry, a new leader reading what the last one read) is
-- refused, so no stretch counts twice. Rows older than a day are dropped.
CREATE TABLE real_usage_windows (
    start_ms  BIGINT PRIMARY KEY,
    end_ms    BIGINT NOT NULL
);

-- The workloads whose GPUs were idle at the last reading, with their
-- streak (`quota::real_usage::idle::Streak`), replaced by each reading:
-- what "idle now", the API and the idle alerts read on every replica.
CREATE TABLE real_usage_idle (
    workload       TEXT PRIMARY KEY,
    quota          TEXT NOT NULL,
    namespace      TEXT NOT NULL,
    username       TEXT NOT NULL DEFAULT '',
    model          TEXT,
    since_ms       BIGINT NOT NULL,
    until_ms       BIGINT NOT NULL,
    cards          TEXT NOT NULL,
    idle           BIGINT NOT NULL,
    peak_permille  BIGINT NOT NULL
);
CREATE INDEX real_usage_idle_quota ON real_usage_idle (quota);
