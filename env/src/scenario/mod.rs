//! Scenarios: one fabric, one traffic mix, one duration (PRODUCT.md "Scenario files").
//!
//! A scenario comes from a built-in name, a TOML file, or an HPCC simulator `config.txt`
//! (which names its topology and flow files; module `hpcc`). TOML files may start from a
//! built-in with `base = "websearch-50"` and override any field. Every problem is reported as
//! one line that names the file and the field.

use crate::dcqcn::{DcqcnParams, DcqcnVariant};
use crate::ecn::{Baseline, EcnSetting};
use crate::fabric::{self, AckQueue, EcnPlan, FabricConfig, NicWakeup, MIN_INTERVAL, MTU_PAYLOAD_BYTES};
use crate::rng::Rng;
use crate::text::word;
use crate::topology::{NodeKind, Topology, MAX_LINK_RATE, MIN_LINK_RATE};
use crate::units::{BitsPerSec, Bytes, Nanos, MAX_DURATION};
use crate::workload::{self, Cdf, FlowSpec, Incast, IncastSchedule};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod hpcc;

/// A problem with a scenario, naming the file (or built-in) and the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{source_name}: {field}: {message}")]
pub struct ScenarioError {
    /// The file path or `builtin:<name>`.
    pub source_name: String,
    /// The field (dotted path) or `line N` for syntax errors.
    pub field: String,
    /// What is wrong, on one line.
    pub message: String,
}

/// A file that the scenario `source` names in `field` (a flow, topology or CDF file).
struct NamedFile<'a> {
    source: &'a str,
    field: String,
    path: &'a Path,
}

impl NamedFile<'_> {
    /// A problem with the file, told as the scenario's: `source: field: FILE: what`, where
    /// `what` is why it cannot be read, or `line N: why`.
    fn error(&self, what: impl std::fmt::Display) -> ScenarioError {
        err(self.source, self.field.clone(), format!("{}: {what}", self.path.display()))
    }
}

fn err(source: &str, field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    let message: String = message.into();
    ScenarioError {
        source_name: source.to_string(),
        field: field.into(),
        message: message.replace('\n', " ").trim().to_string(),
    }
}

/// Built-in scenarios, as TOML text (shown by `ecn-tuner scenarios --show NAME`).
pub const BUILTIN_SCENARIOS: &[(&str, &str)] = &[
    (
        "websearch-50",
        r#"# Web search flow sizes (DCTCP paper) at 50% load on a 16-host leaf-spine.
name = "websearch-50"
[[workload]]
kind = "poisson"
cdf = "websearch"
load = 0.5
"#,
    ),
    (
        "hadoop-50",
        r#"# Facebook Hadoop flow sizes at 50% load on a 16-host leaf-spine.
name = "hadoop-50"
[[workload]]
kind = "poisson"
cdf = "hadoop"
load = 0.5
"#,
    ),
    (
        "incast-15",
        r#"# 15-to-1 incasts of 500 KB flows (5% extra load) over web search at 30% load.
name = "incast-15"
[[workload]]
kind = "poisson"
cdf = "websearch"
load = 0.3
[[workload]]
kind = "incast"
fan_in = 15
flow_size = "500KB"
load = 0.05
"#,
    ),
    (
        "mixed",
        r#"# A changing regime: web search steps from 30% to 70% load at 10 ms, Hadoop runs at 10%
# throughout, and 15-to-1 incast bursts of 500 KB arrive at 5, 12 and 17 ms.
name = "mixed"
[[workload]]
kind = "poisson"
cdf = "websearch"
load = 0.3
stop = "10ms"
[[workload]]
kind = "poisson"
cdf = "websearch"
load = 0.7
start = "10ms"
[[workload]]
kind = "poisson"
cdf = "hadoop"
load = 0.1
[[workload]]
kind = "incast"
fan_in = 15
flow_size = "500KB"
at = ["5ms", "12ms", "17ms"]
"#,
    ),
    (
        "leafspine-64",
        r#"# A 64-host leaf-spine (4 leaves x 16 hosts, 4 spines) with web search at 50% load.
name = "leafspine-64"
[topology]
kind = "leaf-spine"
leaves = 4
spines = 4
hosts_per_leaf = 16
[[workload]]
kind = "poisson"
cdf = "websearch"
load = 0.5
"#,
    ),
];

/// The most flows a scenario may start. The simulator holds every flow's state for the whole
/// run, so a load, link rate or flow-size CDF that would start far more is refused before any
/// flow is drawn (hadoop-50, the busiest built-in, starts about 16 500).
pub const MAX_FLOWS: usize = 2_000_000;

/// The most telemetry rows a run may produce (one per data queue and sample interval, about
/// 200 bytes each in memory): a long span of simulated time at a short interval would
/// otherwise fill memory. The built-in scenarios produce at most about 50 000.
pub const MAX_TELEMETRY_ROWS: u64 = 5_000_000;

/// Refuse a run whose telemetry would exceed [`MAX_TELEMETRY_ROWS`]: `fabric.stop_at` (the
/// latest the run may go) over the sample interval, times the data queues (switch ports ×
/// the priorities the flows use). `field` is what made the run that long.
fn check_run_length(source: &str, field: &str, fabric: &FabricConfig, flows: &[FlowSpec]) -> Result<(), ScenarioError> {
    // The simulator adds timers and sample intervals (each at most 2^62 ns) to the clock:
    // bounded so too, the sums never wrap.
    if fabric.stop_at > MAX_DURATION {
        let why =
            format!("the run would last until {}, past the most a run may, 2^62 ns (about 146 years)", fabric.stop_at);
        return Err(err(source, field, why));
    }
    check_telemetry_rows(fabric, flows, fabric.sample_interval)
        .map_err(|why| err(source, field, format!("{why}; shorten it or raise sample_interval")))
}

/// Why a run sampled every `interval` would produce more than [`MAX_TELEMETRY_ROWS`]
/// telemetry rows, if it would.
fn check_telemetry_rows(fabric: &FabricConfig, flows: &[FlowSpec], interval: Nanos) -> Result<(), String> {
    let topo = &fabric.topology;
    let is_switch = |n: u32| topo.nodes[n as usize].kind == NodeKind::Switch;
    let switch_ports = topo.links.iter().map(|l| u64::from(is_switch(l.a)) + u64::from(is_switch(l.b))).sum::<u64>();
    let mut priorities = [false; 8];
    for f in flows {
        priorities[usize::from(f.priority & 7)] = true;
    }
    let queues = switch_ports * priorities.iter().filter(|p| **p).count().max(1) as u64;
    let intervals = fabric.stop_at.0.div_ceil(interval.0.max(1));
    let rows = intervals.saturating_mul(queues);
    if rows <= MAX_TELEMETRY_ROWS {
        return Ok(());
    }
    Err(format!(
        "the run may last {}: {intervals} sample intervals of {interval} for {queues} queues make {rows} telemetry \
         rows, more than the {MAX_TELEMETRY_ROWS} a run may hold",
        fabric.stop_at
    ))
}

/// The largest text file a scenario may read: scenario TOML, HPCC `config.txt`, topology, CDF
/// and flow files. A flow file of [`MAX_FLOWS`] lines is about 100 MB. Without a bound, a path
/// like `/dev/zero` would be read until memory runs out.
pub const MAX_TEXT_FILE_BYTES: u64 = 256 << 20;

/// Read a whole text file, refusing one larger than [`MAX_TEXT_FILE_BYTES`].
fn read_text(path: &Path) -> std::io::Result<String> {
    ecn_datasets::bounded::read_text_at_most(path, MAX_TEXT_FILE_BYTES)
}

/// The files a scenario refers to (topology, CDF and flow files), each read from disk once and
/// kept: every load of one [`ScenarioText`] sees them as first read, as it sees the scenario's
/// own text, and a model card can record what training read.
#[derive(Debug, Default)]
struct SourceFiles {
    /// The scenario file's directory: relative paths inside it resolve against this.
    dir: PathBuf,
    /// Each path looked at, with its text, or `None` where no file was there at the first look
    /// (a CDF name then means its built-in copy, for every load).
    kept: std::sync::Mutex<Vec<(PathBuf, Option<Arc<str>>)>>,
}

impl SourceFiles {
    fn new(dir: &Path) -> SourceFiles {
        SourceFiles { dir: dir.to_path_buf(), kept: Default::default() }
    }

