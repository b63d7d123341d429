-- 0020: a cancellation cascade locks every job it can reach in id order, all at once,
-- before its first level. Runs with search_path set to the pgworkerd schema, inside the
-- migration transaction. The function is 0019's release_dependents(noted) but for the
-- CASCADE LOCK statement before its loop; the triggers are unchanged.
--
-- Why: the loop (0010) releases a cascade level by level, each level locked in id
-- order, but a job of the next level may have a lower id than one of this level's: a
-- cancel of R whose dependents are P1 < P2, with Q (after P1 and S) between them,
-- locked P1, P2, then Q; a worker completing S at the same moment (its release: Q then
-- P2, in id order) took Q and waited for P2: a deadlock, one of the two statements
-- rolled back (22 in 200 races, the worker's completion the victim in most; two cascades
-- crossing do the same). Now the cascade's reach is read first and locked ORDER BY id
-- in one statement, so it takes its locks in the order every other release takes them.
--
-- The recursion follows the edges from the dead or cancelled jobs through the jobs
-- the cascade cancels (waiting, after_failure 'cancel'; a job after several of them is
-- reached once: UNION), and the locks go to the waiting dependents of the noted jobs
-- and of those: the jobs the loop will lock, no others (but a job that a commit
-- between this read and the loop's made not waiting, which the loop then skips).
--
-- Cost: the failure path only (a dependency dead or cancelled); a release of jobs that
-- all succeeded takes the fast path, unchanged. CREATE OR REPLACE FUNCTION takes no
-- lock on jobs; a session that already ran the old body parses the new one at its next
-- call.
DO $do$
BEGIN
EXECUTE format($create$
CREATE OR REPLACE FUNCTION %1$I.release_dependents(noted text) RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
    told     bigint;
    outcomes bigint[] := pg_catalog.string_to_array(pg_catalog.rtrim(noted, ','), ',')::bigint[];
    heard    bigint[] := ARRAY(SELECT DISTINCT pg_catalog.abs(o.id)
                               FROM pg_catalog.unnest(outcomes) AS o(id));
    failed   bigint[] := ARRAY(SELECT -o.id FROM pg_catalog.unnest(outcomes) AS o(id)
                               WHERE o.id < 0::bigint);
BEGIN
    -- The common case: every noted dependency succeeded. Nothing can be cancelled, so
    -- nothing cascades: one statement, without the loop's cancellation branches. A
    -- dependent may have an edge from several of them (n).
    IF pg_catalog.cardinality(failed) = 0 THEN
        WITH edges AS (
            DELETE FROM %1$I.job_dependencies AS d
            WHERE d.dependency_id = ANY(heard)
            RETURNING d.job_id
        ),
        per_job AS (
            SELECT e.job_id, pg_catalog.count(*)::int AS n
            FROM edges AS e
            GROUP BY e.job_id
        ),
        -- Locked in id order, all of this statement's dependents at once: two outcome
        -- statements that share dependents cannot deadlock. Found by primary key, as
        -- in the loop below.
        locked AS (
            SELECT j.id, p.n
            FROM per_job AS p
            JOIN %1$I.jobs AS j ON j.id = p.job_id
            WHERE j.id = ANY(ARRAY(SELECT job_id FROM per_job)) AND j.state = 'waiting'
            ORDER BY j.id
            FOR UPDATE OF j
        ),
        moved AS (
            UPDATE %1$I.jobs AS j
            SET deps_pending = j.deps_pending - l.n,
                state = CASE WHEN j.deps_pending <= l.n THEN 'queued' ELSE 'waiting' END,
                run_at = CASE WHEN j.deps_pending <= l.n
                              THEN greatest(j.run_at, pg_catalog.now())
                              ELSE j.run_at END
            FROM locked AS l
            WHERE j.id = l.id AND j.state = 'waiting'
            RETURNING j.queue, j.state
        )
        SELECT pg_catalog.count(*) INTO told  -- as below: wake a worker of each queue that got a job
        FROM (SELECT pg_catalog.pg_notify(%2$L, q.queue)
              FROM (SELECT DISTINCT m.queue FROM moved AS m WHERE m.state = 'queued') AS q
             ) AS n;
        RETURN;
    END IF;
    -- CASCADE LOCK: every job the cascade below can reach, locked here in id order, all at
    -- once, before any of its levels (0020). The loop visits them level by level, each
    -- level in id order: a level's job of a higher id than one of the next level's was
    -- locked first, and a release or another cascade that needed both (in id order)
    -- deadlocked with it (tests/integration/test_workflow_lock_order.py). Reached: the
    -- waiting dependents of every noted job, and, through the ones this cascade cancels
    -- (after_failure 'cancel', waiting, their dependency dead or cancelled), theirs, to
    -- any depth. Read without a lock (this statement's snapshot); the loop then takes
    -- each again, at no wait. A dependent a producer added after this read (its edge
    -- committed while this waited here) is locked at its level, as before 0020.
    -- The failure path only: the fast path above is one level, already in id order.
    PERFORM
    FROM %1$I.jobs AS j
    WHERE j.id = ANY(ARRAY(
        -- The jobs this cascade cancels: waiting, after_failure 'cancel', after a job
        -- dead or cancelled (noted, or cancelled here). Each edge is followed by primary
        -- key, each job read by primary key (the LATERAL runs once per job: OFFSET 0
        -- keeps it from being pulled up into a join planned on a guess).
        WITH RECURSIVE doomed AS (
            SELECT c.id
            FROM %1$I.jobs AS c
            WHERE c.id = ANY(ARRAY(SELECT d.job_id FROM %1$I.job_dependencies AS d
                                   WHERE d.dependency_id = ANY(failed)))
              AND c.state = 'waiting' AND c.after_failure::text = 'cancel'
          UNION
            SELECT n.id
            FROM doomed AS o
            CROSS JOIN LATERAL (
                SELECT c.id
                FROM %1$I.job_dependencies AS d
                JOIN %1$I.jobs AS c ON c.id = d.job_id
                WHERE d.dependency_id = o.id
                  AND c.state = 'waiting' AND c.after_failure::text = 'cancel'
                OFFSET 0
            ) AS n
        )
        -- Their dependents and the noted jobs' (counted down, or cancelled in turn).
        SELECT d.job_id FROM %1$I.job_dependencies AS d WHERE d.dependency_id = ANY(heard)
        UNION
        SELECT d.job_id FROM %1$I.job_dependencies AS d
        WHERE d.dependency_id = ANY(ARRAY(SELECT o.id FROM doomed AS o))
    ))
      AND j.state = 'waiting'
    ORDER BY j.id
    FOR UPDATE OF j;
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
END
$fn$;
$create$, current_schema(), current_schema() || '.jobs', current_schema() || '.finished');
END
$do$;
