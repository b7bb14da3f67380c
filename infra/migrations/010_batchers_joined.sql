-- A batcher's place in the order the shards are shared in is when it joined, not its name: one
-- that joins takes what is left over, never a shard an earlier batcher holds and would hand
-- over a lease period later. A batcher restarted under its own name keeps its place.
ALTER TABLE batchers ADD COLUMN joined_at timestamptz NOT NULL DEFAULT now();
