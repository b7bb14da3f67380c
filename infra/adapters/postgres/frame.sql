-- A frame's statements, each whole (infra/adapters/postgres/queries.py loads them once, by name).
-- Rows travel as ONE json parameter each, a JSON array of objects unpacked by json_to_recordset:
-- psycopg dumps a Python list element by element, far slower than orjson (docs/performance.md).
--
-- Shared by `plain` and `checkpoint`, and the same text in both:
-- * `fenced`, the checkpoint fenced by the lease's epoch: it yields a row only while the lease
--   holds; everything else the statement writes is written only if it does.
-- * the audit rows, from a CTE `rows` (klass, keep_s, ranges, detail, names): each the next link
--   of its chain, stream/shard/class. `linked` is MATERIALIZED: inlined, its `prev` (named twice)
--   was looked up twice a row. A chain retention pruned to nothing goes on from its last pruned
--   row (chain_starts). An audit row's hash covers its content (ledger_content, migration 007):
--   tests/integration/test_frame_chains.py holds these statements to the chains they always wrote.

-- name: plain
-- A plain frame (only takers, no Idempotency-Key) in ONE statement, one round trip, its own
-- transaction: the fence; the addition, only if the fence holds, in name order (the order the
-- rows are locked in, so that two batchers cannot deadlock), and not to a period whose row says
-- fewer values were handed out than its floor (the audit trail's highest: moved back by hand, it
-- would hand them out again); the audit rows, their ranges made from what the addition returned,
-- grouped by retention class; and the answer: each period's total, and one row of NULLs if the
-- fence held. bench/statement.py times the parts apart.
WITH fenced AS (
    UPDATE leases SET sequence = %(sequence)s::text,
        applied = GREATEST(applied, %(sequence)s::numeric)
    WHERE stream = %(stream)s AND shard = %(shard)s AND owner = %(owner)s AND epoch = %(epoch)s
    RETURNING 1
),
d AS (
    SELECT * FROM json_to_recordset(%(demand)s::json)
        AS d(counter text, period text, delta bigint, start bigint, klass text, floor bigint)
),
alloc AS (
    INSERT INTO counter_values AS cv (counter, period, allocated)
    SELECT counter, period, delta FROM d
    WHERE EXISTS (SELECT FROM fenced)
        AND coalesce((SELECT b.allocated FROM counter_values b
                      WHERE b.counter = d.counter AND b.period = d.period), 0) >= d.floor
    ORDER BY 1, 2
    ON CONFLICT (counter, period) DO UPDATE SET allocated = cv.allocated + excluded.allocated
    RETURNING counter, period, allocated
),
k AS (
    SELECT * FROM json_to_recordset(%(audits)s::json) AS k(klass text, keep_s float8, detail json)
),
made AS (
    SELECT d.klass,
        json_agg(json_build_array(a.counter, a.period,
                                  d.start + a.allocated - d.delta, d.start - 1 + a.allocated)
                 ORDER BY a.counter, a.period) AS ranges,
        array_agg(DISTINCT a.counter) AS names, count(*) AS pairs
    FROM alloc a JOIN d ON d.counter = a.counter AND d.period = a.period
    GROUP BY d.klass
),
-- A period the floor refused allocated nothing: its runs leave the row's detail (rare, so the
-- detail is rebuilt only when a class allocated fewer periods than it asked for).
rows AS (
    SELECT made.klass, k.keep_s, made.ranges,
        CASE WHEN made.pairs = json_array_length(k.detail->'r') THEN k.detail
        ELSE json_build_object(
            'r', (SELECT json_agg(e) FROM json_array_elements(k.detail->'r') e
                  WHERE EXISTS (SELECT FROM alloc a WHERE a.counter = e->>0 AND a.period = e->>1)),
            'v', k.detail->'v')
        END AS detail,
        made.names
    FROM made JOIN k ON k.klass = made.klass
),
t AS (SELECT now() AS at),
linked AS MATERIALIZED (
    SELECT rows.*, t.at, t.at + make_interval(secs => rows.keep_s) AS keep,
        coalesce((SELECT f.hash FROM allocation_frames f
                  WHERE f.chain = %(chain)s || rows.klass ORDER BY f.id DESC LIMIT 1),
                 (SELECT s.after_hash FROM chain_starts s WHERE s.chain = %(chain)s || rows.klass),
                 '\x'::bytea) AS prev
    FROM rows, t
),
audit AS (
    INSERT INTO allocation_frames (stream, shard, sequence, chain, ranges, detail, counters,
                                   committed_at, keep_until, prev, hash)
    SELECT %(stream)s, %(shard)s, %(sequence)s::text, %(chain)s || klass, ranges, detail, names,
        at, keep, prev,
        sha256(prev || ledger_content(%(stream)s, %(shard)s, %(sequence)s::text, ranges, detail,
                                      at, keep))
    FROM linked WHERE EXISTS (SELECT FROM fenced)
    RETURNING 1
)
SELECT counter, period, allocated FROM alloc
UNION ALL SELECT NULL, NULL, NULL FROM fenced;

-- name: checkpoint
-- The end of a frame's transaction: the fence, the checkpoint and the frame's audit rows (their
-- ranges and counters as the frame worked them out) in one statement; a row if the fence held.
WITH fenced AS (
    UPDATE leases SET sequence = %(sequence)s::text,
        applied = GREATEST(applied, %(sequence)s::numeric)
    WHERE stream = %(stream)s AND shard = %(shard)s AND owner = %(owner)s AND epoch = %(epoch)s
    RETURNING 1
),
rows AS (
    SELECT * FROM json_to_recordset(%(audits)s::json)
        AS k(klass text, keep_s float8, ranges json, detail json, names text[])
),
t AS (SELECT now() AS at),
linked AS MATERIALIZED (
    SELECT rows.*, t.at, t.at + make_interval(secs => rows.keep_s) AS keep,
        coalesce((SELECT f.hash FROM allocation_frames f
                  WHERE f.chain = %(chain)s || rows.klass ORDER BY f.id DESC LIMIT 1),
                 (SELECT s.after_hash FROM chain_starts s WHERE s.chain = %(chain)s || rows.klass),
                 '\x'::bytea) AS prev
    FROM rows, t
),
audit AS (
    INSERT INTO allocation_frames (stream, shard, sequence, chain, ranges, detail, counters,
                                   committed_at, keep_until, prev, hash)
    SELECT %(stream)s, %(shard)s, %(sequence)s::text, %(chain)s || klass, ranges, detail, names,
        at, keep, prev,
        sha256(prev || ledger_content(%(stream)s, %(shard)s, %(sequence)s::text, ranges, detail,
                                      at, keep))
    FROM linked WHERE EXISTS (SELECT FROM fenced)
    RETURNING 1
)
SELECT 1 FROM fenced;

-- name: allocate
-- A frame's addition inside its transaction: each period's delta added in name order (no
-- deadlock between batchers), not to a period whose row is below its floor (as in `plain`);
-- each period's total after it.
INSERT INTO counter_values AS cv (counter, period, allocated)
SELECT counter, period, delta
FROM json_to_recordset(%(deltas)s::json) AS d(counter text, period text, delta bigint, floor bigint)
WHERE coalesce((SELECT b.allocated FROM counter_values b
                WHERE b.counter = d.counter AND b.period = d.period), 0) >= d.floor
ORDER BY 1, 2
ON CONFLICT (counter, period) DO UPDATE SET allocated = cv.allocated + excluded.allocated
RETURNING counter, period, allocated;
