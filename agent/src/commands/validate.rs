//! `ecn-tuner validate`: check telemetry files against the schema and the validation rules
//! (README "Validation and repair"), optionally repair them and write the repaired file.
//!
//! Without `--repair` the check streams (bounded memory, any file size). With `--repair` a
//! file is loaded in memory, because repair sorts rows.

use crate::error::CliError;
use crate::output::outln;
use crate::telemetry_input::ReadArgs;
use clap::Args;
use ecn_datasets::io;
use ecn_datasets::telemetry::{
    counted, load_telemetry, stream_telemetry, CounterMode, ReadOptions, RepairReport, TelemetryError,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tracing::info;

/// Arguments of `validate`.
#[derive(Args)]
pub struct ValidateArgs {
    /// Telemetry files (.parquet or .csv) to check.
    #[arg(long, value_name = "FILE", required = true, num_args = 1..)]
    telemetry: Vec<PathBuf>,
    /// How to read and check the files.
    #[command(flatten)]
    read: ReadArgs,
    /// Write the repaired telemetry here (.parquet or .csv, per-interval deltas); needs
    /// --repair and a single --telemetry file.
    #[arg(long, value_name = "FIXED.parquet|FIXED.csv", requires = "repair")]
    out: Option<PathBuf>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// What one file gave.
struct Checked {
    path: PathBuf,
    outcome: Result<Summary, TelemetryError>,
}

struct Summary {
    rows: u64,
    queues: usize,
    samples: u64,
    counters: CounterMode,
    report: RepairReport,
}

/// Check every file and report.
pub fn run(args: ValidateArgs) -> Result<(), CliError> {
    if args.out.is_some() && args.telemetry.len() != 1 {
        return Err(CliError::BadInput("--out: give exactly one --telemetry file to repair into it".into()));
    }
    if let Some(out) = &args.out {
        super::prepare_telemetry_out(out)?;
    }
    let opts = args.read.options(None)?;
    let mut checked = Vec::with_capacity(args.telemetry.len());
    for path in &args.telemetry {
        info!(file = %path.display(), repair = args.read.repair, "validating");
        checked.push(Checked { path: path.clone(), outcome: check(path, &opts, args.out.as_deref())? });
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&to_json(&checked)).expect("JSON of plain values"));
    } else {
        for c in &checked {
            if let Ok(s) = &c.outcome {
                print_summary(&c.path, s, args.read.repair);
            }
        }
    }
    let failed: Vec<String> = checked.iter().filter_map(|c| c.outcome.as_ref().err().map(|e| e.to_string())).collect();
    if failed.is_empty() {
        Ok(())
    } else if args.json {
        Err(CliError::BadInput(format!("{} of {} telemetry files have problems", failed.len(), checked.len())))
    } else {
        Err(CliError::BadInput(failed.join("\n")))
    }
}

/// Validates one file; an `Err` of the outer result is a failure to write `--out`.
fn check(path: &Path, opts: &ReadOptions, out: Option<&Path>) -> Result<Result<Summary, TelemetryError>, CliError> {
    if !opts.repair {
        let outcome = stream_telemetry(path, opts, |_, _, _, _| {}).map(|s| Summary {
            rows: s.rows,
            queues: s.queues.len(),
            samples: s.samples,
            counters: s.counters,
            report: s.report,
        });
        return Ok(outcome);
    }
    let data = match load_telemetry(path, opts) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(out) = out {
        let rows = data.to_rows();
        // A file `validate` itself would refuse ("no data rows") is not a repaired one.
        if rows.is_empty() {
            return Err(CliError::BadInput(format!(
                "{}: no sample to write to {} (each queue's rows were only cumulative baselines)",
                path.display(),
                out.display()
            )));
        }
        super::make_folder_of(out)?;
        io::write_telemetry(out, &rows).map_err(|e| CliError::Failed(e.to_string()))?;
        info!(file = %out.display(), rows = rows.len(), "wrote repaired telemetry");
    }
    Ok(Ok(Summary {
        rows: data.rows,
        queues: data.queues.len(),
        samples: data.samples() as u64,
        counters: data.counters,
        report: data.report,
    }))
}

fn print_summary(path: &Path, s: &Summary, repair: bool) {
    let mut line = format!(
        "{}: ok: {}, {}, {}, {} counters",
        path.display(),
        counted(s.rows, "row", "rows"),
        counted(s.queues as u64, "queue", "queues"),
        counted(s.samples, "sample", "samples"),
        s.counters.as_str()
    );
    if repair {
        line.push_str(&format!("; repaired: {}", s.report));
    }
    if s.report.baseline_samples > 0 {
        let baselines = counted(s.report.baseline_samples, "cumulative baseline sample", "cumulative baseline samples");
        line.push_str(&format!("; {baselines}"));
    }
    outln!("{line}");
}

fn to_json(checked: &[Checked]) -> Value {
    let files: Vec<Value> = checked
        .iter()
        .map(|c| match &c.outcome {
            Ok(s) => json!({
                "path": c.path.display().to_string(),
                "ok": true,
                "rows": s.rows,
                "queues": s.queues,
                "samples": s.samples,
                "counters": s.counters.as_str(),
                "repaired": s.report.repaired,
                "baseline_samples": s.report.baseline_samples,
            }),
            Err(e) => json!({
                "path": c.path.display().to_string(),
                "ok": false,
                "problems_total": e.total,
                "problem_counts": e.counts,
                "problems": e.problems.iter().map(|p| json!({
                    "row": p.row,
                    "column": p.column,
                    "kind": p.kind.tag(),
                    "message": p.kind.to_string(),
                })).collect::<Vec<_>>(),
            }),
        })
        .collect();
    json!({ "files": files })
}
