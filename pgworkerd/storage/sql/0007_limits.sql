-- 0007: flow-control limits (issue 19): queue and per-key concurrency and rate.
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
-- (0007: 0008 and 0009 are other branches'; migrate applies every missing version.)

-- Concurrency is derived from the running rows themselves, never from a counter. No
-- index of its own: a limited claim counts them in one pass over jobs_lease_expiry_idx
-- (0001), whose entries are the fleet's running jobs however big the table (RUNNING in
-- jobs_claim_limited). An index on running rows by (queue, key) would get an entry at
-- every claim and renewal of every queue, limited or not (no such update is HOT: each
-- changes state or lease_expires_at), to serve the limited claims alone.

-- The starts ledger of rate-limited queues: one row per start, written by the claim
-- in its own transaction (a rollback or a crash undoes both), deleted by a Snooze or
-- PauseKey in its fenced statement (that start is given back), and by later claims once
-- older than the queue's period. `at` is the claim statement's time, taken after the
-- queue's lock (storage/limits.py): monotonic across claims of the queue. Keyed by the
-- claim's lease token, drawn afresh for every claim.
CREATE TABLE starts (
    lease_token uuid        PRIMARY KEY,
    queue       text        NOT NULL,
    key         text,
    at          timestamptz NOT NULL
);
CREATE INDEX starts_queue_idx ON starts (queue, at);
CREATE INDEX starts_key_idx ON starts (queue, key, at) WHERE key IS NOT NULL;

-- The key walk of per_key and fair queues (KEYED in jobs_claim_limited): one descent
-- finds the next key with queued jobs in a level, and that key's first ready jobs.
-- Partial on key IS NOT NULL: jobs without a key (most, in most queues) are not in it,
-- so their enqueues and claims pay nothing for it.
CREATE INDEX jobs_key_claim_idx ON jobs (queue, priority DESC, key, run_at, id)
    WHERE state = 'queued' AND key IS NOT NULL;

-- Where each level (queue, priority) of a keyed queue gave its last turn: the next
-- claim's walk starts at the key after it. Written only by claims, under the queue's
-- lock; a lost or stale row only moves where the next round starts.
CREATE TABLE key_turns (
    queue     text NOT NULL,
    priority  int  NOT NULL,
    last_key  text NOT NULL,
    PRIMARY KEY (queue, priority)
);
