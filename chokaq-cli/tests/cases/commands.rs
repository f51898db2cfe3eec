//! The read and write commands on a fresh database: `stats`, `queues`, `jobs`, `dead` (with the
//! retry race), `purge`, `workers`, `web` and `schedules` (moved out of cli.rs, no behaviour change).

use super::*;

/// Exact counts per queue and state, the lag of a queue whose oldest due job is an hour old,
/// and the totals; JSON and table.
pub async fn stats(db: Arc<Db>) -> TestResult {
    let (a, b) = (db.q("a"), db.q("b"));
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    db.enqueue(NewJob::build(a.as_str(), "k").unwrap().run_at(hour_ago)).await?;
    db.enqueue(NewJob::build(a.as_str(), "k").unwrap()).await?;
    db.archived(&b, 2).await?;
    db.dead(&b, 1).await?;
    db.enqueue(NewJob::build(b.as_str(), "k").unwrap()).await?;
    db.start(WorkerId::random(), &b, 1).await?;
    let v = db.ok_json(&["stats"])?;
    let find =
        |q: &QueueName| v["queues"].as_array().and_then(|a| a.iter().find(|x| x["queue"] == q.as_str()).cloned());
    let qa = find(&a).ok_or("queue a missing")?;
    let qb = find(&b).ok_or("queue b missing")?;
    let counts =
        |x: &Value| ["pending", "fetched", "processing", "archived", "dead"].map(|k| x[k].as_u64().unwrap_or(u64::MAX));
    ensure_eq!(counts(&qa), [2, 0, 0, 0, 0], "queue a");
    ensure_eq!(counts(&qb), [0, 0, 1, 2, 1], "queue b");
    ensure_eq!(counts(&v["total"]), [2, 0, 1, 2, 1], "total");
    let lag = qa["lag_seconds"].as_f64().ok_or("no lag for queue a")?;
    ensure!((3590.0..3700.0).contains(&lag), "lag of queue a: {lag}");
    ensure!(qb["lag_seconds"].is_null(), "queue b has no due job: {}", qb["lag_seconds"]);
    let table = rows(&db.ok_table(&["stats"])?);
    ensure_eq!(
        table[0],
        ["QUEUE", "STATE", "PENDING", "FETCHED", "PROCESSING", "ARCHIVED", "FAILED", "CANCELLED", "LAG"],
        "header"
    );
    let row_a = table.iter().find(|r| r[0] == a.as_str()).ok_or("no table row for a")?;
    ensure_eq!(row_a[1..8], ["running", "2", "0", "0", "0", "0", "0"], "table row a");
    ensure!(row_a[8] == "1h" || row_a[8].starts_with("59m"), "table lag of a: {row_a:?}");
    let row_b = table.iter().find(|r| r[0] == b.as_str()).ok_or("no table row for b")?;
    ensure_eq!(row_b[1..], ["running", "0", "0", "1", "2", "1", "0", "-"], "table row b");
    // The total row's label is no queue name (issue 40: a queue named TOTAL looked like it).
    ensure_eq!(table.last().cloned().unwrap_or_default(), ["(all)", "2", "0", "1", "2", "1", "0"], "total row");
    Ok(())
}

