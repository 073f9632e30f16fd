use ecn_env::scenario::Scenario;
use ecn_env::summary::Summary;
use ecn_env::Simulator;
fn main() {
    let arg = std::env::args().nth(1).unwrap();
    let sc = Scenario::load(&arg, None).unwrap();
    let t = std::time::Instant::now();
    let mut sim = Simulator::new(sc.fabric.clone(), sc.flows.clone()).unwrap();
    sim.set_record_telemetry(false);
    sim.run(|_| {});
    let s = Summary::new(&sim, &sc.name, "x", sc.seed, t.elapsed().as_secs_f64());
    println!("{}", serde_json::to_string_pretty(&s).unwrap());
    println!("ev/s {:.1}M", s.events as f64 / s.wall_seconds / 1e6);
    if let Some(out) = std::env::args().nth(2) {
        let mut o = String::new();
        for r in sim.flow_records() {
            o += &format!(
                "{} {} {} {} {} {} {} {}\n",
                r.src,
                r.dst,
                r.sport,
                r.dport,
                r.size_bytes,
                r.start_ns,
                r.fct_ns.unwrap_or(0),
                r.ideal_ns
            );
        }
        std::fs::write(out, o).unwrap();
    }
}
// appended: dump fct
#[allow(dead_code)]
fn _unused() {}
