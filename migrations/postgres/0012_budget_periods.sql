-- Closed budget periods (docs/budgets.md §9), kept for reports: one row per
-- quota, cash key and period start. The row is written in the same
-- transaction as the status that closed the period; the key makes a
-- repeated insert (a retried write, another replica) a no-op. Amounts are
-- in the record's JSON (acc, decimal strings: they exceed 64 bits).
CREATE TABLE budget_periods (
    quota     TEXT NOT NULL,
    key       TEXT NOT NULL,
    start_ms  BIGINT NOT NULL,
    end_ms    BIGINT NOT NULL,
    record    TEXT NOT NULL,
    PRIMARY KEY (quota, key, start_ms)
);

-- A deleted quota takes its periods with it, as it does its role bindings
-- (0009): a later quota of the same name starts with none.
CREATE FUNCTION bizrq_forget_budget_periods() RETURNS trigger AS $$
BEGIN
    DELETE FROM budget_periods WHERE quota = OLD.name;
    RETURN OLD;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER quotas_forget_budget_periods
    AFTER DELETE ON quotas
    FOR EACH ROW EXECUTE FUNCTION bizrq_forget_budget_periods();
