//! A worker's lanes (issue 40, item 5). A queue given a slot count of its own
//! ([`WorkerBuilder::queue_concurrency`](super::WorkerBuilder::queue_concurrency)) runs in a
//! lane of its own: its own slots, its own claim loop (claims that name only its queue, never
//! for more than its free slots plus its own look-ahead), its own look-ahead or prefetch
//! buffer, its own wake-ups and poll back-off. The worker's other queues share one lane with
//! what is left of `concurrency`. A worker with no such setting is one lane, as before.
//!
//! What the lanes share: the leases and their heartbeat, the completer, the counters, and the
//! unwritten-outcome gate (finished, unwritten outcomes plus running handlers of the whole
//! process stay within its bound, [`AllSlots`]).

use std::collections::HashMap;
use std::sync::Arc;

use chokaq_core::{Error, QueueName, Result, Wake, Wakeups, MAX_CLAIM_LIMIT};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::WorkerConfig;

/// The concurrency a worker gets when none is set (its queues without a count of their own
/// share this many slots when other queues have theirs).
pub(super) const DEFAULT_CONCURRENCY: u32 = 10;

/// One lane: its queues and its share of the worker's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LaneSpec {
    /// Its place in the worker's lanes (outcomes and completions are counted by it).
    pub(super) index: usize,
    pub(super) queues: Vec<QueueName>,
    /// Its slots: a queue's own count, or what the other lanes leave of `concurrency`.
    pub(super) slots: usize,
    /// Its share of `prefetch`, in proportion to its slots (rounded up).
    pub(super) prefetch: usize,
    /// Its share of the look-ahead bound, in proportion to its slots (rounded up).
    pub(super) lookahead_max: usize,
}

/// The look-ahead bound of the whole worker: `lookahead(n)`, else 2 x the unwritten-outcome
/// bound (at most [`MAX_CLAIM_LIMIT`]); 0 with a prefetch.
pub(super) fn lookahead_bound(cfg: &WorkerConfig) -> usize {
    if cfg.prefetch > 0 {
        return 0;
    }
    let default = cfg.unwritten_cap().saturating_mul(2).min(MAX_CLAIM_LIMIT as usize) as u32;
    cfg.lookahead.unwrap_or(default).min(MAX_CLAIM_LIMIT) as usize
}

/// `total` shared out to a lane of `slots` of the worker's `concurrency` (rounded up, so a lane
/// of a worker with a look-ahead has one).
fn share(total: usize, slots: usize, concurrency: usize) -> usize {
    if total == 0 || concurrency == 0 {
        return 0;
    }
    (total * slots).div_ceil(concurrency)
}

/// The lanes of a worker built from `cfg` (checked by [`resolve`]): the shared lane first (the
/// queues without a count of their own, when there are any), then one lane per queue with its
/// own count, in the order of the worker's queues.
pub(super) fn layout(cfg: &WorkerConfig) -> Vec<LaneSpec> {
    let concurrency = cfg.concurrency as usize;
    let (la, pf) = (lookahead_bound(cfg), cfg.prefetch as usize);
    let mut groups: Vec<(Vec<QueueName>, usize)> = Vec::new();
    let shared: Vec<QueueName> =
        cfg.queues.iter().filter(|q| !cfg.queue_concurrency.contains_key(*q)).cloned().collect();
    let own: usize = cfg.queue_concurrency.values().map(|n| *n as usize).sum();
    if !shared.is_empty() || cfg.queues.is_empty() {
        groups.push((shared, concurrency.saturating_sub(own).max(1)));
    }
    for q in &cfg.queues {
        if let Some(n) = cfg.queue_concurrency.get(q) {
            groups.push((vec![q.clone()], *n as usize));
        }
    }
    groups
        .into_iter()
        .enumerate()
        .map(|(index, (queues, slots))| LaneSpec {
            index,
            queues,
            slots,
            prefetch: share(pf, slots, concurrency),
            lookahead_max: share(la, slots, concurrency),
        })
        .collect()
}

/// One lane of all the worker's queues and slots, whatever the queues' own counts: the teeth's
/// broken variant (`Broken::SharedQueueSlots`), the behaviour before issue 40.
pub(super) fn single(cfg: &WorkerConfig) -> Vec<LaneSpec> {
    let concurrency = cfg.concurrency as usize;
    vec![LaneSpec {
        index: 0,
        queues: cfg.queues.clone(),
        slots: concurrency,
        prefetch: cfg.prefetch as usize,
        lookahead_max: lookahead_bound(cfg),
    }]
}

