//! Checkpoints: a loaded network acts as the saved one did, a card that does not match this
//! build is refused with a clear error, and no network output can leave the bounds.

use ecn_env::tuning::{ActionTemplate, Bounds, TuningConfig};
use ecn_env::BitsPerSec;
use ecn_models::{greedy, Calibration, Checkpoint, ModelCard, QNetwork, TrainingRecord};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use tch::Device;

fn training() -> TrainingRecord {
    TrainingRecord {
        algorithm: "ddqn".into(),
        scenarios: vec!["test".into()],
        seed: 1,
        env_steps: 0,
        updates: 0,
        wall_seconds: 0.0,
        hyperparameters: serde_json::json!({}),
        data: vec![],
        link_speeds_bps: vec![100_000_000_000],
    }
}

fn checkpoint(tuning: TuningConfig) -> Checkpoint {
    tch::manual_seed(7);
    let card = ModelCard::new("test", tuning, vec![32, 32], training());
    let net = QNetwork::new(Device::Cpu, card.network.obs_dim, &card.network.hidden, card.network.actions);
    Checkpoint { card, net }
}

/// The same checkpoint with other weights: every parameter shifted. Not drawn anew from a
/// seed, because the generator is global to the process and another test's
/// `checkpoint` may reseed it in between, making the "other" weights the same ones.
fn with_other_weights(checkpoint: Checkpoint) -> Checkpoint {
    tch::no_grad(|| {
        for mut v in checkpoint.net.var_store().trainable_variables() {
            let _shifted = v.f_add_scalar_(0.25).unwrap();
        }
    });
    checkpoint
}

/// A model path in a fresh directory, removed when the guard drops.
fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(&format!("ecn-models-test-{name}-")).tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    (dir, path)
}

fn observations(dim: usize, n: usize) -> Vec<f32> {
    (0..dim * n).map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0).collect()
}

#[test]
fn a_loaded_checkpoint_acts_like_the_saved_one() {
    for tuning in [TuningConfig::default(), TuningConfig::acc()] {
        let ck = checkpoint(tuning);
        let (_dir, path) = tmp(&format!("{:?}", ck.card.tuning.template));
        ck.save(&path).unwrap();
        let loaded = Checkpoint::load(&path, Device::Cpu).unwrap();
        // The saved card records the weights file's digest.
        let digest = loaded.card.weights_sha256.clone();
        assert!(digest.as_ref().is_some_and(|d| d.len() == 64), "{digest:?}");
        assert_eq!(loaded.card, ecn_models::card::ModelCard { weights_sha256: digest, ..ck.card.clone() });
        let obs = observations(ck.card.network.obs_dim, 64);
        assert_eq!(ck.net.q_values(&obs), loaded.net.q_values(&obs));
        let actions = loaded.net.act(&obs);
        assert_eq!(ck.net.act(&obs), actions);
        let distinct: std::collections::HashSet<_> = actions.iter().collect();
        assert!(distinct.len() > 1, "a random network should not be constant: {actions:?}");
    }
}

