use super::*;
use crate::{JobKind, QueueName};

const COLS: &str = "id, queue, kind";

fn t(s: &str) -> Timestamp {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn build(d: SqlDialect, p: &ListJobsParams) -> ListQuery {
    list_query(d, "jobs", COLS, p).unwrap()
}

/// Which predicate texts appear in a rendered WHERE clause (by column or marker).
fn preds(sql: &str) -> Vec<&'static str> {
    let wh = sql.split_once(" WHERE ").map_or("", |(_, w)| w);
    let mut out = Vec::new();
    for (name, marks) in [
        ("queue", &["\"queue\" =", "`queue` ="][..]),
        ("status", &["\"status\"", "`status`"][..]),
        ("kind", &["\"kind\" =", "`kind` ="][..]),
        ("tag", &["ANY (tags)", "JSON_CONTAINS", "json_each"][..]),
        ("created_from", &["\"created_at\" >=", "`created_at` >="][..]),
        ("created_to", &["\"created_at\" <", "`created_at` <"][..]),
        ("id_lower", &["\"id\" >", "`id` >"][..]),
        ("id_upper", &["\"id\" <", "`id` <"][..]),
    ] {
        if marks.iter().any(|m| wh.contains(m)) {
            out.push(name);
        }
    }
    out
}

