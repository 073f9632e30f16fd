//! # training
//!
//! Issue 3's training budget: the shipped default model must train in under 60 minutes on 2
//! cores. Measuring that takes the whole half hour, so this runs README "Learning"'s retraining
//! command for its first `--segments` evaluation segments (default 2: 20 000 of the 200 000
//! steps), reads each segment's wall time from the training curve, and projects the recipe:
//! the first segment (which also measures the reference baseline) plus, for each of the
//! others, the mean of the later measured ones.
//!
//! ```text
//! cargo bench -p ecn-tests --bench training [-- --segments N]
//! ```
//!
//! A short run decays exploration over its own first half, not over the recipe's first 100 000
//! steps; the simulators' work, which is most of the time, hardly depends on it (README "Speed"
//! compares a projection with a full run). `--segments 20` runs the recipe itself, into a
//! temporary directory. Under Cargo it builds `ecn-tuner` in release first. It prints figures
//! and asserts nothing about speed.

use ecn_tests::release_ecn_tuner_bin;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

/// The shipped recipe: steps, and steps between evaluations.
const RECIPE_STEPS: u64 = 200_000;
const EVAL_EVERY: u64 = 10_000;
const BUDGET_MINUTES: f64 = 60.0;

fn segments() -> Result<u64, String> {
    let args: Vec<String> = std::env::args().collect();
    let most = RECIPE_STEPS / EVAL_EVERY;
    // `--bench` is cargo's; anything else but `--segments N` is a mistake, not the default run.
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--bench" => {}
            "--segments" => {
                rest.next();
            }
            other => return Err(format!("'{other}': the only option is --segments N")),
        }
    }
    match args.iter().position(|a| a == "--segments") {
        None => Ok(2),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .filter(|n| (2..=most).contains(n))
            .ok_or_else(|| format!("--segments takes a whole number from 2 to {most}")),
    }
}

/// The cumulative wall seconds of every row of a training curve CSV.
fn curve_wall_seconds(path: &Path) -> Result<Vec<f64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header = lines.next().ok_or_else(|| format!("{}: empty", path.display()))?;
    let col = header
        .split(',')
        .position(|c| c == "wall_seconds")
        .ok_or_else(|| format!("{}: no wall_seconds column", path.display()))?;
    lines
        .enumerate()
        .map(|(row, line)| {
            line.split(',')
                .nth(col)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{}: row {}: no wall_seconds", path.display(), row + 2))
        })
        .collect()
}

fn run() -> Result<(), String> {
    let segments = segments()?;
    let bin = release_ecn_tuner_bin()?;
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let out = dir.path().join("default.safetensors");
    let steps = (segments * EVAL_EVERY).to_string();
    let eval_every = EVAL_EVERY.to_string();
    let out_arg = out.display().to_string();
    let args = [
        "train",
        "--scenario",
        "training-mix",
        "websearch-50",
        "hadoop-50",
        "mixed",
        "--steps",
        &steps,
        "--eval-every",
        &eval_every,
        "--seed",
        "1",
        "--out",
        &out_arg,
    ];
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("ecn-tuner {} ({cores} cores)", args.join(" "));
    let started = Instant::now();
    let status = Command::new(&bin).args(args).status().map_err(|e| format!("{}: {e}", bin.display()))?;
    let process_seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("ecn-tuner train failed: {status}"));
    }
    let wall = curve_wall_seconds(&dir.path().join("default.training.csv"))?;
    if wall.len() != segments as usize {
        return Err(format!("expected {segments} evaluations in the curve, found {}", wall.len()));
    }
    let lengths: Vec<f64> = wall.iter().scan(0.0, |prev, &w| Some(w - std::mem::replace(prev, w))).collect();
    let later = &lengths[1..];
    let per_segment = later.iter().sum::<f64>() / later.len() as f64;
    let recipe_segments = (RECIPE_STEPS / EVAL_EVERY) as f64;
    let projected = lengths[0] + (recipe_segments - 1.0) * per_segment;
    let shown: Vec<String> = lengths.iter().map(|s| format!("{s:.1}")).collect();
    println!("segments of {EVAL_EVERY} steps and one evaluation, s: {}", shown.join(", "));
    println!(
        "steady state: {:.0} environment steps/s, evaluation included; process wall time {process_seconds:.1} s",
        EVAL_EVERY as f64 / per_segment
    );
    println!(
        "projected {RECIPE_STEPS}-step recipe: {projected:.0} s ({:.1} min; budget {BUDGET_MINUTES:.0} min)",
        projected / 60.0
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