    /// A path named in the scenario, resolved against its directory.
    fn path(&self, name: impl AsRef<Path>) -> PathBuf {
        self.dir.join(name)
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<(PathBuf, Option<Arc<str>>)>> {
        // A panic elsewhere while holding it leaves the list whole: every push is one call.
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What was first found at `path`, if it was looked at: `Some(None)` for no file.
    fn first_look(&self, path: &Path) -> Option<Option<Arc<str>>> {
        self.kept().iter().find(|(p, _)| p == path).map(|(_, text)| text.clone())
    }

    /// Keep what was found at `path`, unless another load kept something first; what is kept.
    fn keep(&self, path: &Path, text: Option<Arc<str>>) -> Option<Arc<str>> {
        let mut kept = self.kept();
        match kept.iter().find(|(p, _)| p == path) {
            Some((_, first)) => first.clone(),
            None => {
                kept.push((path.to_path_buf(), text.clone()));
                text
            }
        }
    }

    /// Whether anything was at `path` at the first look: a file, or whatever else a user put
    /// under that name (a directory, a dangling link), which reading then refuses by name where
    /// a built-in used to stand in for it silently. A file that appears later is not read, and
    /// one removed since is still read as it was.
    fn is_there(&self, path: &Path) -> bool {
        match self.first_look(path) {
            Some(text) => text.is_some(),
            None if path.symlink_metadata().is_ok() => true,
            None => self.keep(path, None).is_some(),
        }
    }

    /// The text of `path` as first read.
    fn read(&self, path: &Path) -> std::io::Result<Arc<str>> {
        let not_there = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file when first looked for");
        match self.first_look(path) {
            Some(text) => text.ok_or_else(not_there),
            None => {
                let text: Arc<str> = read_text(path)?.into();
                self.keep(path, Some(text)).ok_or_else(not_there)
            }
        }
    }

    /// The files read, in the order first read.
    fn read_files(&self) -> Vec<(PathBuf, Arc<str>)> {
        self.kept().iter().filter_map(|(p, text)| Some((p.clone(), text.clone()?))).collect()
    }
}

/// The text of a built-in scenario.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN_SCENARIOS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

// ---- the file format ---------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    base: Option<String>,
    name: Option<String>,
    seed: Option<u64>,
    duration: Option<Nanos>,
    drain: Option<Nanos>,
    sample_interval: Option<Nanos>,
    topology: Option<TopologyFile>,
    switch: Option<SwitchFile>,
    dcqcn: Option<toml::Table>,
    nic: Option<NicFile>,
    workload: Option<Vec<toml::Table>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    kind: Option<String>,
    path: Option<String>,
    leaves: Option<u32>,
    spines: Option<u32>,
    hosts_per_leaf: Option<u32>,
    host_link: Option<BitsPerSec>,
    fabric_link: Option<BitsPerSec>,
    link_delay: Option<Nanos>,
}

impl TopologyFile {
    /// The file's `[topology]` over its base's, field by field. A file that names a different
    /// `kind` describes another fabric, so none of the base's fields carry over.
    fn merge(file: Option<TopologyFile>, base: Option<TopologyFile>) -> TopologyFile {
        let (f, b) = match (file, base) {
            (None, b) => return b.unwrap_or_default(),
            (Some(f), None) => return f,
            (Some(f), Some(b)) => (f, b),
        };
        let base_kind = b.kind.as_deref().unwrap_or("leaf-spine");
        if f.kind.as_deref().is_some_and(|k| k != base_kind) {
            return f;
        }
        TopologyFile {
            kind: f.kind.or(b.kind),
            path: f.path.or(b.path),
            leaves: f.leaves.or(b.leaves),
            spines: f.spines.or(b.spines),
            hosts_per_leaf: f.hosts_per_leaf.or(b.hosts_per_leaf),
            host_link: f.host_link.or(b.host_link),
            fabric_link: f.fabric_link.or(b.fabric_link),
            link_delay: f.link_delay.or(b.link_delay),
        }
    }

    /// The leaf-spine keys given, in the README's order.
    fn leaf_spine_keys(&self) -> Vec<&'static str> {
        [
            ("leaves", self.leaves.is_some()),
            ("spines", self.spines.is_some()),
            ("hosts_per_leaf", self.hosts_per_leaf.is_some()),
            ("host_link", self.host_link.is_some()),
            ("fabric_link", self.fabric_link.is_some()),
            ("link_delay", self.link_delay.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, given)| given.then_some(key))
        .collect()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchFile {
    buffer: Option<Bytes>,
    pfc: Option<bool>,
    /// A baseline name, or a table read by [`TableKeys`] (an untagged enum would drop unknown
    /// keys such as `pmin` without a word).
    ecn: Option<toml::Value>,
    reserve: Option<Bytes>,
    resume_offset: Option<Bytes>,
    pfc_shift: Option<u32>,
    ack_queue: Option<AckQueue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NicFile {
    mtu: Option<u32>,
    rto: Option<Nanos>,
    wakeup: Option<NicWakeup>,
}

/// One `[[workload]]`, read key by key by [`WorkloadFile::read`] so that every error names its
/// key (serde's tagged enums lose the key of a bad value).
#[derive(Debug)]
enum WorkloadFile {
    Poisson {
        cdf: String,
        load: f64,
        start: Option<Nanos>,
        stop: Option<Nanos>,
        priority: Option<u8>,
    },
    Incast {
        fan_in: u32,
        flow_size: Bytes,
        load: Option<f64>,
        count: Option<u32>,
        at: Option<Vec<Nanos>>,
        start: Option<Nanos>,
        stop: Option<Nanos>,
        priority: Option<u8>,
    },
    Flows {
        path: String,
        start: Option<Nanos>,
        stop: Option<Nanos>,
    },
}

/// The keys of one TOML table, taken one at a time with their types checked, so that an error
/// names the key (`workload[0].load`), and keys no one took are refused by name.
struct TableKeys<'a> {
    source: &'a str,
    /// Where the table is, as errors name it: `workload[0]`.
    prefix: String,
    table: toml::Table,
}

impl<'a> TableKeys<'a> {
    fn new(source: &'a str, prefix: String, table: toml::Table) -> Self {
        TableKeys { source, prefix, table }
    }

    fn field(&self, key: &str) -> String {
        format!("{}.{key}", self.prefix)
    }

    /// The value of `key`, if given.
    fn take<T: serde::de::DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(None),
            Some(v) => T::deserialize(v).map(Some).map_err(|e| err(self.source, self.field(key), e.message())),
        }
    }

    /// The value of `key`, which must be given.
    fn need<T: serde::de::DeserializeOwned>(&mut self, key: &str) -> Result<T, ScenarioError> {
        self.take(key)?.ok_or_else(|| err(self.source, self.field(key), "missing"))
    }

    /// Refuse a key that was not taken; `known` lists those that may be given.
    fn finish(self, known: &str) -> Result<(), ScenarioError> {
        match self.table.keys().next() {
            Some(k) => Err(err(self.source, self.field(k), format!("unknown key (known: {known})"))),
            None => Ok(()),
        }
    }
}

impl WorkloadFile {
    /// Read `[[workload]]` number `i`.
    fn read(source: &str, i: usize, table: toml::Table) -> Result<WorkloadFile, ScenarioError> {
        let mut keys = TableKeys::new(source, format!("workload[{i}]"), table);
        let kind: String = keys.need("kind")?;
        let w = match kind.as_str() {
            "poisson" => WorkloadFile::Poisson {
                cdf: keys.need("cdf")?,
                load: keys.need("load")?,
                start: keys.take("start")?,
                stop: keys.take("stop")?,
                priority: keys.take("priority")?,
            },
            "incast" => WorkloadFile::Incast {
                fan_in: keys.need("fan_in")?,
                flow_size: keys.need("flow_size")?,
                load: keys.take("load")?,
                count: keys.take("count")?,
                at: keys.take("at")?,
                start: keys.take("start")?,
                stop: keys.take("stop")?,
                priority: keys.take("priority")?,
            },
            "flows" => {
                WorkloadFile::Flows { path: keys.need("path")?, start: keys.take("start")?, stop: keys.take("stop")? }
            }
            other => {
                return Err(err(
                    source,
                    keys.field("kind"),
                    format!("{} is not one of poisson, incast, flows", word(other)),
                ))
            }
        };
        let known = match w {
            WorkloadFile::Poisson { .. } => "kind, cdf, load, start, stop, priority",
            WorkloadFile::Incast { .. } => "kind, fan_in, flow_size, load, count, at, start, stop, priority",
            WorkloadFile::Flows { .. } => "kind, path, start, stop",
        };
        keys.finish(known)?;
        Ok(w)
    }
}

// ---- the resolved scenario ---------------------------------------------------------------

/// A scenario ready to simulate: fabric configuration plus the flows to start.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Scenario name.
    pub name: String,
    /// Seed used for flow generation and marking.
    pub seed: u64,
    /// Where it came from (file path or `builtin:<name>`).
    pub source: String,
    /// The fabric.
    pub fabric: FabricConfig,
    /// Every flow, sorted by start time.
    pub flows: Vec<FlowSpec>,
}

/// A scenario as named on a command line, read once: a built-in's text, or a file's. Every
/// seed loaded from it sees that text, whatever happens to the file meanwhile: training loads
/// its scenarios for every episode for up to an hour, and an edit made meanwhile used to be
/// trained on while the model card recorded the file as it was at the start (or, left invalid,
/// ended the training with nothing saved). The files it refers to (CDFs, flow files,
/// topologies) are kept as first read too, by whichever load reads them first.
#[derive(Debug, Clone)]
pub struct ScenarioText {
    name: String,
    text: Arc<str>,
    kind: TextKind,
    files: Arc<SourceFiles>,
}

/// How a [`ScenarioText`] is parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TextKind {
    Builtin,
    Toml,
    HpccConfig,
}

