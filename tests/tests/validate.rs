//! `ecn-tuner validate` on the bad-telemetry suite: exit 2 with the file, row and column of the
//! problem; with `--repair` the repairable files pass and `--out` writes telemetry (Parquet or
//! CSV) that reads back as the clean recording (minus the samples repair dropped).

use ecn_datasets::counters::CounterWidth;
use ecn_datasets::telemetry::{load_telemetry, ReadOptions};
use ecn_tests::run_cli;
use ecn_tests::telemetry_fixtures::{clean_rows, write_fixtures};
use serde_json::Value;

#[tokio::test]
async fn validate_reports_every_bad_file_and_repairs_the_repairable() {
    let dir = tempfile::tempdir().unwrap();
    for (i, f) in write_fixtures(dir.path()).into_iter().enumerate() {
        // The 32-bit counter width is a library option; the CLI reads 64-bit counters.
        if f.counter_bits != 64 {
            continue;
        }
        let path = f.path.to_str().unwrap();
        let (code, stdout, stderr) = run_cli(&["validate", "--telemetry", path]).await;
        match &f.problem {
            None => assert_eq!(code, Some(0), "{}: {stdout}{stderr}", f.name),
            Some(p) => {
                assert_eq!(code, Some(2), "{}: {stdout}{stderr}", f.name);
                assert!(!stderr.contains("panicked"), "{}: {stderr}", f.name);
                assert!(stderr.contains(f.path.file_name().unwrap().to_str().unwrap()), "{}: {stderr}", f.name);
                if let Some(row) = p.row {
                    assert!(stderr.contains(&format!("row {row},")), "{}: {stderr}", f.name);
                }
                if let Some(column) = p.column {
                    assert!(stderr.contains(&format!("column `{column}`")), "{}: {stderr}", f.name);
                }
            }
        }
        // Repaired files are written in both formats, by turns.
        let format = if i % 2 == 0 { "parquet" } else { "csv" };
        let out = dir.path().join(format!("{}-fixed.{format}", f.name));
        let out_s = out.to_str().unwrap();
        let (code, stdout, stderr) = run_cli(&["validate", "--telemetry", path, "--repair", "--out", out_s]).await;
        match &f.repaired {
            None => assert_eq!(code, Some(2), "{}: {stdout}{stderr}", f.name),
            Some(dropped) => {
                assert_eq!(code, Some(0), "{}: {stdout}{stderr}", f.name);
                assert!(stdout.contains("ok:"), "{}: {stdout}", f.name);
                // The repaired file holds the clean rows minus the dropped samples; where one was
                // dropped there is a gap, which a repairing read marks again.
                let opts = ReadOptions { repair: true, counter_width: CounterWidth::SAI, ..ReadOptions::default() };
                let rows = load_telemetry(&out, &opts).unwrap_or_else(|e| panic!("{e}")).to_rows();
                let want: Vec<_> = clean_rows()
                    .into_iter()
                    .filter(|r| {
                        !dropped.iter().any(|(k, ts)| {
                            *ts == r.sample.ts_ns && *k.switch == *r.switch && *k.port == *r.port && k.queue == r.queue
                        })
                    })
                    .collect();
                assert_eq!(rows, want, "{}", f.name);
            }
        }
    }
}

#[tokio::test]
async fn validate_json_lists_problems_with_rows_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = write_fixtures(dir.path());
    let paths: Vec<&str> = ["clean", "nan", "duplicates"]
        .iter()
        .map(|n| fixtures.iter().find(|f| f.name == *n).unwrap())
        .map(|f| f.path.to_str().unwrap())
        .collect();
    let mut args = vec!["validate", "--json", "--telemetry"];
    args.extend(&paths);
    let (code, stdout, stderr) = run_cli(&args).await;
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let files = doc["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    assert_eq!(files[0]["ok"], true);
    assert_eq!(files[0]["rows"], 960);
    assert_eq!(files[0]["queues"], 8);
    assert_eq!(files[1]["ok"], false);
    assert_eq!(files[1]["problems"][0]["row"], 38);
    assert_eq!(files[1]["problems"][0]["column"], "queue_bytes_avg");
    assert_eq!(files[1]["problems"][0]["kind"], "not_finite");
    assert_eq!(files[2]["problem_counts"]["duplicate"], 3);

    let (code, stdout, stderr) = run_cli(&["validate", "--json", "--repair", "--telemetry", paths[2]]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["files"][0]["repaired"]["duplicate"], 3);

    let (code, _, stderr) = run_cli(&["validate", "--telemetry", paths[0], "--counters", "sideways"]).await;
    assert_eq!(code, Some(2), "{stderr}");
}

/// A repair whose every row is a cumulative baseline has no sample to write: `--out` refuses
/// (exit 2, nothing written) rather than write a file `validate` itself would refuse.
#[tokio::test]
async fn a_repair_with_no_sample_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baselines.csv");
    let rows: Vec<_> = clean_rows().into_iter().take(8).collect();
    ecn_datasets::io::write_telemetry_csv(&path, &rows).unwrap();
    let out = dir.path().join("fixed.parquet");
    let args = ["validate", "--counters", "cumulative", "--repair", "--telemetry", path.to_str().unwrap()];
    let (code, stdout, stderr) = run_cli(&[&args[..], &["--out", out.to_str().unwrap()]].concat()).await;
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("no sample to write"), "{stderr}");
    assert!(!out.exists());
}
