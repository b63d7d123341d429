-- Every statement pgworkerd runs outside its migrations, loaded by name (`-- name: x`).
--
-- `{schema}` is replaced by the quoted schema identifier (psycopg.sql.Identifier, never
-- string formatting of user input); parameters are named (`%(name)s`), so a literal
-- percent sign is written `%%` and a literal brace `{{` `}}`. A statement without any
-- `%` is run without parameters (None, not {}): queries.py doubles a `%` of the schema
-- name only in the statements psycopg parses, the ones with a `%`.
--
-- The guarantees live in a few clauses, marked FENCE and SKIP LOCKED below:
--   * FENCE: every write after a claim names the lease token it was claimed with and
--     requires state = 'running'. A holder whose lease was rescued, cancelled or
--     released can no longer change the job: its write matches no row and the caller
--     is told the lease was lost.
--   * HELD: a job cancelled while it ran keeps its lease (lease_expires_at, lease_token)
--     on the cancelled row until its holder says the handler has ended
--     (jobs_release_cancelled, after a fenced write found the row cancelled) or the
--     rescue finds the lease expired (jobs_rescue_cancelled). Concurrency limits count
--     leased rows, so its place stays taken while the handler may still run. Every
--     other reader takes it for what its state says: cancelled.
--   * SKIP LOCKED: claimers and rescuers never wait on each other's rows and never
--     take the same row twice; the supervisor's lease renewal never waits on a row
--     lock (jobs_renew).
--   * Every time that decides a lease or a schedule is the database's now().
--   * FINISHED: every statement that makes a job final (succeeded, dead, cancelled)
--     sends `pg_notify(<schema>.finished, id)` for a job that pgworkerd.wait() marked
--     (waited_on), and only for those: a job nobody waits for costs no notification.


-- name: jobs_insert
-- Inserts a whole list of jobs in one statement. Ids are drawn from the identity
-- sequence up front, so the statement returns, in input order, each row's id and
-- whether it was left out because its unique_key is held by a live job (the caller
-- then looks that job up). Kept free of per-row subqueries: their estimated cost on a
-- big list would cross jit_above_cost, and JIT compilation costs more than the insert.
WITH input AS MATERIALIZED (
    -- The list arrives as one JSON array of job records: the server parses it in one
    -- pass, far cheaper than adapting nine parallel arrays element by element.
    SELECT nextval(%(sequence)s::regclass) AS id, t.*
    FROM ROWS FROM (
             jsonb_to_recordset(%(jobs)s::jsonb)
             AS (queue text, kind text, payload jsonb, priority int, run_at timestamptz,
                 delay_s float8, unique_key text, max_attempts int, max_runtime_s float8,
                 trace_context jsonb, key text)
         ) WITH ORDINALITY AS t(queue, kind, payload, priority, run_at, delay_s, unique_key,
                                max_attempts, max_runtime_s, trace_context, key, ord)
),
inserted AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, run_at, unique_key, max_attempts, max_runtime,
         trace_context, key)
    SELECT id, queue, kind, payload, COALESCE(priority, 0),
           COALESCE(run_at, now() + make_interval(secs => COALESCE(delay_s, 0))),
           unique_key, max_attempts, make_interval(secs => max_runtime_s), trace_context,
           key
    FROM input
    ORDER BY ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'running')
    DO NOTHING
    RETURNING j.id, j.queue, j.run_at
),
-- Wake an idle worker of each queue that got a job: to run it, or, for a job scheduled
-- later, to learn the new earliest run_at and sleep until then (not until its next
-- poll). The payload is the queue name only (NOTIFY payloads are limited to 8000
-- bytes); PostgreSQL delivers them at commit and folds duplicates within a transaction.
notified AS (
    SELECT pg_notify(%(channel)s::text, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT input.id,
       -- a hashed subplan: one pass over `inserted`, whatever the list's length
       input.unique_key IS NOT NULL AND input.id NOT IN (SELECT id FROM inserted) AS left_out
FROM input
CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify  -- an unreferenced CTE never runs
ORDER BY input.ord;


-- name: jobs_insert_without_unique_keys
-- jobs_insert for a list in which no job has a unique_key: nothing can be left out, so
-- no ON CONFLICT arbiter check per row and no bookkeeping of what was left out.
WITH inserted AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, run_at, max_attempts, max_runtime,
         trace_context, key)
    SELECT nextval(%(sequence)s::regclass), t.queue, t.kind, t.payload,
           COALESCE(t.priority, 0),
           COALESCE(t.run_at, now() + make_interval(secs => COALESCE(t.delay_s, 0))),
           t.max_attempts, make_interval(secs => t.max_runtime_s), t.trace_context, t.key
    FROM ROWS FROM (
             jsonb_to_recordset(%(jobs)s::jsonb)
             AS (queue text, kind text, payload jsonb, priority int, run_at timestamptz,
                 delay_s float8, max_attempts int, max_runtime_s float8,
                 trace_context jsonb, key text)
         ) WITH ORDINALITY AS t(queue, kind, payload, priority, run_at, delay_s,
                                max_attempts, max_runtime_s, trace_context, key, ord)
    RETURNING j.id, j.queue, j.run_at
),
notified AS (  -- as in jobs_insert
    SELECT pg_notify(%(channel)s::text, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
-- The function scan yields the records in input order and nextval() numbers them as
-- they come, increasing: ordered by id is ordered as given.
SELECT inserted.id, false AS left_out
FROM inserted
CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify
ORDER BY inserted.id;


-- name: jobs_insert_one
-- jobs_insert_without_unique_keys for one job (enqueue's usual call, made once per web
-- request): the same row and the same notification, by the shortest plan (a Result
-- under the ModifyTable: no function scan, no CTE, no join). Positional parameters,
-- in this order (JobStore.insert_one_statement): queue, kind, payload (JSON text),
-- priority, run_at, delay_s, max_attempts, max_runtime_s, trace_context (JSON text),
-- key; NULL for an option not given. The notification is in the RETURNING list:
-- evaluated once for the one row, in this statement, as jobs_insert's is. Every call
-- notifies: an idle worker cannot be known from here without a race (docs/design.md,
-- "The cost of one enqueue"), and PostgreSQL folds duplicates within a transaction.
INSERT INTO {schema}.jobs
    (queue, kind, payload, priority, run_at, max_attempts, max_runtime, trace_context, key)
VALUES (%s::text, %s::text, %s::jsonb, COALESCE(%s::int, 0),
        COALESCE(%s::timestamptz, now() + make_interval(secs => COALESCE(%s::float8, 0))),
        %s::int, make_interval(secs => %s::float8), %s::jsonb, %s::text)
RETURNING id, pg_notify({queue_channel}, queue);


-- name: jobs_insert_bare
-- jobs_insert_one for a job given only its queue, kind and payload (enqueue's barest
-- call: JobStore.insert_bare). The columns left out take their defaults, which are the
-- values jobs_insert_one writes for options not given (priority 0, run_at now(), the
-- rest NULL): the same row (tests/integration/test_producer.py compares them).
-- Three parameters instead of ten: psycopg's dumping of the seven NULLs was ~4,300
-- client instructions a call (bench/results/enqueue-one-round9-20261127.md).
INSERT INTO {schema}.jobs (queue, kind, payload)
VALUES (%s::text, %s::text, %s::jsonb)
RETURNING id, pg_notify({queue_channel}, queue);


-- name: jobs_insert_after
-- Inserts jobs that run `after` other jobs (workflows, 0010_workflows.sql), given as one
-- JSON array of job records, each with its own `after` (ids, none repeated): a fan-out
-- (thousands of dependents of one job) or a list of pairs is one statement, not one per
-- job. Used only for such jobs: jobs_insert is untouched. Every dependency any of them
-- names is locked once, in id order among the waiting ones and among the others, the
-- others first (LOCK ORDER, below; FOR SHARE, or FOR NO KEY UPDATE while it lacks
-- has_dependents: LOCK MODE), before its state is read: an outcome of one of them, an
-- UPDATE, waits for this transaction to end, and this statement waits for an outcome in
-- progress and then reads the state it committed. So either this insert sees the
-- dependency final (and counts it now), or the outcome's release sees the jobs' edges
-- (has_dependents, set here, and the job_dependencies rows are committed before the
-- outcome's UPDATE can lock the row): never neither, never both.
-- Each job is `cancelled` at once if one of its dependencies already ended dead or
-- cancelled and its after_failure is 'cancel'; `queued` if every one of them has already
-- ended; else `waiting` with one edge per dependency not yet final. Nothing is inserted
-- if an id does not exist: `missing_at` is then the position (from 1) of the first job
-- that names one, and `missing` the ids it names that do not exist.
-- PER ID: every row of jobs is reached by primary key, one id at a time, whatever plan
-- is cached. A producer may enqueue thousands of dependents in one transaction, and
-- psycopg prepares a statement run five times (a worker's connection plans every
-- statement generically): a plan made while the table was small, and blind to how
-- many ids there are (a generic plan guesses), scanned `jobs` for the dependencies and
-- for the join of `marked`, and was kept for the rest of the transaction, so each insert
-- read every job inserted before it (bench/results/workflows-costs-20261124.md;
-- tests/integration/test_workflows_enqueue_cost.py). A LATERAL subquery that locks is
-- never pulled up into a join: it runs once per id, a lookup of one row, which an index
-- wins on any table of ten pages or more (and on one never analysed). On a table
-- analysed while it was smaller, a plan made then may still scan it, until the next
-- analyse replans it. The other joins are between this statement's CTEs.
WITH input AS MATERIALIZED (
    -- The function scan yields the records in input order and nextval() numbers them as
    -- they come, increasing: ordered by id is ordered as given.
    SELECT nextval(%(sequence)s::regclass) AS id, t.*
    FROM ROWS FROM (
             jsonb_to_recordset(%(jobs)s::jsonb)
             AS (queue text, kind text, payload jsonb, priority int, run_at timestamptz,
                 delay_s float8, max_attempts int, max_runtime_s float8,
                 trace_context jsonb, key text, after_failure text, after bigint[])
         ) WITH ORDINALITY AS t(queue, kind, payload, priority, run_at, delay_s,
                                max_attempts, max_runtime_s, trace_context, key,
                                after_failure, after, ord)
),
deps AS MATERIALIZED (
    SELECT j.id, j.state IN ('succeeded', 'dead', 'cancelled') AS final,
           j.state IN ('dead', 'cancelled') AS failed,
           (j.state NOT IN ('succeeded', 'dead', 'cancelled') AND NOT j.has_dependents)::int
               AS unmarked
    -- LOCK ORDER: those not waiting first, then the waiting ones, each group in id order
    -- (the nested loop keeps the order of its outer side). An outcome statement locks its
    -- own rows (running ones, for a worker's batch) and then, in its release, the
    -- waiting dependents: a producer that took a waiting W before a running R of that
    -- batch, R's statement having taken R and waiting for W, deadlocked (`after=[W, R]`,
    -- W < R, W a dependent of a job of R's batch: tests/integration/
    -- test_workflow_lock_order.py). The state is read from this statement's snapshot,
    -- by primary key (a scalar subquery runs once per id), before any lock.
    FROM (SELECT a.id
          FROM (SELECT DISTINCT a.id
                FROM input AS i CROSS JOIN pg_catalog.unnest(i.after) AS a(id)) AS a
          ORDER BY (SELECT j.state = 'waiting' FROM {schema}.jobs AS j WHERE j.id = a.id)
                       IS TRUE,
                   a.id) AS a
    -- LOCK MODE. A dependency that has the flag already is locked FOR SHARE: producers
    -- of its later dependents run side by side, one lookup each. One without it is
    -- locked FOR NO KEY UPDATE from the start, the mode `marked` needs to set it: two
    -- producers of a job's first dependents that both took the share lock and then each
    -- waited for the other's to write the flag deadlocked (tests/integration/
    -- test_workflows.py). `shared` tests the flag on the version its snapshot sees, before
    -- it locks: a row it returns had the flag, and keeps it (nothing clears it), so the
    -- recheck after a lock wait never drops it. A row it does not return (no flag, or a
    -- concurrent producer setting it now) goes to `unflagged`, whose only test after a wait
    -- is the id: it waits for that producer, then reads the flag set (nothing to write),
    -- and is never reported missing unless it was deleted.
    LEFT JOIN LATERAL (
        SELECT j.id, j.state, j.has_dependents FROM {schema}.jobs AS j
        WHERE j.id = a.id AND j.has_dependents
        FOR SHARE
    ) AS shared ON true
    LEFT JOIN LATERAL (
        SELECT j.id, j.state, j.has_dependents FROM {schema}.jobs AS j
        WHERE j.id = a.id AND shared.id IS NULL
        FOR NO KEY UPDATE
    ) AS unflagged ON true
    CROSS JOIN LATERAL (
        SELECT coalesce(shared.id, unflagged.id) AS id,
               coalesce(shared.state, unflagged.state) AS state,
               coalesce(shared.has_dependents, unflagged.has_dependents) AS has_dependents
    ) AS j
    WHERE j.id IS NOT NULL  -- neither: no such job (missing)
),
-- Each job's dependencies, as found (d.id NULL: no such job).
named AS MATERIALIZED (
    SELECT i.id AS job_id, i.ord, a.id AS named_id, d.id, d.final, d.failed, d.unmarked
    FROM input AS i
    CROSS JOIN pg_catalog.unnest(i.after) AS a(id)
    LEFT JOIN deps AS d ON d.id = a.id
),
facts AS (
    SELECT n.job_id, pg_catalog.count(n.id) FILTER (WHERE NOT n.final)::int AS pending,
           min(n.id) FILTER (WHERE n.failed) AS failed_dependency
    FROM named AS n
    GROUP BY n.job_id
),
first_missing AS (
    SELECT min(n.ord) AS ord FROM named AS n WHERE n.id IS NULL
),
rows AS (
    SELECT i.*, f.pending, f.failed_dependency,
           CASE WHEN f.failed_dependency IS NOT NULL AND i.after_failure = 'cancel'
                    THEN 'cancelled'
                WHEN f.pending = 0 THEN 'queued'
                ELSE 'waiting' END AS state
    FROM input AS i
    JOIN facts AS f ON f.job_id = i.id
    WHERE (SELECT ord FROM first_missing) IS NULL
),
inserted AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, run_at, max_attempts, max_runtime,
         trace_context, key, state, finished_at, last_error, after_ids, after_failure,
         deps_pending)
    SELECT id, queue, kind, payload, COALESCE(priority, 0),
           COALESCE(run_at, now() + make_interval(secs => COALESCE(delay_s, 0))),
           max_attempts, make_interval(secs => max_runtime_s), trace_context, key, state,
           CASE WHEN state = 'cancelled' THEN now() END,
           CASE WHEN state = 'cancelled'
                THEN pg_catalog.format('cancelled: job %%s, which it was to run after, ended dead or '
                            'cancelled', failed_dependency) END,
           after, after_failure,
           CASE WHEN state = 'waiting' THEN pending ELSE 0 END
    FROM rows
    ORDER BY id
    RETURNING j.id, j.queue, j.state
),
waits AS MATERIALIZED (  -- the edges: each waiting job's dependencies not yet final
    SELECT n.id AS dependency_id, n.job_id, n.unmarked
    FROM inserted AS i
    JOIN named AS n ON n.job_id = i.id
    WHERE i.state = 'waiting' AND NOT n.final
),
edges AS (  -- in the jobs' order, as one insert per job wrote them
    INSERT INTO {schema}.job_dependencies (dependency_id, job_id)
    SELECT dependency_id, job_id FROM waits ORDER BY job_id, dependency_id
),
-- The flag the release trigger's WHEN tests; written once per dependency. PER ID: only
-- the dependencies that lack it (read under the lock) are joined to jobs: after a job's
-- first dependents there is nothing to join, and a hash join ends at once on an empty
-- side. MATERIALIZED, with the test written as an equality (which the planner takes
-- for a selective one, where it guesses half for a boolean): planned for a few rows,
-- the join to jobs is a nested loop over the primary key, not a hash of a whole scan.
-- (`id = ANY` of an array was not: a generic plan made on a small table scanned it.)
to_mark AS MATERIALIZED (
    SELECT DISTINCT w.dependency_id AS id FROM waits AS w WHERE w.unmarked = 1
),
marked AS (
    UPDATE {schema}.jobs AS j
    SET has_dependents = true
    FROM to_mark AS m
    WHERE j.id = m.id AND NOT j.has_dependents
),
notified AS (  -- as in jobs_insert, for the jobs queued at once
    SELECT pg_notify(%(channel)s::text, q.queue)
    FROM (SELECT DISTINCT i.queue FROM inserted AS i WHERE i.state = 'queued') AS q
)
SELECT ARRAY(SELECT id FROM inserted ORDER BY id) AS ids,
       m.ord AS missing_at,
       ARRAY(SELECT n.named_id FROM named AS n WHERE n.ord = m.ord AND n.id IS NULL
             ORDER BY n.named_id) AS missing