impl ScenarioText {
    /// Read a built-in scenario by name, or a scenario file (`.toml`) or HPCC configuration
    /// (any other file) by path.
    pub fn read(name_or_path: &str) -> Result<ScenarioText, ScenarioError> {
        let (text, kind) = if let Some(text) = builtin(name_or_path) {
            (text.into(), TextKind::Builtin)
        } else {
            let path = Path::new(name_or_path);
            match std::fs::metadata(path) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let names: Vec<&str> = BUILTIN_SCENARIOS.iter().map(|(n, _)| *n).collect();
                    return Err(err(
                        name_or_path,
                        "scenario",
                        format!("no such file, and not a built-in scenario (built-ins: {})", names.join(", ")),
                    ));
                }
                // A link loop, a name too long, a folder that may not be entered: not "no such file".
                Err(e) => return Err(err(name_or_path, "file", e.to_string())),
            }
            let text = read_text(path).map_err(|e| err(name_or_path, "file", e.to_string()))?;
            let kind = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml")) {
                TextKind::Toml
            } else {
                // No config.txt line is `key = value` (one word before `=`; a path may hold
                // one after a key) or a `[table]`: such a file is TOML under another name
                // (`s.toml.txt` from an editor, `/dev/stdin`), not a config with typos.
                let toml_line = |l: &str| {
                    l.starts_with('[')
                        || l.split_once('=').is_some_and(|(k, _)| {
                            let k = k.trim();
                            !k.is_empty() && !k.contains(char::is_whitespace)
                        })
                };
                if text.lines().map(str::trim).any(|l| !l.starts_with('#') && toml_line(l)) {
                    return Err(err(
                        name_or_path,
                        "file",
                        "looks like a TOML scenario, but only a name ending in .toml is read as one (any other \
                         is read as an HPCC config.txt): rename it",
                    ));
                }
                TextKind::HpccConfig
            };
            (text.into(), kind)
        };
        let dir = Path::new(name_or_path).parent().unwrap_or(Path::new("."));
        let files = Arc::new(SourceFiles::new(dir));
        Ok(ScenarioText { name: name_or_path.to_string(), text, kind, files })
    }

    /// The name or path it was read by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The text as read: what a digest of the file should cover. `None` for a built-in.
    pub fn file_text(&self) -> Option<&str> {
        (self.kind != TextKind::Builtin).then_some(&*self.text)
    }

    /// The files its loads have read so far (topology, CDF and flow files), by path (the
    /// scenario's directory joined with the name inside it; for an HPCC config's file found only
    /// in the working directory, the name as given), with their text as read.
    pub fn referenced_files(&self) -> Vec<(PathBuf, Arc<str>)> {
        self.files.read_files()
    }

    /// The scenario, with an optional seed override.
    pub fn load(&self, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
        match self.kind {
            TextKind::Builtin => {
                let files = SourceFiles::new(Path::new("."));
                Scenario::parse_toml(&self.text, &format!("builtin:{}", self.name), &files, seed)
            }
            TextKind::Toml => Scenario::parse_toml(&self.text, &self.name, &self.files, seed),
            TextKind::HpccConfig => Scenario::parse_hpcc_config(&self.text, &self.name, &self.files, seed),
        }
    }
}

impl Scenario {
    /// Refuse to run this scenario sampled every `interval` rather than every `sample_interval`
    /// (checked when it was loaded) if that makes more than [`MAX_TELEMETRY_ROWS`] telemetry
    /// rows: a policy that decides in closed loop samples at its own control interval.
    pub fn check_sampled_every(&self, interval: Nanos) -> Result<(), ScenarioError> {
        check_telemetry_rows(&self.fabric, &self.flows, interval).map_err(|why| {
            err(
                &self.source,
                "sample_interval",
                format!(
                    "a policy deciding every {interval} samples telemetry at that interval, not every {}: {why}; \
                     shorten the run",
                    self.fabric.sample_interval
                ),
            )
        })
    }

    /// Load a scenario by built-in name or file path, with an optional seed override.
    ///
    /// Files ending in `.toml` are scenario files; any other file is read as an HPCC simulator
    /// configuration (`config.txt`). To load one scenario for many seeds, read it once with
    /// [`ScenarioText::read`].
    pub fn load(name_or_path: &str, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
        ScenarioText::read(name_or_path)?.load(seed)
    }

    /// Parse TOML scenario text. Relative paths inside resolve against `dir`.
    pub fn from_toml(text: &str, source: &str, dir: &Path, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
        Scenario::parse_toml(text, source, &SourceFiles::new(dir), seed)
    }

    fn parse_toml(text: &str, source: &str, files: &SourceFiles, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
        let file: ScenarioFile = toml::from_str(text).map_err(|e| {
            let field = e.span().map_or_else(|| "syntax".into(), |span| toml_location(text, span.start));
            err(source, field, e.message())
        })?;
        let base = match &file.base {
            Some(b) => {
                let t =
                    builtin(b).ok_or_else(|| err(source, "base", format!("{} is not a built-in scenario", word(b))))?;
                let f: ScenarioFile = toml::from_str(t).expect("built-in scenarios parse");
                Some(f)
            }
            None => None,
        };
        resolve(file, base, source, files, seed)
    }
}

/// Where in TOML `text` the byte at `offset` lies, named as the other errors name fields, with
/// its line: `switch.buffer (line 3)`, `workload[1].load (line 9)`, or `line 2` outside any key.
/// The parser's own errors give only a position, and a key is what a user looks for.
fn toml_location(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_no = text[..offset].matches('\n').count() + 1;
    let lines: Vec<&str> = text.lines().take(line_no).collect();
    let key = lines
        .last()
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with(['[', '#']));
    let (mut table, mut arrays) = (None, std::collections::BTreeMap::<&str, usize>::new());
    for l in &lines[..lines.len().saturating_sub(1)] {
        let l = l.trim();
        if let Some((name, _)) = l.strip_prefix("[[").and_then(|r| r.split_once("]]")) {
            let n = arrays.entry(name.trim()).and_modify(|n| *n += 1).or_insert(0);
            table = Some(format!("{}[{n}]", name.trim()));
        } else if let Some((name, _)) = l.strip_prefix('[').and_then(|r| r.split_once(']')) {
            table = Some(name.trim().to_string());
        }
    }
    match (table, key) {
        (Some(t), Some(k)) => format!("{t}.{k} (line {line_no})"),
        (None, Some(k)) => format!("{k} (line {line_no})"),
        _ => format!("line {line_no}"),
    }
}

/// The flows of an HPCC flow file, each with its line.
fn parse_flow_file(text: &str, file: &NamedFile, topology: &Topology) -> Result<Vec<(usize, FlowSpec)>, ScenarioError> {
    workload::parse_hpcc_flow_lines(text, topology.nodes.len(), |n| topology.nodes[n as usize].kind == NodeKind::Host)
        .map_err(|e| file.error(format_args!("line {}: {}", e.line, e.why)))
}

/// An HPCC topology file's fabric.
fn parse_topology_file(text: &str, file: &NamedFile) -> Result<Topology, ScenarioError> {
    Topology::parse_hpcc(text).map_err(|e| file.error(format_args!("topology: {e}")))
}

/// A run's arrival window ends 1 ns after its last flow starts, so a flow may not start at the
/// last instant a u64 of nanoseconds holds.
fn flow_start_too_late(file: &NamedFile, line: usize, start_ns: u64) -> ScenarioError {
    file.error(format_args!(
        "line {line}: the flow would start at {start_ns} ns, past the last instant a run can hold, 2^64 - 2 ns"
    ))
}

/// `[dcqcn]` keys that a variant may leave unset (the hpcc variant has no byte counter).
const DCQCN_OPTIONAL_KEYS: &[&str] = &["byte_counter"];

/// The fabric's shape from `[topology]`: a leaf-spine from its keys, or an HPCC topology file.
fn resolve_topology(t: TopologyFile, source: &str, files: &SourceFiles) -> Result<Topology, ScenarioError> {
    let kind = t.kind.as_deref().unwrap_or("leaf-spine");
    Ok(match kind {
        "leaf-spine" => {
            if t.path.is_some() {
                return Err(err(source, "topology.path", "only used with kind = \"hpcc\""));
            }
            let host_link = t.host_link.unwrap_or(BitsPerSec::from_gbps(100));
            let fabric_link = t.fabric_link.unwrap_or(BitsPerSec::from_gbps(400));
            for (f, v) in [("topology.host_link", host_link), ("topology.fabric_link", fabric_link)] {
                if v < MIN_LINK_RATE {
                    return Err(err(source, f, format!("{v} is below the minimum, {MIN_LINK_RATE}")));
                }
                if v > MAX_LINK_RATE {
                    return Err(err(source, f, format!("{v} is above the maximum, {MAX_LINK_RATE}")));
                }
            }
            Topology::leaf_spine(
                t.leaves.unwrap_or(2),
                t.spines.unwrap_or(2),
                t.hosts_per_leaf.unwrap_or(8),
                host_link,
                fabric_link,
                t.link_delay.unwrap_or(Nanos(1000)),
            )
            .map_err(|e| err(source, "topology", e.to_string()))?
        }
        "hpcc" => {
            // The topology file sets the fabric's shape, speeds and delays; a leaf-spine key
            // beside it would be silently ignored.
            if let Some(key) = t.leaf_spine_keys().first() {
                return Err(err(
                    source,
                    format!("topology.{key}"),
                    "only used with kind = \"leaf-spine\" (the hpcc topology file gives the fabric)",
                ));
            }
            let p = t.path.as_deref().ok_or_else(|| err(source, "topology.path", "required with kind = \"hpcc\""))?;
            let path = files.path(p);
            let file = NamedFile { source, field: "topology.path".into(), path: &path };
            let text = files.read(&path).map_err(|e| file.error(e))?;
            parse_topology_file(&text, &file)?
        }
        other => return Err(err(source, "topology.kind", format!("{} is not one of leaf-spine, hpcc", word(other)))),
    })
}

