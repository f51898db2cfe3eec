//! Deliberately broken statements for the conformance suite's "teeth" test (feature
//! `fault-injection`). A [`Faults`] value picks some of them, and
//! [`Statements::with_faults`] builds a statement set in which they replace the correct ones:
//! the backend runs whatever set it was built with, so no code path of it knows about faults.
//!
//! Each broken statement binds the same parameters and returns the same columns as the
//! statement it replaces. The claim and complete parts are CTE lists (ending in `claimed` and
//! `done`), so `complete_and_claim` is replaced too when either is broken: one statement made
//! of the complete part and the claim part in force.

use super::{render, Statements};

/// Deliberately broken statements for the conformance suite's "teeth" test: each switch
/// replaces correct statements by the broken ones it names, so the suite can prove it catches
/// that bug. Compiled only with the `fault-injection` feature; see
/// [`PgBackend::connect_with_faults`](crate::PgBackend::connect_with_faults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Claim = candidates read with no lock, then updated by id with no status re-check: a
    /// racing claimer waits for the row, then takes it again (no skip-locked atomicity).
    pub claim_two_statements: bool,
    /// Cap = the seed's committed-count CTE in the claim statement, no queue-row lock.
    pub cap_plain_count: bool,
    /// Complete without the `lease` condition.
    pub complete_without_lease_guard: bool,
    /// Complete's move loses its INSERT: the rows leave the hot table and reach no other, as
    /// when a DELETE and an INSERT run as two autocommitted statements and the session dies
    /// between them.
    pub move_two_autocommits: bool,
    /// Heartbeat without the `lease` condition.
    pub heartbeat_ignores_lease: bool,
    /// The look-up that lets a repeated complete report the outcome that stands matches the
    /// archive row without its `lease`: a stale lease of a job this worker completed later with
    /// a newer lease is reported Done.
    pub complete_standing_ignores_lease: bool,
    /// Sessions at REPEATABLE READ instead of pinned to READ COMMITTED (a startup option set
    /// after the pin; only [`PgBackend::connect_with_faults`](crate::PgBackend::connect_with_faults)
    /// applies it): the claim's cap count reads a stale snapshot.
    pub claim_repeatable_read: bool,
    /// `complete_and_claim` hands each completion's slot to the next job without counting
    /// the cap (a handoff that trusts its completions alone): with the cap lowered below what
    /// runs, every completion still claims one.
    pub handoff_ignores_cap: bool,
    /// The claim function (the functions script `migrate` applies) as before issue 24: a queue
    /// the first statement saw without a cap takes up to the limit with no lock on its control
    /// row and no second look at its settings, so a cap set meanwhile does not bind it (its
    /// rows commit after SetMaxWorkers returned, and a counting claimer did not see them).
    /// Only a schema migrated by the faulty backend runs it.
    pub first_cap_ignored: bool,
    /// Start guarded by Fetched only, as before issue 24: a repeated start (its first reply
    /// lost) of a job this lease already started reports the lease lost.
    pub start_not_repeatable: bool,
    /// Enqueue inserts a batch's rows in the batch's order, as before the fix: two batches
    /// whose idempotency keys overlap in different orders can deadlock (40P01).
    pub enqueue_in_batch_order: bool,
    /// Issue 25, check-then-act: the claim counts each new key (its room statement) before it
    /// takes the key's lock (and before the test hook 'key'), not in a new statement after the
    /// lock; each key's rows are still read fresh after the lock, so a claim committed in
    /// between is missed by the count and its key goes over the cap. Functions script.
    pub key_count_before_lock: bool,
    /// Issue 25: no per-key filter at all: a key-capped (or per-key rate-limited) queue is
    /// claimed as a plain one. Functions script.
    pub key_ignored: bool,
    /// Issue 25, a key slot freed twice: the per-key lock is a session lock, released by an
    /// explicit unlock as soon as the key is counted (and "again" by the end of the
    /// transaction, which no longer holds it): the next claimer counts the key before this
    /// claim's rows are committed. Functions script.
    pub key_lock_freed_early: bool,
    /// Issue 25 (issue 40 L7's count): the rate window counted one short (the last ordinal less
    /// the first one in the window, without the + 1): `jobs + 1` starts per window,
    /// queue-wide and per key. Functions script.
    pub rate_window_off_by_one: bool,
    /// Issue 40, L7: a change of a rate limit's kind (queue-wide / per key) keeps the starts
    /// log's numbers, so the new buckets count from ordinals of the old ones.
    pub rate_kind_change_keeps_numbers: bool,
    /// Issue 25: the keyed read starts after its start instead of at it (`>` for `>=`): the
    /// first due row claim()'s first statement found is never a candidate (nor the row a round
    /// ends on), so a claim skips the queue's first job. Functions script.
    pub key_read_skips_its_start: bool,
    /// Issue 41: a waiting task released by the first of its dependencies to succeed (the
    /// release does not wait for the count to reach zero). Functions script.
    pub flow_release_early: bool,
    /// Issue 41: a dead-lettered dependency counted as a success: its dependents are released
    /// instead of cancelled. Functions script.
    pub flow_dead_releases: bool,
    /// Issue 41: the `first_dead` callback enqueued at every dead letter of the batch (no
    /// "not yet enqueued" guard, a fresh job each time). Functions script.
    pub batch_first_dead_every_time: bool,
    /// Issue 41: a wide fan-in released when the first of its parts reaches zero (a part at
    /// zero counts as every part: the task row's count is not waited for). Functions script.
    pub flow_part_releases: bool,
    /// Issue 41: a large batch final when the first of its parts reaches zero (a part at zero
    /// counts as every job still open). Functions script.
    pub batch_part_finishes: bool,
}

