//! Go-style duration strings (`time.ParseDuration`): `"300ms"`, `"2s"`, `"1m30s"`, `"1.5h"`,
//! `"0"`. Cluster definitions use them because the rest of the Kubernetes tooling does,
//! and a CronJob's `@every` schedule is one.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct DurationError {
    /// The rejected text, verbatim.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Nanoseconds per unit, longest unit names first so `"ms"` is not read as `"m"`.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a non-negative Go duration. Unlike Go, a negative duration is an error, since no
/// field here can use one.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError { input: input.to_string(), reason };
    let mut s = input.trim();
    if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    } else if s.starts_with('-') {
        return Err(err("must not be negative"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err("empty string"));
    }
    let mut total_nanos: u128 = 0;
    while !s.is_empty() {
        let int_len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (int_part, rest) = s.split_at(int_len);
        let (frac_part, rest) = match rest.strip_prefix('.') {
            Some(r) => {
                let len = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
                r.split_at(len)
            }
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err("expected a number"));
        }
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(err("missing unit (ns, us, ms, s, m or h)"));
        }
        let per_unit = UNITS.iter().find(|(name, _)| *name == unit).map(|(_, n)| *n).ok_or_else(|| err("unknown unit"))?;
        let whole: u128 = if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| err("number too large"))? };
        let mut nanos = whole.checked_mul(per_unit).ok_or_else(|| err("number too large"))?;
        // Fractional digits beyond nanosecond precision are dropped, as Go does.
        let mut scale = per_unit;
        for digit in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(|| err("number too large"))?;
        s = rest;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| err("number too large"))?;
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

/// Formats a duration the way Go's `Duration.String()` does: `"300ms"`, `"1m30s"`, `"0s"`.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        let (unit, per) = if nanos < 1_000 {
            ("ns", 1)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", trim_fraction(nanos, per));
    }
    let hours = nanos / 3_600_000_000_000;
    let minutes = (nanos / 60_000_000_000) % 60;
    let seconds = nanos % 60_000_000_000;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{}s", trim_fraction(seconds, 1_000_000_000)));
    out
}

fn trim_fraction(value: u128, per: u128) -> String {
    let whole = value / per;
    let frac = value % per;
    if frac == 0 {
        return whole.to_string();
    }
    let width = per.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        assert_eq!(parse("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse(".5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("10us").unwrap(), Duration::from_micros(10));
        assert_eq!(parse("10µs").unwrap(), Duration::from_micros(10));
        assert_eq!(parse("1h2m3s4ms5us6ns").unwrap(), Duration::new(3723, 4_005_006));
    }

    #[test]
    fn rejects_bad_strings() {
        for bad in ["", "1", "5x", "s", "-1s", "1.s.", "1m30", "ms"] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.input, bad, "{bad} -> {e}");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(Duration::from_millis(300)), "300ms");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
        for s in ["300ms", "2s", "1m30s", "1.5s"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }
}
