//! End-to-end: the shipped `model:default` still wins where README "Learning / Results" says it
//! does, measured the way the acceptance figures are, with `ecn-tuner eval --reference` on the
//! 20 fresh seeds 401–420 of the three standard scenarios.
//!
//! This guards the checkpoint against changes elsewhere (features, simulator physics, the
//! template, inference) that would leave it loading fine but deciding badly. The bounds are the
//! acceptance criteria, not the published figures, so that a CPU whose floating point breaks
//! an argmax tie differently, and thus runs other trajectories, still passes: the published
//! small-flow interval is [−14.7%, −9.2%], far from zero.

use ecn_tests::run_cli_within;
use serde_json::Value;
use std::time::Duration;

const SCENARIOS: [&str; 3] = ["websearch-50", "hadoop-50", "mixed"];
const MODEL: &str = "model:default";
const ACC: &str = "model:acc-baseline";
const REFERENCE: &str = "baseline:huawei-latency";

#[tokio::test(flavor = "multi_thread")]
async fn shipped_default_model_beats_the_best_static_row_and_the_acc_agent_on_fresh_seeds() {
    let mut args = vec!["eval", "--seeds", "20", "--seed-base", "401", "--reference", REFERENCE, "--json"];
    for s in SCENARIOS {
        args.extend(["--scenario", s]);
    }
    args.extend(["--policy", MODEL, "--policy", ACC]);
    // About 2 minutes on 2 idle cores; the guard leaves room for a busy machine.
    let (code, stdout, stderr) = run_cli_within(&args, Duration::from_secs(30 * 60)).await;
    assert_eq!(code, Some(0), "eval failed:\n{stderr}");
    let doc: Value = serde_json::from_str(&stdout).expect("one JSON document");
    let runs = doc["runs"].as_array().expect("runs");
    let rows = doc["comparisons"][0]["rows"].as_array().expect("comparison rows");
    // Each row holds a policy's change against the reference, seed-paired over the 20 seeds.
    let row = |scenario: &str, policy: &str| {
        let r = rows
            .iter()
            .find(|r| r["scenario"] == scenario && r["policy"] == policy)
            .unwrap_or_else(|| panic!("no row for {scenario} / {policy}"));
        assert_eq!(r["small_p99"]["seeds"], 20, "{scenario} / {policy}: one run per seed");
        r
    };

    // The small-flow tail beats huawei-latency's on the mean over the scenarios, with the 95%
    // interval clear of zero.
    let small = &row("mean", MODEL)["small_p99"];
    eprintln!("shipped model against {REFERENCE}: <100KB p99 {small}");
    assert!(small["high"].as_f64().unwrap() < 0.0, "the small-flow gain is not significant: {small}");

    let change = |scenario: &str, policy: &str, figure: &str| row(scenario, policy)[figure]["mean"].as_f64().unwrap();
    for s in SCENARIOS {
        // No more than 5% slower for flows of 1 MB and more, in each scenario.
        let large = change(s, MODEL, "large_p50");
        eprintln!("{s}: ≥1MB p50 {:+.1}%", large * 100.0);
        assert!(large <= 0.05, "{s}: large flows {:+.1}% against {REFERENCE}", large * 100.0);
        // Lower small-flow p99 than the ACC-style agent, in each scenario: both changes are
        // against the same reference mean, so they order as the two means do.
        let (model, acc) = (change(s, MODEL, "small_p99"), change(s, ACC, "small_p99"));
        assert!(model < acc, "{s}: <100KB p99 {model:+.3} against the ACC-style agent's {acc:+.3} (changes)");
    }

    // No pause frames beyond the reference's, and no drops.
    for r in runs.iter().filter(|r| r["policy"] == MODEL) {
        let twin = runs
            .iter()
            .find(|x| x["policy"] == REFERENCE && x["scenario"] == r["scenario"] && x["seed"] == r["seed"])
            .expect("the reference ran the same seed");
        let pauses = |run: &Value| run["pfc"]["pause_frames"].as_u64().expect("pause_frames");
        assert!(pauses(r) <= pauses(twin), "{} against {}", r["pfc"], twin["pfc"]);
        assert_eq!(r["drops"], 0, "{} seed {}", r["scenario"], r["seed"]);
    }
}