/// The functions script with `from` replaced by `to`, `from` found exactly once.
fn replace_once(script: &str, from: &str, to: &str) -> String {
    assert_eq!(script.matches(from).count(), 1, "the functions script changed: {from}");
    script.replacen(from, to, 1)
}

/// The functions script with the issue 25 faults `faults` names.
fn functions_keyed_faults(mut script: String, faults: &Faults) -> String {
    if faults.key_count_before_lock {
        // The room statement (each key's count) runs ahead of the test hook and the lock
        // statement, as if every new key were locked; after the locks, the locked keys take
        // that stale room instead of the fresh one.
        let room = {
            let a = script.find("            -- room: begin\n").expect("the room statement's start marker");
            let b = script.find("            -- room: end\n").expect("the room statement's end marker");
            script[a..b].replace("INTO v_nroom", "INTO v_stale")
        };
        script = replace_once(&script, "    v_nroom integer[];\n", "    v_nroom integer[];\n    v_stale integer[];\n");
        script = replace_once(
            &script,
            "            -- Test hook ('key'): the first keys met, before their locks (tests/common/cap_race.rs).",
            &format!(
                "            v_nlock := array_fill(true, ARRAY[cardinality(v_nk)]);\n{room}            \
                 -- Test hook ('key'): the first keys met, before their locks (tests/common/cap_race.rs)."
            ),
        );
        script = replace_once(
            &script,
            "            -- (the keys are counted)",
            "            FOR j IN 1 .. cardinality(v_nk) LOOP
                IF v_nlock[j] THEN
                    v_nroom[j] := v_stale[j];
                END IF;
            END LOOP;
            -- (the keys are counted)",
        );
    }
    if faults.key_ignored {
        script = replace_once(
            &script,
            "IF v_allow[j] > 0 AND (v_kcap[j] IS NOT NULL OR (v_rjobs[j] IS NOT NULL AND v_rbykey[j])) THEN",
            "IF false THEN",
        );
    }
    if faults.key_lock_freed_early {
        script = replace_once(
            &script,
            "                           pg_try_advisory_xact_lock(",
            "                           pg_try_advisory_lock(",
        );
        script = replace_once(
            &script,
            "            -- (the keys are counted)",
            "            PERFORM pg_advisory_unlock({schema}.key_lock(l.q, l.k))
               FROM unnest(v_nq, v_nk, v_nlock) AS l(q, k, locked)
              WHERE l.locked;",
        );
    }
    if faults.key_read_skips_its_start {
        script = replace_once(
            &script,
            "AND (y.due_at, y.id) >= (r.sd, r.si) AND y.due_at <= now()",
            "AND (y.due_at, y.id) > (r.sd, r.si) AND y.due_at <= now()",
        );
    }
    if faults.rate_window_off_by_one {
        script =
            replace_once(&script, "ORDER BY st.stamp, st.n LIMIT 1) + 1, 0)", "ORDER BY st.stamp, st.n LIMIT 1), 0)");
        script = replace_once(&script, "ORDER BY f.stamp, f.n LIMIT 1) + 1, 0)", "ORDER BY f.stamp, f.n LIMIT 1), 0)");
    }
    script
}

