//! Enqueueing jobs: [`Client::enqueue`] and [`Client::enqueue_many`] take anything that
//! becomes a [`NewJob`] ([`IntoNewJob`]): a typed job by reference, a [`JobBuilder`] (a typed
//! or raw job with options), or a [`NewJob`] itself.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    Backend, BackendExt, CancelOutcome, Enqueued, JobId, JobKind, JobRecord, NewJob, QueueName, Result, Timestamp,
    MAX_ENQUEUE_BATCH,
};

use crate::job::Job;
use crate::metrics_names as m;

/// Anything [`Client::enqueue`] and [`Client::enqueue_many`] take: a [`NewJob`], a typed job
/// by reference (`&T` where `T:` [`Job`]: its kind, default queue, max attempts and JSON
/// payload), or a [`JobBuilder`]. The conversion is where bad input shows: a payload that
/// does not serialize, or an invalid queue or kind, is an
/// [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind::InvalidInput) error.
pub trait IntoNewJob {
    /// The job to enqueue.
    fn into_new_job(self) -> Result<NewJob>;
}

impl IntoNewJob for NewJob {
    fn into_new_job(self) -> Result<NewJob> {
        Ok(self)
    }
}

impl<J: Job> IntoNewJob for &J {
    fn into_new_job(self) -> Result<NewJob> {
        let mut nj = NewJob::build(J::queue(), J::KIND)?.max_attempts(J::max_attempts());
        nj.concurrency_key = self.concurrency_key();
        nj.unique = J::unique();
        nj.payload(self)
    }
}

impl IntoNewJob for JobBuilder {
    fn into_new_job(self) -> Result<NewJob> {
        self.job
    }
}

/// A job with options (queue, priority, delay, idempotency key, tags, max attempts), typed
/// ([`JobBuilder::new`]) or by kind and raw JSON ([`JobBuilder::raw`]). Hand it to
/// [`Client::enqueue`]; the first invalid value is reported there.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SendEmail { to: String }
/// # impl chokaq::Job for SendEmail { const KIND: &'static str = "email.send.v1"; }
/// use std::time::Duration;
/// use chokaq::{Client, JobBuilder};
///
/// # async fn demo(client: &Client) -> chokaq::Result<()> {
/// let email = SendEmail { to: "a@example.com".into() };
/// client.enqueue(&email).await?; // the type's defaults
/// client
///     .enqueue(JobBuilder::new(&email).priority(5).delay(Duration::from_secs(60)).idempotency_key("welcome-a"))
///     .await?;
/// client.enqueue(JobBuilder::raw("email", "email.send.v1", serde_json::json!({ "to": "b@example.com" }))).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "hand it to Client::enqueue"]
pub struct JobBuilder {
    job: Result<NewJob>,
}

impl JobBuilder {
    /// A typed job with its type's defaults (kind, queue, max attempts).
    pub fn new<J: Job>(job: &J) -> Self {
        JobBuilder { job: job.into_new_job() }
    }

    /// A job by queue, kind and raw JSON payload.
    pub fn raw(queue: &str, kind: &str, payload: serde_json::Value) -> Self {
        let job = QueueName::new(queue).and_then(|q| Ok(NewJob::new(q, JobKind::new(kind)?).json(payload)));
        JobBuilder { job }
    }

    fn map(mut self, f: impl FnOnce(NewJob) -> NewJob) -> Self {
        self.job = self.job.map(f);
        self
    }

