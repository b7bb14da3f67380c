-- A frame's statements, each whole (statements.py loads them once, by name).
-- Rows travel as ONE json parameter each, a JSON array of objects unpacked by json_to_recordset:
-- psycopg dumps a Python list element by element, far slower than orjson (docs/performance.md).
--
-- Shared by `plain` and `checkpoint`, the same text in both (tests/unit/test_statements.py):
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

-- name: reserve
-- Reserve each Idempotency-Key that has no live answer, with a placeholder row the frame's
-- transaction fills in (`remember`): a concurrent frame holding the same key waits until this one
-- ends, then finds its answer. An expired answer is reserved anew. Keys come sorted, so that two
-- frames never wait on each other in a cycle.
INSERT INTO idempotency_keys AS i (counter, key, count, first, last, day, expires_at)
SELECT k.counter, k.key, 0, 0, 0, current_date, now()
FROM json_to_recordset(%(keys)s::json) AS k(counter text, key text)
ON CONFLICT (counter, key) DO UPDATE SET expires_at = now()
WHERE i.expires_at <= now()
RETURNING counter, key;

-- name: claims
-- The live answers of the keys `reserve` found taken.
SELECT i.counter, i.key, i.count, i.first, i.last, i.day, i.holder
FROM idempotency_keys i
JOIN json_to_recordset(%(keys)s::json) AS k(counter text, key text)
    ON i.counter = k.counter AND i.key = k.key
WHERE i.expires_at > now();

-- name: remember
-- Each keyed taker's answer under its key, held by its record, until the retention passes.
INSERT INTO idempotency_keys (counter, key, count, first, last, day, holder, holders, expires_at)
SELECT c.counter, c.key, c.count, c.first, c.last, c.day, c.holder, ARRAY[c.holder],
    now() + make_interval(secs => %(retention)s)
FROM json_to_recordset(%(claims)s::json)
    AS c(counter text, key text, count int, first bigint, last bigint, day date, holder text)
ON CONFLICT (counter, key) DO UPDATE SET count = excluded.count, first = excluded.first,
    last = excluded.last, day = excluded.day, holder = excluded.holder,
    holders = excluded.holders, expires_at = excluded.expires_at;

-- name: hand_over
-- Records answered a key's values again (retries): each holds them too.
UPDATE idempotency_keys i
SET holders = ARRAY(SELECT DISTINCT unnest(i.holders || h.added))
FROM (SELECT counter, key, array_agg(reply) AS added
      FROM json_to_recordset(%(holders)s::json) AS e(counter text, key text, reply text)
      GROUP BY 1, 2) AS h
WHERE i.counter = h.counter AND i.key = h.key;

-- name: forget
-- A key all of whose holders were cancelled is forgotten, its claim returned (to void; the
-- holder: one of the cancelled records). `free` then takes the cancelled holders off the keys
-- some of whose holders remain: one statement may not both update and delete a row.
DELETE FROM idempotency_keys i
USING (SELECT counter, key, array_agg(reply) AS gone
       FROM json_to_recordset(%(holders)s::json) AS e(counter text, key text, reply text)
       GROUP BY 1, 2) AS h
WHERE i.counter = h.counter AND i.key = h.key AND i.holders && h.gone
    AND i.holders <@ h.gone AND i.expires_at > now()
RETURNING i.counter, i.key, i.count, i.first, i.last, i.day, h.gone[1];

-- name: free
UPDATE idempotency_keys i
SET holders = ARRAY(SELECT x FROM unnest(i.holders) AS x WHERE x <> ALL(h.gone))
FROM (SELECT counter, key, array_agg(reply) AS gone
      FROM json_to_recordset(%(holders)s::json) AS e(counter text, key text, reply text)
      GROUP BY 1, 2) AS h
WHERE i.counter = h.counter AND i.key = h.key AND i.holders && h.gone;
