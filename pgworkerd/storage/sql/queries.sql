-- Every statement pgworkerd runs outside its migrations, loaded by name (`-- name: x`).
--
-- `{schema}` is replaced by the quoted schema identifier (psycopg.sql.Identifier, never
-- string formatting of user input); parameters are named (`%(name)s`), so a literal
-- percent sign is written `%%` and a literal brace `{{` `}}`.
--
-- The guarantees live in a few clauses, marked FENCE and SKIP LOCKED below:
--   * FENCE: every write after a claim names the lease token it was claimed with and
--     requires state = 'running'. A holder whose lease was rescued, cancelled or
--     released can no longer change the job: its write matches no row and the caller
--     is told the lease was lost.
--   * SKIP LOCKED: claimers and rescuers never wait on each other's rows and never
--     take the same row twice.
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
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT input.id,
       -- a hashed subplan: one pass over `inserted`, whatever the list's length
       input.unique_key IS NOT NULL AND input.id NOT IN (SELECT id FROM inserted) AS left_out
FROM input
CROSS JOIN (SELECT count(*) FROM notified) AS force_notify  -- an unreferenced CTE never runs
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
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
-- The function scan yields the records in input order and nextval() numbers them as
-- they come, increasing: ordered by id is ordered as given.
SELECT inserted.id, false AS left_out
FROM inserted
CROSS JOIN (SELECT count(*) FROM notified) AS force_notify
ORDER BY inserted.id;


