//! Reward sanity check (README "Reward"): does a higher mean reward mean a better FCT?
//!
//! `cargo bench -p ecn-env --bench reward_sanity` runs 12 static ECN settings on 3 scenarios
//! (2 seeds each), scores every run by its mean per-queue reward over the arrival window
//! and by the FCT objective (`ecn_env::tuning::objective`), and prints the Spearman rank
//! correlation between the two rankings of the settings, for ecn-tuner's reward and for
//! ACC's linear reward. It exits non-zero if ecn-tuner's correlation is below 0.8.
//!
//! `-- --csv FILE` also writes the per-run interval statistics, for refitting weights.
//! `-- --reward-weights depth=2,depth_max=0.2` checks other weights for ecn-tuner's reward
//! (the form `ecn-tuner train --reward-weights` takes).
//! `-- --scenario A B C` runs other scenarios (built-in names or TOML files) instead, and
//! `-- --scale-to-rate` states the static settings at 100 Gb/s and scales them by each port's
//! rate, as the action template does, with each §5 row at its own per-speed values: the check
//! for a fabric whose ports are not 100G.

use ecn_env::fabric::EcnPlan;
use ecn_env::scenario::Scenario;
use ecn_env::tuning::action::TEMPLATE_RATE_BPS;
use ecn_env::tuning::{Bounds, FctMetrics, FlowWait, QueueInterval, Reward};
use ecn_env::{Baseline, BitsPerSec, EcnSetting, Nanos, Simulator};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The scenarios without `--scenario`.
const SCENARIOS: [&str; 3] = ["websearch-50", "hadoop-50", "mixed"];
const SEEDS: [u64; 2] = [501, 502];
/// The reference of the FCT objective: the best single static row of REFERENCE.md §5.
const REFERENCE: Baseline = Baseline::HuaweiLatency;

/// How a setting meets the fabric's ports.
#[derive(Clone, Copy)]
enum Setting {
    /// A §5 row: at 100G on every port, or at each port's own speed with `--scale-to-rate`.
    Row(Baseline),
    /// Thresholds stated at 100G: as they are on every port, or scaled by rate/100G and
    /// clamped into the default bounds, as the action template does.
    Static(EcnSetting),
}

impl Setting {
    fn plan(self, scale_to_rate: bool, rates: &[BitsPerSec]) -> EcnPlan {
        match (self, scale_to_rate) {
            (Setting::Row(b), false) => EcnPlan::Fixed(b.setting(BitsPerSec(TEMPLATE_RATE_BPS))),
            (Setting::Row(b), true) => EcnPlan::Baseline(b),
            (Setting::Static(s), false) => EcnPlan::Fixed(s),
            (Setting::Static(s), true) => EcnPlan::PerRate(
                rates
                    .iter()
                    .map(|&r| {
                        let k = |b: u64| (b as f64 * r.0 as f64 / TEMPLATE_RATE_BPS as f64).round().max(1.0) as u64;
                        let scaled =
                            EcnSetting { kmin_bytes: k(s.kmin_bytes), kmax_bytes: k(s.kmax_bytes), pmax: s.pmax };
                        (r, Bounds::default().clamp(scaled))
                    })
                    .collect(),
            ),
        }
    }
}

fn settings() -> Vec<(String, Setting)> {
    let mut v: Vec<(String, Setting)> =
        Baseline::ALL.iter().map(|&b| (format!("baseline:{}", b.name()), Setting::Row(b))).collect();
    for (kmin, kmax, pmax) in
        [(2, 80, 0.3), (2, 320, 0.1), (5, 40, 1.0), (20, 160, 0.3), (50, 800, 0.5), (300, 3000, 0.2)]
    {
        v.push((
            format!("static:{kmin}KB,{kmax}KB,{pmax}"),
            Setting::Static(EcnSetting { kmin_bytes: kmin * 1000, kmax_bytes: kmax * 1000, pmax }),
        ));
    }
    v
}

/// Mean interval statistics of one run over its arrival window.
#[derive(Default, Clone, Copy)]
struct RunStats {
    utilization: f64,
    depth: f64,
    depth_max: f64,
    pause: f64,
    drops: f64,
    /// ECN-mark fraction × idle fraction: marking while the link is not full.
    marked_idle: f64,
    small_wait: f64,
    large_wait: f64,
    reward_tuner: f64,
    reward_acc: f64,
}

