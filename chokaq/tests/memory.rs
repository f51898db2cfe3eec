//! The runtime scenarios on the in-memory reference backend (fast, single process). The same
//! scenarios run on PostgreSQL in `tests/postgres.rs`.

mod common;

use std::sync::Arc;

use chokaq::core::memory::MemoryBackend;

fn backend() -> Arc<MemoryBackend> {
    Arc::new(MemoryBackend::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_roundtrip() {
    common::typed_roundtrip(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_fatal() {
    common::retry_and_fatal(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_and_panic() {
    common::poison_and_panic(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_retries() {
    common::timeout_retries(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_cancel() {
    let b = backend();
    common::operator_cancel(b.clone(), b).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_prefetch() {
    common::shutdown_releases_prefetch(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_releases_prefetch() {
    common::pause_releases_prefetch(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_keeps_lookahead_running() {
    common::pause_keeps_lookahead_running(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_discards_outcome() {
    common::lease_lost_discards_outcome(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snooze_does_not_count() {
    common::snooze_does_not_count(backend()).await.unwrap();
}

#[test]
fn bad_settings_are_invalid_input() {
    use chokaq::{ErrorKind, JobContext, Worker};
    use std::time::Duration;
    let b: Arc<dyn chokaq::Backend> = backend();
    let ok = |w: chokaq::WorkerBuilder| w.register(|_: common::Count, _: JobContext| async { Ok(()) });
    let kind = |r: chokaq::Result<Worker>| r.map(|_| ()).unwrap_err().kind();
    assert_eq!(kind(Worker::builder(b.clone()).build()), ErrorKind::InvalidInput, "no handler");
    assert_eq!(kind(ok(Worker::builder(b.clone())).concurrency(0).build()), ErrorKind::InvalidInput);
    assert_eq!(kind(ok(Worker::builder(b.clone())).concurrency(1001).build()), ErrorKind::InvalidInput);
    assert_eq!(kind(ok(Worker::builder(b.clone())).queue("bad queue!").build()), ErrorKind::InvalidInput);
    assert_eq!(
        kind(ok(Worker::builder(b.clone())).heartbeat_interval(Duration::ZERO).build()),
        ErrorKind::InvalidInput
    );
    // Near `Duration::MAX` a setting would overflow the loops' clock arithmetic: refused.
    assert_eq!(kind(ok(Worker::builder(b.clone())).claim_batch_window(Duration::MAX).build()), ErrorKind::InvalidInput);
    assert_eq!(
        kind(ok(Worker::builder(b.clone())).register_raw(" spaced ", |_, _| async { Ok(()) }).build()),
        ErrorKind::InvalidInput
    );
    let w = ok(Worker::builder(b)).build().unwrap();
    assert_eq!(w.config().queues.len(), 1);
    assert_eq!(w.config().queues[0].as_str(), "default");
}

#[tokio::test]
async fn bad_enqueue_is_invalid_input_and_changes_nothing() {
    use chokaq::{Backend, Client, ErrorKind, JobBuilder};
    let b = backend();
    let client = Client::new(b.clone());
    let e = client.enqueue(JobBuilder::raw("no spaces allowed", "k.v1", serde_json::json!({}))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = client.enqueue(JobBuilder::new(&common::Count { n: 1 }).queue("bad/queue")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = client.enqueue(JobBuilder::new(&common::Count { n: 1 }).max_attempts(0)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(b.stats().await.unwrap().total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_worker_hands_back() {
    common::dropped_worker_hands_back(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_cap_under_the_runtime() {
    common::keyed_cap_under_the_runtime(backend()).await.unwrap();
}

/// Issue 41 (docs/outputs.md): a handler's `JobContext::record_output` is read back typed by
/// `Client::output`, kept in the archive; a type it does not decode as is `InvalidInput`, not a
/// panic; an unknown id and a job that recorded nothing are `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_roundtrip() {
    use chokaq::{Client, ErrorKind, JobContext, Worker};
    use std::time::Duration;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Doubled {
        n: u32,
    }

    let b = backend();
    let dynb: Arc<dyn chokaq::Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let w = Worker::builder(dynb)
        .maintenance(common::no_maintenance())
        .register(|job: common::Count, ctx: JobContext| async move {
            if job.n > 0 {
                ctx.record_output(&Doubled { n: job.n }).await?;
                ctx.record_output(&Doubled { n: job.n * 2 }).await?;
            }
            Ok(())
        })
        .build()
        .unwrap();
    let id = client.enqueue(&common::Count { n: 21 }).await.unwrap().id;
    let none = client.enqueue(&common::Count { n: 0 }).await.unwrap().id;
    let (token, h) = common::spawn_worker(w);
    common::wait_for("2 archived", Duration::from_secs(20), || async {
        Ok(chokaq::Backend::stats(&*b).await.map_err(common::err)?.archived == 2)
    })
    .await
    .unwrap();
    common::stop(token, h).await.unwrap();
    assert_eq!(client.output::<Doubled>(id).await.unwrap(), Some(Doubled { n: 42 }));
    assert_eq!(client.output::<Doubled>(none).await.unwrap(), None);
    assert_eq!(client.output::<Doubled>(chokaq::core::JobId::new()).await.unwrap(), None);
    let e = client.output::<String>(id).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains(&id.to_string()), "{e}");
}

/// Issue 41 (docs/workflows.md): the runtime runs a workflow on the reference backend: a
/// fan-out of 8 tasks after `fetch` and a fan-in `load` after them, each task's handler run
/// once, `fetch` first and `load` last, every task succeeded; `load` reads its dependencies'
/// outputs by task name (`JobContext::dependency_output`) and records their sum; `fetch`
/// asking for a task that is not its dependency gets `InvalidInput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_fan_out_fan_in_under_the_runtime() {
    use chokaq::core::{TaskState, Workflow};
    use chokaq::{Client, ErrorKind, IntoNewJob, JobContext, Worker};
    use std::sync::Mutex;
    use std::time::Duration;

    let b = backend();
    let dynb: Arc<dyn chokaq::Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let ran: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen = ran.clone();
    let refused: Arc<Mutex<Option<ErrorKind>>> = Arc::default();
    let refused_in = refused.clone();
    let w = Worker::builder(dynb)
        .maintenance(common::no_maintenance())
        .concurrency(4)
        .register(move |job: common::Count, ctx: JobContext| {
            let (seen, refused) = (seen.clone(), refused_in.clone());
            async move {
                seen.lock().unwrap().push(job.n);
                match job.n {
                    0 => {
                        let e = ctx.dependency_output::<u32>("t1").await.expect_err("t1 is not fetch's dependency");
                        *refused.lock().unwrap() = Some(e.kind());
                        ctx.record_output(&0u32).await?;
                    }
                    100 => {
                        let mut sum = 0;
                        for i in 1..=8 {
                            sum += ctx.dependency_output::<u32>(&format!("t{i}")).await?.unwrap_or(0);
                        }
                        ctx.record_output(&sum).await?;
                    }
                    n => ctx.record_output(&(n * 10)).await?,
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let job = |n: u32| (&common::Count { n }).into_new_job().unwrap();
    let mut wf = Workflow::new("pipeline").add("fetch", job(0), [] as [&str; 0]);
    for i in 1..=8 {
        wf = wf.add(format!("t{i}"), job(i), ["fetch"]);
    }
    wf = wf.add("load", job(100), (1..=8).map(|i| format!("t{i}")));
    let e = client.enqueue_workflow(&wf).await.unwrap();
    let (token, h) = common::spawn_worker(w);
    common::wait_for("the workflow final", Duration::from_secs(20), || async {
        Ok(client.workflow(e.id).await.map_err(common::err)?.is_some_and(|s| s.is_final()))
    })
    .await
    .unwrap();
    common::stop(token, h).await.unwrap();
    let st = client.workflow(e.id).await.unwrap().unwrap();
    assert!(st.tasks.iter().all(|t| t.state == TaskState::Succeeded), "{:?}", st.counts());
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.len(), 10, "{ran:?}");
    assert_eq!(ran.first(), Some(&0), "{ran:?}");
    assert_eq!(ran.last(), Some(&100), "{ran:?}");
    // 10 + 20 + ... + 80, read by task name.
    assert_eq!(client.output::<u32>(e.job("load").unwrap()).await.unwrap(), Some(360));
    assert_eq!(*refused.lock().unwrap(), Some(ErrorKind::InvalidInput));
}
