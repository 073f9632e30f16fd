//! The programmatic API in 40 lines: build a simulator from a scenario, advance it one control
//! interval at a time, read the telemetry of that interval, and change ECN settings while it runs.
//!
//! `cargo run --release -p ecn-env --example closed_loop`

use ecn_env::scenario::Scenario;
use ecn_env::summary::Summary;
use ecn_env::{EcnSetting, Nanos, Simulator};

fn main() {
    let scenario = Scenario::load("websearch-50", Some(7)).expect("built-in scenario");
    let mut sim = Simulator::new(scenario.fabric.clone(), scenario.flows.clone()).expect("valid scenario");
    let interval = Nanos::from_millis(1);
    let mut t = Nanos(0);
    while !sim.all_flows_done() && t < scenario.fabric.stop_at {
        t = Nanos(t.0 + interval.0);
        sim.run_until(t);
        let samples = sim.take_telemetry();
        // The deepest queue of this interval (samples are in the order of `sim.queues()`).
        let per_interval = sim.queues().len();
        let Some((q, s)) = samples
            .iter()
            .enumerate()
            .map(|(i, s)| (i % per_interval, s))
            .max_by(|a, b| a.1.sample.queue_bytes_avg.total_cmp(&b.1.sample.queue_bytes_avg))
        else {
            continue;
        };
        let info = &sim.queues()[q];
        println!("{t}: deepest {}:{} q{} avg {:.0} B", info.switch, info.port, info.queue, s.sample.queue_bytes_avg);
        // A toy rule, to show the knob: mark earlier on a queue that stays deep.
        if s.sample.queue_bytes_avg > 200_000.0 {
            let new = EcnSetting { kmin_bytes: 100_000, kmax_bytes: 800_000, pmax: 0.2 };
            sim.set_ecn(q, new).expect("valid setting");
        }
    }
    let summary = Summary::new(&sim, &scenario.name, "closed-loop example", scenario.seed, 0.0);
    println!("all-flow p99 slowdown {:.2}", summary.slowdown.all.p99.unwrap_or(f64::NAN));
}
