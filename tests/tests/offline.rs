//! End-to-end: offline learning and recommendations.
//! - `train --telemetry` learns from recorded files, reproducibly by seed, and its card records
//!   the data (file hashes, row counts) and the calibration `recommend` relies on;
//! - `recommend` gives a valid setting for every queue (JSON and table), keeps the current
//!   setting when the input is out of the model's training distribution, at a line rate or
//!   telemetry interval it never trained at, and reads a live actuator with `--target`;
//! - `record --target` records a live actuator's telemetry.

use ecn_datasets::{QueueSample, TelemetrySample};
use ecn_tests::{run_cli, Actuator};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A small fabric with a short arrival window.
const TINY: &str = "base = \"incast-15\"\nname = \"tiny-incast\"\nduration = \"3ms\"\ndrain = \"10ms\"\n";

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

async fn ok(args: &[&str]) -> String {
    let (code, stdout, stderr) = run_cli(args).await;
    assert_eq!(code, Some(0), "ecn-tuner {args:?} failed:\n{stderr}");
    stdout
}

/// Two exploratory recordings of the tiny scenario: uniform draws, and the shipped model with
/// half of its decisions replaced by draws (the sample dataset's kind of behaviour).
async fn record_two(dir: &Path) -> (String, String) {
    std::fs::write(dir.join("tiny.toml"), TINY).unwrap();
    let tiny = path(dir, "tiny.toml");
    let (a, b) = (path(dir, "a.parquet"), path(dir, "b.parquet"));
    ok(&["record", "--scenario", &tiny, "--seed", "3", "--policy", "explore:3:1", "--out", &a]).await;
    ok(&["record", "--scenario", &tiny, "--seed", "4", "--policy", "explore:4:1:0.5:model:default", "--out", &b]).await;
    (a, b)
}

async fn train(files: &[&str], out: &str, seed: &str) {
    let mut args = vec!["train", "--telemetry"];
    args.extend_from_slice(files);
    args.extend_from_slice(&["--steps", "300", "--seed", seed, "--out", out]);
    let stdout = ok(&args).await;
    assert!(stdout.contains("trained on"), "{stdout}");
}

fn card(model: &str) -> Value {
    serde_json::from_slice(&std::fs::read(PathBuf::from(model).with_extension("card.json")).unwrap()).unwrap()
}

fn setting_in_bounds(s: &Value) -> bool {
    let (kmin, kmax, pmax) =
        (s["kmin_bytes"].as_u64().unwrap(), s["kmax_bytes"].as_u64().unwrap(), s["pmax"].as_f64().unwrap());
    // The default bounds of the tuning environment (README "Safety model").
    kmin >= 1_000 && kmin < kmax && kmax <= 16_000_000 && (0.001..=1.0).contains(&pmax)
}

