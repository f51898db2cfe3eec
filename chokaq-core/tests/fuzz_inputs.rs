//! Fuzz-style input tests (issue 16, acceptance): random and adversarial values (deep JSON,
//! long and odd Unicode with bidi, zero-width and control characters, extreme numbers,
//! timestamps and durations) go through the `NewJob` builders and validation, queue controls
//! on the memory backend, and `RetryPolicy`.
//!
//! Every input must end in `Ok` or a typed `InvalidInput` error, never a panic, and every job
//! the memory backend accepts must read back: `get_job` finds it, it can be claimed, and the
//! record survives a trip through serde_json's reader (which is what a database backend does
//! with the payload on every claim).
//!
//! Plain `#[test]`s with a seeded RNG, so a failure names its seed and iteration and can be
//! replayed. `CHOKAQ_FUZZ_ITERATIONS` sets the number of inputs per test (default 2,000, a
//! few seconds in a debug build); `CHOKAQ_FUZZ_SEED` sets the seed.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use chokaq_core::memory::MemoryBackend;
use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::validate;
use chokaq_core::{
    Backend, BackendExt, ClaimMode, ClaimParams, ClaimedJob, ErrorKind, FailAction, Fenced, JobKind, JobRecord, NewJob,
    QueueControl, QueueName, RescueParams, Result, RetryPolicy, Timestamp, WorkerId, ZombiePolicy,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

fn iterations() -> usize {
    std::env::var("CHOKAQ_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

fn rng(test: u64) -> (StdRng, u64) {
    let seed = std::env::var("CHOKAQ_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_c0ca_0000_0016);
    (StdRng::seed_from_u64(seed ^ test), seed)
}

/// Ok, or an `InvalidInput` error; anything else fails the test with `what`.
fn ok_or_invalid<T: std::fmt::Debug>(r: &Result<T>, what: &dyn std::fmt::Display) {
    if let Err(e) = r {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{what}: {e}");
    }
}

/// Runs `f`, turning a panic into a test failure that names the input.
fn no_panic<T>(what: &dyn std::fmt::Display, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("panicked on {what}: {msg}")
        }
    }
}

// ---------------------------------------------------------------------------------------
// Generators.

/// Characters chosen to hurt: controls (C0, DEL, C1), bidi controls, zero-width characters,
/// line separators, combining marks, non-characters, wide and astral characters.
const ODD_CHARS: &[char] = &[
    '\0',
    '\t',
    '\n',
    '\r',
    '\u{7}',
    '\u{8}',
    '\u{b}',
    '\u{c}',
    '\u{1b}',
    '\u{1f}',
    '\u{7f}',
    '\u{80}',
    '\u{85}',
    '\u{9f}',
    '\u{202A}',
    '\u{202B}',
    '\u{202C}',
    '\u{202D}',
    '\u{202E}',
    '\u{2066}',
    '\u{2067}',
    '\u{2068}',
    '\u{2069}',
    '\u{061C}',
    '\u{200B}',
    '\u{200C}',
    '\u{200D}',
    '\u{200E}',
    '\u{200F}',
    '\u{FEFF}',
    '\u{2028}',
    '\u{2029}',
    '\u{0301}',
    '\u{FFFD}',
    '\u{FFFF}',
    '\u{10FFFF}',
    '\u{E000}',
    ' ',
    '\u{A0}',
    '\u{3000}',
    '\'',
    '"',
    '\\',
    '%',
    '_',
    ';',
    '-',
    '.',
    ':',
    'é',
    'ß',
    'ш',
    'ש',
    'م',
    '東',
    '🚀',
    '👩',
];

fn odd_char(r: &mut StdRng) -> char {
    match r.gen_range(0..10) {
        0..=3 => ODD_CHARS[r.gen_range(0..ODD_CHARS.len())],
        4..=7 => r.gen_range(b'a'..=b'z') as char,
        8 => r.gen_range(b' '..=b'~') as char,
        _ => r.gen::<char>(),
    }
}

fn odd_string(r: &mut StdRng) -> String {
    let len = match r.gen_range(0..20) {
        0 => 0,
        1..=12 => r.gen_range(1..16),
        13..=16 => r.gen_range(16..130),
        17 | 18 => r.gen_range(90..300),
        _ => r.gen_range(300..2_000),
    };
    (0..len).map(|_| odd_char(r)).collect()
}

/// Text that passes the text rules about half the time: odd strings with the characters those
/// rules refuse dropped (bidi and zero-width characters stay: text fields allow them).
fn text(r: &mut StdRng) -> String {
    let s = odd_string(r);
    if r.gen_bool(0.5) {
        s.chars().filter(|c| !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}')).collect()
    } else {
        s
    }
}

/// Mostly valid names with an odd character or length now and then.
fn maybe_valid_name(r: &mut StdRng, base: &str) -> String {
    match r.gen_range(0..6) {
        0 => odd_string(r),
        1 => format!("{base}{}", odd_char(r)),
        2 => base.repeat(r.gen_range(1..80)),
        _ => format!("{base}.{}", r.gen_range(0..50)),
    }
}

fn extreme_number(r: &mut StdRng) -> Value {
    let n: serde_json::Number = match r.gen_range(0..12) {
        0 => i64::MIN.into(),
        1 => i64::MAX.into(),
        2 => u64::MAX.into(),
        3 => 0.into(),
        4 => serde_json::Number::from_f64(f64::MAX).unwrap_or(0.into()),
        5 => serde_json::Number::from_f64(f64::MIN_POSITIVE).unwrap_or(0.into()),
        6 => serde_json::Number::from_f64(5e-324).unwrap_or(0.into()),
        7 => serde_json::Number::from_f64(-0.0).unwrap_or(0.into()),
        8 => serde_json::Number::from_f64(1e308).unwrap_or(0.into()),
        9 => r.gen::<i64>().into(),
        10 => r.gen::<u64>().into(),
        _ => serde_json::Number::from_f64(r.gen::<f64>() * 1e12).unwrap_or(0.into()),
    };
    Value::Number(n)
}

fn nested(depth: usize, leaf: Value, arrays: bool) -> Value {
    let mut v = leaf;
    for i in 0..depth {
        v = if arrays || i % 2 == 0 {
            Value::Array(vec![v])
        } else {
            Value::Object([("k".to_string(), v)].into_iter().collect())
        };
    }
    v
}

fn odd_json(r: &mut StdRng, budget: usize) -> Value {
    match r.gen_range(0..14) {
        0 => Value::Null,
        1 => Value::Bool(r.gen()),
        2 | 3 => extreme_number(r),
        4..=6 => Value::String(odd_string(r)),
        7 if budget > 0 => Value::Array((0..r.gen_range(0..6)).map(|_| odd_json(r, budget - 1)).collect()),
        8 if budget > 0 => {
            Value::Object((0..r.gen_range(0..6)).map(|_| (odd_string(r), odd_json(r, budget - 1))).collect())
        }
        9 => {
            // Around the depth limit and serde_json's reader limit (128), and far past them.
            let depth = [1, 30, 62, 63, 64, 65, 66, 100, 126, 127, 128, 129, 130, 200, 1_000][r.gen_range(0..15)];
            let leaf = odd_json(r, 0);
            nested(depth, leaf, r.gen())
        }
        10 if r.gen_bool(0.25) => {
            // Around the payload size limit (1 MiB); rare, as it is slow in a debug build.
            let len = [1_048_000, 1_048_570, 1_048_574, 1_048_575, 1_048_576, 1_100_000][r.gen_range(0..6)];
            Value::String("x".repeat(len))
        }
        _ => Value::Array((0..r.gen_range(0..50)).map(|_| extreme_number(r)).collect()),
    }
}

fn extreme_duration(r: &mut StdRng) -> Duration {
    const DAY: u64 = 86_400;
    match r.gen_range(0..16) {
        0 => Duration::ZERO,
        1 => Duration::from_nanos(1),
        2 => Duration::from_micros(999),
        3 => Duration::from_millis(1),
        4 => Duration::from_secs(1),
        5 => Duration::from_secs(3_600),
        6 => Duration::from_secs(30 * DAY),
        7 => Duration::from_secs(30 * DAY + 1),
        8 => Duration::from_secs(36_500 * DAY),
        9 => Duration::from_secs(36_501 * DAY),
        10 => Duration::from_secs(u64::MAX),
        11 => Duration::MAX,
        12 => Duration::from_secs(i64::MAX as u64),
        13 => Duration::new(r.gen(), r.gen_range(0..1_000_000_000)),
        _ => Duration::from_millis(r.gen_range(0..10_000_000)),
    }
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, us: u32) -> Timestamp {
    chrono::NaiveDate::from_ymd_opt(y, mo, d).unwrap().and_hms_micro_opt(h, mi, s, us).unwrap().and_utc()
}

fn extreme_timestamp(r: &mut StdRng) -> Timestamp {
    match r.gen_range(0..9) {
        0 => Timestamp::MIN_UTC,
        1 => Timestamp::MAX_UTC,
        2 => utc(1, 1, 1, 0, 0, 0, 0),
        3 => utc(9999, 12, 31, 23, 59, 59, 999_999),
        4 => utc(10_000, 1, 1, 0, 0, 0, 0),
        5 => utc(0, 12, 31, 23, 59, 59, 0),
        6 => utc(1970, 1, 1, 0, 0, 0, 0),
        _ => chrono::Utc::now() + chrono::Duration::seconds(r.gen_range(-1_000_000..1_000_000)),
    }
}

fn extreme_i32(r: &mut StdRng) -> i32 {
    match r.gen_range(0..6) {
        0 => i32::MIN,
        1 => i32::MAX,
        2 => 0,
        3 => -1,
        4 => 1,
        _ => r.gen(),
    }
}

fn random_job(r: &mut StdRng) -> Result<NewJob> {
    let queue = QueueName::new(maybe_valid_name(r, "q"));
    ok_or_invalid(&queue, &"QueueName::new");
    let kind = JobKind::new(maybe_valid_name(r, "k"));
    ok_or_invalid(&kind, &"JobKind::new");
    let queue = queue.unwrap_or_else(|_| QueueName::new("fallback").unwrap());
    let kind = kind.unwrap_or_else(|_| JobKind::new("fallback.v1").unwrap());
    let mut job = NewJob::new(queue, kind);
    job = match r.gen_range(0..5) {
        0 => {
            // Through the serializing builder; a map with non-string keys cannot be JSON.
            let mut m = BTreeMap::new();
            m.insert((1, 2), odd_string(r));
            let res = job.clone().payload(&m);
            ok_or_invalid(&res, &"payload with non-string keys");
            job.payload(&odd_string(r))?
        }
        1 => job.payload(&f64::NAN)?,
        _ => job.json(odd_json(r, 3)),
    };
    if r.gen_bool(0.5) {
        job = job.priority(extreme_i32(r));
    }
    if r.gen_bool(0.3) {
        job = job.max_attempts(extreme_i32(r));
    }
    match r.gen_range(0..6) {
        0 => job = job.delay(extreme_duration(r)),
        1 => job = job.run_at(extreme_timestamp(r)),
        _ => {}
    }
    if r.gen_bool(0.5) {
        job = job.idempotency_key(text(r));
    }
    for _ in 0..r.gen_range(0..3) {
        job = job.tag(text(r));
    }
    if r.gen_bool(0.1) {
        job = job.tags((0..r.gen_range(30..40)).map(|i| format!("t{i}")));
    }
    if r.gen_bool(0.4) {
        job = job.created_by(text(r));
    }
    Ok(job)
}

/// Equal, except that a float may come back a few units in the last place off: serde_json's
/// reader (without its `float_roundtrip` feature) does not always find the closest f64.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            x == y || (x - y).abs() <= x.abs().max(y.abs()) * 1e-15
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((kx, x), (ky, y))| kx == ky && same_json(x, y))
        }
        _ => a == b,
    }
}

