//! Fidelity against the HPCC ns-3 reference runs in shared/reference (README.md there).
//!
//! The `ls16` scenario was run through the reference simulator; its input files import here
//! unchanged, so the same flows run on both and the per-flow and aggregate results compare.

use ecn_datasets::FlowRecord;
use ecn_env::fabric::{AckQueue, FabricConfig, Simulator};
use ecn_env::scenario::Scenario;
use ecn_env::summary::SlowdownBuckets;
use ecn_env::units::Nanos;
use ecn_env::workload::FlowSpec;
use std::collections::HashMap;
use std::sync::OnceLock;

const LS16_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference/ls16");
const LS16_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference/ls16/config.txt");

fn read(name: &str) -> String {
    let p = format!("{LS16_DIR}/{name}");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn ls16() -> Scenario {
    Scenario::load(LS16_CONFIG, None).expect("ls16 imports")
}

/// One line of the reference `fct.txt`.
#[derive(Debug, Clone, Copy)]
struct RefFct {
    src: u32,
    dst: u32,
    sport: u16,
    size: u64,
    start_ns: u64,
    fct_ns: u64,
    standalone_ns: u64,
}

/// `fct.txt`: `sip dip sport dport size start_ns fct_ns standalone_ns`, IPs in hex `0b00XX01`.
fn reference_fcts() -> Vec<RefFct> {
    let node = |ip: &str| {
        let v = u32::from_str_radix(ip, 16).expect("hex IP");
        assert_eq!(v >> 16, 0x0b00, "{ip} is not 11.0.X.1");
        assert_eq!(v & 0xff, 1, "{ip} is not 11.0.X.1");
        (v >> 8) & 0xff
    };
    read("fct.txt")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 8, "{l}");
            RefFct {
                src: node(f[0]),
                dst: node(f[1]),
                sport: f[2].parse().unwrap(),
                size: f[4].parse().unwrap(),
                start_ns: f[5].parse().unwrap(),
                fct_ns: f[6].parse().unwrap(),
                standalone_ns: f[7].parse().unwrap(),
            }
        })
        .collect()
}

/// `flows.txt` parsed here independently of the simulator: `(src, dst, size, start_ns)`.
fn reference_flows() -> Vec<(u32, u32, u64, u64)> {
    let text = read("flows.txt");
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let n: usize = lines.next().unwrap().trim().parse().unwrap();
    let flows: Vec<_> = lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (int, frac) = f[5].split_once('.').unwrap_or((f[5], ""));
            let frac = format!("{frac:0<9}");
            let start = int.parse::<u64>().unwrap() * 1_000_000_000 + frac[..9].parse::<u64>().unwrap();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[4].parse().unwrap(), start)
        })
        .collect();
    assert_eq!(flows.len(), n);
    flows
}

fn reference_summary() -> serde_json::Value {
    serde_json::from_str(&read("summary.json")).expect("summary.json parses")
}

fn run(cfg: FabricConfig, flows: Vec<FlowSpec>) -> Vec<FlowRecord> {
    let mut sim = Simulator::new(cfg, flows).unwrap();
    sim.set_record_telemetry(false);
    let done = sim.run(|_| {});
    let recs = sim.flow_records();
    assert!(done, "{} of {} flows incomplete", recs.iter().filter(|r| r.fct_ns.is_none()).count(), recs.len());
    recs
}

/// The ls16 run with its own configuration (ACKs in the data queue, the default), shared by
/// the tests below so it runs once per test binary.
fn ls16_records() -> &'static [FlowRecord] {
    static RECS: OnceLock<Vec<FlowRecord>> = OnceLock::new();
    RECS.get_or_init(|| {
        let sc = ls16();
        assert_eq!(sc.fabric.ack_queue, AckQueue::Data);
        run(sc.fabric, sc.flows)
    })
}

fn slowdowns(recs: &[FlowRecord]) -> SlowdownBuckets {
    SlowdownBuckets::from_records(recs)
}

/// The percentile method of the reference's summary.json: `sorted[floor(p·n)]`, no
/// interpolation (it reproduces every figure of the file from fct.txt).
fn nearest_rank(mut v: Vec<f64>, p: f64) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let k = (p / 100.0 * v.len() as f64) as usize;
    v[k.min(v.len() - 1)]
}

fn rel(ours: f64, theirs: f64) -> f64 {
    (ours - theirs) / theirs
}

// ---- 9. the import runs the same flows -----------------------------------------------------

