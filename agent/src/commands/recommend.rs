//! `ecn-tuner recommend`: a one-shot recommendation per queue from recorded telemetry or
//! from a live actuator, as a table or one JSON document. It never writes anything.

use crate::capture::{self, Target, Until};
use crate::error::CliError;
use crate::learn::offline::QueueSeries;
use crate::learned::LearnedModel;
use crate::recommend::{self, Decision, QueueState, RecommendConfig, Recommendation};
use crate::telemetry_input;
use clap::Args;
use ecn_env::tuning::{QueueHistory, QueueInterval};
use ecn_env::{BitsPerSec, EcnSetting};
use std::path::PathBuf;

/// Arguments of `recommend`.
#[derive(Args)]
pub struct RecommendArgs {
    /// Telemetry file (.parquet) to recommend from: the latest intervals of every queue.
    #[arg(long, value_name = "FILE", required_unless_present = "target", conflicts_with = "target")]
    telemetry: Option<PathBuf>,
    /// Actuator URL to read live telemetry from (read only: nothing is written).
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// With --target: file holding the actuator's bearer token.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// With --target: CA certificate (PEM) for an https URL.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// The model: default, acc-baseline, or a .safetensors path.
    #[arg(long, value_name = "M", default_value = "default")]
    model: String,
    /// Confidence needed before a change is recommended, in (0, 1).
    #[arg(long, default_value_t = recommend::DEFAULT_MIN_CONFIDENCE)]
    min_confidence: f64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Recommend and print.
pub fn run(args: RecommendArgs) -> Result<(), CliError> {
    if !(args.min_confidence > 0.0 && args.min_confidence < 1.0) {
        return Err(CliError::BadInput(format!("--min-confidence {}: must be in (0, 1)", args.min_confidence)));
    }
    let model = LearnedModel::load(&args.model)?;
    let history = model.tuning().history;
    let (source, states) = match (&args.telemetry, &args.target) {
        (Some(path), _) => {
            let file = telemetry_input::read(path)?;
            (path.display().to_string(), states_from_series(&file.series, file.interval_ns, history))
        }
        (None, Some(url)) => {
            let target = Target::from_flags(url, args.token_file.as_deref(), args.tls_ca.as_deref())?;
            let runtime = tokio::runtime::Runtime::new().map_err(|e| CliError::Failed(format!("tokio: {e}")))?;
            // One batch more than the history: the first only anchors the counters' interval.
            let captured = runtime.block_on(capture::capture(&target, Until::Batches(history + 1)))?;
            let file = telemetry_input::group(captured.rows, url)?;
            (url.clone(), states_from_series(&file.series, file.interval_ns, history))
        }
        (None, None) => return Err(CliError::BadInput("give --telemetry FILE or --target URL".into())),
    };
    let mut cfg = RecommendConfig::for_model(&model);
    cfg.min_confidence = args.min_confidence;
    let recs = recommend::recommend(&model, &states, &cfg);
    if args.json {
        let doc = serde_json::json!({
            "source": source,
            "model": model.spec,
            "min_confidence": cfg.min_confidence,
            "queues": recs,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("plain data"));
    } else {
        print_table(&source, &model, &recs);
    }
    Ok(())
}

/// The latest unbroken stretch of every queue, as the model's input.
pub fn states_from_series(series: &[QueueSeries], interval_ns: u64, history: usize) -> Vec<QueueState> {
    series
        .iter()
        .filter_map(|s| {
            let last = s.samples.last()?;
            let start = s.segments().last().map(|r| r.start).unwrap_or(0);
            let stretch = &s.samples[start..];
            let mut h = QueueHistory::default();
            let take = stretch.len().min(history);
            for row in &stretch[stretch.len() - take..] {
                h.push(QueueInterval::from_sample(row, interval_ns), history);
            }
            Some(QueueState {
                switch: last.switch.clone(),
                port: last.port.clone(),
                queue: u32::from(last.queue),
                link: BitsPerSec(last.link_bps),
                current: EcnSetting { kmin_bytes: last.kmin_bytes, kmax_bytes: last.kmax_bytes, pmax: last.pmax },
                history: h,
                intervals: take,
            })
        })
        .collect()
}

fn kb(bytes: u64) -> String {
    format!("{:.0}KB", bytes as f64 / 1000.0)
}

fn setting(s: &EcnSetting) -> String {
    format!("{},{},{:.2}", kb(s.kmin_bytes), kb(s.kmax_bytes), s.pmax)
}

fn print_table(source: &str, model: &LearnedModel, recs: &[Recommendation]) {
    let changes = recs.iter().filter(|r| r.decision == Decision::Change).count();
    println!("recommendations from {source} with model:{} ({} queues, {changes} to change)", model.spec, recs.len());
    println!(
        "{:<24} {:<20} {:<20} {:<7} {:>5} {:>10}  reason",
        "queue", "current", "recommended", "action", "conf", "gain/int"
    );
    for r in recs {
        let gain = r
            .expected_effect
            .as_ref()
            .map(|e| format!("{:+.4}", e.reward_gain_per_interval))
            .unwrap_or_else(|| "-".into());
        let clamps = if r.clamps.is_empty() {
            String::new()
        } else {
            format!(" [clamped: {}]", r.clamps.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "))
        };
        println!(
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
        println!(
            "gain/int: the model's expected reward gain per control interval over keeping the current setting; \
             the JSON output also compares with static {} (scaled to each port's speed)",
            r.baseline.name
        );
    }
}
