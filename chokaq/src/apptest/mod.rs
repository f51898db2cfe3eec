//! Helpers for an application's own tests (feature `apptest`): assert what your code
//! enqueued, run a job's handler inline, drain a queue, or run every job the moment it is
//! enqueued. Everything goes through the public [`Backend`](crate::Backend) trait, so the same test runs on
//! the in-memory backend ([`chokaq::core::memory::MemoryBackend`](crate::core::memory::MemoryBackend))
//! and on a real database (SQLite, PostgreSQL, ...). No worker, no sleeps: each helper returns
//! when the work it started is written.
//!
//! ```toml
//! [dev-dependencies]
//! chokaq = { version = "0.1", features = ["apptest"] }
//! ```
//!
//! - [`Expect`]: a typed expectation on the jobs of type `T` (a predicate on the payload,
//!   queue, priority, idempotency key, tags, schedule); [`Expect::assert_enqueued`],
//!   [`Expect::refute_enqueued`], [`Expect::assert_enqueued_times`] and, for many jobs at
//!   once, [`assert_enqueued_exactly`]; with feature `postgres`, the `_in_tx` forms
//!   ([`Expect::assert_enqueued_in_tx`], ...) read inside a caller's open transaction. A failing assertion panics with the closest jobs of
//!   that type and how each differs.
//! - [`Harness`]: handlers registered as on a [`WorkerBuilder`](crate::WorkerBuilder);
//!   [`Harness::perform`] enqueues one job and runs its handler inline with a real
//!   [`JobContext`](crate::JobContext); [`Harness::drain`] and [`Harness::drain_recursive`]
//!   run a queue's due jobs (and those they enqueue) and report how each ended;
//!   [`Harness::inline_client`] is a [`Client`](crate::Client) whose jobs run as they are
//!   enqueued.
//!
//! `docs/testing.md` walks through a test of a handler that enqueues another job.

mod expect;
mod inline;
mod report;
mod run;

pub use expect::{assert_enqueued_exactly, Expect, Expectation, Found, DELAY_TOLERANCE, MAX_JOBS_READ};
pub use inline::InlineBackend;
pub use report::{Drained, Outcome, Ran};
pub use run::{Harness, DEFAULT_TIMEOUT, MAX_INLINE_DEPTH};