-- name: jobs_insert_after
-- Inserts one job that runs `after` other jobs (workflows, 0010_workflows.sql). Used
-- only for such a job: jobs_insert is untouched. The dependencies are locked FOR SHARE
-- (in id order) before their states are read: an outcome of one of them, an UPDATE,
-- waits for this transaction to end, and this statement waits for an outcome in
-- progress and then reads the state it committed. So either this insert sees the
-- dependency final (and counts it now), or the outcome's release sees this job's edge
-- (has_dependents, set here, and the job_dependencies row are committed before the
-- outcome's UPDATE can lock the row): never neither, never both.
-- The job is `cancelled` at once if a dependency already ended dead or cancelled and
-- after_failure is 'cancel'; `queued` if every dependency has already ended; else
-- `waiting` with one edge per dependency not yet final. Nothing is inserted if an id
-- does not exist: `missing` names them.
WITH deps AS (
    SELECT j.id, j.state IN ('succeeded', 'dead', 'cancelled') AS final,
           j.state IN ('dead', 'cancelled') AS failed
    FROM {schema}.jobs AS j
    WHERE j.id = ANY(%(after)s::bigint[])
    ORDER BY j.id
    FOR SHARE
),
facts AS (
    SELECT count(*) AS found,
           count(*) FILTER (WHERE NOT final)::int AS pending,
           min(id) FILTER (WHERE failed) AS failed_dependency
    FROM deps
),
input AS (
    SELECT nextval(%(sequence)s::regclass) AS id, t.*, f.pending, f.failed_dependency,
           CASE WHEN f.failed_dependency IS NOT NULL AND t.after_failure = 'cancel'
                    THEN 'cancelled'
                WHEN f.pending = 0 THEN 'queued'
                ELSE 'waiting' END AS state
    FROM jsonb_to_record(%(job)s::jsonb)
             AS t(queue text, kind text, payload jsonb, priority int, run_at timestamptz,
                  delay_s float8, max_attempts int, max_runtime_s float8,
                  trace_context jsonb, key text, after_failure text)
    CROSS JOIN facts AS f
    WHERE f.found = cardinality(%(after)s::bigint[])
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
                THEN format('cancelled: job %%s, which it was to run after, ended dead or '
                            'cancelled', failed_dependency) END,
           %(after)s::bigint[], after_failure,
           CASE WHEN state = 'waiting' THEN pending ELSE 0 END
    FROM input
    RETURNING j.id, j.queue, j.state
),
edges AS (
    INSERT INTO {schema}.job_dependencies (dependency_id, job_id)
    SELECT d.id, i.id FROM deps AS d CROSS JOIN inserted AS i
    WHERE i.state = 'waiting' AND NOT d.final
),
marked AS (  -- the flag the release trigger's WHEN tests; written once per dependency
    UPDATE {schema}.jobs AS j
    SET has_dependents = true
    FROM deps AS d, inserted AS i
    WHERE j.id = d.id AND i.state = 'waiting' AND NOT d.final AND NOT j.has_dependents
),
notified AS (  -- as in jobs_insert, for a job queued at once
    SELECT pg_notify(%(channel)s, i.queue) FROM inserted AS i WHERE i.state = 'queued'
)
SELECT (SELECT id FROM inserted) AS id,
       ARRAY(SELECT a FROM unnest(%(after)s::bigint[]) AS a
             WHERE a NOT IN (SELECT id FROM deps) ORDER BY a) AS missing
FROM (SELECT count(*) FROM notified) AS force_notify;


-- name: jobs_dependencies
-- `jobs show`: the jobs this one was enqueued after, and the jobs enqueued after it
-- (their after_ids name it: by jobs_after_idx). `relation` is 'dependency' or
-- 'dependent'; a dependency pruned since shows with state and kind NULL.
SELECT 'dependency' AS relation, a.id, j.state, j.kind
FROM unnest((SELECT after_ids FROM {schema}.jobs WHERE id = %(id)s)) AS a(id)
LEFT JOIN {schema}.jobs AS j ON j.id = a.id
UNION ALL
SELECT 'dependent', j.id, j.state, j.kind
FROM {schema}.jobs AS j
WHERE j.after_ids @> ARRAY[%(id)s::bigint] AND j.after_ids IS NOT NULL
ORDER BY 1, 2;


-- name: jobs_find_live_by_unique_key
SELECT id FROM {schema}.jobs
WHERE unique_key = %(unique_key)s AND state IN ('queued', 'running');


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


-- name: claim_picks
-- Fragment of jobs_claim and jobs_complete_and_claim: the CTEs that lock the picks.
-- A paused queue is left out of the list (an anti-join on paused_queues, a table of a
-- few rows at most): its jobs are never looked at. A claim already running when a pause
-- commits does not see it; the next one does.
-- KEY PAUSES: a job whose key has a pause until later than now() (paused_keys) is passed
-- over, not locked. The test costs nothing for a job without a key, and one probe of
-- paused_keys' primary key (an empty table, or a few rows) for a job with one. While
-- any key is paused the claim's positions stay where they are (claim_meta's
-- keys_paused): the jobs passed over are behind them, and must be found when the pause
-- ends, without waiting for a sweep.
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
-- Within a level the scan is a range on run_at that stops at the first future row: a
-- million jobs scheduled for later cost nothing. The picks come from a nested loop over
-- levels sorted in claim order; the outer LIMIT stops it as soon as enough rows are
-- locked, so no row is locked that is not claimed.
queues AS (
    SELECT q.name, q.max_attempts, q.ord
    FROM unnest(%(queues)s::text[], %(queue_max_attempts)s::int[])
         WITH ORDINALITY AS q(name, max_attempts, ord)
    WHERE NOT EXISTS (SELECT FROM {schema}.paused_queues AS p WHERE p.queue = q.name)
),
levels AS (
    SELECT q.name, q.ord, l.priority,
           coalesce(l.after_run_at, '-infinity') AS after_run_at,
           coalesce(l.after_id, -1) AS after_id
    FROM unnest(%(level_queues)s::text[], %(level_priorities)s::int[],
                %(level_after_run_at)s::timestamptz[], %(level_after_id)s::bigint[])
         AS l(queue, priority, after_run_at, after_id)
    JOIN queues AS q ON q.name = l.queue
),
picked AS MATERIALIZED (
    SELECT ready.id
    FROM (SELECT * FROM levels ORDER BY ord, priority DESC) AS l
    CROSS JOIN LATERAL (
        SELECT j.id FROM {schema}.jobs AS j
        WHERE j.state = 'queued' AND j.queue = l.name AND j.priority = l.priority
          AND (j.run_at, j.id) > (l.after_run_at, l.after_id)  -- POSITIONS
          AND j.run_at <= now()
          AND (j.key IS NULL OR NOT EXISTS (  -- KEY PAUSES
                SELECT FROM {schema}.paused_keys AS pk
                WHERE pk.key = j.key AND pk.until > now()))
        ORDER BY j.run_at, j.id
        LIMIT %(limit)s
        -- SKIP LOCKED: rows another claimer is taking right now are passed over, not
        -- waited for; FOR UPDATE rechecks state = 'queued' on the newest row version,
        -- so a row claimed and committed meanwhile is never claimed twice.
        FOR UPDATE SKIP LOCKED
    ) AS ready
    LIMIT %(limit)s
)


