//! Bad input: hostile text is stored and read back verbatim in every string field; invalid
//! input is a typed InvalidInput error that changes nothing.

use std::time::Duration;

use chokaq_core::{
    BackendExt, ClaimMode, ClaimParams, ErrorKind, FailAction, JobKind, JobLocation, JobTable, LeaseRef,
    ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueName, WorkerId,
};

use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

super::cases!(bad_input:
    nasty_text_roundtrips,
    invalid_jobs_rejected,
    invalid_claim_and_list,
    unknown_and_empty,
    dead_letter_keeps_text,
);

/// Strings that break naive SQL: metacharacters, quotes, backslashes, LIKE wildcards,
/// non-ASCII, emoji, right-to-left text, escapes.
pub const NASTY: &[&str] = &[
    "'; DROP TABLE x; --",
    "\"quoted\" 'single' `tick`",
    "back\\slash \\\\ \\' \\\"",
    "%_ LIKE %% __ [a-z] ^$",
    "Ünïcödé — Москва 東京",
    "emoji 🚀🔥👩‍👩‍👧",
    "RTL שלום עולם مرحبا \u{202e}abc",
    "$1 $$ ? :name @p1 {0} %s",
    "tab\tnew\nline\r\ncr",
    "/* comment */ -- dash ; semi",
];

/// A kind cannot have control, bidi or zero-width characters, nor surrounding whitespace
/// (`docs/contract.md`, "Input limits"): use the nasty strings with those removed.
fn as_kind(s: &str) -> String {
    let k: String = s
        .chars()
        .filter(|c| {
            !c.is_control() && !chokaq_core::validate::is_bidi_control(*c) && !chokaq_core::validate::is_zero_width(*c)
        })
        .collect();
    k.trim().to_string()
}

/// Text fields (tags, idempotency keys, `created_by`) refuse control characters: use the
/// nasty strings with those removed. Payloads and error texts carry them unchanged.
fn as_text(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

/// Every string field of a job carries hostile text; enqueue, get_job and claim return it
/// verbatim; list_jobs filters by such a kind and tag exactly.
pub async fn nasty_text_roundtrips(cx: Ctx) -> CaseResult {
    // Queue names allow only [A-Za-z0-9_.:-]: use all of those characters.
    let q = QueueName::new(format!("{}-A_z.0:9-", cx.queue()))?;
    let mut expected = Vec::new();
    for (i, raw) in NASTY.iter().enumerate() {
        let kind = JobKind::new(as_kind(raw))?;
        let text = as_text(raw);
        let s = text.as_str();
        let key = format!("{s} #{i} {}", q);
        let payload = serde_json::json!({
            "text": raw,
            (*raw): [raw, {"nested": raw}],
            "n": i,
        });
        let job = NewJob::new(q.clone(), kind.clone())
            .json(payload.clone())
            .tags([s.to_string(), format!("t{i}")])
            .idempotency_key(key.clone())
            .created_by(s.to_string());
        let id = cx.enqueue(job).await?;
        let r = cx.record(id).await?;
        ensure_eq!(r.kind, kind, "kind of {s:?}");
        ensure_eq!(r.queue, q, "queue");
        ensure_eq!(r.payload, payload, "payload of {s:?}");
        ensure_eq!(r.tags, vec![s.to_string(), format!("t{i}")], "tags of {s:?}");
        ensure_eq!(r.idempotency_key.as_deref(), Some(key.as_str()), "idempotency key of {s:?}");
        ensure_eq!(r.created_by.as_deref(), Some(s), "created_by of {s:?}");
        let dup = cx.backend.enqueue(NewJob::new(q.clone(), kind.clone()).idempotency_key(key.clone())).await?;
        ensure!(dup.duplicate && dup.id == id, "nasty key {s:?} did not dedupe: {dup:?}");
        expected.push((id, kind, payload, key, i));
    }
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 100, ClaimMode::Start).await?;
    ensure_eq!(got.len(), NASTY.len(), "claimed");
    for (id, kind, payload, key, i) in &expected {
        let j = got.iter().find(|j| j.id == *id).ok_or_else(|| format!("job {id} not claimed"))?;
        let text = as_text(NASTY[*i]);
        let s = text.as_str();
        ensure_eq!(&j.kind, kind, "claimed kind of {s:?}");
        ensure_eq!(&j.payload, payload, "claimed payload of {s:?}");
        ensure_eq!(j.tags, vec![s.to_string(), format!("t{i}")], "claimed tags of {s:?}");
        ensure_eq!(j.idempotency_key.as_deref(), Some(key.as_str()), "claimed key of {s:?}");
        ensure_eq!(j.created_by.as_deref(), Some(s), "claimed created_by of {s:?}");
    }
    // Filters match exactly: a LIKE wildcard or a quote is not a pattern.
    for (id, kind, _, _, i) in &expected {
        let mut f = ListJobsParams::new(JobTable::Hot);
        f.queue = Some(q.clone());
        f.tag = Some(as_text(NASTY[*i]));
        let by_tag: Vec<_> = cx.backend.list_jobs(&f).await?.jobs.iter().map(|r| r.id).collect();
        ensure_eq!(by_tag, vec![*id], "list by tag {:?}", as_text(NASTY[*i]));
        let mut f = ListJobsParams::new(JobTable::Hot);
        f.queue = Some(q.clone());
        f.kind = Some(kind.clone());
        let by_kind: Vec<_> = cx.backend.list_jobs(&f).await?.jobs.iter().map(|r| r.id).collect();
        ensure_eq!(by_kind, vec![*id], "list by kind {kind}");
    }
    // Error text, through fail and read back.
    for (i, j) in got.iter().enumerate() {
        let err = format!("{} #{i}", NASTY[i % NASTY.len()]);
        let out = cx
            .backend
            .fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::from_secs(600), error: err.clone() })
            .await?;
        ensure!(out.done().is_some(), "fail lost its lease");
        ensure_eq!(cx.record(j.id).await?.last_error, Some(err), "last_error");
    }
    Ok(())
}

