//! Typed assertions on what was enqueued: [`Expect`] and [`assert_enqueued_exactly`].

use std::fmt::{self, Write as _};
use std::marker::PhantomData;
use std::time::Duration;

use chokaq_core::{Backend, JobKind, JobLocation, JobRecord, JobTable, ListJobsParams, Result, Timestamp};

use crate::job::Job;

/// How many jobs an assertion reads at most (per table): a test's schema holds few.
pub const MAX_JOBS_READ: usize = 10_000;

/// How far a delay may be off in [`Expect::delayed_by`] (the enqueuing round trip).
pub const DELAY_TOLERANCE: Duration = Duration::from_secs(2);

/// The closest jobs a failing assertion prints.
const SHOWN: usize = 5;

/// A job that matched, with its payload decoded.
#[derive(Debug, Clone)]
pub struct Found<T> {
    /// The job as stored.
    pub record: JobRecord,
    /// Its payload as `T`.
    pub job: T,
}

enum Schedule {
    DueNow,
    At(Timestamp),
    DelayedBy(Duration),
}

type Predicate<T> = Box<dyn Fn(&T) -> bool + Send + Sync>;

/// What a job of type `T` must look like: its payload (a predicate), and any of its queue,
/// priority, idempotency key, tags and schedule. By default only the live jobs (pending,
/// scheduled, waiting for a retry, running) count; [`including_finished`](Expect::including_finished)
/// adds the archived and dead-lettered ones.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use chokaq::apptest::Expect;
/// use chokaq::{Client, JobBuilder};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SendEmail { to: String }
/// # impl chokaq::Job for SendEmail { const KIND: &'static str = "email.send.v1"; fn queue() -> &'static str { "email" } }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> chokaq::Result<()> {
/// let backend = Arc::new(chokaq::core::memory::MemoryBackend::new());
/// let client = Client::new(backend.clone());
/// let job = SendEmail { to: "a@example.com".into() };
/// client.enqueue(JobBuilder::new(&job).priority(5).tag("welcome").delay(Duration::from_secs(600))).await?;
///
/// let found = Expect::<SendEmail>::matching(|e| e.to == "a@example.com")
///     .queue("email")
///     .priority(5)
///     .tag("welcome")
///     .delayed_by(Duration::from_secs(600))
///     .assert_enqueued(&*backend)
///     .await;
/// assert_eq!(found.job.to, "a@example.com");
/// Expect::<SendEmail>::matching(|e| e.to == "b@example.com").refute_enqueued(&*backend).await;
/// # Ok(()) }
/// ```
pub struct Expect<T: Job> {
    predicate: Option<Predicate<T>>,
    queue: Option<String>,
    priority: Option<i32>,
    key: Option<Option<String>>,
    tags: Vec<String>,
    schedule: Option<Schedule>,
    finished_too: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T: Job> Default for Expect<T> {
    fn default() -> Self {
        Self::any()
    }
}

impl<T: Job> Expect<T> {
    /// Any job of type `T`.
    pub fn any() -> Self {
        Expect {
            predicate: None,
            queue: None,
            priority: None,
            key: None,
            tags: Vec::new(),
            schedule: None,
            finished_too: false,
            _t: PhantomData,
        }
    }

    /// A job of type `T` whose payload satisfies `predicate`.
    pub fn matching(predicate: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        Expect { predicate: Some(Box::new(predicate)), ..Self::any() }
    }

    /// In this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// With this priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// With this idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(Some(key.into()));
        self
    }

    /// With no idempotency key.
    pub fn no_idempotency_key(mut self) -> Self {
        self.key = Some(None);
        self
    }

    /// Carrying this tag (among others, maybe); call again for more.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Due at once (enqueued without a delay or a time).
    pub fn due_now(mut self) -> Self {
        self.schedule = Some(Schedule::DueNow);
        self
    }

    /// Scheduled for `at` (to the microsecond).
    pub fn scheduled_at(mut self, at: Timestamp) -> Self {
        self.schedule = Some(Schedule::At(at));
        self
    }

    /// Delayed by `delay` from its creation, within [`DELAY_TOLERANCE`].
    pub fn delayed_by(mut self, delay: Duration) -> Self {
        self.schedule = Some(Schedule::DelayedBy(delay));
        self
    }

    /// Counts the finished jobs too (archived, dead-lettered), not only the live ones.
    pub fn including_finished(mut self) -> Self {
        self.finished_too = true;
        self
    }

