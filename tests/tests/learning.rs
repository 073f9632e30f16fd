//! End-to-end: `ecn-tuner train` writes a checkpoint, card, curve CSV and plot; training is
//! reproducible by seed; the result runs as `model:PATH` in `sim` and `eval`, in closed
//! loop; and bad input exits 2.

use ecn_tests::{run_cli, run_cli_with_env, START_TIMEOUT};
use serde_json::Value;
use std::path::Path;

/// A small fabric with a short arrival window: an episode is a few dozen decisions.
const TINY: &str = "base = \"incast-15\"\nname = \"tiny-incast\"\nduration = \"2ms\"\ndrain = \"20ms\"\n";

/// A temporary folder holding the tiny scenario as `tiny.toml`.
fn tiny_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    std::fs::write(dir.path().join("tiny.toml"), TINY).unwrap();
    dir
}

/// `train` on the tiny scenario for `steps` steps: exit code, stdout, stderr.
async fn train_for(dir: &Path, out: &str, seed: &str, steps: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    train_with_env(dir, out, seed, steps, extra, &[]).await
}

/// [`train_for`] with these environment variables set.
async fn train_with_env(
    dir: &Path,
    out: &str,
    seed: &str,
    steps: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let tiny = dir.join("tiny.toml").display().to_string();
    let mut args = vec![
        "train",
        "--scenario",
        "training-mix",
        &tiny,
        "--eval-scenario",
        &tiny,
        "--eval-seed",
        "77",
        "--steps",
        steps,
        "--eval-every",
        "120",
        "--seed",
        seed,
        "--out",
        out,
    ];
    args.extend(extra);
    run_cli_with_env(&args, env, START_TIMEOUT).await
}