/// The HPCC import must run exactly the reference's flows: the same (src, dst, size, start)
/// as `flows.txt`, the same source-port numbering (matching `fct.txt` by src, dst and sport
/// finds a flow of the same size and start), and the same standalone FCT for every flow.
#[test]
fn hpcc_import_runs_the_reference_flows() {
    let sc = ls16();
    assert_eq!(sc.flows.len(), 1137);
    let mut ours: Vec<_> = sc.flows.iter().map(|f| (f.src, f.dst, f.size_bytes, f.start.0)).collect();
    let mut theirs = reference_flows();
    assert_eq!(theirs.len(), 1137);
    ours.sort_unstable();
    theirs.sort_unstable();
    // flows.txt's decimal start, and the nanosecond its double truncates to (fct.txt, below).
    let same = ours.iter().zip(&theirs).all(|(a, b)| a.0 == b.0 && a.1 == b.1 && a.2 == b.2 && b.3 - a.3 <= 1);
    assert!(same, "imported flows differ from flows.txt");
    assert!(sc.flows.iter().all(|f| f.priority == 3 && f.dport == 100));

    let refs = reference_fcts();
    assert_eq!(refs.len(), 1137);
    let by_key: HashMap<(u32, u32, u16), RefFct> = refs.iter().map(|r| ((r.src, r.dst, r.sport), *r)).collect();
    assert_eq!(by_key.len(), 1137, "fct.txt keys must be unique");
    let recs = ls16_records();
    assert_eq!(recs.len(), 1137);
    let mut ideal_mismatch = Vec::new();
    for r in recs {
        let x = by_key
            .get(&(r.src, r.dst, r.sport))
            .unwrap_or_else(|| panic!("no reference flow {} -> {} sport {}", r.src, r.dst, r.sport));
        assert_eq!(r.size_bytes, x.size, "size of {r:?}");
        // Starts pass through a double in the reference and can land 1 ns early: the import
        // reads them so too (half of ls16's started 1 ns late when read exactly).
        assert_eq!(r.start_ns, x.start_ns, "start of {r:?}");
        if r.ideal_ns != x.standalone_ns {
            ideal_mismatch.push((r.src, r.dst, r.sport, r.size_bytes, r.ideal_ns, x.standalone_ns));
        }
    }
    assert!(
        ideal_mismatch.is_empty(),
        "{} ideal FCTs differ, e.g. {:?}",
        ideal_mismatch.len(),
        &ideal_mismatch[..ideal_mismatch.len().min(5)]
    );
}

// ---- 10. fidelity of the slowdown distribution ---------------------------------------------

/// Run with the reference's own configuration, the simulator must reproduce the reference's
/// slowdown distribution: every flow completes, the overall median within 15% and the overall
/// p99 within 25% of summary.json. The import's ECN maps are `baseline:hpcc-alibaba`.
#[test]
fn ls16_slowdowns_match_the_reference() {
    let sc = ls16();
    for rate in [100u64, 400] {
        let r = ecn_env::BitsPerSec::from_gbps(rate);
        assert_eq!(sc.fabric.ecn.setting_for(r), ecn_env::Baseline::HpccAlibaba.setting(r), "ECN at {rate}G");
    }
    let summary = reference_summary();
    assert_eq!(summary["ecn_policy"], "baseline:hpcc-alibaba");

    // summary.json holds the statistics of fct.txt with rank percentiles (sorted[floor(p·n)]),
    // not the linear interpolation of `SlowdownBuckets`; compare like with like.
    let refs = reference_fcts();
    let ref_sd: Vec<(u64, f64)> =
        refs.iter().map(|r| (r.size, (r.fct_ns as f64 / r.standalone_ns as f64).max(1.0))).collect();
    let ref_p50 = summary["slowdown"]["all"]["p50"].as_f64().unwrap();
    let ref_p99 = summary["slowdown"]["all"]["p99"].as_f64().unwrap();
    // (serde_json parses floats to within an ulp, hence the tolerance.)
    assert!(rel(nearest_rank(ref_sd.iter().map(|x| x.1).collect(), 50.0), ref_p50).abs() < 1e-12);
    assert!(rel(nearest_rank(ref_sd.iter().map(|x| x.1).collect(), 99.0), ref_p99).abs() < 1e-12);

    let recs = ls16_records();
    assert_eq!(recs.len(), 1137);
    assert!(recs.iter().all(|r| r.fct_ns.is_some()), "every flow must complete");
    let ours: Vec<(u64, f64)> = recs.iter().map(|r| (r.size_bytes, r.slowdown.unwrap())).collect();
    let linear = slowdowns(recs);
    // Size buckets of REFERENCE.md §4, SI units.
    let buckets = [
        ("all", 0..u64::MAX),
        ("lt_10KB", 0..10_000),
        ("10KB_100KB", 10_000..100_000),
        ("100KB_1MB", 100_000..1_000_000),
        ("ge_1MB", 1_000_000..u64::MAX),
    ];
    for (name, sizes) in buckets {
        let pick = |v: &[(u64, f64)]| v.iter().filter(|x| sizes.contains(&x.0)).map(|x| x.1).collect::<Vec<f64>>();
        let (o, t) = (pick(&ours), pick(&ref_sd));
        let r = &summary["slowdown"][name];
        let mut line = format!("ls16 {name:>10} (n {:>4}):", o.len());
        for p in [50.0, 95.0, 99.0] {
            let (a, b) = (nearest_rank(o.clone(), p), nearest_rank(t.clone(), p));
            let json = r[format!("p{p}")].as_f64().unwrap();
            assert!(rel(b, json).abs() < 1e-12, "{name} p{p}: {b} of fct.txt vs {json} in summary.json");
            line += &format!(" p{p} {a:.3} vs {b:.3} ({:+.1}%)", 100.0 * rel(a, b));
        }
        eprintln!("{line}");
        if let Some(n) = r.get("n") {
            assert_eq!(o.len() as u64, n.as_u64().unwrap(), "{name}: bucket sizes must agree");
        }
    }
    let (p50, p99) = (
        nearest_rank(ours.iter().map(|x| x.1).collect(), 50.0),
        nearest_rank(ours.iter().map(|x| x.1).collect(), 99.0),
    );
    eprintln!(
        "ls16 overall: median {p50:.3} vs {ref_p50:.3} ({:+.1}%), p99 {p99:.3} vs {ref_p99:.3} ({:+.1}%); \
         linear-interpolated (SlowdownBuckets) median {:.3}, p99 {:.3}",
        100.0 * rel(p50, ref_p50),
        100.0 * rel(p99, ref_p99),
        linear.all.p50.unwrap(),
        linear.all.p99.unwrap()
    );
    assert!(rel(p50, ref_p50).abs() <= 0.15, "median slowdown {p50:.3} vs reference {ref_p50:.3}");
    assert!(rel(p99, ref_p99).abs() <= 0.25, "p99 slowdown {p99:.3} vs reference {ref_p99:.3}");
}

