//! The capped drains and the commit round trip they are measured against: a strict cap of C
//! moves at most C jobs per (handler time + one durable commit round trip).

use std::time::Instant;

use chokaq::Result;
use chokaq_postgres::map_sqlx_error;

use super::Bench;
use crate::figures::{Latency, Results};

impl Bench {
    /// `commit_rtt_ms_p50`, then the capped drain (cap and slots --cap) with handler time 0
    /// and with --handler-ms, by one worker of C slots, then by C workers of one slot each.
    pub(super) async fn capped(&mut self, res: &mut Results) -> Result<()> {
        res.commit_rtt = Some(self.commit_rtt().await?);
        let cap = self.args.cap;
        let h = self.args.handler_ms;
        res.capped = Some(self.drain(cap, Some(cap), 0, res).await?);
        res.capped_slow = Some(self.drain(cap, Some(cap), h, res).await?);
        res.capped_spread = Some(self.drain_by(cap, 1, Some(cap), 0, res).await?);
        res.capped_spread_slow = Some(self.drain_by(cap, 1, Some(cap), h, res).await?);
        Ok(())
    }

    /// One-row autocommit UPDATEs on the pool, one at a time: each is a round trip with a
    /// durable commit (20 warm-up samples dropped).
    async fn commit_rtt(&self) -> Result<Latency> {
        let s = self.q();
        self.exec(&format!(
            "CREATE TABLE {s}.rtt_probe (id int PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO {s}.rtt_probe VALUES (1, 0);"
        ))
        .await?;
        let sql = format!("UPDATE {s}.rtt_probe SET n = n + 1 WHERE id = 1");
        let samples = self.args.rtt_samples as usize;
        let warmup = 20;
        let pb = self.bar("commit round trip", (samples + warmup) as u64);
        let mut ms = Vec::with_capacity(samples);
        for i in 0..samples + warmup {
            let t0 = Instant::now();
            sqlx::query(&sql).execute(self.pg.pool()).await.map_err(map_sqlx_error)?;
            if i >= warmup {
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            pb.inc(1);
        }
        pb.finish_with_message("done");
        self.exec(&format!("DROP TABLE {s}.rtt_probe")).await?;
        Ok(Latency::of(ms))
    }
}
