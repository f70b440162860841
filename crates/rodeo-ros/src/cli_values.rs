//! Value parsers for command-line options (clap `value_parser`s) that a type alone does not
//! bound: seconds, rates and fractions as finite numbers in a range, so that a value such as
//! `nan`, `inf` or `1e300` is refused naming the option instead of reaching
//! `Duration::from_secs_f64` (which panics) or running forever. The integer options take clap's
//! own ranged parsers ([`count`], `value_parser!(u64).range(..)`). The limits here are also the
//! configuration's (`rodeo_control::config` takes them from this module).

/// Longest run an option or `run.seconds` may ask for: a year.
pub const MAX_SECONDS: f64 = 365.0 * 86_400.0;
/// The lowest L1 or replay rate taken, in Hz, besides 0 (unlimited): one event in about 17
/// minutes. Below it a run would wait for its first event without end.
pub const MIN_RATE_HZ: f64 = 1e-3;
/// The highest L1 or replay rate taken, in Hz (1 GHz: far above any partition; beyond it the
/// number is a typing error).
pub const MAX_RATE_HZ: f64 = 1e9;
/// The longest timeout, in milliseconds (a day): a deadline further away is a typing error,
/// and a very large one would overflow the clock.
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// ROB channels of one readout node at most (`ros.channels`, `--channels`).
pub const MAX_CHANNELS: usize = 64;

/// The smallest L1ID wrap (`--l1id-wrap`): the extended L1ID (ECR count in bits 31..24)
/// repeats every wrap x 256 events, and with a wrap of 1 or 2 two events the tester has in
/// flight shared one (measured: 1,872 and 1,476 fragments lost in a second; none from 4).
pub const MIN_L1ID_WRAP: u32 = 4;

/// Whether `rate` is 0 (unlimited) or within [`MIN_RATE_HZ`]..=[`MAX_RATE_HZ`].
pub fn rate_ok(rate: f64) -> bool {
    rate == 0.0 || (MIN_RATE_HZ..=MAX_RATE_HZ).contains(&rate)
}

/// A count (`usize`) within `range`: clap's ranged parser, which names the range when a value
/// falls outside it (`0 is not in 1..=1000`).
pub fn count(range: std::ops::RangeInclusive<u64>) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(range)
}

/// A finite number, or what it is not.
fn number(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number (such as 2, 0.5 or 1e6)"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{s} is not a finite number"))
    }
}

/// Seconds: more than 0, at most a year.
pub fn seconds(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if v > 0.0 && v <= MAX_SECONDS {
        Ok(v)
    } else {
        Err(format!(
            "{s} seconds: more than 0 and at most {MAX_SECONDS} (a year) needed"
        ))
    }
}

/// Seconds where 0 has a meaning of its own (until stopped, no wait): 0 to a year.
pub fn seconds_or_zero(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if (0.0..=MAX_SECONDS).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} seconds: 0 to {MAX_SECONDS} (a year) needed"))
    }
}

/// A rate in Hz: 0.001 to 1e9 (below, the first event would never come).
pub fn rate_hz(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if v != 0.0 && rate_ok(v) {
        Ok(v)
    } else {
        Err(format!("{s} Hz: 0.001 to 1e9 needed"))
    }
}

/// A rate in Hz where 0 means "as fast as it goes": 0, or 0.001 to 1e9.
pub fn rate_hz_or_zero(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if rate_ok(v) {
        Ok(v)
    } else {
        Err(format!("{s} Hz: 0 (unlimited) or 0.001 to 1e9 needed"))
    }
}

/// A fraction or probability: 0 to 1.
pub fn fraction(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s}: a fraction from 0 to 1 needed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_huge_and_out_of_range_values_are_refused_in_words() {
        for bad in ["nan", "inf", "-inf", "1e300", "-1", "0", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("2.5"), Ok(2.5));
        assert_eq!(seconds_or_zero("0"), Ok(0.0));
        assert!(seconds_or_zero("nan").is_err());
        assert!(seconds("31536001").unwrap_err().contains("a year"));
        assert!(rate_hz("0").is_err());
        assert_eq!(rate_hz_or_zero("0"), Ok(0.0));
        assert!(rate_hz_or_zero("0.0001").is_err());
        assert!(rate_hz("1e10").is_err());
        assert_eq!(rate_hz("100"), Ok(100.0));
        assert!(fraction("1.5").is_err());
        assert!(fraction("nan").unwrap_err().contains("finite"));
        assert_eq!(fraction("0.2"), Ok(0.2));
    }
}
