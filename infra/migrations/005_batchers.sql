-- The live batchers of each stream, so that they can share its shards: each refreshes its row
-- every LEASE_TTL_S / 3 and deletes it when it stops. A row not seen for LEASE_TTL_S is a dead
-- batcher's; its leases expire in the same time and the others take its shards.
CREATE TABLE batchers (
    stream  text NOT NULL,
    owner   text NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, owner)
);
