-- workload_bindings is an index of status.workloads: let the database keep
-- it, inside the statement that writes the status. A status write is then
-- one statement (no explicit transaction), and the index cannot drift from
-- the ledger it indexes.
CREATE FUNCTION bizrq_sync_workload_bindings() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM workload_bindings WHERE quota = OLD.name;
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM workload_bindings
            WHERE quota = NEW.name
              AND workload NOT IN (
                  SELECT jsonb_object_keys(COALESCE(NEW.status::jsonb -> 'workloads', '{}'::jsonb)));
    END IF;
    INSERT INTO workload_bindings (workload, quota)
        SELECT k, NEW.name
          FROM jsonb_object_keys(COALESCE(NEW.status::jsonb -> 'workloads', '{}'::jsonb)) AS k
        ON CONFLICT (workload) DO UPDATE SET quota = excluded.quota
        WHERE workload_bindings.quota <> excluded.quota;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER quotas_bindings
    AFTER INSERT OR UPDATE OF status OR DELETE ON quotas
    FOR EACH ROW EXECUTE FUNCTION bizrq_sync_workload_bindings();
