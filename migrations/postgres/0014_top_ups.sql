-- Top-ups (docs/budgets.md §5): a transfer request of kind 'topUp' adds to
-- one cash key's current period of to_quota (from_quota is NULL), from its
-- parent's current period or as an admin's grant.
--
-- top_up:        JSON {source, until?, withdrawn?, expiredAt?}
-- top_up_until:  when its unspent part is withdrawn; set while that is
--                still to do (a done top-up with an expiry), NULL after
-- schedule_key:  '<quota> <key> <period start>' for a policy's scheduled
--                top-up from the parent: one row per period, however many
--                replicas' sweeps race to insert it.
ALTER TABLE transfers ADD COLUMN kind TEXT NOT NULL DEFAULT 'move';
ALTER TABLE transfers ADD COLUMN top_up TEXT;
ALTER TABLE transfers ADD COLUMN top_up_until BIGINT;
ALTER TABLE transfers ADD COLUMN schedule_key TEXT;
CREATE INDEX transfers_top_up_until ON transfers (top_up_until) WHERE top_up_until IS NOT NULL;
CREATE UNIQUE INDEX transfers_one_schedule ON transfers (schedule_key) WHERE schedule_key IS NOT NULL;
