//! Filtered, keyset-paged listings of one table.

use serde::{Deserialize, Serialize};

use crate::{JobId, JobKind, JobRecord, JobStatus, QueueName, Timestamp};

/// Which table [`Backend::list_jobs`](crate::Backend::list_jobs) reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobTable {
    Hot,
    Archive,
    DeadLetter,
}

/// A filtered, keyset-paged listing. Jobs come in id order (= creation order); pass the
/// previous page's `next` as `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListJobsParams {
    pub table: JobTable,
    pub queue: Option<QueueName>,
    /// Hot table only.
    pub status: Option<JobStatus>,
    pub kind: Option<JobKind>,
    pub tag: Option<String>,
    pub created_from: Option<Timestamp>,
    pub created_to: Option<Timestamp>,
    pub after: Option<JobId>,
    /// 1 to 1000.
    pub limit: u32,
    /// List the jobs without their payloads (each reads as JSON `null`): a dashboard's page of
    /// 1000 jobs then never carries 1000 payloads of up to a MiB each. Default false.
    pub without_payloads: bool,
}

impl ListJobsParams {
    /// Everything in `table`, 100 a page.
    pub fn new(table: JobTable) -> Self {
        ListJobsParams {
            table,
            queue: None,
            status: None,
            kind: None,
            tag: None,
            created_from: None,
            created_to: None,
            after: None,
            limit: 100,
            without_payloads: false,
        }
    }
}

/// A page of [`Backend::list_jobs`](crate::Backend::list_jobs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobPage {
    pub jobs: Vec<JobRecord>,
    /// The cursor for the next page; None on the last page.
    pub next: Option<JobId>,
}