#[tokio::test(flavor = "multi_thread")]
async fn offline_training_is_reproducible_and_records_its_data() {
    let dir = tempfile::Builder::new().prefix("ecn-offline-").tempdir().unwrap();
    let (a, b) = record_two(dir.path()).await;
    let (m1, m2, m3) =
        (path(dir.path(), "m1.safetensors"), path(dir.path(), "m2.safetensors"), path(dir.path(), "m3.safetensors"));
    train(&[&a, &b], &m1, "5").await;
    train(&[&a, &b], &m2, "5").await;
    train(&[&a, &b], &m3, "6").await;
    let bytes = |p: &str| std::fs::read(p).unwrap();
    assert_eq!(bytes(&m1), bytes(&m2), "the same data and seed give the same weights");
    assert_ne!(bytes(&m1), bytes(&m3), "another seed gives other weights");

    let c = card(&m1);
    assert_eq!(c["training"]["algorithm"], "cql");
    let data = c["training"]["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (entry, file) in data.iter().zip([&a, &b]) {
        assert_eq!(entry["path"], file.as_str());
        assert_eq!(entry["sha256"], ecn_tests::sha256_hex(file));
        let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(file)).unwrap().len() as u64;
        assert_eq!(entry["rows"], rows);
        assert!(entry["transitions"].as_u64().unwrap() > 0);
    }
    let dim = c["network"]["obs_dim"].as_u64().unwrap() as usize;
    assert_eq!(c["calibration"]["mean"].as_array().unwrap().len(), dim);
    assert!(c["calibration"]["td_error_rms"].as_f64().unwrap() > 0.0);
    // Its evaluation: no FCT (no simulator in the loop), and the scored batch's figures after
    // the last update, those of the curve's last row.
    let evaluation = &c["evaluation"];
    assert_eq!(evaluation["kind"], "offline");
    assert!(evaluation["fct"].is_null());
    let last_row: Vec<f64> = std::fs::read_to_string(dir.path().join("m1.training.csv"))
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    let batch = &evaluation["scored_batch"];
    assert_eq!(batch["updates"].as_f64().unwrap(), last_row[0]);
    // The CSV rounds to 6 and 4 decimals.
    assert!((batch["td_error_rms"].as_f64().unwrap() - last_row[2]).abs() < 1e-6, "{batch} {last_row:?}");
    assert!((batch["agrees_with_logged"].as_f64().unwrap() - last_row[3]).abs() < 1e-4, "{batch} {last_row:?}");
    // The sample interval of the data is the model's control interval.
    assert_eq!(c["tuning"]["control_interval"], "100us");
    let csv = std::fs::read_to_string(dir.path().join("m1.training.csv")).unwrap();
    assert!(csv.starts_with("updates,loss,td_error_rms,agrees_with_logged"), "{csv}");
    assert!(dir.path().join("m1.training.png").exists());

    // A file given twice, however spelled, would weigh twice: refused before it is read.
    let respelled = Path::new(&a).parent().unwrap().join(".").join(Path::new(&a).file_name().unwrap());
    let out = path(dir.path(), "twice.safetensors");
    let (code, _, stderr) =
        run_cli(&["train", "--telemetry", &a, &respelled.display().to_string(), "--steps", "2", "--out", &out]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--telemetry") && stderr.contains("given twice (as"), "{stderr}");
    assert!(!Path::new(&out).exists());

    // One queue sampled at twice the interval of the others (every other row dropped) would
    // read as half as busy: refused, naming it, with nothing written.
    let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(&a)).unwrap();
    let first = (rows[0].switch.clone(), rows[0].port.clone(), rows[0].queue);
    let mut seen = 0;
    let mixed: Vec<_> = rows
        .into_iter()
        .filter(|r| {
            if (&r.switch, &r.port, r.queue) != (&first.0, &first.1, first.2) {
                return true;
            }
            seen += 1;
            seen % 2 == 1
        })
        .collect();
    let mixed_path = dir.path().join("mixed-intervals.parquet");
    ecn_datasets::io::write_telemetry_parquet(&mixed_path, &mixed).unwrap();
    let out = path(dir.path(), "mixed.safetensors");
    let (code, _, stderr) =
        run_cli(&["train", "--telemetry", &mixed_path.display().to_string(), "--steps", "2", "--out", &out]).await;
    assert_eq!(code, Some(2), "{stderr}");
    let queue = format!("queue {}/{}/{} samples every 200000 ns", first.0, first.1, first.2);
    assert!(stderr.contains(&queue) && stderr.contains("its queues' median every 100000 ns"), "{stderr}");
    assert!(!Path::new(&out).exists());

    // A poll interval that changes part way through a file: each queue's interval is read
    // from its first steps (200 µs here, every other row kept), and the 100 µs rest would be
    // learned as if it were 200 µs telemetry. A file mostly off its interval is refused,
    // naming the change.
    // None of these recordings' intervals is off it. A segment's first transitions observe
    // fewer intervals than the model's history (the rest padded), and used to count as off.
    let (off, total) = (
        c["training"]["hyperparameters"]["off_interval_transitions"].as_u64().unwrap(),
        c["training"]["env_steps"].as_u64().unwrap(),
    );
    assert!(off == 0 && total > 0, "{off} of {total}");
    let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(&a)).unwrap();
    let mut times: Vec<u64> = rows.iter().map(|r| r.sample.ts_ns).collect();
    times.dedup();
    let slow_until = times[70];
    let changed: Vec<_> =
        rows.into_iter().filter(|r| r.sample.ts_ns > slow_until || (r.sample.ts_ns / 100_000) % 2 == 0).collect();
    let changed_path = dir.path().join("interval-change.parquet");
    ecn_datasets::io::write_telemetry_parquet(&changed_path, &changed).unwrap();
    let out = path(dir.path(), "changed.safetensors");
    let (code, _, stderr) =
        run_cli(&["train", "--telemetry", &changed_path.display().to_string(), "--steps", "2", "--out", &out]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("interval-change.parquet") && stderr.contains("did the poll interval change"), "{stderr}");
    assert!(stderr.contains("(200000 ns"), "{stderr}");
    assert!(!Path::new(&out).exists());

    // The result runs in closed loop like any model.
    let tiny = path(dir.path(), "tiny.toml");
    let stdout = ok(&["sim", "--scenario", &tiny, "--policy", &format!("model:{m1}"), "--json"]).await;
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["flows"]["completed"], summary["flows"]["total"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn recommend_gives_bounded_settings_and_keeps_when_out_of_distribution() {
    let dir = tempfile::Builder::new().prefix("ecn-recommend-").tempdir().unwrap();
    let (a, b) = record_two(dir.path()).await;
    let model = path(dir.path(), "m.safetensors");
    train(&[&a, &b], &model, "5").await;

    let stdout = ok(&["recommend", "--telemetry", &a, "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let queues = doc["queues"].as_array().unwrap();
    let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(&a)).unwrap();
    let names: std::collections::BTreeSet<String> =
        rows.iter().map(|r| format!("{}/{}/{}", r.switch, r.port, r.queue)).collect();
    assert_eq!(queues.len(), names.len(), "one recommendation per queue");
    for q in queues {
        assert!(setting_in_bounds(&q["recommended"]), "{q}");
        assert!(setting_in_bounds(&q["current"]), "{q}");
        let conf = q["confidence"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&conf), "{q}");
        assert!(!q["reason"].as_str().unwrap().is_empty());
        match q["decision"].as_str().unwrap() {
            "keep" => assert_eq!(q["recommended"], q["current"], "{q}"),
            "change" => assert!(conf >= 0.8, "a change needs the confidence threshold: {q}"),
            other => panic!("decision {other}"),
        }
        assert_eq!(q["baseline"]["name"], "huawei-latency");
    }
    assert_eq!(doc["unsampled_queues"], serde_json::json!([]));

    // As cumulative counters, with one queue read only once: that reading is its baseline, no
    // sample, so it has no recommendation, and the output says so rather than leave it out.
    let mut totals = std::collections::HashMap::new();
    let first = format!("{}/{}/{}", rows[0].switch, rows[0].port, rows[0].queue);
    let mut seen_first = false;
    let cumulative: Vec<_> = rows
        .iter()
        .filter(|r| {
            let is_first = format!("{}/{}/{}", r.switch, r.port, r.queue) == first;
            let keep = !(is_first && seen_first);
            seen_first |= is_first;
            keep
        })
        .map(|r| {
            let mut c = r.clone();
            let t = totals.entry((r.switch.clone(), r.port.clone(), r.queue)).or_insert([0u64; 4]);
            for (total, v) in t.iter_mut().zip([
                &mut c.sample.tx_bytes,
                &mut c.sample.tx_pkts,
                &mut c.sample.ecn_marked_pkts,
                &mut c.sample.paused_ns,
            ]) {
                *total += *v;
                *v = *total;
            }
            c
        })
        .collect();
    let cumulative_path = dir.path().join("cumulative.parquet");
    ecn_datasets::io::write_telemetry_parquet_with(
        &cumulative_path,
        &cumulative,
        ecn_datasets::telemetry::CounterMode::Cumulative,
    )
    .unwrap();
    let cumulative_path = cumulative_path.display().to_string();
    let stdout = ok(&["recommend", "--telemetry", &cumulative_path, "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["queues"].as_array().unwrap().len(), names.len() - 1);
    assert_eq!(doc["unsampled_queues"], serde_json::json!([first]));
    let stdout = ok(&["recommend", "--telemetry", &cumulative_path, "--model", &model]).await;
    assert!(stdout.contains("no sample, so no recommendation, for 1 queue (") && stdout.contains(&first), "{stdout}");

    // The same file with every queue 50× deeper than anything in training: the model must not
    // guess.
    let deep: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut deep = r.clone();
            deep.sample.queue_bytes_avg = 30_000_000.0;
            deep.sample.queue_bytes_max = 32_000_000;
            deep.sample.queue_bytes = 31_000_000;
            deep
        })
        .collect();
    let deep_path = dir.path().join("deep.parquet");
    ecn_datasets::io::write_telemetry_parquet(&deep_path, &deep).unwrap();
    let stdout = ok(&["recommend", "--telemetry", &deep_path.display().to_string(), "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    for q in doc["queues"].as_array().unwrap() {
        assert_eq!(q["decision"], "keep", "{q}");
        assert_eq!(q["recommended"], q["current"]);
        assert!(q["reason"].as_str().unwrap().contains("out of the training distribution"), "{q}");
    }

    // The same file from 800G ports, a rate the model never trained on: keep, and say so,
    // unless the operator allows recommendations there.
    let fast: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut fast = r.clone();
            fast.sample.link_bps = 800_000_000_000;
            fast
        })
        .collect();
    let fast_path = dir.path().join("fast.parquet").display().to_string();
    ecn_datasets::io::write_telemetry_parquet(Path::new(&fast_path), &fast).unwrap();
    let untrained = "the model never trained on 800G ports (its card lists 100G, 400G)";
    let stdout = ok(&["recommend", "--telemetry", &fast_path, "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    for q in doc["queues"].as_array().unwrap() {
        assert_eq!(q["decision"], "keep", "{q}");
        assert_eq!(q["recommended"], q["current"]);
        assert!(q["reason"].as_str().unwrap().contains(untrained), "{q}");
    }
    let stdout =
        ok(&["recommend", "--telemetry", &fast_path, "--model", &model, "--json", "--allow-untrained-rates"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    // No queue is held for it; a decision from the model says what was allowed.
    let queues = doc["queues"].as_array().unwrap();
    for q in queues {
        let reason = q["reason"].as_str().unwrap();
        assert!(!reason.contains(untrained) || reason.contains(&format!("(allowed although {untrained})")), "{q}");
    }
    let allowed = format!("(allowed although {untrained})");
    assert!(queues.iter().any(|q| q["reason"].as_str().unwrap().contains(&allowed)), "{queues:?}");

    // The same file with every other sample of each queue left out, and spans left implicit, as
    // from a poller at twice the model's control interval: keep, and say so, unless the
    // operator allows it.
    let mut seen = std::collections::HashMap::new();
    let slow: Vec<_> = rows
        .iter()
        .filter(|r| {
            let n = seen.entry((r.switch.clone(), r.port.clone(), r.queue)).or_insert(0);
            *n += 1;
            *n % 2 == 0
        })
        .map(|r| TelemetrySample { sample: QueueSample { span_ns: 0, ..r.sample }, ..r.clone() })
        .collect();
    let slow_path = dir.path().join("slow.parquet").display().to_string();
    ecn_datasets::io::write_telemetry_parquet(Path::new(&slow_path), &slow).unwrap();
    let other = "the model trained on 100µs telemetry intervals, and this queue's cover 200µs";
    let stdout = ok(&["recommend", "--telemetry", &slow_path, "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["queues"].as_array().unwrap().len(), names.len(), "{stdout}");
    for q in doc["queues"].as_array().unwrap() {
        assert_eq!((&q["decision"], &q["recommended"]), (&Value::from("keep"), &q["current"]), "{q}");
        assert!(q["reason"].as_str().unwrap().contains(other), "{q}");
    }
    let stdout =
        ok(&["recommend", "--telemetry", &slow_path, "--model", &model, "--json", "--allow-untrained-intervals"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let queues = doc["queues"].as_array().unwrap();
    for q in queues {
        let reason = q["reason"].as_str().unwrap();
        assert!(!reason.contains(other) || reason.contains(&format!("(allowed although {other}")), "{q}");
    }
    let allowed = format!("(allowed although {other}");
    assert!(queues.iter().any(|q| q["reason"].as_str().unwrap().contains(&allowed)), "{queues:?}");

    // One late poll (140 µs, within --max-gap) just before the oldest of the three intervals the
    // model observes: that interval covers 140 µs, outside the card's 0.8-1.25, so every queue
    // is held, as `run` holds it. `recommend` used to keep only the three samples and give the
    // oldest the nominal 100 µs, reading 140 µs of bytes as 100 µs of rate.
    let mut last_ts: std::collections::HashMap<(String, String, u8), Vec<u64>> = std::collections::HashMap::new();
    for r in &rows {
        last_ts.entry((r.switch.clone(), r.port.clone(), r.queue)).or_default().push(r.sample.ts_ns);
    }
    let late: Vec<_> = rows
        .iter()
        .map(|r| {
            let ts = &last_ts[&(r.switch.clone(), r.port.clone(), r.queue)];
            let mut r = r.clone();
            if r.sample.ts_ns < ts[ts.len() - 3] {
                r.sample.ts_ns -= 40_000;
            }
            // The steps are the time covered, as a poller that leaves its spans implicit says.
            r.sample.span_ns = 0;
            r
        })
        .collect();
    let late_path = dir.path().join("late.parquet").display().to_string();
    ecn_datasets::io::write_telemetry_parquet(Path::new(&late_path), &late).unwrap();
    let stdout = ok(&["recommend", "--telemetry", &late_path, "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["queues"].as_array().unwrap().len(), names.len(), "{stdout}");
    for q in doc["queues"].as_array().unwrap() {
        assert_eq!((&q["decision"], &q["recommended"]), (&Value::from("keep"), &q["current"]), "{q}");
        assert!(q["reason"].as_str().unwrap().contains("this queue's cover 140µs"), "{q}");
    }

    // One queue with ECN marking off (Pmax 0, outside the bounds): that queue is told to change
    // into the bounds, and the others still get their recommendations.
    let first = &rows[0];
    let (sw, port, queue) = (first.switch.clone(), first.port.clone(), first.queue);
    let off: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if (&r.switch, &r.port, r.queue) == (&sw, &port, queue) {
                r.sample.pmax = 0.0;
            }
            r
        })
        .collect();
    let off_path = dir.path().join("ecn-off.parquet");
    ecn_datasets::io::write_telemetry_parquet(&off_path, &off).unwrap();
    let stdout = ok(&["recommend", "--telemetry", &off_path.display().to_string(), "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let queues = doc["queues"].as_array().unwrap();
    assert_eq!(queues.len(), names.len(), "{stdout}");
    let fixed: Vec<&Value> = queues.iter().filter(|q| q["decision"] == "change" && q["confidence"] == 1.0).collect();
    assert!(fixed.iter().any(|q| q["reason"].as_str().unwrap().contains("outside the bounds")), "{stdout}");
    assert!(queues.iter().all(|q| setting_in_bounds(&q["recommended"])), "{stdout}");

    // The table names every queue.
    let table = ok(&["recommend", "--telemetry", &a, "--model", &model]).await;
    for n in &names {
        assert!(table.contains(n.as_str()), "{n} missing from:\n{table}");
    }

    // Bad input: exit 2, naming the problem; a missing model, a file that is not Parquet.
    let junk = dir.path().join("junk.parquet");
    std::fs::write(&junk, b"PAR1 not really").unwrap();
    for (args, needle) in [
        (vec!["recommend", "--telemetry", &a, "--model", "/nonexistent/x.safetensors"], "x.safetensors"),
        (vec!["recommend", "--telemetry", junk.to_str().unwrap(), "--model", &model], "junk.parquet"),
        (vec!["recommend", "--telemetry", &a, "--model", &model, "--min-confidence", "1.5"], "--min-confidence"),
        (vec!["train", "--telemetry", "/nonexistent.parquet", "--out", &model], "nonexistent.parquet"),
    ] {
        let (code, _, stderr) = run_cli(&args).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn record_and_recommend_read_a_live_actuator() {
    let dir = tempfile::Builder::new().prefix("ecn-live-").tempdir().unwrap();
    let (a, b) = record_two(dir.path()).await;
    let model = path(dir.path(), "m.safetensors");
    train(&[&a, &b], &model, "5").await;

    let actuator = Actuator::start(&["--backend", "sim", "--scenario", "websearch-50"]).await;
    let url = actuator.url();
    let out = path(dir.path(), "live.parquet");
    let stdout = ok(&["record", "--target", &url, "--duration", "2s", "--out", &out]).await;
    assert!(stdout.contains("(sim backend)"), "{stdout}");
    let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(&out)).unwrap();
    let queues: std::collections::BTreeSet<String> =
        rows.iter().map(|r| format!("{}/{}/{}", r.switch, r.port, r.queue)).collect();
    assert!(queues.len() > 1 && rows.len() >= 2 * queues.len(), "{} rows for {} queues", rows.len(), queues.len());

    let stdout = ok(&["recommend", "--target", &url, "--model", &model, "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["queues"].as_array().unwrap().len(), queues.len());
    for q in doc["queues"].as_array().unwrap() {
        assert!(setting_in_bounds(&q["recommended"]), "{q}");
    }
    // Reading wrote nothing: the actuator's journal holds no apply.
    let journal = std::fs::read_to_string(&actuator.journal).unwrap_or_default();
    assert!(!journal.contains("\"apply\""), "{journal}");

    let (code, _, stderr) = run_cli(&["record", "--target", &url, "--duration", "soon", "--out", &out]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--duration"), "{stderr}");
}

/// `--target sim` (or a built-in scenario's name) stands in for a real fabric, as for `run`:
/// `recommend` and `record` read a simulated fabric started in the process, behind the same
/// gRPC interface, and stop it after. It needs no token or CA, and refuses them.
#[tokio::test(flavor = "multi_thread")]
async fn recommend_and_record_read_a_simulated_fabric_as_a_target() {
    let dir = tempfile::Builder::new().prefix("ecn-sim-target-").tempdir().unwrap();
    let stdout = ok(&["recommend", "--target", "websearch-50", "--json"]).await;
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["source"], "websearch-50");
    let queues = doc["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 24, "websearch-50's data queues");
    for q in queues {
        assert!(setting_in_bounds(&q["recommended"]), "{q}");
        assert!(!q["reason"].as_str().unwrap().contains("unbroken interval"), "read after the warm-up: {q}");
    }
    let out = path(dir.path(), "sim.parquet");
    let stdout = ok(&["record", "--target", "sim", "--duration", "1s", "--out", &out]).await;
    assert!(stdout.contains("from sim (sim backend) over 1s"), "{stdout}");
    let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(&out)).unwrap();
    assert!(rows.len() >= 24 * 10, "{} rows", rows.len());

    let token = path(dir.path(), "token");
    std::fs::write(&token, "secret\n").unwrap();
    let (code, _, stderr) = run_cli(&["recommend", "--target", "sim", "--token-file", &token]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--token-file: the simulated fabric of --target sim"), "{stderr}");
    // A scenario file is no target; the message says what is.
    let (code, _, stderr) = run_cli(&["recommend", "--target", &token]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("give an actuator's URL (http:// or https://), `sim`, or a built-in"), "{stderr}");
}

/// `--scenario` chooses the simulated fabric of `recommend --target sim`. The built-ins start on
/// hpcc-alibaba's thresholds, far above any the shipped models trained from, so every queue is
/// a keep, "out of the training distribution"; a scenario that starts on huawei-latency gets
/// the model's judgement for every queue. An HPCC configuration, whose flows start late, is
/// read too. The flag configures that fabric and nothing else: with an actuator's URL, or a
/// built-in's name as the target, it is refused.
#[tokio::test(flavor = "multi_thread")]
async fn recommend_reads_the_simulated_fabric_of_a_scenario_file() {
    let dir = tempfile::Builder::new().prefix("ecn-sim-scenario-").tempdir().unwrap();
    let out_of_range = |doc: &Value| {
        let queues = doc["queues"].as_array().unwrap();
        assert_eq!(queues.len(), 24, "websearch-50's data queues");
        queues.iter().filter(|q| q["reason"].as_str().unwrap().contains("out of the training distribution")).count()
    };
    let builtin: Value = serde_json::from_str(&ok(&["recommend", "--target", "sim", "--json"]).await).unwrap();
    assert_eq!(out_of_range(&builtin), 24, "{builtin}");

    let scenario = path(dir.path(), "latency.toml");
    std::fs::write(&scenario, "base = \"websearch-50\"\n[switch]\necn = \"baseline:huawei-latency\"\n").unwrap();
    let args = ["recommend", "--target", "sim", "--scenario", &scenario, "--seed", "7", "--json"];
    let doc: Value = serde_json::from_str(&ok(&args).await).unwrap();
    assert_eq!(doc["source"], format!("{scenario} (seed 7)"), "named by its scenario");
    assert_eq!(out_of_range(&doc), 0, "{doc}");
    for q in doc["queues"].as_array().unwrap() {
        assert_eq!(q["current"]["kmin_bytes"], 7000, "huawei-latency's Kmin: {q}");
        assert!(q["confidence"].as_f64().unwrap() > 0.0, "judged by the model: {q}");
        assert!(setting_in_bounds(&q["recommended"]), "{q}");
    }

    // An HPCC configuration's flows start 2 s in. Paced at the time scale of 0.01, that empty
    // lead-in took 200 s, and `recommend` gave up after 30 s without telemetry; it runs at once.
    let ls16 = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference/ls16/config.txt");
    let doc: Value =
        serde_json::from_str(&ok(&["recommend", "--target", "sim", "--scenario", ls16, "--json"]).await).unwrap();
    let queues = doc["queues"].as_array().unwrap();
    assert!(!queues.is_empty(), "{doc}");
    for q in queues {
        assert!(!q["reason"].as_str().unwrap().contains("unbroken interval"), "read after the warm-up: {q}");
    }

    for (args, said) in [
        (["--target", "http://127.0.0.1:9", "--scenario", &scenario], "--scenario configures the simulated fabric"),
        (["--target", "http://127.0.0.1:9", "--seed", "7"], "--seed configures the simulated fabric"),
        (["--target", "mixed", "--scenario", &scenario], "names a built-in scenario, and --scenario"),
    ] {
        let (code, _, stderr) = run_cli(&[&["recommend"], args.as_slice()].concat()).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

/// The actuator dies half way through `record --target`: the telemetry read until then is
/// written all the same, and the exit code (1) and message say the recording is short. It
/// used to exit 1 with nothing written.
#[tokio::test(flavor = "multi_thread")]
async fn a_recording_cut_short_keeps_what_it_read() {
    let dir = tempfile::Builder::new().prefix("ecn-live-cut-").tempdir().unwrap();
    let actuator = Actuator::start(&["--backend", "sim", "--scenario", "websearch-50"]).await;
    let url = actuator.url();
    let out = path(dir.path(), "cut.parquet");
    let record = tokio::spawn({
        let (url, out) = (url.clone(), out.clone());
        async move { run_cli(&["record", "--target", &url, "--duration", "60s", "--out", &out]).await }
    });
    // Some telemetry has been served (the simulated clock has moved) and read (the recorder
    // started, its file begun, 3 s before: a loaded machine's slow start had none), then the
    // actuator dies.
    actuator.wait_for_telemetry_time(2_000_000, Duration::from_secs(60)).await;
    recording_started(&out).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(actuator);
    let (code, stdout, stderr) = tokio::time::timeout(Duration::from_secs(60), record).await.unwrap().unwrap();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{url}: ")) && stderr.contains("short of --duration 60s"), "{stderr}");
    assert!(stdout.contains("before the stream was lost or stopped"), "{stdout}");
    let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(&out)).unwrap();
    assert!(!rows.is_empty());
    assert!(stderr.contains(&format!("batches read until then are in {out}")), "{stderr}");
}

/// Ctrl-C during `record --target` keeps what was read, as a lost stream does: an hour of
/// telemetry is not lost to the operator's interrupt. It used to end with nothing written. So
/// does a hangup (the terminal closed), whose default action would lose it all. The recording
/// is written as it comes, to `<out>.tmp` (it used to be held in memory to the end), and
/// appears under its name when it ends.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_recording_keeps_what_it_read() {
    let dir = tempfile::Builder::new().prefix("ecn-live-int-").tempdir().unwrap();
    let actuator = Actuator::start(&["--backend", "sim", "--scenario", "websearch-50"]).await;
    for (signal, said, ext) in [("INT", "interrupted (SIGINT)", "parquet"), ("HUP", "stopped (SIGHUP)", "csv")] {
        let out = path(dir.path(), &format!("{signal}.{ext}"));
        let child = recording(&actuator.url(), &out);
        actuator.wait_for_telemetry_time(2_000_000, Duration::from_secs(60)).await;
        recording_started(&out).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!Path::new(&out).exists(), "{out} before the recording ended");
        // Parquet is written a row group (64 Ki rows) at a time; CSV, as rows come.
        if ext == "csv" {
            ecn_tests::eventually("the recording written as it comes", Duration::from_secs(30), || {
                let written = temporary_of(&out).and_then(|t| std::fs::metadata(t).ok()).map_or(0, |m| m.len());
                std::future::ready((written > 64 << 10).then_some(()))
            })
            .await;
        }
        ecn_tests::send_signal(child.id(), signal);
        let done = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(said) && stderr.contains("short of --duration 60s"), "{stderr}");
        assert_eq!(temporary_of(&out), None);
        let rows = match ext {
            "parquet" => ecn_datasets::io::read_telemetry_parquet(Path::new(&out)).unwrap().len(),
            _ => std::fs::read_to_string(&out).unwrap().lines().count() - 1,
        };
        assert!(rows > 0);
    }
}

/// `record --target URL --duration 60s --out OUT` as a child process, to be stopped by a signal.
fn recording(url: &str, out: &str) -> tokio::process::Child {
    ecn_tests::ecn_tuner_command()
        .args(["record", "--target", url, "--duration", "60s", "--out", out])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Wait for `record --out OUT` to begin its temporary file, which it does before connecting.
async fn recording_started(out: &str) {
    let begun = || std::future::ready(temporary_of(out).map(|_| ()));
    ecn_tests::eventually("the recording's temporary file", Duration::from_secs(30), begun).await;
}

/// The temporary file a writer of `out` keeps beside it (`OUT.PID-N.tmp`), if one is there.
fn temporary_of(out: &str) -> Option<PathBuf> {
    let out = Path::new(out);
    let name = out.file_name()?.to_string_lossy().into_owned();
    std::fs::read_dir(out.parent()?).ok()?.flatten().map(|e| e.path()).find(|p| {
        let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        n.starts_with(&name) && n.ends_with(".tmp")
    })
}

/// Ctrl-C while `record` is still connecting (to an actuator that accepts the connection and
/// never answers) ends it saying so, exit 1, with no file and no temporary one left: it used to
/// die of the signal (130) and leave an empty temporary file.
#[tokio::test(flavor = "multi_thread")]
async fn a_recording_interrupted_before_its_stream_opens_leaves_nothing() {
    let dir = tempfile::Builder::new().prefix("ecn-live-early-").tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mute = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let out = path(dir.path(), "early.parquet");
    let child = recording(&url, &out);
    // Timed from the file's start, not from the spawn (a loaded machine takes a second or more
    // to load the binary): the signal must come while it connects.
    recording_started(&out).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    ecn_tests::send_signal(child.id(), "INT");
    let done = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted (SIGINT) before any telemetry was read"), "{stderr}");
    assert!(!Path::new(&out).exists() && temporary_of(&out).is_none());
    mute.abort();
}

/// The bad-file suite through `recommend`: without `--repair` every corrupted file exits 2
/// naming the file (and the row and column where one applies); with `--repair` the repairable
/// ones give the clean file's recommendations, for every queue whose last `history` samples
/// repair left alone (a queue whose newest samples were dropped has less history, by design).
#[tokio::test(flavor = "multi_thread")]
async fn recommend_refuses_bad_files_and_repairs_the_repairable() {
    use ecn_tests::telemetry_fixtures::{write_fixtures, INTERVALS, INTERVAL_NS};
    let dir = tempfile::Builder::new().prefix("ecn-recommend-bad-").tempdir().unwrap();
    let (a, b) = record_two(dir.path()).await;
    let model = path(dir.path(), "m.safetensors");
    train(&[&a, &b], &model, "5").await;
    let fixtures = write_fixtures(dir.path());
    let recommend = |file: String, repair: bool| {
        let model = model.clone();
        async move {
            let mut args =
                vec!["recommend".to_string(), "--telemetry".into(), file, "--model".into(), model, "--json".into()];
            if repair {
                args.push("--repair".into());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(&args).await
        }
    };
    let clean = fixtures.iter().find(|f| f.problem.is_none() && f.counter_bits == 64).expect("a clean fixture");
    let (code, stdout, stderr) = recommend(clean.path.display().to_string(), false).await;
    assert_eq!(code, Some(0), "{stderr}");
    let by_queue = |json: &str| -> std::collections::BTreeMap<String, Value> {
        let doc: Value = serde_json::from_str(json).unwrap();
        doc["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| {
                (format!("{}/{}/{}", q["switch"].as_str().unwrap(), q["port"].as_str().unwrap(), q["queue"]), q.clone())
            })
            .collect()
    };
    let want = by_queue(&stdout);
    assert!(!want.is_empty());
    let last_ts = INTERVALS * INTERVAL_NS;
    for f in fixtures.iter().filter(|f| f.counter_bits == 64) {
        let file = f.path.display().to_string();
        let (code, _, stderr) = recommend(file.clone(), false).await;
        assert!(!stderr.contains("panicked"), "{}: {stderr}", f.name);
        match &f.problem {
            None => assert_eq!(code, Some(0), "{}: {stderr}", f.name),
            Some(p) => {
                assert_eq!(code, Some(2), "{}: {stderr}", f.name);
                assert!(stderr.contains(f.path.file_name().unwrap().to_str().unwrap()), "{}: {stderr}", f.name);
                if let Some(row) = p.row {
                    assert!(stderr.contains(&format!("row {row},")), "{}: {stderr}", f.name);
                }
                if let Some(column) = p.column {
                    assert!(stderr.contains(&format!("column `{column}`")), "{}: {stderr}", f.name);
                }
            }
        }
        let (code, stdout, stderr) = recommend(file, true).await;
        assert!(!stderr.contains("panicked"), "{}: {stderr}", f.name);
        let Some(dropped) = &f.repaired else {
            assert_eq!(code, Some(2), "{}: unrepairable, still refused: {stderr}", f.name);
            continue;
        };
        assert_eq!(code, Some(0), "{}: {stderr}", f.name);
        let got = by_queue(&stdout);
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{}", f.name);
        for (queue, rec) in &got {
            let touched = dropped.iter().any(|(k, ts)| k.to_string() == *queue && *ts + 4 * INTERVAL_NS > last_ts);
            if !touched {
                assert_eq!(rec, &want[queue], "{}: {queue}", f.name);
            }
        }
    }
}