-- name: claim_meta
-- Fragment of jobs_claim and jobs_complete_and_claim: the database clock, which moves
-- the claim positions (never a worker's clock), and which of the queues asked for were
-- paused (read in the claim's own snapshot: their levels were not scanned, so their
-- positions must not move), and whether any key was paused (KEY PAUSES: no position
-- moves then).
SELECT now() AS db_now,
       ARRAY(SELECT p.queue FROM {schema}.paused_queues AS p
             WHERE p.queue = ANY(%(queues)s::text[])) AS paused_queues,
       EXISTS (SELECT FROM {schema}.paused_keys AS pk WHERE pk.until > now()) AS keys_paused


-- name: claim_update
-- Fragment of jobs_claim and jobs_complete_and_claim: leases the picked rows.
UPDATE {schema}.jobs AS j
SET state            = 'running',
    attempt          = j.attempt + 1,          -- every start is charged
    lease_token      = gen_random_uuid(),      -- a fresh token per claim: the FENCE
    lease_expires_at = now() + make_interval(secs => %(lease_ttl_s)s),
    worker           = %(worker)s,
    started_at       = now(),
    max_attempts     = COALESCE(j.max_attempts, q.max_attempts),
    progress         = NULL,                   -- each attempt reports its own
    progress_stage   = NULL,
    progress_at      = NULL
FROM queues AS q
-- By primary key, whatever the estimates: a plan made without the limit's value (a
-- generic plan) would otherwise join the picks to a scan of the whole table.
WHERE j.id = ANY(ARRAY(SELECT picked.id FROM picked)) AND q.name = j.queue
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts,
          extract(epoch FROM j.max_runtime)::float8 AS max_runtime_s, j.run_at,
          j.created_at, j.lease_token, j.lease_expires_at, q.ord AS queue_ord, j.key,
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
FULL JOIN (SELECT coalesce((SELECT array_agg(id) FROM completed), '{{}}') AS completed_ids,
                  meta.*
           FROM ({claim_meta}) AS meta) AS done ON false;


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
    SELECT q.name, q.ord FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
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
    SELECT q.name, q.ord FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
    WHERE NOT EXISTS (SELECT FROM {schema}.paused_queues AS p WHERE p.queue = q.name)
),
levels AS (
    SELECT q.name, l.priority,
           coalesce(l.after_run_at, '-infinity') AS after_run_at,
           coalesce(l.after_id, -1) AS after_id
    FROM unnest(%(level_queues)s::text[], %(level_priorities)s::int[],
                %(level_after_run_at)s::timestamptz[], %(level_after_id)s::bigint[])
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
    result           = (%(results)s::text[])[array_position(%(ids)s::bigint[], j.id)]::jsonb,
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
           (%(discard)s OR j.attempt >= j.max_attempts) AS dead,
           COALESCE(%(delay_s)s::float8,
                    random() * least(%(backoff_max_s)s::float8,
                                     %(backoff_base_s)s::float8 * power(2, j.attempt - 1)))
               AS delay_s
    FROM {schema}.jobs AS j
    WHERE j.id = %(id)s
      AND j.lease_token = %(token)s AND j.state = 'running'  -- FENCE
    FOR UPDATE
)
{apply_failure};


