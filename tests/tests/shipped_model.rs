//! End-to-end: the shipped `model:default` still wins where README "Learning / Results" says it
//! does, measured the way the acceptance figures are, with `ecn-tuner eval --reference` on the
//! 20 fresh seeds 401–420 of the three standard scenarios.
//!
//! This guards the checkpoint against changes elsewhere (features, simulator physics, the
//! template, inference) that would leave it loading fine but deciding badly. The bounds are the
//! acceptance criteria, not the published figures, so that a CPU whose floating point breaks
//! an argmax tie differently, and thus runs other trajectories, still passes: the published
//! small-flow interval is [−15.1%, −8.7%], far from zero.

use ecn_tests::run_cli;
use serde_json::Value;

const SCENARIOS: [&str; 3] = ["websearch-50", "hadoop-50", "mixed"];
const MODEL: &str = "model:default";
const ACC: &str = "model:acc-baseline";
const REFERENCE: &str = "baseline:huawei-latency";

/// The mean over seeds of one figure of one (scenario, policy).
fn mean(runs: &[Value], scenario: &str, policy: &str, figure: impl Fn(&Value) -> f64) -> f64 {
    let v: Vec<f64> = runs.iter().filter(|r| r["scenario"] == scenario && r["policy"] == policy).map(figure).collect();
    assert_eq!(v.len(), 20, "{scenario} / {policy}: one run per seed");
    v.iter().sum::<f64>() / v.len() as f64
}

#[tokio::test(flavor = "multi_thread")]
async fn shipped_default_model_beats_the_best_static_row_and_the_acc_agent_on_fresh_seeds() {
    let mut args = vec!["eval", "--seeds", "20", "--seed-base", "401", "--reference", REFERENCE, "--json"];
    for s in SCENARIOS {
        args.extend(["--scenario", s]);
    }
    args.extend(["--policy", MODEL, "--policy", ACC]);
    let (code, stdout, stderr) = run_cli(&args).await;
    assert_eq!(code, Some(0), "eval failed:\n{stderr}");
    let doc: Value = serde_json::from_str(&stdout).expect("one JSON document");
    let runs = doc["runs"].as_array().expect("runs");
    let rows = doc["comparisons"][0]["rows"].as_array().expect("comparison rows");
    let row = |scenario: &str| {
        rows.iter().find(|r| r["scenario"] == scenario && r["policy"] == MODEL).unwrap_or_else(|| panic!("{scenario}"))
    };

    // The small-flow tail beats huawei-latency's on the mean over the scenarios, with the 95%
    // interval clear of zero.
    let small = &row("mean")["small_p99"];
    eprintln!("shipped model against {REFERENCE}: <100KB p99 {small}");
    assert!(small["high"].as_f64().unwrap() < 0.0, "the small-flow gain is not significant: {small}");

    let small_p99 = |r: &Value| r["slowdown"]["lt_100KB"]["p99"].as_f64().unwrap();
    for s in SCENARIOS {
        // No more than 5% slower for flows of 1 MB and more, in each scenario.
        let large = row(s)["large_p50"]["mean"].as_f64().unwrap();
        eprintln!("{s}: ≥1MB p50 {:+.1}%", large * 100.0);
        assert!(large <= 0.05, "{s}: large flows {:+.1}% against {REFERENCE}", large * 100.0);
        // Lower small-flow p99 than the ACC-style agent, in each scenario.
        let (model, acc) = (mean(runs, s, MODEL, small_p99), mean(runs, s, ACC, small_p99));
        assert!(model < acc, "{s}: <100KB p99 {model:.2} against the ACC-style agent's {acc:.2}");
    }

    // No pause frames beyond the reference's, and no drops.
    for r in runs.iter().filter(|r| r["policy"] == MODEL) {
        let twin = runs
            .iter()
            .find(|x| x["policy"] == REFERENCE && x["scenario"] == r["scenario"] && x["seed"] == r["seed"])
            .expect("the reference ran the same seed");
        assert!(r["pfc"]["pause_frames"].as_u64() <= twin["pfc"]["pause_frames"].as_u64(), "{}", r["pfc"]);
        assert_eq!(r["drops"], 0, "{} seed {}", r["scenario"], r["seed"]);
    }
}
