-- The portal's accounts and authorisation (always in SQL, also in cluster
-- mode). Flags are SMALLINT 0/1 and instants BIGINT milliseconds since the
-- epoch, the same on SQLite and PostgreSQL, so one query text serves both.

CREATE TABLE users (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    -- Lower case; checked by the server (letters, digits, '.', '_', '-').
    username       TEXT NOT NULL UNIQUE,
    -- PHC string (argon2id) from the password-auth crate.
    password_hash  TEXT NOT NULL,
    is_admin       SMALLINT NOT NULL DEFAULT 0 CHECK (is_admin IN (0, 1)),
    disabled       SMALLINT NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    created_at_ms  BIGINT NOT NULL
);

-- A user's role on a quota's subtree; at most one role per user and quota.
-- The quota is a name, not a foreign key: in cluster mode quotas live in
-- the cluster, and a binding may name a quota that is created later.
CREATE TABLE role_bindings (
    user_id        BIGINT NOT NULL REFERENCES users (id),
    quota          TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('owner', 'member')),
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (user_id, quota)
);
CREATE INDEX role_bindings_quota ON role_bindings (quota);

-- tower-sessions records. user_id repeats the session's user (also in data)
-- so that disabling a user can end its sessions.
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    user_id    BIGINT,
    data       TEXT NOT NULL,
    expiry_ms  BIGINT NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expiry_ms);
CREATE INDEX sessions_user ON sessions (user_id);

-- Personal API tokens: only the SHA-256 of the token is kept.
CREATE TABLE api_tokens (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id        BIGINT NOT NULL REFERENCES users (id),
    name           TEXT NOT NULL,
    token_sha256   TEXT NOT NULL UNIQUE,
    created_at_ms  BIGINT NOT NULL,
    last_used_ms   BIGINT,
    revoked_at_ms  BIGINT
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

-- Failed logins, for rate limiting across replicas: counted per username
-- and client address over a sliding window, pruned by age.
CREATE TABLE login_failures (
    username  TEXT NOT NULL,
    client    TEXT NOT NULL,
    at_ms     BIGINT NOT NULL
);
CREATE INDEX login_failures_key ON login_failures (username, client, at_ms);
CREATE INDEX login_failures_at ON login_failures (at_ms);

-- Every change made through the portal or the JSON API. Append-only: the
-- triggers below refuse UPDATE and DELETE.
CREATE TABLE audit_log (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms   BIGINT NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL,
    -- JSON of the object before and after the change (NULL: none).
    before  TEXT,
    after   TEXT,
    detail  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_at ON audit_log (at_ms);
CREATE INDEX audit_log_target ON audit_log (target, at_ms);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
