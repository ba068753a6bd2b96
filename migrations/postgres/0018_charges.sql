-- Each charge a row of its own, out of the status JSON (README, issue 16):
-- an admission changes one row instead of rewriting a status that grows
-- with every workload, and no trigger walks that status again.
--
-- A write names what it changes of the quota's charges in its row
-- (charges_delta: {"written": {workload: charge, ...}, "removed":
-- [workload, ...]}, `store::sql::charge_changes`) and the trigger below
-- applies it, in the statement that writes the row: a write stays one
-- statement, and a row whose compare-and-swap fails changes no charge.
-- The column keeps the changes of the write that made the row's version.
--
-- The rows also answer which quota holds a workload: a workload two
-- quotas hold for a moment (a move) is in the one that took it last (the
-- higher id).
CREATE TABLE charges (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    quota     TEXT NOT NULL,
    workload  TEXT NOT NULL,
    charge    TEXT NOT NULL,
    UNIQUE (quota, workload)
);
CREATE INDEX charges_workload ON charges (workload);

DROP TRIGGER quotas_bindings ON quotas;
DROP FUNCTION bizrq_sync_workload_bindings();
DROP TABLE workload_bindings;

INSERT INTO charges (quota, workload, charge)
    SELECT q.name, j.key, j.value::text
      FROM quotas q, jsonb_each(q.status::jsonb -> 'workloads') j
     ORDER BY q.name, j.key;
UPDATE quotas SET status = (status::jsonb - 'workloads')::text
 WHERE status::jsonb ? 'workloads';

ALTER TABLE quotas ADD COLUMN charges_delta TEXT;

-- (json, not jsonb: a charge is stored in the very text it was written
-- in, so a replica that holds it already knows it without parsing it.)
CREATE FUNCTION bizrq_apply_charges() RETURNS trigger AS $$
DECLARE
    delta json;
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM charges WHERE quota = OLD.name;
        RETURN OLD;
    END IF;
    IF NEW.charges_delta IS NULL THEN
        RETURN NEW;
    END IF;
    delta := NEW.charges_delta::json;
    DELETE FROM charges
     WHERE quota = NEW.name
       AND workload IN (SELECT json_array_elements_text(delta -> 'removed'));
    INSERT INTO charges (quota, workload, charge)
        SELECT NEW.name, key, value::text FROM json_each(delta -> 'written')
        ON CONFLICT (quota, workload) DO UPDATE SET charge = excluded.charge;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER quotas_charges
    AFTER INSERT OR UPDATE OF charges_delta OR DELETE ON quotas
    FOR EACH ROW EXECUTE FUNCTION bizrq_apply_charges();

-- A contended quota's locked read-modify-write (`SqlStore::modify_locked`):
-- the row locked, then it and its charges (as `store::sql::with_charges`
-- reads them) in one round trip. The read after the lock is a statement
-- of its own, so it sees the version the lock was granted on (each
-- statement of a function takes a fresh snapshot under READ COMMITTED),
-- and no writer changes the quota's charges while the lock is held.
CREATE FUNCTION bizrq_lock_quota(q text)
RETURNS TABLE (name text, parent text, spec text, status text, version bigint,
               uid text, created_at text) AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM quotas WHERE quotas.name = q FOR UPDATE;
    RETURN QUERY
        SELECT quotas.name, quotas.parent, quotas.spec, quotas.status, quotas.version,
               quotas.uid, quotas.created_at
          FROM quotas WHERE quotas.name = q
        UNION ALL
        SELECT c.quota, c.workload, c.charge, NULL, NULL, NULL, NULL
          FROM charges c WHERE c.quota = q;
END
$$ LANGUAGE plpgsql;

-- A bizrq from before this migration still running beside a newer one
-- (a rolling upgrade) writes statuses with their charges inside and knows
-- nothing of these rows: its writes are refused, loudly, instead of
-- charges being lost or admitted twice. Stop every older replica before
-- starting one of this version (README, "Run it").
CREATE FUNCTION bizrq_refuse_charges_inside() RETURNS trigger AS $$
BEGIN
    IF position('"workloads":' in NEW.status) > 0
       AND (NEW.status::json -> 'workloads') IS NOT NULL THEN
        RAISE EXCEPTION 'bizrq: a status with its charges inside was written by a bizrq older than this database (migration 0018): stop every older replica';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER quotas_refuse_charges_inside
    BEFORE INSERT OR UPDATE OF status ON quotas
    FOR EACH ROW EXECUTE FUNCTION bizrq_refuse_charges_inside();
