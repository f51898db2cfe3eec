//! The statements of the workers room: the workers table and throughput.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// `?1` worker, `?2` host, `?3` pid, `?4` queues (JSON), `?5` concurrency, `?6` now: the
/// first registration sets `started_at`, every one `last_seen_at`.
pub(super) const REGISTER_WORKER: &str = "INSERT INTO {schema}.workers \
     (worker_id, host, pid, queues, concurrency, started_at, last_seen_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) \
     ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, pid = excluded.pid, \
     queues = excluded.queues, concurrency = excluded.concurrency, last_seen_at = excluded.last_seen_at";

/// `?1` worker.
pub(super) const DEREGISTER_WORKER: &str = "DELETE FROM {schema}.workers WHERE worker_id = ?1";

pub(super) const LIST_WORKERS: &str = "SELECT worker_id, host, pid, queues, concurrency, started_at, last_seen_at \
     FROM {schema}.workers ORDER BY started_at DESC, worker_id";

/// `?1` cutoff: rows last seen before it.
pub(super) const PRUNE_WORKERS: &str = "DELETE FROM {schema}.workers WHERE last_seen_at < ?1";

/// `?1` since, `?2` microseconds per minute: per queue and minute, jobs archived as done (a
/// covering range of `jobs_archive_finished_queue`), failures dead-lettered (cancels left
/// out) and failed attempts waiting for a retry (the hot table: live jobs only).
pub(super) const THROUGHPUT_ALL: &str = throughput!("");

/// As `throughput_all` for queue `?3`.
pub(super) const THROUGHPUT_QUEUE: &str = throughput!(" AND queue = ?3");
