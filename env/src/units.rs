//! Units with their dimension in the type: [`Bytes`], [`Nanos`], [`BitsPerSec`].
//!
//! Human-readable forms follow PRODUCT.md: SI prefixes are powers of ten (`KB` = 1000 bytes,
//! `MB` = 10^6, as in the HPCC simulator's K maps) and `KiB`/`MiB`/`GiB` are powers of two.
//! Rates take `bps`, `Kbps`, `Mbps`, `Gbps`, `Tbps` (also `Mb/s` style); durations take `ns`, `us`
//! (or `µs`, with the micro sign or the Greek mu), `ms`, `s`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

/// A duration or an instant in nanoseconds (simulated time starts at 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

/// A data rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BitsPerSec(pub u64);

/// Why a human-readable quantity did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {}: {why}", crate::text::word(.text))]
pub struct UnitError {
    kind: &'static str,
    text: String,
    why: String,
}

impl Nanos {
    /// From microseconds.
    pub const fn from_micros(us: u64) -> Self {
        Nanos(us * 1_000)
    }
    /// From milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Nanos(ms * 1_000_000)
    }
    /// As seconds, for reporting.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
}

impl BitsPerSec {
    /// From gigabits per second.
    pub const fn from_gbps(g: u64) -> Self {
        BitsPerSec(g * 1_000_000_000)
    }
    /// As gigabits per second.
    pub fn as_gbps(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// Serialization time of `bytes` at this rate, rounded to the nearest nanosecond as the
    /// HPCC simulator's ns-resolution clock does (a 1036 B packet takes 83 ns at 100 Gb/s).
    pub fn tx_time(self, bytes: u64) -> Nanos {
        let bits = bytes as u128 * 8 * 1_000_000_000;
        let rate = self.0.max(1) as u128;
        Nanos(((bits + rate / 2) / rate) as u64)
    }
}

/// A number as written, and its unit.
struct Quantity<'a> {
    /// The number's text.
    digits: &'a str,
    /// Its value.
    value: f64,
    unit: &'a str,
}

fn split_number(text: &str) -> Option<Quantity<'_>> {
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
        .unwrap_or(t.len());
    // "1e3KB" is fine, but a unit starting with 'e' would be eaten: no unit here starts with e.
    let (digits, unit) = t.split_at(end);
    let value: f64 = digits.parse().ok()?;
    Some(Quantity { digits, value, unit: unit.trim() })
}

fn to_u64(kind: &'static str, text: &str, q: &Quantity<'_>, mult: u64) -> Result<u64, UnitError> {
    to_u64_at_most(kind, text, q, mult, u64::MAX, "2^64 − 1 in the base unit")
}

/// `q` × `mult`, rounded to the base unit, at most `max`. A whole number is scaled exactly (an
/// f64 holds integers exactly only up to 2^53, and rounds 2^64 − 1 up to 2^64); a fraction or
/// exponent goes through f64, and is compared with `max` exactly too (`max as f64` may round
/// up, which let values just past it through, saturated to `max`).
fn to_u64_at_most(
    kind: &'static str,
    text: &str,
    q: &Quantity<'_>,
    mult: u64,
    max: u64,
    most: &str,
) -> Result<u64, UnitError> {
    let too_large = || UnitError { kind, text: text.into(), why: format!("is too large (the most is {most})") };
    if !q.digits.is_empty() && q.digits.bytes().all(|b| b.is_ascii_digit()) {
        let n = q.digits.parse::<u128>().ok().and_then(|n| n.checked_mul(u128::from(mult)));
        return n.filter(|&n| n <= u128::from(max)).map(|n| n as u64).ok_or_else(too_large);
    }
    let v = (q.value * mult as f64).round();
    if !v.is_finite() || v < 0.0 {
        return Err(UnitError { kind, text: text.into(), why: "must be a finite, non-negative number".into() });
    }
    // A finite f64 casts to u128 exactly, or saturates above 2^128, still above `max`.
    if v as u128 > u128::from(max) {
        return Err(too_large());
    }
    Ok(v as u64)
}

/// The longest duration a flag or a scenario may give: 2^62 ns, about 146 years. A timer that
/// long never fires in any run, and the simulator adds durations to times without overflow.
pub const MAX_DURATION: Nanos = Nanos(1 << 62);

/// A list of `name=number` pairs as flags take it (`depth=2,depth_max=0.2`): each pair as
/// written, its name and its value, in order. Empty entries are skipped; an error names the
/// pair; a name given twice is refused (which one was meant?). What the names and values may
/// be is the caller's to check.
pub fn named_numbers(spec: &str) -> Result<Vec<(&str, &str, f64)>, String> {
    let mut out: Vec<(&str, &str, f64)> = Vec::new();
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').ok_or_else(|| format!("'{pair}': expected name=value"))?;
        let (name, value) = (name.trim(), value.trim());
        let v = value.parse().map_err(|_| format!("'{pair}': '{value}' is not a number"))?;
        if out.iter().any(|(_, n, _)| *n == name) {
            return Err(format!("'{name}' is given twice"));
        }
        out.push((pair, name, v));
    }
    Ok(out)
}

