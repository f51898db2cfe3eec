//! The look-ahead buffer: held jobs beyond the free slots, in claim order, each with when it
//! was put there.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use chokaq_core::ClaimedJob;
use tokio::time::Instant;

/// The look-ahead buffer: held jobs (Hold mode: Fetched, heart-beaten, no attempt counted)
/// beyond the free slots, in claim order. A finishing handler hands its slot to the first of
/// them, whose handler begins at once (`Executor::begin_held`); its attempt is counted by the
/// deferred start or by its outcome, so a job whose handler never began never loses an
/// attempt, also after a crash.
#[derive(Default)]
pub(super) struct Lookahead {
    inner: Mutex<Buffered>,
}

#[derive(Default)]
struct Buffered {
    /// Each with when it was put here.
    jobs: VecDeque<(ClaimedJob, Instant)>,
    /// Shutdown: nothing more is taken from the buffer.
    closed: bool,
}

impl Lookahead {
    pub(super) fn extend(&self, jobs: Vec<ClaimedJob>) {
        let now = Instant::now();
        self.inner.lock().unwrap().jobs.extend(jobs.into_iter().map(|j| (j, now)));
    }

    /// When the longest-waiting job was put here.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.inner.lock().unwrap().jobs.front().map(|(_, t)| *t)
    }

    /// Takes out the jobs put here at or before `cutoff` (the longest-waiting first).
    pub(super) fn take_older(&self, cutoff: Instant) -> Vec<ClaimedJob> {
        let mut inner = self.inner.lock().unwrap();
        let mut out = Vec::new();
        while inner.jobs.front().is_some_and(|(_, t)| *t <= cutoff) {
            out.extend(inner.jobs.pop_front().map(|(j, _)| j));
        }
        out
    }

    /// Whether nothing is buffered.
    pub(super) fn is_empty(&self) -> bool {
        self.inner.lock().unwrap().jobs.is_empty()
    }

    /// Takes the next look-ahead job (Fetched), unless shutting down.
    /// `suspect_ok`: a job whose earlier holds expired may be taken now; when not, the first
    /// other job is (see `Executor::suspect_ok`).
    pub(super) fn take(&self, suspect_ok: bool) -> Option<ClaimedJob> {
        let mut inner = self.inner.lock().unwrap();
        if inner.closed {
            return None;
        }
        let i = inner.jobs.iter().position(|(j, _)| suspect_ok || j.expired_holds == 0)?;
        inner.jobs.remove(i).map(|(j, _)| j)
    }

    /// Whether a job whose earlier holds expired waits here.
    pub(super) fn has_suspect(&self) -> bool {
        self.inner.lock().unwrap().jobs.iter().any(|(j, _)| j.expired_holds > 0)
    }

    pub(super) fn len(&self) -> usize {
        self.inner.lock().unwrap().jobs.len()
    }

    /// Shutdown: closes the buffer and returns what it held.
    pub(super) fn close(&self) -> Vec<ClaimedJob> {
        let mut inner = self.inner.lock().unwrap();
        inner.closed = true;
        inner.jobs.drain(..).map(|(j, _)| j).collect()
    }
}

/// How many look-ahead jobs to hold: what the slots get through in two claim round trips,
/// between 1 and `max`; `concurrency` (at most `max`) until both averages exist. A job that
/// waits longer than [`lookahead_wait`] for a slot is released for other workers (issue 36,
/// hole 6), so holding one costs another worker at most that long.
pub(super) fn lookahead_target(concurrency: usize, max: usize, rtt_us: u64, job_us: u64) -> usize {
    if max == 0 {
        return 0;
    }
    if rtt_us == 0 || job_us == 0 {
        return concurrency.min(max);
    }
    let need = (2 * concurrency as u64 * rtt_us).div_ceil(job_us);
    (need.min(max as u64) as usize).max(1)
}

/// How long a job may wait in the look-ahead for a slot before it is released for other
/// workers: four average job run times or claim round trips, from [`LOOKAHEAD_WAIT_MIN`] to
/// [`LOOKAHEAD_WAIT_MAX`] (the look-ahead only holds jobs shorter than two round trips a slot,
/// so a longer wait means a slot is taken by an unusually long job).
pub(super) fn lookahead_wait(rtt_us: u64, job_us: u64) -> Duration {
    Duration::from_micros(4 * rtt_us.max(job_us)).clamp(LOOKAHEAD_WAIT_MIN, LOOKAHEAD_WAIT_MAX)
}

/// The shortest wait [`lookahead_wait`] allows.
const LOOKAHEAD_WAIT_MIN: Duration = Duration::from_millis(20);
/// The longest wait [`lookahead_wait`] allows.
const LOOKAHEAD_WAIT_MAX: Duration = Duration::from_millis(250);