FROM first_missing AS m
CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify;


-- name: jobs_dependencies
-- `jobs show`: the jobs this one was enqueued after, and the jobs enqueued after it
-- (their after_ids name it: by jobs_after_idx). `relation` is 'dependency' or
-- 'dependent'; a dependency pruned since shows with state and kind NULL.
SELECT 'dependency' AS relation, a.id, j.state, j.kind
FROM pg_catalog.unnest((SELECT after_ids FROM {schema}.jobs WHERE id = %(id)s::bigint)) AS a(id)
LEFT JOIN {schema}.jobs AS j ON j.id = a.id
UNION ALL
SELECT 'dependent', j.id, j.state, j.kind
FROM {schema}.jobs AS j
WHERE j.after_ids OPERATOR(pg_catalog.@>) ARRAY[%(id)s::bigint] AND j.after_ids IS NOT NULL
ORDER BY 1, 2;


-- name: jobs_insert_throttled
-- Enqueues one job with `throttle`: at most one job per unique_key is created per window
-- of throttle_s seconds; within the window the window's job id is returned, whatever its
-- state (pruned included). The slot's row is the arbiter (0008_uniqueness.sql): a
-- concurrent producer's uncommitted row makes ON CONFLICT wait for its transaction, then
-- update the committed row, so of two producers racing, the second sees the first's
-- window and job. DO UPDATE (never DO NOTHING) so that RETURNING always yields the
-- slot's job: the id drawn here went into the slot, and the job is inserted, only when
-- the window had ended (or the key was last used with debounce).
WITH input AS MATERIALIZED (
    SELECT nextval(%(sequence)s::regclass) AS id, t.*
    FROM jsonb_to_recordset(%(jobs)s::jsonb)
         AS t(queue text, kind text, payload jsonb, priority int, run_at timestamptz,
              delay_s float8, unique_key text, max_attempts int, max_runtime_s float8,
              trace_context jsonb, key text, throttle_s float8)
),
slot AS (
    INSERT INTO {schema}.unique_slots AS s (unique_key, mode, job_id, window_ends_at)
    SELECT unique_key, 'throttle', id, now() + make_interval(secs => throttle_s)
    FROM input
    ON CONFLICT (unique_key) DO UPDATE
    SET job_id = CASE WHEN s.mode = 'throttle' AND s.window_ends_at > now()
                      THEN s.job_id ELSE EXCLUDED.job_id END,
        window_ends_at = CASE WHEN s.mode = 'throttle' AND s.window_ends_at > now()
                              THEN s.window_ends_at ELSE EXCLUDED.window_ends_at END,
        mode = 'throttle',
        touched_at = now()
    RETURNING s.job_id
),
inserted AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, run_at, max_attempts, max_runtime,
         trace_context, key)
    SELECT input.id, queue, kind, payload, COALESCE(priority, 0),
           COALESCE(run_at, now() + make_interval(secs => COALESCE(delay_s, 0))),
           max_attempts, make_interval(secs => max_runtime_s), trace_context, key
    FROM input
    JOIN slot ON slot.job_id = input.id
    RETURNING j.id, j.queue
),
notified AS (  -- as in jobs_insert
    SELECT pg_notify(%(channel)s::text, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT slot.job_id AS id
FROM slot
CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify;


-- name: jobs_insert_debounced
-- Enqueues one job with `debounce`, first step: takes the unique_key's slot (0008),
-- locking its row until the caller's transaction ends, so producers of one key go one
-- at a time (a concurrent producer's uncommitted row makes ON CONFLICT wait for it).
-- A key without a slot (or last used with throttle) gets its job here, to run
-- debounce_s from now: `created`. Otherwise the slot's job is returned, not created, and
-- jobs_debounce_fold runs next, as a statement of its own: its snapshot, taken after
-- this lock was granted, sees what the producer before us committed (a job inserted by
-- a transaction that committed while this statement waited is invisible to it).
WITH input AS MATERIALIZED (
    SELECT nextval(%(sequence)s::regclass) AS id, t.*
    FROM jsonb_to_recordset(%(jobs)s::jsonb)
         AS t(queue text, kind text, payload jsonb, priority int, unique_key text,
              max_attempts int, max_runtime_s float8, trace_context jsonb, key text,
              debounce_s float8)
),
slot AS (
    INSERT INTO {schema}.unique_slots AS s (unique_key, mode, job_id)
    SELECT unique_key, 'debounce', id FROM input
    ON CONFLICT (unique_key) DO UPDATE
    SET job_id = CASE WHEN s.mode = 'debounce' THEN s.job_id ELSE EXCLUDED.job_id END,
        mode = 'debounce',
        window_ends_at = NULL,
        touched_at = now()
    RETURNING s.job_id
),
inserted AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, run_at, max_attempts, max_runtime,
         trace_context, key)
    SELECT input.id, queue, kind, payload, COALESCE(priority, 0),
           now() + make_interval(secs => debounce_s),
           max_attempts, make_interval(secs => max_runtime_s), trace_context, key
    FROM input
    JOIN slot ON slot.job_id = input.id
    RETURNING j.id, j.queue
),
notified AS (  -- as in jobs_insert
    SELECT pg_notify(%(channel)s::text, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT slot.job_id AS id, slot.job_id = input.id AS created
FROM slot
CROSS JOIN input
CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify;


-- name: jobs_debounce_fold
-- Enqueues one job with `debounce`, second step (the slot's row is ours): if the slot's
-- job (%(target)s) is still queued it takes this enqueue's payload and runs debounce_s
-- from now; if it is running, final or gone (pruned), a new job is made and the slot
-- points to it, so later enqueues fold into that one. A claim racing the fold: either
-- the fold locks the queued row first (the claim's SKIP LOCKED passes it over), or the
-- fold waits for the claim and re-reads the row, now running: a new job.
WITH input AS MATERIALIZED (
    SELECT t.*
    FROM jsonb_to_recordset(%(jobs)s::jsonb)
         AS t(queue text, kind text, payload jsonb, priority int, unique_key text,
              max_attempts int, max_runtime_s float8, trace_context jsonb, key text,
              debounce_s float8)
),
folded AS (
    UPDATE {schema}.jobs AS j
    SET payload = input.payload,
        trace_context = input.trace_context,
        run_at = now() + make_interval(secs => input.debounce_s)
    FROM input
    WHERE j.id = %(target)s::bigint AND j.state = 'queued'
    RETURNING j.id
),
inserted AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, run_at, max_attempts, max_runtime,
         trace_context, key)
    SELECT nextval(%(sequence)s::regclass), queue, kind, payload, COALESCE(priority, 0),
           now() + make_interval(secs => debounce_s),
           max_attempts, make_interval(secs => max_runtime_s), trace_context, key
    FROM input
    WHERE NOT EXISTS (SELECT FROM folded)
    RETURNING j.id, j.queue
),
repointed AS (
    UPDATE {schema}.unique_slots AS s
    SET job_id = inserted.id
    FROM inserted, input
    WHERE s.unique_key = input.unique_key
),
notified AS (  -- as in jobs_insert
    SELECT pg_notify(%(channel)s::text, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT coalesce((SELECT id FROM folded), (SELECT id FROM inserted)) AS id
FROM (SELECT pg_catalog.count(*) FROM notified) AS force_notify;


-- name: jobs_find_live_by_unique_key
SELECT id FROM {schema}.jobs
WHERE unique_key = %(unique_key)s::text AND state IN ('queued', 'running');


-- name: jobs_claim
-- Claims up to `limit` ready jobs of the given queues: queue order first (the caller
-- passes queues sorted by queue priority, then pool order), then job priority (higher
-- first), then run_at, then id. One more row, with the job columns NULL, holds the
-- database clock and which of the queues are paused (claim_meta).
WITH RECURSIVE {claim_picks},
claimed AS (
    {claim_update}
)
SELECT claimed.*, meta.*
FROM claimed
FULL JOIN ({claim_meta}) AS meta ON false;


-- name: claim_levels
-- Fragment of claim_picks and jobs_claim_limited: the CTEs `queues` (the queues asked
-- for, in claim order, less the paused ones) and `levels` (the levels to claim from,
-- each with its position).
-- A paused queue is left out of the list (an anti-join on paused_queues, a table of a
-- few rows at most): its jobs are never looked at. A claim already running when a pause
-- commits does not see it; the next one does.
--
-- POSITIONS: the levels (queue, priority) to claim from come from the caller, each with
-- the position (run_at, id) its claims have passed (JobStore's ClaimPositions). Each
-- job leaves its queued version behind in jobs_claim_idx when claimed; while any
-- snapshot older than that exists (a session idle in transaction, a long report, a
-- replica's hot_standby_feedback), vacuum cannot remove it and index scans cannot mark
-- it dead. A scan from the start of a level would read past every job done since that
-- snapshot began; a scan that starts after the position descends the index straight
-- past them. A NULL position (a level never claimed from, and every level in a
-- periodic sweep) scans the level from its start: what a claim behind a position
-- missed (a job released, a producer's transaction that committed long after its
-- run_at, a run_at set in the past) is found by the sweep.
queues AS (
    SELECT q.name, q.max_attempts, q.ord
    FROM ROWS FROM (pg_catalog.unnest(%(queues)s::text[]),
                    pg_catalog.unnest(%(queue_max_attempts)s::int[]))
         WITH ORDINALITY AS q(name, max_attempts, ord)
    WHERE NOT EXISTS (SELECT FROM {schema}.paused_queues AS p WHERE p.queue = q.name)
),
levels AS (
    SELECT q.name, q.ord, l.priority,
           coalesce(l.after_run_at, '-infinity') AS after_run_at,
           coalesce(l.after_id, -1) AS after_id
    FROM ROWS FROM (pg_catalog.unnest(%(level_queues)s::text[]),
                    pg_catalog.unnest(%(level_priorities)s::int[]),
                    pg_catalog.unnest(%(level_after_run_at)s::timestamptz[]),
                    pg_catalog.unnest(%(level_after_id)s::bigint[]))
         AS l(queue, priority, after_run_at, after_id)
    JOIN queues AS q ON q.name = l.queue
)


-- name: level_ready
-- Fragment of claim_picks and jobs_claim_limited (level_picks): the WHERE of a level's
-- scan, for a job `j` of a level `l` of claim_levels: queued in the level, after its
-- position (POSITIONS), ready, and not of a paused key. Ordered by (run_at, id), the
-- scan is a range of jobs_claim_idx that stops at the first future row: a million jobs
-- scheduled for later cost nothing.
-- KEY PAUSES: a job whose key has a pause until later than now() (paused_keys) is passed
-- over, not locked. The test costs nothing for a job without a key, and one probe of
-- paused_keys' primary key (an empty table, or a few rows) for a job with one. While
-- any key is paused the claim's positions stay where they are (claim_meta's
-- keys_paused): the jobs passed over are behind them, and must be found when the pause
-- ends, without waiting for a sweep.
-- (Its lines after the first are indented as where it is included.)
j.state = 'queued' AND j.queue = l.name AND j.priority = l.priority
          AND (j.run_at, j.id) > (l.after_run_at, l.after_id)  -- POSITIONS
          AND j.run_at <= now()
          AND (j.key IS NULL OR NOT EXISTS (  -- KEY PAUSES
                SELECT FROM {schema}.paused_keys AS pk
                WHERE pk.key = j.key AND pk.until > now()))


-- name: claim_picks
-- Fragment of jobs_claim and jobs_complete_and_claim: the CTEs that lock the picks
-- (claim_levels' queues and levels, then picked). The picks come from a nested loop
-- over levels sorted in claim order, each scanned after its position (level_ready);
-- the outer LIMIT stops it as soon as enough rows are locked, so no row is locked that
-- is not claimed.
{claim_levels},
picked AS MATERIALIZED (
    SELECT ready.id
    FROM (SELECT * FROM levels ORDER BY ord, priority DESC) AS l
    CROSS JOIN LATERAL (
        SELECT j.id FROM {schema}.jobs AS j
        WHERE {level_ready}
        ORDER BY j.run_at, j.id
        LIMIT %(limit)s::bigint
        -- SKIP LOCKED: rows another claimer is taking right now are passed over, not
        -- waited for; FOR UPDATE rechecks state = 'queued' on the newest row version,
        -- so a row claimed and committed meanwhile is never claimed twice.
        FOR UPDATE SKIP LOCKED
    ) AS ready
    LIMIT %(limit)s::bigint
)


-- name: claim_meta
-- Fragment of jobs_claim, jobs_complete_and_claim and jobs_claim_limited: the database
-- clock, which moves the claim positions (never a worker's clock), and which of the
-- queues asked for were paused (read in the claim's own snapshot: their levels were not
-- scanned, so their positions must not move), and whether any key was paused (KEY
-- PAUSES: no position moves then).
SELECT now() AS db_now,
       ARRAY(SELECT p.queue FROM {schema}.paused_queues AS p
             WHERE p.queue = ANY(%(queues)s::text[])) AS paused_queues,
       EXISTS (SELECT FROM {schema}.paused_keys AS pk WHERE pk.until > now()) AS keys_paused


-- name: claim_update
-- Fragment of jobs_claim, jobs_complete_and_claim (as claim_update), jobs_claim_limited
-- (as claim_update_after_lock) and jobs_claim_one (as claim_update_one): leases the
-- picked rows. Rendered once per value of {started_at} and {picked_ids} (queries.py):
--   {started_at}, the claim's start: now() in claim_update and claim_update_one: those
--     statements are each their own transaction in a worker (autocommit), and a caller
--     that runs them inside a longer one (JobStore leaves the transaction to its
--     caller) gets the transaction's time, as its other writes there (a completion's
--     finished_at) get it; statement_timestamp() in claim_update_after_lock:
--     jobs_claim_limited's transaction began before limits_lock, so its now() is
--     earlier than the lock; the start is written with the time after the lock, as the
--     rate ledger (starts) has it (monotonic across the queue's claims).
--   {picked_ids}, how the rows of `picked` are matched: `ANY(ARRAY(...))` for a batch,
--     `= (...)` for jobs_claim_one's one row, which the server runs in a good part
--     less time (bench/results/idle-latency-round6-20261127.md). Either way each row
--     is reached by primary key, whatever the estimates (below).
UPDATE {schema}.jobs AS j
SET state            = 'running',
    attempt          = j.attempt::int + 1,          -- every start is charged
    lease_token      = gen_random_uuid(),      -- a fresh token per claim: the FENCE
    lease_expires_at = now() + make_interval(secs => %(lease_ttl_s)s::float8),
    worker           = %(worker)s::text,
    started_at       = {started_at},
    -- The queue's default and its place in the list by array_position, not a join
    -- to `queues`: the picks are all of unpaused queues already (claim_picks), and a
    -- join is two more plan nodes to start and run on every claim.
    max_attempts     = COALESCE(j.max_attempts,
                                (%(queue_max_attempts)s::int[])[
                                    pg_catalog.array_position(%(queues)s::text[], j.queue)]),
    progress         = NULL,                   -- each attempt reports its own
    progress_stage   = NULL,
    progress_at      = NULL
-- By primary key, whatever the estimates: a plan made without the limit's value (a
-- generic plan) would otherwise join the picks to a scan of the whole table.
WHERE j.id {picked_ids}
-- What a Job is made of, nothing more: each column is written out by the server and
-- read back by the worker, for every claimed job (the lease's expiry is the
-- supervisor's to track, from the claim's send time: pgworkerd/supervisor/ledger.py).
-- The payload as its text (jsonb's output, what its binary form carries after a version
-- byte), decoded by the worker's json_loads: psycopg's jsonb loader is Python called
-- from C with a buffer per value, ~2 µs more a job (bench/results/worker-round13-20261128.md).
RETURNING j.id, j.queue, j.kind, j.payload::text AS payload_json, j.priority, j.attempt,
          j.max_attempts,
          extract(epoch FROM j.max_runtime)::float8 AS max_runtime_s, j.run_at,
          j.created_at, j.lease_token,
          pg_catalog.array_position(%(queues)s::text[], j.queue) AS queue_ord, j.key,
          j.trace_context,  -- the handler's span continues the enqueuer's trace
          j.after_ids       -- job.after (workflows)


-- name: jobs_complete_and_claim
-- Records a batch of successes (as jobs_complete) and claims the next batch (as
-- jobs_claim) in one statement: one round trip and one commit per batch of jobs. The
-- two UPDATEs touch disjoint rows (running ones, queued ones). Each claimed job is a
-- row with completed_ids NULL; one more row, with the job columns NULL, holds the ids
-- whose completion the lease allowed and claim_meta (FULL JOIN ... ON false: the rows
-- of both sides).
WITH RECURSIVE completed AS (
    {complete_update}
),
{claim_picks},
claimed AS (
    {claim_update}
)
SELECT claimed.*, done.*
FROM claimed
FULL JOIN (SELECT coalesce((SELECT pg_catalog.array_agg(id) FROM completed), '{{}}') AS completed_ids,
                  meta.*
           FROM ({claim_meta}) AS meta) AS done ON false;



-- name: jobs_claim_one
-- The claim of a worker that its supervisor has just woken for a new job (the idle
-- wake-up), when its queues are one queue without limits of which one level is known
-- (JobStore.claim_one; anything else takes jobs_claim), with jobs_claim's parameters:
-- at most one job of that level, after its position (POSITIONS), ready, not of a
-- paused key (level_ready) and not of a paused queue, locked with SKIP LOCKED and
-- leased as every claim leases it (claim_update_one: attempt charged, a fresh token,
-- the database clock). The same pick as jobs_claim's with a limit of one, by fewer
-- plan nodes, each paid with cold caches after an idle sleep: one level, no list of
-- levels to sort, the row matched by `=`, no meta row.
-- One row per claimed job (none when none was), with the database clock, whether any
-- key is paused (KEY PAUSES: then no position moves), and `more`: whether a ready job
-- of the level stands after it in the claim's snapshot (locked or not). The worker
-- reports that as a full claim, so that its supervisor wakes a sibling for it as after
-- a full batch; the worker itself claims a batch after this job.
WITH picked AS MATERIALIZED (
    SELECT j.id
    -- The level: the one element of each of jobs_claim's level arrays.
    FROM (SELECT (%(level_queues)s::text[])[1] AS name,
                 (%(level_priorities)s::int[])[1] AS priority,
                 coalesce((%(level_after_run_at)s::timestamptz[])[1], '-infinity') AS after_run_at,
                 coalesce((%(level_after_id)s::bigint[])[1], -1) AS after_id) AS l
    CROSS JOIN {schema}.jobs AS j
    WHERE {level_ready}
      AND NOT EXISTS (SELECT FROM {schema}.paused_queues AS p WHERE p.queue = l.name)
    ORDER BY j.run_at, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED  -- SKIP LOCKED, as in claim_picks
),
claimed AS (
    {claim_update_one}
)
SELECT c.*, now() AS db_now,
       EXISTS (SELECT FROM {schema}.paused_keys AS pk WHERE pk.until > now()) AS keys_paused,
       -- The next job of the level, by its index as the pick (not EXISTS: planned to
       -- find any one row, it scanned the whole table for it).
       (SELECT j.id
        FROM (SELECT c.queue AS name, c.priority, c.run_at AS after_run_at,
                     c.id AS after_id) AS l
        CROSS JOIN {schema}.jobs AS j
        WHERE {level_ready}
        ORDER BY j.run_at, j.id
        LIMIT 1) IS NOT NULL AS more
FROM claimed AS c;

-- name: limit_settings
-- Fragment of jobs_claim_limited and limits_sample: the CTE `limits`, one row per
-- limited queue from the configuration's lists (LIMITS), its periods as intervals, and
-- whether it is walked key by key (`keyed`: per_key limits or fair).
limits AS (
    SELECT l.queue, l.concurrency, l.rate_count,
           make_interval(secs => l.rate_period_s) AS rate_period,
           l.key_concurrency, l.key_rate_count,
           make_interval(secs => l.key_rate_period_s) AS key_rate_period,
           l.fair,
           (l.fair OR l.key_concurrency IS NOT NULL OR l.key_rate_count IS NOT NULL) AS keyed
    FROM ROWS FROM (pg_catalog.unnest(%(limit_queues)s::text[]),
                    pg_catalog.unnest(%(limit_concurrency)s::int[]),
                    pg_catalog.unnest(%(limit_rate_count)s::int[]),
                    pg_catalog.unnest(%(limit_rate_period_s)s::float8[]),
                    pg_catalog.unnest(%(limit_key_concurrency)s::int[]),
                    pg_catalog.unnest(%(limit_key_rate_count)s::int[]),
                    pg_catalog.unnest(%(limit_key_rate_period_s)s::float8[]),
                    pg_catalog.unnest(%(limit_fair)s::bool[]))
         AS l(queue, concurrency, rate_count, rate_period_s, key_concurrency,
              key_rate_count, key_rate_period_s, fair)
)


-- name: limits_lock
-- LIMITS: the first statement of a claim that includes a limited queue (concurrency,
-- rate, per_key or fair; storage/limits.py): one transaction-scoped advisory lock per
-- limited queue, taken in a fixed order (so two claims of overlapping queue lists never
-- wait on each other in a cycle), held until the claim commits or rolls back. Every
-- claim of a limited queue, on every daemon, takes it: they run one at a time per
-- queue, and the next one's claim statement (a new snapshot under READ COMMITTED, taken
-- after this lock was granted) sees every row the previous one committed. A crash
-- anywhere ends the transaction, and the lock with it.
-- JIT off for the rest of this transaction (set_config's is_local): the limited claim's
-- estimated cost can cross jit_above_cost on a big table (the key walk's estimates
-- are blind), and compiling it costs seconds where running it costs a millisecond.
-- hashtextextended and the lock named by their schema (see migrations_lock).
SELECT set_config('jit', 'off', true), pg_catalog.count(pg_catalog.pg_advisory_xact_lock(k.lock_key))
FROM (SELECT pg_catalog.hashtextextended(%(schema_name)s::text || '.' || q.name, 19::bigint)
             AS lock_key
      FROM pg_catalog.unnest(%(queues)s::text[]) AS q(name)
      ORDER BY 1) AS k;


-- name: jobs_claim_limited
-- jobs_claim for a list that includes limited queues, run after limits_lock in the same
-- transaction. The same levels, positions, pauses and order, from the same fragments
-- (claim_levels, level_ready, claim_update, claim_meta); each limited queue takes
-- at most its room:
--   concurrency - its running rows (RUNNING: one pass over the fleet's leased rows)
--   rate N      - its starts in (t - period, t] (starts_queue_idx, at most N entries read)
-- where t = statement_timestamp(), this statement's start: after the lock, so later
-- than every start a previous holder wrote. A job counts as running from its claim
-- until its lease is settled (complete, fail, snooze, release, rescue); a job
-- cancelled while it ran counts until its handler has ended (HELD: the cancelled row
-- keeps the lease until jobs_release_cancelled or jobs_rescue_cancelled); its
-- start counts until it ages out of the window or a Snooze gives it back. The claim
-- writes its starts to the ledger and drops the queue's starts older than the window
-- (an hour at least: see aged_out), in this statement. No counter is kept anywhere:
-- a crash or rollback undoes the claim and its ledger rows together.
-- A level scan takes at most min(limit, room) rows, then the picks of each queue are
-- cut to its room across its priority levels (rows locked beyond it are let go at
-- commit: no other claimer of the queue runs meanwhile). claim_meta's row also says
-- which queues a limit held back (their positions must not move past jobs left ready),
-- and when the soonest start of a rate-held queue leaves its window.
-- KEYED queues (per_key limits or fair) are not scanned by level but walked by key:
-- in each level, the keys with queued jobs (jobs_key_claim_idx, one descent a key)
-- in key order from just after the key that had the last turn (key_turns), wrapping
-- around once. Each key gives its ready jobs (1 a turn in a fair queue) up to its own
-- room, the same two counts per key (RUNNING's count, looked up in room's key_running;
-- starts_key_idx). A key with 10,000 ready jobs, or one at its limit, costs one
-- descent, never a walk past its jobs. The key that had the last turn of the claim is
-- written to key_turns: the next claim starts after it (round-robin: every key with
-- ready jobs gets a turn before any gets a second). Jobs without a key in a keyed queue form one more group,
-- after the keys, with no per-key limit (the queue's own limits still apply), found
-- among the first 1,000 ready jobs of their level only.
-- KEY ACROSS LEVELS: a key's room is the queue's key's, not a level's, but each level's
-- walk counts it from the rows before this claim (a level cannot see what the levels
-- before it picked), so one key with jobs at several priorities was given its whole
-- room once per level (review 25 F1: 3 running of 1). `picked` therefore cuts each key
-- to its room across the queue's levels, highest priority first, before it cuts the
-- queue to its room (the rows let go are locked until commit, as above). A level whose
-- picks of a key are cut had counted them toward its walk's LIMIT, so such a claim can
-- come back short of the batch while other keys' jobs are ready in that level; the
-- next claim takes them (the queue is then among held_queues, as after any short walk).
WITH RECURSIVE {claim_levels},
{limit_settings},
running AS MATERIALIZED (
    -- RUNNING: the leased rows of the concurrency-limited queues, by queue and key, in
    -- one pass over jobs_lease_expiry_idx (0001), whose entries are the fleet's running
    -- jobs (by jobs_running_is_leased), however big the table, and the cancelled ones
    -- whose handler may still run (HELD): counted by the lease, not the state, they
    -- keep their place until the handler has ended. No index of its own: one
    -- would be written by every claim and renewal of every queue, limited or not. Not
    -- read at all (a one-time filter) when no queue of the claim limits concurrency.
    SELECT j.queue, j.key, pg_catalog.count(*) AS n
    FROM {schema}.jobs AS j
    WHERE j.lease_expires_at IS NOT NULL
      AND j.queue = ANY(%(limit_queues)s::text[])
      AND EXISTS (SELECT FROM limits AS l
                  WHERE l.concurrency IS NOT NULL OR l.key_concurrency IS NOT NULL)
    GROUP BY j.queue, j.key
),
room AS MATERIALIZED (
    SELECT l.*,
           -- least() and greatest() ignore NULLs: a queue with only one of the two
           -- limits takes the other's room; with neither (keyed only), NULL: no cap
           CASE WHEN l.concurrency IS NOT NULL OR l.rate_count IS NOT NULL THEN
           greatest(0, least(
               l.concurrency - coalesce((SELECT sum(r.n)::bigint FROM running AS r
                                         WHERE r.queue = l.queue), 0),
               l.rate_count - (SELECT pg_catalog.count(*) FROM (
                   SELECT FROM {schema}.starts AS s
                   WHERE s.queue = l.queue AND s.at > statement_timestamp() - l.rate_period
                   LIMIT l.rate_count) AS window_starts)
           )) END AS room,
           -- each key's running rows as one object (key -> count): the key walk looks
           -- a key up by jsonb's binary search, where a scan of `running` per key
           -- walked (reads every running row of the queue, for every key walked)
           CASE WHEN l.key_concurrency IS NOT NULL THEN
           coalesce((SELECT pg_catalog.jsonb_object_agg(r.key, r.n) FROM running AS r
                     WHERE r.queue = l.queue AND r.key IS NOT NULL), '{{}}')
           END AS key_running
    FROM limits AS l
),
level_limits AS (  -- claim_levels' levels, each with its queue's room and key limits
    SELECT l.*,
           r.room, coalesce(r.keyed, false) AS keyed, r.fair, r.key_concurrency,
           r.key_running, r.key_rate_count, r.key_rate_period,
           coalesce((SELECT t.last_key FROM {schema}.key_turns AS t
                     WHERE t.queue = l.name AND t.priority = l.priority), '') AS last_key
    FROM levels AS l
    LEFT JOIN room AS r ON r.queue = l.name
),
level_picks AS MATERIALIZED (
    SELECT ready.id, l.name, l.ord, l.priority, l.room, NULL::text AS key,
           NULL::bigint AS key_room, 0 AS step, ready.run_at
    FROM (SELECT * FROM level_limits WHERE NOT keyed ORDER BY ord, priority DESC) AS l
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at FROM {schema}.jobs AS j
        WHERE {level_ready}
        ORDER BY j.run_at, j.id
        LIMIT least(%(limit)s::bigint, l.room)  -- NULL room (an unlimited queue): the batch
        FOR UPDATE SKIP LOCKED  -- SKIP LOCKED (as in claim_picks)
    ) AS ready
),
key_picks AS MATERIALIZED (
    SELECT turn.id, l.name, l.ord, l.priority, l.room, turn.key, turn.key_room, turn.step,
           turn.run_at
    FROM (SELECT * FROM level_limits WHERE keyed ORDER BY ord, priority DESC) AS l
    CROSS JOIN LATERAL (
        WITH RECURSIVE walk(key, step, phase) AS (
            -- the first key after the last turn's (phase 1), else the first (phase 2)
            (SELECT first.key, 1, first.phase FROM (
                (SELECT j.key, 1 AS phase FROM {schema}.jobs AS j
                 WHERE j.state = 'queued' AND j.key IS NOT NULL AND j.queue = l.name
                   AND j.priority = l.priority AND j.key > l.last_key
                 ORDER BY j.key LIMIT 1)
              UNION ALL
                (SELECT j.key, 2 FROM {schema}.jobs AS j
                 WHERE j.state = 'queued' AND j.key IS NOT NULL AND j.queue = l.name
                   AND j.priority = l.priority
                 ORDER BY j.key LIMIT 1)
             ) AS first ORDER BY first.phase LIMIT 1)
          UNION ALL
            SELECT nxt.key, w.step + 1, nxt.phase
            FROM walk AS w
            CROSS JOIN LATERAL (
                SELECT n.key, n.phase FROM (
                    (SELECT j.key, w.phase AS phase FROM {schema}.jobs AS j
                     WHERE j.state = 'queued' AND j.key IS NOT NULL AND j.queue = l.name
                       AND j.priority = l.priority AND j.key > w.key
                     ORDER BY j.key LIMIT 1)
                  UNION ALL
                    (SELECT j.key, 2 FROM {schema}.jobs AS j
                     WHERE w.phase = 1 AND j.state = 'queued' AND j.key IS NOT NULL
                       AND j.queue = l.name AND j.priority = l.priority
                     ORDER BY j.key LIMIT 1)
                ) AS n ORDER BY n.phase LIMIT 1
            ) AS nxt
            WHERE nxt.phase = 1 OR nxt.key <= l.last_key  -- once around, no more
        ),
        groups AS (  -- the keys in turn order, then the jobs without a key
            SELECT w.key, w.step FROM walk AS w
          UNION ALL
            SELECT NULL, 2147483647
        )
        -- no window function or sort here: the LIMIT below must stop the walk as
        -- soon as the level has enough (the nested loop yields them in turn order)
        SELECT job.id, g.key, key_room.room AS key_room, g.step, job.run_at
        FROM groups AS g
        CROSS JOIN LATERAL (
            -- the key's room by its limits (NULL: no per-key limit, as in a queue that
            -- is only fair; greatest() would make that 0), counted from the
            -- rows before this claim: the same in every level of the queue, so each
            -- level may take all of it here, and `picked` cuts the key to it across
            -- the levels (KEY ACROSS LEVELS)
            SELECT CASE WHEN g.key IS NULL
                             OR (l.key_concurrency IS NULL AND l.key_rate_count IS NULL)
                        THEN NULL ELSE greatest(0, least(
                       l.key_concurrency - coalesce((l.key_running ->> g.key)::bigint, 0),
                       l.key_rate_count - (SELECT pg_catalog.count(*) FROM (
                           SELECT FROM {schema}.starts AS s
                           WHERE s.queue = l.name AND s.key = g.key
                             AND s.at > statement_timestamp() - l.key_rate_period
                           LIMIT l.key_rate_count) AS window_starts)
                   )) END AS room
            -- OFFSET 0: computed once per key; pulled up into its two uses (the
            -- output and the LIMIT below), the planner ran its probes twice a key
            OFFSET 0
        ) AS key_room
        CROSS JOIN LATERAL (
            -- a key's ready jobs (jobs_key_claim_idx) ...
            SELECT * FROM (SELECT j.id, j.run_at FROM {schema}.jobs AS j
             WHERE g.key IS NOT NULL
               AND j.state = 'queued' AND j.key IS NOT NULL AND j.queue = l.name
               AND j.priority = l.priority AND j.key = g.key
               AND j.run_at <= now()
               AND NOT EXISTS (  -- KEY PAUSES
                    SELECT FROM {schema}.paused_keys AS pk
                    WHERE pk.key = j.key AND pk.until > now())
             ORDER BY j.run_at, j.id
             -- a fair queue's key gives 1 a turn (the walk's round-robin)
             LIMIT least(%(limit)s::bigint, l.room, key_room.room,
                         CASE WHEN l.fair THEN 1 END)
             FOR UPDATE SKIP LOCKED) AS of_key
          UNION ALL
            -- ... or the jobs without a key, looked for among the level's first 1,000
            -- ready jobs only (jobs_claim_idx): the claim never walks a key's backlog
            -- to find them. In a keyed queue, give every job a key.
            SELECT * FROM (SELECT j.id, j.run_at FROM {schema}.jobs AS j
             WHERE g.key IS NULL AND j.key IS NULL
               AND j.id = ANY(ARRAY(
                   SELECT f.id FROM {schema}.jobs AS f
                   WHERE f.state = 'queued' AND f.queue = l.name
                     AND f.priority = l.priority AND f.run_at <= now()
                   ORDER BY f.run_at, f.id
                   LIMIT 1000))
               AND j.state = 'queued'
             ORDER BY j.run_at, j.id
             LIMIT least(%(limit)s::bigint, l.room)
             FOR UPDATE SKIP LOCKED) AS without_key
        ) AS job
        LIMIT least(%(limit)s::bigint, l.room)  -- stops the walk once the level has enough
    ) AS turn
),
picked AS MATERIALIZED (
    -- Each key cut to its room across its queue's levels (KEY ACROSS LEVELS), then each
    -- queue to its room across its levels, both in claim order (priority first): the
    -- queue's room goes to the picks its keys kept.
    SELECT p.id, p.name, p.priority, p.key, p.step, p.run_at
    FROM (SELECT kp.*,
                 row_number() OVER (PARTITION BY kp.name
                                    ORDER BY kp.priority DESC, kp.step, kp.run_at, kp.id) AS n
          FROM (SELECT lp.*,
                       row_number() OVER (PARTITION BY lp.name, lp.key
                                          ORDER BY lp.priority DESC, lp.step, lp.run_at,
                                                   lp.id) AS key_n
                FROM (SELECT * FROM level_picks UNION ALL SELECT * FROM key_picks) AS lp
               ) AS kp
          WHERE kp.key_room IS NULL OR kp.key_n <= kp.key_room) AS p
    WHERE p.room IS NULL OR p.n <= p.room
    ORDER BY p.ord, p.priority DESC, p.step, p.run_at, p.id
    LIMIT %(limit)s::bigint
),
claimed AS (  -- started_at: the time after the lock, as the ledger has it
    {claim_update_after_lock}
),
charged AS (
    INSERT INTO {schema}.starts (lease_token, queue, key, at)
    SELECT c.lease_token, c.queue, c.key, statement_timestamp()
    FROM claimed AS c
    JOIN limits AS l ON l.queue = c.queue
    WHERE l.rate_count IS NOT NULL OR l.key_rate_count IS NOT NULL
),
-- Starts are kept for an hour at least, not only this config's longest period: a
-- reload or a rolling deploy may lengthen the period (3/2s to 3/1m), and the longer
-- window must still find the starts a claim under the shorter one would have dropped.
-- Every period up to an hour is then exact across configs; a longer one keeps its own
-- period. Not the longest period a rate may have (366 days): the ledger of a 100/s
-- queue would grow to billions of rows, whereas an hour of it is 360,000.
aged_out AS (
    DELETE FROM {schema}.starts AS s
    USING limits AS l
    WHERE s.queue = l.queue
      AND s.at <= statement_timestamp()
                  - greatest(l.rate_period, l.key_rate_period, interval '1 hour')
),
turned AS (  -- the key that had the last turn of each keyed level that claimed
    INSERT INTO {schema}.key_turns AS t (queue, priority, last_key)
    SELECT DISTINCT ON (p.name, p.priority) p.name, p.priority, p.key
    FROM picked AS p
    WHERE p.key IS NOT NULL
    ORDER BY p.name, p.priority, p.step DESC
    ON CONFLICT (queue, priority) DO UPDATE SET last_key = EXCLUDED.last_key
)
SELECT claimed.*, meta.*
FROM claimed
FULL JOIN (
    SELECT claim_meta.*,
           -- the limited queues left with no room after this claim, and the keyed
           -- queues whose walk ended before the batch was full (their ready jobs
           -- may all be held back by their keys' limits)
           ARRAY(SELECT r.queue FROM room AS r
                 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS taken FROM picked AS p
                                     WHERE p.name = r.queue) AS c
                 WHERE r.room <= c.taken
                    OR (r.keyed AND c.taken < least(%(limit)s::bigint, r.room)))
               AS held_queues,
           -- when the soonest start of a queue its rate holds back leaves the window
           -- (seconds from now), NULL when no queue's rate is what holds it back
           (SELECT extract(epoch FROM min(s.at + r.rate_period) - statement_timestamp())
            FROM room AS r
            CROSS JOIN LATERAL (
                SELECT s.at FROM {schema}.starts AS s
                WHERE s.queue = r.queue AND s.at > statement_timestamp() - r.rate_period
                ORDER BY s.at LIMIT 1) AS s
            WHERE r.rate_count IS NOT NULL
              AND r.room <= (SELECT pg_catalog.count(*) FROM picked AS p WHERE p.name = r.queue))::float8
               AS rate_wake_in_s
    FROM ({claim_meta}) AS claim_meta
) AS meta ON false;


-- name: limits_sample
-- LIMITS, for status, the metrics' sample and the dashboard's overview (never a claim):
-- each limited queue's running jobs, starts in its rate's current window, ready jobs, and
-- how many of those a limit holds back now: all of them when the queue has no room; else
-- those of keys with no room (per_key). The keys with no room are found from the running
-- rows and the starts ledger (jobs_lease_expiry_idx, starts_key_idx: at most the queue's
-- running jobs and its window's starts), never by probing every key that has ready
-- jobs: over 100,000 ready jobs of 100,000 keys that took 2.6 s, the overview polls it.
-- `counted` is MATERIALIZED: inlined, each count ran once per reference (ready twice, a
-- second pass over the queue's ready jobs). bench/web_limits_cost.py gives the plans.
WITH {limit_settings},
running AS MATERIALIZED (  -- RUNNING, as in jobs_claim_limited: one pass over the leased rows
    -- (places taken: a cancelled job whose handler may still run counts, HELD)
    SELECT j.queue, j.key, pg_catalog.count(*) AS n
    FROM {schema}.jobs AS j
    WHERE j.lease_expires_at IS NOT NULL AND j.queue = ANY(%(limit_queues)s::text[])
    GROUP BY j.queue, j.key
),
counted AS MATERIALIZED (
    SELECT l.*,
           coalesce((SELECT sum(r.n)::bigint FROM running AS r WHERE r.queue = l.queue), 0) AS running,
           (SELECT pg_catalog.count(*) FROM {schema}.starts AS s
            WHERE s.queue = l.queue AND s.at > now() - l.rate_period) AS window_starts,
           (SELECT pg_catalog.count(*) FROM {schema}.jobs AS j
            WHERE j.state = 'queued' AND j.queue = l.queue AND j.run_at <= now()) AS ready
    FROM limits AS l
)
SELECT c.queue, c.running, c.window_starts, c.ready,
       CASE WHEN c.running >= c.concurrency OR c.window_starts >= c.rate_count THEN c.ready
            WHEN c.key_concurrency IS NULL AND c.key_rate_count IS NULL THEN 0
            ELSE (
                SELECT pg_catalog.count(*) FROM {schema}.jobs AS j
                WHERE j.state = 'queued' AND j.queue = c.queue AND j.run_at <= now()
                  AND j.key IS NOT NULL
                  AND j.key IN (  -- the queue's keys at their per_key limit now
                      SELECT r.key FROM running AS r
                      WHERE r.queue = c.queue AND r.key IS NOT NULL
                        AND r.n >= c.key_concurrency
                    UNION
                      SELECT s.key FROM {schema}.starts AS s
                      WHERE s.queue = c.queue AND s.key IS NOT NULL
                        AND s.at > now() - c.key_rate_period
                      GROUP BY s.key HAVING pg_catalog.count(*) >= c.key_rate_count))
       END AS held_back
FROM counted AS c
ORDER BY c.queue;


-- name: limits_notify
-- LIMITS: a completion freed places in these concurrency-limited queues: wake their idle
-- workers (delivered at commit, as jobs_insert's).
SELECT pg_catalog.count(pg_notify(%(channel)s::text, q.name)) FROM pg_catalog.unnest(%(queues)s::text[]) AS q(name);


-- name: wake_limited
-- Fragment (a RETURNING column) of the statements that free a place of a limited queue
-- other than a completion: jobs_fail, jobs_rescue (apply_failure), jobs_snooze and
-- jobs_release. WAKE: a job of one of `wake_queues` (the writer's limited queues whose
-- places this frees) left `running`: its queue's idle workers are woken (delivered at
-- commit; the same notification twice in a transaction is sent once), as limits_notify
-- does for completions. Any other queue's job costs the test of an empty array.
CASE WHEN j.queue = ANY(%(wake_queues)s::text[]) THEN pg_notify({queue_channel}, j.queue) END


-- name: queue_levels
-- Fragment of jobs_levels: given a CTE `queues(name, ord)`, the distinct priorities
-- present among queued jobs of each queue, found by one index descent each (a loose
-- index scan of jobs_claim_idx). Each descent lands on the oldest entry of a level and
-- reads past its dead entries: run by the periodic sweep only, never per claim.
levels AS (
    SELECT q.name, q.ord, top.priority
    FROM queues AS q
    CROSS JOIN LATERAL (
        SELECT j.priority FROM {schema}.jobs AS j
        WHERE j.state = 'queued' AND j.queue = q.name
        ORDER BY j.priority DESC
        LIMIT 1
    ) AS top
  UNION ALL
    SELECT l.name, l.ord, lower_level.priority
    FROM levels AS l
    CROSS JOIN LATERAL (
        SELECT j.priority FROM {schema}.jobs AS j
        WHERE j.state = 'queued' AND j.queue = l.name AND j.priority < l.priority
        ORDER BY j.priority DESC
        LIMIT 1
    ) AS lower_level
)


-- name: jobs_levels
-- The levels (queue, priority) that hold queued jobs, ready or not, of these queues:
-- what the claims of a JobStore learn at each sweep. Paused queues included: their
-- levels are known when they are resumed.
WITH RECURSIVE queues AS (
    SELECT q.name, q.ord FROM pg_catalog.unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
),
{queue_levels}
SELECT name, priority FROM levels;


-- name: jobs_next_run_at
-- Seconds until the earliest queued job of these levels may run (negative: one is
-- ready now), NULL when there is none: how long an idle worker may sleep. Levels and
-- positions as in claim_picks (POSITIONS). Paused queues are left out as the claim
-- leaves them out: their ready jobs would otherwise wake an idle worker again and
-- again for nothing it may claim. So are the jobs of a paused key (KEY PAUSES), and the
-- earliest end of a key pause counts as a run_at: the idle worker wakes when it ends
-- (at worst once for a key none of its queues holds) and claims what it held back.
WITH queues AS (
    SELECT q.name, q.ord FROM pg_catalog.unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
    WHERE NOT EXISTS (SELECT FROM {schema}.paused_queues AS p WHERE p.queue = q.name)
),
levels AS (
    SELECT q.name, l.priority,
           coalesce(l.after_run_at, '-infinity') AS after_run_at,
           coalesce(l.after_id, -1) AS after_id
    FROM ROWS FROM (pg_catalog.unnest(%(level_queues)s::text[]),
                    pg_catalog.unnest(%(level_priorities)s::int[]),
                    pg_catalog.unnest(%(level_after_run_at)s::timestamptz[]),
                    pg_catalog.unnest(%(level_after_id)s::bigint[]))
         AS l(queue, priority, after_run_at, after_id)
    JOIN queues AS q ON q.name = l.queue
)
SELECT extract(epoch FROM least(
           (SELECT min(first.run_at)
            FROM levels AS l
            CROSS JOIN LATERAL (
                SELECT j.run_at FROM {schema}.jobs AS j
                WHERE j.state = 'queued' AND j.queue = l.name AND j.priority = l.priority
                  AND (j.run_at, j.id) > (l.after_run_at, l.after_id)  -- POSITIONS
                  AND (j.key IS NULL OR NOT EXISTS (  -- KEY PAUSES
                        SELECT FROM {schema}.paused_keys AS pk
                        WHERE pk.key = j.key AND pk.until > now()))
                ORDER BY j.run_at, j.id
                LIMIT 1
            ) AS first),
           (SELECT min(pk.until) FROM {schema}.paused_keys AS pk WHERE pk.until > now())
       ) - now())::float8;


-- name: jobs_complete
-- Ends leased jobs `succeeded`, a batch at a time. Returns the ids whose lease held.
--
-- Ids and tokens come as two lists, and are matched without a join: a lease token is
-- drawn afresh for every claim, so a row whose token is in the list is one of these
-- claims (a join of two parameter lists is planned blind, as a nested loop over every
-- pair). Results are looked up by the row's place in the id list.
{complete_update};


-- name: complete_update
-- Fragment of jobs_complete and jobs_complete_and_claim. FINISHED: a job that
-- pgworkerd.wait() marked is announced on the finished channel (at commit); the others
-- cost a test of a boolean.
UPDATE {schema}.jobs AS j
SET state            = 'succeeded',
    result           = (%(results)s::text[])[pg_catalog.array_position(%(ids)s::bigint[], j.id)]::jsonb,
    finished_at      = now(),
    lease_expires_at = NULL
WHERE j.id = ANY(%(ids)s::bigint[])                      -- by primary key
  AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'running'  -- FENCE
RETURNING j.id, CASE WHEN j.waited_on THEN pg_notify({finished_channel}, j.id::text) END


-- name: jobs_completed_by_leases
-- Of these leases, the ones that had already completed their job: a holder that retries
-- after its commit's reply was lost sees its own outcome, not a lost lease. (The token
-- stays on finished rows for this.) Only asked when `jobs_complete` missed some.
SELECT j.id FROM {schema}.jobs AS j
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'succeeded';


-- name: jobs_fail
-- Records a failed attempt of one leased job: retried at now() + delay, where the
-- delay is the caller's (Retry(after=...)) or exponential backoff with full jitter
-- (uniform in [0, min(cap, base * 2^(attempt-1))]) so failures that happen together
-- do not come back together; `dead` when attempts are exhausted or on a discard.
WITH target AS (
    SELECT j.id, j.attempt, %(error)s::text AS error,
           (%(discard)s::bool OR j.attempt::int >= j.max_attempts::int) AS dead,
           COALESCE(%(delay_s)s::float8,
                    random() * least(%(backoff_max_s)s::float8,
                                     %(backoff_base_s)s::float8 * power(2::float8, (j.attempt::int - 1)::float8)))
               AS delay_s
    FROM {schema}.jobs AS j
    WHERE j.id = %(id)s::bigint
      AND j.lease_token = %(token)s::uuid AND j.state = 'running'  -- FENCE
    FOR UPDATE
)
{apply_failure};


-- name: jobs_rescue
-- Jobs whose lease expired (their holder crashed, froze or lost the database): the
-- start stays charged, then each is retried with backoff or dead-lettered. SKIP LOCKED
-- and the lease predicate rechecked under the row lock mean a job that is being
-- completed, or was renewed or claimed afresh meanwhile, is left alone. The leases
-- `spared` (their tokens) are left alone too: the rescuing daemon's own, which its
-- live workers hold, or of jobs they never started and it gives back uncharged itself
-- (jobs_release) once the database answers (housekeeping/duties.py, RescueDuty).
WITH target AS (
    SELECT j.id, j.attempt,
           pg_catalog.format('lease expired: worker %%s stopped renewing it during attempt %%s',
                  j.worker, j.attempt) AS error,
           j.attempt::int >= j.max_attempts::int AS dead,
           random() * least(%(backoff_max_s)s::float8,
                            %(backoff_base_s)s::float8 * power(2::float8, (j.attempt::int - 1)::float8)) AS delay_s
    FROM {schema}.jobs AS j
    WHERE j.state = 'running' AND j.lease_expires_at < now()
      AND j.lease_token <> ALL(%(spared)s::uuid[])
    ORDER BY j.lease_expires_at
    LIMIT %(limit)s::bigint
    FOR UPDATE SKIP LOCKED
)
{apply_failure};


-- name: jobs_rescue_cancelled
-- HELD: cancelled rows whose lease expired (their holder died, froze or lost the
-- database before it said the handler had ended): the lease is cleared, and the place
-- it held under a concurrency limit is freed. The job stays cancelled and is not run
-- again. SKIP LOCKED and the lease predicate rechecked under the row lock, as in
-- jobs_rescue: a holder releasing it now, or a lease not yet expired, is left alone.
-- The queues of the rows released are woken (WAKE), as jobs_release_cancelled's.
WITH target AS (
    SELECT j.id
    FROM {schema}.jobs AS j
    WHERE j.lease_expires_at < now() AND j.state = 'cancelled'
    ORDER BY j.lease_expires_at
    LIMIT %(limit)s::bigint
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET lease_expires_at = NULL
FROM target AS t
WHERE j.id = t.id
RETURNING j.id, j.state, j.run_at, j.attempt, pg_notify({queue_channel}, j.queue);


-- name: apply_failure
-- Shared tail of jobs_fail and jobs_rescue: `target` holds locked rows with the
-- error to record, whether the job is dead, and the retry delay.
UPDATE {schema}.jobs AS j
SET state            = CASE WHEN t.dead THEN 'dead' ELSE 'queued' END,
    run_at           = CASE WHEN t.dead THEN j.run_at
                            ELSE now() + make_interval(secs => t.delay_s) END,
    finished_at      = CASE WHEN t.dead THEN now() END,
    last_error       = COALESCE(t.error, j.last_error),
    -- the last 20 errors, newest last, each cut to 4000 characters
    errors           = CASE WHEN t.error IS NULL THEN j.errors
                            ELSE jsonb_path_query_array(
                                j.errors::jsonb || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                                    'attempt', t.attempt, 'at', now(),
                                    'error', left(t.error, 4000))),
                                '$[last-19 to last]')
                       END,
    lease_token      = CASE WHEN t.dead THEN j.lease_token END,  -- kept on a final row
    lease_expires_at = NULL
FROM target AS t
WHERE j.id = t.id
RETURNING j.id, j.state, j.run_at, j.attempt,
          -- FINISHED (as in complete_update)
          CASE WHEN t.dead AND j.waited_on THEN pg_notify({finished_channel}, j.id::text) END,
          {wake_limited}


-- name: jobs_release
-- Gives leased jobs back at once without charging the start: a graceful shutdown, or
-- jobs of a claimed batch that never started. run_at is kept, so they keep their place.
-- (Ids and tokens matched as in jobs_complete.)
UPDATE {schema}.jobs AS j
SET state            = 'queued',
    attempt          = j.attempt::int - 1,
    lease_token      = NULL,
    lease_expires_at = NULL,
    started_at       = NULL
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'running'  -- FENCE
RETURNING j.id, {wake_limited};


-- name: jobs_snooze
-- A handler's Snooze or PauseKey: the job goes back to `queued` to run at `until` (or
-- `delay_s` from now), and this start is given back (attempt - 1), as a release gives
-- it back. With `pause_key`, the job's key (if it has one) is paused until the same
-- time in the same statement (a longer pause of the key is kept: greatest). FENCE: a
-- holder that lost its lease changes neither the job nor the key.
WITH target AS (
    SELECT j.id, j.key,
           coalesce(%(until)s::timestamptz,
                    now() + make_interval(secs => %(delay_s)s::float8)) AS run_at
    FROM {schema}.jobs AS j
    WHERE j.id = %(id)s::bigint
      AND j.lease_token = %(token)s::uuid AND j.state = 'running'  -- FENCE
    FOR UPDATE
),
uncharged AS (  -- LIMITS: the start is given back to the rate too (fenced by target)
    DELETE FROM {schema}.starts AS s
    USING target AS t
    WHERE s.lease_token = %(token)s::uuid
),
paused AS (
    INSERT INTO {schema}.paused_keys AS p (key, until)
    SELECT t.key, t.run_at FROM target AS t
    WHERE %(pause_key)s::bool AND t.key IS NOT NULL
    ON CONFLICT (key) DO UPDATE
    SET until     = greatest(p.until, EXCLUDED.until),
        paused_at = CASE WHEN p.until > now() THEN p.paused_at ELSE now() END
    RETURNING p.key, p.until
),
told AS (  -- KEY PAUSE NOTICE (keys_pause): the claimed jobs of the key do not start
    SELECT pg_notify(%(channel)s::text, 'pause ' || p.key) FROM paused AS p
    WHERE p.until > now()
)
UPDATE {schema}.jobs AS j
SET state            = 'queued',
    attempt          = j.attempt::int - 1,              -- not charged
    run_at           = t.run_at,
    lease_token      = NULL,
    lease_expires_at = NULL,
    started_at       = NULL
FROM target AS t
WHERE j.id = t.id
RETURNING j.id, j.state, j.run_at, j.attempt, (SELECT pg_catalog.count(*) FROM paused) AS keys_paused,
          (SELECT pg_catalog.count(*) FROM told) AS told,  -- an unreferenced CTE never runs
          {wake_limited};


-- name: jobs_renew
-- Extends the leases still held. The ids missing from the result lost their lease, or
-- their row was locked by another transaction: a row lock is skipped, never waited on.
-- One statement renews all of a daemon's leases, and before, it waited on any of them:
-- a producer holding `enqueue(after=[a running job])` open (its insert locks that row
-- FOR SHARE), an uncommitted cancel, a user's SELECT ... FOR UPDATE held the renewal
-- of every lease until they ended, and past 80 %% of lease_ttl the supervisor killed
-- all its workers (review 25 F4). Now the locked leases are left for the next renewal
-- (jobs_unrenewed_among tells them from lost ones); one whose row stays locked goes
-- unrenewed, and its own job alone is stopped before the lease lapses
-- (supervisor/limits.py). FOR NO KEY UPDATE is the lock the UPDATE takes anyway.
WITH held AS (
    SELECT j.id
    FROM {schema}.jobs AS j
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'running'  -- FENCE
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET lease_expires_at = now() + make_interval(secs => %(lease_ttl_s)s::float8)
FROM held AS h
WHERE j.id = h.id
RETURNING j.id;


-- name: jobs_cancel
-- Cancels waiting, queued or running jobs (a job with dependents releases them: the
-- release triggers of 0010_workflows.sql and 0019_release_in_id_order.sql). A running job's holder can no
-- longer write its outcome (FENCE: state = 'running'), but the row keeps the lease
-- (HELD): the job is cancelled, its place under a concurrency limit stays taken until
-- the handler has ended (jobs_release_cancelled) or the lease has expired
-- (jobs_rescue_cancelled). The token stays on the row (only a running job has one
-- when cancelled: every way back to queued clears it), so the holder's renewal can
-- tell a cancel from a rescue (jobs_unrenewed_among). No place is freed here: the
-- release wakes the queue's workers.
WITH cancelled AS (
    UPDATE {schema}.jobs
    SET state            = 'cancelled',
        finished_at      = now()
    WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('waiting', 'queued', 'running')
    RETURNING id, queue, lease_token, lease_expires_at,
              -- FINISHED (as in complete_update)
              CASE WHEN waited_on THEN pg_notify({finished_channel}, id::text) END
),
-- Tell the holders of the running ones now (delivered at commit), as "id:token" pairs,
-- a hundred to a notification: NOTIFY payloads are limited to 8000 bytes.
told AS (
    SELECT pg_notify(%(channel)s::text, string_agg(c.id::text || ':' || c.lease_token::text, ' '))
    FROM (SELECT id, lease_token, (row_number() OVER ()) / 100 AS chunk
          FROM cancelled WHERE lease_expires_at IS NOT NULL) AS c
    GROUP BY c.chunk
)
SELECT id FROM cancelled
CROSS JOIN (SELECT pg_catalog.count(*) FROM told) AS force_notify;  -- an unreferenced CTE never runs


-- name: lock_wait_limit
-- For the rest of the transaction, a lock waited on longer than `ms` fails the
-- statement (55P03): the supervisor's settlements never wait on a job's row lock held
-- by another transaction (housekeeping/settlements.py).
SELECT pg_catalog.set_config('lock_timeout', %(ms)s::text, true);


-- name: jobs_release_cancelled
-- HELD: the holder of these leases says their handlers have ended (a fenced outcome
-- write found the row cancelled, or the worker that ran it is gone): the cancelled rows
-- still holding them give the lease up, and their place under a concurrency limit with
-- it. Nothing else changes: the job stays cancelled, its handler's result or error is
-- not recorded, finished_at is the cancel's. Each queue that had such a row is woken
-- (WAKE, as wake_limited, at commit): this side does not know which queues are
-- limited, and this is the rare path of a cancel. (Ids and tokens matched as in
-- jobs_complete.)
WITH released AS (
    UPDATE {schema}.jobs AS j
    SET lease_expires_at = NULL
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'cancelled'  -- FENCE
      AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.queue
)
SELECT r.id, pg_notify({queue_channel}, r.queue) FROM released AS r;


-- name: jobs_unrenewed_among
-- Of the leases a renewal did not renew, those still held (state 'running': the
-- renewal skipped their row, locked by another transaction; the next one tries again)
-- and those whose job was cancelled while they held it ('cancelled': the holder is told
-- to stop its handler, not killed as after a rescue). A plain read: it waits on no
-- lock. The others were rescued, released or ended by their holder.
SELECT j.id, j.state
FROM {schema}.jobs AS j
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state IN ('running', 'cancelled');


-- name: jobs_retry_finished
-- Puts dead (or, by id, cancelled) jobs back in their queue to run now, with one more
-- attempt if they had used them all (attempt keeps counting every start). A job whose
-- unique_key is held by a live job meanwhile is left as it is, and so is a cancelled
-- job whose handler may still run (HELD: it holds its lease): retried now, it could
-- start again beside that handler. It may be retried once the handler has ended.
UPDATE {schema}.jobs AS j
SET state        = 'queued',
    run_at       = now(),
    finished_at  = NULL,
    lease_token  = NULL,
    max_attempts = GREATEST(j.max_attempts, j.attempt::int + 1)
WHERE j.state = ANY(%(states)s::text[])
  AND j.lease_expires_at IS NULL  -- HELD: not while a cancelled handler may run
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (j.unique_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {schema}.jobs AS live
        WHERE live.unique_key = j.unique_key AND live.state IN ('queued', 'running')))
RETURNING j.id;


-- name: prune_picks
-- Fragment of jobs_prune and jobs_archive_move: up to `limit` jobs of one finished state
-- older than its retention, oldest first, by jobs_finished_idx, locked; a row another
-- transaction holds is skipped: pruning never waits on a lock. The state is one of the
-- three finished ones: a queued or running job never matches, nor a cancelled one
-- whose handler may still run (HELD: it holds its lease; pruned once released).
-- POSITIONS, as the claim's: a round of pruning passes the oldest finished_at its
-- previous batch removed (`after`; NULL from the start of the state). While a snapshot
-- holds back vacuum, the rows a batch deleted stay in jobs_finished_idx, and a batch
-- that scanned from the start would walk past every row pruned since the snapshot
-- began, again and again. Rows that finished with an earlier finished_at and committed
-- later are found by the next round, which starts from NULL.
SELECT id FROM {schema}.jobs
WHERE state = %(state)s::text
  AND state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at < now() - make_interval(secs => %(retention_s)s::float8)
  AND finished_at >= coalesce(%(after)s::timestamptz, '-infinity')  -- POSITIONS
  AND lease_expires_at IS NULL  -- HELD
ORDER BY finished_at
LIMIT %(limit)s::bigint
FOR UPDATE SKIP LOCKED


-- name: jobs_prune
-- Deletes the prune_picks. A short statement of its own (autocommit): pruning never
-- holds a lock long. Returns how many, and the newest finished_at removed (the next
-- batch's position).
WITH removed AS (
    DELETE FROM {schema}.jobs
    WHERE id IN ({prune_picks})
    RETURNING finished_at
)
SELECT pg_catalog.count(*) AS removed, max(finished_at) AS position FROM removed;


-- name: jobs_archive_move
-- jobs_prune for `retention.archive`: the same rows, moved to jobs_archive in the same
-- statement (a row is in exactly one of the two tables at any commit). The state is
-- checked again on the deleted row: a row re-queued by `retry` between the pick and
-- the delete is left alone.
WITH picked AS ({prune_picks}),
moved AS (
    DELETE FROM {schema}.jobs AS j
    USING picked
    WHERE j.id = picked.id AND j.state IN ('succeeded', 'dead', 'cancelled')
      AND j.lease_expires_at IS NULL  -- HELD
    RETURNING j.*
),
archived AS (
    INSERT INTO {schema}.jobs_archive
        (id, queue, kind, payload, priority, state, attempt, max_attempts, max_runtime,
         run_at, unique_key, worker, last_error, errors, result, created_at, started_at,
         finished_at, progress, progress_stage, progress_at, trace_context, key, after_ids,
         after_failure)
    SELECT id, queue, kind, payload, priority, state, attempt, max_attempts, max_runtime,
           run_at, unique_key, worker, last_error, errors, result, created_at, started_at,
           finished_at, progress, progress_stage, progress_at, trace_context, key, after_ids,
           after_failure
    FROM moved
    RETURNING finished_at
)
SELECT pg_catalog.count(*) AS removed, max(finished_at) AS position FROM archived;


-- name: periodic_entries_register
-- Entries seen for the first time start from now: the slots before they existed are
-- not missed slots. Returns the database clock, which the caller's slots are read on.
WITH registered AS (
    INSERT INTO {schema}.periodic_entries (entry_key, last_slot_at)
    SELECT k, now() FROM pg_catalog.unnest(%(keys)s::text[]) AS k
    ON CONFLICT (entry_key) DO NOTHING
    RETURNING entry_key
)
SELECT clock_timestamp() AS now, (SELECT pg_catalog.count(*) FROM registered) AS new_entries;


-- name: periodic_entries_last
-- The newest slot enqueued (or the first sight) of each of these entries.
SELECT entry_key, last_slot_at, last_job_id
FROM {schema}.periodic_entries
WHERE entry_key = ANY(%(keys)s::text[]);


-- name: periodic_enqueue
-- Enqueues the job of one slot, once: the UPDATE moves the entry's last slot forwards
-- only if this slot is newer (a concurrent daemon's UPDATE of the same slot waits for
-- ours, then sees the new value and matches nothing), and the INSERT runs only on the
-- row the UPDATE returned. run_at is the slot: a daemon whose clock runs ahead enqueues
-- early, and the job still waits for its time on the database clock.
WITH advanced AS (
    UPDATE {schema}.periodic_entries
    SET last_slot_at = %(slot_at)s::timestamptz, last_job_id = nextval(%(sequence)s::regclass),
        updated_at = now()
    WHERE entry_key = %(key)s::text AND last_slot_at < %(slot_at)s::timestamptz
    RETURNING last_job_id
),
inserted AS (
    INSERT INTO {schema}.jobs (id, queue, kind, payload, priority, run_at)
    SELECT last_job_id, %(queue)s::text, %(kind)s::text, %(payload)s::jsonb, %(priority)s::int, %(slot_at)s::timestamptz
    FROM advanced
    RETURNING id, queue
),
notified AS (
    SELECT pg_notify(%(channel)s::text, queue) FROM inserted
)
SELECT id FROM inserted CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify;


-- name: jobs_get
SELECT * FROM {schema}.jobs WHERE id = %(id)s::bigint;


-- name: daemons_heartbeat
-- Registers a daemon or refreshes its heartbeat (database clock).
INSERT INTO {schema}.daemons AS d (id, hostname, pid, info)
VALUES (%(id)s::text, %(hostname)s::text, %(pid)s::int, %(info)s::jsonb)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), info = EXCLUDED.info;


-- name: daemons_remove
DELETE FROM {schema}.daemons WHERE id = %(id)s::text;


-- name: daemons_prune_stale
-- Daemons that stopped without saying so (SIGKILL, host loss).
DELETE FROM {schema}.daemons
WHERE heartbeat_at < now() - make_interval(secs => %(stale_after_s)s::float8);


-- name: migrations_read_committed
-- The migration transaction's first statement, whatever default_transaction_isolation
-- the database or role sets: under repeatable read or serializable, migrations_lock's
-- statement would take the snapshot before it waits, and a host that waited for
-- another's migration would not see it and apply the same migrations again.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;


-- name: migrations_lock
-- One migrator at a time per schema, across hosts; released at commit.
-- Built-ins named by their schema, their arguments of their exact types: an unqualified
-- hashtextextended(text, 0) was resolved by the search_path, and a public function of
-- (text, integer), an exact match where the built-in takes a bigint, ran instead (as
-- the migrating role: a superuser's, in the review of round 21).
SELECT pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended('pgworkerd.migrate:' || %(schema_name)s::text, 0::bigint));


-- name: migrations_privileges
-- May the current role migrate? It must be able to create in the schema (its owner
-- can), or, when the schema does not exist yet, to create schemas in the database.
-- Asked before any DDL, so that a runtime role (USAGE only) is refused in one line.
SELECT current_user AS role,
       n.oid IS NOT NULL AS schema_exists,
       coalesce(has_schema_privilege(n.oid, 'CREATE'),
                has_database_privilege(current_database()::text, 'CREATE')) AS may_create
FROM (VALUES (1)) AS one (x)
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema_name)s::name;


-- name: migrations_create_schema
-- Only run when the schema is missing: CREATE SCHEMA IF NOT EXISTS checks the
-- database's CREATE privilege first, which a schema's owner need not have.
CREATE SCHEMA IF NOT EXISTS {schema};


-- name: migrations_create_table
CREATE TABLE IF NOT EXISTS {schema}.migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);


-- name: migrations_applied
SELECT version FROM {schema}.migrations ORDER BY version;


-- name: migrations_record
INSERT INTO {schema}.migrations (version, name) VALUES (%(version)s::int, %(name)s::text);


-- name: migrations_table_exists
SELECT to_regclass(%(migrations_table)s::text) IS NOT NULL AS present;


-- name: search_path_set
SELECT set_config('search_path', %(search_path)s::text, true);


-- name: jobs_status_by_queue
-- The operator's `status`: per queue, the jobs in each state, the age of the oldest
-- ready job (queued, run_at passed) and the jobs finished in the last 5 minutes. One
-- pass over the table (finished rows included, until pruned): an operator's read, not
-- a hot path.
SELECT queue,
       pg_catalog.count(*) FILTER (WHERE state = 'waiting')   AS waiting,
       pg_catalog.count(*) FILTER (WHERE state = 'queued')    AS queued,
       pg_catalog.count(*) FILTER (WHERE state = 'running')   AS running,
       pg_catalog.count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       pg_catalog.count(*) FILTER (WHERE state = 'dead')      AS dead,
       pg_catalog.count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE state = 'queued' AND run_at <= now()))::float8 AS oldest_ready_age_s,
       pg_catalog.count(*) FILTER (WHERE finished_at >= now() - interval '5 minutes') AS finished_5m
FROM {schema}.jobs
GROUP BY queue
ORDER BY queue;


-- name: daemons_list
-- The daemons that registered a heartbeat (rows of daemons that stopped without saying
-- so stay until pruned), oldest first, with ages by the database clock.
SELECT id, hostname, pid, started_at, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age_s, info
FROM {schema}.daemons
ORDER BY started_at, id;


-- name: jobs_list
-- The operator's `jobs list`: newest first (by id), optionally of one state, queue, kind.
SELECT id, queue, kind, state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, worker, last_error
FROM {schema}.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY id DESC
LIMIT %(limit)s::bigint;


-- name: jobs_states
-- The state of each of these jobs that exists.
SELECT id, state FROM {schema}.jobs WHERE id = ANY(%(ids)s::bigint[]);


-- name: clock_read
-- The database's time: what `status` is as of.
SELECT now() AS now;


-- name: horizon_holder
-- The oldest holder of this database's xmin horizon: vacuum cannot remove a row version
-- that died after it began, and index scans cannot skip such versions, so each claim
-- walks past every job finished since. An open transaction in this database (idle in
-- transaction, a long report), a standby's hot_standby_feedback (its walsender, which
-- holds every database's), a prepared transaction, or a replication slot. Sessions in
-- other databases do not hold back this one's tables. Ordered by xid age (the horizon itself); age_s is
-- the wall time it has been open (NULL for a slot). Without pg_read_all_stats, the
-- sessions of other roles show no xmin: see docs/deploy.md (roles).
WITH holders AS (
    SELECT 'transaction' AS kind, pid, application_name AS name, state,
           extract(epoch FROM now() - xact_start)::float8 AS age_s,
           greatest(age(backend_xmin), age(backend_xid)) AS xid_age
    FROM pg_stat_activity
    WHERE pid <> pg_backend_pid()
      AND (datname = current_database() OR backend_type = 'walsender')
      AND backend_type <> 'autovacuum worker'
      AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
    UNION ALL
    SELECT 'prepared transaction', NULL, gid, NULL,
           extract(epoch FROM now() - prepared)::float8, age(transaction)
    FROM pg_prepared_xacts
    WHERE database = current_database()
    UNION ALL
    SELECT 'replication slot', active_pid, slot_name, NULL, NULL, age(xmin)
    FROM pg_replication_slots
    WHERE xmin IS NOT NULL
)
SELECT kind, pid, name, state, age_s, xid_age
FROM holders
ORDER BY xid_age DESC NULLS LAST, age_s DESC NULLS LAST
LIMIT 1;


-- name: jobs_table_health
-- The jobs table's live and dead row versions as the statistics collector last counted
-- them, and its last vacuum: dead versions pile up while the horizon is held.
SELECT n_live_tup AS live_tuples, n_dead_tup AS dead_tuples,
       greatest(last_autovacuum, last_vacuum) AS last_vacuum_at
FROM pg_stat_user_tables
WHERE schemaname = %(schema)s::name AND relname = 'jobs';


-- name: queues_ready
-- The metrics' queue depth: per queue, the jobs ready to run now and the age in seconds
-- of the oldest of them (NULL: none). Sampled by the supervisor every few seconds
-- (not per scrape); a range of jobs_claim_idx per queue and priority.
SELECT q.name, pg_catalog.count(j.id), extract(epoch FROM now() - min(j.run_at))::float8
FROM pg_catalog.unnest(%(queues)s::text[]) AS q(name)
LEFT JOIN {schema}.jobs AS j
    ON j.queue = q.name AND j.state = 'queued' AND j.run_at <= now()
GROUP BY q.name;


-- name: queues_waiting
-- The metrics' waiting gauge: per queue, the jobs waiting for the jobs they run after;
-- the 'waiting' range of jobs_dead_or_waiting_idx (state, queue) (0014), which holds only
-- dead and waiting jobs.
SELECT q.name, pg_catalog.count(j.id)
FROM pg_catalog.unnest(%(queues)s::text[]) AS q(name)
LEFT JOIN {schema}.jobs AS j ON j.queue = q.name AND j.state = 'waiting'
GROUP BY q.name;


-- name: queues_pause
-- Pauses these queues (kept in the database until resumed): no claim takes their jobs
-- from the next one on; running jobs finish. Returns the queues that were not paused
-- already (pausing twice changes nothing, not even paused_at).
INSERT INTO {schema}.paused_queues AS p (queue)
SELECT DISTINCT q.name FROM pg_catalog.unnest(%(queues)s::text[]) AS q(name)
ON CONFLICT (queue) DO NOTHING
RETURNING p.queue;


-- name: queues_resume
-- Resumes these queues; returns the ones that were paused. Each one resumed is
-- announced on the enqueue channel, as an enqueue announces its queue, so that idle
-- workers claim its waiting jobs at once rather than at their next poll (delivered at
-- commit).
WITH resumed AS (
    DELETE FROM {schema}.paused_queues AS p
    WHERE p.queue = ANY(%(queues)s::text[])
    RETURNING p.queue
),
notified AS (
    SELECT pg_notify(%(channel)s::text, resumed.queue) FROM resumed
)
SELECT resumed.queue
FROM resumed
CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify  -- an unreferenced CTE never runs
ORDER BY resumed.queue;


-- name: queues_paused
-- The paused queues and since when.
SELECT queue, paused_at FROM {schema}.paused_queues ORDER BY queue;


-- name: queues_list
-- The operator's `queues`: every queue that the config names (`configured`), that jobs
-- name, or that is paused; whether it is paused, and its jobs by state. One pass over
-- the table, as jobs_status_by_queue: an operator's read, not a hot path.
WITH counts AS (
    SELECT queue,
           pg_catalog.count(*) FILTER (WHERE state = 'waiting')   AS waiting,
           pg_catalog.count(*) FILTER (WHERE state = 'queued')    AS queued,
           pg_catalog.count(*) FILTER (WHERE state = 'running')   AS running,
           pg_catalog.count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
           pg_catalog.count(*) FILTER (WHERE state = 'dead')      AS dead,
           pg_catalog.count(*) FILTER (WHERE state = 'cancelled') AS cancelled
    FROM {schema}.jobs
    GROUP BY queue
),
named AS (
    SELECT c.name AS queue FROM pg_catalog.unnest(%(configured)s::text[]) AS c(name)
  UNION
    SELECT queue FROM counts
  UNION
    SELECT queue FROM {schema}.paused_queues
)
SELECT n.queue,
       n.queue = ANY(%(configured)s::text[]) AS configured,
       p.paused_at,
       coalesce(c.waiting, 0)   AS waiting,
       coalesce(c.queued, 0)    AS queued,
       coalesce(c.running, 0)   AS running,
       coalesce(c.succeeded, 0) AS succeeded,
       coalesce(c.dead, 0)      AS dead,
       coalesce(c.cancelled, 0) AS cancelled
FROM named AS n
LEFT JOIN counts AS c ON c.queue = n.queue
LEFT JOIN {schema}.paused_queues AS p ON p.queue = n.queue
ORDER BY n.queue;


-- name: jobs_progress
-- Records what handlers reported through job.progress(): the latest value of each job,
-- a batch at a time. FENCE: only the lease that runs the job writes, while the job
-- runs, or onto the success that same lease wrote (a value reported just before the
-- handler returned may reach the database after the success); a holder whose lease was
-- rescued, cancelled or released writes nothing.
UPDATE {schema}.jobs AS j
SET progress       = p.percent,
    progress_stage = p.stage,
    progress_at    = now()
FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                pg_catalog.unnest(%(tokens)s::uuid[]),
                pg_catalog.unnest(%(percents)s::float8[]),
                pg_catalog.unnest(%(stages)s::text[]))
     AS p(id, token, percent, stage)
