//! Traffic: flow-size distributions, Poisson and incast generators, HPCC flow-file replay
//! (REFERENCE.md §4).

use crate::rng::Rng;
use crate::text::{shown, without_bom, word};
use crate::topology::NodeId;
use crate::units::{BitsPerSec, Nanos};

/// One flow to start: who, how much, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    /// Sending host.
    pub src: NodeId,
    /// Receiving host.
    pub dst: NodeId,
    /// Application bytes.
    pub size_bytes: u64,
    /// Start time.
    pub start: Nanos,
    /// PFC priority (queue) the flow uses.
    pub priority: u8,
    /// Destination UDP port (HPCC files carry one; generated flows use 100).
    pub dport: u16,
}

/// The largest flow any workload may hold: 4 GiB − 1, the most HPCC's flow files carry (a
/// 32-bit size). At 100 Gb/s such a flow alone runs for a third of a simulated second.
pub const MAX_FLOW_BYTES: u64 = u32::MAX as u64;

/// A problem in a CDF or flow file, with its 1-based line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub why: String,
}

/// A flow-size CDF: `(size_bytes, cumulative_percent)` points, sampled by linear interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct Cdf {
    points: Vec<(f64, f64)>,
}

impl Cdf {
    /// Parse the `size_bytes cdf_percent` format. Sizes and percentages must not decrease, the
    /// percentages must lie in [0, 100] and the last one must be 100.
    pub fn parse(text: &str) -> Result<Self, LineError> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        let mut last_line = 0;
        for (i, raw) in without_bom(text).lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            last_line = line;
            let err = |why: String| LineError { line, why };
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 2 {
                return Err(err(format!("expected 'size_bytes cdf_percent', got {}", shown(l))));
            }
            let size: f64 = f[0].parse().map_err(|_| err(format!("size {} is not a number", word(f[0]))))?;
            let pct: f64 = f[1].parse().map_err(|_| err(format!("percent {} is not a number", word(f[1]))))?;
            if !size.is_finite() || size < 0.0 || size > MAX_FLOW_BYTES as f64 {
                return Err(err(format!("size {size} must be within 0..={MAX_FLOW_BYTES} bytes")));
            }
            if !(0.0..=100.0).contains(&pct) {
                return Err(err(format!("percent {pct} must be within [0, 100]")));
            }
            if let Some(&(ps, pp)) = points.last() {
                if size < ps || pct < pp {
                    return Err(err("sizes and percentages must not decrease".into()));
                }
            }
            points.push((size, pct));
        }
        match points.last() {
            None => Err(LineError { line: 1, why: "no points".into() }),
            Some(&(_, p)) if (p - 100.0).abs() > 1e-9 => {
                Err(LineError { line: last_line, why: format!("the last percentage is {p}, not 100") })
            }
            Some(_) => Ok(Cdf { points }),
        }
    }

    /// Mean flow size in bytes of the distribution [`Cdf::sample`] draws from, before its
    /// rounding to whole bytes of at least 1: the first point's share is a point mass at its
    /// size (as in the reference simulator), and each later segment is uniform between its two
    /// sizes. Sizes drawn below 1 byte count here at their size, as in the reference's
    /// generator: negligible for the standard CDFs (a segment from 0 carries a 1/size share
    /// of it, 4e-12 of websearch's mean), but a custom CDF with much of its mass below a byte
    /// offers more than its load (README "Scenario format").
    pub fn mean(&self) -> f64 {
        let (s0, p0) = self.points[0];
        let mut m = s0 * p0 / 100.0;
        let mut prev = (s0, p0);
        for &(s, p) in &self.points[1..] {
            m += (prev.0 + s) / 2.0 * (p - prev.1) / 100.0;
            prev = (s, p);
        }
        m
    }

    /// Draw one flow size (at least 1 byte).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let x = rng.uniform() * 100.0;
        let i = self.points.partition_point(|&(_, p)| p < x).min(self.points.len() - 1);
        let (s1, p1) = self.points[i];
        let size = if i == 0 || p1 <= self.points[i - 1].1 {
            s1
        } else {
            let (s0, p0) = self.points[i - 1];
            s0 + (x - p0) / (p1 - p0) * (s1 - s0)
        };
        (size.round() as u64).max(1)
    }
}