/// A save that cannot write the card leaves the previous model whole: the old weights stay
/// under the old card, not new weights under it.
#[test]
fn a_failed_save_replaces_neither_weights_nor_card() {
    let (_dir, path) = tmp("failed-save");
    let old = checkpoint(TuningConfig::default());
    old.save(&path).unwrap();
    let old_weights = std::fs::read(&path).unwrap();
    // The card cannot be written where it goes.
    let card = ecn_models::checkpoint::card_path(&path);
    std::fs::remove_file(&card).unwrap();
    std::fs::create_dir(&card).unwrap();
    let new = with_other_weights(checkpoint(TuningConfig::default()));
    let e = new.save(&path).unwrap_err();
    assert!(e.to_string().contains("card.json"), "{e}");
    assert!(std::fs::read(&path).unwrap() == old_weights, "the old weights must stay");
    // No temporary file is left beside them.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// Weights that are not the ones the card describes (another model's of the same shape, or a
/// byte flipped) are refused, naming both files; a card without a digest (written before it
/// existed) loads them unchecked.
#[test]
fn weights_that_are_not_the_cards_fail_to_load() {
    let (_dir, path) = tmp("swapped");
    checkpoint(TuningConfig::default()).save(&path).unwrap();
    let (_other_dir, other) = tmp("other");
    with_other_weights(checkpoint(TuningConfig::default())).save(&other).unwrap();
    let mut flipped = std::fs::read(&path).unwrap();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x01;
    for weights in [std::fs::read(&other).unwrap(), flipped] {
        std::fs::write(&path, &weights).unwrap();
        let e = Checkpoint::load(&path, Device::Cpu).err().expect("refused").to_string();
        assert!(e.contains("model.safetensors") && e.contains("card.json") && e.contains("not the weights"), "{e}");
    }
    std::fs::write(&path, std::fs::read(&other).unwrap()).unwrap();
    rewrite_card(&path, |v| {
        v.as_object_mut().unwrap().remove("weights_sha256");
    });
    assert!(Checkpoint::load(&path, Device::Cpu).is_ok(), "a card without a digest");
}

fn rewrite_card(path: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let card = ecn_models::checkpoint::card_path(path);
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&card).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&card, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn a_card_that_does_not_match_this_build_fails_to_load() {
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("observation_schema", Box::new(|v| v["observation_schema"] = "ecn-tuner/obs-v0".into())),
        ("action_template", Box::new(|v| v["action_template"][0]["kmin_bytes"] = 3.into())),
        ("network.obs_dim", Box::new(|v| v["network"]["obs_dim"] = 5.into())),
        ("observation_features", Box::new(|v| v["tuning"]["history"] = 2.into())),
        ("format", Box::new(|v| v["format"] = "something-else".into())),
        // Fields this build cannot read (a variant or a field another version wrote) are
        // named by their path, not as the whole card's JSON.
        ("tuning.template", Box::new(|v| v["tuning"]["template"] = "no-such-template".into())),
        ("tuning.features", Box::new(|v| v["tuning"]["features"] = "tuner-rate".into())),
        (
            "training",
            Box::new(|v| {
                v["training"].as_object_mut().unwrap().remove("algorithm");
            }),
        ),
        ("network.hidden[1]", Box::new(|v| v["network"]["hidden"][1] = "64".into())),
        ("card", Box::new(|v| *v = serde_json::json!([]))),
        (
            "card",
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("observation_features");
            }),
        ),
        // Bounds no setting fits, and an interval too short to simulate, are refused up front
        // (clamping into such bounds used to panic).
        ("tuning.bounds", Box::new(|v| v["tuning"]["bounds"]["kmin_min_bytes"] = 20_000_000.into())),
        ("tuning.bounds", Box::new(|v| v["tuning"]["bounds"]["pmax_max"] = 0.0005.into())),
        ("tuning.control_interval", Box::new(|v| v["tuning"]["control_interval"] = "1ns".into())),
        // Hand-edited sizes that would exhaust memory while the card is checked or the network
        // built, and a discount that makes every expected gain meaningless.
        ("tuning.history", Box::new(|v| v["tuning"]["history"] = 1_000_000_000_000u64.into())),
        ("network.hidden", Box::new(|v| v["network"]["hidden"] = serde_json::json!(vec![4096; 2000]))),
        // A reward `train --reward-weights` would refuse, and a link speed no port has.
        ("tuning.reward", Box::new(|v| v["tuning"]["reward"]["depth"] = (-5.0).into())),
        ("training.link_speeds_bps", Box::new(|v| v["training"]["link_speeds_bps"] = serde_json::json!([0]))),
        (
            "training.hyperparameters.ddqn.gamma",
            Box::new(|v| v["training"]["hyperparameters"] = serde_json::json!({"ddqn": {"gamma": 1e308}})),
        ),
    ];
    for (i, (field, edit)) in cases.into_iter().enumerate() {
        let (_dir, path) = tmp(&format!("mismatch{i}"));
        checkpoint(TuningConfig::default()).save(&path).unwrap();
        rewrite_card(&path, edit);
        let e = Checkpoint::load(&path, Device::Cpu).err().expect("must refuse");
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains("card.json"), "the message names the card file: {e}");
        let another_version = ["format", "observation_schema", "tuning.template", "tuning.features", "training"];
        if another_version.contains(&field) || e.message.contains("missing field") {
            assert!(e.message.contains("retrain the model"), "what to do: {e}");
        }
    }
    // Something after the card (a second one pasted after it) is no card either.
    let (_dir, path) = tmp("trailing");
    checkpoint(TuningConfig::default()).save(&path).unwrap();
    let card = ecn_models::checkpoint::card_path(&path);
    let text = std::fs::read_to_string(&card).unwrap();
    std::fs::write(&card, format!("{text}{text}")).unwrap();
    let e = Checkpoint::load(&path, Device::Cpu).err().expect("two cards in one file");
    assert!(e.field == "card" && e.message.starts_with("not valid JSON"), "{e}");
    // A card saved by a Windows editor, with a byte-order mark, loads.
    std::fs::write(&card, format!("\u{feff}{text}")).unwrap();
    Checkpoint::load(&path, Device::Cpu).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn weights_that_do_not_fit_the_card_or_are_corrupt_fail_cleanly() {
    let (_dir, path) = tmp("corrupt");
    checkpoint(TuningConfig::default()).save(&path).unwrap();
    rewrite_card(&path, |v| v["network"]["hidden"] = serde_json::json!([16, 16]));
    let e = Checkpoint::load(&path, Device::Cpu).err().expect("shape mismatch");
    assert_eq!(e.field, "weights", "{e}");

    checkpoint(TuningConfig::default()).save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = Checkpoint::load(&path, Device::Cpu).err().expect("truncated");
    assert_eq!(e.field, "weights", "{e}");

    // Weights a copy would broadcast or convert into the network (a one-action output layer,
    // double precision) are refused before they load, naming the tensor, even under a card
    // without the digest that would refuse them first.
    checkpoint(TuningConfig::default()).save(&path).unwrap();
    rewrite_card(&path, |v| {
        v.as_object_mut().unwrap().remove("weights_sha256");
    });
    let ck = checkpoint(TuningConfig::default());
    let mut tensors: Vec<(String, tch::Tensor)> = ck.net.var_store().variables().into_iter().collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let rewrite = |edit: &dyn Fn(&str, &tch::Tensor) -> tch::Tensor| {
        let edited: Vec<(String, tch::Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), edit(n, t))).collect();
        tch::Tensor::write_safetensors(&edited, &path).unwrap();
        Checkpoint::load(&path, Device::Cpu).err()
    };
    let out_layer = tensors.iter().find(|(_, t)| t.size()[0] == ck.card.network.actions as i64).unwrap().0.clone();
    let one_row =
        |n: &str, t: &tch::Tensor| if n == out_layer { t.narrow(0, 0, 1).contiguous() } else { t.shallow_clone() };
    let e = rewrite(&one_row).expect("a broadcastable output layer");
    assert!(e.field == "weights" && e.message.contains(&out_layer), "{e}");
    let e = rewrite(&|_, t| t.to_kind(tch::Kind::Double)).expect("double precision");
    assert!(e.field == "weights" && e.message.contains("Double"), "{e}");
    let e = rewrite(&|_, t| t.shallow_clone()).map(|e| e.to_string());
    assert_eq!(e, None, "the same tensors, rewritten, load");

    std::fs::remove_file(ecn_models::checkpoint::card_path(&path)).unwrap();
    let e = Checkpoint::load(&path, Device::Cpu).err().expect("no card");
    assert!(e.to_string().contains("card"), "{e}");
}

