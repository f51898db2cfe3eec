//! Upgrades (issue 27 item 4): for each earlier schema version N (1 to 8), a fresh schema is
//! migrated by version N's own batches (`tests/upgrade/vN.sql`, sent as that version sent
//! them), then by today's `migrate`, and must then pass the whole conformance suite and record
//! every version up to today's. Each version is one trial (`upgrade_from_vN`), ignored with the
//! reason where no SQL Server is reachable (found as the conformance binaries find theirs:
//! `tests/common/server.rs`); `upgrade_steps_are_complete` needs no server.
//!
//! Multi-process cases are ignored here (the conformance binaries run them on a fresh schema).

mod common;

#[path = "upgrade/steps.rs"]
mod steps;

use std::process::ExitCode;
use std::sync::Arc;

use chokaq_conformance::libtest_mimic::Trial;
use chokaq_conformance::{run_case_outcomes, Outcome, TestBackend};
use chokaq_core::Backend;

use common::server::{self, exec, CaseFn, CaseResult};

/// Today's schema version: what `SchemaVersions` holds after the upgrade.
const TODAY: u32 = 11;

fn main() -> ExitCode {
    let cases: Vec<(&'static str, CaseFn)> = vec![
        ("upgrade_from_v1", |u| Box::pin(upgrade_from(u, 1))),
        ("upgrade_from_v2", |u| Box::pin(upgrade_from(u, 2))),
        ("upgrade_from_v3", |u| Box::pin(upgrade_from(u, 3))),
        ("upgrade_from_v4", |u| Box::pin(upgrade_from(u, 4))),
        ("upgrade_from_v5", |u| Box::pin(upgrade_from(u, 5))),
        ("upgrade_from_v6", |u| Box::pin(upgrade_from(u, 6))),
        ("upgrade_from_v7", |u| Box::pin(upgrade_from(u, 7))),
        ("upgrade_from_v8", |u| Box::pin(upgrade_from(u, 8))),
        ("upgrade_from_v9", |u| Box::pin(upgrade_from(u, 9))),
        ("upgrade_from_v10", |u| Box::pin(upgrade_from(u, 10))),
    ];
    assert_eq!(cases.len(), steps::VERSIONS.len(), "one trial per earlier version");
    let always = vec![Trial::test("upgrade_steps_are_complete", || {
        steps::check_versions();
        Ok(())
    })];
    server::run_cases(cases, always)
}

async fn upgrade_from(url: String, version: u32) -> CaseResult {
    let file = steps::VERSIONS.iter().find(|(v, _)| *v == version).map(|(_, f)| *f).ok_or("no such version")?;
    let schema = chokaq_conformance::fresh_schema_name();
    let b = server::unmigrated(&url, &schema).await?;
    let mut old = server::session(&url).await?;
    for (name, sql) in steps::batches(file, &schema) {
        // As version N sent them: one batch each, through sp_executesql.
        old.execute(sql.as_str(), &[]).await.map_err(|e| format!("v{version} {name}: {e}"))?;
    }
    let before =
        server::count(&mut old, &format!("SELECT CAST(MAX([Version]) AS BIGINT) FROM [{schema}].[SchemaVersions]"))
            .await?;
    if before != i64::from(version) {
        let _ = server::drop(&b).await;
        return Err(format!("version {version}'s migration recorded version {before}"));
    }
    b.migrate().await.map_err(|e| format!("today's migrate over version {version}: {e}"))?;
    b.migrate().await.map_err(|e| format!("today's migrate, again: {e}"))?;
    let recorded = server::count(&mut old, &format!("SELECT COUNT_BIG(*) FROM [{schema}].[SchemaVersions]")).await?;
    let top =
        server::count(&mut old, &format!("SELECT CAST(MAX([Version]) AS BIGINT) FROM [{schema}].[SchemaVersions]"))
            .await?;
    exec(&mut old, "SELECT 1;").await?;
    let backend: Arc<dyn TestBackend> = Arc::new(b.clone());
    let outcomes = run_case_outcomes(backend, &[], None).await;
    let _ = server::drop(&b).await;
    if (recorded, top) != (i64::from(TODAY), i64::from(TODAY)) {
        return Err(format!("after the upgrade from v{version}: {recorded} versions recorded, the highest {top}"));
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|(name, o)| match o {
            Outcome::Failed(msg) => Some(format!("{name}: {msg}")),
            _ => None,
        })
        .collect();
    let passed = outcomes.iter().filter(|(_, o)| matches!(o, Outcome::Passed)).count();
    eprintln!("[upgrade from v{version}: {passed} of {} cases passed]", outcomes.len());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("after the upgrade from v{version}, {} cases failed:\n{}", failed.len(), failed.join("\n")))
    }
}