/// Queue controls: pause, resume, deactivate, activate, cap N and none, zombie timeout and
/// none, each read back through the backend; the list; bad names and values.
pub async fn queues(db: Arc<Db>) -> TestResult {
    let q = db.q("ctl");
    db.enqueue(NewJob::build(q.as_str(), "k").unwrap()).await?;
    let qs = q.as_str();
    let settings = || async { db.backend.queue_settings(&q).await.map_err(err) };
    let v = db.ok_json(&["queues", "pause", qs])?;
    ensure_eq!((v["queue"].as_str(), v["paused"].as_bool()), (Some(qs), Some(true)), "pause --json");
    ensure!(settings().await?.is_paused, "paused in the database");
    let t = db.ok_table(&["queues", "resume", qs])?;
    ensure!(t.contains(&format!("queue {qs}: resumed")) && t.contains("running"), "{t}");
    ensure!(!settings().await?.is_paused, "resumed in the database");
    db.ok_json(&["queues", "deactivate", qs])?;
    ensure!(!settings().await?.is_active, "deactivated");
    let t = db.ok_table(&["queues"])?;
    let row = rows(&t).into_iter().find(|r| r[0] == qs).ok_or("queue not listed")?;
    ensure_eq!(row[1..7], ["inactive", "none", "none", "none", "default", "retry"], "listed row");
    db.ok_json(&["queues", "activate", qs])?;
    ensure!(settings().await?.is_active, "activated");
    let v = db.ok_json(&["queues", "cap", qs, "3"])?;
    ensure_eq!(v["max_workers"].as_u64(), Some(3), "cap 3");
    ensure_eq!(settings().await?.max_workers, Some(3), "cap in the database");
    db.ok_table(&["queues", "cap", qs, "none"])?;
    ensure_eq!(settings().await?.max_workers, None, "cap none");
    let v = db.ok_json(&["queues", "zombie-timeout", qs, "5m"])?;
    ensure_eq!(v["zombie_timeout_seconds"].as_f64(), Some(300.0), "zombie timeout");
    ensure_eq!(settings().await?.zombie_timeout, Some(Duration::from_secs(300)), "zombie timeout in the database");
    db.ok_json(&["queues", "zombie-timeout", qs, "none"])?;
    ensure_eq!(settings().await?.zombie_timeout, None, "zombie timeout none");
    let list = db.ok_json(&["queues", "list"])?;
    let listed: Vec<String> =
        list.as_array().ok_or("list")?.iter().filter_map(|x| x["queue"].as_str().map(String::from)).collect();
    ensure_eq!(listed, vec![qs.to_string()], "queues list --json");
    for bad in [&["queues", "pause", "bad queue!"][..], &["queues", "cap", qs, "100000000"]] {
        let out = db.run(bad)?;
        ensure_eq!(out.code, 2, "exit code of {bad:?} (stderr {})", out.stderr);
    }
    Ok(())
}

/// Issue 26, item 9: `queues pause` of a queue with no job and no settings is refused unless
/// `--create` (as River's QueuePause refuses an unknown queue), and writes nothing; once
/// created, the empty paused queue is listed by `queues list` and by `stats` (with its state).
pub async fn empty_queues(db: Arc<Db>) -> TestResult {
    let q = db.q("empty");
    let qs = q.as_str();
    let out = db.run(&["queues", "pause", qs])?;
    ensure_eq!(out.code, 3, "exit code of pausing an unknown queue (stdout {} stderr {})", out.stdout, out.stderr);
    ensure!(out.stderr.contains("--create"), "the refusal names --create: {}", out.stderr);
    ensure!(db.backend.queue_settings(&q).await.map_err(err)?.updated_at.is_none(), "the refusal wrote a control row");
    let t = db.ok_table(&["queues", "pause", qs, "--create"])?;
    ensure!(t.contains(&format!("queue {qs}: paused")), "{t}");
    let row = rows(&db.ok_table(&["queues", "list"])?).into_iter().find(|r| r[0] == qs).ok_or("queue not listed")?;
    ensure_eq!(row[1], "paused", "listed state");
    let v = db.ok_json(&["stats"])?;
    let s = v["queues"].as_array().and_then(|a| a.iter().find(|x| x["queue"] == qs).cloned()).ok_or("not in stats")?;
    ensure_eq!((s["pending"].as_u64(), s["paused"].as_bool()), (Some(0), Some(true)), "stats of {qs}");
    let table = rows(&db.ok_table(&["stats"])?);
    let row = table.iter().find(|r| r[0] == qs).ok_or("no stats row")?;
    ensure_eq!(row[1], "paused", "stats table state of {qs}");
    // A known queue (here: paused) needs no --create.
    db.ok_json(&["queues", "resume", qs])?;
    Ok(())
}

