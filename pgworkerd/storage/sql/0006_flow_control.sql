-- 0006: flow control (issue 19): a job's key.
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
-- (0006, not 0005: another branch adds 0005; migrate applies every missing version.)
-- Every column is new and NULL: a catalog-only change, no table rewrite, no scan. Each
-- ALTER TABLE takes an ACCESS EXCLUSIVE lock on its table until the migration commits
-- (see docs/deploy.md, "Upgrading, with migrations"): milliseconds, once no transaction that
-- reads the table is in the way.

-- A job's key ("tenant:42"): its unit of key pauses (and, later, of per-key limits and
-- fair turns). NULL: a job without a key.
ALTER TABLE jobs ADD COLUMN key text;
ALTER TABLE jobs_archive ADD COLUMN key text;

-- A key is paused while it has a row here whose `until` is in the future (database
-- clock): no claim takes a job of that key (claim_picks' anti-join). A row whose
-- `until` has passed is inert (a pause that ended) and is replaced by the next pause
-- or deleted by a resume. A table of its own, as paused_queues: empty, or a few rows,
-- almost always.
CREATE TABLE paused_keys (
    key        text        PRIMARY KEY,
    until      timestamptz NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now()
);
