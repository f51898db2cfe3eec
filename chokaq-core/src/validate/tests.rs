//! Unit tests of `validate.rs`.

use super::*;

#[test]
fn schema_names() {
    // The longest name is MAX_SCHEMA_NAME_LEN (48) bytes; it was 63 before derived names
    // were taken into account.
    for ok in ["chokaq", "_x", "A1_b", &"a".repeat(MAX_SCHEMA_NAME_LEN)] {
        assert!(schema_name(ok).is_ok(), "{ok}");
    }
    for bad in ["", "1abc", "a-b", "a;drop", "a b", "\"x\"", &"a".repeat(MAX_SCHEMA_NAME_LEN + 1), &"a".repeat(64), "é"]
    {
        assert!(schema_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn reserved_schema_names_are_rejected() {
    for bad in [
        "public",
        "PUBLIC",
        "Public",
        "pg_catalog",
        "pg_toast",
        "pg_anything",
        "PG_x",
        "information_schema",
        "INFORMATION_SCHEMA",
        "dbo",
        "DBO",
        "sys",
        "guest",
    ] {
        assert!(schema_name(bad).is_err(), "{bad} was accepted");
    }
    for ok in ["chokaq", "pg", "pgx", "publicx", "my_public", "sysx", "guests", "chokaq_t_0123456789abcdef"] {
        assert!(schema_name(ok).is_ok(), "{ok}");
    }
}

#[test]
fn every_identifier_derived_from_an_accepted_schema_name_fits_63_bytes() {
    for len in 1..=80 {
        let name = "s".repeat(len);
        if schema_name(&name).is_ok() {
            for derived in [format!("{name}_jobs"), format!("chokaq:{name}")] {
                assert!(
                    derived.len() <= 63,
                    "schema name of {len} bytes derives {derived:?} ({} bytes)",
                    derived.len()
                );
            }
        }
    }
}

#[test]
fn text_fields_reject_control_characters() {
    for bad in ["a\nb", "a\rb", "\u{1b}[2J", "a\tb", "\u{7f}", "\u{85}", "\u{9f}", "a\u{2028}b", "a\u{2029}b", "a\0b"] {
        assert!(text_field("tag", bad, 100).is_err(), "{bad:?}");
    }
    for ok in ["a b", "Ünïcödé", "🚀", "RTL שלום \u{202e}abc", "'; --"] {
        assert!(text_field("tag", ok, 100).is_ok(), "{ok:?}");
    }
}

#[test]
fn queue_names() {
    assert!(queue_name("default").is_ok());
    assert!(queue_name("mail.high:eu-1").is_ok());
    assert!(queue_name("").is_err());
    assert!(queue_name("a'b").is_err());
    assert!(queue_name(&"q".repeat(129)).is_err());
}

#[test]
fn kinds() {
    assert!(job_kind("email.send.v1").is_ok());
    assert!(job_kind("письмо.v1").is_ok());
    assert!(job_kind(" x").is_err());
    assert!(job_kind("a\nb").is_err());
}

#[test]
fn identifiers_without_reserved_names() {
    assert!(identifier("database name", "public", 128).is_ok());
    assert!(identifier("database name", &"d".repeat(128), 128).is_ok());
    assert!(identifier("database name", &"d".repeat(129), 128).is_err());
    let err = identifier("database name", "a-b", 128).unwrap_err();
    assert!(err.message().contains("database name"), "{err}");
}

#[test]
fn affix_room_covers_todays_derived_names() {
    assert_eq!(MAX_SCHEMA_NAME_LEN + MAX_SCHEMA_AFFIX_LEN, MAX_IDENTIFIER_LEN);
    assert!("chokaq:".len() <= MAX_SCHEMA_AFFIX_LEN && "_jobs".len() <= MAX_SCHEMA_AFFIX_LEN);
}

#[test]
fn queue_names_refuse_bidi_zero_width_and_controls() {
    for bad in ["a\u{202E}b", "a\u{200B}b", "\u{FEFF}a", "a\nb", "a\u{1b}b", "a\u{061C}"] {
        assert!(queue_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn kinds_refuse_bidi_zero_width_and_line_breaks_but_stored_kinds_read_back() {
    for bad in ["a\u{202E}b", "a\u{200B}b", "\u{FEFF}a", "a\u{2028}b", "a\u{2066}b", "a\u{061C}b"] {
        let err = job_kind(bad).unwrap_err();
        assert!(err.message().contains("U+"), "{err}");
        // A kind stored by an earlier version with such a character still reads back.
        assert!(stored_job_kind(bad).is_ok(), "{bad:?}");
    }
    for bad in ["", " x", "a\nb", &"k".repeat(MAX_KIND_LEN + 1)] {
        assert!(stored_job_kind(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn payload_depth_limit_is_exact() {
    let nested = |depth: usize| {
        let mut v = serde_json::json!("leaf");
        for i in 0..depth {
            v = if i % 2 == 0 { serde_json::json!([v]) } else { serde_json::json!({ "k": v }) };
        }
        v
    };
    assert!(payload(&nested(MAX_PAYLOAD_DEPTH), usize::MAX).is_ok());
    let err = payload(&nested(MAX_PAYLOAD_DEPTH + 1), usize::MAX).unwrap_err();
    assert!(err.message().contains("64 levels"), "{err}");
    // Wide is not deep.
    let wide = serde_json::Value::Array((0..10_000).map(|i| serde_json::json!([i])).collect());
    assert!(payload(&wide, usize::MAX).is_ok());
    // NUL deep inside, in a string or a key.
    assert!(payload(&serde_json::json!([[{"a": ["x\u{0}"]}]]), usize::MAX).is_err());
    assert!(payload(&serde_json::json!([[{"a\u{0}": 1}]]), usize::MAX).is_err());
}

#[test]
fn payload_size_is_counted_without_a_copy_and_stops_at_the_limit() {
    let v = serde_json::json!({"a": "é\n", "b": [1, 2.5, null]});
    let exact = serde_json::to_vec(&v).unwrap().len();
    assert_eq!(payload(&v, exact).unwrap(), exact);
    let err = payload(&v, exact - 1).unwrap_err();
    assert!(err.message().contains("over the limit"), "{err}");
}

#[test]
fn lease_lists_are_capped() {
    let l = LeaseRef { id: crate::JobId::new(), lease: crate::Lease(1) };
    assert!(lease_list("complete", &vec![l; MAX_LEASES_PER_CALL]).is_ok());
    let err = lease_list("complete", &vec![l; MAX_LEASES_PER_CALL + 1]).unwrap_err();
    assert!(err.message().contains("complete") && err.message().contains("10000"), "{err}");
}

#[test]
fn durations_and_timestamps_are_range_checked() {
    let (min, max) = (Duration::from_millis(1), Duration::from_secs(60));
    assert!(duration("t", min, min, max).is_ok());
    assert!(duration("t", max, min, max).is_ok());
    for bad in [Duration::ZERO, Duration::from_secs(61), Duration::MAX] {
        let err = duration("zombie_timeout", bad, min, max).unwrap_err();
        assert!(err.message().contains("zombie_timeout") && err.message().contains("60s"), "{err}");
    }
    assert!(delay("d", MAX_DELAY).is_ok());
    assert!(delay("d", MAX_DELAY + Duration::from_nanos(1)).is_err());
    let year = |y: i32| chrono::NaiveDate::from_ymd_opt(y, 6, 1).unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
    assert!(timestamp("run_at", year(1)).is_ok() && timestamp("run_at", year(9999)).is_ok());
    for bad in [year(0), year(10_000), Timestamp::MIN_UTC, Timestamp::MAX_UTC] {
        assert!(timestamp("run_at", bad).is_err(), "{bad}");
    }
}

#[test]
fn error_text_is_cut_on_a_char_boundary_and_never_grows() {
    assert_eq!(error_text("short"), "short");
    let long = "é".repeat(MAX_ERROR_LEN);
    let t = error_text(&long);
    assert_eq!(t.len(), MAX_ERROR_LEN);
    assert!(t.chars().all(|c| c == 'é'));
    // NUL becomes U+FFFD (3 bytes), and the result still fits.
    let nul = "\0".repeat(MAX_ERROR_LEN);
    let t = error_text(&nul);
    assert!(t.len() <= MAX_ERROR_LEN && t.len() > MAX_ERROR_LEN - 3, "{}", t.len());
    assert!(t.chars().all(|c| c == '\u{FFFD}'));
    // Control characters in error texts are kept: they are truncated, never rejected.
    assert_eq!(error_text("a\nb\tc"), "a\nb\tc");
}

#[test]
fn error_text_of_stops_formatting_at_the_limit() {
    struct Huge(std::cell::Cell<usize>);
    impl fmt::Display for Huge {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            for _ in 0..1_000_000 {
                self.0.set(self.0.get() + 1);
                f.write_str("0123456789")?;
            }
            Ok(())
        }
    }
    let huge = Huge(std::cell::Cell::new(0));
    let t = error_text_of(&huge);
    assert_eq!(t.len(), MAX_ERROR_LEN);
    assert!(huge.0.get() <= MAX_ERROR_LEN / 10 + 1, "formatted {} chunks", huge.0.get());
    assert_eq!(error_text_of(&"x\0y"), "x\u{FFFD}y");
}

#[test]
fn truncation_respects_chars() {
    assert_eq!(truncate("ééé", 3), "é");
    assert_eq!(truncate("abc", 10), "abc");
}
