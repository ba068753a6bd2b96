-- The ledger's roll-up (docs/budgets.md §6 "Roll-up"): old entries are
-- summed into hourly, then daily rows per dimension tuple, and reports
-- add amounts in SQL.
--
-- Amounts as three signed integer limbs, each with the amount's sign:
-- amount = amount_hi × 10^18 + amount_mid × 10^9 + amount_lo, with
-- |amount_mid|, |amount_lo| < 10^9. A sum of limbs is exact in 64 bits
-- for billions of rows (an overflow is an error in both databases, never
-- a wrong total), and reports rebuild the exact i128 from the three sums.
-- `amount` (decimal text) stays the entry's value as written.
ALTER TABLE budget_ledger ADD COLUMN amount_hi BIGINT NOT NULL DEFAULT 0;
ALTER TABLE budget_ledger ADD COLUMN amount_mid BIGINT NOT NULL DEFAULT 0;
ALTER TABLE budget_ledger ADD COLUMN amount_lo BIGINT NOT NULL DEFAULT 0;
-- 0: as written; 1: an hourly roll-up row; 2: a daily roll-up row;
-- 3: kept as written for good (instants and entries with a note).
ALTER TABLE budget_ledger ADD COLUMN rollup INTEGER NOT NULL DEFAULT 0;

-- Existing rows: the limbs from the decimal text (numeric arithmetic
-- truncates toward zero, so every limb has the amount's sign).
UPDATE budget_ledger SET
    amount_lo = mod(amount::numeric, 1000000000)::bigint,
    amount_mid = trunc(mod(amount::numeric, 1000000000000000000) / 1000000000)::bigint,
    amount_hi = trunc(amount::numeric / 1000000000000000000)::bigint;
UPDATE budget_ledger SET rollup = 3 WHERE end_ms <= start_ms OR note <> '';

-- The roll-up reads the oldest rows of one level first.
CREATE INDEX budget_ledger_level ON budget_ledger (rollup, start_ms);

-- How far each level has been rolled: rows of level 1 (2) exist only for
-- cells ending at or before `until_ms` of level 1 (2); reports refuse to
-- cut finer than that. Level 0 is the lock row every roll-up chunk takes
-- first, so two replicas never roll the same rows at once.
CREATE TABLE budget_ledger_rollup (
    level     INTEGER PRIMARY KEY,
    until_ms  BIGINT NOT NULL
);
INSERT INTO budget_ledger_rollup (level, until_ms) VALUES (0, 0), (1, 0), (2, 0);
