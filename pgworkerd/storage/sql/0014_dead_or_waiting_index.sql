-- 0014: the partial indexes of dead jobs by queue (0009) and of waiting jobs by queue
-- (0010) become one, of both states (issue 23,
-- bench/results/enqueue-and-bytes-20261125.md).
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
--
-- Why: PostgreSQL 15 opens every index of the table at every INSERT and UPDATE
-- statement (ExecOpenIndices: a lock, the index's description, and for a partial index
-- its predicate planned again, ExecPrepareQual), whether or not the row enters it. Every
-- enqueue, claim and outcome paid that for both indexes; a plain job enters neither.
-- One index pays it once. Server loops of 2,000 statements each: about 4 us off an
-- INSERT and 7 to 9 us off each of the claim's and the completion's UPDATEs.
--
-- What each reader keeps: the dashboard's dead count (dashboard_dead_by_queue) is the
-- 'dead' range, an index-only scan as before, already in queue order; the metrics'
-- waiting gauge (queues_waiting) and `queues` (queues_pause) probe (state, queue) as
-- they probed (queue). The predicate is one array constant (0012), so the planner
-- proves `state = 'dead'` and `state = 'waiting'` each imply it.
--
-- Cost: CREATE INDEX reads the whole table under a SHARE lock until the migration
-- commits (enqueues, claims and outcomes wait; reads go on), as 0009's build did; only
-- dead and waiting rows enter it. DROP INDEX takes an ACCESS EXCLUSIVE lock on jobs for
-- an instant. Figures for a million rows: docs/deploy.md.
CREATE INDEX jobs_dead_or_waiting_idx ON jobs (state, queue)
    WHERE state = ANY ('{dead,waiting}'::text[]);
DROP INDEX jobs_dead_queue_idx;
DROP INDEX jobs_waiting_idx;
