-- The long-running edges (server workers, the embedded stack), so that the ledger can say which
-- values may not have reached their clients. An edge writes its row when it starts and every
-- ALIVE_EVERY_S after, with `settled_at`: every request it began before then was answered (or
-- cancelled) by then. It sets ended_at when it stops cleanly, every request answered. A row with
-- no ended_at and a stale seen_at is an edge that died: the values issued to its requests at or
-- after its last settled_at are listed by the report as "may not have reached their clients".
-- The id is the edge's reply-key prefix, which the audit trail keeps with each run of values.
CREATE TABLE edges (
    id         text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    settled_at timestamptz NOT NULL,
    ended_at   timestamptz
);
