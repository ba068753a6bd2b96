-- Alert kinds of real usage (docs/real-usage.md): 'idle_gpus' (a
-- workload's GPUs idle past its quota's idle.after, to its submitter and
-- the quota's owners) and 'real_usage_unknown' (Prometheus has not
-- answered for a while, to the admins).
ALTER TABLE alerts DROP CONSTRAINT alerts_kind_check;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_check CHECK (kind IN ('threshold', 'allocation',
    'over_quota', 'cash_forecast', 'reclaim_pending', 'queue_overdue', 'transfer_requested',
    'transfer_approved', 'transfer_rejected', 'idle_gpus', 'real_usage_unknown'));