    /// Sends it to another queue than the type's default.
    pub fn queue(mut self, queue: &str) -> Self {
        self.job = match (self.job, QueueName::new(queue)) {
            (Ok(mut j), Ok(q)) => {
                j.queue = q;
                Ok(j)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        self
    }

    /// Higher runs first.
    pub fn priority(self, priority: i32) -> Self {
        self.map(|j| j.priority(priority))
    }

    /// Runs no earlier than `delay` from now (database clock).
    pub fn delay(self, delay: Duration) -> Self {
        self.map(|j| j.delay(delay))
    }

    /// Runs no earlier than `at`.
    pub fn run_at(self, at: Timestamp) -> Self {
        self.map(|j| j.run_at(at))
    }

    /// At most one live job carries this key; a duplicate returns the existing id.
    pub fn idempotency_key(self, key: impl Into<String>) -> Self {
        self.map(|j| j.idempotency_key(key))
    }

    /// Adds a tag.
    pub fn tag(self, tag: impl Into<String>) -> Self {
        self.map(|j| j.tag(tag))
    }

    /// Sets the concurrency key, overriding the one [`Job::concurrency_key`] derives.
    pub fn concurrency_key(self, key: impl Into<String>) -> Self {
        self.map(|j| j.concurrency_key(key))
    }

    /// Sets the maximum number of attempts.
    pub fn max_attempts(self, n: i32) -> Self {
        self.map(|j| j.max_attempts(n))
    }

    /// Makes this job unique by `opts` (`docs/unique.md`), overriding [`Job::unique`]: a job
    /// whose unique key a job in one of the counted states holds is not inserted, and
    /// `enqueue` returns the holder's id with `duplicate: true`.
    pub fn unique(self, opts: chokaq_core::UniqueOpts) -> Self {
        self.map(|j| j.unique(opts))
    }

    /// Makes this job not unique, whatever [`Job::unique`] says.
    pub fn not_unique(self) -> Self {
        self.map(|j| NewJob { unique: None, ..j })
    }
}

/// Enqueues jobs and does operator actions through a backend. Cheap to clone.
///
/// `B` is the backend: `Arc<dyn Backend>` by default (chosen at run time, e.g. by
/// [`connect`](crate::connect)), or a concrete backend for what only it can do, such as
/// `Client<PgBackend>::enqueue_in_tx` (feature `postgres`).
#[derive(Clone)]
pub struct Client<B = Arc<dyn Backend>> {
    backend: B,
    created_by: Option<String>,
}

impl<B: Backend> fmt::Debug for Client<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The backend's own Debug redacts its connection string; the name is enough here.
        f.debug_struct("Client").field("backend", &self.backend.name()).field("created_by", &self.created_by).finish()
    }
}

impl<B: Backend> Client<B> {
    /// A client over `backend`.
    pub fn new(backend: B) -> Self {
        Client { backend, created_by: None }
    }

    /// Stamps `created_by` on every job this client enqueues (unless the job sets its own).
    pub fn with_created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The job with this client's `created_by` stamped on it, unless it sets its own.
    fn stamp(&self, job: impl IntoNewJob) -> Result<NewJob> {
        let mut job = job.into_new_job()?;
        if job.created_by.is_none() {
            job.created_by.clone_from(&self.created_by);
        }
        Ok(job)
    }

    /// Enqueues one job: a typed job by reference (`&job`), a [`JobBuilder`], or a
    /// [`NewJob`]. Bad input is an `InvalidInput` error and inserts nothing.
    pub async fn enqueue(&self, job: impl IntoNewJob) -> Result<Enqueued> {
        let job = self.stamp(job)?;
        let queue = job.queue.as_str().to_string();
        let out = self.backend.enqueue(job).await?;
        if !out.duplicate {
            metrics::counter!(m::ENQUEUED, "queue" => queue).increment(1);
        }
        Ok(out)
    }

    /// Enqueues many jobs (`&[T]` or `&Vec<T>` of a typed job, builders, [`NewJob`]s),
    /// [`MAX_ENQUEUE_BATCH`] per round trip; results in input order. Every job is converted
    /// and validated first, so bad input anywhere inserts nothing; a chunk the backend
    /// rejects leaves the earlier chunks in place.
    pub async fn enqueue_many<I>(&self, jobs: I) -> Result<Vec<Enqueued>>
    where
        I: IntoIterator,
        I::Item: IntoNewJob,
    {
        let mut jobs = jobs.into_iter().map(|j| self.stamp(j)).collect::<Result<Vec<_>>>()?;
        // Validate everything first, so bad input changes nothing.
        for job in &jobs {
            job.validate(usize::MAX)?;
        }
        let mut out = Vec::with_capacity(jobs.len());
        while !jobs.is_empty() {
            let rest = jobs.split_off(jobs.len().min(MAX_ENQUEUE_BATCH));
            let chunk = std::mem::replace(&mut jobs, rest);
            let queues: Vec<String> = chunk.iter().map(|j| j.queue.as_str().to_string()).collect();
            let done = self.backend.enqueue_many(chunk).await?;
            count_enqueued(queues, &done);
            out.extend(done);
        }
        Ok(out)
    }

