-- 0003: periodic entries' slots, the archive of pruned jobs, and a pruning index by state.
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.

-- One row per periodic entry (by its key: `name:<name>`, or a digest of its content).
-- last_slot_at only moves forwards, by a compare-and-set in the statement that inserts
-- the slot's job: a slot is enqueued by the one transaction that moves last_slot_at up
-- to it, whatever the number of daemons, and never again once its job has finished.
CREATE TABLE periodic_entries (
    entry_key     text        PRIMARY KEY,
    -- The newest slot enqueued; at first sight of an entry, the moment it was first
    -- seen (no job): slots before an entry existed are not "missed".
    last_slot_at  timestamptz NOT NULL,
    last_job_id   bigint,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Finished jobs moved out of `jobs` by pruning when `retention.archive` is true: the
-- same columns, plus when the row moved. No constraints or indexes but a key and the
-- one a history search needs: a write-once table that nothing claims from.
CREATE TABLE jobs_archive (
    id            bigint      PRIMARY KEY,
    queue         text        NOT NULL,
    kind          text        NOT NULL,
    payload       jsonb       NOT NULL,
    priority      integer     NOT NULL,
    state         text        NOT NULL,
    attempt       integer     NOT NULL,
    max_attempts  integer,
    max_runtime   interval,
    run_at        timestamptz NOT NULL,
    unique_key    text,
    worker        text,
    last_error    text,
    errors        jsonb       NOT NULL,
    result        jsonb,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL,
    archived_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_archive_finished_idx ON jobs_archive (finished_at);

-- Pruning runs one state at a time (each has its own retention): by (state,
-- finished_at) each batch starts at the state's oldest row instead of walking past
-- rows of the other states that are kept longer.
DROP INDEX jobs_finished_idx;
CREATE INDEX jobs_finished_idx ON jobs (state, finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');
