-- A period whose counter_values a batcher found below values it had handed out itself: Postgres
-- forgot commits (an asynchronous standby promoted without the primary's last transactions).
-- `held` is the highest value known handed out; batchers refuse the period (their floor, read
-- from here as from the audit trail, stays above counter_values) until `numerator counters
-- mend` raises the counter past it and deletes the row (docs/runbook.md).
CREATE TABLE counter_rewinds (
    counter     text        NOT NULL,
    period      text        NOT NULL,
    held        bigint      NOT NULL,
    detected_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (counter, period)
);
