//! `impl Backend for MssqlBackend`: each operation binds its values, runs its statement
//! (`super::MssqlBackend::run`) and decodes the rows.

use async_trait::async_trait;
use chokaq_core::uuid::Uuid;
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued, Error, ErrorKind,
    FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, JobStatus, JobTable, LeaseRef,
    ListJobsParams, NewJob, PurgeParams, QueueControl, QueueName, QueueSettings, RequeueOutcome, RescueParams,
    RescueReport, Result, StatsSnapshot, ThroughputBucket, ThroughputParams, TimestampPrecision, WorkerId,
    WorkerProcess, WorkerRegistration, DEFAULT_FETCHED_TIMEOUT, DEFAULT_ZOMBIE_TIMEOUT,
};
use tiberius::ToSql;

use crate::migrate;
use crate::rows::{
    check_ts, control_params, count, dead_reason_text, decode_cancel, decode_enqueued, decode_fail, decode_queue,
    decode_record, decode_rescue, decode_stats, delay_parts, fail_action, first_row, heartbeat_report, id_bytes,
    ids_of, job_json, last_set, leases_json, millis, outcome, req, req_ts,
};

use super::{note_rescue, MssqlBackend, MAX_BATCH_DOCUMENT_BYTES};

#[async_trait]
impl Backend for MssqlBackend {
    fn name(&self) -> &'static str {
        "mssql"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::HundredNanoseconds)
            .with_kill_connections(true)
            .with_multi_process(true)
    }

    async fn migrate(&self) -> Result<()> {
        async move { migrate::run(self).await }.await.map_err(|e: chokaq_core::Error| e.with_operation("migrate"))
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        async move {
            if jobs.is_empty() {
                return Ok(Vec::new());
            }
            // The job count, every job's own checks, and the batch's total bytes.
            validate::enqueue_batch(&jobs, self.inner.cfg.max_payload_bytes)?;
            let mut items = Vec::with_capacity(jobs.len());
            for (i, job) in jobs.iter().enumerate() {
                items.push(job_json(i, JobId::new(), job)?);
            }
            let payload = serde_json::Value::Array(items).to_string();
            if payload.len() > MAX_BATCH_DOCUMENT_BYTES {
                return Err(Error::invalid(format!(
                    "enqueue_many batch is {} bytes as one document, over {MAX_BATCH_DOCUMENT_BYTES}: split it",
                    payload.len()
                )));
            }
            let op = "enqueue";
            let mut attempt = 0;
            let rows = loop {
                match self.run(op, &self.sql().enqueue, &[&payload]).await {
                    // A unique-index race the key-range lock did not cover: the other insert has
                    // committed, so a retry finds it and returns its id.
                    Err(e) if e.kind() == ErrorKind::Conflict && attempt < 3 => attempt += 1,
                    other => break last_set(other?),
                }
            };
            decode_enqueued(op, &rows, jobs.len())
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("enqueue_many"))
    }

    async fn claim(&self, req_: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        async move {
            req_.validate()?;
            let (queues, limit, mode) = crate::handoff::claim_args(req_)?;
            let sets = self.run("claim", &self.sql().claim, &[&queues, &req_.worker.0, &limit, &mode]).await?;
            Ok(self.finish_claim(req_.worker, last_set(sets)).await)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("claim"))
    }

    /// One batch and one transaction: the completions, then the claim, which hands the slots
    /// the completions freed on (`handoff.rs`, `docs/sqlserver.md`).
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        self.complete_and_claim_impl(worker, leases, req).await.map_err(|e| e.with_operation("complete_and_claim"))
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("start", leases)?;
            if leases.is_empty() {
                return Ok(BatchOutcome::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run("start", &self.sql().start, &[&json, &worker.0]).await?);
            Ok(outcome(leases, &ids_of("start", &rows)?))
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("start"))
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        async move {
            let op = "heartbeat";
            validate::lease_list(op, leases)?;
            if leases.is_empty() {
                return Ok(HeartbeatReport::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run(op, &self.sql().heartbeat, &[&json, &worker.0]).await?);
            heartbeat_report(op, leases, &rows)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("heartbeat"))
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("complete", leases)?;
            if leases.is_empty() {
                return Ok(BatchOutcome::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run("complete", &self.sql().complete, &[&json, &worker.0]).await?);
            Ok(outcome(leases, &ids_of("complete", &rows)?))
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("complete"))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, action: FailAction) -> Result<Fenced<FailOutcome>> {
        async move {
            let op = "fail";
            action.validate()?;
            let (code, delay, error, reason) = fail_action(action);
            let (secs, nanos) = delay_parts("retry delay", delay)?;
            let error = error.map(|e| validate::error_text(&e));
            let reason_text = dead_reason_text(reason);
            let id = id_bytes(lease.id);
            let row = first_row(
                op,
                self.run(
                    op,
                    &self.sql().fail,
                    &[&id, &lease.lease.0, &worker.0, &code, &secs, &nanos, &error, &reason_text],
                )
                .await?,
            )?;
            decode_fail(op, &row)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("fail"))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("release", leases)?;
            if leases.is_empty() {
                return Ok(BatchOutcome::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run("release", &self.sql().release, &[&json, &worker.0]).await?);
            Ok(outcome(leases, &ids_of("release", &rows)?))
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("release"))
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        async move {
            let op = "rescue";
            if params.limit == 0 {
                return Err(Error::invalid("rescue limit must be at least 1"));
            }
            let fetched = millis("fetched_timeout", DEFAULT_FETCHED_TIMEOUT)?;
            let zombie = millis("zombie_timeout", DEFAULT_ZOMBIE_TIMEOUT)?;
            let limit = i32::try_from(params.limit).map_err(|_| Error::invalid("rescue limit too large"))?;
            let row = first_row(op, self.run(op, &self.sql().rescue, &[&fetched, &zombie, &limit]).await?)?;
            let mut report = decode_rescue(op, &row)?;
            if let Some(misses) = note_rescue(&self.inner.rescue_misses, report.ran) {
                tracing::warn!(
                    target: "chokaq_mssql",
                    misses,
                    "rescue has not run for {misses} calls in a row: another session holds the rescue row of the \
                     schema's Locks table (a long transaction, or a role with UPDATE on it holding it on purpose), \
                     or the schema is not migrated"
                );
            }
            if report.ran {
                for req in &params.purge {
                    report.purged += self.purge_batches(req, true).await?;
                }
            }
            Ok(report)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("rescue"))
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        async move {
            let op = "cancel";
            let bytes = id_bytes(id);
            let row = first_row(op, self.run(op, &self.sql().cancel, &[&bytes]).await?)?;
            decode_cancel(op, &row)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("cancel"))
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        async move {
            let op = "control_queue";
            control.validate()?;
            let p = control_params(control)?;
            let name = queue.as_str().to_string();
            let params: [&dyn ToSql; 9] = [
                &name,
                &p.code,
                &p.max,
                &p.timeout_ms,
                &p.policy,
                &p.key_max,
                &p.rate_jobs,
                &p.rate_per_ms,
                &p.rate_by_key,
            ];
            let row = first_row(op, self.run(op, &self.sql().control_queue, &params).await?)?;
            decode_queue(op, &row)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("control_queue"))
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        async move {
            let op = "queue_settings";
            let name = queue.as_str().to_string();
            let rows = last_set(self.run(op, &self.sql().queue_settings, &[&name]).await?);
            match rows.first() {
                Some(r) => decode_queue(op, r),
                None => Ok(QueueSettings::default_for(queue.clone())),
            }
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("queue_settings"))
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        async move {
            let op = "requeue_dead";
            let bytes = id_bytes(id);
            let row = match self.run(op, &self.sql().requeue_dead, &[&bytes]).await {
                Ok(sets) => first_row(op, sets)?,
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!("requeue_dead: a live job of the same queue already holds the idempotency key of {id}"),
                    ))
                }
                Err(e) => return Err(e),
            };
            Ok(if req::<i32>(op, &row, "Moved")? == 1 { RequeueOutcome::Requeued } else { RequeueOutcome::NotFound })
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("requeue_dead"))
    }

    async fn purge(&self, r: &PurgeParams) -> Result<u64> {
        self.purge_batches(r, false).await.map_err(|e: chokaq_core::Error| e.with_operation("purge"))
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        async move {
            let op = "stats";
            let sets = self.run(op, &self.sql().stats, &[]).await?;
            decode_stats(op, sets)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("stats"))
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        async move {
            let op = "get_job";
            let bytes = id_bytes(id);
            let rows = last_set(self.run(op, &self.sql().get_job, &[&bytes]).await?);
            match rows.len() {
                0 => Ok(None),
                1 => decode_record(op, &rows[0]).map(Some),
                n => Err(Error::new(ErrorKind::Other, format!("get_job: job {id} is in {n} tables at once"))),
            }
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("get_job"))
    }

    async fn list_jobs(&self, f: &ListJobsParams) -> Result<JobPage> {
        async move {
            let op = "list_jobs";
            if f.limit == 0 || f.limit > 1000 {
                return Err(Error::invalid(format!("list limit must be 1 to 1000, got {}", f.limit)));
            }
            if f.status.is_some() && f.table != JobTable::Hot {
                return Err(Error::invalid("list_jobs: a status filter applies to the hot table only"));
            }
            if let Some(tag) = &f.tag {
                validate::text_field("tag", tag, validate::MAX_TAG_LEN)?;
            }
            let sql = match f.table {
                JobTable::Hot => &self.sql().list_hot,
                JobTable::Archive => &self.sql().list_archive,
                JobTable::DeadLetter => &self.sql().list_dlq,
            };
            check_ts("created_from", f.created_from)?;
            check_ts("created_to", f.created_to)?;
            let limit = i32::try_from(f.limit + 1).unwrap_or(1001);
            let after = f.after.map(id_bytes);
            let queue = f.queue.as_ref().map(|q| q.as_str().to_string());
            let status = f.status.map(JobStatus::code);
            let kind = f.kind.as_ref().map(|k| k.as_str().to_string());
            let tag = f.tag.clone();
            let rows = last_set(
                self.run(op, sql, &[&limit, &after, &queue, &status, &kind, &tag, &f.created_from, &f.created_to])
                    .await?,
            );
            let mut jobs = rows.iter().map(|r| decode_record(op, r)).collect::<Result<Vec<_>>>()?;
            if f.without_payloads {
                // The statement still reads the payloads; the answer leaves them out as the
                // contract says (a narrower statement is future work).
                for j in &mut jobs {
                    j.payload = serde_json::Value::Null;
                }
            }
            let next = if jobs.len() > f.limit as usize {
                jobs.truncate(f.limit as usize);
                jobs.last().map(|j| j.id)
            } else {
                None
            };
            Ok(JobPage { jobs, next })
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("list_jobs"))
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        async move {
            let op = "register_worker";
            reg.validate()?;
            let queues: Vec<&str> = reg.queues.iter().map(|q| q.as_str()).collect();
            let queues = serde_json::to_string(&queues)?;
            let (host, pid, concurrency) = (reg.host.clone(), i64::from(reg.pid), i64::from(reg.concurrency));
            self.run(op, &self.sql().register_worker, &[&reg.worker.0, &host, &pid, &queues, &concurrency]).await?;
            Ok(())
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("register_worker"))
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        async move {
            let op = "deregister_worker";
            let row = first_row(op, self.run(op, &self.sql().deregister_worker, &[&worker.0]).await?)?;
            Ok(count(op, &row, "Deleted")? > 0)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("deregister_worker"))
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        async move {
            let op = "list_workers";
            let rows = last_set(self.run(op, &self.sql().list_workers, &[]).await?);
            let bad = |what: &str| Error::new(ErrorKind::Other, format!("{op}: unexpected stored {what}"));
            rows.iter()
                .map(|r| {
                    let queues: &str = req(op, r, "Queues")?;
                    Ok(WorkerProcess {
                        worker: WorkerId(req::<Uuid>(op, r, "WorkerId")?),
                        host: req::<&str>(op, r, "Host")?.to_string(),
                        pid: u32::try_from(req::<i64>(op, r, "Pid")?).map_err(|_| bad("pid"))?,
                        queues: serde_json::from_str(queues).map_err(|_| bad("queues"))?,
                        concurrency: u32::try_from(req::<i64>(op, r, "Concurrency")?)
                            .map_err(|_| bad("concurrency"))?,
                        started_at: req_ts(op, r, "StartedAtUtc")?,
                        last_seen_at: req_ts(op, r, "LastSeenAtUtc")?,
                    })
                })
                .collect::<Result<Vec<_>>>()
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("list_workers"))
    }

    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        async move {
            let op = "prune_workers";
            let ms = millis("stale_after", stale_after)?;
            let row = first_row(op, self.run(op, &self.sql().prune_workers, &[&ms]).await?)?;
            count(op, &row, "Deleted")
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("prune_workers"))
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        async move {
            let op = "throughput";
            params.validate()?;
            let ms = millis("window", params.window)?;
            let sets = match &params.queue {
                None => self.run(op, &self.sql().throughput_all, &[&ms]).await?,
                Some(q) => {
                    let name = q.as_str().to_string();
                    self.run(op, &self.sql().throughput_queue, &[&ms, &name]).await?
                }
            };
            last_set(sets)
                .iter()
                .map(|r| {
                    Ok(ThroughputBucket {
                        queue: req::<&str>(op, r, "Queue")?.to_string(),
                        minute: req_ts(op, r, "Minute")?,
                        finished: count(op, r, "Finished")?,
                        failed: count(op, r, "Failed")?,
                        retried: count(op, r, "Retried")?,
                    })
                })
                .collect::<Result<Vec<_>>>()
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("throughput"))
    }

    async fn wakeups(&self) -> Result<Option<chokaq_core::Wakeups>> {
        async move { Ok(None) }.await.map_err(|e: chokaq_core::Error| e.with_operation("wakeups"))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &chokaq_core::ScheduleDef) -> Result<chokaq_core::ScheduleRow> {
        self.register_schedule_impl(def).await.map_err(|e| e.with_operation("register_schedule"))
    }

    async fn enqueue_tick(&self, req: &chokaq_core::TickRequest) -> Result<chokaq_core::TickOutcome> {
        self.enqueue_tick_impl(req).await.map_err(|e| e.with_operation("enqueue_tick"))
    }

    async fn list_schedules(&self) -> Result<Vec<chokaq_core::ScheduleRow>> {
        self.list_schedules_impl().await.map_err(|e| e.with_operation("list_schedules"))
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<chokaq_core::ScheduleRow> {
        self.set_schedule_enabled_impl(name, enabled).await.map_err(|e| e.with_operation("set_schedule_enabled"))
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        self.mark_stale_schedules_impl(group, live).await.map_err(|e| e.with_operation("mark_stale_schedules"))
    }
}
