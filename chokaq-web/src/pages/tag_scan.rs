//! The tag filter, scoped (issue 40 L5). No index serves `$1 = ANY (tags)`: a listing by a
//! rare tag read the whole table (6.25 s a request at 1,000,000 archived jobs, and six at once
//! held the dashboard's pool). So the dashboard never sends the tag to the database: it reads
//! the listing without it, in chunks of [`CHUNK`] that are ranges of an index (the primary key,
//! or the queue's or kind's index when those filters are set), keeps the jobs that carry the
//! tag, and stops after [`TAG_SCAN_ROWS`] jobs. The page says how many it searched and its
//! "Next page" goes on from the last one, so an older match is one click further, never a
//! full scan. No index is added to the archive or hot tables (each would cost every job).

use chokaq_core::{Backend, JobPage, ListJobsParams, Result};

/// Jobs searched at most by one request with a tag filter.
pub const TAG_SCAN_ROWS: u32 = 1000;

/// Jobs read per statement while searching.
const CHUNK: u32 = 1000;

/// A listing, with the tag filter applied by the dashboard: the page, and for a tag filter how
/// many jobs were searched. `next` is where the search (or the listing) goes on; None when the
/// listing's end was reached.
pub async fn list(backend: &dyn Backend, l: &ListJobsParams) -> Result<(JobPage, Option<u64>)> {
    let Some(tag) = l.tag.clone() else {
        return Ok((backend.list_jobs(l).await?, None));
    };
    let mut c = l.clone();
    c.tag = None;
    c.limit = CHUNK;
    let mut found = Vec::new();
    let mut searched = 0u64;
    loop {
        let page = backend.list_jobs(&c).await?;
        let n = page.jobs.len();
        for (i, j) in page.jobs.into_iter().enumerate() {
            searched += 1;
            // Where to go on from this job: after it, unless it ends the listing.
            let on = if i + 1 == n && page.next.is_none() { None } else { Some(j.id) };
            if j.tags.contains(&tag) {
                found.push(j);
            }
            if found.len() >= l.limit as usize || searched >= u64::from(TAG_SCAN_ROWS) {
                return Ok((JobPage { jobs: found, next: on }, Some(searched)));
            }
        }
        match page.next {
            Some(n) => c.after = Some(n),
            None => return Ok((JobPage { jobs: found, next: None }, Some(searched))),
        }
    }
}