/// `[switch]` over its base's: buffer, PFC and ECN.
fn apply_switch(fabric: &mut FabricConfig, sw: SwitchFile, bsw: SwitchFile, source: &str) -> Result<(), ScenarioError> {
    if let Some(b) = sw.buffer.or(bsw.buffer) {
        fabric.buffer = b;
    }
    fabric.pfc = sw.pfc.or(bsw.pfc).unwrap_or(true);
    fabric.reserve = sw.reserve.or(bsw.reserve).unwrap_or(fabric.reserve);
    fabric.resume_offset = sw.resume_offset.or(bsw.resume_offset).unwrap_or(fabric.resume_offset);
    fabric.pfc_shift = sw.pfc_shift.or(bsw.pfc_shift).unwrap_or(fabric.pfc_shift);
    fabric.ack_queue = sw.ack_queue.or(bsw.ack_queue).unwrap_or_default();
    if fabric.pfc_shift > 16 {
        return Err(err(source, "switch.pfc_shift", "must be at most 16"));
    }
    if let Some(e) = sw.ecn.or(bsw.ecn) {
        fabric.ecn = match e {
            toml::Value::Table(table) => {
                let mut keys = TableKeys::new(source, "switch.ecn".into(), table);
                let (kmin, kmax, pmax): (Bytes, Bytes, f64) =
                    (keys.need("kmin")?, keys.need("kmax")?, keys.need("pmax")?);
                keys.finish("kmin, kmax, pmax")?;
                EcnPlan::Fixed(EcnSetting::new(kmin, kmax, pmax).map_err(|e| err(source, "switch.ecn", e.to_string()))?)
            }
            toml::Value::String(n) => {
                let b = n.strip_prefix("baseline:").unwrap_or(&n);
                EcnPlan::Baseline(Baseline::from_name(b).ok_or_else(|| {
                    let names: Vec<&str> = Baseline::ALL.iter().map(|b| b.name()).collect();
                    err(source, "switch.ecn", format!("{} is not a baseline ({})", word(&n), names.join(", ")))
                })?)
            }
            other => {
                let why = format!("{other} is neither a baseline name nor {{ kmin, kmax, pmax }}");
                return Err(err(source, "switch.ecn", why));
            }
        };
    }
    Ok(())
}

/// `[dcqcn]` (the file's keys over its base's): the variant's defaults, then every key given,
/// each checked alone so that a bad value is reported under its key.
fn resolve_dcqcn(dc_table: toml::Table, line: BitsPerSec, source: &str) -> Result<DcqcnParams, ScenarioError> {
    let variant = match dc_table.get("variant") {
        None => DcqcnVariant::Hpcc,
        Some(v) => match v.as_str() {
            Some("hpcc") => DcqcnVariant::Hpcc,
            Some("paper") => DcqcnVariant::Paper,
            _ => return Err(err(source, "dcqcn.variant", format!("{v} is not \"hpcc\" or \"paper\""))),
        },
    };
    let defaults = match variant {
        DcqcnVariant::Hpcc => DcqcnParams::hpcc(line),
        DcqcnVariant::Paper => DcqcnParams::paper(),
    };
    let defaults = toml::Table::try_from(&defaults).expect("params serialize");
    let mut merged = defaults.clone();
    for (k, v) in dc_table {
        // An optional parameter that is unset in the variant's defaults serializes to nothing.
        if !merged.contains_key(&k) && !DCQCN_OPTIONAL_KEYS.contains(&k.as_str()) {
            let known: Vec<&str> =
                defaults.keys().map(String::as_str).chain(DCQCN_OPTIONAL_KEYS.iter().copied()).collect();
            return Err(err(source, format!("dcqcn.{k}"), format!("unknown key (known: {})", known.join(", "))));
        }
        // Each key alone over the defaults, so that a bad value is reported under its key.
        let mut alone = defaults.clone();
        alone.insert(k.clone(), v.clone());
        DcqcnParams::deserialize(alone).map_err(|e| err(source, format!("dcqcn.{k}"), e.message()))?;
        merged.insert(k, v);
    }
    let params = DcqcnParams::deserialize(merged).map_err(|e| err(source, "dcqcn", e.message()))?;
    params.validate(line).map_err(|m| err(source, "dcqcn", m))?;
    Ok(params)
}

/// `[nic]` over its base's (MTU, wake-up, RTO), and the checks that need the MTU.
fn apply_nic(fabric: &mut FabricConfig, nic: NicFile, bnic: NicFile, source: &str) -> Result<(), ScenarioError> {
    fabric.mtu_payload = nic.mtu.or(bnic.mtu).unwrap_or(1000);
    if !MTU_PAYLOAD_BYTES.contains(&fabric.mtu_payload) {
        return Err(err(source, "nic.mtu", format!("must be within {MTU_PAYLOAD_BYTES:?} bytes")));
    }
    // The headroom the buffer must hold grows with the MTU: checked once the MTU is known (it
    // was checked at the default MTU, and a jumbo-frame scenario failed only when it ran).
    fabric::check_buffer(fabric).map_err(|m| err(source, "switch.buffer", m))?;
    // PFC resumes once shared use is `resume_offset` below the pause threshold (REFERENCE.md
    // §3); an offset past the buffer would keep a paused port paused for good.
    if fabric.resume_offset > fabric.buffer {
        return Err(err(
            source,
            "switch.resume_offset",
            format!("{} is larger than the buffer ({})", fabric.resume_offset, fabric.buffer),
        ));
    }
    fabric.nic_wakeup = nic.wakeup.or(bnic.wakeup).unwrap_or_default();
    // The transport timer recovers tail losses. Lossless fabrics should never need it, so it
    // is long there (a PFC storm must not trigger spurious retransmissions).
    let rto_default = if fabric.pfc { Nanos::from_millis(10) } else { Nanos::from_millis(1) };
    fabric.rto = nic.rto.or(bnic.rto).or(Some(rto_default));
    if let Some(rto) = fabric.rto.filter(|&r| r < MIN_INTERVAL) {
        return Err(err(source, "nic.rto", format!("{rto} is below the minimum, {MIN_INTERVAL}")));
    }
    Ok(())
}

