//! Paging of the job lists: where the page is ("1–50 of 595"), a previous page, the first
//! page and the next one, over the backends' keyset paging (`after` an id).
//!
//! Keyset paging has no "before": the way back is the trail of the `after` cursors of the
//! pages already seen, carried in the links (`trail=`, oldest first, `start` for the first
//! page). The total comes from one listing of at most [`COUNT_CAP`] ids (no payloads): exact
//! below it, shown as "1,000+" (a lower bound) from it on.

use std::fmt::Write;

use chokaq_core::{Backend, JobId, JobPage, ListJobsParams, Result};

use super::Params;
use crate::html::{esc, num};
use crate::Ctx;

/// Jobs counted at most for a list's total.
pub const COUNT_CAP: u32 = 1000;

/// Pages remembered for "Previous page" (older ones drop out; the first page stays reachable).
const MAX_TRAIL: usize = 100;

/// The `after` cursors of the pages before this one, oldest first (`None`: the first page).
#[derive(Debug, Clone, Default)]
pub struct Trail(Vec<Option<JobId>>);

impl Trail {
    /// From the `trail` parameter; anything that is not a list of ids (or `start`) is ignored.
    pub fn parse(p: &Params) -> Trail {
        let Some(t) = p.get("trail").filter(|t| !t.is_empty()) else { return Trail::default() };
        let mut out = Vec::new();
        for part in t.split(',').take(MAX_TRAIL) {
            match part {
                "start" => out.push(None),
                id => match id.parse::<JobId>() {
                    Ok(id) => out.push(Some(id)),
                    Err(_) => return Trail::default(),
                },
            }
        }
        Trail(out)
    }

    fn render(v: &[Option<JobId>]) -> String {
        v.iter().map(|a| a.map_or_else(|| "start".to_string(), |id| id.to_string())).collect::<Vec<_>>().join(",")
    }
}

/// How many jobs the list holds from its start (ignoring `after`), up to [`COUNT_CAP`]:
/// (count, whether it stopped at the cap).
pub async fn total(backend: &dyn Backend, l: &ListJobsParams) -> Result<(u64, bool)> {
    let mut c = l.clone();
    c.after = None;
    c.limit = COUNT_CAP;
    c.without_payloads = true;
    let page = backend.list_jobs(&c).await?;
    Ok((page.jobs.len() as u64, page.next.is_some()))
}

/// "1–50 of 595", then the links: first page, previous page, next page.
pub fn pager(
    ctx: &Ctx,
    path: &str,
    query: &str,
    l: &ListJobsParams,
    page: &JobPage,
    trail: &Trail,
    total: Option<(u64, bool)>,
) -> String {
    let b = esc(&ctx.base);
    let sep = if query.is_empty() { "" } else { "&amp;" };
    let mut s = String::from("<nav class=\"pager\">");
    // The trail is complete when it reaches back to the first page: the position is exact.
    let known = l.after.is_none() || trail.0.first() == Some(&None);
    let first = if l.after.is_none() { 0 } else { trail.0.len() as u64 * u64::from(l.limit) };
    let shown = page.jobs.len() as u64;
    let Some((n, capped)) = total else {
        // Not counted (a tag filter: counting would read the whole table).
        let _ = write!(s, "<span class=\"pager-info\" id=\"page-info\">{} shown</span>", num(shown));
        return links(s, &b, path, query, sep, l, page, trail);
    };
    let of = if capped {
        format!("<span class=\"est\" title=\"counting stops at {}\">{}+</span>", num(u64::from(COUNT_CAP)), num(n))
    } else {
        num(n)
    };
    if shown == 0 {
        let _ = write!(s, "<span class=\"pager-info\" id=\"page-info\">none of {of}</span>");
    } else if known {
        let _ = write!(
            s,
            "<span class=\"pager-info\" id=\"page-info\">{}–{} of {of}</span>",
            num(first + 1),
            num(first + shown)
        );
    } else {
        let _ = write!(s, "<span class=\"pager-info\" id=\"page-info\">{} shown of {of}</span>", num(shown));
    }
    links(s, &b, path, query, sep, l, page, trail)
}

/// The pager's links (first, previous, next page) after its position, and its end.
#[allow(clippy::too_many_arguments)]
fn links(
    mut s: String,
    b: &str,
    path: &str,
    query: &str,
    sep: &str,
    l: &ListJobsParams,
    page: &JobPage,
    trail: &Trail,
) -> String {
    if l.after.is_some() {
        let _ = write!(s, "<a href=\"{b}{path}?{query}\" id=\"first-page\">« First page</a>");
        let prev = match trail.0.split_last() {
            Some((Some(a), rest)) => format!("{sep}after={a}&amp;trail={}", Trail::render(rest)),
            _ => String::new(),
        };
        let _ = write!(s, "<a href=\"{b}{path}?{query}{prev}\" id=\"prev-page\" rel=\"prev\">‹ Previous page</a>");
    }
    if let Some(next) = page.next {
        let mut t = trail.0.clone();
        t.push(l.after);
        if t.len() > MAX_TRAIL {
            t.remove(0);
        }
        let _ = write!(
            s,
            "<a href=\"{b}{path}?{query}{sep}after={next}&amp;trail={}\" id=\"next-page\" rel=\"next\">Next page »</a>",
            Trail::render(&t)
        );
    }
    s.push_str("</nav>");
    s
}