/// Per-host Poisson arrivals with uniform destinations over the other hosts (REFERENCE.md §4):
/// each host's mean gap is `mean_size·8 / (host_bw·load)`, with `host_bw` its own link's rate
/// (`host_bw[i]` for `hosts[i]`), so that every host offers `load` of its own link.
pub fn poisson(
    hosts: &[NodeId],
    cdf: &Cdf,
    load: f64,
    host_bw: &[BitsPerSec],
    window: (Nanos, Nanos),
    priority: u8,
    rng: &mut Rng,
) -> Vec<FlowSpec> {
    let mut flows = Vec::new();
    if load <= 0.0 || hosts.len() < 2 {
        return flows;
    }
    for (&src, &bw) in hosts.iter().zip(host_bw) {
        let mean_gap_ns = poisson_mean_gap_ns(cdf, load, bw);
        let mut t = window.0 .0 as f64 + rng.exponential(mean_gap_ns);
        while t < window.1 .0 as f64 {
            let mut dst = hosts[rng.below(hosts.len() as u64 - 1) as usize];
            if dst == src {
                dst = *hosts.last().unwrap();
            }
            flows.push(FlowSpec {
                src,
                dst,
                size_bytes: cdf.sample(rng),
                start: Nanos(t as u64),
                priority,
                dport: 100,
            });
            t += rng.exponential(mean_gap_ns);
        }
    }
    flows
}

/// The mean number of flows [`poisson`] draws, known before drawing them: a scenario checks
/// it so that an absurd load, rate or CDF is an error rather than a run that exhausts memory.
pub fn poisson_expected_flows(cdf: &Cdf, load: f64, host_bw: &[BitsPerSec], window: (Nanos, Nanos)) -> f64 {
    host_bw.iter().map(|&bw| span_ns(window) / poisson_mean_gap_ns(cdf, load, bw)).sum()
}

/// One host's mean gap between [`poisson`] arrivals.
fn poisson_mean_gap_ns(cdf: &Cdf, load: f64, host_bw: BitsPerSec) -> f64 {
    cdf.mean() * 8.0 / (host_bw.0 as f64 * load) * 1e9
}

fn span_ns(window: (Nanos, Nanos)) -> f64 {
    window.1 .0.saturating_sub(window.0 .0) as f64
}

/// When incast events happen.
#[derive(Debug, Clone, PartialEq)]
pub enum IncastSchedule {
    /// Poisson events adding this fraction of the total host bandwidth (the sum of the hosts'
    /// link rates) as incast bytes.
    Load(f64),
    /// This many events, evenly spaced over the window.
    Count(u32),
    /// Events at these times.
    At(Vec<Nanos>),
}

/// An incast pattern: `fan_in` distinct senders each start a `flow_size` flow to one random
/// receiver at the same instant, at the times `schedule` gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Incast {
    /// Senders per event.
    pub fan_in: u32,
    /// Bytes each sender sends.
    pub flow_size: u64,
    /// When events happen.
    pub schedule: IncastSchedule,
}

impl Incast {
    /// The mean number of flows [`incast`] draws for this pattern (see
    /// [`poisson_expected_flows`]).
    pub fn expected_flows(&self, host_bw: &[BitsPerSec], window: (Nanos, Nanos)) -> f64 {
        let events = match &self.schedule {
            IncastSchedule::Load(load) => span_ns(window) / self.mean_event_gap_ns(*load, host_bw),
            IncastSchedule::Count(n) => *n as f64,
            IncastSchedule::At(ts) => ts.len() as f64,
        };
        events * self.fan_in as f64
    }

    /// The mean gap between events when they add `load` of the total host bandwidth.
    fn mean_event_gap_ns(&self, load: f64, host_bw: &[BitsPerSec]) -> f64 {
        let bytes_per_event = self.fan_in as f64 * self.flow_size as f64;
        let rate_bps = load * host_bw.iter().map(|b| b.0 as f64).sum::<f64>();
        bytes_per_event * 8.0 / rate_bps * 1e9
    }
}