-- name: jobs_rescue
-- Jobs whose lease expired (their holder crashed, froze or lost the database): the
-- start stays charged, then each is retried with backoff or dead-lettered. SKIP LOCKED
-- and the lease predicate rechecked under the row lock mean a job that is being
-- completed, or was renewed or claimed afresh meanwhile, is left alone.
WITH target AS (
    SELECT j.id, j.attempt,
           format('lease expired: worker %%s stopped renewing it during attempt %%s',
                  j.worker, j.attempt) AS error,
           j.attempt >= j.max_attempts AS dead,
           random() * least(%(backoff_max_s)s::float8,
                            %(backoff_base_s)s::float8 * power(2, j.attempt - 1)) AS delay_s
    FROM {schema}.jobs AS j
    WHERE j.state = 'running' AND j.lease_expires_at < now()
    ORDER BY j.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
{apply_failure};


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
                                j.errors || jsonb_build_array(jsonb_build_object(
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
          CASE WHEN t.dead AND j.waited_on THEN pg_notify({finished_channel}, j.id::text) END


-- name: jobs_release
-- Gives leased jobs back at once without charging the start: a graceful shutdown, or
-- jobs of a claimed batch that never started. run_at is kept, so they keep their place.
-- (Ids and tokens matched as in jobs_complete.)
UPDATE {schema}.jobs AS j
SET state            = 'queued',
    attempt          = j.attempt - 1,
    lease_token      = NULL,
    lease_expires_at = NULL,
    started_at       = NULL
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'running'  -- FENCE
RETURNING j.id;


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
    WHERE j.id = %(id)s
      AND j.lease_token = %(token)s AND j.state = 'running'  -- FENCE
    FOR UPDATE
),
paused AS (
    INSERT INTO {schema}.paused_keys AS p (key, until)
    SELECT t.key, t.run_at FROM target AS t
    WHERE %(pause_key)s AND t.key IS NOT NULL
    ON CONFLICT (key) DO UPDATE
    SET until     = greatest(p.until, EXCLUDED.until),
        paused_at = CASE WHEN p.until > now() THEN p.paused_at ELSE now() END
    RETURNING p.key
)
UPDATE {schema}.jobs AS j
SET state            = 'queued',
    attempt          = j.attempt - 1,              -- not charged
    run_at           = t.run_at,
    lease_token      = NULL,
    lease_expires_at = NULL,
    started_at       = NULL
FROM target AS t
WHERE j.id = t.id
RETURNING j.id, j.state, j.run_at, j.attempt, (SELECT count(*) FROM paused) AS keys_paused;


-- name: jobs_renew
-- Extends the leases still held. The ids missing from the result lost their lease.
UPDATE {schema}.jobs AS j
SET lease_expires_at = now() + make_interval(secs => %(lease_ttl_s)s)
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'running'  -- FENCE
RETURNING j.id;


-- name: jobs_cancel
-- Cancels waiting, queued or running jobs (a job with dependents releases them: the
-- release_dependents trigger of 0010_workflows.sql). A running job's holder loses its lease: its outcome
-- will match no row. The token stays on the row (only a running job has one: every
-- way back to queued clears it), so the holder's renewal can tell a cancel from a
-- rescue (jobs_cancelled_among).
WITH cancelled AS (
    UPDATE {schema}.jobs
    SET state            = 'cancelled',
        finished_at      = now(),
        lease_expires_at = NULL
    WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('waiting', 'queued', 'running')
    RETURNING id, lease_token,
              -- FINISHED (as in complete_update)
              CASE WHEN waited_on THEN pg_notify({finished_channel}, id::text) END
),
-- Tell the holders of the running ones now (delivered at commit), as "id:token" pairs,
-- a hundred to a notification: NOTIFY payloads are limited to 8000 bytes.
told AS (
    SELECT pg_notify(%(channel)s, string_agg(c.id || ':' || c.lease_token, ' '))
    FROM (SELECT id, lease_token, (row_number() OVER ()) / 100 AS chunk
          FROM cancelled WHERE lease_token IS NOT NULL) AS c
    GROUP BY c.chunk
)
SELECT id FROM cancelled
CROSS JOIN (SELECT count(*) FROM told) AS force_notify;  -- an unreferenced CTE never runs


-- name: jobs_cancelled_among
-- Of the leases a renewal did not find, those whose job was cancelled while they held
-- it: the holder is told to stop its handler, not killed as after a rescue.
SELECT j.id
FROM {schema}.jobs AS j
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.lease_token = ANY(%(tokens)s::uuid[]) AND j.state = 'cancelled';


-- name: jobs_retry_finished
-- Puts dead (or, by id, cancelled) jobs back in their queue to run now, with one more
-- attempt if they had used them all (attempt keeps counting every start). A job whose
-- unique_key is held by a live job meanwhile is left as it is.
UPDATE {schema}.jobs AS j
SET state        = 'queued',
    run_at       = now(),
    finished_at  = NULL,
    lease_token  = NULL,
    max_attempts = GREATEST(j.max_attempts, j.attempt + 1)
WHERE j.state = ANY(%(states)s::text[])
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
-- three finished ones: a queued or running job never matches.
-- POSITIONS, as the claim's: a round of pruning passes the oldest finished_at its
-- previous batch removed (`after`; NULL from the start of the state). While a snapshot
-- holds back vacuum, the rows a batch deleted stay in jobs_finished_idx, and a batch
-- that scanned from the start would walk past every row pruned since the snapshot
-- began, again and again. Rows that finished with an earlier finished_at and committed
-- later are found by the next round, which starts from NULL.
SELECT id FROM {schema}.jobs
WHERE state = %(state)s
  AND state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at < now() - make_interval(secs => %(retention_s)s)
  AND finished_at >= coalesce(%(after)s::timestamptz, '-infinity')  -- POSITIONS
ORDER BY finished_at
LIMIT %(limit)s
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
SELECT count(*) AS removed, max(finished_at) AS position FROM removed;


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
SELECT count(*) AS removed, max(finished_at) AS position FROM archived;


-- name: periodic_entries_register
-- Entries seen for the first time start from now: the slots before they existed are
-- not missed slots. Returns the database clock, which the caller's slots are read on.
WITH registered AS (
    INSERT INTO {schema}.periodic_entries (entry_key, last_slot_at)
    SELECT k, now() FROM unnest(%(keys)s::text[]) AS k
    ON CONFLICT (entry_key) DO NOTHING
    RETURNING entry_key
)
SELECT clock_timestamp() AS now, (SELECT count(*) FROM registered) AS new_entries;


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
    SET last_slot_at = %(slot_at)s, last_job_id = nextval(%(sequence)s::regclass),
        updated_at = now()
    WHERE entry_key = %(key)s AND last_slot_at < %(slot_at)s
    RETURNING last_job_id
),
inserted AS (
    INSERT INTO {schema}.jobs (id, queue, kind, payload, priority, run_at)
    SELECT last_job_id, %(queue)s, %(kind)s, %(payload)s::jsonb, %(priority)s, %(slot_at)s
    FROM advanced
    RETURNING id, queue
),
notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM inserted
)
SELECT id FROM inserted CROSS JOIN (SELECT count(*) FROM notified) AS force_notify;


