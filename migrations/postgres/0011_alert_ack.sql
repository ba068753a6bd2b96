-- Acknowledge or snooze an open alert (the portal and the API): it stays
-- open while its condition holds, but leaves the navigation's badge and the
-- overview's "needs attention" until it is snoozed no more. A resolved
-- alert that opens again is a new row: nobody has acknowledged it.
ALTER TABLE alerts ADD COLUMN acked_by TEXT;
ALTER TABLE alerts ADD COLUMN acked_at BIGINT;
ALTER TABLE alerts ADD COLUMN snoozed_until BIGINT;
ALTER TABLE alerts ADD COLUMN snoozed_by TEXT;
