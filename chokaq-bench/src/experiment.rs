//! Schema designs measured against the shipped one (issue 38, "the job path at the bare loop's
//! server cost"): `--experiment <name>` applies one of them to the bench's own schema right
//! after `migrate`, so every workload of the run measures it. They are measurements, not
//! supported configurations: the shipped schema is what `migrate` builds.

use chokaq::Result;
use chokaq_postgres::{map_sqlx_error, PgBackend};
use clap::ValueEnum;

/// A design to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Experiment {
    /// The archive's time index as a BRIN on `finished_at` instead of the btree
    /// `(finished_at, queue)`: one btree entry less per archived job.
    ArchiveBrin,
    /// `archive-brin`, and no `(kind, id)` index on the archive either (the listing by kind
    /// then reads the archive in id order): the least the archive's listings can be kept with.
    ArchiveLean,
    /// Issue 42: the unique key stays on the job's row, without the index that enforces it
    /// (`jobs_hot_unique_key`): what that index costs the `enqueue-unique` workload. Not a
    /// design: without it duplicates go in.
    UniqueUnindexed,
    /// Issue 41: no workflow and batch trigger on `jobs_hot` (`jobs_hot_job_ended`): what its
    /// presence costs the jobs that never fire it (its `WHEN (OLD.hooked)` is false for them).
    /// Not a design: without it no workflow task is released.
    NoFlowTrigger,
}

impl Experiment {
    fn ddl(self) -> &'static [&'static str] {
        const BRIN: [&str; 2] = [
            "DROP INDEX {schema}.jobs_archive_finished_queue_idx",
            "CREATE INDEX jobs_archive_finished_brin ON {schema}.jobs_archive USING brin (finished_at)",
        ];
        const LEAN: [&str; 3] = [BRIN[0], BRIN[1], "DROP INDEX {schema}.jobs_archive_kind_idx"];
        match self {
            Experiment::ArchiveBrin => &BRIN,
            Experiment::ArchiveLean => &LEAN,
            Experiment::UniqueUnindexed => &["DROP INDEX {schema}.jobs_hot_unique_key"],
            Experiment::NoFlowTrigger => &["DROP TRIGGER jobs_hot_job_ended ON {schema}.jobs_hot"],
        }
    }
}

/// Applies `x`'s DDL to `schema` (a validated name: the bench's own).
pub(crate) async fn apply(pg: &PgBackend, schema: &str, x: Experiment) -> Result<()> {
    for stmt in x.ddl() {
        let sql = stmt.replace("{schema}", &format!("\"{schema}\""));
        sqlx::query(&sql).execute(pg.pool()).await.map_err(map_sqlx_error)?;
    }
    eprintln!("chokaq-bench: experiment {x:?} applied");
    Ok(())
}
