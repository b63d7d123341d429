-- 0004: a running job's progress, and the mark that someone waits for a job's end.
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
-- Every column is new and NULL or a constant default: no table rewrite.

-- What the handler last reported through job.progress(percent, stage): written by the
-- job's holder only (fenced by its lease token), cleared by each claim.
ALTER TABLE jobs ADD COLUMN progress       double precision;
ALTER TABLE jobs ADD COLUMN progress_stage text;
ALTER TABLE jobs ADD COLUMN progress_at    timestamptz;
-- NOT VALID: the column is NULL in every existing row, so checking them would only scan
-- the whole table under this migration's exclusive lock; new writes are checked all the
-- same.
ALTER TABLE jobs ADD CONSTRAINT jobs_progress_valid
    CHECK (progress IS NULL OR (progress >= 0 AND progress <= 100)) NOT VALID;

-- Set by pgworkerd.wait() on a job that is not final yet: only the statements that make
-- such a job final send a notification, so a job nobody waits for costs no NOTIFY.
ALTER TABLE jobs ADD COLUMN waited_on boolean NOT NULL DEFAULT false;

-- Archived jobs (retention.archive, 0003) keep the last progress their handler reported.
ALTER TABLE jobs_archive ADD COLUMN progress       double precision;
ALTER TABLE jobs_archive ADD COLUMN progress_stage text;
ALTER TABLE jobs_archive ADD COLUMN progress_at    timestamptz;
