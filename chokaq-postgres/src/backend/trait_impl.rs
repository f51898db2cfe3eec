//! `impl Backend for PgBackend` (moved out of backend.rs): each operation binds values to its
//! prepared statement and reads the rows.

use super::*;

#[async_trait]
impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond).with_kill_connections(true).with_multi_process(true)
    }

    async fn migrate(&self) -> Result<()> {
        async move { with_retry(|| migrate::migrate(&self.pool, self.sql(), &self.shared.schema)).await }
            .await
            .map_err(|e: Error| e.with_operation("migrate"))
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        async move {
            let (rows, slots) = self.prepare(jobs)?;
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            self.enqueue_on(Target::Pool(&self.kept), &rows, &slots).await
        }
        .await
        .map_err(|e: Error| e.with_operation("enqueue_many"))
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        async move {
            req.validate()?;
            let queues: Vec<String> = req.queues.iter().map(|q| q.as_str().to_owned()).collect();
            let mode = mode_code(req.mode);
            let rows = with_retry(|| {
                sqlx::query(&self.sql().claim)
                    .bind(req.worker.0)
                    .bind(&queues)
                    .bind(req.limit as i32)
                    .bind(mode)
                    .fetch_all(&self.kept)
            })
            .await?;
            let (jobs, bad) = sorted_claims(&rows)?;
            self.dead_letter_undecodable(req.worker, bad).await?;
            Ok(jobs)
        }
        .await
        .map_err(|e: Error| e.with_operation("claim"))
    }

    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        async move {
            req.validate()?;
            validate::lease_list("complete_and_claim", leases)?;
            let (ids, lease_nums) = pairs(leases);
            let queues: Vec<String> = req.queues.iter().map(|q| q.as_str().to_owned()).collect();
            let mode = mode_code(req.mode);
            let rows = with_retry(|| {
                sqlx::query(&self.sql().complete_and_claim)
                    .bind(worker.0)
                    .bind(&ids)
                    .bind(&lease_nums)
                    .bind(&queues)
                    .bind(req.limit as i32)
                    .bind(mode)
                    .fetch_all(&self.kept)
            })
            .await?;
            let mut done: HashSet<Uuid> = HashSet::new();
            let mut claimed = Vec::with_capacity(rows.len());
            for row in rows {
                if done.is_empty() {
                    let ids: Vec<Uuid> = row.try_get("o_done").map_err(map_sqlx_error)?;
                    done.extend(ids);
                }
                let id: Option<Uuid> = row.try_get("id").map_err(map_sqlx_error)?;
                if id.is_some() {
                    claimed.push(row);
                }
            }
            let (jobs, bad) = sorted_claims(&claimed)?;
            self.dead_letter_undecodable(worker, bad).await?;
            self.completed_before(worker, leases, &mut done).await?;
            Ok((split(&ids, &done), jobs))
        }
        .await
        .map_err(|e: Error| e.with_operation("complete_and_claim"))
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            let (ids, done) = self.guarded("start", &self.sql().start, worker, leases).await?;
            Ok(split(&ids, &done))
        }
        .await
        .map_err(|e: Error| e.with_operation("start"))
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        async move {
            validate::lease_list("heartbeat", leases)?;
            let (ids, lease_nums) = pairs(leases);
            if ids.is_empty() {
                return Ok(HeartbeatReport::default());
            }
            let sql = &self.sql().heartbeat;
            let rows: Vec<(Uuid, bool)> = with_retry(|| {
                sqlx::query_as::<_, (Uuid, bool)>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&self.kept)
            })
            .await?;
            let held: HashMap<Uuid, bool> = rows.into_iter().collect();
            Ok(HeartbeatReport::merge(ids.iter().map(|id| (JobId(*id), held.get(id).copied()))))
        }
        .await
        .map_err(|e: Error| e.with_operation("heartbeat"))
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            let (ids, mut done) = self.guarded("complete", &self.sql().complete, worker, leases).await?;
            self.completed_before(worker, leases, &mut done).await?;
            Ok(split(&ids, &done))
        }
        .await
        .map_err(|e: Error| e.with_operation("complete"))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        async move {
            outcome.validate()?;
            let (act, delay, error, reason) = match &outcome {
                FailAction::Retry { delay, error } => ("retry", *delay, Some(error_text(error)), DeadReason::Failed),
                FailAction::Snooze { delay } => ("snooze", *delay, None, DeadReason::Failed),
                FailAction::DeadLetter { reason, error } => ("dead", Duration::ZERO, Some(error_text(error)), *reason),
                FailAction::Cancelled { error } => {
                    ("dead", Duration::ZERO, error.as_deref().map(error_text), DeadReason::Cancelled)
                }
            };
            let row = with_retry(|| {
                sqlx::query(&self.sql().fail)
                    .bind(worker.0)
                    .bind(lease.id.0)
                    .bind(lease.lease.0)
                    .bind(act)
                    .bind(rows::micros(delay))
                    .bind(error.as_deref())
                    .bind(reason.as_str())
                    .fetch_optional(&self.kept)
            })
            .await?;
            let missing = || Error::new(ErrorKind::Other, "fail: no due time returned");
            let Some(row) = row else {
                // Not held: the outcome this lease already wrote, if it did (a repeat), else lost.
                let row = with_retry(|| {
                    sqlx::query(&self.sql().fail_standing)
                        .bind(worker.0)
                        .bind(lease.id.0)
                        .bind(lease.lease.0)
                        .fetch_optional(&self.kept)
                })
                .await?;
                let Some(row) = row else { return Ok(Fenced::LeaseLost) };
                let at: Option<Timestamp> = row.try_get("at").map_err(map_sqlx_error)?;
                let stood: Option<String> = row.try_get("reason").map_err(map_sqlx_error)?;
                return Ok(Fenced::Done(match (stood, &outcome) {
                    (Some(r), _) => FailOutcome::DeadLettered(DeadReason::parse(&r)?),
                    (None, FailAction::Snooze { .. }) => FailOutcome::Snoozed { until: at.ok_or_else(missing)? },
                    (None, _) => FailOutcome::Retried { at: at.ok_or_else(missing)? },
                }));
            };
            let done: String = row.try_get("act").map_err(map_sqlx_error)?;
            let at: Option<Timestamp> = row.try_get("at").map_err(map_sqlx_error)?;
            Ok(Fenced::Done(match done.as_str() {
                "retry" => FailOutcome::Retried { at: at.ok_or_else(missing)? },
                "snooze" => FailOutcome::Snoozed { until: at.ok_or_else(missing)? },
                "cancelled" => FailOutcome::DeadLettered(DeadReason::Cancelled),
                _ => FailOutcome::DeadLettered(reason),
            }))
        }
        .await
        .map_err(|e: Error| e.with_operation("fail"))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            let (ids, done) = self.guarded("release", &self.sql().release, worker, leases).await?;
            Ok(split(&ids, &done))
        }
        .await
        .map_err(|e: Error| e.with_operation("release"))
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        async move {
            let limit = i64::from(params.limit);
            let report = with_retry(|| async {
                let mut tx = self.kept.begin().await?;
                let got = sqlx::query(&self.sql().rescue_lock).fetch_optional(&mut *tx).await?.is_some();
                if !got {
                    tx.rollback().await?;
                    return Ok(RescueReport::default());
                }
                let (released, held_dead): (i64, i64) = sqlx::query_as(&self.sql().rescue_fetched)
                    .bind(rows::micros(DEFAULT_FETCHED_TIMEOUT))
                    .bind(limit)
                    .bind(rows::micros(DEFAULT_ZOMBIE_TIMEOUT))
                    .fetch_one(&mut *tx)
                    .await?;
                let (retried, dead): (i64, i64) = sqlx::query_as(&self.sql().rescue_zombies)
                    .bind(rows::micros(DEFAULT_ZOMBIE_TIMEOUT))
                    .bind(limit)
                    .fetch_one(&mut *tx)
                    .await?;
                // Keys with Blocked rows and room (a lost promotion), then the starts log.
                sqlx::query(&self.sql().rescue_sweep).execute(&mut *tx).await?;
                sqlx::query(&self.sql().rescue_prune_starts).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(RescueReport {
                    ran: true,
                    fetched_released: count(released),
                    zombies_retried: count(retried),
                    zombies_dead: count(dead) + count(held_dead),
                    purged: 0,
                })
            })
            .await?;
            self.note_rescue(report.ran);
            let mut report = report;
            if report.ran {
                for req in &params.purge {
                    report.purged += self.purge_batches(req, true).await?;
                }
            }
            Ok(report)
        }
        .await
        .map_err(|e: Error| e.with_operation("rescue"))
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        async move {
            let (dead, requested): (i64, i64) =
                with_retry(|| sqlx::query_as(&self.sql().cancel).bind(id.0).fetch_one(&self.kept)).await?;
            Ok(if dead > 0 {
                CancelOutcome::Cancelled
            } else if requested > 0 {
                CancelOutcome::Requested
            } else {
                CancelOutcome::NotLive
            })
        }
        .await
        .map_err(|e: Error| e.with_operation("cancel"))
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        async move {
            // Range checks: an out-of-range value is never stored (`SetZombieTimeout(Duration::MAX)`
            // would make every later rescue fail with "interval out of range", for every queue).
            control.validate()?;
            let s = self.sql();
            match control {
                QueueControl::Pause => self.set_control(&s.control_paused, queue, true).await,
                QueueControl::Resume => self.set_control(&s.control_paused, queue, false).await,
                QueueControl::Activate => self.set_control(&s.control_active, queue, true).await,
                QueueControl::Deactivate => self.set_control(&s.control_active, queue, false).await,
                QueueControl::SetMaxWorkers(max) => {
                    let max = max
                        .map(|m| i32::try_from(m).map_err(|_| Error::invalid(format!("max_workers {m} is too large"))))
                        .transpose()?;
                    self.set_control(&s.control_max_workers, queue, max).await
                }
                QueueControl::SetZombieTimeout(t) => {
                    let ms = t.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1));
                    self.set_control(&s.control_zombie_timeout, queue, ms).await
                }
                QueueControl::SetFetchedTimeout(t) => {
                    let ms = t.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1));
                    self.set_control(&s.control_fetched_timeout, queue, ms).await
                }
                QueueControl::SetZombiePolicy(p) => {
                    let code: i16 = match p {
                        ZombiePolicy::Retry => 0,
                        ZombiePolicy::DeadLetter => 1,
                    };
                    self.set_control(&s.control_zombie_policy, queue, code).await
                }
                QueueControl::SetKeyMaxWorkers(max) => {
                    let max = max
                        .map(|m| {
                            i32::try_from(m).map_err(|_| Error::invalid(format!("key_max_workers {m} is too large")))
                        })
                        .transpose()?;
                    self.set_control(&s.control_key_max_workers, queue, max).await
                }
                QueueControl::SetRateLimit(limit) => self.set_rate_limit(queue, limit).await,
            }
        }
        .await
        .map_err(|e: Error| e.with_operation("control_queue"))
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        async move {
            let row =
                with_retry(|| sqlx::query(&self.sql().queue_settings).bind(queue.as_str()).fetch_optional(&self.kept))
                    .await?;
            match row {
                Some(row) => rows::queue_settings(&row),
                None => Ok(QueueSettings::default_for(queue.clone())),
            }
        }
        .await
        .map_err(|e: Error| e.with_operation("queue_settings"))
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        async move {
            let (moved, _woke): (i64, i64) =
                with_retry(|| sqlx::query_as(&self.sql().requeue).bind(id.0).fetch_one(&self.kept)).await.map_err(
                    |e| {
                        if e.kind() == ErrorKind::Conflict {
                            Error::new(ErrorKind::Conflict, format!("a live job holds the idempotency key of {id}"))
                        } else {
                            e
                        }
                    },
                )?;
            Ok(if moved > 0 { RequeueOutcome::Requeued } else { RequeueOutcome::NotFound })
        }
        .await
        .map_err(|e: Error| e.with_operation("requeue_dead"))
    }

    /// Deletes in bounded batches (`DELETE … WHERE id IN (SELECT id … LIMIT n FOR UPDATE SKIP
    /// LOCKED)`), each its own short transaction, until a batch comes back short or
    /// `max_batches` ran. Concurrent purges skip each other's rows instead of waiting.
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        async move { self.purge_batches(req, false).await }.await.map_err(|e: Error| e.with_operation("purge"))
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        async move {
            let rows = with_retry(|| async {
                let mut tx = self.kept.begin().await?;
                sqlx::query(&self.sql().no_jit).execute(&mut *tx).await?;
                let rows = sqlx::query(&self.sql().stats).fetch_all(&mut *tx).await?;
                tx.commit().await?;
                Ok(rows)
            })
            .await?;
            rows::stats(&rows)
        }
        .await
        .map_err(|e: Error| e.with_operation("stats"))
    }

    async fn stats_estimated(&self) -> Result<StatsSnapshot> {
        async move {
            let rows = with_retry(|| async {
                let mut tx = self.kept.begin().await?;
                sqlx::query(&self.sql().no_jit).execute(&mut *tx).await?;
                let rows = sqlx::query(&self.sql().stats_estimated).bind(self.schema()).fetch_all(&mut *tx).await?;
                tx.commit().await?;
                Ok(rows)
            })
            .await?;
            rows::stats(&rows)
        }
        .await
        .map_err(|e: Error| e.with_operation("stats_estimated"))
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        async move {
            let row = with_retry(|| sqlx::query(&self.sql().get_job).bind(id.0).fetch_optional(&self.kept)).await?;
            row.as_ref().map(rows::record).transpose()
        }
        .await
        .map_err(|e: Error| e.with_operation("get_job"))
    }

    /// One page in id order; `next` is the last id of the page when more rows follow.
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        async move {
            listing::validate_params(filter)?;
            // Only the filters given, built with sea-query (`chokaq_core::listing`).
            let q = sql::list_query(&self.shared.schema, filter)?;
            let found = with_retry(|| {
                let mut query = sqlx::query(&q.sql);
                for arg in &q.args {
                    query = match arg {
                        ListArg::Text(s) => query.bind(s.as_str()),
                        ListArg::SmallInt(n) => query.bind(*n),
                        ListArg::BigInt(n) => query.bind(*n),
                        ListArg::Bytes(b) => query.bind(b.as_slice()),
                        ListArg::Uuid(u) => query.bind(*u),
                        ListArg::Time(t) => query.bind(*t),
                    };
                }
                query.fetch_all(&self.kept)
            })
            .await?;
            let mut jobs = found.iter().map(rows::record).collect::<Result<Vec<_>>>()?;
            let next = if jobs.len() > filter.limit as usize {
                jobs.truncate(filter.limit as usize);
                jobs.last().map(|j| j.id)
            } else {
                None
            };
            Ok(JobPage { jobs, next })
        }
        .await
        .map_err(|e: Error| e.with_operation("list_jobs"))
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        async move {
            reg.validate()?;
            let queues: Vec<&str> = reg.queues.iter().map(|q| q.as_str()).collect();
            with_retry(|| {
                sqlx::query(&self.sql().register_worker)
                    .bind(reg.worker.0)
                    .bind(&reg.host)
                    .bind(i64::from(reg.pid))
                    .bind(&queues)
                    .bind(i64::from(reg.concurrency))
                    .execute(&self.kept)
            })
            .await?;
            Ok(())
        }
        .await
        .map_err(|e: Error| e.with_operation("register_worker"))
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        async move {
            let n = with_retry(|| sqlx::query(&self.sql().deregister_worker).bind(worker.0).execute(&self.kept))
                .await?
                .rows_affected();
            Ok(n > 0)
        }
        .await
        .map_err(|e: Error| e.with_operation("deregister_worker"))
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        async move {
            type Row = (Uuid, String, i64, Vec<String>, i64, Timestamp, Timestamp);
            let rows: Vec<Row> = with_retry(|| sqlx::query_as(&self.sql().list_workers).fetch_all(&self.kept)).await?;
            rows.into_iter()
                .map(|(id, host, pid, queues, concurrency, started_at, last_seen_at)| {
                    Ok(WorkerProcess {
                        worker: WorkerId(id),
                        host,
                        pid: u32::try_from(pid).map_err(|_| Error::new(ErrorKind::Other, "stored pid out of range"))?,
                        queues,
                        concurrency: u32::try_from(concurrency)
                            .map_err(|_| Error::new(ErrorKind::Other, "stored concurrency out of range"))?,
                        started_at,
                        last_seen_at,
                    })
                })
                .collect::<Result<Vec<_>>>()
        }
        .await
        .map_err(|e: Error| e.with_operation("list_workers"))
    }

    async fn prune_workers(&self, stale_after: Duration) -> Result<u64> {
        async move {
            let n = with_retry(|| {
                sqlx::query(&self.sql().prune_workers).bind(rows::micros(stale_after)).execute(&self.kept)
            })
            .await?
            .rows_affected();
            Ok(n)
        }
        .await
        .map_err(|e: Error| e.with_operation("prune_workers"))
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        async move {
            params.validate()?;
            let window = rows::micros(params.window);
            let rows: Vec<(String, Timestamp, i64, i64, i64)> = with_retry(|| async {
                let mut tx = self.kept.begin().await?;
                sqlx::query(&self.sql().no_jit).execute(&mut *tx).await?;
                let rows = match &params.queue {
                    None => sqlx::query_as(&self.sql().throughput_all).bind(window).fetch_all(&mut *tx).await?,
                    Some(q) => {
                        sqlx::query_as(&self.sql().throughput_queue)
                            .bind(window)
                            .bind(q.as_str())
                            .fetch_all(&mut *tx)
                            .await?
                    }
                };
                tx.commit().await?;
                Ok(rows)
            })
            .await?;
            Ok(rows
                .into_iter()
                .map(|(queue, minute, finished, failed, retried)| ThroughputBucket {
                    queue,
                    minute,
                    finished: finished.max(0) as u64,
                    failed: failed.max(0) as u64,
                    retried: retried.max(0) as u64,
                })
                .collect())
        }
        .await
        .map_err(|e: Error| e.with_operation("throughput"))
    }

    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        async move {
            // One LISTEN session per backend, whatever the number of workers on it: every
            // stream subscribes to the same broadcast.
            let mut wake = self.shared.wake.lock().await;
            if let Some(tx) = wake.as_ref().filter(|tx| tx.receiver_count() > 0) {
                return Ok(Some(Wakeups::new(tx.subscribe())));
            }
            let channel = self.shared.channel.clone();
            // The listener's own connection, outside the pool (same options: the sessions'
            // name, isolation pin and timeouts), so it never takes a connection the claims need:
            // a pool of one serves them beside it.
            let own = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(self.pool.options().get_acquire_timeout())
                .test_before_acquire(false)
                .connect_lazy_with((*self.pool.connect_options()).clone());
            let listener = with_retry(|| async {
                let mut listener = PgListener::connect_with(&own).await?;
                listener.listen(&channel).await?;
                Ok(listener)
            })
            .await?;
            let (tx, rx) = tokio::sync::broadcast::channel(1024);
            tokio::spawn(listen::run(self.pool.clone(), own, channel, tx.clone(), listener));
            *wake = Some(tx);
            Ok(Some(Wakeups::new(rx)))
        }
        .await
        .map_err(|e: Error| e.with_operation("wakeups"))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        self.register_schedule_impl(def).await.map_err(|e: Error| e.with_operation("register_schedule"))
    }

    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        self.enqueue_tick_impl(req).await.map_err(|e: Error| e.with_operation("enqueue_tick"))
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.list_schedules_impl().await.map_err(|e: Error| e.with_operation("list_schedules"))
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        self.set_schedule_enabled_impl(name, enabled).await.map_err(|e: Error| e.with_operation("set_schedule_enabled"))
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        self.mark_stale_schedules_impl(group, live).await.map_err(|e: Error| e.with_operation("mark_stale_schedules"))
    }
}
