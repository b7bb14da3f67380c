-- Which request an Idempotency-Key's values were last answered to (its record's reply key): a
-- cancel of that request (its client gone, its reply timed out) voids the values and frees the
-- key, so that a retry takes new ones; a cancel of a request whose key has since been answered
-- to a retry voids nothing. A value is thus delivered to the key's replay or void, never both.
-- `held_since`: when the holder was sent (Unix seconds, its edge's clock); the hold passes only
-- to a request sent later, so that a try applied after its own retry (two edges, two batchers)
-- does not take the values back from the retry that delivered them.
ALTER TABLE idempotency_keys
    ADD COLUMN holder text NOT NULL DEFAULT '',
    ADD COLUMN held_since double precision NOT NULL DEFAULT 0;
