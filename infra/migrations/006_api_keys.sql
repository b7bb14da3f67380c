-- API keys (infra/keys.py): only the SHA-256 of a secret is kept. A revoked key stays, for the
-- record; its name may be given to a new key. The edge reads the whole table every
-- KEYS_REFRESH_S and writes last_used_at back at the same pace, never once per request.
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    name         text NOT NULL,
    digest       bytea NOT NULL,
    scopes       text[] NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE UNIQUE INDEX api_keys_live_name ON api_keys (name) WHERE revoked_at IS NULL;
