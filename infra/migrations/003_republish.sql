-- The replies of committed frames on a durable stream, kept in the frame's own transaction until
-- they are known to be published: after a crash between commit and publish, the shard's next
-- owner publishes them again, rebuilt from what was committed (values are never allocated twice).
CREATE TABLE unpublished (
    id           bigserial PRIMARY KEY,
    stream       text NOT NULL,
    shard        text NOT NULL,
    sequence     text NOT NULL,
    replies      bytea NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX unpublished_shard ON unpublished (stream, shard, id);

-- A closed shard (after a reshard) read to its end: its children may now be read.
ALTER TABLE leases ADD COLUMN ended boolean NOT NULL DEFAULT false;