    /// The jobs that match, oldest first (no panic).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use chokaq::apptest::Expect;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)]
    /// # struct Invoice { cents: u64 }
    /// # impl chokaq::Job for Invoice { const KIND: &'static str = "invoice.v1"; }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> chokaq::Result<()> {
    /// let backend = Arc::new(chokaq::core::memory::MemoryBackend::new());
    /// let client = chokaq::Client::new(backend.clone());
    /// client.enqueue_many(&[Invoice { cents: 100 }, Invoice { cents: 250 }, Invoice { cents: 990 }]).await?;
    /// let big = Expect::<Invoice>::matching(|i| i.cents > 200);
    /// let found = big.find(&*backend).await?;
    /// assert_eq!(found.iter().map(|f| f.job.cents).sum::<u64>(), 1240);
    /// // The panicking form: exactly two.
    /// big.assert_enqueued_times(&*backend, 2).await;
    /// # Ok(()) }
    /// ```
    pub async fn find<B: Backend + ?Sized>(&self, backend: &B) -> Result<Vec<Found<T>>> {
        let jobs = self.candidates(backend).await?;
        Ok(jobs.into_iter().filter_map(|r| self.decode_match(r)).collect())
    }

    /// Panics unless at least one job matches; returns the first (oldest).
    pub async fn assert_enqueued<B: Backend + ?Sized>(&self, backend: &B) -> Found<T> {
        self.assert_enqueued_times(backend, None).await.remove(0)
    }

    /// Panics unless no job matches.
    pub async fn refute_enqueued<B: Backend + ?Sized>(&self, backend: &B) {
        self.assert_enqueued_times(backend, Some(0)).await;
    }

    /// Panics unless exactly `n` jobs match (`None`: at least one); returns them, oldest first.
    pub async fn assert_enqueued_times<B: Backend + ?Sized>(
        &self,
        backend: &B,
        n: impl Into<Option<usize>>,
    ) -> Vec<Found<T>> {
        let jobs = self.candidates(backend).await.unwrap_or_else(|e| panic!("could not list the jobs: {e}"));
        self.check(jobs, n.into())
    }

    /// The matches among `jobs`; panics unless there are `n` (`None`: at least one).
    fn check(&self, jobs: Vec<JobRecord>, n: Option<usize>) -> Vec<Found<T>> {
        let found: Vec<Found<T>> = jobs.iter().cloned().filter_map(|r| self.decode_match(r)).collect();
        let ok = match n {
            Some(n) => found.len() == n,
            None => !found.is_empty(),
        };
        if !ok {
            let want = match n {
                Some(0) => "no job like".to_string(),
                Some(n) => format!("exactly {n} jobs like"),
                None => "a job like".to_string(),
            };
            panic!("expected {want} {}; {} matched.\n{}", self.describe(), found.len(), self.closest(&jobs));
        }
        found
    }

    async fn candidates<B: Backend + ?Sized>(&self, backend: &B) -> Result<Vec<JobRecord>> {
        let mut tables = vec![JobTable::Hot];
        if self.finished_too {
            tables.extend([JobTable::Archive, JobTable::DeadLetter]);
        }
        let mut out = Vec::new();
        for table in tables {
            out.extend(list(backend, table, Some(T::KIND)).await?);
        }
        out.sort_by_key(|r| r.id);
        Ok(out)
    }

    fn decode_match(&self, r: JobRecord) -> Option<Found<T>> {
        if !self.mismatches(&r).is_empty() {
            return None;
        }
        let job = serde_json::from_value(r.payload.clone()).ok()?;
        Some(Found { record: r, job })
    }

    /// The closest jobs of the type (fewest mismatches first) and how each differs.
    fn closest(&self, jobs: &[JobRecord]) -> String {
        if jobs.is_empty() {
            let live = if self.finished_too { "" } else { " live" };
            return format!("No{live} job of kind {:?} is enqueued.", T::KIND);
        }
        let mut scored: Vec<(Vec<String>, &JobRecord)> = jobs.iter().map(|r| (self.mismatches(r), r)).collect();
        scored.sort_by_key(|(m, _)| m.len());
        let mut s = format!("The closest of the {} jobs of kind {:?}:", jobs.len(), T::KIND);
        for (mismatches, r) in scored.iter().take(SHOWN) {
            let why = if mismatches.is_empty() { "matches".to_string() } else { mismatches.join("; ") };
            let _ = write!(s, "\n  - {}\n    differs: {why}", show(r));
        }
        if jobs.len() > SHOWN {
            let _ = write!(s, "\n  ({} more)", jobs.len() - SHOWN);
        }
        s
    }

