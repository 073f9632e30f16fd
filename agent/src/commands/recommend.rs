//! `ecn-tuner recommend`: a one-shot recommendation per queue from recorded telemetry or
//! from a live actuator, as a table or one JSON document. It never writes anything.

use crate::capture::{self, Target, Until};
use crate::error::CliError;
use crate::learned::LearnedModel;
use crate::output::outln;
use crate::recommend::{self, Decision, QueueState, RecommendConfig, Recommendation};
use crate::telemetry_input::{self, QueueTail};
use clap::Args;
use ecn_datasets::io::TelemetryWriter;
use ecn_datasets::telemetry::counted;
use ecn_env::tuning::QueueHistory;
use ecn_env::{BitsPerSec, EcnSetting};
use std::path::PathBuf;

/// Arguments of `recommend`.
#[derive(Args)]
pub struct RecommendArgs {
    /// Telemetry file (Parquet or CSV) to recommend from: the latest intervals of every queue.
    #[arg(long, value_name = "FILE", required_unless_present = "target", conflicts_with = "target")]
    telemetry: Option<PathBuf>,
    /// Actuator URL to read live telemetry from (read only: nothing is written); `sim`, or a
    /// built-in scenario's name, reads a simulated fabric started in this process (websearch-50
    /// for `sim`) once it has run 2 ms.
    #[arg(long, value_name = "URL|sim|SCENARIO")]
    target: Option<String>,
    /// With --target sim: the scenario the simulated fabric runs, a built-in's name or a
    /// scenario file (one whose `[switch] ecn` is a setting the model trained from, say).
    /// Default: websearch-50.
    #[arg(long, value_name = "NAME|FILE", conflicts_with = "telemetry")]
    scenario: Option<String>,
    /// With --target sim: seed of the simulated fabric's first run (default: the scenario's).
    #[arg(long, conflicts_with = "telemetry")]
    seed: Option<u64>,
    /// With --target: file holding the actuator's bearer token.
    #[arg(long, value_name = "FILE", conflicts_with = "telemetry")]
    token_file: Option<PathBuf>,
    /// With --target: CA certificate (PEM) for an https URL.
    #[arg(long, value_name = "FILE", conflicts_with = "telemetry")]
    tls_ca: Option<PathBuf>,
    /// The model: a shipped model's name (default, default-v1, acc-baseline), or the path of a
    /// .safetensors file (the extension may be left out), its card beside it.
    #[arg(long, value_name = "M", default_value = "default")]
    model: String,
    /// Confidence needed before a change is recommended, in (0, 1).
    #[arg(long, default_value_t = recommend::DEFAULT_MIN_CONFIDENCE)]
    min_confidence: f64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Recommend for ports at line rates the model's card does not list (its
    /// training.link_speeds_bps). Without it, those queues are told to keep their setting.
    #[arg(long)]
    allow_untrained_rates: bool,
    /// Recommend from telemetry whose samples cover another interval than the control interval
    /// the model's card records (less than 0.8 or more than 1.25 times it). Without it, those
    /// queues are told to keep their setting.
    #[arg(long)]
    allow_untrained_intervals: bool,
    /// How to read and check the telemetry.
    #[command(flatten)]
    read: telemetry_input::ReadArgs,
}

/// `--scenario` and `--seed` configure the simulated fabric of `--target sim`. An actuator's
/// URL has no fabric to configure, and a built-in scenario's name as the target already names
/// one: both are refused rather than ignored.
fn simulated_with(mut target: Target, scenario: Option<&str>, seed: Option<u64>) -> Result<Target, CliError> {
    let Some(sim) = &mut target.simulated else {
        return match super::first_given(&[("--scenario", scenario.is_some()), ("--seed", seed.is_some())]) {
            Some(flag) => Err(CliError::BadInput(format!(
                "{flag} configures the simulated fabric of --target sim; {} is an actuator",
                target.url
            ))),
            None => Ok(target),
        };
    };
    if let Some(name) = scenario {
        if target.url != "sim" {
            return Err(CliError::BadInput(format!(
                "--target {} names a built-in scenario, and --scenario {name} another; give one",
                target.url
            )));
        }
        sim.scenario = name.to_string();
    }
    sim.seed = seed;
    Ok(target)
}

