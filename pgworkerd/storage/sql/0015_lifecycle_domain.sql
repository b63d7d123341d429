-- 0015: the last three CHECK constraints of jobs (jobs_state_valid, jobs_running_is_leased,
-- jobs_final_has_finished_at) move into one domain over a row of the four columns they
-- read, under the same names and predicates; the table keeps one short CHECK that casts
-- those columns to the domain (issue 23, bench/results/enqueue-one-round6-20261127.md).
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
--
-- Why: PostgreSQL 15 reads every table CHECK back from its stored text (stringToNode)
-- and plans it at every INSERT and UPDATE statement; a domain's CHECKs are read and
-- planned once per session (typcache.c), as 0013 found. The three trees were 2,954
-- bytes of node text: callgrind counts 117,000 instructions a statement for them, 40 %
-- of an INSERT of one job into jobs (the raw loop's whole INSERT is 74,000). The cast
-- below is 826 bytes, and the three predicates are evaluated from the type cache. Two
-- of them read two columns, so no column's own domain can hold them (0013 left them);
-- a domain over a composite type sees every field of its value.
--
-- What is refused is what was refused: casting a row value to job_lifecycle_checked
-- tests each of its CHECKs (passing on true or NULL, as a table CHECK does), with the
-- fields being the columns themselves, and raises check_violation under the
-- constraint's own name (what a client reads in the error's constraint_name; the
-- message names the domain instead of the table). Otherwise the cast is the row value,
-- whose `state` is the column, NOT NULL (tested before any CHECK): the table's CHECK
-- is then true. It runs at every INSERT and UPDATE of a row, as the three did: a
-- table CHECK is not skipped when its columns are left alone. When several fail, the
-- first by name is reported, as before (both lists are sorted by name).
--
-- Cost: catalog changes only. The new table CHECK is added NOT VALID: no pass over the
-- rows, which the three constraints dropped in this same transaction had held to the
-- same predicates; new and updated rows are tested all the same. ALTER TABLE takes an
-- ACCESS EXCLUSIVE lock on jobs until the migration commits (docs/deploy.md).
CREATE TYPE job_lifecycle AS (
    state            text,
    finished_at      timestamptz,
    lease_expires_at timestamptz,
    lease_token      uuid
);

-- The predicates of 0012 (and 0001's jobs_running_is_leased), each column read as a
-- field of VALUE.
CREATE DOMAIN job_lifecycle_checked AS job_lifecycle
    CONSTRAINT jobs_state_valid
        CHECK ((VALUE).state = ANY ('{waiting,queued,running,succeeded,dead,cancelled}'::text[]))
    CONSTRAINT jobs_running_is_leased
        CHECK (((VALUE).state = 'running') = ((VALUE).lease_expires_at IS NOT NULL)
               AND ((VALUE).state <> 'running' OR (VALUE).lease_token IS NOT NULL))
    CONSTRAINT jobs_final_has_finished_at
        CHECK (((VALUE).state = ANY ('{succeeded,dead,cancelled}'::text[]))
               = ((VALUE).finished_at IS NOT NULL));

ALTER TABLE jobs
    DROP CONSTRAINT jobs_state_valid,
    DROP CONSTRAINT jobs_running_is_leased,
    DROP CONSTRAINT jobs_final_has_finished_at,
    ADD CONSTRAINT jobs_lifecycle_valid
        CHECK ((ROW(state, finished_at, lease_expires_at, lease_token)::job_lifecycle_checked)
               .state IS NOT NULL)
        NOT VALID;
