-- 0013: six single-column CHECK constraints of jobs move into domains, under the same
-- names and predicates (issue 23, bench/results/enqueue-one-round2-20261124.md).
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
--
-- Why: PostgreSQL 15 rebuilds a table's CHECK expressions at every INSERT and UPDATE
-- statement (ExecRelCheck: stringToNode of the stored tree, then expression_planner,
-- in the statement's memory), while a domain's CHECK expressions are read and planned
-- once per session and kept in its type cache (typcache.c, load_domaintype_info). Every
-- enqueue, claim and outcome paid for the nine trees; three are left on the table.
--
-- What each domain refuses is what its table CHECK refused: a domain's CHECK is tested
-- whenever a value is stored into the column from any other type (INSERT, UPDATE SET,
-- a default, COPY), and passes on true or NULL, as a table CHECK does; a value that is
-- not stored (an UPDATE that leaves the column alone) was tested when it was.
-- information_schema.columns still gives the base types, and PostgreSQL sends clients
-- the base type's OID for a domain column: readers see the same columns.
--
-- Left on the table: jobs_state_valid (state is in the predicates of seven partial
-- indexes and in the WHEN of jobs_release_dependents: changing its type would rebuild
-- them all), and the two that read two columns (a domain sees one value).
--
-- Cost: catalog changes only. The domains are created without their constraints, so
-- that ALTER COLUMN TYPE to a domain over the same base type neither rewrites the
-- table (it would, to a domain with constraints) nor rebuilds an index (no index reads
-- these columns); the constraints are then added NOT VALID: no pass over the rows,
-- which the table CHECKs dropped in this same transaction had held to the same
-- predicates. New values are tested all the same. ALTER TABLE takes an ACCESS EXCLUSIVE
-- lock on jobs until the migration commits (docs/deploy.md); ALTER COLUMN TYPE drops
-- the six columns' planner statistics until the next ANALYZE (autovacuum's).
CREATE DOMAIN job_attempt AS integer;
CREATE DOMAIN job_max_attempts AS integer;
CREATE DOMAIN job_max_runtime AS interval;
CREATE DOMAIN job_errors AS jsonb;
CREATE DOMAIN job_progress AS double precision;
CREATE DOMAIN job_after_failure AS text;

ALTER TABLE jobs
    DROP CONSTRAINT jobs_attempt_valid,
    DROP CONSTRAINT jobs_max_attempts_valid,
    DROP CONSTRAINT jobs_max_runtime_valid,
    DROP CONSTRAINT jobs_errors_is_array,
    DROP CONSTRAINT jobs_progress_valid,
    DROP CONSTRAINT jobs_after_failure_valid,
    ALTER COLUMN attempt TYPE job_attempt,
    ALTER COLUMN max_attempts TYPE job_max_attempts,
    ALTER COLUMN max_runtime TYPE job_max_runtime,
    ALTER COLUMN errors TYPE job_errors,
    ALTER COLUMN progress TYPE job_progress,
    ALTER COLUMN after_failure TYPE job_after_failure;

ALTER DOMAIN job_attempt ADD CONSTRAINT jobs_attempt_valid CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN job_max_attempts
    ADD CONSTRAINT jobs_max_attempts_valid CHECK (VALUE >= 1) NOT VALID;
ALTER DOMAIN job_max_runtime
    ADD CONSTRAINT jobs_max_runtime_valid CHECK (VALUE > interval '0') NOT VALID;
ALTER DOMAIN job_errors
    ADD CONSTRAINT jobs_errors_is_array CHECK (jsonb_typeof(VALUE) = 'array') NOT VALID;
ALTER DOMAIN job_progress
    ADD CONSTRAINT jobs_progress_valid CHECK (VALUE >= 0 AND VALUE <= 100) NOT VALID;
ALTER DOMAIN job_after_failure
    ADD CONSTRAINT jobs_after_failure_valid CHECK (VALUE = ANY ('{cancel,run}'::text[]))
    NOT VALID;
