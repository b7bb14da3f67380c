-- Every request an Idempotency-Key's values were answered to and that has not been cancelled
-- (their records' reply keys). A cancel takes its request out; the values are void, abandoned,
-- and the key freed for a retry to take new ones, only once every request they were answered
-- to was cancelled: one answered and never cancelled may have reached its client.
-- 011's single holder passed to the try sent last by its edge's clock, and a try that a busy
-- worker stamped after its own retry (two workers) took the hold from the retry that delivered
-- the values; its cancel voided them (the fault matrix's server-2w-cuts: a delivered value void).
ALTER TABLE idempotency_keys ADD COLUMN holders text[] NOT NULL DEFAULT '{}';
UPDATE idempotency_keys SET holders = ARRAY[holder] WHERE holder <> '';
-- `holder` stays: the request that took the values. `held_since` decided nothing any more.
ALTER TABLE idempotency_keys DROP COLUMN held_since;