/// Merge a file over its base (field by field) and build the scenario.
fn resolve(
    file: ScenarioFile,
    base: Option<ScenarioFile>,
    source: &str,
    files: &SourceFiles,
    seed_override: Option<u64>,
) -> Result<Scenario, ScenarioError> {
    let base = base.unwrap_or_default();
    let name = file.name.or(base.name).unwrap_or_else(|| {
        Path::new(source).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "scenario".into())
    });
    // The name heads table rows and names chart files: a `|` or a line break split Markdown
    // rows, an empty name made `slowdown_.png`.
    if name.trim().is_empty() || name.chars().any(|c| c.is_control() || c == '|') {
        return Err(err(source, "name", format!("{name:?}: give a name without control characters or `|`")));
    }
    let seed = seed_override.or(file.seed).or(base.seed).unwrap_or(1);
    let duration = file.duration.or(base.duration).unwrap_or(Nanos::from_millis(20));
    let drain = file.drain.or(base.drain).unwrap_or(Nanos::from_millis(30));
    let sample_interval = file.sample_interval.or(base.sample_interval).unwrap_or(Nanos::from_micros(100));
    if duration.0 == 0 {
        return Err(err(source, "duration", "must be greater than 0"));
    }
    if sample_interval < MIN_INTERVAL {
        return Err(err(source, "sample_interval", format!("{sample_interval} is below the minimum, {MIN_INTERVAL}")));
    }

    let topology = resolve_topology(TopologyFile::merge(file.topology, base.topology), source, files)?;
    let line = topology.nic_rate();
    let mut fabric = FabricConfig::new(topology);

    apply_switch(&mut fabric, file.switch.unwrap_or_default(), base.switch.unwrap_or_default(), source)?;
    let mut dc_table = base.dcqcn.unwrap_or_default();
    dc_table.extend(file.dcqcn.unwrap_or_default());
    fabric.dcqcn = resolve_dcqcn(dc_table, line, source)?;
    apply_nic(&mut fabric, file.nic.unwrap_or_default(), base.nic.unwrap_or_default(), source)?;

    // Workloads.
    let workloads = file.workload.or(base.workload).unwrap_or_default();
    if workloads.is_empty() {
        return Err(err(source, "workload", "at least one [[workload]] is required"));
    }
    let hosts = fabric.topology.hosts();
    // `load` is a fraction of each host's own link (REFERENCE.md §4), whatever the others run at.
    let host_rates = fabric.topology.host_rates();
    let mut flows = Vec::new();
    let mut window_end = duration;
    // What made the run as long as it is, for the error if it is too long.
    let mut length_field = "duration".to_string();
    let mut expected_flows = 0.0;
    let check_flow_budget = |expected: f64, field: &str| -> Result<(), ScenarioError> {
        if expected.is_finite() && expected <= MAX_FLOWS as f64 {
            return Ok(());
        }
        let about = if expected.is_finite() { format!("about {expected:.0}") } else { "unboundedly many".into() };
        Err(err(
            source,
            field,
            format!(
                "the workloads would start {about} flows, more than the {MAX_FLOWS} a run may hold; \
                 shorten the duration, lower the load or rate, or use larger flows"
            ),
        ))
    };
    for (i, table) in workloads.into_iter().enumerate() {
        let field = |f: &str| format!("workload[{i}].{f}");
        let w = WorkloadFile::read(source, i, table)?;
        let mut rng = Rng::new(seed, 1000 + i as u64);
        let window = |start: Option<Nanos>, stop: Option<Nanos>| -> Result<(Nanos, Nanos), ScenarioError> {
            let (a, b) = (start.unwrap_or(Nanos(0)), stop.unwrap_or(duration));
            if a >= b {
                return Err(err(source, field("start"), format!("start {a} must be before stop {b}")));
            }
            if b > duration {
                return Err(err(source, field("stop"), format!("stop {b} is after the scenario duration {duration}")));
            }
            Ok((a, b))
        };
        let prio = |p: Option<u8>| -> Result<u8, ScenarioError> {
            match p.unwrap_or(3) {
                p @ 1..=7 => Ok(p),
                p => Err(err(source, field("priority"), format!("{p} must be 1-7 (0 is the control queue)"))),
            }
        };
        match w {
            WorkloadFile::Poisson { cdf, load, start, stop, priority } => {
                if !(load > 0.0 && load <= 1.0) {
                    return Err(err(source, field("load"), format!("{load} must be within (0, 1]")));
                }
                let cdf = load_cdf(&cdf, files).map_err(|m| err(source, field("cdf"), m))?;
                let w = window(start, stop)?;
                expected_flows += workload::poisson_expected_flows(&cdf, load, &host_rates, w);
                check_flow_budget(expected_flows, &field("load"))?;
                flows.extend(workload::poisson(&hosts, &cdf, load, &host_rates, w, prio(priority)?, &mut rng));
            }
            WorkloadFile::Incast { fan_in, flow_size, load, count, at, start, stop, priority } => {
                if fan_in == 0 || fan_in as usize >= hosts.len() {
                    return Err(err(
                        source,
                        field("fan_in"),
                        format!("{fan_in} must be within 1..={}", hosts.len() - 1),
                    ));
                }
                if flow_size.0 == 0 || flow_size.0 > workload::MAX_FLOW_BYTES {
                    let why = format!("must be between 1 B and {} B", workload::MAX_FLOW_BYTES);
                    return Err(err(source, field("flow_size"), why));
                }
                let schedule = match (load, count, at) {
                    (Some(l), None, None) => {
                        if !(l > 0.0 && l <= 1.0) {
                            return Err(err(source, field("load"), format!("{l} must be within (0, 1]")));
                        }
                        IncastSchedule::Load(l)
                    }
                    (None, Some(0), None) => return Err(err(source, field("count"), "must be at least 1")),
                    (None, None, Some(at)) if at.is_empty() => {
                        return Err(err(source, field("at"), "must list at least one time"))
                    }
                    (None, Some(c), None) => IncastSchedule::Count(c),
                    (None, None, Some(at)) => {
                        // The times are given; a window around them would be silently ignored.
                        if let Some(key) = [("start", start), ("stop", stop)].iter().find_map(|(k, v)| v.map(|_| *k)) {
                            let why = "not used with at: the incast happens at the times listed; remove one";
                            return Err(err(source, field(key), why));
                        }
                        if let Some(t) = at.iter().find(|t| **t >= duration) {
                            return Err(err(source, field("at"), format!("{t} is not within the duration {duration}")));
                        }
                        IncastSchedule::At(at)
                    }
                    _ => return Err(err(source, format!("workload[{i}]"), "give exactly one of load, count or at")),
                };
                let w = window(start, stop)?;
                let pattern = Incast { fan_in, flow_size: flow_size.0, schedule };
                expected_flows += pattern.expected_flows(&host_rates, w);
                check_flow_budget(expected_flows, &format!("workload[{i}]"))?;
                flows.extend(workload::incast(&hosts, &pattern, &host_rates, w, prio(priority)?, &mut rng));
            }
            WorkloadFile::Flows { path, start, stop } => {
                let p = files.path(&path);
                let file = NamedFile { source, field: field("path"), path: &p };
                let text = files.read(&p).map_err(|e| file.error(e))?;
                let (lines, mut fs): (Vec<usize>, Vec<FlowSpec>) =
                    parse_flow_file(&text, &file, &fabric.topology)?.into_iter().unzip();
                // Replay keeps the file's spacing but moves its first flow to `start`
                // (HPCC files conventionally begin at 2 s).
                // `stop` cuts the replay; without it the file's flows run to their end.
                let offset = start.unwrap_or(Nanos(0));
                if offset >= duration {
                    return Err(err(source, field("start"), format!("{offset} is not within the duration {duration}")));
                }
                if let Some(stop) = stop {
                    window(Some(offset), Some(stop))?;
                }
                let first = fs.iter().map(|f| f.start).min().unwrap_or_default();
                for (f, &line) in fs.iter_mut().zip(&lines) {
                    let since_first = f.start.0 - first.0;
                    let start = since_first.checked_add(offset.0).filter(|&t| t < u64::MAX);
                    let start =
                        start.ok_or_else(|| flow_start_too_late(&file, line, since_first.saturating_add(offset.0)))?;
                    f.start = Nanos(start);
                }
                if let Some(stop) = stop {
                    fs.retain(|f| f.start < stop);
                }
                expected_flows += fs.len() as f64;
                check_flow_budget(expected_flows, &field("path"))?;
                if let Some(last) = fs.iter().map(|f| f.start).max() {
                    // Every start is below u64::MAX (checked above).
                    let end = Nanos(last.0 + 1);
                    if end > window_end {
                        window_end = end;
                        length_field = field("path");
                    }
                }
                flows.extend(fs);
            }
        }
    }
    if flows.is_empty() {
        return Err(err(source, "workload", format!("the workloads start no flow within the duration, {duration}")));
    }
    flows.sort_by_key(|f| f.start);
    fabric.window_start = Nanos(0);
    fabric.window_end = window_end;
    fabric.stop_at = Nanos(window_end.0.saturating_add(drain.0));
    fabric.sample_interval = sample_interval;
    fabric.seed = seed;
    if drain > window_end {
        // The drain makes most of the run: name it if the run is too long.
        length_field = "drain".into();
    }
    check_run_length(source, &length_field, &fabric, &flows)?;
    Ok(Scenario { name, seed, source: source.into(), fabric, flows })
}

