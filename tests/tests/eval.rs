//! End-to-end: `ecn-tuner eval` over two small scenarios, two policies and two seeds: the JSON
//! document of PRODUCT.md "JSON outputs", the files of `--out`, determinism across runs and
//! thread counts, and bad input.

use ecn_tests::run_cli;
use serde_json::Value;
use std::path::Path;

/// Two small fabrics' worth of traffic: each run takes a fraction of a second.
const TINY: &str = "base = \"websearch-50\"\nname = \"tiny\"\nduration = \"3ms\"\ndrain = \"20ms\"\n";
const TINY_HADOOP: &str = "base = \"hadoop-50\"\nname = \"tiny-hadoop\"\nduration = \"2ms\"\ndrain = \"20ms\"\n\
[topology]\nhosts_per_leaf = 4\n";

const POLICIES: [&str; 2] = ["baseline:huawei-latency", "static:400KB,1600KB,0.2"];
const BUCKETS: [&str; 6] = ["all", "lt_10KB", "10KB_100KB", "100KB_1MB", "ge_1MB", "lt_100KB"];

/// `eval` over both scenarios in `dir` with `extra` flags; the parsed stdout document.
async fn eval(dir: &Path, extra: &[&str]) -> Value {
    let tiny = dir.join("tiny.toml").display().to_string();
    let hadoop = dir.join("tiny-hadoop.toml").display().to_string();
    let mut args = vec!["eval", "--scenario", &tiny, "--scenario", &hadoop, "--seeds", "2", "--json"];
    for p in POLICIES {
        args.extend(["--policy", p]);
    }
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run_cli(&args).await;
    assert_eq!(code, Some(0), "eval failed:\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}"))
}

