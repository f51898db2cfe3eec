use std::time::Duration;

use rand::Rng;

use crate::{validate, Error, Result};

/// Exponential back-off with a cap and jitter.
///
/// The delay before retry `n` (the attempt that just failed was attempt `n`, 1-based) is
/// `base * factor^(n-1)`, capped at `max`, then multiplied by a random factor in
/// `[1 - jitter, 1 + jitter]` (and capped again).
///
/// Defaults: `base` 1 s, `factor` 2, `max` 1 h, `jitter` 0.2. So attempts back off
/// 1 s, 2 s, 4 s, … and reach the hour cap after about 12 failures.
///
/// [`RetryPolicy::delay`] never panics: for any field values it saturates at `max`, and at
/// [`validate::MAX_DELAY`] (about 100 years, the longest delay a backend accepts) when `max`
/// is larger. [`RetryPolicy::validate`] (or the checked [`RetryPolicy::new`]) refuses
/// nonsense values up front.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub base: Duration,
    pub factor: f64,
    pub max: Duration,
    /// 0.0 to 1.0.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { base: Duration::from_secs(1), factor: 2.0, max: Duration::from_secs(3600), jitter: 0.2 }
    }
}

impl RetryPolicy {
    /// A checked policy: the fields must pass [`RetryPolicy::validate`].
    pub fn new(base: Duration, factor: f64, max: Duration, jitter: f64) -> Result<Self> {
        let p = RetryPolicy { base, factor, max, jitter };
        p.validate()?;
        Ok(p)
    }

    /// A policy with no jitter (for tests and predictable schedules).
    pub fn fixed_exponential(base: Duration, factor: f64, max: Duration) -> Self {
        RetryPolicy { base, factor, max, jitter: 0.0 }
    }

    /// Refuses nonsense with [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput):
    /// `base` and `max` at most [`validate::MAX_DELAY`], `base` not above `max`, `factor` a
    /// finite number of at least 1, `jitter` a finite number in `0.0..=1.0`.
    pub fn validate(&self) -> Result<()> {
        validate::delay("retry policy base", self.base)?;
        validate::delay("retry policy max", self.max)?;
        if self.base > self.max {
            return Err(Error::invalid(format!(
                "retry policy base ({:?}) must not exceed its max ({:?})",
                self.base, self.max
            )));
        }
        if !self.factor.is_finite() || self.factor < 1.0 {
            return Err(Error::invalid(format!(
                "retry policy factor must be a finite number of at least 1, got {}",
                self.factor
            )));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(Error::invalid(format!("retry policy jitter must be 0.0 to 1.0, got {}", self.jitter)));
        }
        Ok(())
    }

    /// The longest delay this policy gives: `max`, or [`validate::MAX_DELAY`] if smaller.
    fn cap(&self) -> Duration {
        self.max.min(validate::MAX_DELAY)
    }

    /// The delay before the retry that follows failed attempt `attempt` (1-based), without
    /// jitter.
    pub fn nominal_delay(&self, attempt: i32) -> Duration {
        let exp = (attempt.max(1) - 1).min(1000);
        let secs = self.base.as_secs_f64() * self.factor.max(1.0).powi(exp);
        saturate(secs, self.cap())
    }

    /// The delay with jitter applied.
    pub fn delay(&self, attempt: i32) -> Duration {
        let nominal = self.nominal_delay(attempt);
        let j = if self.jitter.is_nan() { 0.0 } else { self.jitter.clamp(0.0, 1.0) };
        if j == 0.0 {
            return nominal;
        }
        let scale = rand::thread_rng().gen_range(1.0 - j..=1.0 + j);
        saturate(nominal.as_secs_f64() * scale, self.cap())
    }
}

