-- The ledger: every value accounted for (docs/invoices.md).
--
-- A frame's audit rows now also say who took what (`detail`: each record's counter, period,
-- count, requester, Idempotency-Key and reply key, in the order its range was split; and the
-- frame's voids), which counters they name (`counters`, for one counter's report), and how long
-- they are kept (`keep_until`). A frame writes one row per retention class of its counters
-- (the counter's retention and reset), each the next link of its own hash chain,
-- `stream/shard/class`: `hash` is the SHA-256 of the previous row's hash (`prev`) and this
-- row's content (ledger_content), so a changed, removed or inserted row breaks the chain. One
-- batcher writes a shard at a time (its lease), so concurrent batchers never wait on each
-- other's chains; and a chain's rows all expire in the order they were written, so pruning
-- removes a chain's oldest rows and never opens a hole in it.

ALTER TABLE counters ADD COLUMN retention_days integer CHECK (retention_days > 0);

ALTER TABLE allocation_frames
    ADD COLUMN chain text,
    ADD COLUMN detail json,
    ADD COLUMN counters text[] NOT NULL DEFAULT '{}',
    ADD COLUMN keep_until timestamptz,
    ADD COLUMN prev bytea,
    ADD COLUMN hash bytea;
UPDATE allocation_frames
SET counters = ARRAY(SELECT DISTINCT r ->> 0 FROM json_array_elements(ranges) AS r),
    keep_until = committed_at + interval '1 day';
ALTER TABLE allocation_frames ALTER COLUMN keep_until SET NOT NULL;
CREATE INDEX allocation_frames_counters ON allocation_frames USING gin (counters);
CREATE INDEX allocation_frames_keep_until ON allocation_frames (keep_until);
CREATE INDEX allocation_frames_chain ON allocation_frames (chain, id);
DROP INDEX allocation_frames_committed_at;

-- What a row's hash covers besides the previous hash: every column that says what happened.
-- Times as whole microseconds since the epoch, so that no session setting changes the text.
CREATE FUNCTION ledger_content(
    stream text, shard text, sequence text, ranges json, detail json,
    committed_at timestamptz, keep_until timestamptz
) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to(concat_ws(E'\x1f', stream, shard, sequence, ranges::text,
                                coalesce(detail::text, ''),
                                floor(extract(epoch FROM committed_at) * 1000000)::bigint::text,
                                floor(extract(epoch FROM keep_until) * 1000000)::bigint::text),
                      'UTF8')
$$;

-- Values taken out of use, and why: a user's reason (an invoice cancelled), or `abandoned` (no
-- client received them). A void never frees a value for reuse. Each is in its frame's audit
-- row too (`detail`), so a chain covers it; this table is for finding them.
CREATE TABLE voids (
    counter    text NOT NULL,
    period     text NOT NULL,
    first      bigint NOT NULL,
    last       bigint NOT NULL CHECK (last >= first),
    reason     text NOT NULL,
    who        text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT now(),
    keep_until timestamptz NOT NULL,
    PRIMARY KEY (counter, period, first)
);
CREATE INDEX voids_keep_until ON voids (keep_until);

-- How far retention has pruned each counter's period: the highest value whose audit row is gone.
-- A report names the values up to it as pruned, not as gaps.
CREATE TABLE pruned (
    counter text NOT NULL,
    period  text NOT NULL,
    upto    bigint NOT NULL,
    PRIMARY KEY (counter, period)
);
