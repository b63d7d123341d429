-- 0002: paused queues.
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.

-- A queue is paused while it has a row here: no claim takes its jobs (the claim
-- statements leave it out of their list of queues); jobs already running finish.
-- Resuming deletes the row. A table of its own, not a flag on a row per queue, so a
-- queue needs no row to exist (queues are named by the config and by the jobs) and the
-- claim's anti-join reads a table that is empty, or a few rows, almost always.
CREATE TABLE paused_queues (
    queue      text        PRIMARY KEY,
    paused_at  timestamptz NOT NULL DEFAULT now()
);