/// The read side of a database backend: the record goes out as JSON and back through
/// serde_json's reader, into the typed record.
fn json_round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(v: &T) {
    let text = serde_json::to_string(v).expect("serialize");
    let back: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("does not read back: {e}"));
    let (v, back) = (serde_json::to_value(v).expect("to_value"), serde_json::to_value(&back).expect("to_value"));
    assert!(same_json(&v, &back), "changed on the way back:\n{v}\n{back}");
}

// ---------------------------------------------------------------------------------------
// Tests.

/// Random jobs through the builders, `NewJob::validate` and the memory backend: each is
/// accepted or a typed `InvalidInput`; each accepted job is read back, claimed, and survives
/// serde_json's reader.
#[tokio::test]
async fn new_jobs_are_accepted_and_read_back_or_rejected() {
    let (mut r, seed) = rng(1);
    let b = MemoryBackend::new();
    let w = WorkerId::random();
    let (mut accepted, mut rejected) = (0usize, 0usize);
    for i in 0..iterations() {
        let what = format!("seed {seed} iteration {i}");
        let job = no_panic(&what, || random_job(&mut r));
        ok_or_invalid(&job, &what);
        let Ok(job) = job else {
            rejected += 1;
            continue;
        };
        let checked = no_panic(&what, || job.validate(validate::DEFAULT_MAX_PAYLOAD_BYTES));
        ok_or_invalid(&checked, &what);
        let enq = b.enqueue(job.clone()).await;
        ok_or_invalid(&enq, &what);
        assert_eq!(checked.is_ok(), enq.is_ok(), "{what}: validate and enqueue disagree: {checked:?} {enq:?}");
        let Ok(enq) = enq else {
            rejected += 1;
            continue;
        };
        accepted += 1;
        assert!(!enq.duplicate, "{what}: no other job is live");
        let rec = b.get_job(enq.id).await.unwrap_or_else(|e| panic!("{what}: get_job: {e}"));
        let rec: JobRecord = rec.unwrap_or_else(|| panic!("{what}: get_job found nothing"));
        assert_eq!(rec.payload, job.payload, "{what}");
        assert_eq!(rec.tags, job.tags, "{what}");
        assert_eq!(rec.idempotency_key, job.idempotency_key, "{what}");
        assert_eq!(rec.created_by, job.created_by, "{what}");
        no_panic(&what, || json_round_trip(&rec));
        // Due now, so the claim takes it.
        b.force(enq.id, &JobPatch { scheduled_at: Some(None), ..Default::default() }).await.unwrap();
        let got = b.claim(&ClaimParams::new(w, vec![job.queue.clone()], 10, ClaimMode::Start)).await;
        let got: Vec<ClaimedJob> = got.unwrap_or_else(|e| panic!("{what}: claim: {e}"));
        assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![enq.id], "{what}: claimed");
        no_panic(&what, || json_round_trip(&got[0]));
        assert_eq!(b.complete_one(w, got[0].lease_ref()).await.unwrap(), Fenced::Done(()), "{what}");
    }
    // Both sides must be exercised for the test to mean anything.
    eprintln!("accepted {accepted}, rejected {rejected}");
    assert!(accepted > iterations() / 20 && rejected > iterations() / 20, "accepted {accepted}, rejected {rejected}");
}