/// A built-in CDF name, or a CDF file path (relative to the scenario's directory). A standard
/// file's name (`FbHdp_distribution.txt`) is read from disk where that file exists, an edited
/// copy perhaps, and is its built-in copy only where it does not.
fn load_cdf(name: &str, files: &SourceFiles) -> Result<Cdf, String> {
    let p: PathBuf = files.path(name);
    let a_file_name = name.contains(['.', '/', '\\']);
    if let Some(b) = ecn_datasets::workloads::builtin_cdf(name).filter(|_| !(a_file_name && files.is_there(&p))) {
        return Cdf::parse(b.text).map_err(|e| format!("built-in {name}: {e}"));
    }
    let text = files.read(&p).map_err(|e| {
        if ecn_datasets::workloads::builtin_cdf(name).is_some() {
            // A standard file's name: the built-in stands in only where nothing is there.
            return format!("{}: {e} (the built-in CDF of that name is used only where nothing is there)", p.display());
        }
        let names: Vec<&str> = ecn_datasets::workloads::BUILTIN_CDFS.iter().map(|c| c.name).collect();
        format!("{} is not a built-in CDF ({}) and {}: {e}", word(name), names.join(", "), p.display())
    })?;
    Cdf::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml(text, "test.toml", Path::new("."), None)
    }

    #[test]
    fn builtins_resolve_and_are_deterministic() {
        for (name, _) in BUILTIN_SCENARIOS {
            let a = Scenario::load(name, None).unwrap();
            let b = Scenario::load(name, None).unwrap();
            assert_eq!(a.flows, b.flows, "{name}");
            assert!(!a.flows.is_empty(), "{name}");
            let c = Scenario::load(name, Some(99)).unwrap();
            assert_ne!(a.flows, c.flows, "{name}: the seed must matter");
        }
    }

    /// A scenario read once loads as read for every seed, whatever is written to its file
    /// meanwhile (training's episodes used to reread it, and trained on an edit the model card
    /// never recorded).
    #[test]
    fn a_scenario_read_once_loads_as_read() {
        let dir = tempfile_dir("read-once");
        let path = dir.join("s.toml");
        let poisson = "duration = \"1ms\"\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n";
        std::fs::write(&path, format!("name = \"before\"\n{poisson}")).unwrap();
        let text = ScenarioText::read(path.to_str().unwrap()).unwrap();
        std::fs::write(&path, "bogus = 1\n").unwrap();
        let loaded = text.load(Some(7)).unwrap();
        assert_eq!((loaded.name.as_str(), loaded.source.as_str()), ("before", path.to_str().unwrap()));
        assert_eq!(text.file_text(), Some(format!("name = \"before\"\n{poisson}").as_str()));
        assert!(Scenario::load(path.to_str().unwrap(), Some(7)).is_err(), "a fresh read sees the edit");
        assert_eq!(ScenarioText::read("websearch-50").unwrap().file_text(), None, "a built-in is no file");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The files a scenario refers to are kept as first read, like its own text: a CDF file
    /// emptied after the first load still loads, and the text read is what it lists.
    #[test]
    fn a_scenario_keeps_the_files_it_refers_to_as_first_read() {
        let dir = tempfile_dir("read-once-cdf");
        let cdf = ecn_datasets::workloads::builtin_cdf("websearch").unwrap().text;
        std::fs::write(dir.join("mine.cdf"), cdf).unwrap();
        let path = dir.join("s.toml");
        let poisson = "duration = \"1ms\"\n[[workload]]\nkind = \"poisson\"\ncdf = \"mine.cdf\"\nload = 0.5\n";
        std::fs::write(&path, poisson).unwrap();
        let text = ScenarioText::read(path.to_str().unwrap()).unwrap();
        assert!(text.referenced_files().is_empty(), "nothing read before a load");
        let first = text.load(Some(7)).unwrap();
        std::fs::write(dir.join("mine.cdf"), "").unwrap();
        assert_eq!(text.load(Some(7)).unwrap().flows, first.flows);
        assert!(text.clone().load(Some(8)).is_ok(), "a clone shares what was read");
        let read = text.referenced_files();
        assert_eq!(read.len(), 1);
        assert_eq!((read[0].0.as_path(), &*read[0].1), (dir.join("mine.cdf").as_path(), cdf));
        assert!(Scenario::load(path.to_str().unwrap(), Some(7)).is_err(), "a fresh read sees the edit");

        // A standard file's name with no such file beside the scenario is its built-in copy,
        // for every load: one that appears later is not read.
        let standard =
            "duration = \"1ms\"\n[[workload]]\nkind = \"poisson\"\ncdf = \"WebSearch_distribution.txt\"\nload = 0.5\n";
        std::fs::write(&path, standard).unwrap();
        let text = ScenarioText::read(path.to_str().unwrap()).unwrap();
        let first = text.load(Some(7)).unwrap();
        std::fs::write(dir.join("WebSearch_distribution.txt"), "1 0\n1000 100\n").unwrap();
        assert_eq!(text.load(Some(7)).unwrap().flows, first.flows);
        assert!(text.referenced_files().is_empty(), "{:?}", text.referenced_files());
        assert_ne!(Scenario::load(path.to_str().unwrap(), Some(7)).unwrap().flows, first.flows);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The TOML parser's own errors (a wrong type, an unknown key) name the key and its table,
    /// as the later checks do, not only a line.
    #[test]
    fn parse_errors_name_the_key() {
        let poisson = "[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n";
        let e = parse(&format!("{poisson}\n[switch]\n# a comment\nbufer = \"1MB\"\n")).unwrap_err();
        assert_eq!(e.field, "switch.bufer (line 8)", "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
        let two = format!("{poisson}{poisson}");
        assert_eq!(toml_location(&two, two.rfind("0.5").unwrap()), "workload[1].load (line 8)");
        assert_eq!(toml_location(&two, two.find("0.5").unwrap()), "workload[0].load (line 4)");
        let e = parse("name = \"x\"\n[nic]\nmtu = \"big\"\n").unwrap_err();
        assert_eq!(e.field, "nic.mtu (line 3)", "{e}");
        let e = parse("[switch\n").unwrap_err();
        assert_eq!(e.field, "line 1", "{e}");
    }

    /// The paper's byte counter is a known `[dcqcn]` key under the hpcc variant too, which
    /// leaves it unset by default.
    #[test]
    fn a_byte_counter_can_be_set_under_the_hpcc_variant() {
        let s = parse("base = \"websearch-50\"\n[dcqcn]\nbyte_counter = \"10MB\"\n").unwrap();
        assert_eq!(s.fabric.dcqcn.byte_counter, Some(Bytes(10_000_000)));
        assert_eq!(parse("base = \"websearch-50\"\n").unwrap().fabric.dcqcn.byte_counter, None);
        let e = parse("base = \"websearch-50\"\n[dcqcn]\nbyte_countr = \"10MB\"\n").unwrap_err();
        assert!(e.field == "dcqcn.byte_countr" && e.message.contains("byte_counter"), "{e}");
    }

    /// A name heads Markdown table rows and names chart files.
    #[test]
    fn a_name_must_fit_a_table_row() {
        for bad in ["web | search", "two\\nlines", "", "  "] {
            let e = parse(&format!("base = \"websearch-50\"\nname = \"{bad}\"\n")).unwrap_err();
            assert_eq!(e.field, "name", "{bad:?}: {e}");
        }
        assert_eq!(parse("base = \"websearch-50\"\nname = \"web search 2\"\n").unwrap().name, "web search 2");
    }

    #[test]
    fn bad_fields_name_file_and_field() {
        let e = parse("[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 1.7\n").unwrap_err();
        assert_eq!((e.source_name.as_str(), e.field.as_str()), ("test.toml", "workload[0].load"));
        let e = parse("[[workload]]\nkind = \"teleport\"\n").unwrap_err();
        assert_eq!(e.field, "workload[0].kind");
        assert!(e.message.contains("teleport"), "{e}");
        // A bad value names its key, in a workload as in [dcqcn], and so does a missing one.
        let e = parse("[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = \"0.5\"\n").unwrap_err();
        assert_eq!(e.field, "workload[0].load", "{e}");
        assert!(e.message.contains("invalid type"), "{e}");
        let e = parse("[[workload]]\nkind = \"incast\"\nfan_in = 3\nflow_size = 500\ncount = 1\n").unwrap_err();
        assert_eq!(e.field, "workload[0].flow_size", "{e}");
        assert!(e.message.contains("500 has no unit"), "{e}");
        let e = parse("[[workload]]\nkind = \"poisson\"\nload = 0.5\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("workload[0].cdf", "missing"), "{e}");
        let e = parse("[[workload]]\nkind = \"flows\"\npath = \"f.txt\"\nload = 0.5\n").unwrap_err();
        assert_eq!(e.field, "workload[0].load", "{e}");
        assert!(e.message.contains("unknown key"), "{e}");
        let e = parse("[dcqcn]\nrp_timer = 300\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n")
            .unwrap_err();
        assert_eq!(e.field, "dcqcn.rp_timer", "{e}");
        assert!(e.message.contains("300 has no unit"), "{e}");
        let e = parse("[switch]\necn = { kmin = \"2MB\", kmax = \"1MB\", pmax = 0.2 }\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n").unwrap_err();
        assert_eq!(e.field, "switch.ecn");
        // A key the setting does not have is refused by name, not ignored.
        let e = parse("[switch]\necn = { kmin = \"400KB\", kmax = \"1600KB\", pmax = 0.2, pmin = 0.01 }\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n").unwrap_err();
        assert_eq!(e.field, "switch.ecn.pmin", "{e}");
        assert!(e.message.contains("unknown key"), "{e}");
        let e = parse("[switch]\necn = { kmin = \"400KB\", pmax = 0.2 }\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n").unwrap_err();
        assert_eq!(e.field, "switch.ecn.kmax", "{e}");
        let s = parse("[switch]\necn = { kmin = \"400KB\", kmax = \"1600KB\", pmax = 0.2 }\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n").unwrap();
        assert_eq!(s.fabric.ecn, EcnPlan::Fixed(EcnSetting::new(Bytes(400_000), Bytes(1_600_000), 0.2).unwrap()));
        let e =
            parse("[dcqcn]\nrp_timr = \"300us\"\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n")
                .unwrap_err();
        assert_eq!(e.field, "dcqcn.rp_timr");
        let poisson = "[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n";
        let e = parse(&format!("sample_interval = \"1ns\"\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "sample_interval", "{e}");
        let e = parse(&format!("[nic]\nrto = \"0us\"\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "nic.rto", "{e}");
        // A timer meant as "never" is refused by name: added to the clock, it would wrap it.
        let e = parse(&format!("[nic]\nrto = \"18446744073709551615ns\"\n{poisson}")).unwrap_err();
        assert!(e.field.starts_with("nic.rto") && e.message.contains("the most is 2^62 ns"), "{e}");
        let e = parse(&format!("[switch]\nresume_offset = \"1GB\"\n{poisson}")).unwrap_err();
        assert!(e.field == "switch.resume_offset" && e.message.contains("larger than the buffer"), "{e}");
        // Thresholds scaled to a 1 b/s link would be 0 bytes; the rate itself is the error.
        let e = parse(&format!("[topology]\nhost_link = \"1bps\"\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "topology.host_link", "{e}");
        // A 1-byte payload would make every flow as many packets as bytes.
        let e = parse(&format!("[nic]\nmtu = 1\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "nic.mtu", "{e}");
        // Too many flows to hold is refused before any is drawn (this one asks for 400 M).
        let incasts = "[[workload]]\nkind = \"incast\"\nfan_in = 4\nflow_size = \"500KB\"\ncount = 100000000\n";
        let e = parse(&format!("{poisson}{incasts}")).unwrap_err();
        assert_eq!(e.field, "workload[1]", "{e}");
        assert!(e.message.contains("more than the 2000000"), "{e}");
        let e = parse(&format!("[switch]\nbuffer = \"0B\"\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "switch.buffer", "{e}");
        let e = parse(&format!("[topology]\nlink_delay = \"100s\"\n{poisson}")).unwrap_err();
        assert!(e.field == "topology" && e.message.contains("delay"), "{e}");
        // A number without a unit is refused, and so is a run too short to start a flow.
        let e = parse(&format!("duration = 5\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "duration (line 1)", "{e}");
        assert!(e.message.contains("5 has no unit"), "{e}");
        let e = parse(&format!("duration = \"5ns\"\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "workload", "{e}");
        assert!(e.message.contains("start no flow"), "{e}");
        let e = parse(&format!("[dcqcn]\nrp_timer = \"1ns\"\n{poisson}")).unwrap_err();
        assert_eq!(e.field, "dcqcn", "{e}");
        assert!(e.message.contains("rp_timer") && e.message.contains("minimum"), "{e}");
        let e = parse("duration = \"20 parsecs\"\n").unwrap_err();
        assert!(e.to_string().starts_with("test.toml: duration (line 1):"), "{e}");
        assert!(!e.to_string().contains('\n'));
    }

    /// An incast at given times takes no window: `start` or `stop` beside `at` is refused, not
    /// ignored.
    #[test]
    fn incast_at_refuses_a_window() {
        let incast = "[[workload]]\nkind = \"incast\"\nfan_in = 3\nflow_size = \"500KB\"\nat = [\"5ms\"]\n";
        for (extra, key) in [("start = \"10ms\"\n", "start"), ("stop = \"15ms\"\n", "stop")] {
            let e = parse(&format!("{incast}{extra}")).unwrap_err();
            assert_eq!(e.field, format!("workload[0].{key}"), "{e}");
            assert!(e.message.contains("not used with at"), "{e}");
        }
        assert_eq!(parse(incast).unwrap().flows.len(), 3);
        let e = parse(&format!("{incast}priority = 9\n")).unwrap_err();
        assert_eq!(e.field, "workload[0].priority", "{e}");
    }

    /// Runs that would exhaust memory are refused before a flow is drawn, naming what made
    /// them so large: too long at the sample interval, too many nodes, or a flow file's span.
    #[test]
    fn runs_too_large_to_hold_are_refused_naming_the_cause() {
        let sparse = "[[workload]]\nkind = \"poisson\"\ncdf = \"hadoop\"\nload = 0.000001\n";
        let e = parse(&format!("duration = \"200s\"\n{sparse}")).unwrap_err();
        assert_eq!(e.field, "duration", "{e}");
        assert!(e.message.contains("telemetry rows") && e.message.contains("sample_interval"), "{e}");
        // A short window with a long drain: the drain is named.
        let busy = "[[workload]]\nkind = \"poisson\"\ncdf = \"hadoop\"\nload = 0.5\n";
        let e = parse(&format!("duration = \"1ms\"\ndrain = \"100000h\"\n{busy}")).unwrap_err();
        assert_eq!(e.field, "drain", "{e}");
        // The same run at a coarser interval fits, unless a policy samples it every 100 µs.
        let coarse = parse(&format!("duration = \"200s\"\nsample_interval = \"10ms\"\n{sparse}")).unwrap();
        coarse.check_sampled_every(Nanos::from_millis(10)).unwrap();
        let e = coarse.check_sampled_every(Nanos::from_micros(100)).unwrap_err();
        assert_eq!(e.field, "sample_interval", "{e}");
        assert!(e.message.contains("a policy deciding every 100us") && e.message.contains("telemetry rows"), "{e}");
        let e =
            parse(&format!("[topology]\nleaves = 4000\nspines = 4000\nhosts_per_leaf = 4000\n{sparse}")).unwrap_err();
        assert_eq!(e.field, "topology", "{e}");
        assert!(e.message.contains("more than the 4096"), "{e}");

        let dir = std::env::temp_dir().join(format!("ecn-scenario-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Two flows 200 s apart: the replay keeps their spacing.
        std::fs::write(dir.join("f.txt"), "2\n0 1 3 100 10000 2.0\n2 3 3 100 10000 202.0\n").unwrap();
        let flows = |extra: &str| {
            let text = format!("duration = \"1ms\"\n[[workload]]\nkind = \"flows\"\npath = \"f.txt\"\n{extra}");
            Scenario::from_toml(&text, "test.toml", &dir, None)
        };
        let e = flows("").unwrap_err();
        assert_eq!(e.field, "workload[0].path", "{e}");
        let e = flows("start = \"5ms\"\n").unwrap_err();
        assert_eq!(e.field, "workload[0].start", "{e}");
        let e = flows("stop = \"0ns\"\n").unwrap_err();
        assert_eq!(e.field, "workload[0].start", "{e}");
        let e = flows("stop = \"2ms\"\n").unwrap_err();
        assert_eq!(e.field, "workload[0].stop", "{e}");
        // Cut at stop, the replay is one flow.
        assert_eq!(flows("stop = \"1ms\"\n").unwrap().flows.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A CDF file named like a standard one is read when it exists: an edited copy of
    /// `FbHdp_distribution.txt` beside the scenario used to be replaced, silently, by the
    /// built-in Hadoop CDF. Without the file, the name is the built-in.
    #[test]
    fn a_cdf_file_named_like_a_standard_one_is_read_where_it_exists() {
        let dir = tempfile_dir("cdf-alias");
        let text =
            "duration = \"1ms\"\n[[workload]]\nkind = \"poisson\"\ncdf = \"FbHdp_distribution.txt\"\nload = 0.5\n";
        let mean_size = |s: &Scenario| s.flows.iter().map(|f| f.size_bytes as f64).sum::<f64>() / s.flows.len() as f64;
        let builtin = Scenario::from_toml(text, "test.toml", &dir, None).unwrap();
        assert!(mean_size(&builtin) > 10_000.0, "the built-in Hadoop CDF: mean {}", mean_size(&builtin));
        std::fs::write(dir.join("FbHdp_distribution.txt"), "0 0\n2000 100\n").unwrap();
        let edited = Scenario::from_toml(text, "test.toml", &dir, None).unwrap();
        assert!((mean_size(&edited) - 1000.0).abs() < 50.0, "the file's CDF: mean {}", mean_size(&edited));
        // A built-in's short name is never a file.
        std::fs::write(dir.join("hadoop"), "0 0\n2000 100\n").unwrap();
        let short = Scenario::from_toml(&text.replace("FbHdp_distribution.txt", "hadoop"), "test.toml", &dir, None);
        assert!(mean_size(&short.unwrap()) > 10_000.0);
        // With a byte-order mark (a Windows editor's) the same file reads the same.
        std::fs::write(dir.join("FbHdp_distribution.txt"), "\u{feff}0 0\n2000 100\n").unwrap();
        let bom = Scenario::from_toml(text, "test.toml", &dir, None).unwrap();
        assert_eq!(bom.flows, edited.flows);
        // A directory or a dangling link under the name is refused by name: the built-in used
        // to stand in for it, silently.
        std::fs::remove_file(dir.join("FbHdp_distribution.txt")).unwrap();
        std::os::unix::fs::symlink(dir.join("gone.txt"), dir.join("FbHdp_distribution.txt")).unwrap();
        let e = Scenario::from_toml(text, "test.toml", &dir, None).unwrap_err();
        assert!(e.field == "workload[0].cdf" && e.message.contains("FbHdp_distribution.txt"), "{e}");
        assert!(e.message.contains("used only where nothing is there") && !e.message.contains("not a built-in"), "{e}");
        std::fs::remove_file(dir.join("FbHdp_distribution.txt")).unwrap();
        std::fs::create_dir(dir.join("FbHdp_distribution.txt")).unwrap();
        assert!(Scenario::from_toml(text, "test.toml", &dir, None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A TOML scenario under a name not ending in .toml (`s.toml.txt`, `/dev/stdin`) is said to
    /// be one; it was read as an HPCC config.txt with typos. `.TOML` is TOML.
    #[test]
    fn a_toml_scenario_by_another_name_is_named_as_one() {
        let dir = tempfile_dir("toml-names");
        let text = "base = \"websearch-50\"\nduration = \"1ms\"\n";
        for name in ["s.toml.txt", "S.TOML"] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let upper = dir.join("S.TOML").display().to_string();
        assert!(ScenarioText::read(&upper).unwrap().load(None).is_ok());
        let txt = dir.join("s.toml.txt").display().to_string();
        let e = ScenarioText::read(&txt).map(|_| ()).unwrap_err();
        assert!(e.message.contains("looks like a TOML scenario"), "{e}");
        // A config.txt whose path holds `=` is no TOML.
        std::fs::write(dir.join("config.txt"), "FLOW_FILE flows=v2.txt\n").unwrap();
        let e = ScenarioText::read(&dir.join("config.txt").display().to_string()).unwrap().load(None).unwrap_err();
        assert!(!e.message.contains("TOML"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh scratch directory for one test.
    fn tempfile_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ecn-scenario-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A flow starting past the last nanosecond a u64 holds is refused, naming the flow file's
    /// line, rather than overflowing the end of the run's window.
    #[test]
    fn flows_at_the_end_of_time_are_refused_naming_the_line() {
        let dir = std::env::temp_dir().join(format!("ecn-scenario-end-of-time-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let topo = "4 1 3\n3\n0 3 100Gbps 1us 0\n1 3 100Gbps 1us 0\n2 3 100Gbps 1us 0\n";
        std::fs::write(dir.join("t.txt"), topo).unwrap();
        // Past the end of time as a double (…709552764 ns), and just short of it (…709499359 ns).
        let past = "18446744073.709551615";
        std::fs::write(dir.join("f.txt"), format!("2\n0 1 3 100 10000 0\n1 2 3 100 10000 {past}\n")).unwrap();
        std::fs::write(dir.join("late.txt"), "1\n\n0 1 3 100 10000 18446744073.7095\n").unwrap();
        let flows = |file: &str, start: &str| {
            let text = format!(
                "[topology]\nkind = \"hpcc\"\npath = \"t.txt\"\n[[workload]]\nkind = \"flows\"\npath = \"{file}\"\n{start}"
            );
            Scenario::from_toml(&text, "test.toml", &dir, None)
        };
        // Named as the scenario's field, then the file and its line.
        let e = flows("f.txt", "").unwrap_err();
        assert_eq!((e.source_name.as_str(), e.field.as_str()), ("test.toml", "workload[0].path"), "{e}");
        assert!(e.message.starts_with(&format!("{}: line 3: ", dir.join("f.txt").display())), "{e}");
        // One flow alone moves to `start`, so it is late only once moved.
        flows("late.txt", "").unwrap();
        let e = flows("f.txt", "start = \"1ns\"\n").unwrap_err();
        assert!(e.message.contains("f.txt: line 3: "), "{e}");
        let config = |flow_file: &str| {
            let text = format!("TOPOLOGY_FILE t.txt\nFLOW_FILE {flow_file}\n{}", super::hpcc::tests::REQUIRED);
            Scenario::from_hpcc_config(&text, "config.txt", &dir, None)
        };
        // Flows spaced past 2^62 ns make a run the clock cannot hold (a panic in a debug build).
        std::fs::write(dir.join("far.txt"), "2\n0 1 3 100 10000 0\n1 2 3 100 10000 18446744073\n").unwrap();
        let e = Scenario::from_toml(
            "duration = \"1ms\"\nsample_interval = \"100h\"\n[topology]\nkind = \"hpcc\"\npath = \"t.txt\"\n\
             [[workload]]\nkind = \"flows\"\npath = \"far.txt\"\n",
            "test.toml",
            &dir,
            None,
        )
        .unwrap_err();
        assert!(e.message.contains("past the most a run may, 2^62 ns"), "{e}");
        let e = config("f.txt").unwrap_err();
        assert_eq!((e.source_name.as_str(), e.field.as_str()), ("config.txt", "FLOW_FILE"), "{e}");
        assert!(e.message.starts_with(&format!("{}: line 3: ", dir.join("f.txt").display())), "{e}");
        // An HPCC config without a stop time stops at HPCC's default, 3.01 s: before this flow.
        let e = config("late.txt").unwrap_err();
        assert_eq!(e.field, "SIMULATOR_STOP_TIME", "{e}");
        assert!(e.message.contains("(absent: HPCC's default)"), "{e}");
        // A bad line of a flow file or a topology file, named the same way.
        std::fs::write(
            dir.join("bad.txt"),
            "1
0 1 3 100 10000 2s
",
        )
        .unwrap();
        let e = config("bad.txt").unwrap_err();
        assert_eq!((e.source_name.as_str(), e.field.as_str()), ("config.txt", "FLOW_FILE"), "{e}");
        assert!(e.message.contains("bad.txt: line 2: start '2s' is not a time in seconds: expected a number"), "{e}");
        let e = flows("bad.txt", "").unwrap_err();
        assert_eq!((e.source_name.as_str(), e.field.as_str()), ("test.toml", "workload[0].path"), "{e}");
        std::fs::write(
            dir.join("t-bad.txt"),
            "4 1 3
3
0 3 100Gbps
",
        )
        .unwrap();
        let text =
            "[topology]\nkind = \"hpcc\"\npath = \"t-bad.txt\"\n[[workload]]\nkind = \"flows\"\npath = \"f.txt\"\n";
        let e = Scenario::from_toml(text, "test.toml", &dir, None).unwrap_err();
        assert_eq!((e.source_name.as_str(), e.field.as_str()), ("test.toml", "topology.path"), "{e}");
        assert!(e.message.starts_with(&format!("{}: topology: ", dir.join("t-bad.txt").display())), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn endless_files_are_refused_not_read_forever() {
        let e = Scenario::load("/dev/zero", None).unwrap_err();
        assert!(e.message.contains("larger than 256 MiB"), "{e}");
    }

    /// `[topology]` over a base overrides the fields it names and keeps the base's others; a
    /// leaf-spine key beside `kind = "hpcc"` is refused rather than ignored.
    #[test]
    fn topology_merges_with_the_base_field_by_field() {
        let s = parse("base = \"leafspine-64\"\n[topology]\nlink_delay = \"2us\"\n").unwrap();
        assert_eq!(s.fabric.topology.hosts().len(), 64);
        assert!(s.fabric.topology.links.iter().all(|l| l.delay == Nanos::from_micros(2)));
        let s = parse("base = \"leafspine-64\"\n[topology]\nkind = \"leaf-spine\"\nhosts_per_leaf = 2\n").unwrap();
        assert_eq!(s.fabric.topology.hosts().len(), 8, "4 leaves of the base x 2 hosts");

        let dir = std::env::temp_dir().join(format!("ecn-scenario-topo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // 3 hosts on one switch.
        std::fs::write(dir.join("t.txt"), "4 1 3\n3\n0 3 100Gbps 1us 0\n1 3 100Gbps 1us 0\n2 3 100Gbps 1us 0\n")
            .unwrap();
        let hpcc = |text: &str| Scenario::from_toml(text, "test.toml", &dir, None);
        // Another kind over the base is another fabric: none of the base's leaf-spine keys apply.
        let s = hpcc("base = \"leafspine-64\"\n[topology]\nkind = \"hpcc\"\npath = \"t.txt\"\n").unwrap();
        assert_eq!(s.fabric.topology.hosts().len(), 3);
        for key in ["leaves = 4", "host_link = \"25Gbps\"", "link_delay = \"2us\""] {
            let text = format!("base = \"websearch-50\"\n[topology]\nkind = \"hpcc\"\npath = \"t.txt\"\n{key}\n");
            let e = hpcc(&text).unwrap_err();
            let name = key.split(' ').next().unwrap();
            assert_eq!(e.field, format!("topology.{name}"), "{e}");
            assert!(e.message.contains("leaf-spine"), "{e}");
        }
        let e = hpcc("base = \"websearch-50\"\n[topology]\npath = \"t.txt\"\n").unwrap_err();
        assert_eq!(e.field, "topology.path", "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// REFERENCE.md §2: the switch buffer is 16·bw/50 MiB for NICs of bw Gb/s, unless the
    /// scenario sets one.
    #[test]
    fn the_default_buffer_scales_with_the_nic_rate() {
        const MIB: u64 = 1024 * 1024;
        for (rate, mib) in [("25Gbps", 8), ("100Gbps", 32), ("400Gbps", 128)] {
            let s = parse(&format!("base = \"websearch-50\"\n[topology]\nhost_link = \"{rate}\"\n")).unwrap();
            assert_eq!(s.fabric.buffer, Bytes(mib * MIB), "{rate}");
        }
        let s = parse("base = \"websearch-50\"\n[topology]\nhost_link = \"10Gbps\"\n").unwrap();
        assert_eq!(s.fabric.buffer, Bytes(16 * MIB / 5), "3.2 MiB at 10G, not rounded to whole MiB");
        let s = parse("base = \"websearch-50\"\n[topology]\nhost_link = \"25Gbps\"\n[switch]\nbuffer = \"32MiB\"\n")
            .unwrap();
        assert_eq!(s.fabric.buffer, Bytes(32 * MIB), "a buffer the scenario sets wins");
    }

    #[test]
    fn base_and_overrides() {
        let s = parse("base = \"websearch-50\"\nseed = 7\n[switch]\nbuffer = \"8MB\"\npfc = false\n[dcqcn]\nrp_timer = \"55us\"\n").unwrap();
        assert_eq!(s.name, "websearch-50");
        assert_eq!(s.seed, 7);
        assert_eq!(s.fabric.buffer, Bytes(8_000_000));
        assert!(!s.fabric.pfc);
        assert_eq!(s.fabric.dcqcn.rp_timer, Nanos::from_micros(55));
        assert!(s.fabric.rto.is_some());
    }
}