/// Invalid jobs are rejected with InvalidInput before anything is written: max_attempts 0,
/// empty / too long / too many tags, empty or too long key, NUL in payload text or keys, a
/// payload over the limit, too long created_by. One bad job in a batch rejects the batch.
pub async fn invalid_jobs_rejected(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let base = || cx.job(&q);
    let cases: Vec<(&str, NewJob)> = vec![
        ("max_attempts 0", base().max_attempts(0)),
        ("max_attempts -1", base().max_attempts(-1)),
        ("empty tag", base().tag("")),
        ("tag too long", base().tag("t".repeat(chokaq_core::validate::MAX_TAG_LEN + 1))),
        ("too many tags", base().tags((0..chokaq_core::validate::MAX_TAGS + 1).map(|i| format!("t{i}")))),
        ("empty key", base().idempotency_key("")),
        ("key too long", base().idempotency_key("k".repeat(chokaq_core::validate::MAX_IDEMPOTENCY_KEY_LEN + 1))),
        ("NUL in key", base().idempotency_key("a\0b")),
        ("NUL in tag", base().tag("a\0b")),
        ("newline in tag", base().tag("a\nb")),
        ("ESC in key", base().idempotency_key("a\u{1b}[31mb")),
        ("CR in created_by", base().created_by("a\rb")),
        ("NUL in payload string", base().json(serde_json::json!({"a": "x\u{0}y"}))),
        ("NUL in payload key", base().json(serde_json::json!({"a\u{0}": 1}))),
        (
            "payload over the limit",
            base().json(serde_json::json!("x".repeat(chokaq_core::validate::DEFAULT_MAX_PAYLOAD_BYTES + 10))),
        ),
        ("created_by too long", base().created_by("c".repeat(chokaq_core::validate::MAX_CREATED_BY_LEN + 1))),
    ];
    for (what, job) in cases {
        match cx.backend.enqueue(job.clone()).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "enqueue with {what} ({e})"),
            Ok(o) => return Err(format!("enqueue with {what} was accepted: {o:?}").into()),
        }
        match cx.backend.enqueue_many(vec![base(), job, base()]).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "enqueue_many with {what} ({e})"),
            Ok(o) => return Err(format!("enqueue_many with {what} was accepted: {o:?}").into()),
        }
    }
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(s.pending + s.fetched + s.processing + s.archived + s.dead, 0, "rows written by rejected calls");
    Ok(())
}