/// A model trained for 240 steps, long enough for some gradient updates; its path.
async fn train(dir: &Path, out: &str, seed: &str, extra: &[&str]) -> String {
    let out = dir.join(out).display().to_string();
    let (code, stdout, stderr) = train_for(dir, &out, seed, "240", extra).await;
    assert_eq!(code, Some(0), "train failed:\n{stderr}");
    assert!(stdout.contains("selected: step"), "{stdout}");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn train_writes_a_reproducible_checkpoint_that_runs_in_closed_loop() {
    let dir = tiny_dir("ecn-train-");
    let a = train(dir.path(), "a.safetensors", "5", &[]).await;
    let b = train(dir.path(), "b.safetensors", "5", &[]).await;
    let c = train(dir.path(), "c.safetensors", "6", &[]).await;
    let bytes = |p: &str| std::fs::read(p).unwrap();
    assert_eq!(bytes(&a), bytes(&b), "the same seed gives the same weights");
    assert_ne!(bytes(&a), bytes(&c), "another seed gives other weights");

    let card: Value = serde_json::from_slice(&std::fs::read(dir.path().join("a.card.json")).unwrap()).unwrap();
    assert_eq!(card["format"], "ecn-tuner/model-card-v1");
    assert_eq!(card["observation_schema"], "ecn-tuner/obs-v1");
    assert_eq!(card["training"]["seed"], 5);
    assert_eq!(card["training"]["env_steps"], 240);
    assert!(card["training"]["updates"].as_u64().unwrap() > 0, "it learned: {}", card["training"]);
    assert_eq!(card["training"]["link_speeds_bps"], serde_json::json!([100_000_000_000u64, 400_000_000_000u64]));
    // The scenario file it trained and was evaluated on, by path as given and digest.
    let tiny = dir.path().join("tiny.toml");
    let digest = ecn_tests::sha256_hex(&tiny);
    let file = |role: &str| serde_json::json!({"path": tiny.display().to_string(), "sha256": digest, "role": role});
    assert_eq!(card["training"]["data"], serde_json::json!([file("training"), file("evaluation")]));
    assert_eq!(
        card["action_template"].as_array().unwrap().len(),
        card["network"]["actions"].as_u64().unwrap() as usize
    );
    let csv = std::fs::read_to_string(dir.path().join("a.training.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("env_steps,episodes,epsilon,loss,train_reward,eval_small_p99"), "{}", lines[0]);
    assert_eq!(lines.len(), 3, "two evaluations:\n{csv}");
    let (size, counts) = ecn_tests::chart_pixels(&dir.path().join("a.training.png"));
    assert_eq!(size, (1000, 600));
    assert!(counts.iter().all(|&n| n > 0), "every series drawn: {counts:?}");

    // The model runs in closed loop: its decisions change the settings during the run, and
    // the whole recording keeps every interval.
    let tiny = dir.path().join("tiny.toml").display().to_string();
    let policy = format!("model:{a}");
    let sim_out = dir.path().join("sim");
    let (code, stdout, stderr) = run_cli(&[
        "sim",
        "--scenario",
        &tiny,
        "--policy",
        &policy,
        "--seed",
        "3",
        "--json",
        "--out",
        &sim_out.display().to_string(),
    ])
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["policy"], policy);
    assert_eq!(summary["flows"]["total"], summary["flows"]["completed"]);
    assert_eq!(summary["drops"], 0);
    assert!(!stderr.contains("never trained on"), "the fabric it trained on:\n{stderr}");
    // Every queue has a sample every control interval (100 µs) of the run, each on a setting
    // of the card's template (stated at 100G, scaled to the port) once the model has decided,
    // and the settings move during the run.
    let rows = ecn_datasets::io::read_telemetry_parquet(&sim_out.join("telemetry.parquet")).unwrap();
    let mut queues: std::collections::BTreeMap<(String, String, u8), Vec<&ecn_datasets::QueueSample>> =
        Default::default();
    for r in &rows {
        queues.entry((r.switch.clone(), r.port.clone(), r.queue)).or_default().push(&r.sample);
    }
    let template: Vec<(u64, u64, f64)> = card["action_template"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["kmin_bytes"].as_u64().unwrap(), t["kmax_bytes"].as_u64().unwrap(), t["pmax"].as_f64().unwrap()))
        .collect();
    let sim_ns = summary["sim_ns"].as_u64().unwrap();
    let mut settings = std::collections::BTreeSet::new();
    for (q, samples) in &queues {
        assert_eq!(samples.len() as u64, sim_ns / 100_000, "{q:?}: one sample every 100 µs");
        assert!(samples.windows(2).all(|w| w[1].ts_ns - w[0].ts_ns == 100_000), "{q:?}");
        for s in &samples[1..] {
            let scale = s.link_bps / 100_000_000_000;
            let on_template =
                template.iter().any(|t| (t.0 * scale, t.1 * scale, t.2) == (s.kmin_bytes, s.kmax_bytes, s.pmax));
            assert!(on_template, "{q:?} at {} ns: {s:?} is no template setting", s.ts_ns);
            settings.insert((s.kmin_bytes, s.kmax_bytes, s.pmax.to_bits()));
        }
    }
    assert!(settings.len() > 1, "the model's decisions moved the settings: {settings:?}");

    // On 25G hosts, a rate it never trained on, it still runs, and says so once.
    let slow = dir.path().join("tiny-25g.toml");
    std::fs::write(&slow, format!("{TINY}[topology]\nhost_link = \"25Gbps\"\nfabric_link = \"100Gbps\"\n")).unwrap();
    let (code, _, stderr) =
        run_cli(&["sim", "--scenario", &slow.display().to_string(), "--policy", &policy, "--json"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let warning = "deciding for ports at 25G that this model never trained on";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    assert!(stderr.contains("trained_on=100G, 400G"), "{stderr}");

    let (code, stdout, stderr) = run_cli(&[
        "eval",
        "--scenario",
        &tiny,
        "--policy",
        &policy,
        "--policy",
        "baseline:huawei-latency",
        "--seeds",
        "1",
        "--json",
    ])
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["runs"].as_array().unwrap().len(), 2);

    // Other widths and the flow-wait credit: the card records them, and the model loads from
    // the card alone.
    assert_eq!(card["network"]["hidden"], serde_json::json!([64, 64]));
    assert_eq!(card["tuning"]["flow_wait"], serde_json::json!({"small": 0.0, "large": 0.0, "small_power": null}));
    let narrow = train(dir.path(), "narrow.safetensors", "5", &["--hidden", "16", "--flow-wait", "0.1,0.5,2"]).await;
    let card: Value = serde_json::from_slice(&std::fs::read(dir.path().join("narrow.card.json")).unwrap()).unwrap();
    assert_eq!(card["network"]["hidden"], serde_json::json!([16]));
    assert_eq!(card["tuning"]["flow_wait"], serde_json::json!({"small": 0.1, "large": 0.5, "small_power": 2.0}));
    let (code, _, stderr) =
        run_cli(&["sim", "--scenario", &tiny, "--policy", &format!("model:{narrow}"), "--seed", "3", "--json"]).await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_training_input_exits_2_naming_the_problem() {
    let dir = tempfile::Builder::new().prefix("ecn-train-bad-").tempdir().unwrap();
    let out = dir.path().join("m.safetensors").display().to_string();
    // Ten minutes of simulated time: fine sampled every second, too long at the 100 µs control
    // interval. Refused at the start, not when its first episode or evaluation comes up.
    let long = dir.path().join("long.toml");
    std::fs::write(&long, TINY.replace("drain = \"20ms\"", "drain = \"600s\"\nsample_interval = \"1s\"")).unwrap();
    let long = long.display().to_string();
    for (args, needle) in [
        (vec!["train", "--scenario", &long, "--out", &out], "a policy deciding every 100us"),
        (vec!["train", "--eval-scenario", &long, "--out", &out], "a policy deciding every 100us"),
        (vec!["train", "--out", &out, "--envs", "65"], "--envs 65: at most 64"),
        (vec!["train", "--scenario", "no-such-scenario", "--out", &out], "no-such-scenario"),
        (vec!["train", "--out", "model.bin"], "--out"),
        (vec!["train", "--out", &out, "--interval", "fast"], "--interval"),
        (vec!["train", "--out", &out, "--hidden", "64,0"], "--hidden"),
        (vec!["train", "--out", &out, "--hidden", "64,wide"], "--hidden"),
        (vec!["train", "--out", &out, "--flow-wait", "1"], "--flow-wait"),
        (vec!["train", "--out", &out, "--flow-wait", "1,1,0"], "--flow-wait"),
        (vec!["train", "--out", &out, "--eval-seed", "9001", "9001"], "--eval-seed 9001: given twice"),
        (vec!["train", "--out", &out, "--scenario", &long, "mixed", &long], "given twice"),
        (vec!["train", "--out", &out, "--eval-scenario", "mixed", "mixed"], "--eval-scenario mixed: given twice"),
        // Its default value given is the flag given: it was accepted, where any other was refused.
        (vec!["train", "--out", &out, "--max-gap", "1.5"], "--max-gap checks telemetry files"),
        (vec!["sim", "--scenario", "websearch-50", "--policy", "model:/no/such.safetensors"], "card.json"),
    ] {
        let (code, _, stderr) = run_cli(&args).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    assert!(!Path::new(&out).exists(), "nothing is written on bad input");
}

/// `record` writes the telemetry of a run under the exploratory behaviour: every queue every
/// interval, with the settings exploration put in effect, all inside the bounds.
#[tokio::test(flavor = "multi_thread")]
async fn record_writes_exploratory_telemetry_as_parquet_or_csv() {
    let dir = tiny_dir("ecn-record-");
    let tiny = dir.path().join("tiny.toml").display().to_string();
    let out = dir.path().join("rec/explore.parquet");
    let (code, stdout, stderr) =
        run_cli(&["record", "--scenario", &tiny, "--policy", "explore:4", "--out", &out.display().to_string()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("under explore:4"), "{stdout}");
    let rows = ecn_datasets::io::read_telemetry_parquet(&out).unwrap();
    assert!(rows.len() > 100, "{}", rows.len());
    let settings: std::collections::HashSet<(u64, u64)> =
        rows.iter().map(|r| (r.sample.kmin_bytes, r.sample.kmax_bytes)).collect();
    assert!(settings.len() > 5, "exploration visits many settings: {settings:?}");
    assert!(rows.iter().all(|r| r.sample.kmin_bytes >= 1000
        && r.sample.kmin_bytes < r.sample.kmax_bytes
        && r.sample.pmax > 0.0
        && r.sample.pmax <= 1.0));

    // The same run as CSV: the validated reader gives back the very rows of the Parquet file.
    let csv = dir.path().join("rec/explore.csv");
    let (code, _, stderr) =
        run_cli(&["record", "--scenario", &tiny, "--policy", "explore:4", "--out", &csv.display().to_string()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let opts = ecn_datasets::telemetry::ReadOptions::default();
    let from_csv = ecn_datasets::telemetry::load_telemetry(&csv, &opts).unwrap_or_else(|e| panic!("{e}")).to_rows();
    let from_parquet = ecn_datasets::telemetry::load_telemetry(&out, &opts).unwrap().to_rows();
    assert_eq!(from_csv, from_parquet);

    let txt = dir.path().join("x.txt");
    let (code, _, stderr) = run_cli(&["record", "--scenario", &tiny, "--out", &txt.display().to_string()]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--out") && stderr.contains(".csv"), "{stderr}");
    assert!(!txt.exists());

    // `--interval`: exploration decides, and the fabric is sampled, at it; a model decides at
    // its card's interval, so the flag is refused with one.
    let slow = dir.path().join("rec/slow.parquet").display().to_string();
    let (code, stdout, stderr) =
        run_cli(&["record", "--scenario", &tiny, "--policy", "explore:4", "--interval", "300us", "--out", &slow]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("intervals of 300us"), "{stdout}");
    let rows = ecn_datasets::io::read_telemetry_parquet(Path::new(&slow)).unwrap();
    let first = &rows[0];
    let times: Vec<u64> = rows
        .iter()
        .filter(|r| (&r.switch, &r.port, r.queue) == (&first.switch, &first.port, first.queue))
        .map(|r| r.sample.ts_ns)
        .collect();
    assert!(times.len() > 3 && times.windows(2).all(|w| w[1] - w[0] == 300_000), "{times:?}");
    for (policy, interval, needle) in [
        ("model:default", "300us", "--interval: a model decides at its card's control interval"),
        ("explore:4:1:0.5:model:default", "300us", "--interval: exploration around a model runs at the model's"),
        ("explore:4", "1ns", "--interval 1ns: the minimum is"),
    ] {
        let args = ["record", "--scenario", &tiny, "--policy", policy, "--interval", interval, "--out", &slow];
        let (code, _, stderr) = run_cli(&args).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

/// A run too short to reach its first gradient update would save its random initialization as
/// a model: refused, exit 2, and nothing written; before the reference runs and the steps, which
/// it used to wait for.
#[tokio::test(flavor = "multi_thread")]
async fn training_that_never_learned_writes_nothing() {
    let dir = tiny_dir("ecn-train-");
    let out = dir.path().join("m.safetensors").display().to_string();
    let (code, _, stderr) = train_for(dir.path(), &out, "1", "10", &[]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--steps 10: too few to start learning"), "{stderr}");
    assert!(!stderr.contains("reference baseline"), "refused before the reference runs: {stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["tiny.toml"], "nothing written");
}

/// `--steps` not a multiple of `--envs` (2 here) takes that many steps: the last round steps
/// one simulator. It used to round up to a whole round (241 ran 242).
#[tokio::test(flavor = "multi_thread")]
async fn steps_are_taken_as_given_whatever_the_simulators() {
    let dir = tiny_dir("ecn-train-");
    let out = dir.path().join("m.safetensors").display().to_string();
    let (code, _, stderr) = train_for(dir.path(), &out, "3", "241", &["--envs", "2"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let card: Value = serde_json::from_slice(&std::fs::read(dir.path().join("m.card.json")).unwrap()).unwrap();
    assert_eq!(card["training"]["env_steps"], 241);
    let csv = std::fs::read_to_string(dir.path().join("m.training.csv")).unwrap();
    let last = csv.lines().last().unwrap();
    assert!(last.starts_with("241,"), "the last evaluation is at step 241:\n{csv}");
}

/// The card's calibration belongs to the network it ships. With seed 8, 360 steps and an
/// evaluation every 120, the evaluation at step 240 wins; the calibration must be taken then,
/// on the 240 steps of transitions the buffer held (24 data queues in the tiny fabric, one
/// transition per queue per step), not at the end of training.
#[tokio::test(flavor = "multi_thread")]
async fn the_card_calibrates_the_network_it_ships() {
    let dir = tiny_dir("ecn-train-");
    let out = dir.path().join("m.safetensors").display().to_string();
    let (code, _, stderr) = train_for(dir.path(), &out, "8", "360", &[]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let card: Value = serde_json::from_slice(&std::fs::read(dir.path().join("m.card.json")).unwrap()).unwrap();
    let selected = card["evaluation"]["selected"]["env_steps"].as_u64().unwrap();
    assert_eq!(card["training"]["env_steps"], 360);
    assert_eq!(selected, 240, "the premise: an evaluation before the last one wins");
    // The cadence that offered step 240 to be selected is recorded with the rest.
    assert_eq!(card["training"]["hyperparameters"]["eval_every"], 120, "{}", card["training"]);
    let calibration = &card["calibration"];
    assert_eq!(calibration["samples"], 240 * 24, "{calibration}");
    assert!(calibration["td_error_scale"].as_f64().unwrap() > 0.0, "{calibration}");
}

/// `--portable-arithmetic` pins libtorch's CPU arithmetic, so the weights do not depend on the
/// instruction sets MKL may use. `MKL_ENABLE_INSTRUCTIONS` limits those as an older or another
/// CPU would; without the pin, on the AVX-512 Xeon this was written on, the native, AVX2 and
/// SSE4.2 paths trained three different networks in these 240 steps. The card says which
/// arithmetic trained the model.
#[tokio::test(flavor = "multi_thread")]
async fn portable_arithmetic_trains_alike_on_every_instruction_set() {
    let dir = tiny_dir("ecn-train-portable-");
    let mut weights = Vec::new();
    for isa in ["native", "AVX2", "SSE4_2"] {
        let out = dir.path().join(format!("{isa}.safetensors")).display().to_string();
        let env: &[(&str, &str)] = if isa == "native" { &[] } else { &[("MKL_ENABLE_INSTRUCTIONS", isa)] };
        let (code, _, stderr) =
            train_with_env(dir.path(), &out, "5", "240", &["--portable-arithmetic", "--device", "cpu"], env).await;
        assert_eq!(code, Some(0), "{isa}: {stderr}");
        weights.push(std::fs::read(&out).unwrap());
    }
    assert!(weights.iter().all(|w| w == &weights[0]), "MKL's instruction set changed the weights");

    let card: Value = serde_json::from_slice(&std::fs::read(dir.path().join("native.card.json")).unwrap()).unwrap();
    let arithmetic = &card["training"]["hyperparameters"]["cpu_arithmetic"];
    assert_eq!(arithmetic["portable"], true, "{arithmetic}");
    assert_eq!(
        (&arithmetic["mkl_cbwr"], &arithmetic["aten_cpu_capability"]),
        (&"COMPATIBLE".into(), &"default".into())
    );
    let plain = train(dir.path(), "plain.safetensors", "5", &["--device", "cpu"]).await;
    let card: Value =
        serde_json::from_slice(&std::fs::read(plain.replace(".safetensors", ".card.json")).unwrap()).unwrap();
    assert_eq!(card["training"]["hyperparameters"]["cpu_arithmetic"]["portable"], false);
}
