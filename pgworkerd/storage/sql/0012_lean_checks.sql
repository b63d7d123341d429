-- 0012: the same CHECK constraints on jobs, written so that PostgreSQL reads less at
-- every write (issue 23, bench/results/enqueue-one-20261124.md).
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
--
-- Why: PostgreSQL 15 rebuilds a table's CHECK expressions at every INSERT and UPDATE
-- statement (ExecRelCheck: stringToNode of the stored tree, then expression_planner),
-- so their cost is the length of that tree, paid per statement by every enqueue, claim
-- and outcome. perf on an insert loop: half of an INSERT's executor time went there,
-- most of it reading the constants of `IN ('a', 'b', ...)` lists (an ARRAY[] of one
-- Const node per item, folded again each time) and `x IS NULL OR` guards.
--
-- Each new constraint accepts exactly the rows its predecessor accepted, under the same
-- name (a CHECK passes when its expression is true or NULL):
--   * `x IN ('a', 'b')` is `x = ANY (ARRAY['a', 'b'])`; one array literal is one Const.
--   * `x IS NULL OR p(x)`, where p(NULL) is NULL, is `p(x)`: NULL passes either way,
--     and a non-NULL x passes exactly when p(x) is true.
-- jobs_running_is_leased, jobs_attempt_valid and jobs_errors_is_array are left as they
-- were (nothing to shorten without changing them).
--
-- One ALTER TABLE: its new constraints are checked together in one pass over the table
-- (the old ones held, and the new ones say the same: it finds nothing), under the
-- ACCESS EXCLUSIVE lock it takes until the migration commits (docs/deploy.md).
ALTER TABLE jobs
    DROP CONSTRAINT jobs_state_valid,
    ADD CONSTRAINT jobs_state_valid
        CHECK (state = ANY ('{waiting,queued,running,succeeded,dead,cancelled}'::text[])),
    DROP CONSTRAINT jobs_final_has_finished_at,
    ADD CONSTRAINT jobs_final_has_finished_at
        CHECK ((state = ANY ('{succeeded,dead,cancelled}'::text[])) = (finished_at IS NOT NULL)),
    DROP CONSTRAINT jobs_max_attempts_valid,
    ADD CONSTRAINT jobs_max_attempts_valid CHECK (max_attempts >= 1),
    DROP CONSTRAINT jobs_max_runtime_valid,
    ADD CONSTRAINT jobs_max_runtime_valid CHECK (max_runtime > interval '0'),
    DROP CONSTRAINT jobs_after_failure_valid,
    ADD CONSTRAINT jobs_after_failure_valid
        CHECK (after_failure = ANY ('{cancel,run}'::text[]));

-- NOT VALID as in 0004, which added it so: existing rows are not scanned again.
ALTER TABLE jobs
    DROP CONSTRAINT jobs_progress_valid,
    ADD CONSTRAINT jobs_progress_valid CHECK (progress >= 0 AND progress <= 100) NOT VALID;