/// Jobs: list with every filter and cursor paging (each id exactly once), show (JSON with
/// the payload, table), cancel of a pending and a running job, unknown and bad ids.
pub async fn jobs(db: Arc<Db>) -> TestResult {
    let (q, other) = (db.q("jobs"), db.q("other"));
    let mut ids = Vec::new();
    for i in 0..5 {
        let j = NewJob::build(q.as_str(), if i < 3 { "mail.send" } else { "mail.bounce" })
            .unwrap()
            .json(serde_json::json!({ "n": i }))
            .tag(if i % 2 == 0 { "even" } else { "odd" });
        ids.push(db.enqueue(j).await?);
    }
    db.enqueue(NewJob::build(other.as_str(), "mail.send").unwrap()).await?;
    let running = db.start(WorkerId::random(), &q, 1).await?.remove(0);
    ensure_eq!(running.id, ids[0], "the oldest job is claimed first");

    let all = db.ok_json(&["jobs", "list", "--queue", q.as_str()])?;
    ensure_eq!(ids_of(&all), id_strings(&ids), "jobs list --queue");
    ensure!(all["next"].is_null(), "one page: {}", all["next"]);
    ensure_eq!(all["jobs"][0]["state"].as_str(), Some("processing"), "state of the claimed job");
    ensure!(all["jobs"][0].get("payload").is_none(), "a listing carries no payload");
    let pending = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--status", "pending"])?;
    ensure_eq!(ids_of(&pending), id_strings(&ids[1..]), "--status pending");
    let kind = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--kind", "mail.bounce"])?;
    ensure_eq!(ids_of(&kind), id_strings(&ids[3..]), "--kind");
    let tag = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--tag", "odd"])?;
    ensure_eq!(ids_of(&tag), id_strings(&[ids[1], ids[3]]), "--tag");
    let future = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--since", "2999-01-01T00:00:00Z"])?;
    ensure_eq!(ids_of(&future), Vec::<String>::new(), "--since in the future");
    let window =
        db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--since", "1h", "--until", "2999-01-01T00:00:00Z"])?;
    ensure_eq!(ids_of(&window).len(), 5, "--since 1h --until the future");
    let everything = db.ok_json(&["jobs", "list", "--limit", "1000"])?;
    ensure_eq!(ids_of(&everything).len(), 6, "every hot job");
    // Paging: 2 + 2 + 1, each id once, the cursor printed in both forms.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for page in 0..3 {
        let mut args = vec!["jobs", "list", "--queue", q.as_str(), "--limit", "2"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let v = db.ok_json(&args)?;
        seen.extend(ids_of(&v));
        after = v["next"].as_str().map(String::from);
        ensure_eq!(after.is_some(), page < 2, "a next cursor after page {page}");
    }
    ensure_eq!(seen, id_strings(&ids), "pages of 2");
    let t = db.ok_table(&["jobs", "list", "--queue", q.as_str(), "--limit", "2"])?;
    let lines = rows(&t);
    ensure_eq!(lines[0], ["ID", "STATE", "QUEUE", "KIND", "ATTEMPT", "PRIORITY", "CREATED", "DUE"], "header");
    ensure_eq!(
        lines[1][..5],
        [ids[0].to_string(), "processing".into(), q.to_string(), "mail.send".into(), "1/25".into()],
        "first row"
    );
    ensure_eq!(
        lines.last().cloned().unwrap_or_default(),
        ["next", "page:", "--after", &ids[1].to_string()],
        "cursor line"
    );

    let show = db.ok_json(&["jobs", "show", &ids[2].to_string()])?;
    ensure_eq!(show["payload"], serde_json::json!({ "n": 2 }), "payload of show");
    ensure_eq!((show["state"].as_str(), show["kind"].as_str()), (Some("pending"), Some("mail.send")), "show");
    ensure_eq!(strs(&show["tags"]), vec!["even".to_string()], "tags");
    let t = db.ok_table(&["jobs", "show", &ids[2].to_string()])?;
    ensure!(t.contains("payload") && t.contains("{\"n\":2}") && t.contains("pending"), "{t}");
    let unknown = JobId::new().to_string();
    let out = db.run(&["jobs", "show", &unknown])?;
    ensure_eq!(out.code, 3, "show of an unknown id");
    ensure!(out.stderr.contains(&format!("no job {unknown}")), "{}", out.stderr);
    ensure_eq!(
        db.run(&["--json", "jobs", "show", &unknown])?.json_error()?["error"]["exit_code"].as_u64(),
        Some(3),
        "JSON"
    );
    ensure_eq!(db.run(&["jobs", "show", "not-a-uuid"])?.code, 2, "show of a bad id");

    let v = db.ok_json(&["jobs", "cancel", &ids[4].to_string()])?;
    ensure_eq!(v["outcome"].as_str(), Some("cancelled"), "cancel of a pending job");
    let r = db.backend.get_job(ids[4]).await.map_err(err)?.ok_or("gone")?;
    ensure_eq!(r.location, chokaq::core::JobLocation::Dead(DeadReason::Cancelled), "cancelled job");
    let out = db.run(&["jobs", "cancel", &ids[4].to_string()])?;
    ensure_eq!(out.code, 3, "cancel of a dead job (stderr {})", out.stderr);
    let t = db.ok_table(&["jobs", "cancel", &ids[0].to_string()])?;
    ensure!(t.contains("cancel requested"), "cancel of a running job: {t}");
    ensure!(db.backend.get_job(ids[0]).await.map_err(err)?.ok_or("gone")?.cancel_requested, "cancel_requested");
    Ok(())
}