/// The flows of an incast pattern over `window`.
pub fn incast(
    hosts: &[NodeId],
    pattern: &Incast,
    host_bw: &[BitsPerSec],
    window: (Nanos, Nanos),
    priority: u8,
    rng: &mut Rng,
) -> Vec<FlowSpec> {
    let Incast { fan_in, flow_size, ref schedule } = *pattern;
    let (t0, t1) = (window.0 .0, window.1 .0);
    let times: Vec<u64> = match schedule {
        IncastSchedule::Load(load) if *load > 0.0 => {
            let mean_gap_ns = pattern.mean_event_gap_ns(*load, host_bw);
            let mut v = Vec::new();
            let mut t = t0 as f64 + rng.exponential(mean_gap_ns);
            while t < t1 as f64 {
                v.push(t as u64);
                t += rng.exponential(mean_gap_ns);
            }
            v
        }
        IncastSchedule::Load(_) => Vec::new(),
        IncastSchedule::Count(n) => {
            let span = t1.saturating_sub(t0) as f64;
            (0..*n).map(|i| t0 + ((i as f64 + 0.5) * span / *n as f64) as u64).collect()
        }
        IncastSchedule::At(ts) => ts.iter().map(|t| t.0).collect(),
    };
    let mut flows = Vec::new();
    for t in times {
        let dst = hosts[rng.below(hosts.len() as u64) as usize];
        let mut others: Vec<NodeId> = hosts.iter().copied().filter(|&h| h != dst).collect();
        // Partial Fisher-Yates: the first fan_in entries become a uniform random subset.
        let k = (fan_in as usize).min(others.len());
        for i in 0..k {
            let j = i + rng.below((others.len() - i) as u64) as usize;
            others.swap(i, j);
        }
        for &src in &others[..k] {
            flows.push(FlowSpec { src, dst, size_bytes: flow_size, start: Nanos(t), priority, dport: 100 });
        }
    }
    flows
}

/// Parse a flow file's start time, in seconds, into nanoseconds as the HPCC simulator takes it:
/// read as a double, then truncated to whole nanoseconds (ns-3's `Seconds(double)`), so that a
/// start lands on the nanosecond the reference's `fct.txt` shows (shared/reference/README.md,
/// "Flow starts": `2.000024902` runs at 2000024901 ns). Or why it is none.
fn parse_seconds_as_hpcc(s: &str) -> Result<u64, &'static str> {
    const NUMBER: &str = "expected a number of seconds, such as 2.000006935";
    if s.starts_with('-') {
        return Err("a time cannot be negative");
    }
    // Rust's parse reads what C++'s `>> double` does, correctly rounded, and also words
    // (`inf`, `NaN`) that are no time.
    if !s.chars().all(|c| c.is_ascii_digit() || "+.eE-".contains(c)) {
        return Err(NUMBER);
    }
    let seconds: f64 = s.parse().map_err(|_| NUMBER)?;
    ns_truncated(seconds).ok_or("past the latest time a run can hold, 18446744073 s")
}

/// ⌊`seconds` · 10⁹⌋, computed on the double's exact value (mantissa · 2^exponent), not on a
/// rounded product; `None` past `u64::MAX`.
fn ns_truncated(seconds: f64) -> Option<u64> {
    if !(seconds.is_finite() && seconds >= 0.0) {
        return None;
    }
    let bits = seconds.to_bits();
    let (biased, fraction) = ((bits >> 52) & 0x7ff, bits & ((1 << 52) - 1));
    let (mantissa, exponent) =
        if biased == 0 { (fraction, -1074) } else { (fraction | (1 << 52), biased as i32 - 1075) };
    let scaled = u128::from(mantissa) * 1_000_000_000;
    let ns = if exponent >= 0 {
        scaled.checked_shl(exponent as u32).filter(|v| v >> exponent == scaled)?
    } else if exponent > -128 {
        scaled >> -exponent
    } else {
        0
    };
    u64::try_from(ns).ok()
}

