-- Sign-in with the company's OpenID provider (docs/oidc.md): a person is a
-- provider's (issuer, subject) linked to one portal user, created on first
-- sign-in. Groups become roles by rules kept here (and in a file), and each
-- role remembers who gave it, so the mapping takes away only what it gave.

CREATE TABLE user_identities (
    issuer         TEXT NOT NULL,
    subject        TEXT NOT NULL,
    user_id        BIGINT NOT NULL REFERENCES users (id),
    created_at_ms  BIGINT NOT NULL,
    last_login_ms  BIGINT NOT NULL,
    -- The refresh token the roles are refreshed with (NULL: none given);
    -- useless without the client's secret (a confidential client).
    refresh_token  TEXT,
    -- The groups the provider named last (a JSON array), and when.
    groups         TEXT NOT NULL DEFAULT '[]',
    synced_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE UNIQUE INDEX user_identities_user ON user_identities (user_id, issuer);

-- Sign-ins under way: the SHA-256 of their state and of the browser's
-- cookie, the nonce and PKCE verifier; each row is taken (deleted) by its
-- one callback, or pruned after ten minutes.
CREATE TABLE oidc_flows (
    state_sha256    TEXT PRIMARY KEY,
    browser_sha256  TEXT NOT NULL,
    nonce           TEXT NOT NULL,
    verifier        TEXT NOT NULL,
    next_path       TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL
);
CREATE INDEX oidc_flows_created ON oidc_flows (created_at_ms);

-- ID tokens already used to sign in, until they expire: one is never taken
-- twice, whatever session it is brought into.
CREATE TABLE oidc_seen_tokens (
    token_sha256   TEXT PRIMARY KEY,
    expires_at_ms  BIGINT NOT NULL
);
CREATE INDEX oidc_seen_tokens_expiry ON oidc_seen_tokens (expires_at_ms);

-- The portal's rules from provider groups to roles ('' quota for admin).
CREATE TABLE group_roles (
    group_name     TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('admin', 'owner', 'member')),
    quota          TEXT NOT NULL DEFAULT '',
    created_at_ms  BIGINT NOT NULL,
    created_by     TEXT NOT NULL,
    PRIMARY KEY (group_name, role, quota)
);

-- Who gave a role and an admin flag: by hand (an admin, an owner) or by
-- the group mapping. Everything before this was by hand.
ALTER TABLE role_bindings ADD COLUMN source TEXT NOT NULL DEFAULT 'hand'
    CHECK (source IN ('hand', 'mapping'));
ALTER TABLE users ADD COLUMN admin_source TEXT NOT NULL DEFAULT 'hand'
    CHECK (admin_source IN ('hand', 'mapping'));

-- The username the Kubernetes API server gives the same person (a review's
-- userInfo.username, in the canonical form status.users keeps), at most one
-- user each.
ALTER TABLE users ADD COLUMN kube_username TEXT;
CREATE UNIQUE INDEX users_kube_username ON users (kube_username);
