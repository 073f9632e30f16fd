//! The HPCC simulator's FCT text format, so that results compare line by line with HPCC runs.

use super::{write_atomically, IoError, HPCC_PRIORITY};
use crate::records::FlowRecord;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// HPCC's address of host `node` (11.0.X.1 for nodes below 256), as a number to print with
/// `{:08x}`. HPCC computes `0x0b000001 + (id / 256) * 0x10000 + (id % 256) * 0x100`, which is
/// the same number; ids from 65536 on would spill into the `0x0b` byte, so they get `None`.
pub fn hpcc_node_ip(node: u32) -> Option<u32> {
    (node <= 0xffff).then_some(0x0b00_0001 | (node << 8))
}

/// Inverse of [`hpcc_node_ip`]; `None` for addresses outside HPCC's host scheme.
pub fn hpcc_ip_node(ip: u32) -> Option<u32> {
    (ip & 0xff00_00ff == 0x0b00_0001).then_some((ip >> 8) & 0xffff)
}

/// Writes flows in the HPCC simulator's FCT format, one line per completed flow:
/// `sip dip sport dport size_bytes start_ns fct_ns ideal_ns`, addresses as 8 lowercase hex
/// digits (see [`hpcc_node_ip`]). Flows without an FCT are skipped, as HPCC only logs
/// completions. Priority and slowdown are not part of the format.
///
/// The file appears atomically: it is written to a temporary file of its own beside `path`
/// (`<path>.<pid>-<n>.tmp`) and renamed into place.
pub fn write_flows_hpcc_fct(path: &Path, rows: &[FlowRecord]) -> Result<(), IoError> {
    write_atomically(path, |w| {
        for (row, r) in rows.iter().enumerate() {
            let Some(fct) = r.fct_ns else { continue };
            let ip = |node: u32, column: &str| {
                hpcc_node_ip(node).ok_or_else(|| IoError::BadValue {
                    path: path.to_path_buf(),
                    column: column.to_string(),
                    row,
                    message: format!("node {node} has no HPCC address (ids stop at 65535)"),
                })
            };
            let (sip, dip) = (ip(r.src, "src")?, ip(r.dst, "dst")?);
            writeln!(
                w,
                "{sip:08x} {dip:08x} {} {} {} {} {fct} {}",
                r.sport, r.dport, r.size_bytes, r.start_ns, r.ideal_ns
            )
            .map_err(|e| IoError::io(path, "write", e))?;
        }
        Ok(())
    })
}

/// Parses an HPCC FCT file back into flow records: `src`/`dst` from the addresses, priority
/// [`HPCC_PRIORITY`], `slowdown = max(1, fct / standalone)`. Blank lines are skipped; any other
/// malformed line is an error naming its line number.
pub fn read_flows_hpcc_fct(path: &Path) -> Result<Vec<FlowRecord>, IoError> {
    let file = File::open(path).map_err(|e| IoError::io(path, "open for reading", e))?;
    let mut out = Vec::new();
    for (idx, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| IoError::io(path, "read", e))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| IoError::BadLine { path: path.to_path_buf(), line: idx + 1, message };
        out.push(parse_hpcc_fct_line(&line).map_err(bad)?);
    }
    Ok(out)
}

fn parse_hpcc_fct_line(line: &str) -> Result<FlowRecord, String> {
    const FIELDS: [&str; 8] = ["sip", "dip", "sport", "dport", "size", "start_ns", "fct_ns", "standalone_ns"];
    let parts: Vec<&str> = line.split_whitespace().collect();
    if parts.len() != FIELDS.len() {
        return Err(format!("expected {} fields ({}), found {}", FIELDS.len(), FIELDS.join(" "), parts.len()));
    }
    let node = |i: usize| -> Result<u32, String> {
        let ip = u32::from_str_radix(parts[i], 16)
            .map_err(|_| format!("{} `{}` is not an 8-hex-digit address", FIELDS[i], parts[i]))?;
        hpcc_ip_node(ip).ok_or_else(|| format!("{} `{}` is not an HPCC host address 11.0.X.1", FIELDS[i], parts[i]))
    };
    fn num<T: std::str::FromStr>(parts: &[&str], i: usize) -> Result<T, String> {
        parts[i].parse().map_err(|_| format!("{} `{}` is not a valid number", FIELDS[i], parts[i]))
    }
    let fct: u64 = num(&parts, 6)?;
    let ideal: u64 = num(&parts, 7)?;
    if ideal == 0 {
        return Err("standalone_ns is 0, so the slowdown is undefined".to_string());
    }
    Ok(FlowRecord {
        src: node(0)?,
        dst: node(1)?,
        sport: num(&parts, 2)?,
        dport: num(&parts, 3)?,
        priority: HPCC_PRIORITY,
        size_bytes: num(&parts, 4)?,
        start_ns: num(&parts, 5)?,
        fct_ns: Some(fct),
        ideal_ns: ideal,
        // HPCC's standalone FCT is an estimate, so a lucky flow can beat it; clamping keeps
        // slowdown >= 1 as REFERENCE.md §4 defines it.
        slowdown: Some((fct as f64 / ideal as f64).max(1.0)),
        sent_ns: None,
        delivered_ns: None,
        base_rtt_ns: None,
    })
}
