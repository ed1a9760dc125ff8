//! CronJob schedules: the standard five-field cron syntax and its `@` descriptors,
//! as the CronJob controller accepts them, and the next time a schedule fires.
//!
//! The fields are minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
//! JAN-DEC) and day of week (0-6 or SUN-SAT). Each is `*` (or `?` for the two day
//! fields), a value, a range `a-b`, any of these with a step `/n`, or a comma list of
//! them. When both day fields are restricted, a time matches if either matches; when
//! one is `*`, only the other counts. `@yearly` (`@annually`), `@monthly`, `@weekly`,
//! `@daily` (`@midnight`) and `@hourly` stand for their five-field forms, and
//! `@every <duration>` fires at a fixed interval. Times are UTC unless the CronJob
//! names a `timeZone`, which the caller applies.
//!
//! Parsing is linear in the length of the schedule, and [`Schedule::next_after`]
//! looks at most a few years ahead, day by day, so no schedule costs more than a
//! bounded amount of work.

use std::fmt;

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// The five fields, as bit sets.
    Fields(Fields),
    /// `@every <duration>`: a fixed interval, in seconds.
    Every(u64),
}

/// The bit set of each field: bit `n` is set when value `n` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// Whether the day-of-month or day-of-week field was `*` or `?`.
    dom_any: bool,
    dow_any: bool,
}

/// Why a schedule does not parse; the message is what the API server reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Parses a schedule. The longest schedule accepted is 1,000 bytes.
pub fn parse(spec: &str) -> Result<Schedule, ParseError> {
    let spec = spec.trim();
    if spec.len() > 1000 {
        return Err(ParseError("schedule is longer than 1000 characters".into()));
    }
    if spec.is_empty() {
        return Err(ParseError("empty spec string".into()));
    }
    if let Some(rest) = spec.strip_prefix('@') {
        let five = match rest {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" | "midnight" => "0 0 * * *",
            "hourly" => "0 * * * *",
            _ => {
                if let Some(d) = rest.strip_prefix("every ") {
                    let interval =
                        crate::duration::parse(d.trim()).map_err(|e| ParseError(format!("failed to parse duration {spec}: {e}")))?;
                    // As the cron library Kubernetes uses: whole seconds, one at the least.
                    return Ok(Schedule::Every(interval.as_secs().max(1)));
                }
                return Err(ParseError(format!("unrecognized descriptor: {spec}")));
            }
        };
        return parse(five);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(ParseError(format!("expected exactly 5 fields, found {}: [{}]", fields.len(), fields.join(" "))));
    }
    let any = |f: &str| f == "*" || f == "?";
    Ok(Schedule::Fields(Fields {
        minute: field(fields[0], 0, 59, &[])?,
        hour: field(fields[1], 0, 23, &[])?,
        dom: field(fields[2], 1, 31, &[])?,
        month: field(fields[3], 1, 12, &MONTHS)?,
        dow: field(fields[4], 0, 6, &DAYS)?,
        dom_any: any(fields[2]),
        dow_any: any(fields[4]),
    }))
}

/// One field's bit set. `names` are the symbolic values, numbered from `min`.
fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, ParseError> {
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| ParseError(format!("failed to parse int from {s}: invalid syntax")))?;
                if step == 0 {
                    return Err(ParseError(format!("step of range should be a positive number: {part}")));
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let (lo, hi) = if range == "*" || range == "?" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, min, names)?, value(b, min, names)?)
        } else {
            let v = value(range, min, names)?;
            // `a/n` runs from a to the end of the field.
            (v, if step.is_some() { max } else { v })
        };
        if lo < min {
            return Err(ParseError(format!("beginning of range ({lo}) below minimum ({min}): {part}")));
        }
        if hi > max {
            return Err(ParseError(format!("end of range ({hi}) above maximum ({max}): {part}")));
        }
        if lo > hi {
            return Err(ParseError(format!("beginning of range ({lo}) beyond end of range ({hi}): {part}")));
        }
        let step = step.unwrap_or(1);
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

/// A Go duration of whole hours, minutes and seconds (`90s`, `1h30m`), in seconds.
fn value(text: &str, min: u32, names: &[&str]) -> Result<u32, ParseError> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(i as u32 + min);
    }
    text.parse().map_err(|_| ParseError(format!("failed to parse int from {text}: invalid syntax")))
}