    /// Asks to cancel a job (now if it is not running, on its worker's next heartbeat if it is).
    pub async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.backend.cancel(id).await
    }

    /// A job wherever it is.
    pub async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.backend.get_job(id).await
    }

    /// The output job `id` recorded ([`JobContext::record_output`](crate::JobContext::record_output),
    /// `docs/outputs.md`), decoded as `T`, wherever the job is (live, archived, dead-lettered);
    /// `None` when it recorded none or no such job exists. An output that does not decode as
    /// `T` is an [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind) error naming the job and
    /// the type.
    pub async fn output<T: serde::de::DeserializeOwned>(&self, id: JobId) -> Result<Option<T>> {
        let Some(value) = self.backend.get_output(id).await? else {
            return Ok(None);
        };
        serde_json::from_value(value).map(Some).map_err(|e| {
            chokaq_core::Error::invalid(format!(
                "the output of job {id} does not decode as {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// Enqueues a workflow (`docs/workflows.md`): every task or none; a task with
    /// dependencies is not claimable until each has succeeded. A backend that does not store
    /// workflows ([`Capabilities::workflows`](chokaq_core::Capabilities) off: so far every SQL
    /// backend) answers [`ErrorKind::Unsupported`](chokaq_core::ErrorKind) and writes nothing.
    pub async fn enqueue_workflow(&self, wf: &chokaq_core::Workflow) -> Result<chokaq_core::EnqueuedWorkflow> {
        self.backend.enqueue_workflow(wf).await
    }

    /// A stored workflow with each task's state; `None` for an unknown id.
    pub async fn workflow(&self, id: chokaq_core::WorkflowId) -> Result<Option<chokaq_core::WorkflowStatus>> {
        self.backend.get_workflow(id).await
    }

    /// Cancels every task of a workflow not yet final; how many there were.
    pub async fn cancel_workflow(&self, id: chokaq_core::WorkflowId) -> Result<u64> {
        self.backend.cancel_workflow(id).await
    }

    /// Enqueues a batch (`docs/workflows.md`, "Batches"): its jobs, all or none, and its
    /// callbacks, each enqueued once when its event comes. [`ErrorKind::Unsupported`](chokaq_core::ErrorKind)
    /// where the backend does not store batches (so far every SQL backend).
    pub async fn enqueue_batch(&self, batch: &chokaq_core::Batch) -> Result<chokaq_core::EnqueuedBatch> {
        self.backend.enqueue_batch(batch).await
    }

    /// Adds jobs to a batch that is not final; `Conflict` once it is.
    pub async fn add_to_batch(&self, id: chokaq_core::BatchId, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        self.backend.add_to_batch(id, jobs).await
    }

    /// A batch's counts and the callbacks enqueued so far; `None` for an unknown id.
    pub async fn batch(&self, id: chokaq_core::BatchId) -> Result<Option<chokaq_core::BatchStatus>> {
        self.backend.get_batch(id).await
    }

    /// Every periodic schedule's row, by name (`docs/periodic.md`): spec, time zone, next and
    /// last enqueued tick, paused, stale.
    pub async fn schedules(&self) -> Result<Vec<chokaq_core::ScheduleRow>> {
        self.backend.list_schedules().await
    }

    /// Pauses a periodic schedule: its ticks pass without a job until it is resumed (and are
    /// not caught up). An unknown name is [`ErrorKind::NotFound`](chokaq_core::ErrorKind::NotFound).
    pub async fn pause_schedule(&self, name: &str) -> Result<chokaq_core::ScheduleRow> {
        self.backend.set_schedule_enabled(name, false).await
    }

    /// Resumes a paused periodic schedule from its next tick.
    pub async fn resume_schedule(&self, name: &str) -> Result<chokaq_core::ScheduleRow> {
        self.backend.set_schedule_enabled(name, true).await
    }
}

/// Adds the enqueued jobs that are not duplicates to the per-queue metric.
fn count_enqueued(queues: Vec<String>, done: &[Enqueued]) {
    let mut per_queue: HashMap<String, u64> = HashMap::new();
    for (q, e) in queues.into_iter().zip(done) {
        if !e.duplicate {
            *per_queue.entry(q).or_default() += 1;
        }
    }
    for (q, n) in per_queue {
        metrics::counter!(m::ENQUEUED, "queue" => q).increment(n);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use chokaq_core::{Enqueued, Result};
    use chokaq_postgres::PgBackend;
    use sqlx::PgConnection;

    use super::{count_enqueued, Client, IntoNewJob};
    use crate::metrics_names as m;

    impl Client<PgBackend> {
        /// Enqueues inside the caller's PostgreSQL transaction (the outbox pattern): the job
        /// exists, and idle workers are woken, only if that transaction commits. Pass
        /// `&mut *tx` for a `sqlx::Transaction`.
        ///
        /// ```no_run
        /// use chokaq::postgres::{map_sqlx_error, PgBackend, PgConfig};
        /// use chokaq::{Client, JobBuilder};
        ///
        /// # async fn demo() -> chokaq::Result<()> {
        /// let client = Client::new(PgBackend::connect(PgConfig::new("postgres://app@db/app")).await?);
        /// let mut tx = client.backend().pool().begin().await.map_err(map_sqlx_error)?;
        /// // ... the application's own writes on `tx` ...
        /// let job = JobBuilder::raw("email", "email.send.v1", serde_json::json!({ "to": "a@example.com" }));
        /// client.enqueue_in_tx(&mut tx, job).await?;
        /// tx.commit().await.map_err(map_sqlx_error)?;
        /// # Ok(()) }
        /// ```
        pub async fn enqueue_in_tx(&self, conn: &mut PgConnection, job: impl IntoNewJob) -> Result<Enqueued> {
            let job = self.stamp(job)?;
            let queue = job.queue.as_str().to_string();
            let out = self.backend.enqueue_in_tx(conn, job).await?;
            if !out.duplicate {
                metrics::counter!(m::ENQUEUED, "queue" => queue).increment(1);
            }
            Ok(out)
        }

        /// [`Client::enqueue_in_tx`] for many jobs in one statement (at most
        /// `MAX_ENQUEUE_BATCH`; results in input order).
        pub async fn enqueue_many_in_tx<I>(&self, conn: &mut PgConnection, jobs: I) -> Result<Vec<Enqueued>>
        where
            I: IntoIterator,
            I::Item: IntoNewJob,
        {
            let jobs = jobs.into_iter().map(|j| self.stamp(j)).collect::<Result<Vec<_>>>()?;
            let queues: Vec<String> = jobs.iter().map(|j| j.queue.as_str().to_string()).collect();
            let done = self.backend.enqueue_many_in_tx(conn, jobs).await?;
            count_enqueued(queues, &done);
            Ok(done)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chokaq_core::memory::MemoryBackend;
    use chokaq_core::{Backend, ErrorKind, JobTable, ListJobsParams, NewJob};
    use serde::{Deserialize, Serialize};

    use super::{Client, IntoNewJob, JobBuilder};
    use crate::job::Job;

    #[derive(Serialize, Deserialize)]
    struct Email {
        to: String,
    }

    impl Job for Email {
        const KIND: &'static str = "email.send.v1";
        fn queue() -> &'static str {
            "email"
        }
        fn max_attempts() -> i32 {
            4
        }
        fn concurrency_key(&self) -> Option<String> {
            self.to.split_once('@').map(|(_, domain)| domain.to_string())
        }
    }

    fn email() -> Email {
        Email { to: "a@example.com".into() }
    }

    /// A typed job by reference takes its type's kind, queue, max attempts and payload; the
    /// builder keeps those and adds its options; raw takes what it is given.
    #[test]
    fn conversions() {
        let nj = (&email()).into_new_job().unwrap();
        assert_eq!((nj.queue.as_str(), nj.kind.as_str(), nj.max_attempts), ("email", "email.send.v1", 4));
        assert_eq!(nj.payload, serde_json::json!({ "to": "a@example.com" }));
        assert_eq!(nj.concurrency_key.as_deref(), Some("example.com"), "derived from the payload");

        let nj = JobBuilder::new(&email()).queue("other").priority(3).tag("t").idempotency_key("k").into_new_job();
        let nj = nj.unwrap();
        assert_eq!(
            (nj.queue.as_str(), nj.kind.as_str(), nj.priority, nj.max_attempts),
            ("other", "email.send.v1", 3, 4)
        );
        assert_eq!((nj.tags.as_slice(), nj.idempotency_key.as_deref()), (&["t".to_string()][..], Some("k")));
        let nj = JobBuilder::new(&email()).concurrency_key("tenant-7").into_new_job().unwrap();
        assert_eq!(nj.concurrency_key.as_deref(), Some("tenant-7"), "the builder's key wins");

        let nj = JobBuilder::raw("q", "k.v1", serde_json::json!([1])).into_new_job().unwrap();
        assert_eq!((nj.queue.as_str(), nj.kind.as_str(), &nj.payload), ("q", "k.v1", &serde_json::json!([1])));

        let bad = JobBuilder::raw("bad queue!", "k.v1", serde_json::Value::Null).priority(1).into_new_job();
        assert_eq!(bad.unwrap_err().kind(), ErrorKind::InvalidInput, "the first error is kept through the options");
    }

    /// `enqueue` and `enqueue_many` take every form; `created_by` is stamped unless the job
    /// sets its own; bad input anywhere in a batch inserts nothing.
    #[tokio::test]
    async fn enqueue_takes_every_form() {
        let b = Arc::new(MemoryBackend::new());
        let client = Client::new(b.clone()).with_created_by("tests");
        client.enqueue(&email()).await.unwrap();
        client.enqueue(JobBuilder::new(&email()).priority(2)).await.unwrap();
        client.enqueue(NewJob::build("q", "k.v1").unwrap().created_by("someone")).await.unwrap();
        let many = client.enqueue_many(&[email(), email()]).await.unwrap();
        assert_eq!(many.len(), 2);
        let builders = client.enqueue_many(vec![JobBuilder::new(&email()), JobBuilder::raw("q", "k.v1", 1.into())]);
        assert_eq!(builders.await.unwrap().len(), 2);
        assert_eq!(b.stats().await.unwrap().total(), 7);

        let bad = vec![JobBuilder::new(&email()), JobBuilder::new(&email()).max_attempts(0)];
        assert_eq!(client.enqueue_many(bad).await.unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(b.stats().await.unwrap().total(), 7, "nothing of a bad batch is inserted");

        let page = b.list_jobs(&ListJobsParams::new(JobTable::Hot)).await.unwrap();
        let mut by: Vec<_> = page.jobs.iter().map(|j| j.created_by.clone().unwrap_or_default()).collect();
        by.sort();
        assert_eq!(by, ["someone", "tests", "tests", "tests", "tests", "tests", "tests"]);
    }

    #[derive(Serialize, Deserialize)]
    struct Refresh {
        account: u64,
        note: String,
    }

    impl Job for Refresh {
        const KIND: &'static str = "account.refresh.v1";
        fn unique() -> Option<chokaq_core::UniqueOpts> {
            Some(chokaq_core::UniqueOpts::new().by_fields(["account"]))
        }
    }

    /// A job type's unique settings go with every job of it; the builder overrides them per
    /// job, or turns them off.
    #[tokio::test]
    async fn unique_settings_per_type_and_per_job() {
        let b = Arc::new(MemoryBackend::new());
        let client = Client::new(b.clone());
        let r = |account: u64, note: &str| Refresh { account, note: note.into() };
        let first = client.enqueue(&r(42, "a")).await.unwrap();
        let again = client.enqueue(&r(42, "b")).await.unwrap();
        assert_eq!((again.duplicate, again.id), (true, first.id), "same account: one job");
        assert!(!client.enqueue(&r(43, "a")).await.unwrap().duplicate, "another account");
        let forced = client.enqueue(JobBuilder::new(&r(42, "c")).not_unique()).await.unwrap();
        assert!(!forced.duplicate, "not unique for this one job");
        let by_args = chokaq_core::UniqueOpts::new().by_args();
        let own = client.enqueue(JobBuilder::new(&r(42, "d")).unique(by_args.clone())).await.unwrap();
        assert!(!own.duplicate, "the builder's settings: the whole payload, another note");
        let own_again = client.enqueue(JobBuilder::new(&r(42, "d")).unique(by_args)).await.unwrap();
        assert_eq!((own_again.duplicate, own_again.id), (true, own.id));
        assert_eq!(b.stats().await.unwrap().total(), 4);
    }

    /// PostgreSQL: a job enqueued in a transaction exists only once that transaction commits.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn pg_enqueue_in_tx_follows_the_transaction() {
        use chokaq_core::testing::TestSupport;
        use chokaq_postgres::{map_sqlx_error, PgBackend, PgConfig};

        let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
        let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
        let b = match PgBackend::connect(PgConfig::new(url).schema(schema).max_connections(2)).await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("PostgreSQL unreachable, test skipped: {e}");
                return;
            }
        };
        b.migrate().await.unwrap();
        let client = Client::new(b.clone()).with_created_by("tx");

        let mut tx = b.pool().begin().await.map_err(map_sqlx_error).unwrap();
        client.enqueue_in_tx(&mut tx, &email()).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(b.stats().await.unwrap().total(), 0, "rolled back: no job");

        let mut tx = b.pool().begin().await.map_err(map_sqlx_error).unwrap();
        let one = client.enqueue_in_tx(&mut tx, JobBuilder::new(&email()).priority(1)).await.unwrap();
        let two = client.enqueue_many_in_tx(&mut tx, [&email(), &email()]).await.unwrap();
        assert_eq!(b.stats().await.unwrap().total(), 0, "not committed yet: not visible");
        tx.commit().await.unwrap();
        assert_eq!(b.stats().await.unwrap().total(), 3);
        let job = b.get_job(one.id).await.unwrap().unwrap();
        assert_eq!(job.created_by.as_deref(), Some("tx"));
        assert_eq!(two.len(), 2);
        b.drop_schema().await.unwrap();
    }
}