#[test]
fn no_filter_is_the_primary_key_in_order() {
    let q = build(SqlDialect::Postgres, &ListJobsParams::new(JobTable::Archive));
    assert_eq!(q.sql, r#"SELECT id, queue, kind FROM "jobs"."jobs_archive" ORDER BY "id" ASC LIMIT $1"#);
    assert_eq!(q.args, vec![ListArg::BigInt(101)]);
    let q = build(SqlDialect::Mysql, &ListJobsParams::new(JobTable::Hot));
    assert_eq!(q.sql, "SELECT id, queue, kind FROM `jobs`.`jobs_hot` ORDER BY `id` ASC LIMIT ?");
    let q = build(SqlDialect::Sqlite, &ListJobsParams::new(JobTable::DeadLetter));
    assert_eq!(q.sql, r#"SELECT id, queue, kind FROM "jobs"."jobs_dlq" ORDER BY "id" ASC LIMIT ?"#);
}

/// Every combination of the filters, on every table and dialect: each renders exactly the
/// predicates of its filters, and one value per placeholder.
#[test]
fn each_combination_renders_its_predicates_and_no_others() {
    let from = t("2026-12-01T10:00:00Z");
    let to = t("2026-12-01T11:00:00Z");
    let mut checked = 0;
    for d in [SqlDialect::Postgres, SqlDialect::Mysql, SqlDialect::Sqlite] {
        for table in [JobTable::Hot, JobTable::Archive, JobTable::DeadLetter] {
            for mask in 0u32..128 {
                let has = |bit: u32| mask & (1 << bit) != 0;
                if has(1) && table != JobTable::Hot {
                    continue;
                }
                let p = ListJobsParams {
                    queue: has(0).then(|| QueueName::new("q1").unwrap()),
                    status: has(1).then_some(JobStatus::Processing),
                    kind: has(2).then(|| JobKind::new("k1").unwrap()),
                    tag: has(3).then(|| "t1".to_string()),
                    created_from: has(4).then_some(from),
                    created_to: has(5).then_some(to),
                    after: has(6).then(|| JobId(v7_floor(t("2026-12-01T12:00:00Z")))),
                    ..ListJobsParams::new(table)
                };
                validate_params(&p).unwrap();
                let q = build(d, &p);
                let mut want = Vec::new();
                for (bit, name) in [(0, "queue"), (1, "status"), (2, "kind"), (3, "tag"), (4, "created_from")] {
                    if has(bit) {
                        want.push(name);
                    }
                }
                if has(5) {
                    want.push("created_to");
                }
                if has(4) || has(6) {
                    want.push("id_lower");
                }
                if has(5) {
                    want.push("id_upper");
                }
                assert_eq!(preds(&q.sql), want, "{d:?} {table:?} mask {mask:#b}: {}", q.sql);
                let placeholders = match d {
                    SqlDialect::Postgres => q.sql.matches('$').count(),
                    _ => q.sql.matches('?').count(),
                };
                assert_eq!(placeholders, q.args.len(), "{}", q.sql);
                assert!(!q.sql.contains("IS NULL"), "no catch-all: {}", q.sql);
                assert!(q.sql.contains(" ORDER BY ") && q.sql.contains(" LIMIT "), "{}", q.sql);
                checked += 1;
            }
        }
    }
    // 3 dialects × (128 hot + 64 archive + 64 dead).
    assert_eq!(checked, 3 * (128 + 64 + 64));
}

#[test]
fn values_are_bound_in_order_with_each_dialects_types() {
    let from = t("2026-12-01T10:00:00Z");
    let p = ListJobsParams {
        queue: Some(QueueName::new("q1").unwrap()),
        status: Some(JobStatus::Pending),
        kind: Some(JobKind::new("k1").unwrap()),
        tag: Some("t'); DROP TABLE x; --".into()),
        created_from: Some(from),
        limit: 50,
        ..ListJobsParams::new(JobTable::Hot)
    };
    let lower = v7_floor(from - ID_CLOCK_SKEW);
    let q = build(SqlDialect::Postgres, &p);
    assert_eq!(
        q.sql,
        "SELECT id, queue, kind FROM \"jobs\".\"jobs_hot\" WHERE \"queue\" = $1 AND \"status\" IN ($2, $3) AND \
         \"kind\" = $4 AND (CAST($5 AS text) = ANY (tags)) AND \"created_at\" >= $6 AND \"id\" >= $7 \
         ORDER BY \"id\" ASC LIMIT $8"
    );
    assert_eq!(
        q.args,
        vec![
            ListArg::Text("q1".into()),
            ListArg::SmallInt(0),
            ListArg::SmallInt(3),
            ListArg::Text("k1".into()),
            ListArg::Text("t'); DROP TABLE x; --".into()),
            ListArg::Time(from),
            ListArg::Uuid(lower),
            ListArg::BigInt(51),
        ]
    );
    let q = build(SqlDialect::Mysql, &p);
    assert_eq!(
        q.sql,
        "SELECT id, queue, kind FROM `jobs`.`jobs_hot` WHERE `queue` = ? AND `status` IN (?, ?) AND `kind` = ? AND \
         (JSON_CONTAINS(tags, JSON_QUOTE(?))) AND `created_at` >= ? AND `id` >= ? ORDER BY `id` ASC LIMIT ?"
    );
    assert_eq!(q.args[1], ListArg::BigInt(0));
    assert_eq!(q.args[5], ListArg::BigInt(from.timestamp_micros()));
    assert_eq!(q.args[6], ListArg::Bytes(lower.as_bytes().to_vec()));
    let q = build(SqlDialect::Sqlite, &p);
    assert!(q.sql.contains("(EXISTS (SELECT 1 FROM json_each(tags) WHERE json_each.value = ?))"), "{}", q.sql);
}

#[test]
fn v7_floor_orders_with_generated_ids() {
    let at = t("2026-12-03T13:00:00.123Z");
    let floor = v7_floor(at);
    assert_eq!(floor.get_version_num(), 7);
    // The first 48 bits are the milliseconds.
    assert_eq!(
        u64::from_be_bytes([
            0,
            0,
            floor.as_bytes()[0],
            floor.as_bytes()[1],
            floor.as_bytes()[2],
            floor.as_bytes()[3],
            floor.as_bytes()[4],
            floor.as_bytes()[5]
        ]),
        at.timestamp_millis() as u64
    );
    let now = Utc::now();
    let id = Uuid::now_v7();
    assert!(v7_floor(now - chrono::Duration::milliseconds(1)) <= id);
    assert!(v7_floor(now + chrono::Duration::milliseconds(2)) > id);
    assert_eq!(v7_floor(t("1960-01-01T00:00:00Z")), Uuid::nil());
}

/// The cursor and a window's start: the higher of the two is the one lower bound.
#[test]
fn the_higher_lower_bound_wins() {
    let from = t("2026-12-01T10:00:00Z");
    let early = JobId(v7_floor(t("2026-11-01T00:00:00Z")));
    let late = JobId(v7_floor(t("2026-12-02T00:00:00Z")));
    let p = ListJobsParams { created_from: Some(from), after: Some(early), ..ListJobsParams::new(JobTable::Archive) };
    let q = build(SqlDialect::Postgres, &p);
    assert!(q.sql.contains("\"id\" >= $2"), "{}", q.sql);
    assert_eq!(q.args[1], ListArg::Uuid(v7_floor(from - ID_CLOCK_SKEW)));
    let p = ListJobsParams { after: Some(late), ..p };
    let q = build(SqlDialect::Postgres, &p);
    assert!(q.sql.contains("\"id\" > $2"), "{}", q.sql);
    assert_eq!(q.args[1], ListArg::Uuid(late.0));
}

#[test]
fn bad_params_and_schema_are_refused() {
    let mut p = ListJobsParams::new(JobTable::Archive);
    p.status = Some(JobStatus::Pending);
    assert!(validate_params(&p).is_err());
    let mut p = ListJobsParams::new(JobTable::Hot);
    p.limit = 0;
    assert!(validate_params(&p).is_err());
    p.limit = MAX_LIST_LIMIT + 1;
    assert!(validate_params(&p).is_err());
    p.limit = 1;
    p.tag = Some("a\0b".into());
    assert!(validate_params(&p).is_err());
    let p = ListJobsParams::new(JobTable::Hot);
    assert!(list_query(SqlDialect::Postgres, "bad\"name", COLS, &p).is_err());
}

#[test]
fn grammar_shapes_cover_each_predicate() {
    let hot = grammar_shapes(JobTable::Hot);
    let archive = grammar_shapes(JobTable::Archive);
    assert_eq!(hot.len(), 11);
    assert_eq!(archive.len(), 9);
    let every = &archive.iter().find(|(n, _)| *n == "list_archive_every_filter").unwrap().1;
    let q = build(SqlDialect::Postgres, every);
    assert_eq!(preds(&q.sql), ["queue", "kind", "tag", "created_from", "created_to", "id_lower", "id_upper"]);
    let every = &hot.iter().find(|(n, _)| *n == "list_hot_every_filter").unwrap().1;
    let q = build(SqlDialect::Mysql, every);
    assert_eq!(preds(&q.sql), ["queue", "status", "kind", "tag", "created_from", "created_to", "id_lower", "id_upper"]);
    assert_eq!(grammar_shapes(JobTable::DeadLetter)[0].0, "list_dead_all");
}