/// Dead letters: list (JSON and table, with reason and error), retry one (then again: 3),
/// retry every one of a queue with a count, a conflict (exit 4).
pub async fn dead(db: Arc<Db>) -> TestResult {
    let (q, other) = (db.q("dead"), db.q("other"));
    let ids = db.dead(&q, 5).await?;
    db.dead(&other, 1).await?;
    let v = db.ok_json(&["dead", "list", "--queue", q.as_str()])?;
    ensure_eq!(ids_of(&v), id_strings(&ids), "dead list");
    ensure_eq!(
        (v["jobs"][0]["reason"].as_str(), v["jobs"][0]["state"].as_str()),
        (Some("failed"), Some("dead")),
        "reason"
    );
    let t = rows(&db.ok_table(&["dead", "list", "--queue", q.as_str()])?);
    ensure_eq!(t[0], ["ID", "QUEUE", "KIND", "REASON", "ATTEMPT", "FINISHED", "LAST", "ERROR"], "header");
    ensure_eq!(
        t[1][..5],
        [ids[0].to_string(), q.to_string(), "cli.test".into(), "failed".into(), "1/25".into()],
        "row"
    );
    ensure_eq!(t[1].last().cloned(), Some(ids[0].to_string()), "last error (boom <id>)");

    let v = db.ok_json(&["dead", "retry", &ids[0].to_string()])?;
    ensure_eq!(v["outcome"].as_str(), Some("requeued"), "retry");
    let r = db.backend.get_job(ids[0]).await.map_err(err)?.ok_or("gone")?;
    ensure_eq!(
        (r.location, r.attempt),
        (chokaq::core::JobLocation::Hot(chokaq::core::JobStatus::Pending), 0),
        "requeued job"
    );
    let out = db.run(&["dead", "retry", &ids[0].to_string()])?;
    ensure_eq!(out.code, 3, "a second retry (stderr {})", out.stderr);
    ensure!(out.stderr.contains("already requeued"), "{}", out.stderr);

    let t = db.ok_table(&["dead", "retry", "--queue", q.as_str(), "--all", "--yes"])?;
    ensure!(t.contains(&format!("queue {q}: requeued 4, skipped 0")), "{t}");
    let left = db.ok_json(&["dead", "list", "--queue", q.as_str()])?;
    ensure_eq!(ids_of(&left).len(), 0, "no dead letters left in {q}");
    ensure_eq!(ids_of(&db.ok_json(&["dead", "list", "--queue", other.as_str()])?).len(), 1, "the other queue's");
    let v = db.ok_json(&["dead", "retry", "--queue", q.as_str(), "--all", "--yes"])?;
    ensure_eq!(
        (v["requeued"].as_u64(), v["skipped"].as_u64(), v["conflicts"].as_u64()),
        (Some(0), Some(0), Some(0)),
        "nothing left"
    );

    // A conflict: the dead letter's idempotency key is held by a live job of its queue.
    let c = db.q("conflict");
    db.enqueue(NewJob::build(c.as_str(), "k").unwrap().idempotency_key("K1")).await?;
    let w = WorkerId::random();
    let j = db.start(w, &c, 1).await?.remove(0);
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() };
    db.backend.fail(w, j.lease_ref(), dl).await.map_err(err)?.done().ok_or("fail lost")?;
    db.enqueue(NewJob::build(c.as_str(), "k").unwrap().idempotency_key("K1")).await?;
    let out = db.run(&["dead", "retry", &j.id.to_string()])?;
    ensure_eq!(out.code, 4, "retry of a conflicting dead letter (stderr {})", out.stderr);
    ensure!(out.stderr.contains("idempotency key"), "{}", out.stderr);
    let (code, v) = db.json(&["dead", "retry", "--queue", c.as_str(), "--all", "--yes"])?;
    ensure_eq!(code, 4, "--all with a conflict");
    ensure_eq!((v["requeued"].as_u64(), v["conflicts"].as_u64()), (Some(0), Some(1)), "--all counts");
    ensure_eq!(strs(&v["conflict_ids"]), vec![j.id.to_string()], "conflict ids");
    Ok(())
}