impl FromStr for Bytes {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| UnitError { kind: "size", text: s.into(), why: why.into() };
        let q = split_number(s).ok_or_else(|| err("expected a number and a unit, e.g. 400KB"))?;
        let mult: u64 = match q.unit {
            "B" => 1,
            // A bare number could mean bytes or kilobytes (`static:400,1600,0.2` ran with
            // thresholds a thousand times too small): refused, as durations are.
            "" => return Err(err("missing unit (B, KB, MB, GB, KiB, MiB or GiB)")),
            "KB" | "kB" | "K" | "k" => 1_000,
            "MB" | "M" => 1_000_000,
            "GB" | "G" => 1_000_000_000,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            _ => return Err(err("unknown unit (use B, KB, MB, GB, KiB, MiB, GiB)")),
        };
        Ok(Bytes(to_u64("size", s, &q, mult)?))
    }
}

impl FromStr for Nanos {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| UnitError { kind: "duration", text: s.into(), why: why.into() };
        let q = split_number(s).ok_or_else(|| err("expected a number and a unit, e.g. 20ms"))?;
        let mult: u64 = match q.unit {
            "ns" => 1,
            // The micro sign (U+00B5) and the Greek mu (U+03BC), which keyboards and autocorrect
            // give for the same thing.
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            // Not `m`, which reads as milli as readily as minutes.
            "min" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(err("missing unit (ns, us, ms, s, min or h)")),
            _ => return Err(err("unknown unit (use ns, us, ms, s, min or h)")),
        };
        Ok(Nanos(to_u64_at_most("duration", s, &q, mult, MAX_DURATION.0, "2^62 ns, about 146 years")?))
    }
}

impl FromStr for BitsPerSec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| UnitError { kind: "rate", text: s.into(), why: why.into() };
        let q = split_number(s).ok_or_else(|| err("expected a number and a unit, e.g. 100Gbps"))?;
        let mult: u64 = match q.unit {
            "bps" | "b/s" => 1,
            "Kbps" | "kbps" | "Kb/s" | "kb/s" => 1_000,
            "Mbps" | "Mb/s" => 1_000_000,
            "Gbps" | "Gb/s" => 1_000_000_000,
            "Tbps" | "Tb/s" => 1_000_000_000_000,
            _ => return Err(err("unknown unit (use bps, Kbps, Mbps, Gbps or Tbps)")),
        };
        Ok(BitsPerSec(to_u64("rate", s, &q, mult)?))
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1000 && b.is_multiple_of(1000) {
            write!(f, "{}KB", b / 1000)
        } else {
            write!(f, "{b}B")
        }
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n != 0 && n.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", n / 1_000_000_000)
        } else if n != 0 && n.is_multiple_of(1_000_000) {
            write!(f, "{}ms", n / 1_000_000)
        } else if n != 0 && n.is_multiple_of(1_000) {
            write!(f, "{}us", n / 1_000)
        } else {
            write!(f, "{n}ns")
        }
    }
}

impl fmt::Display for BitsPerSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        if r != 0 && r.is_multiple_of(1_000_000_000) {
            write!(f, "{}Gbps", r / 1_000_000_000)
        } else if r != 0 && r.is_multiple_of(1_000_000) {
            write!(f, "{}Mbps", r / 1_000_000)
        } else {
            write!(f, "{r}bps")
        }
    }
}

/// Serde: a string with a unit. A bare number is refused: in a scenario file `duration = 5`
/// would otherwise mean 5 ns, where the writer almost certainly meant something else, and the
/// command line already refuses unit-less values.
macro_rules! serde_units {
    ($t:ty, $what:literal, $example:literal) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl V {
                    fn no_unit<E: serde::de::Error>(v: impl fmt::Display) -> E {
                        E::custom(format!("{v} has no unit; write it as a string with one, e.g. {}", $example))
                    }
                }
                impl serde::de::Visitor<'_> for V {
                    type Value = $t;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!($what, " such as ", $example))
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<$t, E> {
                        s.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$t, E> {
                        Err(V::no_unit(v))
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$t, E> {
                        Err(V::no_unit(v))
                    }
                    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<$t, E> {
                        Err(V::no_unit(v))
                    }
                }
                d.deserialize_any(V)
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
    };
}

