//! Kubernetes resource quantities: parsing and formatting.
//!
//! The grammar is the one `k8s.io/apimachinery/pkg/api/resource` accepts: a signed decimal
//! number followed by a binary suffix (`Ki` … `Ei`), a decimal SI suffix (`m`, `k`, `M`, `G`,
//! `T`, `P`, `E`) or a decimal exponent (`e3`, `E-2`). Conversions round up, as
//! `Quantity.MilliValue()` and `Quantity.Value()` do, so `"0.1"` bytes of memory is 1 byte.

/// Why a quantity string was rejected. The message names the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    /// The rejected text, verbatim.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl QuantityError {
    fn new(input: &str, reason: impl Into<String>) -> Self {
        QuantityError { input: input.to_string(), reason: reason.into() }
    }
}

/// An exactly parsed quantity: `sign × mantissa × 10^exp10 × 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedQuantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// The most decimal digits a quantity may carry; 38 digits still fit in a `u128`.
const MAX_DIGITS: usize = 38;

/// Parses a quantity string such as `"500m"`, `"1.5"`, `"8Gi"`, `"1e3"` or `"129M"`.
pub fn parse(input: &str) -> Result<ParsedQuantity, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::new(input, "empty string"));
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(QuantityError::new(input, "expected a number"));
    }
    if frac_part.contains('.') {
        return Err(QuantityError::new(input, "more than one decimal point"));
    }
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > MAX_DIGITS {
        return Err(QuantityError::new(input, "too many digits"));
    }
    let mantissa: u128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| QuantityError::new(input, "expected a number"))? };
    let mut exp10 = -(frac_part.len() as i32);
    let mut exp2 = 0u32;
    match suffix {
        "" => {}
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let exponent = other
                .strip_prefix(['e', 'E'])
                .filter(|e| {
                    let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
                    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
                })
                .and_then(|e| e.parse::<i32>().ok())
                .filter(|e| e.abs() <= 1000)
                .ok_or_else(|| QuantityError::new(input, format!("unknown suffix {other:?}")))?;
            exp10 += exponent;
        }
    }
    Ok(ParsedQuantity { negative: negative && mantissa != 0, mantissa, exp10, exp2 })
}

impl ParsedQuantity {
    /// `ceil(value × 10^scale)`, or `None` when it does not fit in an `i128`.
    fn ceil_scaled(&self, scale: i32) -> Option<i128> {
        let e = self.exp10 + scale;
        let base = self.mantissa.checked_mul(1u128.checked_shl(self.exp2)?)?;
        let magnitude_floor;
        let exact;
        if e >= 0 {
            magnitude_floor = base.checked_mul(10u128.checked_pow(e as u32)?)?;
            exact = true;
        } else if -e > MAX_DIGITS as i32 {
            // The divisor exceeds any mantissa: the magnitude is below 1.
            magnitude_floor = 0;
            exact = base == 0;
        } else {
            let div = 10u128.pow((-e) as u32);
            magnitude_floor = base / div;
            exact = base % div == 0;
        }
        let floor = i128::try_from(magnitude_floor).ok()?;
        Some(match (self.negative, exact) {
            (false, true) => floor,
            (false, false) => floor.checked_add(1)?,
            // ceil(-x) = -floor(x)
            (true, _) => -floor,
        })
    }

    /// The value in thousandths, rounded up (`Quantity.MilliValue()`).
    pub fn milli_value(&self) -> Option<i128> {
        self.ceil_scaled(3)
    }

    /// The value in whole units, rounded up (`Quantity.Value()`).
    pub fn value(&self) -> Option<i128> {
        self.ceil_scaled(0)
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }
}

fn non_negative(input: &str, v: Option<i128>) -> Result<u64, QuantityError> {
    let v = v.ok_or_else(|| QuantityError::new(input, "too large"))?;
    if v < 0 {
        return Err(QuantityError::new(input, "must not be negative"));
    }
    u64::try_from(v).map_err(|_| QuantityError::new(input, "too large"))
}

/// Parses a CPU quantity (`"4"`, `"500m"`, `"0.5"`) into millicores.
pub fn parse_cpu(s: &str) -> Result<u64, QuantityError> {
    non_negative(s, parse(s)?.milli_value())
}