/// Bad claim and list parameters are InvalidInput: limit 0, limit over the maximum, no
/// queues, list limit 0; nothing is claimed.
pub async fn invalid_claim_and_list(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 2).await?;
    let w = WorkerId::random();
    let bad = [
        ("limit 0", ClaimParams::new(w, vec![q.clone()], 0, ClaimMode::Start)),
        ("limit over max", ClaimParams::new(w, vec![q.clone()], chokaq_core::MAX_CLAIM_LIMIT + 1, ClaimMode::Start)),
        ("no queues", ClaimParams::new(w, vec![], 5, ClaimMode::Start)),
    ];
    for (what, req) in bad {
        match cx.backend.claim(&req).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "claim with {what} ({e})"),
            Ok(o) => return Err(format!("claim with {what} returned {o:?}").into()),
        }
    }
    ensure_eq!(cx.queue_stats(&q).await?.pending, 2, "pending after rejected claims");
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.limit = 0;
    match cx.backend.list_jobs(&f).await {
        Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "list with limit 0 ({e})"),
        Ok(p) => return Err(format!("list with limit 0 returned {} rows", p.jobs.len()).into()),
    }
    f.limit = 1001;
    match cx.backend.list_jobs(&f).await {
        Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "list with limit 1001 ({e})"),
        Ok(p) => return Err(format!("list with limit 1001 returned {} rows", p.jobs.len()).into()),
    }
    // A tag filter no stored tag can equal (`validate::text_field`, as at enqueue) is
    // refused as bad input on every table, never passed on to the database.
    for table in [JobTable::Hot, JobTable::Archive, JobTable::DeadLetter] {
        for tag in ["a\0b", "", "a\nb", &"t".repeat(chokaq_core::validate::MAX_TAG_LEN + 1)] {
            let mut f = ListJobsParams::new(table);
            f.queue = Some(q.clone());
            f.tag = Some(tag.to_string());
            match cx.backend.list_jobs(&f).await {
                Err(e) => {
                    ensure_eq!(e.kind(), ErrorKind::InvalidInput, "list {table:?} with tag {tag:.20?} ({e})");
                    ensure!(e.message().contains("tag"), "the error of tag {tag:.20?} names the tag: {e}");
                }
                Ok(p) => {
                    return Err(format!("list {table:?} with tag {tag:.20?} returned {} rows", p.jobs.len()).into())
                }
            }
        }
    }
    Ok(())
}

/// Unknown ids and empty lease lists are ordinary outcomes, not errors: empty batches do
/// nothing, unknown leases are lost, an empty batch enqueue returns nothing.
pub async fn unknown_and_empty(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    let out = cx.backend.complete(w, &[]).await?;
    ensure!(out.done.is_empty() && out.lost.is_empty(), "complete of nothing: {out:?}");
    let hb = cx.backend.heartbeat(w, &[]).await?;
    ensure!(hb.held.is_empty() && hb.lost.is_empty(), "heartbeat of nothing: {hb:?}");
    ensure!(cx.backend.enqueue_many(vec![]).await?.is_empty(), "enqueue_many of nothing");
    let ghost = LeaseRef { id: chokaq_core::JobId::new(), lease: chokaq_core::Lease(1) };
    ensure_eq!(cx.backend.release(w, &[ghost]).await?.lost, vec![ghost.id], "release of an unknown job");
    ensure_eq!(cx.backend.start(w, &[ghost]).await?.lost, vec![ghost.id], "start of an unknown job");
    ensure_eq!(cx.backend.heartbeat(w, &[ghost]).await?.lost, vec![ghost.id], "heartbeat of an unknown job");
    let f = cx.backend.fail(w, ghost, FailAction::Cancelled { error: None }).await?;
    ensure!(f.is_lost(), "fail of an unknown job: {f:?}");
    // Bad purge parameters.
    let mut req = PurgeParams::new(PurgeTarget::Archive, Duration::ZERO);
    req.queue = Some(cx.queue());
    req.batch_size = 0;
    match cx.backend.purge(&req).await {
        Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "purge with batch_size 0 ({e})"),
        Ok(n) => ensure_eq!(n, 0, "purge with batch_size 0 deleted rows"),
    }
    Ok(())
}

/// A job's location is always one of the three places, and a dead job carries its text.
pub async fn dead_letter_keeps_text(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let s = NASTY[0];
    let id = cx.enqueue(cx.job(&q).tag(s).idempotency_key(format!("{s}{q}")).json(serde_json::json!({ s: s }))).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let dl = FailAction::DeadLetter { reason: chokaq_core::DeadReason::Failed, error: s.to_string() };
    cx.backend.fail(w, j.lease_ref(), dl).await?.done().ok_or("fail lost")?;
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Dead(chokaq_core::DeadReason::Failed), "location");
    ensure_eq!(r.last_error.as_deref(), Some(s), "error");
    ensure_eq!(r.tags, vec![s.to_string()], "tags");
    ensure_eq!(r.payload, serde_json::json!({ s: s }), "payload");
    ensure_eq!(r.idempotency_key, Some(format!("{s}{q}")), "key");
    Ok(())
}