-- name: jobs_get
SELECT * FROM {schema}.jobs WHERE id = %(id)s;


-- name: daemons_heartbeat
-- Registers a daemon or refreshes its heartbeat (database clock).
INSERT INTO {schema}.daemons AS d (id, hostname, pid, info)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(info)s::jsonb)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), info = EXCLUDED.info;


-- name: daemons_remove
DELETE FROM {schema}.daemons WHERE id = %(id)s;


-- name: daemons_prune_stale
-- Daemons that stopped without saying so (SIGKILL, host loss).
DELETE FROM {schema}.daemons
WHERE heartbeat_at < now() - make_interval(secs => %(stale_after_s)s);


-- name: migrations_lock
-- One migrator at a time per schema, across hosts; released at commit.
SELECT pg_advisory_xact_lock(hashtextextended('pgworkerd.migrate:' || %(schema_name)s, 0));


-- name: migrations_privileges
-- May the current role migrate? It must be able to create in the schema (its owner
-- can), or, when the schema does not exist yet, to create schemas in the database.
-- Asked before any DDL, so that a runtime role (USAGE only) is refused in one line.
SELECT current_user AS role,
       n.oid IS NOT NULL AS schema_exists,
       coalesce(has_schema_privilege(n.oid, 'CREATE'),
                has_database_privilege(current_database(), 'CREATE')) AS may_create
