-- Allocation notices: a rule may ask for an info alert when what a quota
-- allocated to children plus what it uses itself reaches this share of its
-- hard. NULL (the default) sends none; usage alerts follow what runs.
ALTER TABLE alert_rules ADD COLUMN allocation_percent INTEGER CHECK (allocation_percent > 0);