/// Parse an HPCC flow file (REFERENCE.md §4): the flow count, then
/// `src dst priority dport size_bytes start_time_s` per flow.
pub fn parse_hpcc_flows(
    text: &str,
    n_nodes: usize,
    is_host: impl Fn(NodeId) -> bool,
) -> Result<Vec<FlowSpec>, LineError> {
    Ok(parse_hpcc_flow_lines(text, n_nodes, is_host)?.into_iter().map(|(_, flow)| flow).collect())
}

/// [`parse_hpcc_flows`], each flow with its 1-based line, for errors found once the flows are
/// placed in a run.
pub fn parse_hpcc_flow_lines(
    text: &str,
    n_nodes: usize,
    is_host: impl Fn(NodeId) -> bool,
) -> Result<Vec<(usize, FlowSpec)>, LineError> {
    let mut lines =
        without_bom(text).lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty());
    let (ln, first) = lines.next().ok_or(LineError { line: 1, why: "empty file".into() })?;
    let count: usize = first
        .parse()
        .map_err(|_| LineError { line: ln, why: format!("expected the flow count, got {}", shown(first)) })?;
    let mut flows = Vec::with_capacity(count.min(1 << 20));
    for (line, l) in lines {
        let err = |why: String| LineError { line, why };
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() != 6 {
            return Err(err(format!("expected 'src dst priority dport size start_s', got {}", shown(l))));
        }
        let host = |s: &str, what: &str| -> Result<NodeId, LineError> {
            let v: u32 = s.parse().map_err(|_| err(format!("{what} {} is not a node id", word(s))))?;
            if v as usize >= n_nodes || !is_host(v) {
                return Err(err(format!("{what} {v} is not a host of the topology")));
            }
            Ok(v)
        };
        let src = host(f[0], "src")?;
        let dst = host(f[1], "dst")?;
        if src == dst {
            return Err(err(format!("src and dst are both {src}")));
        }
        let priority: u8 = f[2].parse().map_err(|_| err(format!("priority {} is not 0-7", word(f[2]))))?;
        if !(1..=7).contains(&priority) {
            return Err(err(format!("priority {priority} must be 1-7 (0 is the control queue)")));
        }
        let dport: u16 = f[3].parse().map_err(|_| err(format!("dport {} is not a port number", word(f[3]))))?;
        let size_bytes: u64 = f[4].parse().map_err(|_| err(format!("size {} is not a byte count", word(f[4]))))?;
        if size_bytes == 0 || size_bytes > MAX_FLOW_BYTES {
            return Err(err(format!("size {size_bytes} must be within 1..={MAX_FLOW_BYTES}")));
        }
        let start = parse_seconds_as_hpcc(f[5])
            .map_err(|why| err(format!("start {} is not a time in seconds: {why}", word(f[5]))))?;
        flows.push((line, FlowSpec { src, dst, size_bytes, start: Nanos(start), priority, dport }));
    }
    if flows.len() != count {
        return Err(LineError { line: ln, why: format!("announces {count} flows but the file has {}", flows.len()) });
    }
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecn_datasets::workloads::builtin_cdf;

    #[test]
    fn builtin_cdf_means_match_reference() {
        // REFERENCE.md §4: web search 1.71 MB, FB Hadoop 120 KB, AliStorage 41 KB, GoogleRPC 2.9 KB.
        let check = |name: &str, mean: f64, tol: f64| {
            let c = Cdf::parse(builtin_cdf(name).unwrap().text).unwrap();
            assert!((c.mean() - mean).abs() / mean < tol, "{name}: {}", c.mean());
        };
        check("websearch", 1.71e6, 0.05);
        check("hadoop", 120e3, 0.15);
        check("alistorage", 41e3, 0.15);
        check("googlerpc", 2.9e3, 0.15);
    }

    #[test]
    fn sampled_mean_matches_analytic_mean() {
        let c = Cdf::parse(builtin_cdf("websearch").unwrap().text).unwrap();
        let mut rng = Rng::new(3, 0);
        let n = 200_000;
        let m: f64 = (0..n).map(|_| c.sample(&mut rng) as f64).sum::<f64>() / n as f64;
        assert!((m - c.mean()).abs() / c.mean() < 0.02, "{m} vs {}", c.mean());
    }

    /// A file whose first percentage is above 0 puts that share at the first size, in the
    /// mean as in the draws, so that the offered load is the one asked for.
    #[test]
    fn a_first_share_above_zero_is_a_point_mass_in_mean_and_samples() {
        let c = Cdf::parse("1000000 50\n2000000 100\n").unwrap();
        assert_eq!(c.mean(), 1_250_000.0);
        let mut rng = Rng::new(5, 0);
        let n = 200_000;
        let draws: Vec<u64> = (0..n).map(|_| c.sample(&mut rng)).collect();
        let at_first = draws.iter().filter(|&&s| s == 1_000_000).count() as f64 / n as f64;
        assert!((at_first - 0.5).abs() < 0.01, "{at_first}");
        let m = draws.iter().map(|&s| s as f64).sum::<f64>() / n as f64;
        assert!((m - c.mean()).abs() / c.mean() < 0.005, "{m} vs {}", c.mean());
        // Files that start at `0 0`, as REFERENCE.md's and the built-ins do, keep their mean
        // to the bit: the trapezoids from the origin.
        let c = Cdf::parse("0 0\n1000 50\n3000 100\n").unwrap();
        assert_eq!(c.mean(), 250.0 + 1000.0);
        for builtin in ecn_datasets::workloads::BUILTIN_CDFS {
            let c = Cdf::parse(builtin.text).unwrap();
            assert_eq!(c.points[0], (0.0, 0.0), "{}", builtin.name);
            let (mut prev, mut trapezoids) = ((0.0, 0.0), 0.0);
            for &(s, p) in &c.points {
                trapezoids += (prev.0 + s) / 2.0 * (p - prev.1) / 100.0;
                prev = (s, p);
            }
            assert_eq!(c.mean().to_bits(), trapezoids.to_bits(), "{}", builtin.name);
        }
    }

    #[test]
    fn poisson_offers_the_requested_load() {
        let c = Cdf::parse(builtin_cdf("hadoop").unwrap().text).unwrap();
        let hosts: Vec<u32> = (0..16).collect();
        let mut rng = Rng::new(1, 0);
        let w = (Nanos(0), Nanos::from_millis(200));
        let f = poisson(&hosts, &c, 0.5, &[BitsPerSec::from_gbps(100); 16], w, 3, &mut rng);
        let bytes: u64 = f.iter().map(|f| f.size_bytes).sum();
        let offered = bytes as f64 * 8.0 / (16.0 * 100e9 * 0.2);
        assert!((offered - 0.5).abs() < 0.05, "offered load {offered}");
        assert!(f.iter().all(|f| f.src != f.dst && f.start < w.1));
    }

    #[test]
    fn every_host_offers_the_load_of_its_own_link() {
        let c = Cdf::parse("0 0\n2000 100\n").unwrap();
        let hosts: Vec<u32> = (0..4).collect();
        let rates = [100, 100, 25, 25].map(BitsPerSec::from_gbps);
        let mut rng = Rng::new(1, 0);
        let w = (Nanos(0), Nanos::from_millis(1));
        let f = poisson(&hosts, &c, 0.5, &rates, w, 3, &mut rng);
        for (h, bw) in hosts.iter().zip(rates) {
            let bytes: u64 = f.iter().filter(|f| f.src == *h).map(|f| f.size_bytes).sum();
            let offered = bytes as f64 * 8.0 / (bw.0 as f64 * 1e-3);
            // ~3 000 to 12 000 flows a host: within 5% of the load asked for.
            assert!((offered - 0.5).abs() < 0.025, "host {h} at {bw}: offered load {offered}");
        }
        let expected = poisson_expected_flows(&c, 0.5, &rates, w);
        assert!((f.len() as f64 / expected - 1.0).abs() < 0.02, "{} flows, {expected} expected", f.len());
    }

    #[test]
    fn incast_picks_distinct_senders() {
        let hosts: Vec<u32> = (0..16).collect();
        let mut rng = Rng::new(1, 0);
        let w = (Nanos(0), Nanos::from_millis(1));
        let pattern = Incast { fan_in: 15, flow_size: 500_000, schedule: IncastSchedule::Count(1) };
        let f = incast(&hosts, &pattern, &[BitsPerSec::from_gbps(100); 16], w, 3, &mut rng);
        assert_eq!(f.len(), 15);
        let mut srcs: Vec<u32> = f.iter().map(|f| f.src).collect();
        srcs.sort();
        srcs.dedup();
        assert_eq!(srcs.len(), 15);
        assert!(f.iter().all(|x| x.dst == f[0].dst && x.src != x.dst));
    }

    #[test]
    fn cdf_errors_name_the_line() {
        assert_eq!(Cdf::parse("0 0\n10 50\n5 60\n20 100\n").unwrap_err().line, 3);
        assert_eq!(Cdf::parse("0 0\n10 50\n").unwrap_err().line, 2);
        assert_eq!(Cdf::parse("0 0\nx 50\n").unwrap_err().line, 2);
        // A size past what a flow may hold would saturate to u64::MAX and leave no flows.
        let huge = Cdf::parse("1000 0\n99999999999999999999 100\n").unwrap_err();
        assert_eq!(huge.line, 2, "{huge}");
        assert!(Cdf::parse(&format!("1000 0\n{MAX_FLOW_BYTES} 100\n")).is_ok());
    }

    /// Starts are read as HPCC reads them: through a double, truncated to the nanosecond.
    /// 2.000024902 s is 2000024901 ns there (the double is 2.00002490199999…), as the
    /// reference's fct.txt shows; read exactly, half of ls16's flows started 1 ns late.
    #[test]
    fn flow_file_times_are_read_as_hpcc_reads_them() {
        assert_eq!(parse_seconds_as_hpcc("2.000024902"), Ok(2_000_024_901));
        assert_eq!(parse_seconds_as_hpcc("2.000006935"), Ok(2_000_006_935));
        assert_eq!(parse_seconds_as_hpcc("2"), Ok(2_000_000_000));
        assert_eq!(parse_seconds_as_hpcc("0.5"), Ok(500_000_000));
        assert_eq!(parse_seconds_as_hpcc(".5"), Ok(500_000_000));
        assert_eq!(parse_seconds_as_hpcc("+2.5"), Ok(2_500_000_000));
        assert_eq!(parse_seconds_as_hpcc("2e0"), Ok(2_000_000_000));
        assert_eq!(parse_seconds_as_hpcc("0"), Ok(0));
        for (text, why) in [
            ("x", "expected a number"),
            (".", "expected a number"),
            ("++2", "expected a number"),
            ("inf", "expected a number"),
            ("NaN", "expected a number"),
            ("-1", "cannot be negative"),
            ("18446744074", "past the latest time"),
            ("99999999999999999999", "past the latest time"),
        ] {
            let e = parse_seconds_as_hpcc(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert!(parse_seconds_as_hpcc("18446744073").is_ok());
        // Exact where a rounded product is not: 0.1 is 0.1000000000000000055…
        assert_eq!(ns_truncated(0.1), Some(100_000_000));
        assert_eq!(ns_truncated(f64::MIN_POSITIVE), Some(0));
        assert_eq!(ns_truncated(1e300), None);
        let e = parse_hpcc_flows("1\n1 8 3 100 2282913 2s\n", 20, |n| n < 16).unwrap_err();
        assert_eq!(
            (e.line, e.why.as_str()),
            (2, "start '2s' is not a time in seconds: expected a number of seconds, such as 2.000006935")
        );
        let f = parse_hpcc_flows("1\n1 8 3 100 2282913 2.000006935\n", 20, |n| n < 16).unwrap();
        assert_eq!(
            f[0],
            FlowSpec { src: 1, dst: 8, size_bytes: 2282913, start: Nanos(2_000_006_935), priority: 3, dport: 100 }
        );
        let e = parse_hpcc_flows("1\n1 18 3 100 5 2.0\n", 20, |n| n < 16).unwrap_err();
        assert_eq!(e.line, 2);
    }
}
