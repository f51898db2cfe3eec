//! The `enqueue-unique` workload (issue 42, `docs/unique.md`): `--jobs` unique jobs (unique by
//! arguments, every payload distinct: each key row new) against the same number of plain jobs
//! just before, like with like: same batch (`--enqueue-batch`), same callers
//! (`--enqueue-tasks`), each into a queue of its own. Both queues' rows and the key rows are
//! removed afterwards, so the later workloads find the hot table as the enqueue workload left it.

use chokaq::core::UniqueOpts;
use chokaq::{QueueName, Result};

use super::Bench;
use crate::figures::{Rate, Results};
use crate::other;

/// The two queues of the workload.
const PLAIN_QUEUE: &str = "bench_uniq_plain";
const UNIQUE_QUEUE: &str = "bench_uniq";

impl Bench {
    pub(super) async fn enqueue_unique_workload(&mut self, res: &mut Results) -> Result<()> {
        let n = u64::from(self.args.jobs);
        let (batch, tasks) = (self.args.enqueue_batch, self.args.enqueue_tasks);
        let mut rates = Vec::new();
        for (queue, unique) in [(PLAIN_QUEUE, None), (UNIQUE_QUEUE, Some(UniqueOpts::new().by_args()))] {
            let pb = self.bar(if unique.is_some() { "enqueue-unique" } else { "enqueue (baseline)" }, n);
            let lsn = self.wal_lsn().await?;
            let el = self.enqueue_jobs(&[QueueName::new(queue)?], n, batch, tasks, true, None, unique, &pb).await?;
            let wal = self.wal_since(&lsn).await?;
            pb.finish_with_message("done");
            let (hot, _) = self.hot_counts(queue).await?;
            if hot != n {
                return Err(other(format!("after enqueueing {n} jobs the queue {queue} holds {hot}")));
            }
            rates.push(Rate { jobs: n, secs: el.as_secs_f64(), wal_bytes: wal });
        }
        res.enqueue_unique = rates.pop();
        res.enqueue_unique_baseline = rates.pop();
        let q = self.q();
        self.exec(&format!("DELETE FROM {q}.jobs_hot WHERE queue IN ('{PLAIN_QUEUE}', '{UNIQUE_QUEUE}')")).await?;
        self.exec(&format!("TRUNCATE {q}.uniques")).await?;
        self.vacuum_hot().await?;
        self.exec(&format!("VACUUM (ANALYZE) {q}.uniques")).await
    }
}
