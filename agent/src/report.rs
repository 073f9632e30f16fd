//! Human-readable tables and the files a run leaves behind.

use crate::error::CliError;
use ecn_datasets::io;
use ecn_env::summary::{Percentiles, Summary, TailAnatomy};
use ecn_env::Simulator;
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
    let rows: [(&str, &Percentiles); 5] = [
        ("<10KB", &b.lt_10kb),
        ("10KB-100KB", &b.kb10_kb100),
        ("100KB-1MB", &b.kb100_mb1),
        (">=1MB", &b.ge_1mb),
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
    let _ = writeln!(out, "ECN marks / drops             {} / {}", s.ecn_marks, s.drops);
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
/// (JSON) into `dir`, as [`OUTPUT_FILES`].
pub fn write_outputs(dir: &Path, sim: &mut Simulator, summary: &Summary) -> Result<(), CliError> {
    let fail = |e: &dyn std::fmt::Display| CliError::Failed(e.to_string());
    let [flows_file, fct_file, telemetry_file, summary_file] = OUTPUT_FILES.map(|name| dir.join(name));
    let flows = sim.flow_records();
    io::write_flows_parquet(&flows_file, &flows).map_err(|e| fail(&e))?;
    io::write_flows_hpcc_fct(&fct_file, &flows).map_err(|e| fail(&e))?;
    let telemetry = sim.take_telemetry();
    io::write_telemetry_parquet(&telemetry_file, &telemetry).map_err(|e| fail(&e))?;
    let json = serde_json::to_string_pretty(summary).map_err(|e| fail(&e))?;
    std::fs::write(&summary_file, json + "\n").map_err(|e| fail(&format!("{}: {e}", summary_file.display())))?;
    Ok(())
}
