-- pgworkerd's two database roles (docs/deploy.md, "Least privilege"):
--   pgworkerd_owner    owns the schema and everything in it; runs `pgworkerd migrate`.
--   pgworkerd_runtime  what daemons, producers and the operator's commands need: USAGE
--                      on the schema, SELECT/INSERT/UPDATE/DELETE on its tables, USAGE
--                      on its sequences. Nothing else: no DDL, no TRUNCATE, no other
--                      schema. It cannot migrate (`pgworkerd migrate` refuses it).
--
-- Run with psql as a superuser (or a role with CREATEROLE that may grant on the
-- database), connected to the application's database:
--   psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -f deploy/sql/roles.sql
-- Other names: -v schema=jobs -v owner=jobs_owner -v runtime=jobs_runtime.
-- Passwords are never in this file: set them afterwards, e.g. in psql
--   \password pgworkerd_owner
--   \password pgworkerd_runtime
--
-- Idempotent: run it before the first `pgworkerd migrate` (the schema must be the
-- owner's before the owner can migrate), and again at any time. Tables and sequences
-- that later migrations create, as the owner, are covered by the default privileges
-- below: nothing to re-run after an upgrade. Running it again after the first migrate
-- makes the migrations table read-only for the runtime role (it only needs to read
-- the schema version).

\if :{?schema}
\else
  \set schema pgworkerd
\endif
\if :{?owner}
\else
  \set owner pgworkerd_owner
\endif
\if :{?runtime}
\else
  \set runtime pgworkerd_runtime
\endif

SELECT format('CREATE ROLE %I LOGIN', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'runtime')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'runtime') \gexec

SELECT format('GRANT CONNECT ON DATABASE %I TO %I, %I', current_database(), :'owner', :'runtime') \gexec

-- Created here, owned by the owner role: it needs no CREATE on the database.
CREATE SCHEMA IF NOT EXISTS :"schema" AUTHORIZATION :"owner";

GRANT USAGE ON SCHEMA :"schema" TO :"runtime";

-- What exists now ...
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA :"schema" TO :"runtime";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA :"schema" TO :"runtime";

-- ... and what the owner's migrations create later (enqueue draws job ids from the
-- jobs table's identity sequence: USAGE on sequences).
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema"
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"runtime";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema"
    GRANT USAGE, SELECT ON SEQUENCES TO :"runtime";

-- `pgworkerd status`, /metrics and /readyz name the transaction that holds back vacuum
-- (pg_stat_activity): without this, the sessions of other roles show no xmin. It also
-- lets the role read other sessions' query texts; leave it out where that matters.
SELECT format('GRANT pg_read_all_stats TO %I', :'runtime') \gexec

-- The schema version is read at every daemon start; only migrations write it.
SELECT format('REVOKE INSERT, UPDATE, DELETE ON %I.migrations FROM %I', :'schema', :'runtime')
WHERE to_regclass(format('%I.migrations', :'schema')) IS NOT NULL \gexec
