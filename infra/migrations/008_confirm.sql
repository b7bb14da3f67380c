-- Optional confirmation (docs/invoices.md): a counter created with "confirm": "required" has
-- each value confirmed by its client once used; a value not confirmed within CONFIRM_TTL_S is
-- voided, `not-confirmed`, by the batchers' sweep.
ALTER TABLE counters ADD COLUMN confirm boolean NOT NULL DEFAULT false;

CREATE TABLE confirmations (
    counter    text NOT NULL,
    period     text NOT NULL,
    first      bigint NOT NULL,
    last       bigint NOT NULL CHECK (last >= first),
    who        text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT now(),
    keep_until timestamptz NOT NULL,
    PRIMARY KEY (counter, period, first, last)
);
CREATE INDEX confirmations_keep_until ON confirmations (keep_until);

-- How far the sweep has looked: the frames committed up to `upto` have had their unconfirmed
-- values voided.
CREATE TABLE confirm_swept (
    counter text PRIMARY KEY,
    upto    timestamptz NOT NULL
);