/// Parses a memory (or any whole-unit) quantity (`"8Gi"`, `"129M"`, `"1e3"`) into bytes/units.
pub fn parse_memory(s: &str) -> Result<u64, QuantityError> {
    non_negative(s, parse(s)?.value())
}

/// Formats millicores the way `kubectl` shows CPU: whole cores as `"2"`, otherwise `"500m"`.
// `is_multiple_of` needs Rust 1.87; the workspace supports 1.85.
#[allow(clippy::manual_is_multiple_of)]
pub fn format_cpu(millis: u64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Formats bytes with the largest binary suffix that divides them exactly (`"8Gi"`),
/// or as a plain number of bytes.
#[allow(clippy::manual_is_multiple_of)]
pub fn format_memory(bytes: u64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    if bytes == 0 {
        return "0".to_string();
    }
    for (suffix, shift) in SUFFIXES {
        let unit = 1u64 << shift;
        if bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_forms() {
        assert_eq!(parse_cpu("4").unwrap(), 4000);
        assert_eq!(parse_cpu("500m").unwrap(), 500);
        assert_eq!(parse_cpu("0.5").unwrap(), 500);
        assert_eq!(parse_cpu("1.5").unwrap(), 1500);
        assert_eq!(parse_cpu(".25").unwrap(), 250);
        assert_eq!(parse_cpu("2.").unwrap(), 2000);
        assert_eq!(parse_cpu("+1").unwrap(), 1000);
        assert_eq!(parse_cpu("1e-3").unwrap(), 1);
        // Sub-millicore values round up, as MilliValue does.
        assert_eq!(parse_cpu("0.0001").unwrap(), 1);
        assert_eq!(parse_cpu("0").unwrap(), 0);
    }

    #[test]
    fn memory_forms() {
        assert_eq!(parse_memory("8Gi").unwrap(), 8 << 30);
        assert_eq!(parse_memory("512Mi").unwrap(), 512 << 20);
        assert_eq!(parse_memory("100Ki").unwrap(), 102_400);
        assert_eq!(parse_memory("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_memory("129M").unwrap(), 129_000_000);
        assert_eq!(parse_memory("1e3").unwrap(), 1000);
        assert_eq!(parse_memory("1E3").unwrap(), 1000);
        assert_eq!(parse_memory("128974848").unwrap(), 128_974_848);
        assert_eq!(parse_memory("1k").unwrap(), 1000);
        assert_eq!(parse_memory("2E").unwrap(), 2_000_000_000_000_000_000);
        assert_eq!(parse_memory("1Ei").unwrap(), 1 << 60);
        assert_eq!(parse_memory("1.5Gi").unwrap(), 3 << 29);
        // A milli-byte rounds up to a whole byte.
        assert_eq!(parse_memory("100m").unwrap(), 1);
    }

    #[test]
    fn errors_name_the_string() {
        for bad in ["", "abc", "1Qi", "1.2.3", "1e", "1e1.5", "Gi", "--1", "1 Gi"] {
            let err = parse_memory(bad).unwrap_err();
            assert_eq!(err.input, bad, "{bad}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert!(parse_cpu("-1").unwrap_err().to_string().contains("negative"));
        assert!(parse_memory("99999999999999999999Ei").unwrap_err().to_string().contains("too large"));
    }

    #[test]
    fn negative_values_round_toward_positive() {
        let q = parse("-1.5").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.value(), Some(-1));
        assert_eq!(q.milli_value(), Some(-1500));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_cpu(500), "500m");
        assert_eq!(format_cpu(2000), "2");
        assert_eq!(format_cpu(0), "0");
        assert_eq!(format_memory(8 << 30), "8Gi");
        assert_eq!(format_memory(1536 << 20), "1536Mi");
        assert_eq!(format_memory(1000), "1000");
        assert_eq!(format_memory(0), "0");
        for s in ["8Gi", "512Mi", "3Ki", "1Ti"] {
            assert_eq!(format_memory(parse_memory(s).unwrap()), s);
        }
    }
}
