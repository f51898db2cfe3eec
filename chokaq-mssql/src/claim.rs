//! [`chokaq_core::Backend::claim`] and [`chokaq_core::Backend::complete_and_claim`]: the
//! claim's argument encoding and row handling, shared by both, and `complete_and_claim`
//! itself: the completions and the claim in ONE
//! batch and transaction (`sql/claim.rs`), handing the slots the completions freed on to
//! the next jobs of their queues without the counting lock (`docs/sqlserver.md`, "The
//! handoff").

use chokaq_core::{validate, BatchOutcome, ClaimMode, ClaimParams, ClaimedJob, Error, ErrorKind, LeaseRef, QueueName};
use chokaq_core::{Result, WorkerId};
use tiberius::Row;

use crate::backend::{split_decoded, MssqlBackend};
use crate::rows::last_set;
use crate::rows::{decode_claimed, ids_of, leases_json, outcome};

/// The claim's bound values: the queue names as one JSON array, the limit, and `@Mode`
/// (1 reserve, 2 start, 3 hold).
pub(crate) fn claim_args(req: &ClaimParams) -> Result<(String, i32, i16)> {
    let queues: Vec<&str> = req.queues.iter().map(QueueName::as_str).collect();
    let queues = serde_json::to_string(&queues)?;
    let mode: i16 = match req.mode {
        ClaimMode::Reserve => 1,
        ClaimMode::Start => 2,
        ClaimMode::Hold => 3,
    };
    let limit = i32::try_from(req.limit).map_err(|_| Error::invalid("claim limit too large"))?;
    Ok((queues, limit, mode))
}

/// Splits the two result sets of `complete_and_claim`: the ids archived under the given
/// leases, then the claimed rows.
pub(crate) fn split_handoff_sets<R>(op: &str, mut sets: Vec<Vec<R>>) -> Result<(Vec<R>, Vec<R>)> {
    if sets.len() != 2 {
        return Err(Error::new(ErrorKind::Other, format!("{op}: expected 2 result sets, got {}", sets.len())));
    }
    let claimed = sets.pop().unwrap_or_default();
    let done = sets.pop().unwrap_or_default();
    Ok((done, claimed))
}

impl MssqlBackend {
    /// Decodes claimed rows (each on its own: a row that cannot be decoded is dead-lettered,
    /// never fails its neighbours) and returns the jobs in claim order.
    pub(crate) async fn finish_claim(&self, worker: WorkerId, rows: Vec<Row>) -> Vec<ClaimedJob> {
        let (mut jobs, bad) = split_decoded(&rows, decode_claimed);
        for (row, error) in bad {
            self.dead_letter_undecodable(worker, row, &error).await;
        }
        jobs.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.scheduled_at.unwrap_or(a.created_at).cmp(&b.scheduled_at.unwrap_or(b.created_at)))
                .then_with(|| a.id.cmp(&b.id))
        });
        jobs
    }

    /// `Backend::complete_and_claim`: one batch. A call with nothing to complete is a claim;
    /// a call whose completions belong to another worker than its claim makes the two calls.
    pub(crate) async fn complete_and_claim_impl(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        use chokaq_core::Backend;
        req.validate()?;
        validate::lease_list("complete_and_claim", leases)?;
        if leases.is_empty() {
            return Ok((BatchOutcome::default(), self.claim(req).await?));
        }
        if worker != req.worker {
            let done = self.complete(worker, leases).await?;
            return Ok((done, self.claim(req).await?));
        }
        let op = "complete_and_claim";
        let (queues, limit, mode) = claim_args(req)?;
        let json = leases_json(leases);
        let sets = self.run(op, &self.sql().complete_and_claim, &[&json, &worker.0, &queues, &limit, &mode]).await?;
        let (done, claimed) = split_handoff_sets(op, sets)?;
        let done = outcome(leases, &ids_of(op, &done)?);
        Ok((done, self.finish_claim(req.worker, claimed).await))
    }
}

/// [`chokaq_core::Backend::claim`].
pub(crate) async fn claim(b: &MssqlBackend, req_: &ClaimParams) -> Result<Vec<ClaimedJob>> {
    req_.validate()?;
    let (queues, limit, mode) = claim_args(req_)?;
    let sets = b.run("claim", &b.sql().claim, &[&queues, &req_.worker.0, &limit, &mode]).await?;
    Ok(b.finish_claim(req_.worker, last_set(sets)).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_args_encode_queues_limit_and_mode() {
        let w = WorkerId(chokaq_core::uuid::Uuid::new_v4());
        let q = |s: &str| QueueName::new(s).unwrap();
        for (mode, code) in [(ClaimMode::Reserve, 1), (ClaimMode::Start, 2), (ClaimMode::Hold, 3)] {
            let req = ClaimParams::new(w, vec![q("a"), q("b.c:d")], 7, mode);
            let (queues, limit, m) = claim_args(&req).unwrap();
            assert_eq!((queues.as_str(), limit, m), (r#"["a","b.c:d"]"#, 7, code));
        }
    }

    #[test]
    fn the_handoff_answer_is_two_result_sets() {
        assert!(split_handoff_sets::<i32>("x", vec![]).is_err());
        assert!(split_handoff_sets::<i32>("x", vec![vec![]]).is_err());
        assert!(split_handoff_sets::<i32>("x", vec![vec![], vec![], vec![]]).is_err());
        let (done, claimed) = split_handoff_sets::<i32>("x", vec![vec![], vec![]]).unwrap();
        assert!(done.is_empty() && claimed.is_empty());
    }

    /// Issue 37: the handoff's reply as the server sends it (a column-metadata token opening
    /// each of its two result sets, then that set's rows), read by the reply reader and split,
    /// whichever of the two sets is empty. "Completed, claimed nothing" (a dry queue, a paused
    /// queue, a full cap) is rows then an empty set.
    #[test]
    fn the_handoff_reply_splits_whichever_set_is_empty() {
        use crate::reply::{Item, Sets};
        let (done_1, done_2, claimed_1) = (1, 2, 11);
        for (what, items, want_done, want_claimed) in [
            (
                "rows, then an empty set",
                vec![Item::Set, Item::Row(done_1), Item::Row(done_2), Item::Set],
                vec![done_1, done_2],
                vec![],
            ),
            ("an empty set, then rows", vec![Item::Set, Item::Set, Item::Row(claimed_1)], vec![], vec![claimed_1]),
            ("an empty set, then an empty set", vec![Item::Set, Item::Set], vec![], vec![]),
            (
                "rows, then rows",
                vec![Item::Set, Item::Row(done_1), Item::Set, Item::Row(claimed_1)],
                vec![done_1],
                vec![claimed_1],
            ),
        ] {
            let got = split_handoff_sets("complete_and_claim", Sets::of(items));
            let (done, claimed) = got.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!((done, claimed), (want_done, want_claimed), "{what}");
        }
    }
}
