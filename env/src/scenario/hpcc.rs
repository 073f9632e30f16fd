//! The HPCC simulator's input (the simulator REFERENCE.md §2–3 follows): a `config.txt` that
//! names its topology and flow files, imported as a scenario.

use super::{
    check_run_length, err, flow_start_too_late, parse_flow_file, parse_topology_file, NamedFile, Scenario,
    ScenarioError, SourceFiles, MAX_FLOWS,
};
use crate::dcqcn::DcqcnParams;
use crate::ecn::{EcnError, EcnSetting};
use crate::fabric::{self, EcnPlan, FabricConfig, MTU_PAYLOAD_BYTES};
use crate::text::{shown, without_bom, word};
use crate::units::{BitsPerSec, Bytes, Nanos, MAX_DURATION};
use crate::workload::FlowSpec;
use std::path::Path;

/// The keys of HPCC's `config.txt` (those its `third.cc` reads) that this import reads, some
/// only at the value the simulator models (`CC_MODE 1`, `HAS_WIN 0`, ...).
const READ_KEYS: [&str; 28] = [
    "PAUSE_TIME",
    "TOPOLOGY_FILE",
    "FLOW_FILE",
    "SIMULATOR_STOP_TIME",
    "CC_MODE",
    "ALPHA_RESUME_INTERVAL",
    "RATE_DECREASE_INTERVAL",
    "RP_TIMER",
    "EWMA_GAIN",
    "FAST_RECOVERY_TIMES",
    "CLAMP_TARGET_RATE",
    "RATE_AI",
    "RATE_HAI",
    "MIN_RATE",
    "BUFFER_SIZE",
    "PACKET_PAYLOAD_SIZE",
    "ENABLE_QCN",
    "USE_DYNAMIC_PFC_THRESHOLD",
    "HAS_WIN",
    "L2_ACK_INTERVAL",
    "L2_BACK_TO_ZERO",
    "ERROR_RATE_PER_LINK",
    "LINK_DOWN",
    "RATE_BOUND",
    "ACK_HIGH_PRIO",
    "KMIN_MAP",
    "KMAX_MAP",
    "PMAX_MAP",
];

/// Keys that take several values on their line (a map's count and entries, `LINK_DOWN`'s time and
/// link); every other key takes one.
const MULTI_VALUE_KEYS: [&str; 4] = ["KMIN_MAP", "KMAX_MAP", "PMAX_MAP", "LINK_DOWN"];

/// Keys of HPCC's `config.txt` that change nothing the simulator models, accepted and left
/// unread: output files; `DATA_RATE` and `LINK_DELAY`, which `third.cc` reads and never uses
/// (links take theirs from the topology file); `L2_CHUNK_SIZE`, which only adds ACKs when every
/// packet is ACKed already; the window's `GLOBAL_T` and `VAR_WIN` (the window is off); and the
/// knobs of the other congestion controls (HPCC, TIMELY, DCTCP, PINT).
const NO_EFFECT_KEYS: [&str; 22] = [
    "TRACE_FILE",
    "TRACE_OUTPUT_FILE",
    "FCT_OUTPUT_FILE",
    "PFC_OUTPUT_FILE",
    "ENABLE_TRACE",
    "QLEN_MON_FILE",
    "QLEN_MON_START",
    "QLEN_MON_END",
    "DATA_RATE",
    "LINK_DELAY",
    "L2_CHUNK_SIZE",
    "GLOBAL_T",
    "VAR_WIN",
    "MI_THRESH",
    "FAST_REACT",
    "U_TARGET",
    "INT_MULTI",
    "MULTI_RATE",
    "SAMPLE_FEEDBACK",
    "PINT_LOG_BASE",
    "PINT_PROB",
    "DCTCP_RATE_AI",
];

/// Keys HPCC gives no usable default: absent, `third.cc` runs with a zero timer or gain, an
/// empty rate (`RP_TIMER`, `EWMA_GAIN`, `RATE_AI`, `RATE_HAI`), ACKs nothing (`L2_ACK_INTERVAL`
/// 0), or a mode the simulator does not model (`HAS_WIN` 1, the window; `ACK_HIGH_PRIO` 0,
/// hosts' ACKs behind their data).
const REQUIRED_KEYS: [&str; 7] =
    ["RP_TIMER", "EWMA_GAIN", "RATE_AI", "RATE_HAI", "L2_ACK_INTERVAL", "HAS_WIN", "ACK_HIGH_PRIO"];

impl Scenario {
    /// Import an HPCC simulator `config.txt` with its topology and flow files.
    pub fn from_hpcc_config(
        text: &str,
        source: &str,
        dir: &Path,
        seed: Option<u64>,
    ) -> Result<Scenario, ScenarioError> {
        Scenario::parse_hpcc_config(text, source, &SourceFiles::new(dir), seed)
    }