/// What must not change between two evaluations: everything but the wall-clock time.
fn results(doc: &Value) -> Vec<Value> {
    doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            serde_json::json!([
                r["scenario"],
                r["policy"],
                r["seed"],
                r["flows"],
                r["slowdown"],
                r["pfc"],
                r["drops"],
                r["utilization"],
                r["queue_bytes"],
                r["events"]
            ])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn eval_runs_every_combination_deterministically_and_writes_its_files() {
    let dir = tempfile::Builder::new().prefix("ecn-eval-").tempdir().unwrap();
    std::fs::write(dir.path().join("tiny.toml"), TINY).unwrap();
    std::fs::write(dir.path().join("tiny-hadoop.toml"), TINY_HADOOP).unwrap();
    let out = dir.path().join("out");
    let out_arg = out.display().to_string();

    let doc = eval(dir.path(), &["--out", &out_arg, "--jobs", "2"]).await;
    let runs = doc["runs"].as_array().expect("runs is an array");
    assert_eq!(runs.len(), 2 * 2 * 2, "scenarios × policies × seeds");

    // Scenario-major, then policy, then seed.
    let mut i = 0;
    for scenario in ["tiny", "tiny-hadoop"] {
        for policy in POLICIES {
            for seed in [101, 102] {
                let r = &runs[i];
                assert_eq!((r["scenario"].as_str(), r["policy"].as_str()), (Some(scenario), Some(policy)), "run {i}");
                assert_eq!(r["seed"], seed, "run {i}");
                i += 1;
            }
        }
    }
    for r in runs {
        let total = r["flows"]["total"].as_u64().unwrap();
        assert!(total > 20, "{r}");
        assert_eq!(r["flows"]["completed"].as_u64(), Some(total), "every flow completes: {r}");
        for bucket in BUCKETS {
            for p in ["p50", "p95", "p99"] {
                let x = &r["slowdown"][bucket][p];
                assert!(x.is_null() || x.as_f64().unwrap() >= 1.0, "{bucket}.{p} = {x}");
            }
        }
        let small =
            r["slowdown"]["lt_10KB"]["n"].as_u64().unwrap() + r["slowdown"]["10KB_100KB"]["n"].as_u64().unwrap();
        assert_eq!(r["slowdown"]["lt_100KB"]["n"].as_u64(), Some(small), "lt_100KB = the two small buckets");
        assert!(r["slowdown"]["lt_100KB"]["p99"].as_f64().is_some());
        for key in ["pause_frames", "paused_ns"] {
            assert!(r["pfc"][key].is_u64(), "pfc.{key}");
        }
        for key in ["drops", "ecn_marks", "sim_ns", "events"] {
            assert!(r[key].is_u64(), "{key}");
        }
        assert!(r["utilization"].as_f64().unwrap() > 0.0);
        assert!(r["queue_bytes"]["avg"].is_number() && r["queue_bytes"]["p99"].is_number());
        assert!(r["wall_seconds"].is_number());
    }
    // Two seeds give two different workloads.
    assert_ne!(runs[0]["flows"], runs[1]["flows"], "seeds 101 and 102 differ");

    // --out: the same runs document, the tables, one chart per scenario.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(out.join("eval.json")).unwrap()).unwrap();
    assert_eq!(results(&file), results(&doc));
    let md = std::fs::read_to_string(out.join("eval.md")).unwrap();
    for needle in ["<100KB p99", "≥1MB p50", "mean over scenarios", "| tiny-hadoop | static:400KB,1600KB,0.2 |"] {
        assert!(md.contains(needle), "eval.md lacks {needle:?}:\n{md}");
    }
    // Each chart draws both policies: a line and markers in each one's colour.
    for scenario in ["tiny", "tiny-hadoop"] {
        let (size, counts) = ecn_tests::chart_pixels(&out.join(format!("slowdown_{scenario}.png")));
        assert_eq!(size, (1400, 560), "slowdown_{scenario}.png");
        assert!(counts[0] > 500 && counts[1] > 500 && counts[2] == 0, "slowdown_{scenario}.png: {counts:?}");
    }

    // The same evaluation on one thread gives the same numbers in the same order.
    let again = eval(dir.path(), &["--jobs", "1"]).await;
    assert_eq!(results(&again), results(&doc));
}

#[tokio::test(flavor = "multi_thread")]
async fn eval_prints_the_tables_without_json() {
    let dir = tempfile::Builder::new().prefix("ecn-eval-").tempdir().unwrap();
    let tiny = dir.path().join("tiny.toml");
    std::fs::write(&tiny, TINY).unwrap();
    let (code, stdout, stderr) = run_cli(&[
        "eval",
        "--scenario",
        tiny.to_str().unwrap(),
        "--policy",
        POLICIES[0],
        "--seeds",
        "1",
        "--seed-base",
        "7",
    ])
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("| tiny | baseline:huawei-latency |"), "{stdout}");
    assert!(stdout.contains("seed 7"), "{stdout}");
    assert!(!stdout.contains("mean over scenarios"), "one scenario has no mean row:\n{stdout}");
    // Each size bucket's cell ends with its completed flows per run; over all sizes, with one
    // seed, that is the headline's completed count.
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| tiny | baseline:huawei-latency |")).collect();
    let completed = rows[0].trim_end_matches(" |").rsplit("| ").next().unwrap().split(" / ").next().unwrap();
    assert!(rows[1].ends_with(&format!(" ({completed}) |")), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn eval_bad_input_exits_2_before_running() {
    let dir = tempfile::Builder::new().prefix("ecn-eval-").tempdir().unwrap();
    let tiny = dir.path().join("tiny.toml");
    std::fs::write(&tiny, TINY).unwrap();
    let tiny = tiny.to_str().unwrap();
    let out = dir.path().join("out");

    let (code, stdout, stderr) = run_cli(&[
        "eval",
        "--scenario",
        tiny,
        "--policy",
        POLICIES[0],
        "--policy",
        "static:2MB,1MB,0.2",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--policy") && stderr.contains("static:2MB,1MB,0.2"), "{stderr}");
    assert!(stdout.is_empty(), "nothing on stdout: {stdout}");
    assert!(!out.exists(), "nothing written before the input is checked");

    let (code, _, stderr) = run_cli(&["eval", "--scenario", "no-such-scenario", "--policy", POLICIES[0]]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no-such-scenario"), "{stderr}");

    let (code, _, stderr) = run_cli(&["eval", "--scenario", tiny, "--policy", POLICIES[0], "--seeds", "0"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--seeds"), "{stderr}");

    // A repeat would run twice and count twice in the means.
    let (code, _, stderr) =
        run_cli(&["eval", "--scenario", tiny, "--policy", POLICIES[0], "--policy", POLICIES[0]]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--policy") && stderr.contains("given twice"), "{stderr}");
    let (code, _, stderr) = run_cli(&["eval", "--scenario", tiny, tiny, "--policy", POLICIES[0]]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--scenario") && stderr.contains("given twice"), "{stderr}");
    // The same file however spelled (it used to run twice).
    let respelled = dir.path().join(".").join("tiny.toml");
    let respelled = respelled.to_str().unwrap();
    let (code, _, stderr) = run_cli(&["eval", "--scenario", tiny, respelled, "--policy", POLICIES[0]]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("given twice (as"), "{stderr}");
    // One model however named: the shipped name and its file (it used to run twice).
    let model = concat!("model:", env!("CARGO_MANIFEST_DIR"), "/../models/checkpoints/default.safetensors");
    let (code, _, stderr) = run_cli(&["eval", "--scenario", tiny, "--policy", "model:default", model]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("--policy {model}: given twice (as model:default and {model})")), "{stderr}");
    // A reference given twice printed the same table twice.
    let (code, _, stderr) =
        run_cli(&["eval", "--scenario", tiny, "--policy", POLICIES[0], "--reference", "model:default", model]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("--reference {model}: given twice (as model:default and {model})")), "{stderr}");

    // A scenario named `mean` would read as the tables' mean over scenarios.
    let mean = dir.path().join("mean.toml");
    std::fs::write(&mean, TINY.replace("name = \"tiny\"", "name = \"mean\"")).unwrap();
    let (code, _, stderr) =
        run_cli(&["eval", "--scenario", tiny, mean.to_str().unwrap(), "--policy", POLICIES[0]]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("mean.toml") && stderr.contains("named `mean`"), "{stderr}");

    // A learned policy samples at its control interval (100 µs): a run that may last 10 minutes
    // is fine sampled every second, and refused for the model before any run, the static one
    // listed first included, rather than after it.
    let long = dir.path().join("long.toml");
    std::fs::write(
        &long,
        format!("{TINY}drain = \"600s\"\nsample_interval = \"1s\"\n").replace("drain = \"20ms\"\n", ""),
    )
    .unwrap();
    let (code, stdout, stderr) = run_cli(&[
        "eval",
        "--scenario",
        long.to_str().unwrap(),
        "--policy",
        POLICIES[0],
        "--policy",
        "model:default",
        "--out",
        out.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("long.toml") && stderr.contains("a policy deciding every 100us"), "{stderr}");
    assert!(stdout.is_empty() && !out.exists(), "nothing run or written: {stdout}");
}

/// A reference that is one of the policies under another spelling (the shipped model's name
/// and its file) is that policy, run once: it used to run twice and be compared with itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_reference_among_the_policies_is_found_however_spelled() {
    let dir = tempfile::Builder::new().prefix("ecn-eval-").tempdir().unwrap();
    let tiny = dir.path().join("tiny.toml");
    std::fs::write(&tiny, TINY).unwrap();
    let model = concat!("model:", env!("CARGO_MANIFEST_DIR"), "/../models/checkpoints/default.safetensors");
    let tiny = tiny.to_str().unwrap();
    let args =
        ["eval", "--scenario", tiny, "--policy", "model:default", "--reference", model, "--seeds", "1", "--json"];
    let (code, stdout, stderr) = run_cli(&args).await;
    assert_eq!(code, Some(0), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let policies: Vec<&Value> = doc["runs"].as_array().unwrap().iter().map(|r| &r["policy"]).collect();
    assert_eq!(policies, [&Value::from("model:default")], "one policy, one seed: {stdout}");
}

/// `--reference`: every other policy's change against it, per scenario and on the mean, equal to
/// the change of the means that the runs give, with an interval around it; a reference not
/// among the policies is run as well, and each reference gets its own comparison.
#[tokio::test(flavor = "multi_thread")]
async fn eval_compares_every_policy_with_the_reference_seed_by_seed() {
    let dir = tempfile::Builder::new().prefix("ecn-eval-").tempdir().unwrap();
    std::fs::write(dir.path().join("tiny.toml"), TINY).unwrap();
    std::fs::write(dir.path().join("tiny-hadoop.toml"), TINY_HADOOP).unwrap();
    let reference = "static:100KB,400KB,0.5";
    let doc = eval(dir.path(), &["--reference", reference, "--reference", POLICIES[0]]).await;
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2 * 3 * 2, "the reference runs too");
    let comparisons = doc["comparisons"].as_array().unwrap();
    assert_eq!(comparisons.len(), 2, "one per --reference");
    assert_eq!(comparisons[1]["reference"], POLICIES[0]);
    assert_eq!(comparisons[1]["rows"].as_array().unwrap().len(), 2 * 3, "the other two policies");
    let c = &comparisons[0];
    assert_eq!(c["reference"], reference);
    let rows = c["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 3, "two policies × (two scenarios + the mean)");

    let mean_of = |scenario: &str, policy: &str, f: fn(&Value) -> f64| {
        let v: Vec<f64> = runs.iter().filter(|r| r["scenario"] == scenario && r["policy"] == policy).map(f).collect();
        assert_eq!(v.len(), 2);
        v.iter().sum::<f64>() / 2.0
    };
    let small: fn(&Value) -> f64 = |r| r["slowdown"]["lt_100KB"]["p99"].as_f64().unwrap();
    let large: fn(&Value) -> f64 = |r| r["slowdown"]["ge_1MB"]["p50"].as_f64().unwrap();
    for policy in POLICIES {
        let mut per_scenario = Vec::new();
        for scenario in ["tiny", "tiny-hadoop"] {
            let row = rows.iter().find(|r| r["scenario"] == scenario && r["policy"] == policy).expect("a row");
            for (key, f) in [("small_p99", small), ("large_p50", large)] {
                let expected = mean_of(scenario, policy, f) / mean_of(scenario, reference, f) - 1.0;
                let got = &row[key];
                assert!((got["mean"].as_f64().unwrap() - expected).abs() < 1e-9, "{key}: {got} against {expected}");
                assert!(got["low"].as_f64().unwrap() <= expected && expected <= got["high"].as_f64().unwrap(), "{got}");
                assert_eq!(got["seeds"], 2);
            }
            per_scenario.push(row["small_p99"]["mean"].as_f64().unwrap());
        }
        let mean = rows.iter().find(|r| r["scenario"] == "mean" && r["policy"] == policy).unwrap();
        let expected = per_scenario.iter().sum::<f64>() / 2.0;
        assert!((mean["small_p99"]["mean"].as_f64().unwrap() - expected).abs() < 1e-9, "{mean}");
    }

    let (code, stdout, stderr) = run_cli(&[
        "eval",
        "--scenario",
        dir.path().join("tiny.toml").to_str().unwrap(),
        "--policy",
        POLICIES[0],
        "--reference",
        POLICIES[1],
        "--seeds",
        "1",
    ])
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&format!("## Against {}", POLICIES[1])), "{stdout}");
    assert!(stdout.contains("| tiny | baseline:huawei-latency | "), "{stdout}");

    let (code, _, stderr) =
        run_cli(&["eval", "--scenario", "tiny", "--policy", POLICIES[0], "--reference", "static:x"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--reference"), "{stderr}");
}

/// Two files that share a scenario name are told apart by their arguments, in the tables and in
/// every run of `--json` alike, so that runs join their comparison rows.
#[tokio::test(flavor = "multi_thread")]
async fn runs_are_named_as_their_table_rows() {
    let dir = tempfile::Builder::new().prefix("ecn-eval-").tempdir().unwrap();
    let unnamed = "base = \"websearch-50\"\nduration = \"2ms\"\ndrain = \"20ms\"\n";
    let files: Vec<String> = ["a.toml", "b.toml"]
        .iter()
        .map(|f| {
            let p = dir.path().join(f);
            std::fs::write(&p, unnamed).unwrap();
            p.display().to_string()
        })
        .collect();
    let args = ["eval", "--scenario", &files[0], &files[1], "--policy", POLICIES[0], "--reference", POLICIES[1]];
    let (code, stdout, stderr) = run_cli(&[&args[..], &["--seeds", "1", "--json"]].concat()).await;
    assert_eq!(code, Some(0), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let named = |rows: &Value| -> Vec<String> {
        let mut v: Vec<String> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["scenario"].as_str().unwrap().to_string())
            .filter(|s| s != "mean")
            .collect();
        v.dedup();
        v
    };
    assert_eq!(named(&doc["runs"]), files, "{stdout}");
    assert_eq!(named(&doc["comparisons"][0]["rows"]), files, "{stdout}");
}