/// Two processes retry the same dead letters at once: every one is requeued exactly once.
/// One id: exactly one process requeues it (exit 0), the other finds it gone (exit 3). A whole
/// queue: the two counts of requeued add up to exactly the number of dead letters.
pub async fn retry_race(db: Arc<Db>) -> TestResult {
    // The real race: the same id, two processes started together.
    let r = db.q("race1");
    for round in 0..5 {
        let id = db.dead(&r, 1).await?.remove(0).to_string();
        let children: Vec<_> = (0..2).map(|_| db.spawn(&["--json", "dead", "retry", &id])).collect();
        let mut codes = Vec::new();
        for c in children {
            let out = Out::of(c.map_err(err)?.wait_with_output().map_err(err)?);
            out.check_secret(&db.url, &["dead", "retry"])?;
            codes.push(out.code);
        }
        codes.sort_unstable();
        ensure_eq!(codes, vec![0, 3], "round {round}: exit codes of two racing retries of one id");
        // Take the requeued job out of the way so the next round's claim finds only its own.
        let w = WorkerId::random();
        let j = db.start(w, &r, 1).await?.remove(0);
        db.backend.complete_one(w, j.lease_ref()).await.map_err(err)?.done().ok_or("complete lost")?;
    }
    let all = db.q("raceall");
    let n = 60;
    let ids = db.dead(&all, n).await?;
    let children: Vec<_> =
        (0..2).map(|_| db.spawn(&["--json", "dead", "retry", "--queue", all.as_str(), "--all", "-y"])).collect();
    let mut requeued = 0;
    for c in children {
        let out = Out::of(c.map_err(err)?.wait_with_output().map_err(err)?);
        out.check_secret(&db.url, &["dead", "retry", "--all"])?;
        ensure_eq!(out.code, 0, "exit code of a racing --all (stderr {})", out.stderr);
        let v: Value = serde_json::from_str(&out.stdout).map_err(err)?;
        ensure_eq!(v["conflicts"].as_u64(), Some(0), "conflicts");
        requeued += v["requeued"].as_u64().ok_or("requeued")?;
    }
    ensure_eq!(requeued, u64::from(n), "jobs requeued by the two processes together");
    let stats = db.backend.stats().await.map_err(err)?;
    let s = stats.queue(all.as_str()).ok_or("queue missing")?;
    ensure_eq!((s.pending, s.dead), (u64::from(n), 0), "(pending, dead) after the race");
    for id in ids {
        let p = db.backend.get_job(id).await.map_err(err)?.ok_or("gone")?;
        ensure_eq!(p.location, chokaq::core::JobLocation::Hot(chokaq::core::JobStatus::Pending), "{id}");
    }
    Ok(())
}