/// Random batches mixing good and bad jobs: a batch is all written or, with one bad job in
/// it, a typed error that writes nothing.
#[tokio::test]
async fn batches_are_all_or_nothing() {
    let (mut r, seed) = rng(2);
    let b = MemoryBackend::new();
    for i in 0..iterations() / 20 {
        let what = format!("seed {seed} batch {i}");
        let jobs: Vec<NewJob> = (0..r.gen_range(0..12)).filter_map(|_| random_job(&mut r).ok()).collect();
        let any_bad = jobs.iter().any(|j| j.validate(validate::DEFAULT_MAX_PAYLOAD_BYTES).is_err());
        let before = b.stats().await.unwrap().total();
        let out = b.enqueue_many(jobs.clone()).await;
        ok_or_invalid(&out, &what);
        let after = b.stats().await.unwrap().total();
        match out {
            Err(_) => assert_eq!(after, before, "{what}: a rejected batch wrote rows"),
            Ok(out) => {
                assert!(!any_bad, "{what}: a batch with an invalid job was accepted");
                assert_eq!(out.len(), jobs.len(), "{what}");
                for e in out {
                    let rec = b.get_job(e.id).await.unwrap().unwrap_or_else(|| panic!("{what}: lost"));
                    no_panic(&what, || json_round_trip(&rec));
                }
            }
        }
    }
}