/// A card whose training statistics no training could produce, or weights that are not all
/// finite, would make every confidence `recommend` reports, or every decision, meaningless.
#[test]
fn damaged_calibration_or_non_finite_weights_fail_to_load() {
    let calibrated = |path: &Path| {
        let mut ck = checkpoint(TuningConfig::default());
        let dim = ck.card.network.obs_dim;
        let obs = observations(dim, 50);
        ck.card.calibration = Some(Calibration::of(&obs, dim, &[0.5, -0.25, 1.0]));
        ck.save(path).unwrap();
    };
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("calibration.std", Box::new(|v| v["calibration"]["std"][0] = (-1.0).into())),
        ("calibration.low", Box::new(|v| v["calibration"]["low"][2] = 1e9.into())),
        ("calibration.td_error_scale", Box::new(|v| v["calibration"]["td_error_scale"] = (-1.0).into())),
        ("calibration.td_error_rms", Box::new(|v| v["calibration"]["td_error_rms"] = (-0.5).into())),
        // No Q-value noise: every gap would be certain (`recommend` changed every queue at 1.00).
        (
            "calibration.td_error_scale",
            Box::new(|v| {
                v["calibration"]["td_error_scale"] = 0.0.into();
                v["calibration"]["td_error_rms"] = 5e-324.into();
            }),
        ),
    ];
    for (i, (field, edit)) in cases.into_iter().enumerate() {
        let (_dir, path) = tmp(&format!("calibration{i}"));
        calibrated(&path);
        Checkpoint::load(&path, Device::Cpu).expect("the undamaged card loads");
        rewrite_card(&path, edit);
        let e = Checkpoint::load(&path, Device::Cpu).err().expect("must refuse");
        assert_eq!(e.field, field, "{e}");
    }

    let (_dir, path) = tmp("nan");
    let ck = checkpoint(TuningConfig::default());
    let (name, mut weight) = ck.net.var_store().variables().into_iter().next().unwrap();
    tch::no_grad(|| {
        let _ = weight.fill_(f64::NAN);
    });
    ck.save(&path).unwrap();
    let e = Checkpoint::load(&path, Device::Cpu).err().expect("NaN weights");
    assert_eq!(e.field, "weights", "{e}");
    assert!(e.message.contains(&name), "the message names the tensor: {e}");
}

proptest! {
    /// Whatever the network outputs (NaN, infinities, huge values), the chosen setting is
    /// inside the bounds, or there is no choice and the caller falls back to its baseline.
    #[test]
    fn an_action_never_leaves_its_bounds(
        q in prop::collection::vec(prop_oneof![any::<f32>(), Just(f32::NAN), Just(f32::INFINITY), -1e30f32..1e30], 54),
        gbps in 1u64..800,
        kmin_min in 1u64..100_000,
        span in 2u64..50_000_000,
    ) {
        let template = ActionTemplate::new(TuningConfig::default().template);
        let bounds = Bounds { kmin_min_bytes: kmin_min, kmax_max_bytes: kmin_min + span, pmax_min: 0.01, pmax_max: 0.5 };
        match greedy(&q) {
            Some(a) => {
                let s = template.setting(a, BitsPerSec(gbps * 1_000_000_000), &bounds).expect("greedy index is in range");
                prop_assert!(bounds.contains(&s), "{s:?} outside {bounds:?}");
            }
            None => prop_assert!(q.iter().any(|v| !v.is_finite())),
        }
    }
}