impl Schedule {
    /// The first time after `after` (Unix seconds) that the schedule fires, in Unix
    /// seconds; `None` when it never fires within the next five years (`0 0 30 2 *`).
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let f = match self {
            Schedule::Every(secs) => return Some(after + *secs as i64),
            Schedule::Fields(f) => f,
        };
        let bit = |set: u64, v: i64| set & (1 << v) != 0;
        let start_minute = after.div_euclid(60) + 1;
        let first_day = start_minute.div_euclid(1440);
        for day in first_day..first_day + 366 * 5 {
            let (_, month, dom) = civil_from_days(day);
            // 1970-01-01 was a Thursday (4).
            let dow = (day + 4).rem_euclid(7);
            let dom_ok = bit(f.dom, dom);
            let dow_ok = bit(f.dow, dow);
            let day_ok = if f.dom_any || f.dow_any { dom_ok && dow_ok } else { dom_ok || dow_ok };
            if !(bit(f.month, month) && day_ok) {
                continue;
            }
            let from = if day == first_day { start_minute.rem_euclid(1440) } else { 0 };
            if let Some(m) = (from..1440).find(|m| bit(f.hour, m / 60) && bit(f.minute, m % 60)) {
                return Some((day * 1440 + m) * 60);
            }
        }
        None
    }
}

/// (year, month 1-12, day 1-31) of a count of days since 1970-01-01 (Howard Hinnant's
/// civil-from-days algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> i64 {
        s.parse::<jiff::Timestamp>().unwrap().as_second()
    }

    fn next(spec: &str, after: &str) -> String {
        let t = parse(spec).unwrap().next_after(ts(after)).unwrap();
        jiff::Timestamp::from_second(t).unwrap().to_string()
    }

    #[test]
    fn the_next_time_of_common_schedules() {
        assert_eq!(next("*/1 * * * *", "2026-12-02T10:00:30Z"), "2026-12-02T10:01:00Z");
        assert_eq!(next("*/15 * * * *", "2026-12-02T10:01:00Z"), "2026-12-02T10:15:00Z");
        assert_eq!(next("0 3 * * *", "2026-12-02T10:00:00Z"), "2026-12-03T03:00:00Z");
        assert_eq!(next("@hourly", "2026-12-02T10:00:00Z"), "2026-12-02T11:00:00Z");
        assert_eq!(next("@yearly", "2026-12-02T10:00:00Z"), "2027-01-01T00:00:00Z");
        // 2026-12-02 is a Wednesday; the next Monday is the 7th.
        assert_eq!(next("30 9 * * MON", "2026-12-02T10:00:00Z"), "2026-12-07T09:30:00Z");
        assert_eq!(next("0 0 29 2 *", "2026-12-02T10:00:00Z"), "2028-02-29T00:00:00Z");
        assert_eq!(next("@every 90s", "2026-12-02T10:00:00Z"), "2026-12-02T10:01:30Z");
        // Go's durations, in whole seconds and one at the least, as Kubernetes' cron library takes them.
        assert_eq!(next("@every 1m30s", "2026-12-02T10:00:00Z"), "2026-12-02T10:01:30Z");
        assert_eq!(next("@every 1.5h", "2026-12-02T10:00:00Z"), "2026-12-02T11:30:00Z");
        assert_eq!(next("@every 2500ms", "2026-12-02T10:00:00Z"), "2026-12-02T10:00:02Z");
        assert_eq!(next("@every 100ms", "2026-12-02T10:00:00Z"), "2026-12-02T10:00:01Z");
        assert!(parse("@every soon").unwrap_err().0.starts_with("failed to parse duration @every soon: invalid duration"));
    }

    /// With both day fields restricted, either one matching is enough.
    #[test]
    fn restricted_day_fields_match_either() {
        // The 10th (a Thursday in December 2026) or any Monday: Monday the 7th first.
        assert_eq!(next("0 0 10 * 1", "2026-12-02T10:00:00Z"), "2026-12-07T00:00:00Z");
        // Only the 10th when the day of week is `*`.
        assert_eq!(next("0 0 10 * *", "2026-12-02T10:00:00Z"), "2026-12-10T00:00:00Z");
    }

    #[test]
    fn bad_schedules_are_refused_with_the_reason() {
        let err = |s: &str| parse(s).unwrap_err().0;
        assert_eq!(err("bad"), "expected exactly 5 fields, found 1: [bad]");
        assert_eq!(err("61 * * * *"), "end of range (61) above maximum (59): 61");
        assert_eq!(err("* * 0 * *"), "beginning of range (0) below minimum (1): 0");
        assert_eq!(err("*/0 * * * *"), "step of range should be a positive number: */0");
        assert_eq!(err("5-1 * * * *"), "beginning of range (5) beyond end of range (1): 5-1");
        assert_eq!(err("x * * * *"), "failed to parse int from x: invalid syntax");
        assert_eq!(err("@fortnightly"), "unrecognized descriptor: @fortnightly");
        assert!(parse("0 0 30 2 *").unwrap().next_after(0).is_none(), "February 30th never comes");
    }
}
