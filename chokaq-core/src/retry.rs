use std::time::Duration;

use rand::Rng;

/// Exponential back-off with a cap and jitter.
///
/// The delay before retry `n` (the attempt that just failed was attempt `n`, 1-based) is
/// `base * factor^(n-1)`, capped at `max`, then multiplied by a random factor in
/// `[1 - jitter, 1 + jitter]` (and capped again).
///
/// Defaults: `base` 1 s, `factor` 2, `max` 1 h, `jitter` 0.2. So attempts back off
/// 1 s, 2 s, 4 s, … and reach the hour cap after about 12 failures.
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
    /// A policy with no jitter (for tests and predictable schedules).
    pub fn fixed_exponential(base: Duration, factor: f64, max: Duration) -> Self {
        RetryPolicy { base, factor, max, jitter: 0.0 }
    }

    /// The delay before the retry that follows failed attempt `attempt` (1-based), without
    /// jitter.
    pub fn nominal_delay(&self, attempt: i32) -> Duration {
        let exp = (attempt.max(1) - 1).min(1000);
        let secs = self.base.as_secs_f64() * self.factor.max(1.0).powi(exp);
        let capped = secs.min(self.max.as_secs_f64());
        Duration::from_secs_f64(if capped.is_finite() { capped } else { self.max.as_secs_f64() })
    }

    /// The delay with jitter applied.
    pub fn delay(&self, attempt: i32) -> Duration {
        let nominal = self.nominal_delay(attempt).as_secs_f64();
        let j = self.jitter.clamp(0.0, 1.0);
        let scale = if j > 0.0 { rand::thread_rng().gen_range(1.0 - j..=1.0 + j) } else { 1.0 };
        Duration::from_secs_f64((nominal * scale).min(self.max.as_secs_f64()).max(0.0))
    }
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
