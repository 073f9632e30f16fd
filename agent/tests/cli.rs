//! End-to-end tests of the `ecn-tuner` binary: the CLI contract of PRODUCT.md (exit codes,
//! JSON keys, output files) and the reference-simulator comparison through the CLI.

use std::path::Path;
use std::process::{Command, Output};

fn ecn_tuner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ecn-tuner"))
        .args(args)
        .env("ECN_TUNER_LOG", "warn")
        .env_remove("ECN_TUNER_MODELS")
        .output()
        .expect("run ecn-tuner")
}

/// A fresh directory, removed when the test ends.
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("ecn-tuner-cli-{name}-")).tempdir().unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const SMALL: &str = "base = \"websearch-50\"\nduration = \"3ms\"\ndrain = \"20ms\"\n";

/// A run of a few milliseconds, for tests about the command rather than the fabric.
const SHORT: &str = "base = \"websearch-50\"\nduration = \"300us\"\ndrain = \"2ms\"\n";

#[test]
fn sim_json_follows_the_contract() {
    let tmp = temp_dir("json");
    let dir = tmp.path().to_path_buf();
    let scenario = write(&dir, "small.toml", SMALL);
    let out =
        ecn_tuner(&["sim", "--scenario", &scenario, "--policy", "baseline:hpcc-alibaba", "--seed", "3", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document on stdout");
    assert_eq!(v["scenario"], "websearch-50");
    assert_eq!(v["policy"], "baseline:hpcc-alibaba");
    assert_eq!(v["seed"], 3);
    let total = v["flows"]["total"].as_u64().unwrap();
    assert!(total > 50);
    assert_eq!(v["flows"]["completed"].as_u64().unwrap(), total);
    for bucket in ["all", "lt_10KB", "10KB_100KB", "100KB_1MB", "ge_1MB"] {
        for p in ["p50", "p95", "p99"] {
            let x = &v["slowdown"][bucket][p];
            assert!(x.is_null() || x.as_f64().unwrap() >= 1.0, "{bucket}.{p} = {x}");
        }
    }
    for key in ["pause_frames", "paused_ns"] {
        assert!(v["pfc"][key].is_u64(), "pfc.{key}");
    }
    for key in ["drops", "sim_ns", "events"] {
        assert!(v[key].is_u64(), "{key}");
    }
    assert!(v["utilization"].as_f64().unwrap() > 0.0);
    assert!(v["queue_bytes"]["avg"].is_number() && v["queue_bytes"]["p99"].is_number());
    assert!(v["wall_seconds"].as_f64().unwrap() > 0.0);
}

/// A run cut off with flows still in flight says so on stderr, since its percentiles cover
/// only the flows that finished; `eval` says it once per such run. A run that completes every
/// flow says nothing.
#[test]
fn a_run_with_unfinished_flows_says_its_figures_cover_the_completed_ones() {
    const WARNING: &str = "flows left unfinished";
    let tmp = temp_dir("unfinished");
    let cut = write(tmp.path(), "cut.toml", "base = \"websearch-50\"\nduration = \"3ms\"\ndrain = \"1us\"\n");
    let out = ecn_tuner(&["sim", "--scenario", &cut, "--seed", "3", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (completed, total) = (v["flows"]["completed"].as_u64().unwrap(), v["flows"]["total"].as_u64().unwrap());
    assert!(completed < total, "the cut must leave flows in flight: {completed}/{total}");
    assert!(err.contains(WARNING) && err.contains(&format!("completed={completed} total={total}")), "{err}");

    let out = ecn_tuner(&["eval", "--scenario", &cut, "--policy", "baseline:huawei-latency", "--seeds", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches(WARNING).count(), 2, "{err}");

    let whole = write(tmp.path(), "whole.toml", SMALL);
    let out = ecn_tuner(&["sim", "--scenario", &whole, "--seed", "3", "--json"]);
    assert!(out.status.success() && !String::from_utf8_lossy(&out.stderr).contains(WARNING));
}

#[test]
fn sim_out_writes_flows_fct_and_telemetry() {
    let tmp = temp_dir("out");
    let dir = tmp.path().to_path_buf();
    let scenario = write(&dir, "small.toml", SMALL);
    let out_dir = dir.join("run");
    let out = ecn_tuner(&["sim", "--scenario", &scenario, "--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("slowdown") && table.contains("<10KB"), "{table}");

    let flows = ecn_datasets::io::read_flows_parquet(&out_dir.join("flows.parquet")).unwrap();
    let fct = ecn_datasets::io::read_flows_hpcc_fct(&out_dir.join("fct.txt")).unwrap();
    assert!(!flows.is_empty());
    assert_eq!(fct.len(), flows.iter().filter(|f| f.fct_ns.is_some()).count());
    assert!(flows.iter().all(|f| f.slowdown.unwrap() >= 1.0));
    // The phases of "Where the tail waits": sent, then delivered, then acknowledged, and the
    // first two at least about their parts of the ideal (the ideal counts 48 header bytes a
    // packet where the wire carries 36: up to 4 ns a packet faster at 25 Gb/s and above).
    for f in &flows {
        let (sent, delivered, fct, base) =
            (f.sent_ns.unwrap(), f.delivered_ns.unwrap(), f.fct_ns.unwrap(), f.base_rtt_ns.unwrap());
        assert!(sent < delivered && delivered < fct && base < f.ideal_ns, "{f:?}");
        let packets = f.size_bytes.div_ceil(1000);
        assert!(sent + 4 * packets >= f.ideal_ns - base && delivered - sent >= base / 2 - 100, "{f:?}");
    }
    assert!(summary_tail(&table), "the table says where the small-flow tail waited: {table}");
    let telemetry = ecn_datasets::io::read_telemetry_parquet(&out_dir.join("telemetry.parquet")).unwrap();
    assert!(!telemetry.is_empty());
    // 100 µs samples of every switch data queue, with the configured ECN setting.
    assert_eq!(telemetry[0].sample.ts_ns, 100_000);
    assert!(telemetry.iter().all(|t| t.sample.kmin_bytes < t.sample.kmax_bytes && t.queue == 3));
    assert!(telemetry.iter().map(|t| t.sample.tx_bytes).sum::<u64>() > 0);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["flows"]["total"].as_u64().unwrap() as usize, flows.len());
}

fn summary_tail(table: &str) -> bool {
    table.lines().any(|l| l.starts_with("<100KB p99 tail") && l.contains("sender") && l.contains("ACK"))
}

fn assert_bad_input(args: &[&str], must_name: &[&str]) {
    let out = ecn_tuner(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    for s in must_name {
        assert!(lines[0].contains(s), "{args:?}: '{}' does not name '{s}'", lines[0]);
    }
}

#[test]
fn bad_scenario_files_exit_2_naming_file_and_field() {
    let tmp = temp_dir("bad");
    let dir = tmp.path().to_path_buf();
    let cases = [
        ("load.toml", "[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 1.7\n", "workload[0].load"),
        ("kind.toml", "[[workload]]\nkind = \"wormhole\"\nload = 0.5\n", "workload[0]"),
        (
            "ecn.toml",
            "[switch]\necn = { kmin = \"1600KB\", kmax = \"400KB\", pmax = 0.2 }\n[[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.5\n",
            "switch.ecn",
        ),
        ("cdf.toml", "[[workload]]\nkind = \"poisson\"\ncdf = \"nope.txt\"\nload = 0.5\n", "workload[0].cdf"),
        ("typo.toml", "[switch]\nbufer = \"1MB\"\n", "bufer"),
        ("unitless.toml", "[switch]\nreserve = \"4096\"\n", "missing unit"),
        ("syntax.toml", "duration = \n", "line 1"),
        // Headroom for 9000 B frames is more than 700 KB holds; at 1000 B it is not.
        (
            "mtu.toml",
            "[topology]\nleaves = 2\nspines = 2\nhosts_per_leaf = 8\n[switch]\nbuffer = \"700KB\"\n[nic]\nmtu = 9000\n",
            "switch.buffer",
        ),
    ];
    for (name, text, field) in cases {
        let path = write(&dir, name, text);
        assert_bad_input(&["sim", "--scenario", &path], &[&path, field]);
    }
    assert_bad_input(&["sim", "--scenario", "no-such-scenario"], &["no-such-scenario"]);
    assert_bad_input(&["sim", "--scenario", "websearch-50", "--policy", "static:2MB,1MB,0.1"], &["--policy", "kmin"]);
    // A size without its unit: bytes or kilobytes?
    assert_bad_input(
        &["sim", "--scenario", "websearch-50", "--policy", "static:400,1600,0.2"],
        &["--policy", "missing unit"],
    );
    assert_bad_input(&["sim", "--scenario", "websearch-50", "--policy", "baseline:magic"], &["--policy"]);
}

/// An `--out` that cannot take a command's files is refused before the work, and nothing is
/// written: a directory where `sim`, `eval` or `train` would put a file, or `record --out` a
/// directory.
#[test]
fn unusable_out_paths_are_refused_before_anything_is_written() {
    let tmp = temp_dir("outdir");
    let dir = tmp.path().to_path_buf();
    let scenario = write(&dir, "small.toml", SMALL);

    let sim_out = dir.join("sim");
    std::fs::create_dir_all(sim_out.join("telemetry.parquet")).unwrap();
    assert_bad_input(&["sim", "--scenario", &scenario, "--out", sim_out.to_str().unwrap()], &["telemetry.parquet"]);
    assert!(!sim_out.join("flows.parquet").exists() && !sim_out.join("fct.txt").exists());

    let eval_out = dir.join("eval");
    std::fs::create_dir_all(eval_out.join("slowdown_websearch-50.png")).unwrap();
    let eval = ["eval", "--scenario", &scenario, "--seeds", "1", "--policy", "baseline:huawei-latency"];
    assert_bad_input(&[&eval[..], &["--out", eval_out.to_str().unwrap()]].concat(), &["slowdown_websearch-50.png"]);
    assert!(!eval_out.join("eval.md").exists());

    let model = dir.join("m.safetensors");
    std::fs::create_dir_all(dir.join("m.training.png")).unwrap();
    assert_bad_input(&["train", "--steps", "1", "--out", model.to_str().unwrap()], &["m.training.png"]);
    assert!(!model.exists());

    let record_out = dir.join("taken.parquet");
    std::fs::create_dir_all(&record_out).unwrap();
    assert_bad_input(
        &["record", "--scenario", &scenario, "--out", record_out.to_str().unwrap()],
        &["taken.parquet", "is a directory"],
    );

    // A file where a folder must be: said so (it used to be "File exists (os error 17)").
    let a_file = write(&dir, "a-file", "");
    let inside = format!("{a_file}/deeper/x.parquet");
    assert_bad_input(&["record", "--scenario", &scenario, "--out", &inside], &[&a_file, "is a file, not a folder"]);
    assert_bad_input(&["sim", "--scenario", &scenario, "--out", &a_file], &[&a_file, "is a file, not a folder"]);
    // A link to nothing where the folder must be (it too was "File exists").
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
    let dangling = dangling.to_str().unwrap();
    assert_bad_input(&["sim", "--scenario", &scenario, "--out", dangling], &[dangling, "which does not exist"]);

    // An output that is an input, however named: the recording would become a training curve.
    let recording = telemetry_csv(&dir, "n.training.csv", &[telemetry_row(1, "leaf0"), telemetry_row(2, "leaf0")]);
    let model = dir.join("n.safetensors");
    let train = ["train", "--telemetry", &recording, "--steps", "1", "--out", model.to_str().unwrap()];
    assert_bad_input(&train, &["n.training.csv", "--telemetry"]);
    assert_eq!(std::fs::read_to_string(&recording).unwrap().lines().count(), 3, "the recording is untouched");
    let inside = write(&dir, "inside.toml", SMALL);
    let (into, moved) = (dir.join("into"), dir.join("into").join("fct.txt"));
    std::fs::create_dir_all(&into).unwrap();
    std::fs::hard_link(&inside, &moved).unwrap();
    assert_bad_input(&["sim", "--scenario", &inside, "--out", into.to_str().unwrap()], &["fct.txt", "--scenario"]);
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), SMALL);
}

/// A report into a folder that holds the last one's: the charts of scenarios it lacks go (they
/// used to stand beside tables that no longer mention them), and no other file does.
#[test]
fn a_report_removes_the_charts_of_the_last_one_it_does_not_redraw() {
    let tmp = temp_dir("stale");
    let dir = tmp.path().to_path_buf();
    let (one, two) = (write(&dir, "one.toml", SMALL), write(&dir, "two.toml", &SMALL.replace("websearch", "hadoop")));
    let out = dir.join("report");
    let eval = |scenarios: &[&str]| {
        let args = [&["eval", "--policy", "baseline:huawei-latency", "--seeds", "1", "--scenario"], scenarios].concat();
        let o = ecn_tuner(&[&args[..], &["--out", out.to_str().unwrap()]].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    eval(&[&one, &two]);
    let (web, hadoop) = (out.join("slowdown_websearch-50.png"), out.join("slowdown_hadoop-50.png"));
    assert!(web.is_file() && hadoop.is_file());
    std::fs::write(out.join("slowdown_mine.png"), "not the report's").unwrap();
    eval(&[&one]);
    assert!(web.is_file() && !hadoop.exists());
    assert!(out.join("slowdown_mine.png").is_file());
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    assert_eq!(doc["plots"], serde_json::json!(["slowdown_websearch-50.png"]));
}

/// Files read whole (tokens, PEM files, recordings) are read only up to a bound: `/dev/zero`
/// given by mistake used to be read until memory ran out.
#[test]
fn endless_files_named_by_flags_are_refused() {
    assert_bad_input(
        &["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", "--token-file", "/dev/zero"],
        &["--token-file /dev/zero", "larger than 64 KiB"],
    );
    assert_bad_input(
        &["run", "--target", "https://127.0.0.1:1", "--mode", "shadow", "--duration", "1s", "--tls-ca", "/dev/zero"],
        &["--tls-ca /dev/zero", "larger than 16 MiB"],
    );
}

/// A flag the actuator's backend would not use is refused before anything is reached: the
/// SONiC journal before Redis (a missing flag read as an unreachable switch, exit 1), a time
/// scale where nothing is paced (ignored), and one so small that every derived wait overflows.
#[test]
fn actuator_flags_are_checked_before_anything_is_reached() {
    assert_bad_input(
        &["actuator", "--backend", "sonic", "--listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1"],
        &["--journal: required with the sonic backend"],
    );
    assert_bad_input(
        &["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", "--time-scale", "0.5"],
        &["--time-scale: paces the sim backend", "drop the flag"],
    );
    assert_bad_input(
        &["actuator", "--backend", "sim", "--listen", "127.0.0.1:0", "--time-scale", "1e-30"],
        &["--time-scale 0.000000000000000000000000000001", "from 1e-6 to 1e6"],
    );
}

/// HPCC `config.txt` numbers are sizes, times, counts and gains: NaN, infinities, negatives
/// and fractional counts are refused naming the key, not cast to 0 or saturated.
#[test]
fn bad_hpcc_config_numbers_exit_2_naming_the_key() {
    let tmp = temp_dir("hpcc");
    let dir = tmp.path().to_path_buf();
    write(&dir, "topo.txt", "3 1 2\n2\n0 2 100Gbps 0.001ms 0\n1 2 100Gbps 0.001ms 0\n");
    write(&dir, "flow.txt", "2\n0 1 3 100 100000 2.0\n1 0 3 100 200000 2.000001\n");
    // With the keys HPCC has no usable default for.
    let head = "TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\nCC_MODE 1\nRP_TIMER 300\nEWMA_GAIN 0.00390625\n\
                RATE_AI 20Mb/s\nRATE_HAI 200Mb/s\nL2_ACK_INTERVAL 1\nHAS_WIN 0\nACK_HIGH_PRIO 1\n";
    let good = write(&dir, "good.txt", head);
    assert!(ecn_tuner(&["sim", "--scenario", &good, "--json"]).status.success());
    let cases = [
        ("SIMULATOR_STOP_TIME -1", "SIMULATOR_STOP_TIME"),
        ("SIMULATOR_STOP_TIME nan", "SIMULATOR_STOP_TIME"),
        ("SIMULATOR_STOP_TIME 0", "SIMULATOR_STOP_TIME"),
        ("BUFFER_SIZE inf", "BUFFER_SIZE"),
        ("FAST_RECOVERY_TIMES -5", "FAST_RECOVERY_TIMES"),
        ("FAST_RECOVERY_TIMES 2.5", "FAST_RECOVERY_TIMES"),
        ("PACKET_PAYLOAD_SIZE nan", "PACKET_PAYLOAD_SIZE"),
        ("PACKET_PAYLOAD_SIZE 1", "PACKET_PAYLOAD_SIZE"),
        ("KMIN_MAP 1 100000000000 nan", "KMIN_MAP"),
        ("KMIN_MAP 1e30 1 2", "KMIN_MAP"),
        ("KMIN_MAP 2 100000000000 4", "KMIN_MAP"),
        ("ENABLE_QCN yes", "ENABLE_QCN"),
        ("ENABLE_QCN 2", "ENABLE_QCN"),
    ];
    for (line, key) in cases {
        let path = write(&dir, "config.txt", &format!("{head}{line}\n"));
        assert_bad_input(&["sim", "--scenario", &path], &["config.txt", key]);
    }
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(ecn_tuner(&["sim"]).status.code(), Some(2));
    assert_eq!(ecn_tuner(&["frobnicate"]).status.code(), Some(2));
    // A flag the chosen mode would ignore is refused, not dropped.
    let conflict = "cannot be used with";
    let ignored: [(&[&str], &str); 12] = [
        (&["train", "--telemetry", "t.parquet", "--interval", "200us", "--out", "m.safetensors"], conflict),
        (&["train", "--telemetry", "t.parquet", "--eval-seed", "7", "--out", "m.safetensors"], conflict),
        (&["train", "--conservative-alpha", "2", "--out", "m.safetensors"], "--telemetry"),
        (
            &[
                "train",
                "--scenario",
                "websearch-50",
                "--conservative-alpha",
                "0.5",
                "--steps",
                "1",
                "--out",
                "m.safetensors",
            ],
            "--telemetry",
        ),
        (&["train", "--repair", "--steps", "1", "--out", "m.safetensors"], "--repair checks telemetry files"),
        (&["recommend", "--telemetry", "t.parquet", "--token-file", "tok"], conflict),
        (&["recommend", "--target", "http://127.0.0.1:1", "--counters", "cumulative"], "per-interval deltas"),
        (&["run", "--target", "http://127.0.0.1:1", "--mode", "shadow", "--controller-id", "a\nb"], "--controller-id"),
        (&["run", "--target", "sim", "--mode", "shadow", "--scenario", "no-such.toml"], "--scenario no-such.toml"),
        (&["record", "--scenario", "websearch-50", "--duration", "3s", "--out", "t.parquet"], conflict),
        (
            &["record", "--target", "http://127.0.0.1:1", "--duration", "3s", "--seed", "4", "--out", "t.parquet"],
            conflict,
        ),
        (&["run", "--target", "http://127.0.0.1:1", "--mode", "shadow", "--journal", "j.jsonl"], "--target sim"),
    ];
    for (args, says) in ignored {
        let out = ecn_tuner(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// Data row `i` of a telemetry CSV for a queue of switch `switch` (as written, quoted or not),
/// at `(i + 1)` ms.
fn telemetry_row(i: u64, switch: &str) -> String {
    let ts = (i + 1) * 1_000_000;
    format!("{ts},{switch},eth1,3,100000000000,0,0.0,0,0,0,0,0,0,0,0,400000,1600000,0.2")
}

/// A telemetry CSV with the schema's header and `lines` after it.
fn telemetry_csv(dir: &Path, name: &str, lines: &[String]) -> String {
    let header = "ts_ns,switch,port,queue,link_bps,queue_bytes,queue_bytes_avg,queue_bytes_max,tx_bytes,tx_pkts,\
                  ecn_marked_pkts,pfc_pause_rx,pfc_pause_tx,paused_ns,drops,kmin_bytes,kmax_bytes,pmax";
    write(dir, name, &format!("{header}\n{}\n", lines.join("\n")))
}

/// A quote inside a CSV field is an ordinary byte: it must not join the rest of the file into
/// one record. A quote left open at the start of a field is bounded: past 1 MiB the record is
/// an error naming its row and line, not the rest of the file held in memory.
#[test]
fn telemetry_csv_quotes_open_only_at_a_field_start_and_records_are_bounded() {
    let dir = temp_dir("csv-quotes");
    let lines: Vec<String> = (0..8).map(|i| telemetry_row(i, if i % 2 == 0 { "leaf\"0" } else { "leaf0" })).collect();
    let stray = telemetry_csv(dir.path(), "stray.csv", &lines);
    let out = ecn_tuner(&["validate", "--telemetry", &stray]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("ok: 8 rows, 2 queues"), "{stdout}");

    let mut lines = vec![telemetry_row(0, "leaf0"), telemetry_row(1, "\"leaf0")];
    lines.extend((2..20_000).map(|i| telemetry_row(i, "leaf0")));
    let unclosed = telemetry_csv(dir.path(), "unclosed.csv", &lines);
    let out = ecn_tuner(&["validate", "--telemetry", &unclosed]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("row 2, ") && stderr.contains("line 3") && stderr.contains("1 MiB"), "{stderr}");
}

/// A timestamp near the end of u64's range (a corrupt poll) with a stated span overflowed the
/// gap check, and the dry-run actuator's replay clock: every command reading telemetry
/// panicked (exit 101).
#[test]
fn a_huge_timestamp_step_is_judged_not_a_panic() {
    let dir = temp_dir("ts-huge");
    let header = "ts_ns,switch,port,queue,link_bps,queue_bytes,queue_bytes_avg,queue_bytes_max,tx_bytes,tx_pkts,\
                  ecn_marked_pkts,pfc_pause_rx,pfc_pause_tx,paused_ns,drops,kmin_bytes,kmax_bytes,pmax,span_ns";
    let row = |ts: &str| format!("{ts},leaf0,eth1,3,100000000000,0,0,0,0,0,0,0,0,0,0,7000,500000,0.3,100000");
    let csv = write(dir.path(), "huge.csv", &format!("{header}\n{}\n{}\n", row("100000"), row("10000000000000000000")));
    for repair in [false, true] {
        let mut args = vec!["validate", "--telemetry", &csv];
        if repair {
            args.push("--repair");
        }
        let out = ecn_tuner(&args);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // Judged as the gap it is: refused without repair, marked as a break with it.
        if repair {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            assert!(stdout.contains("1 gap marked as continuity breaks"), "{stdout}");
        } else {
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            assert!(stderr.contains("row 2, column `ts_ns`: gap of 9999999999999900000 ns"), "{stderr}");
        }
    }
    // The dry-run actuator reads it without a gap limit, and its replay clock overflowed.
    assert_bad_input(
        &["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", "--telemetry", &csv],
        &["--telemetry", "2^62 ns"],
    );
}

/// Problems name data row N for line N + 1, as documented, whatever blank lines or
/// multi-line records came before.
#[test]
fn telemetry_csv_rows_are_named_by_their_line() {
    let dir = temp_dir("csv-lines");
    let bad = "4000000,leaf0,eth1,3,100000000000,0,0.0,0,x,0,0,0,0,0,0,400000,1600000,0.2".to_string();
    // Lines: 1 header, 2 a row, 3 blank, 4 a row, 5-6 one record, 7 the bad row.
    let lines =
        [telemetry_row(0, "leaf0"), String::new(), telemetry_row(1, "leaf0"), telemetry_row(2, "\"leaf\n0\""), bad];
    let csv = telemetry_csv(dir.path(), "lines.csv", &lines);
    let out = ecn_tuner(&["validate", "--telemetry", &csv]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("row 6, column `tx_bytes`"), "{stderr}");
}

/// A malformed `sonic restore --from` recording is the user's input: exit 2 naming it, before
/// any Redis is contacted (none listens on port 1).
#[test]
fn a_malformed_restore_recording_exits_2_before_redis() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.sonic-originals.json");
    std::fs::write(&bad, "not json").unwrap();
    let out = ecn_tuner(&["sonic", "restore", "--redis", "redis://127.0.0.1:1", "--from", &bad.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.sonic-originals.json") && stderr.contains("not a recording"), "{stderr}");
}

#[test]
fn scenarios_lists_and_shows_builtins() {
    let out = ecn_tuner(&["scenarios"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["websearch-50", "hadoop-50", "incast-15", "mixed"] {
        assert!(text.contains(name), "{text}");
    }
    // A description is the scenario's whole opening comment (mixed's was cut mid-sentence).
    assert!(text.contains("Hadoop runs at 10% throughout, and 15-to-1 incast bursts"), "{text}");
    let out = ecn_tuner(&["scenarios", "--show", "mixed"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("kind = \"incast\""));
}

/// `ecn-tuner scenarios | head -1`: a reader that has gone is no error, and never a panic.
/// The pipe's read end is closed before the process starts, so every write fails.
#[test]
fn a_reader_that_went_away_ends_the_output_quietly() {
    let tmp = temp_dir("pipe");
    let csv = telemetry_csv(tmp.path(), "t.csv", &[telemetry_row(0, "s1"), telemetry_row(1, "s1")]);
    for args in [vec!["scenarios"], vec!["scenarios", "--show", "mixed"], vec!["validate", "--telemetry", &csv]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_ecn-tuner"))
            .args(&args)
            .env("ECN_TUNER_LOG", "warn")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run ecn-tuner");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// Help, version and usage errors that cannot be written exit non-zero, saying so where it
/// can (clap's own exit ignored the failure: `--help > /dev/full` exited 0); a reader that
/// went away is no failure, as for every other output.
#[test]
fn help_that_cannot_be_written_is_a_failure() {
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let run = |args: &[&str], stdout: std::process::Stdio, stderr: std::process::Stdio| {
        let out = Command::new(env!("CARGO_BIN_EXE_ecn-tuner")).args(args).stdout(stdout).stderr(stderr).output();
        out.expect("run ecn-tuner")
    };
    for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
        let out = run(args, full().into(), std::process::Stdio::piped());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("No space left"), "{args:?}");
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = run(args, writer.into(), std::process::Stdio::piped());
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = run(&["--no-such-flag"], std::process::Stdio::null(), full().into());
    assert_eq!(out.status.code(), Some(2), "a usage error stays one; no panic writing it");
}

/// The acceptance check against the HPCC ns-3 simulator, through the CLI exactly as a user runs
/// it: same topology, flows and configuration; every flow completes; overall median slowdown
/// within 15% and p99 within 25% of the reference.
#[test]
fn ls16_matches_the_reference_simulator() {
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference/ls16");
    let config = format!("{base}/config.txt");
    assert!(Path::new(&config).exists(), "{config} is missing: shared/ must sit beside the checkout");
    let out = ecn_tuner(&["sim", "--scenario", &config, "--policy", "baseline:hpcc-alibaba", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{base}/summary.json")).unwrap()).unwrap();
    assert_eq!(ours["flows"]["total"], 1137);
    assert_eq!(ours["flows"]["completed"], 1137);
    let get = |v: &serde_json::Value, p: &str| v["slowdown"]["all"][p].as_f64().unwrap();
    let (p50, p99) = (get(&ours, "p50"), get(&ours, "p99"));
    let (r50, r99) = (get(&reference, "p50"), get(&reference, "p99"));
    eprintln!("ls16: p50 {p50:.3} (ref {r50:.3}), p99 {p99:.3} (ref {r99:.3})");
    assert!((p50 - r50).abs() / r50 <= 0.15, "median {p50} vs {r50}");
    assert!((p99 - r99).abs() / r99 <= 0.25, "p99 {p99} vs {r99}");
    assert_eq!(ours["drops"], 0);
}

#[test]
fn a_missing_models_folder_is_named_with_the_way_out() {
    let out = Command::new(env!("CARGO_BIN_EXE_ecn-tuner"))
        .args(["sim", "--scenario", "websearch-50", "--policy", "model:default"])
        .env("ECN_TUNER_LOG", "warn")
        .env("ECN_TUNER_MODELS", "/nonexistent/ecn-tuner-models")
        .output()
        .expect("run ecn-tuner");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/ecn-tuner-models does not exist"), "{stderr}");
    assert!(stderr.contains("$ECN_TUNER_MODELS") && stderr.contains("default.safetensors"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// A negative number given to a flag is that flag's value, refused by its own check naming it;
/// read as a flag of its own it was "unexpected argument '-0' found".
#[test]
fn a_negative_value_is_refused_naming_its_flag() {
    let dir = temp_dir("negative");
    let out = dir.path().join("x.safetensors");
    for (args, said) in [
        (vec!["train", "--out", out.to_str().unwrap(), "--gamma", "-0.1"], "--gamma -0.1: must be in [0, 1)"),
        (vec!["train", "--out", out.to_str().unwrap(), "--gamma", "-1e-1"], "--gamma -0.1: must be in [0, 1)"),
        (vec!["train", "--out", out.to_str().unwrap(), "--gamma", "-.5"], "--gamma -0.5: must be in [0, 1)"),
        (vec!["sim", "--scenario", "websearch-50", "--seed", "-1"], "'-1' for '--seed <SEED>'"),
        (vec!["recommend", "--telemetry", "t.parquet", "--min-confidence", "-0.5"], "--min-confidence -0.5"),
    ] {
        assert_bad_input(&args, &[said]);
    }
    assert!(!out.exists());
}

/// A stream whose reader has gone ends nothing: with stderr closed, the log and the error line
/// are dropped (tracing's report of the failed write panicked, exit 101, and took a recording
/// with it); with stdout closed, the command still ends with its own exit code (it exited 0
/// at its first result line, even when it then failed).
#[test]
fn a_closed_stream_changes_no_exit_code() {
    use std::process::Stdio;
    let dir = temp_dir("closed-stream");
    let scenario = write(dir.path(), "short.toml", SHORT);
    let spawn = |args: &[&str], stdout: Stdio, stderr: Stdio| {
        Command::new(env!("CARGO_BIN_EXE_ecn-tuner"))
            .args(args)
            .env("ECN_TUNER_LOG", "debug")
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("run ecn-tuner")
    };
    // stderr: a pipe with no reader.
    let mut child = spawn(&["sim", "--scenario", &scenario, "--json"], Stdio::piped(), Stdio::piped());
    drop(child.stderr.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the whole summary");
    assert_eq!(summary["seed"], 1);
    let mut child = spawn(&["sim", "--scenario", "no-such-scenario"], Stdio::null(), Stdio::piped());
    drop(child.stderr.take());
    assert_eq!(child.wait().unwrap().code(), Some(2));
    // stdout: a pipe with no reader, and a command that fails after writing its result there
    // (validate's JSON report of a file with problems: it exited 0 at the first write).
    let bad = write(dir.path(), "bad.csv", "ts_ns,switch,port,queue\n1,a,b,3\n");
    let args = ["validate", "--telemetry", &bad, "--json"];
    let out = ecn_tuner(&args);
    assert!(out.stdout.starts_with(b"{") && out.status.code() == Some(2), "the report goes to stdout, then exit 2");
    let mut child = spawn(&args, Stdio::piped(), Stdio::null());
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(2));
}

/// `ECN_TUNER_MODELS=` (set, but empty) reads as unset: the shipped models are found, where it
/// was taken for a folder named "".
#[test]
fn an_empty_models_variable_reads_as_unset() {
    let dir = temp_dir("empty-models");
    let scenario = write(dir.path(), "short.toml", SHORT);
    let out = Command::new(env!("CARGO_BIN_EXE_ecn-tuner"))
        .args(["sim", "--scenario", &scenario, "--policy", "model:default", "--json"])
        .env("ECN_TUNER_LOG", "warn")
        .env("ECN_TUNER_MODELS", "")
        .output()
        .expect("run ecn-tuner");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"policy\":\"model:default\""), "{stderr}");
}

/// A Parquet page whose corrupt run length makes the decoder ask for 2^61 bytes: a failed
/// allocation aborts a Rust process (exit 134) unless the binary's allocator turns it into the
/// file's error line and exit 2. `data/corrupt-page.parquet` is a 75-row telemetry file written
/// by pyarrow, uncompressed, with byte 4180 (0-based) changed from 0x28 to 0x1d.
#[test]
fn a_corrupt_page_that_asks_for_exabytes_exits_2_naming_the_file() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corrupt-page.parquet");
    let file = file.display().to_string();
    let dir = temp_dir("corrupt-page");
    let model = dir.path().join("m.safetensors").display().to_string();
    for args in [
        vec!["validate", "--telemetry", &file],
        vec!["recommend", "--telemetry", &file],
        vec!["train", "--telemetry", &file, "--steps", "10", "--out", &model],
    ] {
        let out = ecn_tuner(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("corrupt-page.parquet: not a readable Parquet file"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("memory allocation"), "{args:?}: {stderr}");
    }
}

/// A token goes over plain HTTP only to a loopback address, judged on the host the connection
/// goes to: in `http://[::1]@HOST` the `[::1]` is user info and HOST the host. Refused before
/// any connection, exit 2.
#[test]
fn a_token_is_not_sent_to_a_host_behind_user_info() {
    let tmp = temp_dir("userinfo");
    let token = write(tmp.path(), "token", "s3cret\n");
    for url in ["http://[::1]@192.0.2.2:50099", "http://[::1]:50051@192.0.2.2:50099", "http://10.0.0.1:50051"] {
        for args in [
            &["run", "--target", url, "--mode", "shadow", "--duration", "1s", "--token-file", &token][..],
            &["record", "--target", url, "--duration", "1s", "--out", "x.parquet", "--token-file", &token],
            &["recommend", "--target", url, "--token-file", &token],
        ] {
            let out = ecn_tuner(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains("user info") || stderr.contains("only sent over https://"), "{args:?}: {stderr}");
        }
    }
}