FROM (VALUES (1)) AS one (x)
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema_name)s;


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
INSERT INTO {schema}.migrations (version, name) VALUES (%(version)s, %(name)s);


-- name: migrations_table_exists
SELECT to_regclass(%(migrations_table)s) IS NOT NULL AS present;


-- name: search_path_set
SELECT set_config('search_path', %(search_path)s, true);


-- name: jobs_status_by_queue
-- The operator's `status`: per queue, the jobs in each state, the age of the oldest
-- ready job (queued, run_at passed) and the jobs finished in the last 5 minutes. One
-- pass over the table (finished rows included, until pruned): an operator's read, not
-- a hot path.
SELECT queue,
       count(*) FILTER (WHERE state = 'waiting')   AS waiting,
       count(*) FILTER (WHERE state = 'queued')    AS queued,
       count(*) FILTER (WHERE state = 'running')   AS running,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'dead')      AS dead,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE state = 'queued' AND run_at <= now()))::float8 AS oldest_ready_age_s,
       count(*) FILTER (WHERE finished_at >= now() - interval '5 minutes') AS finished_5m
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
LIMIT %(limit)s;


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
WHERE schemaname = %(schema)s AND relname = 'jobs';


-- name: queues_ready
-- The metrics' queue depth: per queue, the jobs ready to run now and the age in seconds
-- of the oldest of them (NULL: none). Sampled by the supervisor every few seconds
-- (not per scrape); a range of jobs_claim_idx per queue and priority.
SELECT q.name, count(j.id), extract(epoch FROM now() - min(j.run_at))::float8
FROM unnest(%(queues)s::text[]) AS q(name)
LEFT JOIN {schema}.jobs AS j
    ON j.queue = q.name AND j.state = 'queued' AND j.run_at <= now()
GROUP BY q.name;


-- name: queues_waiting
-- The metrics' waiting gauge: per queue, the jobs waiting for the jobs they run after;
-- by jobs_waiting_idx (0010_workflows.sql), which holds only waiting jobs.
SELECT q.name, count(j.id)
FROM unnest(%(queues)s::text[]) AS q(name)
LEFT JOIN {schema}.jobs AS j ON j.queue = q.name AND j.state = 'waiting'
GROUP BY q.name;


-- name: queues_pause
-- Pauses these queues (kept in the database until resumed): no claim takes their jobs
-- from the next one on; running jobs finish. Returns the queues that were not paused
-- already (pausing twice changes nothing, not even paused_at).
INSERT INTO {schema}.paused_queues AS p (queue)
SELECT DISTINCT q.name FROM unnest(%(queues)s::text[]) AS q(name)
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
    SELECT pg_notify(%(channel)s, resumed.queue) FROM resumed
)
SELECT resumed.queue
FROM resumed
CROSS JOIN (SELECT count(*) FROM notified) AS force_notify  -- an unreferenced CTE never runs
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
           count(*) FILTER (WHERE state = 'waiting')   AS waiting,
           count(*) FILTER (WHERE state = 'queued')    AS queued,
           count(*) FILTER (WHERE state = 'running')   AS running,
           count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE state = 'dead')      AS dead,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled
    FROM {schema}.jobs
    GROUP BY queue
),
named AS (
    SELECT c.name AS queue FROM unnest(%(configured)s::text[]) AS c(name)
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
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(percents)s::float8[], %(stages)s::text[])
     AS p(id, token, percent, stage)
WHERE j.id = p.id                                        -- by primary key
  AND j.lease_token = p.token AND j.state IN ('running', 'succeeded')  -- FENCE
RETURNING j.id;