fn random_control(r: &mut StdRng) -> QueueControl {
    match r.gen_range(0..8) {
        0 => QueueControl::Pause,
        1 => QueueControl::Resume,
        2 => QueueControl::Activate,
        3 => QueueControl::Deactivate,
        4 => QueueControl::SetMaxWorkers(
            [
                None,
                Some(0),
                Some(1),
                Some(1_000_000),
                Some(1_000_001),
                Some(i32::MAX as u32),
                Some(u32::MAX),
                Some(r.gen()),
            ][r.gen_range(0..8)],
        ),
        5 | 6 => QueueControl::SetZombieTimeout(if r.gen_bool(0.1) { None } else { Some(extreme_duration(r)) }),
        _ => QueueControl::SetZombiePolicy(if r.gen() { ZombiePolicy::Retry } else { ZombiePolicy::DeadLetter }),
    }
}

/// Random queue controls on the memory backend: each is stored or a typed `InvalidInput`
/// that stores nothing, and whatever is stored leaves rescue and claim working.
#[tokio::test]
async fn queue_controls_are_stored_or_rejected_and_never_break_rescue() {
    let (mut r, seed) = rng(3);
    let b = MemoryBackend::new();
    let q = QueueName::new("ctl").unwrap();
    let w = WorkerId::random();
    b.enqueue(NewJob::new(q.clone(), JobKind::new("k.v1").unwrap())).await.unwrap();
    let started = b.claim(&ClaimParams::new(w, vec![q.clone()], 1, ClaimMode::Start)).await.unwrap();
    assert_eq!(started.len(), 1);
    for i in 0..iterations() {
        let control = random_control(&mut r);
        let what = format!("seed {seed} iteration {i}: {control:?}");
        let before = b.queue_settings(&q).await.unwrap();
        let checked = no_panic(&what, || control.validate());
        ok_or_invalid(&checked, &what);
        let out = b.control_queue(&q, control).await;
        ok_or_invalid(&out, &what);
        assert_eq!(checked.is_ok(), out.is_ok(), "{what}: QueueControl::validate and control_queue disagree");
        if out.is_err() {
            assert_eq!(b.queue_settings(&q).await.unwrap(), before, "{what}: a rejected control changed the row");
        }
        let rescue = b.rescue(&RescueParams::default()).await;
        assert!(rescue.is_ok(), "{what}: rescue after it: {rescue:?}");
        let claim = b.claim(&ClaimParams::new(w, vec![q.clone()], 5, ClaimMode::Reserve)).await;
        assert!(claim.is_ok(), "{what}: claim after it: {claim:?}");
    }
}

