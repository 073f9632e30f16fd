//! Human-readable tables and the files a run leaves behind.

use crate::error::CliError;
use ecn_datasets::io;
use ecn_env::summary::{Percentiles, Summary, TailAnatomy};
use ecn_env::Simulator;
use ecn_models::staged::StagedFiles;
use std::fmt::Write;
use std::path::Path;

fn cell(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

/// The summary as a fixed-width table.
pub fn summary_table(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "scenario {}  policy {}  seed {}", s.scenario, s.policy, s.seed);
    let _ = writeln!(
        out,
        "flows {}/{} completed   simulated {:.3} ms in {:.2} s ({} events)",
        s.flows.completed,
        s.flows.total,
        s.sim_ns as f64 / 1e6,
        s.wall_seconds,
        s.events
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<12} {:>6} {:>8} {:>8} {:>8}", "slowdown", "flows", "p50", "p95", "p99");
    let b = &s.slowdown;
    // <100KB is the two small buckets together: the headline small-flow tail.
    let rows: [(&str, &Percentiles); 6] = [
        ("<10KB", &b.lt_10kb),
        ("10KB-100KB", &b.kb10_kb100),
        ("100KB-1MB", &b.kb100_mb1),
        (">=1MB", &b.ge_1mb),
        ("<100KB", &b.lt_100kb),
        ("all", &b.all),
    ];
    for (name, p) in rows {
        let _ = writeln!(out, "{:<12} {:>6} {:>8} {:>8} {:>8}", name, p.n, cell(p.p50), cell(p.p95), cell(p.p99));
    }
    if let Some(t) = &s.small_flow_tail {
        let _ = writeln!(out, "{}", tail_line(t));
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "utilization (host downlinks)  {:.1}%", s.utilization * 100.0);
    let _ = writeln!(
        out,
        "queue depth avg / p99         {:.1} KB / {:.1} KB",
        s.queue_bytes.avg / 1e3,
        s.queue_bytes.p99 / 1e3
    );
    let _ =
        writeln!(out, "PFC pause frames / paused     {} / {:.1} us", s.pfc.pause_frames, s.pfc.paused_ns as f64 / 1e3);
    let _ = writeln!(out, "ECN marks / CNPs / drops      {} / {} / {}", s.ecn_marks, s.cnps, s.drops);
    out
}

/// One line on where the <100KB p99 tail waited (see [`TailAnatomy`]).
fn tail_line(t: &TailAnatomy) -> String {
    format!(
        "<100KB p99 tail  {} flows, {:.1} us each over ideal: sender {:.0}%, forward {:.0}%, ACK {:.0}%",
        t.flows,
        t.excess_ns / 1e3,
        t.sender * 100.0,
        t.forward * 100.0,
        t.ack * 100.0
    )
}

/// The files [`write_outputs`] leaves in its folder.
pub const OUTPUT_FILES: [&str; 4] = ["flows.parquet", "fct.txt", "telemetry.parquet", "summary.json"];

/// Write flow records (Parquet and HPCC FCT text), telemetry (Parquet) and the summary
/// (JSON) into `dir`, as [`OUTPUT_FILES`]. They replace a previous run's files together or not
/// at all, so a failure part way never leaves one run's flows beside another's summary.
pub fn write_outputs(dir: &Path, sim: &mut Simulator, summary: &Summary) -> Result<(), CliError> {
    let mut staged = StagedFiles::new();
    let [flows_file, fct_file, telemetry_file, summary_file] = OUTPUT_FILES.map(|name| dir.join(name));
    let flows = sim.flow_records();
    staged.write(&flows_file, |p| io::write_flows_parquet(p, &flows)).map_err(CliError::Failed)?;
    staged.write(&fct_file, |p| io::write_flows_hpcc_fct(p, &flows)).map_err(CliError::Failed)?;
    let telemetry = sim.take_telemetry();
    staged.write(&telemetry_file, |p| io::write_telemetry_parquet(p, &telemetry)).map_err(CliError::Failed)?;
    let json = serde_json::to_string_pretty(summary).map_err(|e| CliError::Failed(e.to_string()))?;
    staged
        .write(&summary_file, |p| std::fs::write(p, json + "\n").map_err(|e| format!("{}: {e}", p.display())))
        .map_err(CliError::Failed)?;
    staged.commit().map_err(|e| CliError::Failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecn_env::scenario::Scenario;

    /// A run whose last file cannot be written leaves the previous run's files as they were,
    /// not this run's flows beside that run's summary.
    #[test]
    fn outputs_replace_the_previous_run_together_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        for name in &OUTPUT_FILES[..3] {
            std::fs::write(dir.path().join(name), "previous run").unwrap();
        }
        // Nothing can be written where the summary goes.
        std::fs::create_dir(dir.path().join("summary.json")).unwrap();
        let text = "duration = \"200us\"\ndrain = \"1ms\"\n[[workload]]\nkind = \"incast\"\nfan_in = 2\nflow_size = \"10KB\"\ncount = 1\n";
        let run = || {
            let sc = Scenario::from_toml(text, "test.toml", Path::new("."), None).unwrap();
            let mut sim = Simulator::new(sc.fabric, sc.flows).unwrap();
            sim.run(|_| {});
            let summary = Summary::new(&sim, &sc.name, "scenario", sc.seed, 0.0);
            (sim, summary)
        };
        let (mut sim, summary) = run();
        let e = write_outputs(dir.path(), &mut sim, &summary).unwrap_err();
        assert!(e.to_string().contains("summary.json"), "{e}");
        for name in &OUTPUT_FILES[..3] {
            assert_eq!(std::fs::read_to_string(dir.path().join(name)).unwrap(), "previous run", "{name}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4, "no temporary file is left");

        std::fs::remove_dir(dir.path().join("summary.json")).unwrap();
        let (mut sim, summary) = run();
        write_outputs(dir.path(), &mut sim, &summary).unwrap();
        assert!(std::fs::read_to_string(dir.path().join("summary.json")).unwrap().contains("\"scenario\""));
        assert_ne!(std::fs::read_to_string(dir.path().join("fct.txt")).unwrap(), "previous run");
    }
}
