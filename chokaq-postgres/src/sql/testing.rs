//! The statements of `TestSupport` (feature `testing`): forced states, raw counts, killed
//! sessions, the schema dropped. Rendered with the others so the grammar check covers them.

/// Test support: `$1` worker, `$2` last seen.
pub(super) const FORCE_WORKER_SEEN: &str = "UPDATE {schema}.workers SET last_seen_at = $2 WHERE worker_id = $1";

/// Test support: `$1` id, `$2` finish time of an archived job.
pub(super) const FORCE_FINISHED_AT: &str = "UPDATE {schema}.jobs_archive SET finished_at = $2 WHERE id = $1";

pub(super) const DROP_SCHEMA: &str = "DROP SCHEMA IF EXISTS {schema} CASCADE";

/// Test support: the role whose default isolation is REPEATABLE READ, with what the backend
/// needs on the schema (`TestSupport::with_repeatable_read_default`).
pub(super) const RR_ROLE_CREATE: &str = "CREATE ROLE {rr_role} LOGIN;
ALTER ROLE {rr_role} SET default_transaction_isolation = 'repeatable read';
GRANT USAGE ON SCHEMA {schema} TO {rr_role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {rr_role};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {rr_role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {rr_role}";

/// Test support: the isolation level of a session's transactions.
pub(super) const SESSION_ISOLATION: &str = "SELECT current_setting('transaction_isolation')";

/// Test support: drops that role (after the schema, which held its only privileges).
pub(super) const RR_ROLE_DROP: &str = "DROP ROLE IF EXISTS {rr_role}";

pub(super) const FORCE: &str = "
UPDATE {schema}.jobs_hot SET
    status = CASE WHEN coalesce($2::int2, status) NOT IN (0, 3) THEN coalesce($2::int2, status)
                  WHEN coalesce(CASE WHEN $4::bool THEN $5::timestamptz ELSE scheduled_at END,
                                $9::timestamptz, created_at) > now() THEN 3
                  ELSE 0 END,
    attempt = coalesce($3::int4, attempt),
    scheduled_at = CASE WHEN $4::bool THEN $5::timestamptz ELSE scheduled_at END,
    heartbeat_at = CASE WHEN $6::bool THEN $7::timestamptz ELSE heartbeat_at END,
    updated_at = coalesce($8::timestamptz, updated_at),
    created_at = coalesce($9::timestamptz, created_at),
    payload = coalesce($10::text::jsonb, payload)
WHERE id = $1";

pub(super) const PRESENCE_MANY: &str = "
SELECT u.id,
       (SELECT count(*) FROM {schema}.jobs_hot h WHERE h.id = u.id) AS hot,
       (SELECT count(*) FROM {schema}.jobs_archive a WHERE a.id = u.id) AS archive,
       (SELECT count(*) FROM {schema}.jobs_dlq d WHERE d.id = u.id) AS dead
  FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)
 ORDER BY u.ord";

pub(super) const KILL_CONNECTIONS: &str = "
SELECT count(*) FILTER (WHERE t.ok) FROM (
    SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
     WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()
) t";

pub(super) const DB_NOW: &str = "SELECT now()";

/// Test support (`TestSupport::add_starts`), first: the queue's limit (`$1` queue), its
/// control row locked as a claim of it would (the bucket's numbers are serialised there).
pub(super) const ADD_STARTS_LIMIT: &str =
    "SELECT rate_by_key FROM {schema}.queues WHERE name = $1 AND rate_jobs IS NOT NULL FOR UPDATE";

/// Test support (`TestSupport::add_starts`), second: the bucket's latest entry, `$1` queue,
/// `$2` key (NULL: the queue's bucket).
pub(super) const ADD_STARTS_LAST: &str = "SELECT stamp, n FROM {schema}.starts \
     WHERE queue = $1 AND ($2::text IS NULL OR ckey = $2) ORDER BY stamp DESC, n DESC LIMIT 1";

/// Test support (`TestSupport::add_starts`), last: `$3` starts of queue `$1`, key `$2`, stamped
/// `$4`, numbered after `$5`.
pub(super) const ADD_STARTS: &str = "INSERT INTO {schema}.starts (queue, ckey, stamp, n) \
     SELECT $1, $2, $4, $5 + g FROM generate_series(1, $3::int8) AS g";