/// Recommend and print.
pub fn run(args: RecommendArgs) -> Result<(), CliError> {
    if !(args.min_confidence > 0.0 && args.min_confidence < 1.0) {
        return Err(CliError::BadInput(format!("--min-confidence {}: must be in (0, 1)", args.min_confidence)));
    }
    let model = LearnedModel::load(&args.model, "--model ")?;
    let history = model.tuning().history;
    // Two samples more than the model observes: the oldest only gives the time the next one
    // covers where that one leaves its span implicit, as the controller and offline training
    // measure it, and the newest may be a partial interval to leave out (`queue_state`).
    let keep = history + 2;
    // A queue whose setting is outside the bounds (ECN marking off, Pmax 0) is a fault to
    // recommend a fix for, not a reason to refuse the file and every other queue in it.
    let opts = args.read.options(None)?;
    let (source, tails) = match (&args.telemetry, &args.target) {
        (Some(path), _) => (path.display().to_string(), telemetry_input::tails(path, &opts, keep)?),
        (None, Some(url)) => {
            // An actuator's telemetry is per-interval deltas by its protocol: the flag could only
            // misread it (it used to fail as a misread file, exit 1).
            if args.read.counters.is_some() {
                return Err(CliError::BadInput(format!(
                    "--counters describes a telemetry file; --target {url} reads an actuator's per-interval deltas"
                )));
            }
            let target = Target::from_flags(url, args.token_file.as_deref(), args.tls_ca.as_deref())?;
            let target = simulated_with(target, args.scenario.as_deref(), args.seed)?;
            let runtime = crate::threads::async_runtime(None)?;
            // Live telemetry passes the same validation as a file.
            let dir = tempfile::tempdir().map_err(|e| {
                CliError::Failed(format!("a scratch directory for the live telemetry (in TMPDIR): {e}"))
            })?;
            let file = dir.path().join("live.parquet");
            let failed = |e: ecn_datasets::io::IoError| CliError::Failed(e.to_string());
            let mut out = TelemetryWriter::create(&file).map_err(failed)?;
            // Enough batches for the reader to infer the interval and the samples kept.
            let captured = runtime.block_on(capture::capture(&target, Until::Batches(keep + 1), &mut out))?;
            if let Some(why) = captured.cut_short {
                return Err(CliError::Failed(why));
            }
            out.finish().map_err(failed)?;
            let tails = telemetry_input::tails(&file, &opts, keep).map_err(|e| {
                CliError::Failed(format!(
                    "{url}: {}",
                    e.to_string().replace(&file.display().to_string(), "live telemetry")
                ))
            })?;
            // A simulated fabric is named by its scenario, as `--target websearch-50` is.
            let source = match &target.simulated {
                Some(sim) if args.scenario.is_some() || sim.seed.is_some() => match sim.seed {
                    Some(seed) => format!("{} (seed {seed})", sim.scenario),
                    None => sim.scenario.clone(),
                },
                _ => url.clone(),
            };
            (source, tails)
        }
        (None, None) => return Err(CliError::BadInput("give --telemetry FILE or --target URL".into())),
    };
    let mut cfg = RecommendConfig::for_model(&model);
    cfg.min_confidence = args.min_confidence;
    cfg.allow_untrained_rates = args.allow_untrained_rates;
    cfg.allow_untrained_intervals = args.allow_untrained_intervals;
    // Each switch's newest sample: recordings of two switches merged into one file may count
    // time from different starts.
    let mut newest: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for t in &tails {
        if let Some(s) = t.last {
            let n = newest.entry(&*t.key.switch).or_default();
            *n = (*n).max(s.ts_ns);
        }
    }
    let states: Vec<QueueState> = tails
        .iter()
        .filter_map(|t| queue_state(t, history, newest.get(&*t.key.switch).copied().unwrap_or(0)))
        .collect();
    // A queue with no sample has no current setting to recommend against: listed apart.
    let unsampled: Vec<String> = tails.iter().filter(|t| t.last.is_none()).map(|t| t.key.to_string()).collect();
    let recs = recommend::recommend(&model, &states, &cfg);
    if args.json {
        let doc = serde_json::json!({
            "source": source,
            "model": model.spec,
            "min_confidence": cfg.min_confidence,
            "queues": recs,
            "unsampled_queues": unsampled,
        });
        outln!("{}", serde_json::to_string_pretty(&doc).expect("plain data"));
    } else {
        print_table(&source, &model, &recs);
        if !unsampled.is_empty() {
            // Repair drops the samples it cannot trust, and may drop all of a queue's.
            let why = if args.read.repair {
                "a cumulative file's first reading of a queue is only its baseline, and --repair drops the \
                 samples it cannot trust"
            } else {
                "a cumulative file's first reading of a queue is only its baseline"
            };
            outln!(
                "no sample, so no recommendation, for {} ({why}): {}",
                counted(unsampled.len() as u64, "queue", "queues"),
                unsampled.join(", ")
            );
        }
    }
    Ok(())
}