/// The SET list of a broken claim's UPDATE of `jobs_hot h`, from the parameters `p`: what the
/// correct claim writes.
macro_rules! claim_set {
    () => {
        "SET status = CASE WHEN p.mode = 2 THEN 2 ELSE 1 END,
           attempt = CASE WHEN p.mode = 2 THEN h.attempt + 1 ELSE h.attempt END,
           started_at = CASE WHEN p.mode = 2 THEN now() ELSE h.started_at END,
           heartbeat_at = CASE WHEN p.mode = 0 THEN NULL ELSE now() END,
           lease = nextval('{schema}.lease_seq'), worker_id = p.worker, updated_at = now()
"
    };
}

/// The claim's parameters under names: `$1` worker, `$2` queues, `$3` limit, `$4` mode.
const CLAIM_PARAMS: &str = "p AS (SELECT $1::uuid AS worker, $2::text[] AS queues, $3::int4 AS lim, $4::int2 AS mode)";

/// The same names for `complete_and_claim`'s parameters (`$4` queues, `$5` limit, `$6` mode).
const COMPLETE_AND_CLAIM_PARAMS: &str =
    "p AS (SELECT $1::uuid AS worker, $4::text[] AS queues, $5::int4 AS lim, $6::int2 AS mode)";

/// The correct claim, as a CTE.
const CLAIM_PART: &str =
    "claimed AS (SELECT c.* FROM p CROSS JOIN LATERAL {schema}.claim(p.worker, p.queues, p.lim, p.mode) c)";

/// Candidates read with no lock at all; the UPDATE takes them by id with no status check, so a
/// claimer that waited for a row another claimer took re-checks only the id, and takes it too.
const CLAIM_UNLOCKED_PART: &str = concat!(
    "
cand AS (
    SELECT h.id FROM p, {schema}.jobs_hot h LEFT JOIN {schema}.queues c ON c.name = h.queue
     WHERE h.queue = ANY(p.queues) AND h.status = 0 AND h.due_at <= now()
       AND (c.name IS NULL OR (c.is_active AND NOT c.is_paused))
     ORDER BY h.priority DESC, h.due_at, h.id
     LIMIT (SELECT lim FROM p)
),
claimed AS (
    UPDATE {schema}.jobs_hot h
       ",
    claim_set!(),
    "      FROM p, cand
     WHERE h.id = cand.id
    RETURNING h.*
)"
);

/// The seed's committed-count cap: the count is taken in the claim statement's own snapshot,
/// with no lock on the queue row, so racing claimers fill the same gap.
const CLAIM_PLAIN_COUNT_PART: &str = concat!(
    "
r AS (
    SELECT q.q,
           CASE WHEN c.max_workers IS NULL THEN (SELECT lim FROM p)
                ELSE greatest(0, least((SELECT lim FROM p),
                                       c.max_workers - (SELECT count(*) FROM {schema}.jobs_hot a
                                                         WHERE a.queue = q.q AND a.status IN (1, 2))::int))
           END AS allow
      FROM (SELECT DISTINCT unnest(p.queues) AS q FROM p) q
      LEFT JOIN {schema}.queues c ON c.name = q.q
     WHERE c.name IS NULL OR (c.is_active AND NOT c.is_paused)
),
cand AS (
    SELECT x.id, x.priority, x.due_at FROM r CROSS JOIN LATERAL (
        SELECT h.id, h.priority, h.due_at FROM {schema}.jobs_hot h
         WHERE h.queue = r.q AND h.status = 0 AND h.due_at <= now()
         ORDER BY h.priority DESC, h.due_at, h.id LIMIT r.allow
           FOR UPDATE SKIP LOCKED) x
),
pick AS (SELECT id FROM cand ORDER BY priority DESC, due_at, id LIMIT (SELECT lim FROM p)),
claimed AS (
    UPDATE {schema}.jobs_hot h
       ",
    claim_set!(),
    "      FROM p, pick
     WHERE h.id = pick.id
    RETURNING h.*
)"
);

