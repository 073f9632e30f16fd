//! Simulator benchmark: events per second, simulated time per wall second and peak memory.
//!
//! `cargo bench -p ecn-env --bench sim` runs every scenario in a fresh child process so that
//! the peak resident set (VmHWM) belongs to that simulation alone, with no libtorch or other
//! crate loaded. Arguments after `--` pick scenarios (names or files).

use ecn_env::scenario::Scenario;
use ecn_env::Simulator;
use std::process::Command;
use std::time::Instant;

/// HPCC ns-3 wall time on the same ls16 files (shared/reference/ls16/summary.json).
const REFERENCE_LS16_SECONDS: f64 = 15.69;

fn ls16() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference/ls16/config.txt").to_string()
}

fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Child: run one scenario and print one machine-readable line.
fn child(name: &str) {
    let scenario = Scenario::load(name, None).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Simulator::new(scenario.fabric, scenario.flows).expect("valid scenario");
    let t = Instant::now();
    let complete = sim.run(|_| {});
    let wall = t.elapsed().as_secs_f64();
    let (_, done, total) = sim.flow_counts();
    println!(
        "RESULT {} {} {} {} {} {} {}",
        sim.events_processed(),
        wall,
        sim.now().0,
        peak_rss_kb().unwrap_or(0),
        done,
        total,
        complete
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1]);
        return;
    }
    // Scenario names or files only: an option here is a mistake, not something to skip.
    if let Some(flag) = args.iter().find(|a| a.starts_with('-')) {
        eprintln!("error: '{flag}': give scenario names or files, no options");
        std::process::exit(2);
    }
    let mut scenarios: Vec<String> = args;
    if scenarios.is_empty() {
        scenarios = vec!["websearch-50".into(), "leafspine-64".into()];
        if std::path::Path::new(&ls16()).exists() {
            scenarios.push(ls16());
        }
    }
    let exe = std::env::current_exe().expect("own path");
    println!(
        "{:<14} {:>7} {:>11} {:>8} {:>10} {:>14} {:>10} {:>9}",
        "scenario", "flows", "events", "wall_s", "Mevents/s", "sim_ns/wall_s", "peak_MB", "vs_ns3"
    );
    for s in scenarios {
        let out = Command::new(&exe).arg("--child").arg(&s).output().expect("spawn child");
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(line) = text.lines().find(|l| l.starts_with("RESULT ")) else {
            eprintln!("{s}: failed: {}", String::from_utf8_lossy(&out.stderr));
            std::process::exit(1);
        };
        let f: Vec<&str> = line.split_whitespace().skip(1).collect();
        let events: f64 = f[0].parse().unwrap();
        let wall: f64 = f[1].parse().unwrap();
        let sim_ns: f64 = f[2].parse().unwrap();
        let rss_mb = f[3].parse::<f64>().unwrap() / 1024.0;
        let name = if s == ls16() { "ls16".to_string() } else { s.clone() };
        // For replayed HPCC files the clock starts at the file's 2 s offset: count only the
        // simulated span that had traffic.
        let span = if name == "ls16" { sim_ns - 2e9 } else { sim_ns };
        let vs = if name == "ls16" { format!("{:.1}x", REFERENCE_LS16_SECONDS / wall) } else { "-".into() };
        println!(
            "{:<14} {:>7} {:>11} {:>8.3} {:>10.2} {:>14.3e} {:>10.1} {:>9}",
            name,
            f[5],
            events as u64,
            wall,
            events / wall / 1e6,
            span / wall,
            rss_mb,
            vs
        );
        if f[6] != "true" {
            println!("  note: {} of {} flows completed", f[4], f[5]);
        }
    }
}