    pub(super) fn parse_hpcc_config(
        text: &str,
        source: &str,
        files: &SourceFiles,
        seed: Option<u64>,
    ) -> Result<Scenario, ScenarioError> {
        // HPCC's own reader takes each key once, with its values: a repeat or a key alone would
        // otherwise be read as the last one, or as absent.
        let mut kv = std::collections::BTreeMap::new();
        for (i, line) in without_bom(text).lines().enumerate() {
            let mut it = line.split_whitespace();
            if let Some(k) = it.next() {
                // A key read and dropped would run the config without what it asks: a typo, or
                // a setting of the reference the simulator does not have. Named as a field only
                // when it reads as one (a JSON file or escape codes would land in the message).
                if !READ_KEYS.contains(&k) && !NO_EFFECT_KEYS.contains(&k) {
                    let plain = k.len() <= 40 && k.bytes().all(|b| b.is_ascii_graphic());
                    let (field, line) = if plain {
                        (k.to_string(), String::new())
                    } else {
                        ("key".into(), format!(" {}", shown(line)))
                    };
                    let why = format!("line {}{line}: not a key of HPCC's config.txt (a typo?)", i + 1);
                    return Err(err(source, field, why));
                }
                let values: Vec<&str> = it.collect();
                if values.is_empty() {
                    return Err(err(source, k, format!("line {}: no value", i + 1)));
                }
                // HPCC reads one value for every other key and leaves the rest of the line to be
                // misread as the next key: a unit after a number (`RP_TIMER 300 ms`, which would
                // run as 300 µs) or a path with a space.
                if values.len() > 1 && !MULTI_VALUE_KEYS.contains(&k) {
                    // The line's rest as written, carriage returns included, for `shown` to name.
                    let rest = line.trim_start().strip_prefix(k).unwrap_or(line).trim_start_matches([' ', '\t']);
                    let hint = if values[0].parse::<f64>().is_ok() {
                        "numbers take no unit here"
                    } else {
                        "HPCC would read the first word alone"
                    };
                    let why =
                        format!("line {}: one value expected, got {} ({}); {hint}", i + 1, values.len(), shown(rest));
                    return Err(err(source, k, why));
                }
                if kv.insert(k.to_string(), values).is_some() {
                    return Err(err(source, k, format!("line {}: given a second time", i + 1)));
                }
            }
        }
        if let Some(k) = REQUIRED_KEYS.iter().find(|k| !kv.contains_key(**k)) {
            return Err(err(
                source,
                *k,
                "missing; HPCC has no usable default for it (its `third.cc` would run with 0, nothing, or a mode \
                 the simulator does not model)",
            ));
        }
        let get1 = |k: &str| kv.get(k).and_then(|v| v.first().copied());
        let need = |k: &str| get1(k).ok_or_else(|| err(source, k, "missing (is this an HPCC config.txt?)"));
        // Every numeric key of config.txt is a size, a time, a count or a gain: finite and not
        // negative. NaN and negatives would otherwise turn into 0 in the `as` casts below.
        let num = |k: &str| -> Result<Option<f64>, ScenarioError> {
            let Some(v) = get1(k) else { return Ok(None) };
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
                Ok(_) => Err(err(source, k, format!("{} must be a finite number, 0 or more", word(v)))),
                Err(_) => Err(err(source, k, format!("{} is not a number", word(v)))),
            }
        };
        // The keys left unread are numbers too, but for the file names; a unit may follow
        // (`DATA_RATE 100Gb/s`, `LINK_DELAY 1us`). Refused as the read ones are: README's
        // limits hold for every number of the file.
        for k in NO_EFFECT_KEYS.iter().filter(|k| !k.ends_with("_FILE")) {
            let Some(v) = get1(k) else { continue };
            let number = v.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '/');
            if !number.parse::<f64>().is_ok_and(|x| x.is_finite() && x >= 0.0) {
                return Err(err(
                    source,
                    *k,
                    format!("{} must be a finite number, 0 or more (a unit may follow)", word(v)),
                ));
            }
        }
        let whole = |k: &str| -> Result<Option<u32>, ScenarioError> {
            match num(k)? {
                Some(x) if x.fract() != 0.0 || x > f64::from(u32::MAX) => {
                    Err(err(source, k, format!("'{x}' must be a whole number below 2^32")))
                }
                x => Ok(x.map(|x| x as u32)),
            }
        };
        // A 0/1 switch: another number is no setting HPCC knows.
        let flag = |k: &str| -> Result<Option<bool>, ScenarioError> {
            match num(k)? {
                Some(v) if v != 0.0 && v != 1.0 => Err(err(source, k, format!("'{v}' must be 0 or 1"))),
                v => Ok(v.map(|v| v == 1.0)),
            }
        };
        // `v` in units of `unit` bytes (or b/s), refused rather than saturated past 2^64 − 1.
        let whole_u64 = |k: &str, v: f64, unit: f64, what: &str| -> Result<u64, ScenarioError> {
            let b = v * unit;
            if b >= 18_446_744_073_709_551_616.0 {
                return Err(err(source, k, format!("{v} is too large (the most is 2^64 − 1 {what})")));
            }
            Ok(b as u64)
        };
        let bytes = |k: &str, v: f64, unit: f64| whole_u64(k, v, unit, "bytes");
        let rate = |k: &str| -> Result<Option<BitsPerSec>, ScenarioError> {
            get1(k).map(|v| v.parse::<BitsPerSec>().map_err(|e| err(source, k, e.to_string()))).transpose()
        };
        // Compared as numbers, as HPCC reads them: `1.0` is 1.
        let expect = |k: &str, want: f64, why: &str| -> Result<(), ScenarioError> {
            match num(k)? {
                Some(v) if v != want => Err(err(source, k, format!("{v} is not supported ({why})"))),
                _ => Ok(()),
            }
        };
        expect("CC_MODE", 1.0, "only DCQCN, CC_MODE 1, is simulated")?;
        expect("HAS_WIN", 0.0, "the window is not simulated")?;
        expect("L2_ACK_INTERVAL", 1.0, "every packet is ACKed")?;
        expect("L2_BACK_TO_ZERO", 0.0, "go-back-0 is not simulated")?;
        expect("USE_DYNAMIC_PFC_THRESHOLD", 1.0, "only dynamic PFC thresholds are simulated")?;
        expect("RATE_BOUND", 1.0, "senders always pace at their DCQCN rate")?;
        // HPCC holds a pause until XON whatever its time, as the simulator does; only 0 differs:
        // every pause is then sent as a resume.
        if num("PAUSE_TIME")? == Some(0.0) {
            return Err(err(source, "PAUSE_TIME", "0 is not supported (every PFC pause would be sent as a resume)"));
        }
        expect("ACK_HIGH_PRIO", 1.0, "hosts send their ACKs before their data")?;
        // Faults the simulator does not inject: refused rather than silently run without them.
        if num("ERROR_RATE_PER_LINK")?.is_some_and(|r| r != 0.0) {
            return Err(err(
                source,
                "ERROR_RATE_PER_LINK",
                "a non-zero error rate is not supported (links are lossless)",
            ));
        }
        // `LINK_DOWN time src dst`: the reference takes a link down only at a time above 0.
        if kv.get("LINK_DOWN").and_then(|v| v.first()).is_some_and(|t| t.parse::<f64>() != Ok(0.0)) {
            return Err(err(source, "LINK_DOWN", "taking a link down is not supported (LINK_DOWN 0 0 0 turns it off)"));
        }
        // HPCC opens the files from its working directory (its run.py writes `mix/topo.txt`
        // into `mix/config.txt` and runs from above `mix/`); a config kept beside its files
        // names them from its own folder. That folder first, then the working directory.
        let beside_or_here = |k: &str| -> Result<std::path::PathBuf, ScenarioError> {
            let name = need(k)?;
            let beside = files.path(name);
            let here = Path::new(name);
            // Looked at through `files`, so that every load of the config picks the same file.
            let here_instead = !files.is_there(&beside) && here.is_relative() && files.is_there(here);
            Ok(if here_instead { here.to_path_buf() } else { beside })
        };
        let topo_path = beside_or_here("TOPOLOGY_FILE")?;
        let flow_path = beside_or_here("FLOW_FILE")?;
        // Named as the TOML form names them: the config and its key, then the file.
        let topo_file = NamedFile { source, field: "TOPOLOGY_FILE".into(), path: &topo_path };
        let flow_file = NamedFile { source, field: "FLOW_FILE".into(), path: &flow_path };
        // A relative name found nowhere was looked for in the working directory too: say so.
        let unread = |file: &NamedFile, e: std::io::Error| {
            let relative = get1(&file.field).is_some_and(|name| Path::new(name).is_relative());
            let nowhere = relative && e.kind() == std::io::ErrorKind::NotFound;
            file.error(format_args!("{e}{}", if nowhere { " (nor in the working directory)" } else { "" }))
        };
        let topo_text = files.read(&topo_path).map_err(|e| unread(&topo_file, e))?;
        let topology = parse_topology_file(&topo_text, &topo_file)?;
        let flow_text = files.read(&flow_path).map_err(|e| unread(&flow_file, e))?;
        let lined = parse_flow_file(&flow_text, &flow_file, &topology)?;
        let first_flow = lined.iter().map(|(line, f)| (f.start, *line)).min();
        let flows: Vec<FlowSpec> = lined.into_iter().map(|(_, f)| f).collect();

        let mut fabric = FabricConfig::new(topology);
        let line = fabric.topology.nic_rate();
        // An absent key takes HPCC's default (the globals of its `third.cc`), not the
        // scenario files' (REFERENCE.md §2's column): the same config runs the same there.
        let mut dc = DcqcnParams {
            alpha_resume_interval: Nanos::from_micros(55),
            rate_decrease_interval: Nanos::from_micros(4),
            fast_recovery_times: 5,
            min_rate: BitsPerSec(100_000_000),
            clamp_target_rate: false,
            ..DcqcnParams::hpcc(line)
        };
        fabric.buffer = Bytes(16 << 20);
        fabric.mtu_payload = 1000;
        // Timers in µs, at most 2^62 ns as every duration (a larger one would wrap the clock).
        let timer_us = |k: &str| -> Result<Option<Nanos>, ScenarioError> {
            let Some(v) = num(k)? else { return Ok(None) };
            let ns = (v * 1000.0).round();
            if ns > MAX_DURATION.0 as f64 {
                return Err(err(source, k, format!("{v} µs is above the most, 2^62 ns (about 146 years)")));
            }
            Ok(Some(Nanos(ns as u64)))
        };
        if let Some(t) = timer_us("ALPHA_RESUME_INTERVAL")? {
            dc.alpha_resume_interval = t;
        }
        if let Some(t) = timer_us("RATE_DECREASE_INTERVAL")? {
            dc.rate_decrease_interval = t;
        }
        if let Some(t) = timer_us("RP_TIMER")? {
            dc.rp_timer = t;
        }
        if let Some(v) = num("EWMA_GAIN")? {
            dc.ewma_gain = v;
        }
        if let Some(v) = whole("FAST_RECOVERY_TIMES")? {
            dc.fast_recovery_times = v;
        }
        if let Some(v) = flag("CLAMP_TARGET_RATE")? {
            dc.clamp_target_rate = v;
        }
        if let Some(v) = rate("RATE_AI")? {
            dc.rate_ai = v;
        }
        if let Some(v) = rate("RATE_HAI")? {
            dc.rate_hai = v;
        }
        if let Some(v) = rate("MIN_RATE")? {
            dc.min_rate = v;
        }
        dc.validate(line).map_err(|m| err(source, "dcqcn", m))?;
        fabric.dcqcn = dc;
        if let Some(v) = whole("BUFFER_SIZE")? {
            // HPCC's BUFFER_SIZE is a whole number of MiB.
            fabric.buffer = Bytes(u64::from(v) << 20);
        }
        if let Some(v) = whole("PACKET_PAYLOAD_SIZE")? {
            if !MTU_PAYLOAD_BYTES.contains(&v) {
                return Err(err(source, "PACKET_PAYLOAD_SIZE", format!("{v} must be within {MTU_PAYLOAD_BYTES:?}")));
            }
            fabric.mtu_payload = v;
        }
        // After the payload size: the headroom the buffer must hold grows with it.
        fabric::check_buffer(&fabric).map_err(|m| err(source, "BUFFER_SIZE", m))?;
        if let Some(qcn) = num("ENABLE_QCN")?.filter(|&v| v != 1.0) {
            let why = if qcn == 0.0 { "0 is not supported" } else { "must be 1" };
            return Err(err(source, "ENABLE_QCN", format!("{qcn}: {why} (ECN marking is always simulated)")));
        }
        // K maps: `n rate1 k1 rate2 k2 ...`, K in units of 1000 bytes.
        let map = |k: &str| -> Result<Vec<(u64, f64)>, ScenarioError> {
            let Some(v) = kv.get(k) else { return Ok(Vec::new()) };
            let vals: Vec<f64> = v
                .iter()
                .map(|x| x.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0))
                .collect::<Option<_>>()
                .ok_or_else(|| err(source, k, "not a list of finite numbers, 0 or more"))?;
            let Some((&count, pairs)) = vals.split_first() else { return Ok(Vec::new()) };
            if count.fract() != 0.0 || pairs.len() as f64 != 2.0 * count {
                return Err(err(
                    source,
                    k,
                    format!("{count} rate/value pairs announced, {} values follow", pairs.len()),
                ));
            }
            let entries: Vec<(u64, f64)> = pairs
                .chunks_exact(2)
                .map(|pair| Ok((whole_u64(k, pair[0], 1.0, "b/s")?, pair[1])))
                .collect::<Result<_, ScenarioError>>()?;
            // HPCC keeps the last entry for a rate given twice; a map that says two things
            // about one rate is more likely a mistake than a wish for the second.
            for (i, (rate, _)) in entries.iter().enumerate() {
                if entries[..i].iter().any(|(r, _)| r == rate) {
                    return Err(err(source, k, format!("rate {rate} is given twice")));
                }
            }
            Ok(entries)
        };
        let (kmin, kmax, pmax) = (map("KMIN_MAP")?, map("KMAX_MAP")?, map("PMAX_MAP")?);
        // KMIN_MAP's rates say which entries apply: without it the other maps would be ignored.
        if kmin.is_empty() {
            if let Some(k) =
                [("KMAX_MAP", &kmax), ("PMAX_MAP", &pmax)].iter().find_map(|(k, m)| (!m.is_empty()).then_some(*k))
            {
                return Err(err(
                    source,
                    "KMIN_MAP",
                    format!("missing, but {k} is given; the K maps apply only together"),
                ));
            }
        }
        if !kmin.is_empty() {
            // As HPCC: every switch port's speed must have its entry in each map (it asserts so;
            // the nearest speed's would silently run a 400G port at a 100G port's thresholds),
            // and entries for speeds no port has are not read.
            let topology = &fabric.topology;
            let is_switch = |n: u32| topology.nodes[n as usize].kind == crate::topology::NodeKind::Switch;
            let mut speeds: Vec<&crate::topology::Link> =
                topology.links.iter().filter(|l| is_switch(l.a) || is_switch(l.b)).collect();
            speeds.sort_by_key(|l| l.rate);
            speeds.dedup_by_key(|l| l.rate);
            let mut per_rate = Vec::new();
            for link in speeds {
                let r = link.rate.0;
                let find = |m: &Vec<(u64, f64)>, k: &str| {
                    m.iter().find(|(rr, _)| *rr == r).map(|(_, v)| *v).ok_or_else(|| {
                        err(source, k, format!("no entry for {r} b/s, the speed of the link {} - {}", link.a, link.b))
                    })
                };
                let s = EcnSetting {
                    kmin_bytes: bytes("KMIN_MAP", find(&kmin, "KMIN_MAP")?, 1000.0)?,
                    kmax_bytes: bytes("KMAX_MAP", find(&kmax, "KMAX_MAP")?, 1000.0)?,
                    pmax: find(&pmax, "PMAX_MAP")?,
                };
                s.validate().map_err(|e| {
                    let key = if matches!(e, EcnError::PmaxOutOfRange(_)) { "PMAX_MAP" } else { "KMIN_MAP" };
                    err(source, key, e.to_string())
                })?;
                per_rate.push((link.rate, s));
            }
            fabric.ecn = EcnPlan::PerRate(per_rate);
        }
        let (first, first_line) = first_flow.unwrap_or_default();
        let last = flows.iter().map(|f| f.start).max().unwrap_or_default();
        let first_end = first.0.checked_add(1).ok_or_else(|| flow_start_too_late(&flow_file, first_line, first.0))?;
        fabric.window_start = first;
        fabric.window_end = Nanos(last.0.max(first_end));
        let stop_time = num("SIMULATOR_STOP_TIME")?;
        fabric.stop_at = match stop_time {
            Some(s) if (s * 1e9) as u64 == 0 => {
                return Err(err(source, "SIMULATOR_STOP_TIME", "must be at least 1 ns (it is in seconds)"))
            }
            Some(s) => Nanos((s * 1e9) as u64),
            // HPCC's default.
            None => Nanos(3_010_000_000),
        };
        // HPCC flow files often start their flows at 2 s; a stop time copied from another
        // config would end the run before any flow, and `sim` would report nothing done.
        if fabric.stop_at <= first {
            return Err(err(
                source,
                "SIMULATOR_STOP_TIME",
                format!(
                    "{} s{}: the run would end before its first flow starts ({} s, {} line {first_line}); no flow would run",
                    fabric.stop_at.0 as f64 / 1e9,
                    if stop_time.is_none() { " (absent: HPCC's default)" } else { "" },
                    first.0 as f64 / 1e9,
                    flow_path.display()
                ),
            ));
        }
        if flows.len() > MAX_FLOWS {
            return Err(err(
                source,
                "FLOW_FILE",
                format!("{} flows, more than the {MAX_FLOWS} a run may hold", flows.len()),
            ));
        }
        // The stop time, given or HPCC's default, sets how long the run may last.
        check_run_length(source, "SIMULATOR_STOP_TIME", &fabric, &flows)?;
        let seed = seed.unwrap_or(1);
        fabric.seed = seed;
        // Named after its folder, which heads table rows: a `|` or a control character in it
        // would split them (a TOML scenario's name is refused for those; a folder is not the
        // user's to rename for a label).
        let name = Path::new(source)
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().chars().map(|c| if c.is_control() || c == '|' { '_' } else { c }).collect())
            .filter(|n: &String| !n.trim().is_empty())
            .unwrap_or_else(|| "hpcc".into());
        Ok(Scenario { name, seed, source: source.into(), fabric, flows })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `config.txt` naming the files of [`one_flow_hpcc_dir`], with `extra` lines, loaded.
    /// The keys a config must give (HPCC has no usable default), at ls16's values.
    pub(in crate::scenario) const REQUIRED: &str = "RP_TIMER 300\nEWMA_GAIN 0.00390625\nRATE_AI 20Mb/s\n\
        RATE_HAI 200Mb/s\nL2_ACK_INTERVAL 1\nHAS_WIN 0\nACK_HIGH_PRIO 1\n";

    /// `extra` from line 3, then the [`REQUIRED`] keys it does not give.
    fn one_flow_config(dir: &Path, extra: &str) -> Result<Scenario, ScenarioError> {
        let given = |line: &str| extra.lines().any(|e| e.split_whitespace().next() == line.split_whitespace().next());
        let required: String = REQUIRED.lines().filter(|l| !given(l)).map(|l| format!("{l}\n")).collect();
        let text = format!("TOPOLOGY_FILE t.txt\nFLOW_FILE f.txt\n{extra}{required}");
        Scenario::from_hpcc_config(&text, "config.txt", dir, None)
    }

    /// A scratch folder with an HPCC topology (3 hosts on one switch, `t.txt`) and a flow file
    /// of one flow starting at 2 s (`f.txt`, the flow on its line 2).
    fn one_flow_hpcc_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ecn-scenario-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let topo = "4 1 3\n3\n0 3 100Gbps 1us 0\n1 3 100Gbps 1us 0\n2 3 100Gbps 1us 0\n";
        std::fs::write(dir.join("t.txt"), topo).unwrap();
        std::fs::write(dir.join("f.txt"), "1\n0 1 3 100 10000 2.0\n").unwrap();
        dir
    }

    /// Topology and flow files saved with a byte-order mark (a Windows editor's) read as
    /// without: the first number was "not a number", with the mark invisible in the message.
    #[test]
    fn hpcc_files_with_a_byte_order_mark_read_alike() {
        let dir = one_flow_hpcc_dir("bom");
        let plain = one_flow_config(&dir, "").unwrap();
        for f in ["t.txt", "f.txt"] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            std::fs::write(dir.join(f), format!("\u{feff}{text}")).unwrap();
        }
        let bom = one_flow_config(&dir, "").unwrap();
        assert_eq!((bom.flows, bom.fabric.topology.links), (plain.flows, plain.fabric.topology.links));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// K maps apply only together: KMAX_MAP or PMAX_MAP without KMIN_MAP is refused, not
    /// ignored.
    #[test]
    fn hpcc_k_maps_without_kmin_are_refused() {
        let dir = one_flow_hpcc_dir("kmaps");
        let config = |maps: &str| one_flow_config(&dir, maps);
        let kmax = "KMAX_MAP 1 100000000000 1600\n";
        let pmax = "PMAX_MAP 1 100000000000 0.2\n";
        let kmin = "KMIN_MAP 1 100000000000 400\n";
        for maps in [format!("{kmax}{pmax}"), pmax.to_string(), format!("{kmax}KMIN_MAP 0\n")] {
            let e = config(&maps).unwrap_err();
            assert_eq!(e.field, "KMIN_MAP", "{maps}: {e}");
            assert!(e.message.contains("missing"), "{e}");
        }
        let s = config(&format!("{kmax}{pmax}{kmin}")).unwrap();
        let setting = EcnSetting::new(Bytes(400_000), Bytes(1_600_000), 0.2).unwrap();
        assert_eq!(s.fabric.ecn, EcnPlan::PerRate(vec![(BitsPerSec::from_gbps(100), setting)]));
        config("").unwrap();
        // A Pmax out of range is PMAX_MAP's fault (it used to be blamed on KMIN_MAP).
        let e = config(&format!("{kmax}PMAX_MAP 1 100000000000 1.5\n{kmin}")).unwrap_err();
        assert_eq!(e.field, "PMAX_MAP", "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Link faults the simulator does not inject are refused, not run without.
    #[test]
    fn hpcc_link_faults_are_refused() {
        let dir = one_flow_hpcc_dir("faults");
        let config = |extra: &str| one_flow_config(&dir, extra);
        config("ERROR_RATE_PER_LINK 0.0000\nLINK_DOWN 0 0 0\n").unwrap();
        config("LINK_DOWN 0 1 3\n").unwrap();
        assert_eq!(config("ERROR_RATE_PER_LINK 0.1\n").unwrap_err().field, "ERROR_RATE_PER_LINK");
        assert_eq!(config("LINK_DOWN 1 2 3\n").unwrap_err().field, "LINK_DOWN");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Timers and run lengths past 2^62 ns are refused, naming the key: summed with the clock
    /// they used to overflow it, a panic in a debug build.
    #[test]
    fn hpcc_times_past_two_to_the_62_ns_are_refused() {
        let dir = one_flow_hpcc_dir("huge-times");
        let config = |extra: &str| one_flow_config(&dir, extra);
        for key in ["RP_TIMER", "RATE_DECREASE_INTERVAL", "ALPHA_RESUME_INTERVAL"] {
            let e = config(&format!("{key} 1e17\n")).unwrap_err();
            assert_eq!(e.field, key, "{e}");
            assert!(e.message.contains("2^62 ns"), "{e}");
            config(&format!("{key} 4e15\n")).unwrap();
        }
        let e = config("SIMULATOR_STOP_TIME 1e19\n").unwrap_err();
        assert!(e.field == "SIMULATOR_STOP_TIME" && e.message.contains("2^62 ns"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Keys HPCC reads once with a value, switches that are 0 or 1, and sizes that fit 64 bits:
    /// a repeat was read as its last value, a key alone as absent, `CLAMP_TARGET_RATE 5` as on,
    /// static PFC thresholds as dynamic ones, and `KMAX_MAP ... 1e30` as 2^64 − 1 bytes.
    #[test]
    fn hpcc_keys_are_given_once_with_values_that_fit() {
        let dir = one_flow_hpcc_dir("strict-keys");
        let config = |extra: &str| one_flow_config(&dir, extra);
        let maps = |kmax: &str| {
            format!("KMIN_MAP 1 100000000000 400\nKMAX_MAP 1 100000000000 {kmax}\nPMAX_MAP 1 100000000000 0.2\n")
        };
        config(&format!("CLAMP_TARGET_RATE 1\nUSE_DYNAMIC_PFC_THRESHOLD 1\nBUFFER_SIZE 32\n{}", maps("1600"))).unwrap();
        let refused = [
            ("SIMULATOR_STOP_TIME 3\nSIMULATOR_STOP_TIME 4\n", "SIMULATOR_STOP_TIME", "line 4: given a second time"),
            ("SIMULATOR_STOP_TIME\n", "SIMULATOR_STOP_TIME", "line 3: no value"),
            ("CLAMP_TARGET_RATE 5\n", "CLAMP_TARGET_RATE", "must be 0 or 1"),
            ("USE_DYNAMIC_PFC_THRESHOLD 0\n", "USE_DYNAMIC_PFC_THRESHOLD", "only dynamic PFC thresholds"),
            ("BUFFER_SIZE 1e300\n", "BUFFER_SIZE", "below 2^32"),
            // HPCC reads a whole number of MiB (and `.5` as the next key).
            ("BUFFER_SIZE 32.5\n", "BUFFER_SIZE", "whole number"),
            (&maps("1e30"), "KMAX_MAP", "too large"),
            ("KMIN_MAP 1 1e30 400\nKMAX_MAP 1 1e30 1600\nPMAX_MAP 1 1e30 0.2\n", "KMIN_MAP", "2^64 − 1 b/s"),
            // A unit after a number ran as the number alone (300 µs); so did a second value.
            ("RP_TIMER 300 ms\n", "RP_TIMER", "line 3: one value expected, got 2 (\"300 ms\")"),
            ("BUFFER_SIZE 32 # MiB\n", "BUFFER_SIZE", "one value expected, got 3"),
            ("TOPOLOGY_FILE my topo.txt\n", "TOPOLOGY_FILE", "HPCC would read the first word alone"),
            // An unknown key is named as one, whatever values it has.
            ("KMAX_MAPS 2 100000000000 1600\n", "KMAX_MAPS", "not a key of HPCC's config.txt"),
            ("RP_TIMER 300\r1\n", "RP_TIMER", "carriage return alone"),
        ];
        for (extra, field, why) in refused {
            let e = config(extra).unwrap_err();
            assert!(e.field == field && e.message.contains(why), "{extra}: {e}");
        }
        // Switches compare as numbers, as HPCC reads them; a byte-order mark is no part of the
        // first key.
        config("CC_MODE 1.0\nHAS_WIN 0.0\nRATE_BOUND 1.0\nACK_HIGH_PRIO 01\n").unwrap();
        let bom = format!("\u{feff}TOPOLOGY_FILE t.txt\nFLOW_FILE f.txt\n{REQUIRED}");
        Scenario::from_hpcc_config(&bom, "config.txt", &dir, None).unwrap();
        // A file it names that cannot be read is named by its key, as `topology.path` is.
        let e = Scenario::from_hpcc_config(
            &format!("TOPOLOGY_FILE t.txt\nFLOW_FILE nope.txt\n{REQUIRED}"),
            "config.txt",
            &dir,
            None,
        );
        let e = e.unwrap_err();
        assert!(e.source_name == "config.txt" && e.field == "FLOW_FILE" && e.message.contains("nope.txt"), "{e}");
        assert!(e.message.ends_with("(nor in the working directory)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every key is one HPCC reads: a typo, or a setting the simulator does not model, is
    /// refused (both used to run without a word); keys that change nothing modelled are
    /// accepted; those HPCC gives no usable default are required; the others default as in
    /// HPCC's `third.cc`, not as scenario files do.
    #[test]
    fn hpcc_keys_are_read_as_hpcc_reads_them() {
        let dir = one_flow_hpcc_dir("hpcc-keys");
        let config = |extra: &str| one_flow_config(&dir, extra);
        let refused = [
            ("RP_TIMR 5\n", "RP_TIMR", "not a key of HPCC's config.txt"),
            ("PAUSE_TIME 0\n", "PAUSE_TIME", "not supported"),
            ("RATE_BOUND 0\n", "RATE_BOUND", "not supported"),
            ("ACK_HIGH_PRIO 0\n", "ACK_HIGH_PRIO", "not supported"),
            (
                "KMIN_MAP 2 100000000000 400 100000000000 500\nKMAX_MAP 1 100000000000 1600\nPMAX_MAP 1 100000000000 0.2\n",
                "KMIN_MAP",
                "rate 100000000000 is given twice",
            ),
            (
                "KMIN_MAP 1 25000000000 100\nKMAX_MAP 1 25000000000 400\nPMAX_MAP 1 25000000000 0.2\n",
                "KMIN_MAP",
                "no entry for 100000000000 b/s",
            ),
        ];
        for (extra, field, why) in refused {
            let e = config(extra).unwrap_err();
            assert!(e.field == field && e.message.contains(why), "{extra}: {e}");
        }
        for key in REQUIRED_KEYS {
            let text: String = REQUIRED.lines().filter(|l| !l.starts_with(key)).map(|l| format!("{l}\n")).collect();
            let e =
                Scenario::from_hpcc_config(&format!("TOPOLOGY_FILE t.txt\nFLOW_FILE f.txt\n{text}"), "c", &dir, None)
                    .unwrap_err();
            assert!(e.field == key && e.message.contains("missing"), "{key}: {e}");
        }
        // An entry for a speed no port has is not read, as in HPCC.
        let unused = "KMIN_MAP 2 100000000000 400 25000000000 100\nKMAX_MAP 1 100000000000 1600\n\
                      PMAX_MAP 1 100000000000 0.2\n";
        let s = config(unused).unwrap();
        assert!(matches!(&s.fabric.ecn, EcnPlan::PerRate(m) if m.len() == 1 && m[0].0 == BitsPerSec::from_gbps(100)));
        let no_effect: String = NO_EFFECT_KEYS.iter().chain(&["PAUSE_TIME"]).map(|k| format!("{k} 5\n")).collect();
        let s = config(&no_effect).unwrap();
        for bad in ["nan", "-1", "inf", "nanMb/s"] {
            let e = config(&format!("U_TARGET {bad}\n")).unwrap_err();
            assert!(e.field == "U_TARGET" && e.message.contains("finite number"), "{bad}: {e}");
        }
        config("DATA_RATE 100Gb/s\nLINK_DELAY 1us\nTRACE_FILE mix/trace.txt\n").unwrap();
        // HPCC's defaults for what is absent.
        assert_eq!(s.fabric.dcqcn.alpha_resume_interval, Nanos::from_micros(55));
        assert_eq!(s.fabric.dcqcn.fast_recovery_times, 5);
        assert_eq!(s.fabric.dcqcn.min_rate, BitsPerSec(100_000_000));
        assert_eq!(s.fabric.buffer, Bytes(16 << 20));
        assert_eq!(s.fabric.stop_at, Nanos(3_010_000_000));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stop time at or before the first flow's start is refused: the run would finish with
    /// every flow unstarted and report nothing.
    #[test]
    fn hpcc_stop_time_before_the_first_flow_is_refused() {
        let dir = one_flow_hpcc_dir("stop");
        let config = |stop: &str| one_flow_config(&dir, &format!("SIMULATOR_STOP_TIME {stop}\n"));
        for stop in ["0.5", "2.0"] {
            let e = config(stop).unwrap_err();
            assert_eq!(e.field, "SIMULATOR_STOP_TIME", "{stop}: {e}");
            assert!(e.message.contains("before its first flow starts (2 s") && e.message.contains("line 2"), "{e}");
        }
        assert_eq!(config("2.5").unwrap().fabric.stop_at, Nanos(2_500_000_000));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