fn random_policy(r: &mut StdRng) -> RetryPolicy {
    let float = |r: &mut StdRng| -> f64 {
        [0.0, -1.0, 0.5, 1.0, 2.0, 1e10, 1e308, f64::MAX, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE]
            [r.gen_range(0..12)]
    };
    RetryPolicy {
        base: extreme_duration(r),
        factor: if r.gen_bool(0.5) { float(r) } else { r.gen_range(1.0..4.0) },
        max: extreme_duration(r),
        jitter: if r.gen_bool(0.5) { float(r) } else { r.gen_range(0.0..1.0) },
    }
}

/// Random retry policies: `delay` never panics and never exceeds `max`, and every delay it
/// gives is one the memory backend's `fail` accepts.
#[tokio::test]
async fn retry_policies_never_panic() {
    let (mut r, seed) = rng(4);
    let b = MemoryBackend::new();
    let q = QueueName::new("retry").unwrap();
    let w = WorkerId::random();
    for i in 0..iterations() {
        let p = random_policy(&mut r);
        let attempt = extreme_i32(&mut r);
        let what = format!("seed {seed} iteration {i}: {p:?} attempt {attempt}");
        let d = no_panic(&what, || p.delay(attempt));
        let n = no_panic(&what, || p.nominal_delay(attempt));
        assert!(d <= p.max && n <= p.max, "{what}: {d:?} / {n:?} over max");
        assert!(d <= validate::MAX_DELAY, "{what}: {d:?} over MAX_DELAY");
        let checked = no_panic(&what, || p.validate());
        ok_or_invalid(&checked, &what);
        let built = RetryPolicy::new(p.base, p.factor, p.max, p.jitter);
        assert_eq!(built.is_ok(), checked.is_ok(), "{what}: new and validate disagree");
        if checked.is_ok() {
            // A valid policy's delays grow with the attempt, up to max, jitter aside.
            let a = attempt.clamp(1, 100);
            assert!(p.nominal_delay(a) <= p.nominal_delay(a + 1), "{what}: nominal delay shrinks");
            assert!(p.nominal_delay(a) >= p.base.min(p.max), "{what}: nominal delay under base");
        }
        if i % 20 == 0 {
            b.enqueue(NewJob::new(q.clone(), JobKind::new("k.v1").unwrap())).await.unwrap();
            let got = b.claim(&ClaimParams::new(w, vec![q.clone()], 1, ClaimMode::Start)).await.unwrap();
            let out = b.fail(w, got[0].lease_ref(), FailAction::Retry { delay: d, error: what.clone() }).await;
            assert!(out.is_ok(), "{what}: fail with the policy's delay {d:?}: {out:?}");
            b.cancel(got[0].id).await.unwrap();
        }
    }
}

