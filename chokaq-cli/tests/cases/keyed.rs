//! Issue 25: `queues key-cap` and `queues rate-limit` (set, read back through the backend,
//! cleared, bad input refused with exit 2 and nothing written); `stats` and `queues list`
//! with the key cap, the rate limit and the busiest keys (exact running counts, hostile keys
//! escaped); `jobs show` with the concurrency key.

use chokaq::core::RateLimit;

use super::*;

/// The controls, each read back through the backend; `--json` and table output; bad values.
pub async fn keyed_controls(db: Arc<Db>) -> TestResult {
    let q = db.q("keyctl");
    let qs = q.as_str();
    db.enqueue(NewJob::build(qs, "k").unwrap().concurrency_key("tenant-1")).await?;
    let settings = || async { db.backend.queue_settings(&q).await.map_err(err) };

    let v = db.ok_json(&["queues", "key-cap", qs, "2"])?;
    ensure_eq!((v["queue"].as_str(), v["key_max_workers"].as_u64()), (Some(qs), Some(2)), "key-cap --json");
    ensure_eq!(settings().await?.key_max_workers, Some(2), "key cap in the database");
    let out = db.run(&["queues", "key-cap", qs, "0"])?;
    ensure_eq!(out.code, 0, "key-cap 0 (stderr {})", out.stderr);
    ensure!(out.stdout.contains(&format!("queue {qs}: key cap set")), "{}", out.stdout);
    // Explained, not refused (issue 40): it holds keyed jobs, as a cap of 0 holds all.
    ensure!(
        out.stderr.contains("note: a key cap of 0 holds every job")
            && out.stderr.contains(&format!("key-cap {qs} none")),
        "key-cap 0 says what it does: {}",
        out.stderr
    );
    ensure_eq!(settings().await?.key_max_workers, Some(0), "key cap 0 in the database");

    let v = db.ok_json(&["queues", "rate-limit", qs, "500/1s"])?;
    ensure_eq!(v["rate_limit"], serde_json::json!({ "jobs": 500, "per": 1000, "by_key": false }), "rate-limit --json");
    ensure_eq!(
        settings().await?.rate_limit,
        Some(RateLimit::new(500, Duration::from_secs(1))),
        "rate limit in the database"
    );
    let t = db.ok_table(&["queues", "rate-limit", qs, "10/250ms", "--by-key"])?;
    ensure!(t.contains(&format!("queue {qs}: rate limit set")), "{t}");
    ensure_eq!(
        settings().await?.rate_limit,
        Some(RateLimit::new(10, Duration::from_millis(250)).by_key()),
        "per-key rate limit in the database"
    );
    // The echo and the list show both settings.
    let row = rows(&t).into_iter().find(|r| r[0] == qs).ok_or("no row in the echo")?;
    ensure_eq!(row[1..8], ["running", "none", "0", "10/250ms", "per", "key", "default"], "echoed row");
    let list = rows(&db.ok_table(&["queues", "list"])?);
    ensure_eq!(list[0][..5], ["QUEUE", "STATE", "CAP", "KEY-CAP", "RATE"], "list header");
    let row = list.iter().find(|r| r[0] == qs).ok_or("queue not listed")?;
    ensure_eq!(row[1..6], ["running", "none", "0", "10/250ms", "per"], "listed row");
    let v = db.ok_json(&["queues", "list"])?;
    let listed = v.as_array().and_then(|a| a.iter().find(|x| x["queue"] == qs).cloned()).ok_or("not in the list")?;
    ensure_eq!(
        (
            listed["key_max_workers"].as_u64(),
            listed["rate_limit"]["jobs"].as_u64(),
            listed["rate_limit"]["by_key"].as_bool()
        ),
        (Some(0), Some(10), Some(true)),
        "queues list --json"
    );
    ensure_eq!(listed["busiest_keys"], serde_json::json!([]), "no running keyed job");

    // Bad values: exit 2, a message that says what is wrong, the settings unchanged.
    let before = settings().await?;
    for (args, needle) in [
        (&["queues", "key-cap", qs, "1000001"][..], "key_max_workers"),
        (&["queues", "key-cap", qs, "-1"], "unexpected argument '-1'"),
        (&["queues", "key-cap", qs, "two"], "bad cap"),
        (&["queues", "rate-limit", qs, "0/1s"], "jobs must be 1"),
        (&["queues", "rate-limit", qs, "5/0s"], "period"),
        (&["queues", "rate-limit", qs, "5/2d"], "period"),
        (&["queues", "rate-limit", qs, "1000001/1s"], "jobs must be 1"),
        (&["queues", "rate-limit", qs, "500"], "N/PERIOD"),
        (&["queues", "rate-limit", qs, "500/1w"], "N/PERIOD"),
        (&["queues", "rate-limit", qs, "none", "--by-key"], "--by-key"),
        (&["queues", "key-cap", "bad queue!", "1"], "queue"),
    ] {
        let out = db.run(args)?;
        ensure_eq!(out.code, 2, "exit code of {args:?} (stdout {}, stderr {})", out.stdout, out.stderr);
        ensure!(out.stderr.contains(needle), "{args:?}: the error does not say {needle:?}: {}", out.stderr);
        // No Rust names in what an operator reads (issue 40): no `None`, no method name.
        ensure!(
            !out.stderr.contains("None") && !out.stderr.contains("control_queue"),
            "{args:?}: a Rust name in the error: {}",
            out.stderr
        );
    }
    ensure_eq!(settings().await?, before, "settings after the refused values");
    // An unknown queue is refused without --create, as the other controls.
    let unknown = db.q("nokeys");
    let out = db.run(&["queues", "key-cap", unknown.as_str(), "1"])?;
    ensure_eq!(out.code, 3, "key-cap of an unknown queue (stderr {})", out.stderr);
    // The hint repeats the command with its value (issue 40: it dropped the value).
    ensure!(out.stderr.contains(&format!("chokaq queues key-cap {unknown} 1 --create")), "{}", out.stderr);
    let out = db.run(&["queues", "rate-limit", unknown.as_str(), "1/1s"])?;
    ensure_eq!(out.code, 3, "rate-limit of an unknown queue (stderr {})", out.stderr);
    ensure!(out.stderr.contains(&format!("chokaq queues rate-limit {unknown} 1/1s --create")), "{}", out.stderr);
    db.ok_json(&["queues", "rate-limit", unknown.as_str(), "1/1s", "--create"])?;

    // Cleared.
    db.ok_json(&["queues", "key-cap", qs, "none"])?;
    let v = db.ok_json(&["queues", "rate-limit", qs, "NONE"])?;
    ensure!(v["rate_limit"].is_null() && v["key_max_workers"].is_null(), "cleared: {v}");
    let s = settings().await?;
    ensure_eq!((s.key_max_workers, s.rate_limit), (None, None), "cleared in the database");
    Ok(())
}