-- name: jobs_wait_mark
-- pgworkerd.wait(), after its LISTEN: marks a job that is not final yet, so the
-- statement that makes it final announces it (FINISHED). No row: the job is final
-- already, or does not exist; the caller then reads it.
UPDATE {schema}.jobs
SET waited_on = true
WHERE id = %(id)s AND state IN ('queued', 'running')
RETURNING state;


-- name: jobs_outcome
-- A job's state and result: what pgworkerd.wait() and pgworkerd.result() return.
SELECT state, result FROM {schema}.jobs WHERE id = %(id)s;


-- name: jobs_running_progress
-- `status`: the running jobs that reported progress, longest running first (the
-- rescuer's index holds exactly the running jobs).
SELECT id, queue, kind, progress, progress_stage, progress_at, started_at
FROM {schema}.jobs
WHERE lease_expires_at IS NOT NULL AND state = 'running' AND progress IS NOT NULL
ORDER BY started_at, id
LIMIT %(limit)s;


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
WHERE kind = %(kind)s AND state = ANY(%(states)s::text[])
  AND (%(subset)s::jsonb IS NULL OR payload @> %(subset)s::jsonb)
ORDER BY id DESC
LIMIT %(limit)s;


-- name: dashboard_queues_live
-- The dashboard's reads (pgworkerd/web, storage/dashboard.py) from here on. Each answers
-- from an index range, never a pass over the whole table: the overview is polled every
-- few seconds while a browser is open. bench/web_cost.py times them and prints plans.
--
-- Queued and running jobs per queue, each from its partial index: jobs_claim_idx holds
-- only queued rows (queue and run_at are in it: an index-only scan once vacuumed), and
-- jobs_lease_expiry_idx only leased (= running, by jobs_running_is_leased) rows. Finished
-- rows, however many, are in neither.
SELECT queue, 'queued' AS state, count(*) AS n,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
           AS oldest_ready_age_s
FROM {schema}.jobs WHERE state = 'queued'
GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), NULL
FROM {schema}.jobs WHERE lease_expires_at IS NOT NULL
GROUP BY queue;


-- name: dashboard_dead_by_queue
-- Dead jobs per queue: the 'dead' range of jobs_finished_idx (state, finished_at), then
-- the heap for the queue. Dead jobs are few next to succeeded ones and wait for an
-- operator; succeeded and cancelled totals are not counted at all (see dashboard_finished_by_minute).
SELECT queue, count(*) AS n
FROM {schema}.jobs WHERE state = 'dead'
GROUP BY queue;


-- name: dashboard_finished_by_minute
-- Jobs finished in the last hour by queue, state and minute (0: the current minute):
-- the chart and the "last hour" counts. One range of jobs_finished_idx (state,
-- finished_at) per final state, then the heap for the queue. Spelled as three equalities,
-- not `state IN (...)`: with the list, PostgreSQL 15 misjudges the range and reads the
-- whole table (300 ms over a million rows instead of 60: bench/web_cost.py).
SELECT queue, state,
       floor(extract(epoch FROM now() - finished_at) / 60)::int AS minutes_ago,
       count(*) AS n
FROM (
    SELECT queue, state, finished_at FROM {schema}.jobs
    WHERE state = 'succeeded' AND finished_at > now() - make_interval(mins => %(minutes)s)
    UNION ALL
    SELECT queue, state, finished_at FROM {schema}.jobs
    WHERE state = 'dead' AND finished_at > now() - make_interval(mins => %(minutes)s)
    UNION ALL
    SELECT queue, state, finished_at FROM {schema}.jobs
    WHERE state = 'cancelled' AND finished_at > now() - make_interval(mins => %(minutes)s)
) AS finished
GROUP BY 1, 2, 3;


-- name: jobs_estimate
-- The planner's estimate of the table's rows (as of the last ANALYZE): what the overview
-- shows as "about N jobs", instead of counting them. NULL before the first ANALYZE
-- (reltuples is -1 then).
SELECT (SELECT CASE WHEN reltuples >= 0 THEN reltuples::bigint END FROM pg_class
        WHERE oid = to_regclass(%(table)s)) AS estimate;