// ---- 10b. one marking seed is one draw ------------------------------------------------------

/// The small-flow p99s rest on a handful of flows (the 10KB–100KB p99 on the 5 slowest of
/// 455), and the reference's figures are one run, one draw of ECN's random marking. The
/// simulator's seed changes only those draws, so compare the reference with a spread of seeds:
/// over seeds 1–8 the <100KB p99 brackets the reference's (15.04) and its mean is within 10%.
/// (Measured over seeds 1–40, `eval --seeds 40 --seed-base 1`: mean 16.08, +6.9%; 30 of 40 seeds
/// at or above the reference. Inside it, the split at 10 KB is biased: <10KB p99 +29% and
/// 10KB–100KB −28% on the mean, every seed on the same side; README "Fidelity".)
#[test]
fn ls16_small_flow_p99_over_marking_seeds_brackets_the_reference() {
    let small = |v: Vec<(u64, f64)>| nearest_rank(v.into_iter().filter(|x| x.0 < 100_000).map(|x| x.1).collect(), 99.0);
    let theirs =
        small(reference_fcts().iter().map(|r| (r.size, (r.fct_ns as f64 / r.standalone_ns as f64).max(1.0))).collect());
    assert!((theirs - 15.04).abs() < 0.01, "the reference's <100KB p99: {theirs}");
    let sc = ls16();
    let ours: Vec<f64> = (1..=8u64)
        .map(|seed| {
            let recs = if seed == 1 {
                ls16_records().to_vec()
            } else {
                let mut cfg = sc.fabric.clone();
                cfg.seed = seed;
                run(cfg, sc.flows.clone())
            };
            small(recs.iter().map(|r| (r.size_bytes, r.slowdown.unwrap())).collect())
        })
        .collect();
    let mean = ours.iter().sum::<f64>() / ours.len() as f64;
    let (lo, hi) = ours.iter().fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    eprintln!(
        "ls16 <100KB p99 over seeds 1-8: {ours:.2?}, mean {mean:.2} ({:+.1}%), reference {theirs:.2}",
        100.0 * rel(mean, theirs)
    );
    assert!(lo <= theirs && theirs <= hi, "the reference's {theirs:.2} is outside the seeds' {lo:.2}..{hi:.2}");
    assert!(rel(mean, theirs).abs() <= 0.10, "mean {mean:.2} vs reference {theirs:.2}");
}

// ---- 11. where ACKs travel -----------------------------------------------------------------

