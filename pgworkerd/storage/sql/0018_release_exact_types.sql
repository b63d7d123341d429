-- 0018: the dependents' release (0016) compares after_failure as text. Runs with
-- search_path set to the pgworkerd schema, inside the migration transaction. The
-- function is 0016's but for `j.after_failure::text = 'cancel'`; the trigger is
-- unchanged.
--
-- Why: 0016 named every built-in function the body calls by pg_catalog, but an
-- operator is looked up along the session's search_path too, and after_failure is of
-- the domain job_after_failure (0013): `j.after_failure = 'cancel'` matched the
-- built-in text = text only through the domain's coercion to text, so an operator
-- `=(job_after_failure, job_after_failure)` in any schema of the firing session's path
-- (public, where every role could create before PostgreSQL 15) would have run instead,
-- as the role completing the job. The cast makes the built-in an exact match, which
-- no later schema can hide (tests/integration/test_name_resolution.py reads the body's
-- parse trees).
--
-- Cost: CREATE OR REPLACE FUNCTION takes no lock on jobs; a session that already ran
-- the old body (a worker) parses the new one at its next call.
DO $do$
BEGIN
EXECUTE format($create$
CREATE OR REPLACE FUNCTION %1$I.release_dependents() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
DECLARE
    told   bigint;
    heard  bigint[] := ARRAY[NEW.id];
    failed bigint[] := CASE WHEN NEW.state = 'succeeded' THEN '{}'::bigint[]
                            ELSE ARRAY[NEW.id] END;
BEGIN
    -- The common case: a dependency that succeeded. Each of its dependents has exactly
    -- one edge from it (the primary key), none can be cancelled, so nothing cascades: one
    -- statement, without the loop's grouping, locking CTE and cancellation branches.
    -- The dependents are updated by primary key, visited in id order (an index scan of
    -- `= ANY` takes the sorted keys in turn), so two releases that share dependents
    -- lock them in the same order.
    IF NEW.state = 'succeeded' THEN
        WITH edges AS (
            DELETE FROM %1$I.job_dependencies AS d
            WHERE d.dependency_id = NEW.id
            RETURNING d.job_id
        ),
        moved AS (
            UPDATE %1$I.jobs AS j
            SET deps_pending = j.deps_pending - 1,
                state = CASE WHEN j.deps_pending <= 1 THEN 'queued' ELSE 'waiting' END,
                run_at = CASE WHEN j.deps_pending <= 1 THEN greatest(j.run_at, pg_catalog.now())
                              ELSE j.run_at END
            WHERE j.id = ANY(ARRAY(SELECT e.job_id FROM edges AS e)) AND j.state = 'waiting'
            RETURNING j.queue, j.state
        )
        SELECT pg_catalog.count(*) INTO told  -- as below: wake a worker of each queue that got a job
        FROM (SELECT pg_catalog.pg_notify(%2$L, q.queue)
              FROM (SELECT DISTINCT m.queue FROM moved AS m WHERE m.state = 'queued') AS q
             ) AS n;
        RETURN NULL;
    END IF;
    WHILE pg_catalog.cardinality(heard) > 0 LOOP
        WITH edges AS (
            DELETE FROM %1$I.job_dependencies AS d
            WHERE d.dependency_id = ANY(heard)
            RETURNING d.job_id, d.dependency_id, d.dependency_id = ANY(failed) AS failed
        ),
        per_job AS (
            SELECT e.job_id, pg_catalog.count(*)::int AS n,
                   pg_catalog.min(e.dependency_id) FILTER (WHERE e.failed) AS failed_dependency
            FROM edges AS e
            GROUP BY e.job_id
        ),
        -- Locked in id order: two outcomes that share dependents cannot deadlock. The
        -- jobs are found by primary key, whatever the estimates (as claim_update finds
        -- its picks): a plan made without knowing how many edges there are would
        -- otherwise join them to a scan of the whole table.
        locked AS (
            SELECT j.id, p.n, p.failed_dependency
            FROM per_job AS p
            JOIN %1$I.jobs AS j ON j.id = p.job_id
            WHERE j.id = ANY(ARRAY(SELECT job_id FROM per_job)) AND j.state = 'waiting'
            ORDER BY j.id
            FOR UPDATE OF j
        ),
        moved AS (
            UPDATE %1$I.jobs AS j
            SET deps_pending = j.deps_pending - l.n,
                state = CASE
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure::text = 'cancel'
                        THEN 'cancelled'
                    WHEN j.deps_pending <= l.n THEN 'queued'
                    ELSE 'waiting' END,
                run_at = CASE
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure::text = 'cancel'
                        THEN j.run_at
                    WHEN j.deps_pending <= l.n THEN greatest(j.run_at, pg_catalog.now())
                    ELSE j.run_at END,
                finished_at = CASE
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure::text = 'cancel'
                        THEN pg_catalog.now() END,
                last_error = CASE
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure::text = 'cancel'
                        THEN pg_catalog.format('cancelled: job %%s, which it was to run after, ended '
                                    'dead or cancelled', l.failed_dependency)
                    ELSE j.last_error END
            FROM locked AS l
            -- j.id = l.id alone: each locked row finds its job by primary key. (An
            -- `= ANY(ARRAY(...))` here, as in `locked`, would be scanned once per row.)
            WHERE j.id = l.id AND j.state = 'waiting'
            RETURNING j.id, j.state, j.queue, j.has_dependents, j.waited_on
        ),
        -- Wake a worker of each queue that got a job (as jobs_insert does), and announce
        -- the cancelled ones that pgworkerd.wait() waits for (FINISHED).
        told AS (
            SELECT pg_catalog.pg_notify(%2$L, q.queue)
            FROM (SELECT DISTINCT m.queue FROM moved AS m WHERE m.state = 'queued') AS q
            UNION ALL
            SELECT pg_catalog.pg_notify(%3$L, m.id::text)
            FROM moved AS m WHERE m.state = 'cancelled' AND m.waited_on
        )
        SELECT coalesce(pg_catalog.array_agg(m.id) FILTER (WHERE m.state = 'cancelled'
                                                 AND m.has_dependents), '{}')
        INTO heard
        FROM moved AS m
        CROSS JOIN (SELECT pg_catalog.count(*) FROM told) AS force_notify;
        failed := heard;  -- the next level: only cancelled dependents carry on
    END LOOP;
    RETURN NULL;
END
$fn$
$create$, current_schema(), current_schema() || '.jobs', current_schema() || '.finished');
END
$do$;