/// `secs` as a duration, at most `cap`: NaN, infinities and values too large for a
/// `Duration` give `cap`, negative values zero. Never panics.
fn saturate(secs: f64, cap: Duration) -> Duration {
    if secs.is_nan() || secs >= cap.as_secs_f64() {
        return cap;
    }
    if secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).map_or(cap, |d| d.min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let p = RetryPolicy::fixed_exponential(Duration::from_secs(1), 2.0, Duration::from_secs(10));
        assert_eq!(p.delay(1), Duration::from_secs(1));
        assert_eq!(p.delay(2), Duration::from_secs(2));
        assert_eq!(p.delay(3), Duration::from_secs(4));
        assert_eq!(p.delay(5), Duration::from_secs(10));
        assert_eq!(p.delay(500), Duration::from_secs(10));
    }

    #[test]
    fn jitter_stays_in_band() {
        let p = RetryPolicy::default();
        for _ in 0..1000 {
            let d = p.delay(3).as_secs_f64();
            assert!((3.2..=4.8).contains(&d), "{d}");
        }
    }
}

#[cfg(test)]
mod extreme_tests {
    use super::*;

    #[test]
    fn extreme_durations_never_panic() {
        let policies = [
            RetryPolicy { max: Duration::MAX, ..RetryPolicy::default() },
            RetryPolicy { base: Duration::MAX, ..RetryPolicy::default() },
            RetryPolicy { base: Duration::MAX, max: Duration::MAX, factor: f64::INFINITY, jitter: 1.0 },
            RetryPolicy { factor: f64::NAN, jitter: f64::NAN, ..RetryPolicy::default() },
            RetryPolicy { factor: -3.0, jitter: -1.0, ..RetryPolicy::default() },
            RetryPolicy { factor: 1e300, jitter: 7.0, max: Duration::MAX, ..RetryPolicy::default() },
        ];
        for p in policies {
            for attempt in [i32::MIN, -1, 0, 1, 2, 70, 1000, i32::MAX] {
                let d = p.delay(attempt);
                assert!(d <= p.max, "{p:?} attempt {attempt}: {d:?}");
                assert!(d <= validate::MAX_DELAY, "{p:?} attempt {attempt}: {d:?}");
                assert!(p.nominal_delay(attempt) <= p.max.min(validate::MAX_DELAY));
            }
        }
    }

    #[test]
    fn max_duration_saturates_at_max_delay() {
        let p = RetryPolicy { max: Duration::MAX, ..RetryPolicy::default() };
        assert_eq!(p.nominal_delay(70), validate::MAX_DELAY);
        let p = RetryPolicy { base: Duration::MAX, max: Duration::MAX, jitter: 0.0, ..RetryPolicy::default() };
        assert_eq!(p.delay(1), validate::MAX_DELAY);
        // A cap that is not a whole number of f64 seconds is never overshot by rounding.
        let odd = Duration::new(8_145_759, 993_369_698);
        let p = RetryPolicy { base: Duration::MAX, max: odd, factor: 1.0, jitter: 0.6 };
        for _ in 0..100 {
            assert!(p.delay(i32::MAX) <= odd);
        }
    }

    #[test]
    fn validate_refuses_nonsense_and_names_the_limit() {
        assert!(RetryPolicy::default().validate().is_ok());
        let ok = RetryPolicy::new(Duration::ZERO, 1.0, validate::MAX_DELAY, 1.0).unwrap();
        assert_eq!(ok.max, validate::MAX_DELAY);
        let d = RetryPolicy::default();
        for (bad, needle) in [
            (RetryPolicy { max: Duration::MAX, ..d }, "retry policy max"),
            (RetryPolicy { base: Duration::MAX, max: Duration::MAX, ..d }, "retry policy base"),
            (RetryPolicy { base: Duration::from_secs(7200), ..d }, "must not exceed its max"),
            (RetryPolicy { factor: 0.5, ..d }, "factor"),
            (RetryPolicy { factor: f64::NAN, ..d }, "factor"),
            (RetryPolicy { factor: f64::INFINITY, ..d }, "factor"),
            (RetryPolicy { jitter: -0.1, ..d }, "jitter"),
            (RetryPolicy { jitter: 1.5, ..d }, "jitter"),
            (RetryPolicy { jitter: f64::NAN, ..d }, "jitter"),
        ] {
            let err = bad.validate().unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{bad:?}: {err}");
            assert!(RetryPolicy::new(bad.base, bad.factor, bad.max, bad.jitter).is_err());
        }
    }
}
