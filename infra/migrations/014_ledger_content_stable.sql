-- ledger_content and ledger_content_text call concat_ws and convert_to, which Postgres marks
-- STABLE; declared IMMUTABLE, a function whose body is not immutable is never inlined, so every
-- audit row's hash ran it as a function call of its own (about 0.07 ms of a frame's 0.44 in
-- Postgres: `python -m bench.statement`). STABLE is what the body is, and lets the planner fold
-- it into the statement that calls it. The bytes it returns, and so every hash, are unchanged.
ALTER FUNCTION ledger_content(text, text, text, json, json, timestamptz, timestamptz) STABLE;
ALTER FUNCTION ledger_content_text(text, text, text, json, text, timestamptz, timestamptz) STABLE;
