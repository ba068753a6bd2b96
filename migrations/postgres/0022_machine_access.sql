-- Machine access (docs/machine-access.md): service accounts are users of
-- their own kind that never sign in (no password, no identity provider)
-- and act through API tokens an admin makes for them; any token may end
-- (expires_at_ms) and may be held to some quotas' subtrees (scope: a JSON
-- array of quota names; NULL: everything its user may do).
ALTER TABLE users ADD COLUMN kind TEXT NOT NULL DEFAULT 'person'
    CHECK (kind IN ('person', 'service'));
ALTER TABLE api_tokens ADD COLUMN expires_at_ms BIGINT;
ALTER TABLE api_tokens ADD COLUMN scope TEXT;
