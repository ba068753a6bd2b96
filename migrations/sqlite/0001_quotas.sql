-- Quota objects in standalone mode: the CRD's spec and status as JSON, with
-- a version column for compare-and-swap (the resourceVersion of SQL).
CREATE TABLE quotas (
    name        TEXT PRIMARY KEY,
    parent      TEXT NOT NULL,
    spec        TEXT NOT NULL,
    status      TEXT NOT NULL,
    version     BIGINT NOT NULL,
    uid         TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX quotas_parent ON quotas (parent);

-- Which quota holds a workload's charge, so scale and HPA reviews find
-- their workload (kept by trigger from status.workloads, see 0002).
CREATE TABLE workload_bindings (
    workload  TEXT PRIMARY KEY,
    quota     TEXT NOT NULL
);
CREATE INDEX workload_bindings_quota ON workload_bindings (quota);

CREATE TABLE settings (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
