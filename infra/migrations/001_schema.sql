-- Counters, their per-period state, idempotency keys, shard leases with checkpoints,
-- the allocations each frame made, and dead letters.

CREATE TABLE counters (
    name        text PRIMARY KEY,
    start       bigint NOT NULL,
    template    text NOT NULL,
    reset       text NOT NULL CHECK (reset IN ('never', 'yearly', 'monthly', 'daily')),
    timezone    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- allocated: how many values the counter has handed out in the period ('' when it never resets);
-- the last value handed out is start - 1 + allocated.
CREATE TABLE counter_values (
    counter     text NOT NULL REFERENCES counters (name),
    period      text NOT NULL,
    allocated   bigint NOT NULL CHECK (allocated >= 0),
    PRIMARY KEY (counter, period)
);

CREATE TABLE idempotency_keys (
    counter     text NOT NULL,
    key         text NOT NULL,
    count       integer NOT NULL,
    first       bigint NOT NULL,
    last        bigint NOT NULL,
    day         date NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (counter, key)
);
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- One row per shard: who may apply its records (owner, fenced by epoch) and how far it got.
CREATE TABLE leases (
    stream      text NOT NULL,
    shard       text NOT NULL,
    owner       text NOT NULL,
    epoch       bigint NOT NULL,
    sequence    text,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (stream, shard)
);

-- One row per counter and period per committed frame: the audit trail of handed-out ranges.
CREATE TABLE allocations (
    id           bigserial PRIMARY KEY,
    counter      text NOT NULL,
    period       text NOT NULL,
    first        bigint NOT NULL,
    last         bigint NOT NULL,
    stream       text NOT NULL,
    shard        text NOT NULL,
    sequence     text NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX allocations_counter ON allocations (counter, period, first);

CREATE TABLE dead_letters (
    id          bigserial PRIMARY KEY,
    stream      text NOT NULL,
    shard       text NOT NULL,
    sequence    text NOT NULL,
    problem     text NOT NULL,
    raw         bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