WHERE j.id = p.id                                        -- by primary key
  AND j.lease_token = p.token AND j.state IN ('running', 'succeeded')  -- FENCE
RETURNING j.id;


-- name: jobs_wait_mark
-- pgworkerd.wait(), after its LISTEN: marks a job that is not final yet (waiting for
-- others too: a release to queued keeps the mark), so the statement that makes it final
-- announces it (FINISHED). No row: the job is final already, or does not exist; the
-- caller then reads it. (Marking only queued and running jobs left wait() on a waiting
-- job marking and reading it again in a loop, its timeout never checked.)
UPDATE {schema}.jobs
SET waited_on = true
WHERE id = %(id)s::bigint AND state NOT IN ('succeeded', 'dead', 'cancelled')
RETURNING state;


-- name: jobs_outcome
-- A job's state and result: what pgworkerd.wait() and pgworkerd.result() return. The
-- result as its text, decoded by storage.connections.json_loads as a claim's payload
-- is: on the caller's own connection psycopg's jsonb loader is json.loads, which raised
-- RecursionError for a result nested too deep, where the marker is promised.
SELECT state, result::text FROM {schema}.jobs WHERE id = %(id)s::bigint;


-- name: jobs_running_progress
-- `status`: the running jobs that reported progress, longest running first (the
-- rescuer's index holds exactly the running jobs).
SELECT id, queue, kind, progress, progress_stage, progress_at, started_at
FROM {schema}.jobs
WHERE lease_expires_at IS NOT NULL AND state = 'running' AND progress IS NOT NULL
ORDER BY started_at, id
LIMIT %(limit)s::bigint;


-- name: finished_listen
-- pgworkerd.wait(): hear the FINISHED announcements (before marking the job, so none
-- is missed between the two).
LISTEN {finished_channel_name};


-- name: finished_unlisten
UNLISTEN {finished_channel_name};


-- name: jobs_enqueued_matching
-- pgworkerd.testing.assert_enqueued: jobs of a kind in the given states whose payload
-- contains the given JSON (jsonb containment; NULL: any payload), newest first.
SELECT id, queue, kind, state, payload, run_at, priority
FROM {schema}.jobs
WHERE kind = %(kind)s::text AND state = ANY(%(states)s::text[])
  AND (%(subset)s::jsonb IS NULL OR payload @> %(subset)s::jsonb)
ORDER BY id DESC
LIMIT %(limit)s::bigint;


-- name: dashboard_serial
-- The overview's live part runs without parallel workers (its connection only, closed
-- after the request): counting 100,000 queued jobs from jobs_claim_idx took 47 ms alone
-- and 63 with two workers (bench/web_overview_abab.py, 2 cores), and a page polled
-- every few seconds should not take the server's worker processes from the job path.
SET max_parallel_workers_per_gather = 0;
-- name: dashboard_queues_live
-- The dashboard's reads (pgworkerd/web, storage/dashboard.py) from here on. Each answers
-- from an index range, never a pass over the whole table: the overview is polled every
-- few seconds while a browser is open. bench/web_cost.py times them and prints plans.
--
-- Queued, running and waiting jobs per queue, each from its partial index:
-- jobs_claim_idx holds only queued rows (queue and run_at are in it: an index-only scan
-- once vacuumed), jobs_lease_expiry_idx only leased rows (the running ones, by
-- jobs_running_is_leased, and the few cancelled ones still HELD, left out by state),
-- jobs_dead_or_waiting_idx (0014) only dead and waiting ones. Finished rows, however
-- many, are in none of them.
SELECT queue, 'queued' AS state, pg_catalog.count(*) AS n,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
           AS oldest_ready_age_s