/// Random fail actions with extreme delays and error texts: `FailAction::validate` and the
/// memory backend's `fail` agree, a refused action writes nothing, and a stored error text is
/// cut to its limit with no NUL.
#[tokio::test]
async fn fail_actions_are_applied_or_rejected() {
    let (mut r, seed) = rng(5);
    let b = MemoryBackend::new();
    let q = QueueName::new("fail").unwrap();
    let w = WorkerId::random();
    for i in 0..iterations() / 4 {
        let error = if r.gen_bool(0.1) { "\0é".repeat(r.gen_range(2_000..6_000)) } else { odd_string(&mut r) };
        let action = match r.gen_range(0..4) {
            0 => FailAction::Retry { delay: extreme_duration(&mut r), error },
            1 => FailAction::Snooze { delay: extreme_duration(&mut r) },
            2 => FailAction::DeadLetter { reason: chokaq_core::DeadReason::Failed, error },
            _ => FailAction::Cancelled { error: r.gen::<bool>().then_some(error) },
        };
        let what =
            format!("seed {seed} iteration {i}: {}", format!("{action:?}").chars().take(200).collect::<String>());
        let id = b.enqueue(NewJob::new(q.clone(), JobKind::new("k.v1").unwrap())).await.unwrap().id;
        let got = b.claim(&ClaimParams::new(w, vec![q.clone()], 1, ClaimMode::Start)).await.unwrap();
        assert_eq!(got.len(), 1, "{what}");
        let checked = no_panic(&what, || action.validate());
        ok_or_invalid(&checked, &what);
        let out = b.fail(w, got[0].lease_ref(), action).await;
        ok_or_invalid(&out, &what);
        assert_eq!(checked.is_ok(), out.is_ok(), "{what}: FailAction::validate and fail disagree: {out:?}");
        let rec = b.get_job(id).await.unwrap().unwrap();
        if out.is_err() {
            assert_eq!(rec.location, chokaq_core::JobLocation::Hot(chokaq_core::JobStatus::Processing), "{what}");
            let stop = b.fail(w, got[0].lease_ref(), FailAction::Cancelled { error: None }).await.unwrap();
            assert!(stop.done().is_some(), "{what}");
        } else if let Some(e) = &rec.last_error {
            assert!(
                e.len() <= validate::MAX_ERROR_LEN && !e.contains('\0'),
                "{what}: stored error of {} bytes",
                e.len()
            );
        }
        if rec.location == chokaq_core::JobLocation::Hot(chokaq_core::JobStatus::Pending) {
            b.cancel(id).await.unwrap();
        }
        let rec = b.get_job(id).await.unwrap().unwrap_or_else(|| panic!("{what}: lost"));
        no_panic(&what, || json_round_trip(&rec));
    }
}

/// Odd strings through every name and text rule: no panic, and what is accepted is free of
/// what the rule refuses; an accepted schema name is no reserved name and every identifier
/// derived from it fits 63 bytes; a duration check never panics.
#[test]
fn names_text_and_durations_follow_their_rules() {
    let (mut r, seed) = rng(6);
    for i in 0..iterations() * 2 {
        let s = match r.gen_range(0..4) {
            0 => maybe_valid_name(&mut r, "s"),
            1 => ["public", "PUBLIC", "pg_x", "Pg_Catalog", "dbo", "SYS", "guest", "information_schema", "chokaq"]
                [r.gen_range(0..9)]
            .to_string(),
            _ => odd_string(&mut r),
        };
        let what = format!("seed {seed} iteration {i}: {s:?}");
        if no_panic(&what, || validate::schema_name(&s)).is_ok() {
            let lower = s.to_ascii_lowercase();
            assert!(!validate::RESERVED_SCHEMA_NAMES.contains(&lower.as_str()) && !lower.starts_with("pg_"), "{what}");
            assert!(format!("{s}_jobs").len() <= 63 && format!("chokaq:{s}").len() <= 63, "{what}");
        }
        if no_panic(&what, || validate::job_kind(&s)).is_ok() {
            assert!(
                !s.chars().any(|c| c.is_control() || validate::is_bidi_control(c) || validate::is_zero_width(c)),
                "{what}"
            );
        }
        if no_panic(&what, || validate::text_field("tag", &s, validate::MAX_TAG_LEN)).is_ok() {
            assert!(!s.chars().any(char::is_control), "{what}");
        }
        let e = no_panic(&what, || validate::error_text(&s));
        assert!(e.len() <= validate::MAX_ERROR_LEN && !e.contains('\0'), "{what}");
        let (a, b, c) = (extreme_duration(&mut r), extreme_duration(&mut r), extreme_duration(&mut r));
        let checked = no_panic(&what, || validate::duration("d", a, b, c));
        ok_or_invalid(&checked, &what);
        assert_eq!(checked.is_ok(), b <= a && a <= c, "{what}: {a:?} in {b:?}..={c:?}");
    }
}
