-- Durable streams (Kinesis) only. Each committed frame's replies, kept in the frame's own
-- transaction: after a crash between commit and publish, the shard's next owner publishes the
-- unpublished ones again; a replay of records already applied (a rewound checkpoint) answers them
-- from here instead of allocating again. Pruned after REPLY_TTL_S.
CREATE TABLE frame_replies (
    id             bigserial PRIMARY KEY,
    stream         text NOT NULL,
    shard          text NOT NULL,
    first_sequence numeric NOT NULL,
    last_sequence  numeric NOT NULL,
    replies        bytea NOT NULL,
    published      boolean NOT NULL DEFAULT false,
    committed_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX frame_replies_shard ON frame_replies (stream, shard, last_sequence);
CREATE INDEX frame_replies_unpublished ON frame_replies (stream, shard) WHERE NOT published;
CREATE INDEX frame_replies_committed_at ON frame_replies (committed_at);

-- applied: the highest sequence ever applied on the shard. It only grows, so a checkpoint moved
-- back by hand never lets a record allocate twice. ended: a closed shard (after a reshard) read
-- to its end, so that its children may be read.
ALTER TABLE leases ADD COLUMN applied numeric;
ALTER TABLE leases ADD COLUMN ended boolean NOT NULL DEFAULT false;
