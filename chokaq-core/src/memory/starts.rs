//! The starts log of rate-limited queues (issue 25): every start of a rate-limited queue's job
//! is logged in its queue's bucket and, when the job has a concurrency key, in its key's
//! bucket, so that a limit of either kind (and a change of kind) counts every start of its
//! bucket. Each bucket keeps its stamps in order, and a window's count is a binary search
//! (issue 40, L7): its cost grows with the logarithm of the bucket's entries, never with the
//! number of starts in the window (a day's window of a million starts costs a claim about 20
//! comparisons, where the scan it replaces read every entry of every queue).

use std::collections::{HashMap, VecDeque};

use crate::{QueueName, Timestamp};

/// One bucket's stamps, oldest first.
#[derive(Debug, Default)]
struct Bucket(VecDeque<Timestamp>);

impl Bucket {
    /// A stamp in order (at the end, unless the clock went back).
    fn push(&mut self, at: Timestamp, count: usize) {
        let i = self.0.partition_point(|t| *t <= at);
        if i == self.0.len() {
            self.0.extend(std::iter::repeat_n(at, count));
        } else {
            for _ in 0..count {
                self.0.insert(i, at);
            }
        }
    }

    /// How many stamps are later than `since`, and how many stamps the search compared.
    fn after(&self, since: Timestamp) -> (u64, u32) {
        let (mut lo, mut hi, mut probes) = (0usize, self.0.len(), 0u32);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            probes += 1;
            if self.0[mid] <= since {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        ((self.0.len() - lo) as u64, probes)
    }

    /// Drops the stamps at or before `cutoff`.
    fn prune(&mut self, cutoff: Timestamp) {
        let n = self.0.partition_point(|t| *t <= cutoff);
        self.0.drain(..n);
    }
}

/// The log: a bucket per queue, and one per (queue, key).
#[derive(Debug, Default)]
pub(super) struct StartsLog {
    queues: HashMap<QueueName, Bucket>,
    keys: HashMap<(QueueName, String), Bucket>,
}

impl StartsLog {
    /// Logs `count` starts of `queue` (key `key`) stamped `at`.
    pub(super) fn log(&mut self, queue: &QueueName, key: Option<&str>, at: Timestamp, count: usize) {
        self.queues.entry(queue.clone()).or_default().push(at, count);
        if let Some(k) = key {
            self.keys.entry((queue.clone(), k.to_string())).or_default().push(at, count);
        }
    }

    /// The starts of a bucket (the queue's with `key` None, else the key's) stamped after
    /// `since`, and the stamps the count compared.
    pub(super) fn count(&self, queue: &QueueName, key: Option<&str>, since: Timestamp) -> (u64, u32) {
        let bucket = match key {
            None => self.queues.get(queue),
            Some(k) => self.keys.get(&(queue.clone(), k.to_string())),
        };
        bucket.map_or((0, 0), |b| b.after(since))
    }

    /// The latest stamp of a bucket (read by the `testing` feature's `add_starts`).
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn last(&self, queue: &QueueName, key: Option<&str>) -> Option<Timestamp> {
        let bucket = match key {
            None => self.queues.get(queue),
            Some(k) => self.keys.get(&(queue.clone(), k.to_string())),
        };
        bucket.and_then(|b| b.0.back().copied())
    }

    /// Keeps only what a window can still see: per queue, the stamps after its cutoff
    /// (`cutoff(queue)`: now less its window), nothing of a queue without a limit (`None`).
    pub(super) fn prune(&mut self, cutoff: impl Fn(&QueueName) -> Option<Timestamp>) {
        self.queues.retain(|q, b| match cutoff(q) {
            Some(c) => {
                b.prune(c);
                !b.0.is_empty()
            }
            None => false,
        });
        self.keys.retain(|(q, _), b| match cutoff(q) {
            Some(c) => {
                b.prune(c);
                !b.0.is_empty()
            }
            None => false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).expect("valid")
    }

    /// A window's count compares about log2(entries) stamps: 1,000 entries or 1,000,000 in
    /// the window, the count is exact and its cost is the binary search's (at most 11 and 21
    /// comparisons), where the scan it replaces compared every entry of the log.
    #[test]
    fn a_window_is_counted_by_a_binary_search() {
        let q = QueueName::new("q").expect("valid");
        let mut log = StartsLog::default();
        log.log(&q, Some("k"), t(0), 7);
        log.log(&q, Some("k"), t(10), 1_000);
        assert_eq!(log.count(&q, None, t(5)).0, 1_000);
        let small = log.count(&q, Some("k"), t(5)).1;
        log.log(&q, Some("k"), t(20), 999_000);
        let (n, big) = log.count(&q, Some("k"), t(5));
        assert_eq!(n, 1_000_000, "every start after the window's start, none before");
        assert_eq!(log.count(&q, Some("k"), t(15)).0, 999_000);
        assert_eq!(log.count(&q, Some("k"), t(20)).0, 0, "a stamp at the window's start is outside");
        assert_eq!(log.count(&q, Some("other"), t(5)), (0, 0));
        assert!(small <= 11 && big <= 21, "comparisons: {small} for 1,007 entries, {big} for 1,000,007");
        log.prune(|_| Some(t(10)));
        assert_eq!((log.count(&q, None, t(-1)).0, log.last(&q, Some("k"))), (999_000, Some(t(20))));
        log.prune(|_| None);
        assert_eq!(log.count(&q, None, t(-1)).0, 0, "a queue without a limit keeps nothing");
    }

    /// A stamp earlier than the bucket's last (a clock that went back) still lands in order.
    #[test]
    fn an_earlier_stamp_is_kept_in_order() {
        let q = QueueName::new("q").expect("valid");
        let mut log = StartsLog::default();
        log.log(&q, None, t(10), 2);
        log.log(&q, None, t(5), 1);
        assert_eq!(log.count(&q, None, t(6)).0, 2);
        assert_eq!(log.count(&q, None, t(4)).0, 3);
    }
}
