-- Which request an Idempotency-Key's values were last answered to (its record's reply key): a
-- cancel of that request (its client gone, its reply timed out) voids the values and frees the
-- key, so that a retry takes new ones; a cancel of a request whose key has since been answered
-- to a retry voids nothing. A value is thus delivered to the key's replay or void, never both.
ALTER TABLE idempotency_keys ADD COLUMN holder text NOT NULL DEFAULT '';