fn run(
    scenario: &str,
    seed: u64,
    setting: Setting,
    scale_to_rate: bool,
    reward: &Reward,
    flow_wait: FlowWait,
) -> (RunStats, FctMetrics) {
    let mut sc = Scenario::load(scenario, Some(seed)).unwrap_or_else(|e| {
        eprintln!("--scenario {scenario}: {e}");
        std::process::exit(2)
    });
    let interval = Nanos::from_micros(100);
    sc.fabric.sample_interval = interval;
    let mut rates: Vec<BitsPerSec> = sc.fabric.topology.links.iter().map(|l| l.rate).collect();
    rates.sort_by_key(|r| r.0);
    rates.dedup();
    sc.fabric.ecn = setting.plan(scale_to_rate, &rates);
    let (window_start, window_end) = (sc.fabric.window_start, sc.fabric.window_end);
    let mut sim = Simulator::new(sc.fabric, sc.flows).unwrap_or_else(|e| {
        eprintln!("--scenario {scenario}: {e}");
        std::process::exit(2)
    });
    sim.run(|_| {});
    let mut s = RunStats::default();
    let mut n = 0.0;
    for row in sim.take_telemetry().iter().filter(|r| r.sample.ts_ns <= window_end.0) {
        // A static setting never changes, so no interval pays the change term.
        let iv = QueueInterval::from_sample(row, interval.0);
        s.utilization += iv.utilization();
        s.depth += iv.depth_avg_bdp();
        s.depth_max += iv.depth_max_bdp();
        s.pause += iv.paused_fraction() + iv.pause_tx_rate();
        s.drops += (iv.sample.drops > 0) as u8 as f64;
        s.marked_idle += iv.marked_idle();
        s.reward_tuner += reward.of(&iv, None);
        s.reward_acc += Reward::ACC.of(&iv, None);
        n += 1.0;
    }
    // The flow-wait term summed over every queue and interval of the window, as the
    // environment charges it interval by interval.
    let [small, large] = flow_wait.waits(&sim, window_start, window_end);
    (s.small_wait, s.large_wait) = (small.iter().sum(), large.iter().sum());
    s.reward_tuner -= flow_wait.small * s.small_wait + flow_wait.large * s.large_wait;
    for x in [
        &mut s.small_wait,
        &mut s.large_wait,
        &mut s.utilization,
        &mut s.depth,
        &mut s.depth_max,
        &mut s.pause,
        &mut s.drops,
        &mut s.marked_idle,
        &mut s.reward_tuner,
        &mut s.reward_acc,
    ] {
        *x /= n;
    }
    (s, FctMetrics::of(&sim))
}