/// A handoff with no cap count: as many jobs as the same statement completed, in claim order.
const CLAIM_HANDOFF_UNCOUNTED_PART: &str = concat!(
    "
claimed AS (
    UPDATE {schema}.jobs_hot h
       ",
    claim_set!(),
    "      FROM p
     WHERE h.id = ANY (ARRAY(
           SELECT x.id FROM {schema}.jobs_hot x, p
            WHERE x.queue = ANY (p.queues) AND x.status = 0 AND x.due_at <= now()
            ORDER BY x.priority DESC, x.due_at, x.id
            LIMIT (SELECT least(p2.lim, (SELECT count(*) FROM done)) FROM p p2)
              FOR UPDATE OF x SKIP LOCKED))
    RETURNING h.*
)"
);

/// Start with the guard of Fetched rows only.
const START_FETCHED_ONLY: &str = concat!(
    "WITH l AS (",
    guard!("= 1"),
    ") UPDATE {schema}.jobs_hot h
        SET status = 2, attempt = h.attempt + 1, started_at = now(), heartbeat_at = now(), updated_at = now()
       FROM l WHERE h.id = l.id
     RETURNING h.id"
);

/// Where the claim function's step 3 (queues seen without a cap: control rows made sure of,
/// locked FOR KEY SHARE, settings re-read) begins and ends in the functions script.
const OPEN_STEP: (&str, &str) = ("    -- Step 3: the queues seen without a cap", "    -- Step 4: capped queues.");

/// What [`Faults::first_cap_ignored`] puts in its place: the allowance with no lock.
const OPEN_STEP_UNLOCKED: &str = "    -- Step 3 (fault first_cap_ignored): no lock, no second look.
    FOREACH v_q IN ARRAY v_open LOOP
        v_allow[array_position(v_names, v_q)] := p_limit;
    END LOOP;

";

/// The functions script with [`OPEN_STEP_UNLOCKED`] in place of the claim's step 3.
fn functions_first_cap_ignored() -> String {
    let script = crate::migrate::FUNCTIONS;
    let start = script.find(OPEN_STEP.0).expect("the claim's step 3 in the functions script");
    let end = script[start..].find(OPEN_STEP.1).expect("the claim's step 4 in the functions script") + start;
    format!("{}{OPEN_STEP_UNLOCKED}{}", &script[..start], &script[end..])
}

/// The correct complete (`$1` worker, `$2` ids, `$3` leases), as CTEs.
const COMPLETE_PART: &str = concat!(
    "l AS (",
    guard!("IN (1, 2)"),
    "),
g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*),
done AS (INSERT INTO {schema}.jobs_archive (",
    archive_cols!(),
    ") SELECT ",
    archive_vals_started!(),
    " FROM g RETURNING id)"
);

/// Complete with no `lease` condition.
const COMPLETE_NO_LEASE_PART: &str = concat!(
    "l AS (SELECT h.id FROM {schema}.jobs_hot h JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON h.id = u.id
        WHERE h.worker_id = $1 AND h.status IN (1, 2) ORDER BY h.id FOR UPDATE OF h),
g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*),
done AS (INSERT INTO {schema}.jobs_archive (",
    archive_cols!(),
    ") SELECT ",
    archive_vals_started!(),
    " FROM g RETURNING id)"
);

/// The first half of a move split into two autocommitted statements, with no second half.
const COMPLETE_DELETE_ONLY_PART: &str = concat!(
    "l AS (",
    guard!("IN (1, 2)"),
    "),
done AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.id)"
);