/// A queue's newest unbroken samples (up to `history` + 2) as the model's input: each of the
/// last `history` intervals over its stated span, else the step from the sample before it;
/// where the run starts within them, its first over the nominal interval unless it states its
/// span, as offline training measures it ([`telemetry_input::intervals`]). A newest sample
/// that covers under 0.8 of the queue's interval, on the setting of the one before, is a
/// partial interval (a recording that ended mid-interval) and is left out, where enough
/// samples remain: the model would refuse it as an interval it never trained on.
fn queue_state(t: &QueueTail, history: usize, newest_ns: u64) -> Option<QueueState> {
    let last = t.last?;
    let mut h = QueueHistory::default();
    let mut partial_last_ns = None;
    // Without a known interval there is no rate to compute: the history stays empty and the
    // recommendation is to keep.
    let intervals = if let Some(interval_ns) = t.interval_ns {
        // Each interval depends only on its sample and the one before: leaving the newest out
        // leaves the others as they are.
        let mut run: Vec<_> = telemetry_input::intervals(&t.recent, interval_ns).collect();
        if let [.., before, newest] = &run[..] {
            let partial = newest.interval_ns.saturating_mul(5) < interval_ns.saturating_mul(4);
            if partial && run.len() > history && before.setting() == newest.setting() {
                partial_last_ns = Some(newest.interval_ns);
                run.pop();
            }
        }
        let timing_only = run.len().saturating_sub(history);
        let observed = run.len() - timing_only;
        for iv in run.into_iter().skip(timing_only) {
            h.push(iv, history);
        }
        observed
    } else {
        0
    };
    Some(QueueState {
        switch: t.key.switch.to_string(),
        port: t.key.port.to_string(),
        queue: u32::from(t.key.queue),
        link: BitsPerSec(last.link_bps),
        current: EcnSetting::from(&last),
        history: h,
        intervals,
        behind_ns: newest_ns.saturating_sub(last.ts_ns),
        interval_ns: t.interval_ns,
        partial_last_ns,
    })
}

/// Whole kilobytes where exact, else bytes: a clamp by a few bytes (999 B to 1 KB) must show.
/// As a `static:` policy writes it ([`EcnSetting`]'s `Display`).
fn setting(s: &EcnSetting) -> String {
    s.to_string()
}

