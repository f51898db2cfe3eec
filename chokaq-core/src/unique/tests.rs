use super::*;
use crate::ErrorKind;

fn job(payload: serde_json::Value) -> NewJob {
    NewJob::build("q", "refresh.v1").unwrap().json(payload)
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_timestamp(secs, 0).unwrap()
}

fn key(j: &NewJob, now: Timestamp) -> String {
    unique_key(j, now).unwrap().unwrap().key
}

#[test]
fn no_settings_no_key() {
    assert_eq!(unique_key(&job(serde_json::json!(1)), at(0)).unwrap(), None);
}

#[test]
fn canonical_json_sorts_keys_at_every_depth() {
    let a = serde_json::json!({"b": 1, "a": {"d": [1, {"z": 0, "y": 1}], "c": "x"}});
    assert_eq!(canonical_json(&a), r#"{"a":{"c":"x","d":[1,{"y":1,"z":0}]},"b":1}"#);
}

#[test]
fn key_is_sha256_hex_and_stable() {
    let j = job(serde_json::json!({"account": 42})).unique(UniqueOpts::new().by_args());
    let k = key(&j, at(0));
    assert_eq!(k.len(), UNIQUE_KEY_LEN);
    assert!(k.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    // Pinned: a change of the preimage is a change of every stored key (docs/unique.md).
    let pre = r#"["chokaq.unique.v1","refresh.v1",null,"{\"account\":42}",null,31]"#;
    let want: String = Sha256::digest(pre.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(k, want);
}

#[test]
fn args_order_of_keys_does_not_matter_values_do() {
    let o = UniqueOpts::new().by_args();
    let a = job(serde_json::json!({"a": 1, "b": 2})).unique(o.clone());
    let b = job(serde_json::json!({"b": 2, "a": 1})).unique(o.clone());
    let c = job(serde_json::json!({"a": 1, "b": 3})).unique(o);
    assert_eq!(key(&a, at(0)), key(&b, at(0)));
    assert_ne!(key(&a, at(0)), key(&c, at(0)));
}

#[test]
fn fields_pick_a_subset_and_missing_is_null() {
    let o = UniqueOpts::new().by_fields(["account"]);
    let a = job(serde_json::json!({"account": 1, "at": "x"})).unique(o.clone());
    let b = job(serde_json::json!({"at": "y", "account": 1})).unique(o.clone());
    let c = job(serde_json::json!({"account": 2})).unique(o.clone());
    let missing = job(serde_json::json!({"other": 1})).unique(o.clone());
    let null = job(serde_json::json!({"account": null})).unique(o.clone());
    assert_eq!(key(&a, at(0)), key(&b, at(0)));
    assert_ne!(key(&a, at(0)), key(&c, at(0)));
    assert_eq!(key(&missing, at(0)), key(&null, at(0)));
    let err = unique_key(&job(serde_json::json!([1])).unique(o), at(0)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[test]
fn without_args_the_kind_alone_decides() {
    let a = job(serde_json::json!(1)).unique(UniqueOpts::new());
    let b = job(serde_json::json!(2)).unique(UniqueOpts::new());
    assert_eq!(key(&a, at(0)), key(&b, at(0)));
    let other_kind = NewJob::build("q", "other.v1").unwrap().unique(UniqueOpts::new());
    assert_ne!(key(&a, at(0)), key(&other_kind, at(0)));
}

#[test]
fn the_state_set_is_part_of_the_key() {
    let j = |s: UniqueStates| job(serde_json::json!(1)).unique(UniqueOpts::new().states(s));
    assert_ne!(key(&j(UniqueStates::DEFAULT), at(0)), key(&j(UniqueStates::WAITING), at(0)));
    assert_eq!(key(&j(UniqueStates::WAITING), at(0)), key(&j(UniqueStates::WAITING), at(5)));
    assert!(UniqueStates::DEFAULT.is_live_only() && !UniqueStates::ALL.is_live_only());
}

#[test]
fn queue_takes_part_only_when_asked() {
    let on_r = NewJob::build("r", "refresh.v1").unwrap();
    let a = job(serde_json::Value::Null).unique(UniqueOpts::new());
    assert_eq!(key(&a, at(0)), key(&on_r.clone().unique(UniqueOpts::new()), at(0)));
    let a = job(serde_json::Value::Null).unique(UniqueOpts::new().by_queue());
    assert_ne!(key(&a, at(0)), key(&on_r.unique(UniqueOpts::new().by_queue()), at(0)));
}

#[test]
fn period_buckets_by_due_time() {
    let o = UniqueOpts::new().by_period(Duration::from_secs(3600));
    let j = job(serde_json::Value::Null).unique(o.clone());
    // Now: the bucket of now; the boundary at 7200 s starts a new one.
    assert_eq!(key(&j, at(3600)), key(&j, at(7199)));
    assert_ne!(key(&j, at(7199)), key(&j, at(7200)));
    let k = unique_key(&j, at(3600)).unwrap().unwrap();
    assert_eq!(k.expires_at, Some(at(7200)));
    // A due time of its own wins over now; a delay counts from now.
    let later = job(serde_json::Value::Null).unique(o.clone()).run_at(at(7300));
    assert_eq!(key(&later, at(0)), key(&j, at(7200)));
    let delayed = job(serde_json::Value::Null).unique(o).delay(Duration::from_secs(3600));
    assert_eq!(key(&delayed, at(3600)), key(&j, at(7200)));
    // Before 1970 the buckets still floor.
    let neg = job(serde_json::Value::Null).unique(UniqueOpts::new().by_period(Duration::from_secs(10)));
    assert_ne!(key(&neg, at(-1)), key(&neg, at(0)));
    assert_eq!(key(&neg, at(-1)), key(&neg, at(-10)));
}

#[test]
fn bad_settings_are_invalid_input() {
    let bad = [
        UniqueOpts::new().by_period(Duration::from_millis(1500)),
        UniqueOpts::new().by_period(Duration::ZERO),
        UniqueOpts::new().by_period(MAX_UNIQUE_PERIOD + Duration::from_secs(1)),
        UniqueOpts::new().by_fields(Vec::<String>::new()),
        UniqueOpts::new().by_fields(["a", "a"]),
        UniqueOpts::new().by_fields(["a\nb"]),
        UniqueOpts::new().states(UniqueStates::of(&[])),
    ];
    for o in bad {
        let j = job(serde_json::json!({"a": 1})).unique(o.clone());
        assert_eq!(j.validate(1 << 20).unwrap_err().kind(), ErrorKind::InvalidInput, "{o:?}");
    }
    assert_eq!(UniqueStates::from_bits(256).unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[test]
fn states_sets_and_names() {
    assert_eq!(UniqueStates::DEFAULT.to_string(), "pending,scheduled,fetched,processing,retrying");
    assert_eq!(UniqueStates::WAITING.to_string(), "pending,scheduled,retrying");
    assert!(!UniqueStates::DEFAULT.counts_finished());
    assert!(UniqueStates::DEFAULT.with(UniqueState::Succeeded).counts_finished());
    assert_eq!(UniqueStates::from_bits(UniqueStates::ALL.bits()).unwrap(), UniqueStates::ALL);
    assert_eq!(UniqueState::of_hot(0, 0, false).unwrap(), UniqueState::Pending);
    assert_eq!(UniqueState::of_hot(3, 0, true).unwrap(), UniqueState::Scheduled);
    assert_eq!(UniqueState::of_hot(3, 0, false).unwrap(), UniqueState::Pending);
    assert_eq!(UniqueState::of_hot(3, 2, true).unwrap(), UniqueState::Retrying);
    assert_eq!(UniqueState::of_hot(4, 0, false).unwrap(), UniqueState::Pending);
    assert_eq!(UniqueState::of_hot(2, 1, false).unwrap(), UniqueState::Processing);
    assert_eq!(UniqueState::of_dead(DeadReason::Zombie), UniqueState::Discarded);
    let o = UniqueOpts::new().by_fields(["a"]).by_period(Duration::from_secs(60)).by_queue();
    assert_eq!(UniqueOpts::from_json(&o.to_json()).unwrap(), o);
    assert_eq!(
        o.to_string(),
        "args: a; period: 60s; queue: yes; states: pending,scheduled,fetched,processing,retrying"
    );
}

#[test]
fn a_prune_start_is_a_point_of_the_key_space() {
    let a = crate::prune_from();
    assert_eq!(a.len(), crate::UNIQUE_KEY_LEN);
    assert!(a.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{a}");
    assert_ne!(a, crate::prune_from());
}

#[test]
fn stored_settings_leave_out_the_defaults_and_read_back() {
    assert_eq!(UniqueOpts::new().by_args().to_json(), r#"{"args":"all"}"#);
    assert_eq!(UniqueOpts::new().to_json(), "{}");
    let full = UniqueOpts::new()
        .by_fields(["a"])
        .by_period(std::time::Duration::from_secs(60))
        .by_queue()
        .states(UniqueStates::ALL);
    assert_eq!(full.to_json(), r#"{"args":{"fields":["a"]},"period_secs":60,"by_queue":true,"states":255}"#);
    for o in [UniqueOpts::new(), UniqueOpts::new().by_args(), full] {
        assert_eq!(UniqueOpts::from_json(&o.to_json()).unwrap(), o);
    }
    // What earlier versions stored (every field) reads as before.
    let old = r#"{"args":"all","period_secs":null,"by_queue":false,"states":31}"#;
    assert_eq!(UniqueOpts::from_json(old).unwrap(), UniqueOpts::new().by_args());
}
