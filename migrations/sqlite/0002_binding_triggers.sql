-- workload_bindings is an index of status.workloads: let the database keep
-- it, inside the statement that writes the status. A status write is then
-- one statement (no explicit transaction), and the index cannot drift from
-- the ledger it indexes.
CREATE TRIGGER quotas_bindings_insert AFTER INSERT ON quotas
BEGIN
    INSERT INTO workload_bindings (workload, quota)
        SELECT key, NEW.name FROM json_each(NEW.status, '$.workloads') WHERE true
        ON CONFLICT (workload) DO UPDATE SET quota = excluded.quota;
END;

CREATE TRIGGER quotas_bindings_update AFTER UPDATE OF status ON quotas
BEGIN
    DELETE FROM workload_bindings
        WHERE quota = NEW.name
          AND workload NOT IN (SELECT key FROM json_each(NEW.status, '$.workloads'));
    INSERT INTO workload_bindings (workload, quota)
        SELECT key, NEW.name FROM json_each(NEW.status, '$.workloads') WHERE true
        ON CONFLICT (workload) DO UPDATE SET quota = excluded.quota
        WHERE workload_bindings.quota <> excluded.quota;
END;

CREATE TRIGGER quotas_bindings_delete AFTER DELETE ON quotas
BEGIN
    DELETE FROM workload_bindings WHERE quota = OLD.name;
END;
