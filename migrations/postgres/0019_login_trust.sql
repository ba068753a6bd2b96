-- Credentials end with the password. A user's credential generation rises
-- with every new password; a session keeps the generation it signed in
-- under (in its data) and a token the generation of the session that made
-- it, and either works only while it is still the user's. A sign-in or a
-- token request that raced a reset is therefore dead on arrival, however
-- its insert and the reset's deletes interleaved.
ALTER TABLE users ADD COLUMN credential_gen BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_tokens ADD COLUMN credential_gen BIGINT NOT NULL DEFAULT 0;

-- Lockout-proof login: browsers that signed in before (the device cookie
-- holds a random token; only its SHA-256 is kept) and the addresses a user
-- signed in from (address keys, as the login limiter counts them). Both
-- let the right password through while the username is under attack from
-- elsewhere; neither is a credential (each still needs the password).
CREATE TABLE login_devices (
    token_sha256   TEXT PRIMARY KEY,
    user_id        BIGINT NOT NULL REFERENCES users (id),
    created_at_ms  BIGINT NOT NULL,
    last_used_ms   BIGINT NOT NULL
);
CREATE INDEX login_devices_user ON login_devices (user_id, last_used_ms);

CREATE TABLE login_addresses (
    user_id  BIGINT NOT NULL REFERENCES users (id),
    client   TEXT NOT NULL,
    last_ms  BIGINT NOT NULL,
    PRIMARY KEY (user_id, client)
);
CREATE INDEX login_addresses_last ON login_addresses (last_ms);
