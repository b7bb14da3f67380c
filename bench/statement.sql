-- The parts of a plain frame's statement (infra/adapters/postgres/frame.sql: `plain`) that
-- bench/statement.py times apart, and bench/standins.py serves in its place (`unaudited`).
-- Written out from it: a change to `plain` that these should follow shows in their times.

-- name: fence
-- The fence alone: the lease's checkpoint.
WITH fenced AS (
    UPDATE leases SET sequence = %(sequence)s::text,
        applied = GREATEST(applied, %(sequence)s::numeric)
    WHERE stream = %(stream)s AND shard = %(shard)s AND owner = %(owner)s AND epoch = %(epoch)s
    RETURNING 1
)
SELECT count(*) FROM fenced;

-- name: addition
-- The addition alone: the counter's row.
INSERT INTO counter_values AS cv (counter, period, allocated)
SELECT %(counter)s::text, ''::text, %(delta)s::bigint
ON CONFLICT (counter, period) DO UPDATE SET allocated = cv.allocated + excluded.allocated
RETURNING counter, period, allocated;

-- name: unaudited
-- The frame without its audit rows: the fence, the floor, the addition and the answer.
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
)
SELECT counter, period, allocated FROM alloc
UNION ALL SELECT NULL, NULL, NULL FROM fenced;