FROM {schema}.jobs WHERE state = 'queued'
GROUP BY queue
UNION ALL
SELECT queue, 'running', pg_catalog.count(*), NULL
FROM {schema}.jobs WHERE lease_expires_at IS NOT NULL AND state = 'running'
GROUP BY queue
UNION ALL
SELECT queue, 'waiting', pg_catalog.count(*), NULL
FROM {schema}.jobs WHERE state = 'waiting'
GROUP BY queue;


-- name: dashboard_dead_by_queue
-- Dead jobs per queue: the 'dead' range of jobs_dead_or_waiting_idx (state, queue) (0014),
-- an index-only scan already in queue order. Dead jobs are few next to succeeded ones
-- and wait for an operator; succeeded and cancelled totals are not counted at all (see dashboard_finished_by_minute).
SELECT queue, pg_catalog.count(*) AS n
FROM {schema}.jobs WHERE state = 'dead'
GROUP BY queue;


-- name: dashboard_finished_by_minute
-- Jobs finished in the last hour by queue, state and minute (0: the current minute):
-- the chart and the "last hour" counts. One range of jobs_finished_idx (state,
-- finished_at) per final state, then the heap for the queue. Spelled as three equalities,
-- not `state IN (...)`: with the list, PostgreSQL 15 misjudges the range and reads the
-- whole table (300 ms over a million rows instead of 60: bench/web_cost.py). The minute
-- in float8 (date_part), not numeric (extract): 73 ms instead of 91 over the 42,000 rows
-- of a busy hour (bench/web_overview_abab.py).
SELECT queue, state,
       floor(date_part('epoch', now() - finished_at) / 60::float8)::int AS minutes_ago,
       pg_catalog.count(*) AS n