/// Purge: a dry run counts and deletes nothing; a purge by age and queue deletes exactly the
/// rows named; both tables; JSON and table.
pub async fn purge(db: Arc<Db>) -> TestResult {
    let (q, other) = (db.q("purge"), db.q("keep"));
    let mut finished = db.archived(&q, 3).await?;
    finished.extend(db.archived(&other, 2).await?);
    finished.extend(db.dead(&q, 2).await?);
    let count = |table: &str, queue: &QueueName| {
        let v = db.ok_json(&["jobs", "list", "--table", table, "--queue", queue.as_str()]);
        v.map(|v| ids_of(&v).len())
    };
    let v = db.ok_json(&["purge", "--table", "archive", "--older-than", "7d", "--dry-run"])?;
    ensure_eq!((v["would_purge"].as_u64(), v["dry_run"].as_bool()), (Some(0), Some(true)), "dry run, 7 days");
    // The rows finished a moment ago: poll until the database clock is past them.
    let mut latest = chrono::DateTime::<chrono::Utc>::MIN_UTC;
    for id in &finished {
        let r = db.backend.get_job(*id).await.map_err(err)?.ok_or("gone")?;
        latest = latest.max(r.finished_at.ok_or("no finish time")?);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db.backend.stats().await.map_err(err)?.taken_at.ok_or("no taken_at")? <= latest {
        ensure!(std::time::Instant::now() < deadline, "the database clock did not pass {latest}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let v = db.ok_json(&["purge", "--table", "archive", "--older-than", "0s", "--queue", q.as_str(), "--dry-run"])?;
    ensure_eq!(v["would_purge"].as_u64(), Some(3), "dry run, queue {q}");
    ensure_eq!(count("archive", &q)?, 3, "nothing deleted by the dry run");
    let t = db.ok_table(&["purge", "--table", "archive", "--older-than", "0s", "--dry-run"])?;
    ensure!(t.starts_with("would purge 5 jobs from the archive table"), "{t}");
    let t = db.ok_table(&["purge", "--table", "archive", "--older-than", "0s", "--queue", q.as_str(), "--yes"])?;
    ensure!(t.starts_with(&format!("purged 3 jobs of queue {q} from the archive table")), "{t}");
    ensure_eq!((count("archive", &q)?, count("archive", &other)?), (0, 2), "archive after the purge");
    let v = db.ok_json(&["purge", "--table", "dead", "--older-than", "0s", "--queue", q.as_str(), "-y"])?;
    ensure_eq!((v["purged"].as_u64(), v["table"].as_str()), (Some(2), Some("dead")), "dead purge");
    ensure_eq!(count("dead", &q)?, 0, "dead letters after the purge");
    Ok(())
}

/// Workers: the rows the backend holds, exactly (JSON), and a table row; none is "no live
/// workers".
pub async fn workers(db: Arc<Db>) -> TestResult {
    ensure_eq!(db.ok_json(&["workers"])?, serde_json::json!([]), "no workers");
    ensure!(db.ok_table(&["workers"])?.contains("no live workers"), "empty table");
    let reg = chokaq::core::WorkerRegistration {
        worker: WorkerId::random(),
        host: "web-7.example".into(),
        pid: 4242,
        queues: vec![QueueName::new("emails").unwrap(), QueueName::new("reports").unwrap()],
        concurrency: 16,
    };
    db.backend.register_worker(&reg).await.map_err(err)?;
    let v = db.ok_json(&["workers"])?;
    let rows_ = v.as_array().ok_or("array")?;
    ensure_eq!(rows_.len(), 1, "workers listed");
    let w = &rows_[0];
    ensure_eq!(
        (w["worker"].as_str(), w["host"].as_str(), w["pid"].as_u64(), strs(&w["queues"]), w["concurrency"].as_u64()),
        (
            Some(reg.worker.to_string().as_str()),
            Some("web-7.example"),
            Some(4242),
            vec!["emails".to_string(), "reports".to_string()],
            Some(16)
        ),
        "worker row"
    );
    ensure!(w["last_seen_seconds_ago"].as_f64().is_some_and(|s| s < 600.0), "{w}");
    let t = rows(&db.ok_table(&["workers"])?);
    ensure_eq!(t[0], ["WORKER", "HOST", "PID", "QUEUES", "CONCURRENCY", "STARTED", "LAST", "SEEN"], "header");
    ensure_eq!(
        t[1][..5],
        [reg.worker.to_string(), "web-7.example".into(), "4242".into(), "emails,reports".into(), "16".into()],
        "row"
    );
    Ok(())
}

/// `chokaq web`: refused without an auth choice and with `--no-auth` off loopback (exit 2);
/// served with a bearer token: 401 without it, the overview with it; SIGTERM-free stop by kill.
pub async fn web(db: Arc<Db>) -> TestResult {
    let out = db.run(&["web"])?;
    ensure_eq!(out.code, 2, "web without an auth choice (stderr {})", out.stderr);
    ensure!(out.stderr.contains("--token, --basic or --no-auth"), "{}", out.stderr);
    let out = db.run(&["web", "--no-auth", "--listen", "0.0.0.0:18080"])?;
    ensure_eq!(out.code, 2, "--no-auth on 0.0.0.0 (stderr {})", out.stderr);
    ensure!(out.stderr.contains("loopback"), "{}", out.stderr);
    // Issue 26: a blank or short token is refused before anything listens.
    for (token, needle) in [("   ", "blank"), ("short-token", "at least 16")] {
        let out = db.run(&["web", "--token", token])?;
        ensure_eq!(out.code, 2, "--token {token:?} (stderr {})", out.stderr);
        ensure!(out.stderr.contains(needle) && !out.stderr.contains("short-token"), "{}", out.stderr);
    }
    // A free port, then the dashboard on it with a bearer token.
    let port = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?.local_addr().map_err(err)?.port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = db
        .cmd(&["web", "--listen", &listen])
        .env("CHOKAQ_WEB_TOKEN", "s3cret-token-0123456789")
        .spawn()
        .map_err(err)?;
    let get = |auth: Option<&str>| -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&listen)?;
        let auth = auth.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        write!(c, "GET / HTTP/1.1\r\nHost: {listen}\r\n{auth}Connection: close\r\n\r\n")?;
        let mut s = String::new();
        c.read_to_string(&mut s)?;
        Ok(s)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let page = loop {
        match get(Some("s3cret-token-0123456789")) {
            Ok(s) => break s,
            Err(_) if std::time::Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => {
                let _ = child.kill();
                return Err(format!("the dashboard never answered on {listen}: {e}"));
            }
        }
    };
    let anon = get(None).map_err(err)?;
    let wrong = get(Some("wrong")).map_err(err)?;
    let _ = child.kill();
    let _ = child.wait();
    ensure!(page.starts_with("HTTP/1.1 200"), "with the token: {}", &page[..page.len().min(200)]);
    ensure!(page.contains("Overview"), "the overview page: {}", &page[..page.len().min(400)]);
    ensure!(anon.starts_with("HTTP/1.1 401"), "without a token: {}", &anon[..anon.len().min(200)]);
    ensure!(wrong.starts_with("HTTP/1.1 401"), "with a wrong token: {}", &wrong[..wrong.len().min(200)]);
    ensure!(
        !page.contains(&db.url) && !page.contains("s3cret-token-0123456789"),
        "the page shows the URL or the token"
    );
    Ok(())
}

/// Issue 15: `stats` and `schedules` show the schedule rows; `schedules pause` / `resume`
/// flip one; an unknown name is exit 3.
pub async fn schedules(db: Arc<Db>) -> TestResult {
    ensure_eq!(db.ok_json(&["schedules"])?, serde_json::json!([]), "no schedules");
    let name = format!("cli.sched.{:08x}", rand::random::<u32>());
    let def = chokaq::core::ScheduleDef::new(name.clone(), "every:60s", "UTC");
    db.backend.register_schedule(&def).await.map_err(err)?;
    let v = db.ok_json(&["stats"])?;
    let rows = v["schedules"].as_array().ok_or("stats has no schedules")?;
    ensure_eq!(rows.len(), 1, "schedules in stats");
    ensure_eq!(rows[0]["name"].as_str(), Some(name.as_str()), "name");
    ensure_eq!((rows[0]["spec"].as_str(), rows[0]["enabled"].as_bool()), (Some("every:60s"), Some(true)), "row");
    // The next tick in the schedule's own zone beside UTC (issue 40): UTC here; none yet (no
    // scheduler has run), so null like next_tick.
    ensure!(rows[0].get("next_tick_local").is_some(), "no next_tick_local: {}", rows[0]);
    ensure_eq!(
        (rows[0]["next_tick"].is_null(), rows[0]["next_tick_local"].is_null()),
        (true, true),
        "next ticks of a schedule no scheduler has run"
    );
    let table = db.ok_table(&["stats"])?;
    ensure!(table.contains("SCHEDULE") && table.contains(&name) && table.contains("active"), "{table}");
    let v = db.ok_json(&["schedules", "pause", &name])?;
    ensure_eq!(v["enabled"].as_bool(), Some(false), "paused");
    let listed = db.ok_table(&["schedules"])?;
    ensure!(listed.contains(&name) && listed.contains("paused"), "{listed}");
    ensure!(db.ok_table(&["schedules", "resume", &name])?.contains("resumed"), "resume");
    let rows = db.backend.list_schedules().await.map_err(err)?;
    ensure_eq!(rows.iter().find(|r| r.name == name).map(|r| r.enabled), Some(true), "enabled again");
    let out = db.run(&["schedules", "pause", "no.such.schedule"])?;
    ensure_eq!(out.code, 3, "unknown schedule (stderr {})", out.stderr);
    Ok(())
}
