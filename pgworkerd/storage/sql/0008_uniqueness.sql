-- 0008: uniqueness modes (debounce, throttle) and the index behind the counts of jobs
-- held back by key pauses (issue 19).
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.

-- One row per unique_key enqueued with `debounce` or `throttle`: the arbiter between
-- producers of that key. Every such enqueue first writes this row (INSERT ... ON
-- CONFLICT DO UPDATE), so concurrent producers of one key queue up on its row lock and
-- each sees what the one before it committed (docs/design.md, "Debounce and throttle").
-- Plain unique_key (no mode) never reads it: jobs_unique_key_idx stays its arbiter.
--   debounce: job_id is the job later enqueues fold into while it is still queued.
--   throttle: job_id is the job created in the window that ends at window_ends_at.
-- A job that is pruned or cancelled leaves its row as it is: debounce looks the job up
-- (gone or no longer queued: a new job), throttle's window is a span of time, whatever
-- became of its job. Rows no enqueue touched for a while are deleted by housekeeping
-- (FlowTidying), so the table holds about the keys in use.
CREATE TABLE unique_slots (
    unique_key      text        PRIMARY KEY,
    mode            text        NOT NULL,
    job_id          bigint      NOT NULL,
    window_ends_at  timestamptz,
    touched_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT unique_slots_mode_valid CHECK (mode IN ('debounce', 'throttle')),
    CONSTRAINT unique_slots_throttle_has_window
        CHECK ((mode = 'throttle') = (window_ends_at IS NOT NULL))
);

-- The queued jobs of each key: counts what a key pause holds back (status, /metrics)
-- with a range scan per paused key instead of a pass over every queued job. Partial:
-- a job without a key costs nothing, a keyed job one entry while queued.
CREATE INDEX jobs_key_queued_idx ON jobs (key, run_at)
    WHERE state = 'queued' AND key IS NOT NULL;

-- paused_keys has never been analysed where no pause ever happened, and the planner then
-- takes it for 10 pages (~360 rows): the counts above, a few index probes, look costly
-- enough to cross jit_above_cost and pay ~50-100 ms of JIT compilation at every metrics
-- sample (measured). Analysed, empty or a few rows, it is estimated as it is.
ANALYZE paused_keys;
