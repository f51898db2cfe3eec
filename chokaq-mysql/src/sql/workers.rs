//! The statements of the workers room: the workers table and throughput.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// (worker, host, pid, queues JSON, concurrency, now, now): the first registration sets
/// `started_at`, every one `last_seen_at`.
pub(super) const REGISTER_WORKER: &str = "INSERT INTO {schema}.workers \
     (worker_id, host, pid, queues, concurrency, started_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?) \
     ON DUPLICATE KEY UPDATE host = VALUES(host), pid = VALUES(pid), queues = VALUES(queues), \
     concurrency = VALUES(concurrency), last_seen_at = VALUES(last_seen_at)";

/// (worker).
pub(super) const DEREGISTER_WORKER: &str = "DELETE FROM {schema}.workers WHERE worker_id = ?";

pub(super) const LIST_WORKERS: &str = "SELECT worker_id, host, pid, queues, concurrency, started_at, last_seen_at \
     FROM {schema}.workers ORDER BY started_at DESC, worker_id";

/// (cutoff): rows last seen before it.
pub(super) const PRUNE_WORKERS: &str = "DELETE FROM {schema}.workers WHERE last_seen_at < ?";

/// Per queue and minute: jobs archived as done (a range of `jobs_archive_finished_queue`),
/// failures dead-lettered (cancels left out) and failed attempts waiting for a retry (the
/// hot table): (µs per minute, since) three times.
pub(super) const THROUGHPUT_ALL: &str = throughput!("");

/// As `throughput_all`, (µs per minute, since, queue) three times.
pub(super) const THROUGHPUT_QUEUE: &str = throughput!(" AND queue = ?");