fn print_table(source: &str, model: &LearnedModel, recs: &[Recommendation]) {
    let changes = recs.iter().filter(|r| r.decision == Decision::Change).count();
    let queues = counted(recs.len() as u64, "queue", "queues");
    outln!("recommendations from {source} with model:{} ({queues}, {changes} to change)", model.spec);
    outln!(
        "{:<24} {:<20} {:<20} {:<7} {:>5} {:>10}  reason",
        "queue",
        "current",
        "recommended",
        "action",
        "conf",
        "gain/int"
    );
    for r in recs {
        let gain = r
            .expected_effect
            .as_ref()
            .map(|e| format!("{:+.4}", e.recommended_gain_per_interval))
            .unwrap_or_else(|| "-".into());
        let clamps = if r.clamps.is_empty() {
            String::new()
        } else {
            format!(" [clamped: {}]", r.clamps.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "))
        };
        outln!(
            "{:<24} {:<20} {:<20} {:<7} {:>5.2} {:>10}  {}{clamps}",
            format!("{}/{}/{}", r.switch, r.port, r.queue),
            setting(&r.current),
            setting(&r.recommended),
            match r.decision {
                Decision::Change => "change",
                Decision::Keep => "keep",
            },
            r.confidence,
            gain,
            r.reason
        );
    }
    if let Some(r) = recs.first() {
        outln!(
            "gain/int: the model's expected reward gain per control interval of the recommended setting over \
             keeping the current one (0 for a keep; the JSON output gives the unclamped choice's too); \
             the JSON output also compares with static {} (scaled to each port's speed)",
            r.baseline.name
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecn_datasets::telemetry::{QueueKey, QueueSample};

    /// A queue's tail: samples every 100 µs on one setting, the last `last_ns` after the one
    /// before it.
    fn tail(samples: usize, last_ns: u64, last_pmax: f64) -> QueueTail {
        let mut recent = std::collections::VecDeque::new();
        let mut ts = 0;
        for i in 0..samples {
            ts += if i + 1 == samples { last_ns } else { 100_000 };
            let pmax = if i + 1 == samples { last_pmax } else { 0.2 };
            recent.push_back(QueueSample {
                ts_ns: ts,
                link_bps: 100_000_000_000,
                tx_bytes: 1_000_000,
                tx_pkts: 1_000,
                kmin_bytes: 5_000,
                kmax_bytes: 200_000,
                pmax,
                ..QueueSample::default()
            });
        }
        QueueTail { key: QueueKey::new("s", "p", 3), interval_ns: Some(100_000), last: recent.back().copied(), recent }
    }

    /// A recording that ends mid-interval (a simulated run stops when its flows are done)
    /// leaves a short last sample: the model judges the full intervals before it, as long as
    /// enough of them remain and the setting did not change in it.
    #[test]
    fn a_partial_last_interval_is_left_out_where_full_ones_remain() {
        let covered = |q: &QueueState| q.history.intervals().map(|iv| iv.interval_ns).collect::<Vec<_>>();
        let q = queue_state(&tail(5, 28_750, 0.2), 3, 0).unwrap();
        assert_eq!((q.partial_last_ns, covered(&q)), (Some(28_750), vec![100_000; 3]));
        assert_eq!(q.intervals, 3);
        // A full last interval, or a poller's jitter, is no partial one.
        for last_ns in [100_000, 85_000] {
            let q = queue_state(&tail(5, last_ns, 0.2), 3, 0).unwrap();
            assert_eq!((q.partial_last_ns, covered(&q)[0]), (None, last_ns));
        }
        // Too few samples before it to leave it out, or a new setting in it: it stays, and the
        // model's interval check then holds the queue.
        for t in [tail(3, 28_750, 0.2), tail(5, 28_750, 0.5)] {
            let q = queue_state(&t, 3, 0).unwrap();
            assert_eq!((q.partial_last_ns, covered(&q)[0]), (None, 28_750));
        }
    }

    /// The table shows a clamp of a few bytes, or of Pmax below a thousandth.
    #[test]
    fn the_table_shows_a_setting_as_it_is() {
        assert_eq!(setting(&EcnSetting { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.2 }), "5KB,200KB,0.2");
        assert_eq!(setting(&EcnSetting { kmin_bytes: 999, kmax_bytes: 80_000, pmax: 0.001 }), "999B,80KB,0.001");
        assert_eq!(setting(&EcnSetting { kmin_bytes: 2_000, kmax_bytes: 80_000, pmax: 0.0009 }), "2KB,80KB,0.000900");
        // A Pmax read from a float32 column is the decimal it was.
        assert_eq!(setting(&EcnSetting { kmin_bytes: 2_000, kmax_bytes: 80_000, pmax: 0.1f32 as f64 }), "2KB,80KB,0.1");
    }
}
