-- 0010: workflows (issue 22): jobs that wait for other jobs.
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
-- (0010: other branches add 0007-0009; migrate applies every missing version.)
-- The new columns are NULL or have a constant default: catalog-only, no table rewrite.
-- The state constraint is re-added NOT VALID, then validated (one pass over the table,
-- under the lock the ALTERs already hold; see docs/deploy.md on upgrading).

-- `waiting`: for the jobs it depends on. Not in jobs_claim_idx (state = 'queued'), so
-- no claim ever reads it.
ALTER TABLE jobs DROP CONSTRAINT jobs_state_valid;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_valid
    CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'dead', 'cancelled'))
    NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_state_valid;

-- The ids the job was enqueued `after` (NULL: none), kept for `job.after` and `jobs
-- show`; what happens when one of them ends dead or cancelled; how many of them are not
-- final yet (counted down by release_dependents, in the transaction of each outcome).
ALTER TABLE jobs ADD COLUMN after_ids bigint[];
ALTER TABLE jobs ADD COLUMN after_failure text;
ALTER TABLE jobs ADD COLUMN deps_pending integer NOT NULL DEFAULT 0;
-- Set (once) by the insert of a dependent while this job was not final: the trigger's
-- WHEN tests it first, so the outcome of a job without dependents costs one boolean.
ALTER TABLE jobs ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD CONSTRAINT jobs_after_failure_valid
    CHECK (after_failure IS NULL OR after_failure IN ('cancel', 'run'));
ALTER TABLE jobs_archive ADD COLUMN after_ids bigint[];
ALTER TABLE jobs_archive ADD COLUMN after_failure text;

-- The edges not yet heard: (dependency, dependent) while the dependency is not final.
-- Deleted in the transaction that makes the dependency final, so a final job has no
-- edge left here and retention may prune it (nothing still needs to hear about it).
-- Keyed by the dependency first: a release reads exactly its own edges, by index.
CREATE TABLE job_dependencies (
    dependency_id bigint NOT NULL,
    job_id        bigint NOT NULL,
    PRIMARY KEY (dependency_id, job_id)
);
-- The metrics' waiting gauge (queues_waiting): only waiting jobs are in it.
CREATE INDEX jobs_waiting_idx ON jobs (queue) WHERE state = 'waiting';

-- `jobs show`: a job's dependents, by the ids they were enqueued after. Partial: a job
-- enqueued without `after` is not in it (the insert of a plain job tests a NULL).
CREATE INDEX jobs_after_idx ON jobs USING gin (after_ids) WHERE after_ids IS NOT NULL;

-- The release: when a job with dependents becomes final, in the same statement (an
-- AFTER ROW trigger fires at the end of the statement that made the change, inside its
-- transaction), its edges are deleted and each dependent is counted down: `queued`
-- (run_at = now() at the earliest: ahead of every claim position) when its count
-- reaches zero, or `cancelled` when this dependency ended dead or cancelled and it was
-- enqueued with after_failure = 'cancel'. A dependent cancelled so has its own
-- dependents released in the same call, level by level in a loop (the trigger does not
-- fire again for the rows it updates itself: pg_trigger_depth() = 0 in its WHEN), so a
-- chain of any length costs no stack.
-- Every outcome statement (complete, fail, rescue, cancel, the testing helpers) is a
-- fenced UPDATE of the job: the trigger is part of it, so the release commits with the
-- outcome, exactly once, or not at all.
-- Created by a DO block that writes this schema's name into the body: the statements
-- name their tables fully (no search_path is pinned on the function, so a trigger of the
-- user's that fires inside it resolves its own names as usual) and stay static, so
-- PL/pgSQL plans them once per session, not once per release.
DO $do$
BEGIN
EXECUTE format($create$
CREATE FUNCTION %1$I.release_dependents() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
DECLARE
    heard  bigint[] := ARRAY[NEW.id];
    failed bigint[] := CASE WHEN NEW.state = 'succeeded' THEN '{}'::bigint[]
                            ELSE ARRAY[NEW.id] END;
BEGIN
    WHILE cardinality(heard) > 0 LOOP
        WITH edges AS (
            DELETE FROM %1$I.job_dependencies AS d
            WHERE d.dependency_id = ANY(heard)
            RETURNING d.job_id, d.dependency_id, d.dependency_id = ANY(failed) AS failed
        ),
        per_job AS (
            SELECT e.job_id, count(*)::int AS n,
                   min(e.dependency_id) FILTER (WHERE e.failed) AS failed_dependency
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
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure = 'cancel'
                        THEN 'cancelled'
                    WHEN j.deps_pending <= l.n THEN 'queued'
                    ELSE 'waiting' END,
                run_at = CASE
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure = 'cancel'
                        THEN j.run_at
                    WHEN j.deps_pending <= l.n THEN greatest(j.run_at, now())
                    ELSE j.run_at END,
                finished_at = CASE
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure = 'cancel'
                        THEN now() END,
                last_error = CASE
                    WHEN l.failed_dependency IS NOT NULL AND j.after_failure = 'cancel'
                        THEN format('cancelled: job %%s, which it was to run after, ended '
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
            SELECT pg_notify(%2$L, q.queue)
            FROM (SELECT DISTINCT m.queue FROM moved AS m WHERE m.state = 'queued') AS q
            UNION ALL
            SELECT pg_notify(%3$L, m.id::text)
            FROM moved AS m WHERE m.state = 'cancelled' AND m.waited_on
        )
        SELECT coalesce(array_agg(m.id) FILTER (WHERE m.state = 'cancelled'
                                                 AND m.has_dependents), '{}')
        INTO heard
        FROM moved AS m
        CROSS JOIN (SELECT count(*) FROM told) AS force_notify;
        failed := heard;  -- the next level: only cancelled dependents carry on
    END LOOP;
    RETURN NULL;
END
$fn$
$create$, current_schema(), current_schema() || '.jobs', current_schema() || '.finished');
END
$do$;

-- WHEN: evaluated per updated row before anything is queued; false for every job that
-- never had a dependent (has_dependents first), so the hot paths pay a boolean test.
CREATE TRIGGER jobs_release_dependents
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents
          AND NEW.state IN ('succeeded', 'dead', 'cancelled')
          AND OLD.state NOT IN ('succeeded', 'dead', 'cancelled')
          AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION release_dependents();
