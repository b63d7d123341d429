-- 0019: the dependents' release locks the dependents of one statement's outcomes in id
-- order, all of them, at the end of that statement. Runs with search_path set to the
-- pgworkerd schema, inside the migration transaction.
--
-- Why: the release was an AFTER ROW trigger (0010), and each call locked the dependents
-- of its one dependency in id order; but an outcome statement makes many jobs final
-- (jobs_complete and jobs_complete_and_claim a batch, the rescue, a cancel of many ids)
-- and the trigger fired once per row, so two statements completing {A, B} and {C, D},
-- where A and D share a dependent X and B and C share a dependent Y, locked X then Y
-- and Y then X: a deadlock, one completion rolled back, its worker's batch run again
-- (review 25 F3: 59 deadlocks in 3,000 dependents of 600 no-op jobs, two daemons,
-- lease_ttl 3 s; tests/integration/test_workflow_release_order.py makes one).
--
-- Now the row trigger (same name, same WHEN: a job without dependents still costs a
-- boolean test) only notes the job that became final, in a setting local to the
-- transaction (its id, negated when it ended dead or cancelled). A statement-level
-- trigger, which fires after every row trigger of its statement, releases all the
-- noted jobs in one call of release_dependents(noted): one statement deletes their
-- edges and locks every dependent still waiting ORDER BY id before counting it down, so
-- two outcome statements that share dependents take those locks in the same order and
-- one waits for the other, never both for each other. The release is still made by the
-- statement that made its dependencies final, inside its transaction (exactly once or
-- not at all, as before). Not a transition table (REFERENCING NEW TABLE): PostgreSQL
-- would then copy every row of every UPDATE of jobs (each claim, renewal, completion)
-- into it, for the few rows with dependents.
-- Kept from 0010/0018: the release of dead and cancelled dependencies cascades level by
-- level in a loop (each level locked in id order; a cascade is a failure path), and the
-- nested UPDATEs of the release fire neither trigger (pg_trigger_depth()).
-- The setting's name is a constant of the schema (its name in hex, written into the
-- bodies), so two pgworkerd schemas in one transaction keep their own lists. A statement that makes more than ~2,000 jobs with
-- dependents final at once (a cancel of a whole workflow) releases them in chunks of
-- that size, each in id order: the list is copied at each note, and one list would cost
-- its length squared.
--
-- Cost: DROP TRIGGER and CREATE TRIGGER take a SHARE ROW EXCLUSIVE lock on jobs until
-- the migration commits (catalog changes only, no row read), after waiting for the
-- transactions that hold a lock on jobs; claims, outcomes and enqueues wait meanwhile.
-- Every UPDATE of jobs that sets state (claims, outcomes) now also calls release_noted()
-- once per statement, which reads one setting and returns when nothing was noted.
-- Daemons of the previous release run unchanged statements: nothing to do but migrate.
DO $do$
BEGIN
EXECUTE format($create$
CREATE FUNCTION %1$I.release_dependents(noted text) RETURNS void
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

-- The row trigger's function: notes NEW (the WHEN of jobs_release_dependents chose it).
CREATE FUNCTION %1$I.note_outcome() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
DECLARE
    noted text := coalesce(pg_catalog.current_setting(%4$L, true), '')
                  || CASE WHEN NEW.state = 'succeeded' THEN '' ELSE '-' END
                  || NEW.id::text || ',';
BEGIN
    IF pg_catalog.length(noted) < 16384 THEN
        PERFORM pg_catalog.set_config(%4$L, noted, true);  -- true: until the transaction ends
    ELSE  -- chunks, not one list copied at every note (above)
        PERFORM pg_catalog.set_config(%4$L, '', true);
        PERFORM %1$I.release_dependents(noted);
    END IF;
    RETURN NULL;
END
$fn$;

-- The statement trigger's function: releases what the statement's rows noted. Called
-- for every statement that sets state (claims too): one test of the setting, then out.
CREATE FUNCTION %1$I.release_noted() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
DECLARE
    noted text;
BEGIN
    IF coalesce(pg_catalog.current_setting(%4$L, true), '') = '' THEN
        RETURN NULL;
    END IF;
    noted := pg_catalog.current_setting(%4$L);
    PERFORM pg_catalog.set_config(%4$L, '', true);
    PERFORM %1$I.release_dependents(noted);
    RETURN NULL;
END
$fn$;
$create$, current_schema(), current_schema() || '.jobs', current_schema() || '.finished',
   -- the setting's name: a constant of this schema, its name in hex (a setting's name
   -- takes letters, digits and underscores; md5() is refused on a FIPS build)
   'pgworkerd.released_' || pg_catalog.encode(pg_catalog.convert_to(current_schema(), 'UTF8'), 'hex'));
END
$do$;

DROP TRIGGER jobs_release_dependents ON jobs;
DROP FUNCTION release_dependents();
-- As 0010's: false for every job that never had a dependent (has_dependents first).
CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents
          AND NEW.state IN ('succeeded', 'dead', 'cancelled')
          AND OLD.state NOT IN ('succeeded', 'dead', 'cancelled')
          AND pg_catalog.pg_trigger_depth() = 0)
    EXECUTE FUNCTION note_outcome();
-- Fires once per statement that sets state (the same statements as the row trigger),
-- after its row triggers; not for the release's own UPDATEs (depth), as the row trigger.
CREATE TRIGGER jobs_release_noted
    AFTER UPDATE OF state ON jobs
    FOR EACH STATEMENT
    WHEN (pg_catalog.pg_trigger_depth() = 0)
    EXECUTE FUNCTION release_noted();