/// REFERENCE.md §2 says the HPCC simulator sends ACKs on a strict high-priority queue
/// (`ACK_HIGH_PRIO 1`). Its third.cc applies that to the hosts only; switches keep ACKs in the
/// data queue, behind data. Pin that down: with ACKs in the data queue (`AckQueue::Data`, the
/// default) ls16 is inside the fidelity bands (median 15%, p99 25%); with a strict-priority
/// control queue (`AckQueue::Control`) it is not, and its median matches clearly worse.
/// (Measured: Data +3.5% / −3.4%; Control −14.2% / −26.6%. The median alone stays just inside
/// 15%; the p99 leaves its band.)
#[test]
fn ls16_matches_only_with_acks_in_the_data_queue() {
    let summary = reference_summary();
    let (ref_p50, ref_p99) =
        (summary["slowdown"]["all"]["p50"].as_f64().unwrap(), summary["slowdown"]["all"]["p99"].as_f64().unwrap());
    let stats = |recs: &[FlowRecord]| {
        let v: Vec<f64> = recs.iter().map(|r| r.slowdown.unwrap()).collect();
        (nearest_rank(v.clone(), 50.0), nearest_rank(v, 99.0))
    };
    let (data, data99) = stats(ls16_records());
    let sc = ls16();
    let mut cfg = sc.fabric.clone();
    cfg.ack_queue = AckQueue::Control;
    let (control, control99) = stats(&run(cfg, sc.flows));
    let (ed, ec) = (rel(data, ref_p50), rel(control, ref_p50));
    eprintln!(
        "ls16 median (p99): reference {ref_p50:.3} ({ref_p99:.3}); ACKs in data queue {data:.3} ({:+.1}%) ({data99:.3}, {:+.1}%); \
         ACKs strict priority {control:.3} ({:+.1}%) ({control99:.3}, {:+.1}%)",
        100.0 * ed,
        100.0 * rel(data99, ref_p99),
        100.0 * ec,
        100.0 * rel(control99, ref_p99)
    );
    // With ACKs in the data queue the run meets the fidelity bands of the test above.
    assert!(ed.abs() <= 0.15, "with AckQueue::Data the median must be within 15%: {:+.1}%", 100.0 * ed);
    assert!(rel(data99, ref_p99).abs() <= 0.25, "with AckQueue::Data the p99 must be within 25%");
    // With strict-priority ACKs it does not: ACKs overtake queued data, feedback arrives sooner,
    // and every slowdown comes out too low.
    let control_passes = ec.abs() <= 0.15 && rel(control99, ref_p99).abs() <= 0.25;
    assert!(!control_passes, "with AckQueue::Control the run should leave the fidelity bands");
    assert!(
        ec.abs() > 2.0 * ed.abs(),
        "with AckQueue::Control the median ({:+.1}%) should match clearly worse than with Data ({:+.1}%)",
        100.0 * ec,
        100.0 * ed
    );
}

// ---- 12. single-flow calibration -----------------------------------------------------------

/// shared/reference/README.md "Single-flow calibration": lone flows on the ls16 fabric, no
/// competing traffic. FCT is serialization at every hop plus propagation, with the sender at
/// line rate; the reference's numbers pin the packet and ACK sizes and the per-hop
/// store-and-forward model. Ours must agree within 0.5%; the ideal FCT must agree exactly.
#[test]
fn single_flow_calibration() {
    let sc = ls16();
    let start = sc.fabric.window_start.0;
    // (name, src, dst, size, reference FCT, reference ideal); hosts 0-7 on leaf 16, 8-15 on 17.
    let cases = [
        ("1 MB same leaf", 0, 1, 1_000_000, 87_091u64, 88_000u64),
        ("1 MB across leaves", 0, 8, 1_000_000, 91_133, 92_040),
        ("1000 B same leaf", 0, 1, 1000, 4_174, 4_243),
        ("1 B across leaves", 0, 8, 1, 8_016, 8_203),
    ];
    let mut failures = Vec::new();
    for (name, src, dst, size, ref_fct, ref_ideal) in cases {
        let f = FlowSpec { src, dst, size_bytes: size, start: Nanos(start), priority: 3, dport: 100 };
        let r = run(sc.fabric.clone(), vec![f]).remove(0);
        let fct = r.fct_ns.unwrap();
        let err = rel(fct as f64, ref_fct as f64);
        eprintln!(
            "calibration {name:>20}: FCT {fct} ns vs {ref_fct} ({:+.3}%), ideal {} vs {ref_ideal}",
            100.0 * err,
            r.ideal_ns
        );
        if err.abs() > 0.005 || r.ideal_ns != ref_ideal {
            failures.push(format!("{name}: FCT {fct} vs {ref_fct}, ideal {} vs {ref_ideal}", r.ideal_ns));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