    fn mismatches(&self, r: &JobRecord) -> Vec<String> {
        let mut m = Vec::new();
        if r.kind.as_str() != T::KIND {
            m.push(format!("kind is {:?}", r.kind.as_str()));
        }
        if let Some(p) = &self.predicate {
            match serde_json::from_value::<T>(r.payload.clone()) {
                Ok(job) if p(&job) => {}
                Ok(_) => m.push("payload does not satisfy the predicate".into()),
                Err(e) => m.push(format!("payload does not decode: {e}")),
            }
        }
        if let Some(q) = self.queue.as_deref().filter(|q| *q != r.queue.as_str()) {
            m.push(format!("queue is {:?}, not {q:?}", r.queue.as_str()));
        }
        if let Some(p) = self.priority.filter(|p| *p != r.priority) {
            m.push(format!("priority is {}, not {p}", r.priority));
        }
        if let Some(k) = self.key.as_ref().filter(|k| **k != r.idempotency_key) {
            m.push(format!("idempotency key is {:?}, not {k:?}", r.idempotency_key));
        }
        for t in self.tags.iter().filter(|t| !r.tags.contains(t)) {
            m.push(format!("no tag {t:?}"));
        }
        if let Some(why) = self.schedule.as_ref().and_then(|s| schedule_mismatch(s, r)) {
            m.push(why);
        }
        m
    }

    fn describe(&self) -> String {
        let mut s = format!("{} (kind {:?})", std::any::type_name::<T>(), T::KIND);
        if self.predicate.is_some() {
            s.push_str(" matching the predicate");
        }
        if let Some(q) = &self.queue {
            let _ = write!(s, ", queue {q:?}");
        }
        if let Some(p) = self.priority {
            let _ = write!(s, ", priority {p}");
        }
        match &self.key {
            Some(Some(k)) => {
                let _ = write!(s, ", idempotency key {k:?}");
            }
            Some(None) => s.push_str(", no idempotency key"),
            None => {}
        }
        if !self.tags.is_empty() {
            let _ = write!(s, ", tags {:?}", self.tags);
        }
        match &self.schedule {
            Some(Schedule::DueNow) => s.push_str(", due now"),
            Some(Schedule::At(t)) => {
                let _ = write!(s, ", scheduled at {t}");
            }
            Some(Schedule::DelayedBy(d)) => {
                let _ = write!(s, ", delayed by {d:?}");
            }
            None => {}
        }
        if self.finished_too {
            s.push_str(", live or finished");
        }
        s
    }
}

impl<T: Job> fmt::Debug for Expect<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

fn schedule_mismatch(s: &Schedule, r: &JobRecord) -> Option<String> {
    let micros = |t: Timestamp| t.timestamp_micros();
    match (s, r.scheduled_at) {
        (Schedule::DueNow, None) => None,
        (Schedule::DueNow, Some(at)) if at <= r.created_at => None,
        (Schedule::DueNow, Some(at)) => Some(format!("scheduled at {at}, not due now")),
        (Schedule::At(want), Some(at)) if micros(*want) == micros(at) => None,
        (Schedule::At(want), at) => Some(format!("scheduled at {at:?}, not {want}")),
        (Schedule::DelayedBy(d), Some(at)) => {
            let got = (at - r.created_at).to_std().unwrap_or_default();
            let off = got.abs_diff(*d);
            (off > DELAY_TOLERANCE).then(|| format!("delayed by {got:?}, not {d:?}"))
        }
        (Schedule::DelayedBy(d), None) => Some(format!("due now, not delayed by {d:?}")),
    }
}

/// The transaction form (PostgreSQL).
#[cfg(feature = "postgres")]
#[path = "pg_tx.rs"]
mod pg_tx;

/// One job, for a failure message.
fn show(r: &JobRecord) -> String {
    let state = match r.location {
        JobLocation::Hot(s) => format!("{s:?}"),
        JobLocation::Archived => "archived".to_string(),
        JobLocation::Dead(reason) => format!("dead ({reason})"),
    };
    let mut payload = r.payload.to_string();
    if payload.len() > 200 {
        let cut = (0..=200).rev().find(|i| payload.is_char_boundary(*i)).unwrap_or(0);
        payload.truncate(cut);
        payload.push('…');
    }
    format!(
        "{} {} queue {:?} priority {} key {:?} tags {:?} scheduled {:?} {state}: {payload}",
        r.id,
        r.kind.as_str(),
        r.queue.as_str(),
        r.priority,
        r.idempotency_key,
        r.tags,
        r.scheduled_at.map(|t| t.to_string())
    )
}

