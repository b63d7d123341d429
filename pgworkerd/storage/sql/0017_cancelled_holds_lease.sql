-- 0017: a job cancelled while it ran keeps its lease until its handler has ended
-- (a "held" cancelled row). jobs_running_is_leased, in the domain job_lifecycle_checked
-- (0015), said "a row holds a lease (lease_expires_at) if and only if it is running";
-- it now also lets a cancelled row hold one, with its token, and still refuses a lease
-- on any other state, a running row without one, and a leased row without a token.
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
--
-- Why: a concurrency limit counts a queue's (and a key's) leased rows (RUNNING in
-- jobs_claim_limited). The cancel cleared the lease at once, so the place was given to
-- the next job while the cancelled handler still ran, for up to the cancel's grace
-- (3 s) before its process was killed: two handlers at once in a `concurrency: 1`
-- queue. Now the cancel leaves the lease on the row; the holder clears it when the
-- handler has ended (its fenced outcome write finds the row cancelled, or the
-- settlement of its killed worker), or the rescue does once the lease has expired (a
-- holder that died). The state is `cancelled` from the cancel on: counts, lists,
-- dependents and wait() see a cancelled job; only the limits, retry and pruning look
-- at the lease (docs/design.md, "Cancelling a running job").
--
-- Cost: catalog changes only. The domain is the type of no column (only the table's
-- CHECK jobs_lifecycle_valid casts to it), so adding its constraint reads no row;
-- it is added NOT VALID all the same, as 0013's. Every row the old predicate accepted
-- the new one accepts: nothing to validate. Sessions that cached the domain's
-- constraints (typcache) drop them at the catalog change and read the new one at
-- their next insert or update of a job. A brief lock on the domain, none on `jobs`.
--
-- Daemons of the previous release (a rolling deploy): their SQL never writes a lease
-- on a cancelled row, so the new predicate refuses nothing they write. Their cancel
-- clears the lease at once, as before. A held row is made only by this release's
-- cancel; the previous release's rescue, renewal and outcome writes, all fenced by
-- state = 'running', leave it alone, and it is released by a daemon of this release
-- (its holder, or any one's rescue once the lease has expired): upgrade every daemon.
ALTER DOMAIN job_lifecycle_checked DROP CONSTRAINT jobs_running_is_leased;
ALTER DOMAIN job_lifecycle_checked
    ADD CONSTRAINT jobs_running_is_leased
        CHECK (CASE (VALUE).state
                   WHEN 'running' THEN (VALUE).lease_expires_at IS NOT NULL
                                       AND (VALUE).lease_token IS NOT NULL
                   WHEN 'cancelled' THEN (VALUE).lease_token IS NOT NULL
                                         OR (VALUE).lease_expires_at IS NULL
                   ELSE (VALUE).lease_expires_at IS NULL
               END)
        NOT VALID;