-- name: dashboard_jobs_page
-- Newest first, one page at a time: `before` is the smallest id of the previous page
-- (keyset pagination: no OFFSET, each page is a backward range of the primary key), and
-- `floor` bounds the range: a filter that few or no rows match walks at most
-- SCAN_WINDOW ids of the key, not the whole table, and the page offers the next window.
SELECT id, queue, kind, state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, worker, last_error
FROM {schema}.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND id < %(before)s::bigint AND id >= %(floor)s::bigint
ORDER BY id DESC
LIMIT %(limit)s;


-- name: dashboard_jobs_page_by_key
-- dashboard_jobs_page, by key too (on a schema with the `key` column).
SELECT id, queue, kind, state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, worker, last_error
FROM {schema}.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND id < %(before)s::bigint AND id >= %(floor)s::bigint
  AND (%(key)s::text IS NULL OR key = %(key)s::text)
ORDER BY id DESC
LIMIT %(limit)s;


-- name: jobs_max_id
-- The newest id: the top of the first page's window (one descent of the primary key).
SELECT coalesce(max(id), 0) AS max_id FROM {schema}.jobs;


-- name: jobs_has_key_column
-- Whether the jobs table has the `key` column (flow control) the jobs page filters by.
SELECT EXISTS (
    SELECT FROM information_schema.columns
    WHERE table_schema = %(schema)s AND table_name = 'jobs' AND column_name = 'key');


-- name: keys_pause
-- Pauses a key until `until` (database clock): no claim takes a job of that key before
-- then (KEY PAUSES in claim_picks). `extend`: a pause already running longer is kept
-- (a handler's PauseKey never shortens an operator's pause); otherwise the new `until`
-- replaces it (an operator's `keys pause` means what it says). Returns the pause's end.
INSERT INTO {schema}.paused_keys AS p (key, until)
VALUES (%(key)s, %(until)s::timestamptz)
ON CONFLICT (key) DO UPDATE
SET until     = CASE WHEN %(extend)s THEN greatest(p.until, EXCLUDED.until)
                     ELSE EXCLUDED.until END,
    paused_at = CASE WHEN p.until > now() THEN p.paused_at ELSE now() END
RETURNING p.until;


-- name: keys_pause_for
-- keys_pause for `seconds` from now (database clock).
INSERT INTO {schema}.paused_keys AS p (key, until)
VALUES (%(key)s, now() + make_interval(secs => %(seconds)s))
ON CONFLICT (key) DO UPDATE
SET until     = CASE WHEN %(extend)s THEN greatest(p.until, EXCLUDED.until)
                     ELSE EXCLUDED.until END,
    paused_at = CASE WHEN p.until > now() THEN p.paused_at ELSE now() END
RETURNING p.until;


-- name: keys_resume
-- Ends a key's pause; returns whether one was running. Each queue holding queued jobs of
-- the key is announced on the enqueue channel (at commit), as queues_resume does, so
-- idle workers claim them at once. The queues are found by a pass over the queued jobs
-- (no index on key): an operator's action, not a hot path.
WITH resumed AS (
    DELETE FROM {schema}.paused_keys AS p
    WHERE p.key = %(key)s
    RETURNING p.key, p.until > now() AS was_paused
),
notified AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT j.queue FROM {schema}.jobs AS j
          WHERE j.state = 'queued' AND j.key IN (SELECT key FROM resumed)) AS q
)
SELECT coalesce(bool_or(resumed.was_paused), false) AS was_paused
FROM resumed
CROSS JOIN (SELECT count(*) FROM notified) AS force_notify;  -- an unreferenced CTE never runs


-- name: keys_list
-- The operator's `keys`: every key that a queued or running job holds, or that is
-- paused now, with its jobs running and ready (queued, run_at passed) and queued, and
-- its pause. One pass over the live jobs: an operator's read, not a hot path.
WITH counts AS (
    SELECT key,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'queued' AND run_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'queued') AS queued
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
       p.until AS paused_until,
       p.paused_at,
       extract(epoch FROM p.until - now())::float8 AS paused_for_s
FROM counts AS c
FULL JOIN paused AS p ON p.key = c.key
ORDER BY 1
LIMIT %(limit)s;
