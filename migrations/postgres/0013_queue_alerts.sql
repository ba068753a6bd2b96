-- Alert kinds the engine opens that the CHECK of 0006 did not list:
-- 'allocation' (0010's notices, refused by the CHECK until now, which
-- failed the whole evaluation they were in) and 'queue_overdue' (a queued
-- workload waiting longer than its quota's queueing.alertAfterSeconds).
ALTER TABLE alerts DROP CONSTRAINT alerts_kind_check;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_check CHECK (kind IN ('threshold', 'allocation',
    'over_quota', 'cash_forecast', 'reclaim_pending', 'queue_overdue', 'transfer_requested',
    'transfer_approved', 'transfer_rejected'));
