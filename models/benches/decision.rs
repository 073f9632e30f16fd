//! Decision latency: observations to settings for 64 queues, on one core.
//!
//! `cargo bench -p ecn-models --bench decision` builds the observation of 64 queues from
//! their telemetry histories, runs the shipped default model (a fresh network of the same
//! shape if it is absent), takes the greedy action and turns it into a bounded setting, 10 000
//! times, and prints the latency percentiles. The target is p99 under 1 ms.

use ecn_env::tuning::{ActionTemplate, QueueHistory, QueueInterval, QueueSample, TuningConfig};
use ecn_env::BitsPerSec;
use ecn_models::{default_model_path, greedy, Checkpoint, QNetwork};
use std::time::Instant;

const QUEUES: usize = 64;
const ROUNDS: usize = 10_000;

fn main() {
    tch::set_num_threads(1);
    tch::set_num_interop_threads(1);
    let path = default_model_path("default");
    let (tuning, net, source) = match Checkpoint::load(&path, tch::Device::Cpu) {
        Ok(ck) => (ck.card.tuning.clone(), ck.net, path.display().to_string()),
        Err(e) => {
            eprintln!("note: {e}; timing a fresh network of the default shape");
            let t = TuningConfig::default();
            let n = ActionTemplate::new(t.template).len();
            (t.clone(), QNetwork::new(tch::Device::Cpu, t.observation_dim(), &[64, 64], n), "fresh network".into())
        }
    };
    let template = ActionTemplate::new(tuning.template);
    let link = BitsPerSec(100_000_000_000);
    let mut histories = vec![QueueHistory::default(); QUEUES];
    for (q, h) in histories.iter_mut().enumerate() {
        for k in 0..tuning.history {
            h.push(
                QueueInterval {
                    interval_ns: 100_000,
                    sample: QueueSample {
                        link_bps: link.0,
                        queue_bytes_avg: (q * 997 + k * 131) as f64 % 200_000.0,
                        queue_bytes_max: ((q * 1999 + k * 77) % 400_000) as u64,
                        tx_bytes: ((q * 7919) % 1_250_000) as u64,
                        tx_pkts: ((q * 7919) % 1_250_000 / 1000) as u64,
                        ecn_marked_pkts: (q % 50) as u64,
                        pfc_pause_rx: 0,
                        pfc_pause_tx: (q % 3) as u64,
                        paused_ns: 0,
                        drops: 0,
                        kmin_bytes: 5_000,
                        kmax_bytes: 200_000,
                        pmax: 0.2,
                        ..QueueSample::default()
                    },
                },
                tuning.history,
            );
        }
    }
    let mut times = Vec::with_capacity(ROUNDS);
    let mut checksum = 0u64;
    let mut obs = Vec::with_capacity(QUEUES * tuning.observation_dim());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        obs.clear();
        for h in &histories {
            h.observe(tuning.features, tuning.history, &mut obs);
        }
        let q = net.q_values(&obs);
        for row in q.chunks(template.len()) {
            let a = greedy(row).unwrap_or(0);
            let s = template.setting(a, link, &tuning.bounds).expect("in range");
            checksum = checksum.wrapping_add(s.kmax_bytes);
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    let p = |x: f64| times[((times.len() as f64 * x) as usize).min(times.len() - 1)];
    println!("decision for {QUEUES} queues ({source}), {ROUNDS} rounds on one core:");
    println!(
        "  p50 {:.1} µs   p99 {:.1} µs   max {:.1} µs   (checksum {checksum})",
        p(0.5),
        p(0.99),
        times[times.len() - 1]
    );
    println!("  target: p99 < 1000 µs: {}", if p(0.99) < 1000.0 { "met" } else { "NOT met" });
}