/// Heartbeat with no `lease` condition.
const HEARTBEAT_NO_LEASE: &str = "
WITH l AS (SELECT h.id FROM {schema}.jobs_hot h JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON h.id = u.id
            WHERE h.worker_id = $1 AND h.status IN (1, 2) ORDER BY h.id FOR UPDATE OF h)
UPDATE {schema}.jobs_hot h SET heartbeat_at = now() FROM l WHERE h.id = l.id
RETURNING h.id, h.cancel_requested";

/// The repeated-complete look-up with no `lease` condition.
const COMPLETE_STANDING_NO_LEASE: &str = "
SELECT a.id FROM {schema}.jobs_archive a
  JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON a.id = u.id
 WHERE a.worker_id = $1";

impl Statements {
    /// The statements for `schema` with the broken ones `faults` names in place of the correct
    /// ones; `Faults::default()` gives exactly [`Statements::new`].
    pub(crate) fn with_faults(schema: &str, faults: Faults) -> Self {
        let mut s = Statements::new(schema);
        let claim = if faults.claim_two_statements {
            Some(CLAIM_UNLOCKED_PART)
        } else if faults.cap_plain_count {
            Some(CLAIM_PLAIN_COUNT_PART)
        } else {
            None
        };
        let complete = if faults.move_two_autocommits {
            Some(COMPLETE_DELETE_ONLY_PART)
        } else if faults.complete_without_lease_guard {
            Some(COMPLETE_NO_LEASE_PART)
        } else {
            None
        };
        if let Some(part) = claim {
            s.claim = render(&format!("WITH {CLAIM_PARAMS},\n{part}\nSELECT * FROM claimed"), schema);
        }
        if let Some(part) = complete {
            s.complete = render(&format!("WITH {part}\nSELECT id FROM done"), schema);
        }
        // The handoff exists only in complete_and_claim: the claim statement stays correct.
        let handoff = faults.handoff_ignores_cap.then_some(CLAIM_HANDOFF_UNCOUNTED_PART);
        if claim.is_some() || complete.is_some() || handoff.is_some() {
            let claim = handoff.or(claim).unwrap_or(CLAIM_PART);
            let complete = complete.unwrap_or(COMPLETE_PART);
            s.complete_and_claim = render(
                &format!(
                    "WITH {COMPLETE_AND_CLAIM_PARAMS},\n{complete},\n{claim}\n\
                     SELECT (SELECT coalesce(array_agg(done.id), '{{}}'::uuid[]) FROM done) AS o_done, claimed.*\n\
                     FROM p LEFT JOIN claimed ON true"
                ),
                schema,
            );
        }
        if faults.heartbeat_ignores_lease {
            s.heartbeat = render(HEARTBEAT_NO_LEASE, schema);
        }
        if faults.complete_standing_ignores_lease {
            s.complete_standing = render(COMPLETE_STANDING_NO_LEASE, schema);
        }
        if faults.first_cap_ignored {
            s.functions = render(&functions_first_cap_ignored(), schema);
        }
        if faults.key_count_before_lock
            || faults.key_ignored
            || faults.key_lock_freed_early
            || faults.rate_window_off_by_one
            || faults.key_read_skips_its_start
        {
            let base = if faults.first_cap_ignored {
                functions_first_cap_ignored()
            } else {
                crate::migrate::FUNCTIONS.to_string()
            };
            s.functions = render(&functions_keyed_faults(base, &faults), schema);
        }
        if faults.flow_release_early {
            s.functions = replace_once(&s.functions, "AND t.deps_left = 0 AND h.status = 5", "AND h.status = 5");
        }
        if faults.flow_dead_releases {
            s.functions = replace_once(&s.functions, "IF NOT p_dead THEN", "IF true THEN");
        }
        if faults.flow_part_releases {
            s.functions = replace_once(
                &s.functions,
                "SELECT p.job_id, 1 FROM p WHERE p.deps_left = 0",
                "SELECT p.job_id, 1000000 FROM p WHERE p.deps_left = 0",
            );
        }
        if faults.batch_part_finishes {
            s.functions = replace_once(
                &s.functions,
                "SELECT p.batch_id, 1, 0 FROM p WHERE p.jobs_left = 0",
                "SELECT p.batch_id, 1000000, 0 FROM p WHERE p.jobs_left = 0",
            );
        }
        if faults.batch_first_dead_every_time {
            s.functions = replace_once(&s.functions, " AND c.fired_at IS NULL\n", "\n");
            s.functions = replace_once(
                &s.functions,
                "(c.event = 'first_dead' AND s.new_dead > 0 AND s.dead = s.new_dead)",
                "(c.event = 'first_dead' AND s.new_dead > 0)",
            );
            s.functions = replace_once(
                &s.functions,
                "SELECT i.job_id, i.queue, i.kind,",
                "SELECT gen_random_uuid(), i.queue, i.kind,",
            );
        }
        if faults.rate_kind_change_keeps_numbers {
            s.control_rate_renumber = render("SELECT $1::text, $2::int4, $3::bool", schema);
        }
        if faults.start_not_repeatable {
            s.start = render(START_FETCHED_ONLY, schema);
        }
        if faults.enqueue_in_batch_order {
            let keyed = "ORDER BY i.idempotency_key IS NULL, i.queue, i.idempotency_key, i.hkey, i.ord";
            assert_eq!(super::ENQUEUE.matches(keyed).count(), 1, "the enqueue's ORDER BY changed");
            s.enqueue = render(&super::ENQUEUE.replace(keyed, "ORDER BY i.ord"), schema);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(faults: Faults) -> Vec<&'static str> {
        let plain = Statements::new("s").named();
        let faulty = Statements::with_faults("s", faults).named();
        plain.iter().zip(&faulty).filter(|(a, b)| a.1 != b.1).map(|(a, _)| a.0).collect()
    }

    /// Each switch swaps exactly the statements it names (and `complete_and_claim` with the
    /// claim or the complete), and no switch leaves a placeholder unrendered.
    #[test]
    fn each_fault_swaps_its_statements() {
        let f = Faults::default();
        assert!(changed(f).is_empty());
        let cases = [
            (Faults { claim_two_statements: true, ..f }, vec!["claim", "complete_and_claim"]),
            (Faults { cap_plain_count: true, ..f }, vec!["claim", "complete_and_claim"]),
            (Faults { complete_without_lease_guard: true, ..f }, vec!["complete_and_claim", "complete"]),
            (Faults { move_two_autocommits: true, ..f }, vec!["complete_and_claim", "complete"]),
            (Faults { heartbeat_ignores_lease: true, ..f }, vec!["heartbeat"]),
            (Faults { complete_standing_ignores_lease: true, ..f }, vec!["complete_standing"]),
            (Faults { handoff_ignores_cap: true, ..f }, vec!["complete_and_claim"]),
            (Faults { first_cap_ignored: true, ..f }, vec!["functions"]),
            (Faults { start_not_repeatable: true, ..f }, vec!["start"]),
            (Faults { key_count_before_lock: true, ..f }, vec!["functions"]),
            (Faults { key_ignored: true, ..f }, vec!["functions"]),
            (Faults { key_lock_freed_early: true, ..f }, vec!["functions"]),
            (Faults { rate_window_off_by_one: true, ..f }, vec!["functions"]),
            (Faults { key_read_skips_its_start: true, ..f }, vec!["functions"]),
            (Faults { rate_kind_change_keeps_numbers: true, ..f }, vec!["control_rate_renumber"]),
            (Faults { flow_release_early: true, ..f }, vec!["functions"]),
            (Faults { flow_dead_releases: true, ..f }, vec!["functions"]),
            (Faults { batch_first_dead_every_time: true, ..f }, vec!["functions"]),
            (Faults { flow_part_releases: true, ..f }, vec!["functions"]),
            (Faults { batch_part_finishes: true, ..f }, vec!["functions"]),
        ];
        for (faults, want) in cases {
            assert_eq!(changed(faults), want, "{faults:?}");
            for (name, sql) in Statements::with_faults("s", faults).named() {
                assert!(!sql.contains("{schema}") && !sql.contains("{channel}"), "{name}: {sql}");
            }
        }
    }
}
