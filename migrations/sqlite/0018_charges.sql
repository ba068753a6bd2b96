-- Each charge a row of its own, out of the status JSON (README, issue 16):
-- an admission changes one row instead of rewriting a status that grows
-- with every workload, and no trigger walks that status again.
--
-- A write names what it changes of the quota's charges in its row
-- (charges_delta: {"written": {workload: charge, ...}, "removed":
-- [workload, ...]}, `store::sql::charge_changes`) and the triggers below
-- apply it, in the statement that writes the row: a write stays one
-- statement, and a row whose compare-and-swap fails changes no charge.
-- The column keeps the changes of the write that made the row's version.
--
-- The rows also answer which quota holds a workload: a workload two
-- quotas hold for a moment (a move) is in the one that took it last (the
-- higher id).
CREATE TABLE charges (
    id        INTEGER PRIMARY KEY,
    quota     TEXT NOT NULL,
    workload  TEXT NOT NULL,
    charge    TEXT NOT NULL,
    UNIQUE (quota, workload)
);
CREATE INDEX charges_workload ON charges (workload);

DROP TRIGGER quotas_bindings_insert;
DROP TRIGGER quotas_bindings_update;
DROP TRIGGER quotas_bindings_delete;
DROP TABLE workload_bindings;

INSERT INTO charges (quota, workload, charge)
    SELECT q.name, j.key, j.value
      FROM quotas q, json_each(q.status, '$.workloads') j
     ORDER BY q.name, j.key;
UPDATE quotas SET status = json_remove(status, '$.workloads')
 WHERE json_type(status, '$.workloads') IS NOT NULL;

ALTER TABLE quotas ADD COLUMN charges_delta TEXT;

CREATE TRIGGER quotas_charges_insert AFTER INSERT ON quotas
WHEN NEW.charges_delta IS NOT NULL
BEGIN
    INSERT INTO charges (quota, workload, charge)
        SELECT NEW.name, key, value FROM json_each(NEW.charges_delta, '$.written') WHERE true
        ON CONFLICT (quota, workload) DO UPDATE SET charge = excluded.charge;
END;

CREATE TRIGGER quotas_charges_update AFTER UPDATE OF charges_delta ON quotas
WHEN NEW.charges_delta IS NOT NULL
BEGIN
    DELETE FROM charges
     WHERE quota = NEW.name
       AND workload IN (SELECT value FROM json_each(NEW.charges_delta, '$.removed'));
    INSERT INTO charges (quota, workload, charge)
        SELECT NEW.name, key, value FROM json_each(NEW.charges_delta, '$.written') WHERE true
        ON CONFLICT (quota, workload) DO UPDATE SET charge = excluded.charge;
END;

CREATE TRIGGER quotas_charges_delete AFTER DELETE ON quotas
BEGIN
    DELETE FROM charges WHERE quota = OLD.name;
END;

-- A bizrq from before this migration still running beside a newer one
-- (a rolling upgrade) writes statuses with their charges inside and knows
-- nothing of these rows: its writes are refused, loudly, instead of
-- charges being lost or admitted twice. Stop every older replica before
-- starting one of this version (README, "Run it").
CREATE TRIGGER quotas_refuse_charges_inside_insert BEFORE INSERT ON quotas
WHEN instr(NEW.status, '"workloads":') > 0
 AND json_type(NEW.status, '$.workloads') IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'bizrq: a status with its charges inside was written by a bizrq older than this database (migration 0018): stop every older replica');
END;

CREATE TRIGGER quotas_refuse_charges_inside_update BEFORE UPDATE OF status ON quotas
WHEN instr(NEW.status, '"workloads":') > 0
 AND json_type(NEW.status, '$.workloads') IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'bizrq: a status with its charges inside was written by a bizrq older than this database (migration 0018): stop every older replica');
END;