/// Ranks (1 = smallest), ties get the mean rank.
fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        for k in i..=j {
            r[idx[k]] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation.
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `--bench` is cargo's; another option is a mistake, not something to run the defaults for.
    let known = ["--bench", "--csv", "--reward-weights", "--scenario"];
    if let Some(other) = args.iter().skip(1).find(|a| a.starts_with("--") && !known.contains(&a.as_str())) {
        eprintln!("error: '{other}': options are --csv FILE, --reward-weights W, --scenario S...");
        std::process::exit(2);
    }
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let csv = flag("--csv");
    let reward = match flag("--reward-weights") {
        None => Reward::TUNER,
        Some(spec) => Reward::TUNER.with_weights(&spec).unwrap_or_else(|e| {
            eprintln!("--reward-weights {e}");
            std::process::exit(2)
        }),
    };
    let scenarios: Vec<String> = match args.iter().position(|a| a == "--scenario") {
        Some(i) => args[i + 1..].iter().take_while(|a| !a.starts_with("--")).cloned().collect(),
        None => SCENARIOS.map(String::from).to_vec(),
    };
    if scenarios.is_empty() {
        eprintln!("--scenario: give at least one scenario");
        std::process::exit(2)
    }
    let scale_to_rate = args.iter().any(|a| a == "--scale-to-rate");
    let flow_wait = match flag("--flow-wait") {
        None => FlowWait::default(),
        Some(spec) => FlowWait::parse(&spec).unwrap_or_else(|e| {
            eprintln!("--flow-wait {e}");
            std::process::exit(2)
        }),
    };
    println!("ecn-tuner reward: {}, {flow_wait:?}", serde_json::to_string(&reward).expect("serializable"));
    let settings = settings();
    let reference = Setting::Row(REFERENCE);
    // Jobs: every (setting, scenario, seed), plus the reference runs.
    let mut jobs: Vec<(usize, usize, u64)> = Vec::new();
    for s in 0..=settings.len() {
        for sc in 0..scenarios.len() {
            for &seed in &SEEDS {
                jobs.push((s, sc, seed));
            }
        }
    }
    let results = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(s, sc, seed)) = jobs.get(i) else { break };
                let setting = settings.get(s).map(|x| x.1).unwrap_or(reference);
                let r = run(&scenarios[sc], seed, setting, scale_to_rate, &reward, flow_wait);
                results.lock().unwrap()[i] = Some(r);
            });
        }
    });
    let results: Vec<(RunStats, FctMetrics)> = results.into_inner().unwrap().into_iter().map(Option::unwrap).collect();
    let find = |s: usize, sc: usize, seed: u64| {
        let i = jobs.iter().position(|&j| j == (s, sc, seed)).expect("job");
        results[i]
    };
    let mut csv_text = String::from(
        "setting,scenario,seed,utilization,depth,depth_max,pause,drops,marked_idle,small_wait,large_wait,small_p99,large_p50,pause_frames,cost\n",
    );
    let mut mean_tuner = Vec::new();
    let mut mean_acc = Vec::new();
    let mut mean_cost = Vec::new();
    let mut per_scenario: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); scenarios.len()];
    println!(
        "| setting | mean reward (tuner) | mean reward (ACC) | FCT cost | {} |",
        scenarios.join(" cost | ") + " cost"
    );
    println!("|---|---|---|---|{}", "---|".repeat(scenarios.len()));
    for (s, (name, _)) in settings.iter().enumerate() {
        let (mut rt, mut ra, mut cost) = (0.0, 0.0, 0.0);
        let mut sc_costs = Vec::new();
        for (sc, scenario) in scenarios.iter().enumerate() {
            let (mut sc_r, mut sc_c) = (0.0, 0.0);
            for &seed in &SEEDS {
                let (stats, m) = find(s, sc, seed);
                let (_, m_ref) = find(settings.len(), sc, seed);
                let c = m.cost(&m_ref);
                rt += stats.reward_tuner;
                ra += stats.reward_acc;
                cost += c;
                sc_r += stats.reward_tuner;
                sc_c += c;
                csv_text.push_str(&format!(
                    "\"{name}\",{scenario},{seed},{},{},{},{},{},{},{},{},{},{},{},{c}\n",
                    stats.utilization,
                    stats.depth,
                    stats.depth_max,
                    stats.pause,
                    stats.drops,
                    stats.marked_idle,
                    stats.small_wait,
                    stats.large_wait,
                    m.small_p99,
                    m.large_p50,
                    m.pause_frames
                ));
            }
            per_scenario[sc].0.push(sc_r);
            per_scenario[sc].1.push(-sc_c);
            sc_costs.push(sc_c / SEEDS.len() as f64);
        }
        let n = (scenarios.len() * SEEDS.len()) as f64;
        mean_tuner.push(rt / n);
        mean_acc.push(ra / n);
        mean_cost.push(cost / n);
        let cells: Vec<String> = sc_costs.iter().map(|c| format!("{c:.2}")).collect();
        println!("| {name} | {:.4} | {:.4} | {:.2} | {} |", rt / n, ra / n, cost / n, cells.join(" | "));
    }
    // A higher reward should mean a lower cost: correlate reward with −cost.
    let neg_cost: Vec<f64> = mean_cost.iter().map(|c| -c).collect();
    let rho_tuner = spearman(&mean_tuner, &neg_cost);
    let rho_acc = spearman(&mean_acc, &neg_cost);
    println!();
    println!(
        "Spearman(mean reward, -FCT cost) over {} settings x {} scenarios x {} seeds:",
        settings.len(),
        scenarios.len(),
        SEEDS.len()
    );
    println!("  ecn-tuner reward: {rho_tuner:.3}");
    println!("  ACC linear reward: {rho_acc:.3}");
    for (sc, (r, c)) in per_scenario.iter().enumerate() {
        println!("  ecn-tuner reward on {} alone: {:.3}", scenarios[sc], spearman(r, c));
    }
    if let Some(path) = csv {
        std::fs::write(&path, csv_text).expect("write --csv");
        println!("wrote {path}");
    }
    if rho_tuner < 0.8 {
        eprintln!("FAIL: the reward ranks static settings unlike the FCT objective (Spearman {rho_tuner:.3} < 0.8)");
        std::process::exit(1);
    }
}