serde_units!(Bytes, "a size", "\"400KB\"");
serde_units!(Nanos, "a duration", "\"20ms\"");
serde_units!(BitsPerSec, "a rate", "\"100Gbps\"");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_takes_units_and_refuses_bare_numbers() {
        let n: Nanos = serde_json::from_str("\"20ms\"").unwrap();
        assert_eq!(n, Nanos::from_millis(20));
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"20ms\"", "written as it is read");
        let b: Bytes = serde_json::from_str("\"400KB\"").unwrap();
        assert_eq!(b, Bytes(400_000));
        for bare in ["5", "-5", "2.5"] {
            let e = serde_json::from_str::<Nanos>(bare).unwrap_err().to_string();
            assert!(e.contains("has no unit") && e.contains("\"20ms\""), "{bare}: {e}");
            assert!(serde_json::from_str::<Bytes>(bare).is_err() && serde_json::from_str::<BitsPerSec>(bare).is_err());
        }
    }

    #[test]
    fn parses_si_and_binary_sizes() {
        assert_eq!("400KB".parse::<Bytes>().unwrap(), Bytes(400_000));
        assert_eq!("1.6MB".parse::<Bytes>().unwrap(), Bytes(1_600_000));
        assert_eq!("32MiB".parse::<Bytes>().unwrap(), Bytes(32 * 1024 * 1024));
        assert_eq!("1036B".parse::<Bytes>().unwrap(), Bytes(1036));
        assert!("1036".parse::<Bytes>().unwrap_err().to_string().contains("missing unit"));
        assert!("12 parsecs".parse::<Bytes>().is_err());
        assert!("-5KB".parse::<Bytes>().is_err());
        let huge = "99999999999999999999KB".parse::<Bytes>().unwrap_err().to_string();
        assert!(huge.contains("too large"), "{huge}");
        // Just past the largest: refused, not saturated to it (an f64 rounds 2^64 − 1 up to
        // 2^64, which let 2^64 and a little more through as 2^64 − 1).
        for past in ["18446744073709551616B", "18446744073709551617B", "18446744073709552KB", "1.8446744073709552e19B"]
        {
            assert!(past.parse::<Bytes>().unwrap_err().to_string().contains("too large"), "{past}");
        }
        // Whole numbers are exact beyond 2^53.
        assert_eq!("9007199254740993B".parse::<Bytes>().unwrap(), Bytes(9_007_199_254_740_993));
        assert_eq!("18446744073709551KB".parse::<Bytes>().unwrap(), Bytes(18_446_744_073_709_551_000));
    }

    #[test]
    fn parses_durations_and_rates() {
        assert_eq!("20ms".parse::<Nanos>().unwrap(), Nanos(20_000_000));
        assert_eq!("100us".parse::<Nanos>().unwrap(), Nanos(100_000));
        for micro in ["100\u{b5}s", "100\u{3bc}s"] {
            assert_eq!(micro.parse::<Nanos>().unwrap(), Nanos(100_000), "{micro}");
        }
        assert_eq!("1000ns".parse::<Nanos>().unwrap(), Nanos(1000));
        assert!("20".parse::<Nanos>().is_err());
        assert_eq!("10min".parse::<Nanos>().unwrap(), Nanos(600_000_000_000));
        assert_eq!("1.5h".parse::<Nanos>().unwrap(), Nanos(5_400_000_000_000));
        // `m` could be milli or minutes: neither is guessed.
        assert!("10m".parse::<Nanos>().unwrap_err().to_string().contains("use ns, us, ms, s, min or h"));
        // An "infinite" timer would wrap the simulator's clock when added to the time now.
        assert_eq!(format!("{}ns", 1u64 << 62).parse::<Nanos>().unwrap(), MAX_DURATION);
        for long in ["18446744073709551615ns", "4611686018427388928ns", "1e10s"] {
            assert!(long.parse::<Nanos>().unwrap_err().to_string().contains("the most is 2^62 ns"), "{long}");
        }
        assert!("1e30bps".parse::<BitsPerSec>().unwrap_err().to_string().contains("too large"));
        assert_eq!("18446744073709551615B".parse::<Bytes>().unwrap(), Bytes(u64::MAX));
        assert_eq!("100Gbps".parse::<BitsPerSec>().unwrap(), BitsPerSec::from_gbps(100));
        assert_eq!("20Mb/s".parse::<BitsPerSec>().unwrap(), BitsPerSec(20_000_000));
    }

    #[test]
    fn tx_time_rounds_like_the_reference() {
        // The reference runs (`shared/reference/README.md`, "Packets"): a 1000-byte payload
        // with its headers, 1036 B, takes 83 ns at 100G.
        assert_eq!(BitsPerSec::from_gbps(100).tx_time(1036), Nanos(83));
        assert_eq!(BitsPerSec::from_gbps(100).tx_time(48), Nanos(4));
        assert_eq!(BitsPerSec::from_gbps(400).tx_time(1036), Nanos(21));
    }

    #[test]
    fn display_round_trips() {
        // Each parsed as its own kind, printed back as written (binary units as bytes, which
        // parse back to the same value).
        for s in ["400KB", "7B"] {
            assert_eq!(s.parse::<Bytes>().unwrap().to_string(), s);
        }
        let mib = "32MiB".parse::<Bytes>().unwrap();
        assert_eq!(mib.to_string().parse::<Bytes>().unwrap(), mib);
        for s in ["20ms", "100us", "7ns", "2s"] {
            assert_eq!(s.parse::<Nanos>().unwrap().to_string(), s);
        }
        for s in ["100Gbps", "400Gbps", "25Gbps"] {
            assert_eq!(s.parse::<BitsPerSec>().unwrap().to_string(), s);
        }
        assert_eq!(Nanos(20_000_000).to_string(), "20ms");
        assert_eq!(BitsPerSec::from_gbps(400).to_string(), "400Gbps");
    }
}