/// Every job of `table` (of `kind`, if given), oldest first, at most [`MAX_JOBS_READ`].
async fn list<B: Backend + ?Sized>(backend: &B, table: JobTable, kind: Option<&str>) -> Result<Vec<JobRecord>> {
    let mut params = ListJobsParams::new(table);
    params.kind = kind.map(JobKind::new).transpose()?;
    params.limit = 1000;
    let mut out = Vec::new();
    loop {
        let page = backend.list_jobs(&params).await?;
        out.extend(page.jobs);
        match page.next {
            Some(next) if out.len() < MAX_JOBS_READ => params.after = Some(next),
            _ => return Ok(out),
        }
    }
}

/// One expectation of [`assert_enqueued_exactly`], whatever its job type: implemented by
/// [`Expect`].
pub trait Expectation: Send + Sync {
    /// What the expectation asks for.
    fn describe(&self) -> String;
    /// Why `job` does not match (empty: it matches).
    fn mismatches(&self, job: &JobRecord) -> Vec<String>;
}

impl<T: Job> Expectation for Expect<T> {
    fn describe(&self) -> String {
        Expect::describe(self)
    }
    fn mismatches(&self, job: &JobRecord) -> Vec<String> {
        Expect::mismatches(self, job)
    }
}

/// Panics unless the live jobs (pending, scheduled, running) are exactly these: as many as
/// `expected`, each expectation matched by a job of its own (the first unmatched job, oldest
/// first, in the order of `expected`), whatever their types. The message lists what is
/// enqueued and what is missing or extra.
///
/// ```
/// # use std::sync::Arc;
/// use chokaq::apptest::{assert_enqueued_exactly, Expect};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SendEmail { to: String }
/// # impl chokaq::Job for SendEmail { const KIND: &'static str = "email.send.v1"; }
/// # #[derive(Serialize, Deserialize)]
/// # struct Audit { what: String }
/// # impl chokaq::Job for Audit { const KIND: &'static str = "audit.v1"; fn queue() -> &'static str { "audit" } }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> chokaq::Result<()> {
/// let backend = Arc::new(chokaq::core::memory::MemoryBackend::new());
/// let client = chokaq::Client::new(backend.clone());
/// client.enqueue(&SendEmail { to: "a@example.com".into() }).await?;
/// client.enqueue(&SendEmail { to: "b@example.com".into() }).await?;
/// client.enqueue(&Audit { what: "signup".into() }).await?;
/// assert_enqueued_exactly(&*backend, &[
///     &Expect::<Audit>::matching(|a| a.what == "signup").queue("audit"),
///     &Expect::<SendEmail>::matching(|e| e.to == "b@example.com"),
///     &Expect::<SendEmail>::any(),
/// ]).await;
/// # Ok(()) }
/// ```
pub async fn assert_enqueued_exactly<B: Backend + ?Sized>(backend: &B, expected: &[&dyn Expectation]) {
    let jobs = list(backend, JobTable::Hot, None).await.unwrap_or_else(|e| panic!("could not list the jobs: {e}"));
    let mut used = vec![false; jobs.len()];
    let mut missing = Vec::new();
    for e in expected {
        match jobs.iter().enumerate().find(|(i, r)| !used[*i] && e.mismatches(r).is_empty()) {
            Some((i, _)) => used[i] = true,
            None => missing.push(e.describe()),
        }
    }
    let extra: Vec<&JobRecord> = jobs.iter().zip(&used).filter(|(_, u)| !**u).map(|(r, _)| r).collect();
    if !missing.is_empty() || !extra.is_empty() {
        let mut s = format!("expected exactly {} live jobs, found {}.", expected.len(), jobs.len());
        for m in &missing {
            let _ = write!(s, "\n  missing: {m}");
        }
        for r in extra.iter().take(2 * SHOWN) {
            let _ = write!(s, "\n  not expected: {}", show(r));
        }
        if extra.len() > 2 * SHOWN {
            let _ = write!(s, "\n  ({} more not expected)", extra.len() - 2 * SHOWN);
        }
        panic!("{s}");
    }
}