FROM (
    SELECT queue, state, finished_at FROM {schema}.jobs
    WHERE state = 'succeeded' AND finished_at > now() - make_interval(mins => %(minutes)s::int)
    UNION ALL
    SELECT queue, state, finished_at FROM {schema}.jobs
    WHERE state = 'dead' AND finished_at > now() - make_interval(mins => %(minutes)s::int)
    UNION ALL
    SELECT queue, state, finished_at FROM {schema}.jobs
    WHERE state = 'cancelled' AND finished_at > now() - make_interval(mins => %(minutes)s::int)
) AS finished
GROUP BY 1, 2, 3;


-- name: dashboard_keys_paused
-- The keys paused now, by name, at most `limit`, each with how long is left and the ready
-- jobs (queued, run_at passed) it holds back. paused_keys is empty or a few rows: with
-- none paused the hash semi-join's inner side is empty and PostgreSQL never reads the
-- jobs. With some, one pass over the queued rows (jobs_claim_idx, which has no key:
-- the heap for each ready row's key), whatever the number of keys; never the finished
-- rows. bench/web_cost.py times it with keys paused.
WITH paused AS MATERIALIZED (
    SELECT key, until, paused_at FROM {schema}.paused_keys
    WHERE until > now()
    ORDER BY key
    LIMIT %(limit)s::bigint
),
held AS (
    SELECT j.key, pg_catalog.count(*) AS ready
    FROM {schema}.jobs AS j
    WHERE j.state = 'queued' AND j.run_at <= now()
      AND j.key IN (SELECT key FROM paused)
    GROUP BY j.key
)
SELECT p.key, p.until, p.paused_at,
       extract(epoch FROM p.until - now())::float8 AS left_s,
       coalesce(h.ready, 0) AS ready
FROM paused AS p
LEFT JOIN held AS h ON h.key = p.key
ORDER BY p.key;
-- name: jobs_estimate
-- The planner's estimate of the table's rows (as of the last ANALYZE): what the overview
-- shows as "about N jobs", instead of counting them. NULL before the first ANALYZE
-- (reltuples is -1 then).
SELECT (SELECT CASE WHEN reltuples >= 0::real THEN reltuples::bigint END FROM pg_class
        WHERE oid = to_regclass(%(table)s::text)::oid) AS estimate;


-- name: dashboard_jobs_page
-- Newest first, one page at a time: `before` is the smallest id of the previous page
-- (keyset pagination: no OFFSET, each page is a backward range of the primary key), and
-- `floor` bounds the range: a filter that few or no rows match walks at most
-- SCAN_WINDOW ids of the key, not the whole table, and the page offers the next window.
-- Of the last error, only its tail: the page shows its last line, and a row written by
-- SQL or an older version may hold megabytes (50 of them made a 50 MB read a page).
SELECT id, queue, kind, state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, worker, right(last_error, %(tail)s::int) AS last_error_tail
FROM {schema}.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND id < %(before)s::bigint AND id >= %(floor)s::bigint
ORDER BY id DESC
LIMIT %(limit)s::bigint;


-- name: dashboard_jobs_page_by_key
-- dashboard_jobs_page on a schema with the `key` column: each job's key, and the key
-- filter too.
SELECT id, queue, kind, state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, worker, right(last_error, %(tail)s::int) AS last_error_tail, key
FROM {schema}.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND id < %(before)s::bigint AND id >= %(floor)s::bigint
  AND (%(key)s::text IS NULL OR key = %(key)s::text)
ORDER BY id DESC
LIMIT %(limit)s::bigint;


-- name: jobs_max_id
-- The newest id: the top of the first page's window (one descent of the primary key).
SELECT coalesce(max(id), 0) AS max_id FROM {schema}.jobs;


-- name: jobs_has_key_column
-- Whether the jobs table has the `key` column (flow control) the jobs page filters by.
SELECT EXISTS (
    SELECT FROM information_schema.columns
    WHERE table_schema::name = %(schema)s::name AND table_name::name = 'jobs'
      AND column_name::name = 'key');


-- name: keys_pause
-- Pauses a key until `until`, or, when `until` is NULL, for `seconds` from now (database
-- clock): no claim takes a job of that key before then (KEY PAUSES in claim_picks). `extend`: a pause already running longer is kept
-- (a handler's PauseKey never shortens an operator's pause); otherwise the new `until`
-- replaces it (an operator's `keys pause` means what it says). Returns the pause's end.
-- KEY PAUSE NOTICE: a pause still to run is announced on the cancel channel (`pause
-- KEY`, delivered at commit), which every daemon's supervisor LISTENs on: it tells its
-- workers, which give back the jobs of the key they claimed before the pause and have
-- not started (the claim of those did not see it). One notification a pause, nothing
-- a job.
WITH paused AS (
    INSERT INTO {schema}.paused_keys AS p (key, until)
    VALUES (%(key)s::text,
            coalesce(%(until)s::timestamptz, now() + make_interval(secs => %(seconds)s::float8)))
    ON CONFLICT (key) DO UPDATE
    SET until     = CASE WHEN %(extend)s::bool THEN greatest(p.until, EXCLUDED.until)
                         ELSE EXCLUDED.until END,
        paused_at = CASE WHEN p.until > now() THEN p.paused_at ELSE now() END
    RETURNING p.key, p.until
)
SELECT p.until, CASE WHEN p.until > now() THEN pg_notify(%(channel)s::text, 'pause ' || p.key) END
FROM paused AS p;


-- name: keys_resume
-- Ends a key's pause; returns whether one was running. Each queue holding queued jobs of
-- the key is announced on the enqueue channel (at commit), as queues_resume does, so
-- idle workers claim them at once. The queues are found from the key's queued jobs
-- (jobs_key_queued_idx, 0008, when the planner takes it): an operator's action.
WITH resumed AS (
    DELETE FROM {schema}.paused_keys AS p
    WHERE p.key = %(key)s::text
    RETURNING p.key, p.until > now() AS was_paused
),
notified AS (
    SELECT pg_notify(%(channel)s::text, q.queue)
    FROM (SELECT DISTINCT j.queue FROM {schema}.jobs AS j
          WHERE j.state = 'queued' AND j.key IN (SELECT key FROM resumed)) AS q
)
SELECT coalesce(bool_or(resumed.was_paused), false) AS was_paused
FROM resumed
CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) AS force_notify;  -- an unreferenced CTE never runs


-- name: keys_list
-- The operator's `keys`: every key that a queued or running job holds, or that is
-- paused now, with its jobs running and ready (queued, run_at passed) and queued, and
-- its pause. One pass over the live jobs: an operator's read, not a hot path.
WITH counts AS (
    SELECT key,
           pg_catalog.count(*) FILTER (WHERE state = 'running') AS running,
           pg_catalog.count(*) FILTER (WHERE state = 'queued' AND run_at <= now()) AS ready,
           pg_catalog.count(*) FILTER (WHERE state = 'queued') AS queued,
           pg_catalog.array_agg(DISTINCT queue ORDER BY queue) AS queues
    FROM {schema}.jobs
    WHERE key IS NOT NULL AND state IN ('queued', 'running')
    GROUP BY key
),
paused AS (
    SELECT key, until, paused_at FROM {schema}.paused_keys WHERE until > now()
)
SELECT coalesce(c.key, p.key) AS key,
       coalesce(c.running, 0) AS running,
       coalesce(c.ready, 0)   AS ready,
       coalesce(c.queued, 0)  AS queued,
       coalesce(c.queues, '{{}}') AS queues,
       p.until AS paused_until,
       p.paused_at,
       extract(epoch FROM p.until - now())::float8 AS paused_for_s
FROM counts AS c
FULL JOIN paused AS p ON p.key = c.key
ORDER BY 1
LIMIT %(limit)s::bigint;


-- name: keys_paused_holding
-- `status`: the keys paused now, with how many ready jobs (queued, run_at passed) each
-- holds back. One range scan of jobs_key_queued_idx (0008) per paused key: no pass
-- over the queued jobs, however many.
SELECT p.key, p.until, p.paused_at,
       extract(epoch FROM p.until - now())::float8 AS paused_for_s,
       (SELECT pg_catalog.count(*) FROM {schema}.jobs AS j
        WHERE j.key = p.key AND j.key IS NOT NULL AND j.state = 'queued'
          AND j.run_at <= now()) AS held_back
FROM {schema}.paused_keys AS p
WHERE p.until > now()
ORDER BY p.key
LIMIT %(limit)s::bigint;


-- name: keys_paused_holding_by_queue
-- The metrics' sample: ready jobs held back by a key pause, by queue, among `queues`.
-- As keys_paused_holding: one range scan of jobs_key_queued_idx per paused key. LATERAL
-- makes it so: as a plain join the planner, misled by a never-analysed paused_keys,
-- hashes it against a pass over the whole jobs table.
SELECT held.queue, sum(held.n)::bigint AS held_back
FROM {schema}.paused_keys AS p
CROSS JOIN LATERAL (
    SELECT j.queue, pg_catalog.count(*) AS n
    FROM {schema}.jobs AS j
    WHERE j.key = p.key AND j.key IS NOT NULL AND j.state = 'queued' AND j.run_at <= now()
      AND j.queue = ANY(%(queues)s::text[])
    GROUP BY j.queue
) AS held
WHERE p.until > now()
GROUP BY held.queue;


-- name: flow_tidy
-- Housekeeping: forgets the rows of flow control that no longer mean anything, so that
-- paused_keys and unique_slots hold about the keys in use. Kept for `keep_s` after they
-- stopped mattering (an operator may still look at a pause that just ended).
-- A pause that ended (an ended row holds nothing back: claims test until > now()).
-- A slot no enqueue touched for `keep_s` whose throttle window has ended, or whose
-- debounce job is no longer queued or running (final, or pruned): with no row, the
-- next enqueue of the key does what it would have done with this one.
-- Racing a producer: a producer that updated the row first holds its lock; this DELETE
-- waits, then re-checks its WHERE on the new row, whose touched_at is now: kept. One
-- that comes after the DELETE sees no row and starts afresh, as explained above.
WITH ended_pauses AS (
    DELETE FROM {schema}.paused_keys
    WHERE until < now() - make_interval(secs => %(keep_s)s::float8)
    RETURNING 1
),
idle_slots AS (
    DELETE FROM {schema}.unique_slots AS s
    WHERE s.touched_at < now() - make_interval(secs => %(keep_s)s::float8)
      AND CASE WHEN s.mode = 'throttle' THEN s.window_ends_at < now()
               ELSE NOT EXISTS (SELECT FROM {schema}.jobs AS j
                                WHERE j.id = s.job_id AND j.state IN ('queued', 'running'))
          END
    RETURNING 1
)
SELECT (SELECT pg_catalog.count(*) FROM ended_pauses) AS pauses, (SELECT pg_catalog.count(*) FROM idle_slots) AS slots;
