-- Issue 29, "a trail an auditor can rely on" (docs/invoices.md). Numbered 012, after main's 011
-- (issue 28's key holder); if it clashes with another branch's migration at merge, renumber
-- this file: it depends only on 001-010.
--
-- Membership: every audit row is a link of a chain named by its stream, shard and retention
-- class (`stream/shard/class`), never NULL. Rows from before the ledger (no chain, no hash)
-- become a chain of their own per shard, `stream/shard/legacy`, hashed in the order they were
-- written.
DO $$
DECLARE
    r record;
    last bytea;
    at_chain text := NULL;
BEGIN
    FOR r IN SELECT id, stream, shard FROM allocation_frames
             WHERE chain IS NULL OR hash IS NULL ORDER BY stream, shard, id LOOP
        IF at_chain IS DISTINCT FROM r.stream || '/' || r.shard || '/legacy' THEN
            at_chain := r.stream || '/' || r.shard || '/legacy';
            last := '\x'::bytea;
        END IF;
        UPDATE allocation_frames AS f
        SET chain = at_chain, prev = last,
            hash = sha256(last || ledger_content(f.stream, f.shard, f.sequence, f.ranges,
                                                 f.detail, f.committed_at, f.keep_until))
        WHERE f.id = r.id
        RETURNING f.hash INTO last;
    END LOOP;
END $$;

ALTER TABLE allocation_frames
    ALTER COLUMN chain SET NOT NULL,
    ALTER COLUMN prev SET NOT NULL,
    ALTER COLUMN hash SET NOT NULL,
    ADD CONSTRAINT allocation_frames_chain_named
        CHECK (starts_with(chain, stream || '/' || shard || '/'));

-- ledger_content over a row's detail already read as text: verify reads a row's detail once
-- (a hot counter's is kilobytes, stored compressed) for its hash and for what else it checks.
CREATE FUNCTION ledger_content_text(
    stream text, shard text, sequence text, ranges json, detail text,
    committed_at timestamptz, keep_until timestamptz
) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to(concat_ws(E'\x1f', stream, shard, sequence, ranges::text,
                                coalesce(detail, ''),
                                floor(extract(epoch FROM committed_at) * 1000000)::bigint::text,
                                floor(extract(epoch FROM keep_until) * 1000000)::bigint::text),
                      'UTF8')
$$;

-- The counters a row names, for finding a counter's rows: those its ranges hold and those its
-- voids and confirmations name (a frame that only voids used to name none, so that a report
-- reading voids from the chain could not find it). Not in the hash: `audit verify` compares
-- the column with this function of what the hash covers.
CREATE FUNCTION ledger_counters(ranges json, detail json) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(DISTINCT n ORDER BY n), '{}') FROM (
        SELECT r ->> 0 AS n FROM json_array_elements(ranges) AS r
        UNION ALL SELECT v ->> 0 FROM json_array_elements(coalesce(detail -> 'v', '[]')) AS v
        UNION ALL SELECT c ->> 0 FROM json_array_elements(coalesce(detail -> 'c', '[]')) AS c
    ) AS names
$$;
UPDATE allocation_frames SET counters = ledger_counters(ranges, detail)
WHERE counters IS DISTINCT FROM ledger_counters(ranges, detail);

-- Where each chain starts once retention has pruned its oldest rows: the last pruned row's id
-- and hash, which the first kept row must follow. A chain with no row here starts at its first
-- row (an empty `prev`). Chains already pruned are taken as they stand.
CREATE TABLE chain_starts (
    chain      text PRIMARY KEY,
    after_id   bigint NOT NULL,
    after_hash bytea NOT NULL,
    pruned_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO chain_starts (chain, after_id, after_hash)
SELECT DISTINCT ON (chain) chain, id - 1, prev FROM allocation_frames ORDER BY chain, id;
DELETE FROM chain_starts WHERE after_hash = '\x'::bytea;

-- The ends of edges, chained: a batcher writes each edge's end once (it stopped cleanly, or it
-- went silent for 30 s and died, with the moment its requests were last all settled) into a chain of
-- its stream, `stream/edges/marks`, and the report reads which edges died from there. `marked`
-- is the audit row that holds the edge's end; `audit verify` compares the two.
ALTER TABLE edges ADD COLUMN marked bigint;
CREATE INDEX edges_unmarked ON edges (seen_at) WHERE marked IS NULL;
CREATE INDEX allocation_frames_edge_marks ON allocation_frames (id) WHERE shard = 'edges';