/// `stats` and `queues list` show the busiest keys with exact running counts under a key cap
/// (key `a` holds 2 of its 3 jobs, the cap), the key cap and the rate limit; a hostile key is
/// escaped in tables and kept as stored in JSON; `jobs show` has the concurrency key.
pub async fn keyed_stats(db: Arc<Db>) -> TestResult {
    let q = db.q("keyed");
    let qs = q.as_str();
    let hostile = "c\u{202e}x\u{200b}";
    let mut ids = Vec::new();
    for key in ["a", "a", "a", "b", hostile] {
        ids.push(db.enqueue(NewJob::build(qs, "k").unwrap().concurrency_key(key)).await?);
    }
    db.enqueue(NewJob::build(qs, "k").unwrap()).await?;
    db.ok_json(&["queues", "key-cap", qs, "2"])?;
    db.ok_json(&["queues", "rate-limit", qs, "1000/1m"])?;
    let got = db
        .backend
        .claim(&ClaimParams::new(WorkerId::random(), vec![q.clone()], 10, ClaimMode::Start))
        .await
        .map_err(err)?;
    ensure_eq!(got.len(), 5, "claimed: 2 of key a (its cap), b, the hostile key and the key-less job");

    let v = db.ok_json(&["stats"])?;
    let s = v["queues"].as_array().and_then(|a| a.iter().find(|x| x["queue"] == qs).cloned()).ok_or("not in stats")?;
    ensure_eq!(
        s["busiest_keys"],
        serde_json::json!([
            { "key": "a", "running": 2 }, { "key": "b", "running": 1 }, { "key": hostile, "running": 1 }
        ]),
        "busiest keys in stats --json"
    );
    ensure_eq!(
        (s["key_max_workers"].as_u64(), s["rate_limit"].clone()),
        (Some(2), serde_json::json!({ "jobs": 1000, "per": 60_000, "by_key": false })),
        "limits in stats --json"
    );
    ensure_eq!((s["pending"].as_u64(), s["processing"].as_u64()), (Some(1), Some(5)), "counts");

    let t = db.ok_table(&["stats"])?;
    ensure!(!t.contains('\u{202e}') && !t.contains('\u{200b}'), "stats prints the key raw: {t:?}");
    let table = rows(&t);
    let header = table.iter().position(|r| r[..] == ["QUEUE", "KEY-CAP", "RATE", "KEY", "RUNNING"]);
    let header = header.ok_or_else(|| format!("no keys table in stats:\n{t}"))?;
    let keyed: Vec<Vec<String>> = table[header + 1..].iter().filter(|r| r[0] == qs).cloned().collect();
    ensure_eq!(
        keyed,
        vec![
            vec![qs.to_string(), "2".into(), "1000/1m".into(), "a".into(), "2".into()],
            vec![qs.to_string(), "2".into(), "1000/1m".into(), "b".into(), "1".into()],
            vec![qs.to_string(), "2".into(), "1000/1m".into(), "c\\u{202e}x\\u{200b}".into(), "1".into()],
        ],
        "keys table of stats"
    );

    let v = db.ok_json(&["queues", "list"])?;
    let listed = v.as_array().and_then(|a| a.iter().find(|x| x["queue"] == qs).cloned()).ok_or("not listed")?;
    ensure_eq!(listed["busiest_keys"][0], serde_json::json!({ "key": "a", "running": 2 }), "queues list --json");
    let t = db.ok_table(&["queues", "list"])?;
    ensure!(!t.contains('\u{202e}'), "queues list prints the key raw: {t:?}");
    let table = rows(&t);
    let header = table.iter().position(|r| r[..] == ["QUEUE", "BUSIEST", "KEY", "RUNNING"]);
    let header = header.ok_or_else(|| format!("no busiest keys in queues list:\n{t}"))?;
    ensure_eq!(table[header + 1], [qs, "a", "2"], "first busiest key");

    // jobs show: the key, escaped in the table, as stored in JSON.
    let v = db.ok_json(&["jobs", "show", &ids[4].to_string()])?;
    ensure_eq!(v["concurrency_key"].as_str(), Some(hostile), "jobs show --json");
    let t = db.ok_table(&["jobs", "show", &ids[4].to_string()])?;
    ensure!(!t.contains('\u{202e}'), "jobs show prints the key raw: {t:?}");
    let row = rows(&t).into_iter().find(|r| r[..2] == ["concurrency", "key"]).ok_or("no concurrency key row")?;
    ensure_eq!(row[2..], ["c\\u{202e}x\\u{200b}"], "jobs show: the concurrency key, escaped");
    let v = db.ok_json(&["jobs", "list", "--queue", qs])?;
    let keys: Vec<Value> = v["jobs"].as_array().ok_or("jobs")?.iter().map(|j| j["concurrency_key"].clone()).collect();
    ensure_eq!(keys.iter().filter(|k| k.is_null()).count(), 1, "the key-less job in jobs list --json");
    ensure_eq!(keys.iter().filter(|k| k.as_str() == Some("a")).count(), 3, "key a in jobs list --json");
    Ok(())
}