/// Checks the queues' own slot counts (`counts`, as given to the builder: the last one of a
/// queue wins) against the worker's queues and `concurrency`, and records them in `cfg`.
/// `concurrency_set`: the builder was given a concurrency; when it was not and counts are
/// given, the concurrency is their sum, plus [`DEFAULT_CONCURRENCY`] for the queues without
/// one.
pub(super) fn resolve(cfg: &mut WorkerConfig, concurrency_set: bool, counts: Vec<(String, u32)>) -> Result<()> {
    let mut own: HashMap<QueueName, u32> = HashMap::new();
    let names = || cfg.queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(", ");
    for (q, n) in counts {
        let q = QueueName::new(q)?;
        if !cfg.queues.contains(&q) {
            return Err(Error::invalid(format!(
                "queue_concurrency names queue {:?}, which this worker does not claim (its queues: {}); add it with \
                 .queue(...)",
                q.as_str(),
                names()
            )));
        }
        if n == 0 || n > MAX_CLAIM_LIMIT {
            return Err(Error::invalid(format!(
                "the slot count of queue {:?} (queue_concurrency) must be 1 to {MAX_CLAIM_LIMIT}, got {n}",
                q.as_str()
            )));
        }
        own.insert(q, n);
    }
    if own.is_empty() {
        return Ok(());
    }
    if concurrency_set && (cfg.concurrency == 0 || cfg.concurrency > MAX_CLAIM_LIMIT) {
        return Err(Error::invalid(format!("concurrency must be 1 to {MAX_CLAIM_LIMIT}, got {}", cfg.concurrency)));
    }
    let sum: u64 = own.values().map(|n| u64::from(*n)).sum();
    let others: Vec<&str> = cfg.queues.iter().filter(|q| !own.contains_key(*q)).map(QueueName::as_str).collect();
    if !concurrency_set {
        let total = sum + if others.is_empty() { 0 } else { u64::from(DEFAULT_CONCURRENCY) };
        if total > u64::from(MAX_CLAIM_LIMIT) {
            return Err(Error::invalid(format!(
                "the queues' own slot counts add up to {sum}{}: over the most a worker runs at once, \
                 {MAX_CLAIM_LIMIT}; run more workers",
                if others.is_empty() { String::new() } else { format!(", plus {DEFAULT_CONCURRENCY} for the others") }
            )));
        }
        cfg.concurrency = total as u32;
    } else if others.is_empty() && sum != u64::from(cfg.concurrency) {
        return Err(Error::invalid(format!(
            "every queue of the worker has its own slot count, and they add up to {sum}, not the worker's \
             concurrency {}: leave concurrency unset (it is then their sum) or set it to {sum}",
            cfg.concurrency
        )));
    } else if !others.is_empty() && sum >= u64::from(cfg.concurrency) {
        return Err(Error::invalid(format!(
            "the queues' own slot counts add up to {sum}, which leaves none of the worker's concurrency {} for \
             its other queues ({}): raise concurrency to at least {}, or leave it unset",
            cfg.concurrency,
            others.join(", "),
            sum + 1
        )));
    }
    cfg.queue_concurrency = own;
    Ok(())
}

/// Every lane's slots, for the worker-wide count of running handlers (the unwritten-outcome
/// gate counts the whole process).
#[derive(Default)]
pub(super) struct AllSlots {
    lanes: Vec<(Arc<Semaphore>, usize)>,
}

impl AllSlots {
    pub(super) fn new(lanes: Vec<(Arc<Semaphore>, usize)>) -> Self {
        AllSlots { lanes }
    }

    /// Handlers running now in the whole worker (slots taken in every lane).
    pub(super) fn running(&self) -> usize {
        self.lanes.iter().map(|(s, n)| n - s.available_permits().min(*n)).sum()
    }
}

/// Turns the backend's wake-ups into claim-loop wake-ups of the lanes whose queues they name
/// (every lane for `Wake::Any`), until `stop` fires or the stream ends.
pub(super) async fn wake_loop(
    lanes: Vec<(Vec<QueueName>, Arc<Notify>)>,
    mut wakeups: Wakeups,
    stop: CancellationToken,
) {
    loop {
        let w = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            w = wakeups.recv() => w,
        };
        match w {
            Some(Wake::Any) => lanes.iter().for_each(|(_, n)| n.notify_one()),
            Some(Wake::Queue(q)) => {
                for (queues, n) in &lanes {
                    if queues.iter().any(|x| x.as_str() == q) {
                        n.notify_one();
                    }
                }
            }
            None => {
                tracing::info!("wake-up stream ended; polling only");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(queues: &[&str], concurrency: u32, own: &[(&str, u32)]) -> WorkerConfig {
        let mut c = WorkerConfig {
            queues: queues.iter().map(|q| QueueName::new(*q).unwrap()).collect(),
            concurrency,
            ..WorkerConfig::default()
        };
        c.queue_concurrency = own.iter().map(|(q, n)| (QueueName::new(*q).unwrap(), *n)).collect();
        c
    }

    fn shape(lanes: &[LaneSpec]) -> Vec<(Vec<&str>, usize, usize)> {
        lanes.iter().map(|l| (l.queues.iter().map(QueueName::as_str).collect(), l.slots, l.lookahead_max)).collect()
    }

    /// One lane without own counts; with them, the shared lane first with what is left, then
    /// one lane per queue with its own count, the look-ahead bound shared out by slots.
    #[test]
    fn lanes_carve_own_counts_out_of_the_concurrency() {
        // 10 slots: unwritten bound 20, look-ahead bound 40.
        assert_eq!(shape(&layout(&cfg(&["a", "b"], 10, &[]))), [(vec!["a", "b"], 10, 40)]);
        let l = layout(&cfg(&["a", "b", "c"], 10, &[("b", 2), ("c", 3)]));
        assert_eq!(shape(&l), [(vec!["a"], 5, 20), (vec!["b"], 2, 8), (vec!["c"], 3, 12)]);
        assert_eq!(l.iter().map(|l| l.index).collect::<Vec<_>>(), [0, 1, 2]);
        let l = layout(&cfg(&["a", "b"], 5, &[("a", 4), ("b", 1)]));
        assert_eq!(shape(&l), [(vec!["a"], 4, 16), (vec!["b"], 1, 4)]);
        let mut c = cfg(&["a", "b"], 4, &[("a", 1)]);
        c.prefetch = 3;
        let l = layout(&c);
        assert_eq!(
            l.iter().map(|l| (l.slots, l.prefetch, l.lookahead_max)).collect::<Vec<_>>(),
            [(3, 3, 0), (1, 1, 0)]
        );
        assert_eq!(shape(&single(&cfg(&["a", "b"], 5, &[("a", 4), ("b", 1)]))), [(vec!["a", "b"], 5, 20)]);
    }
}
