-- A ledger entry's id is led by its start (16 hex digits, then '-', then
-- the hash it was), so the entries of one window sit together in the
-- primary key's index: an append touches a few pages of it instead of one
-- page per entry (the hash alone scattered them). Stored ids get the same
-- lead, so an entry written again after the upgrade still finds its row.
UPDATE budget_ledger SET id = printf('%016x', max(start_ms, 0)) || '-' || id;
