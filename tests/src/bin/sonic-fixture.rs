//! A stand-in SONiC switch in a Redis server, for trying `ecn-tuner actuator --backend sonic`
//! by hand: seed CONFIG_DB, APPL_DB and COUNTERS_DB like a 32-port switch with lossless queues
//! 3 and 4 on `AZURE_LOSSLESS`, then advance the counters every tick as the switch's flex
//! counters would (40 Gb/s per lossless queue, 2% ECN-marked), until interrupted. A stand-in
//! orchagent programs CONFIG_DB's WRED profiles into ASIC_DB meanwhile (`--orchagent-lag-ms N`
//! delays it; `--no-orchagent` leaves ASIC_DB empty, so the actuator cannot read writes back).
//!
//! Usage: `sonic-fixture PORT [--seed-only] [--tick-ms N] [--counter-bits 32|64] [--orchagent-lag-ms N]
//! [--no-orchagent]`
//! (PORT: a redis-server on 127.0.0.1 whose databases may be overwritten).

use ecn_tests::sonic::{seed, Counters, Orchagent, RedisServer, Spec, COUNTERS_DB};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!(
            "usage: sonic-fixture PORT [--seed-only] [--tick-ms N] [--counter-bits 32|64] [--orchagent-lag-ms N] \
             [--no-orchagent]"
        );
        std::process::exit(2)
    };
    let Some(port) = args.first().and_then(|p| p.parse::<u16>().ok()) else { usage() };
    let (mut seed_only, mut tick_ms, mut bits, mut lag_ms, mut orchagent) = (false, 100u64, 64u32, 0u64, true);
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seed-only" => seed_only = true,
            "--tick-ms" => tick_ms = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage()),
            "--counter-bits" => bits = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage()),
            "--orchagent-lag-ms" => lag_ms = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage()),
            "--no-orchagent" => orchagent = false,
            _ => usage(),
        }
    }
    let server = RedisServer::attach(port);
    let spec = Spec::default();
    seed(&server, &spec);
    println!("seeded {} ports on 127.0.0.1:{port}", spec.ports.len());
    if seed_only {
        return;
    }
    let _orchagent = orchagent.then(|| Orchagent::start(&server, &spec, Duration::from_millis(lag_ms)));
    let mut counters = Counters::new(&spec, bits);
    let mut con = server.con(COUNTERS_DB);
    let mut last = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(tick_ms));
        let now = Instant::now();
        counters.advance(now - last);
        last = now;
        if let Err(e) = counters.flush(&mut con) {
            eprintln!("COUNTERS_DB: {e}; reconnecting");
            std::thread::sleep(Duration::from_secs(1));
            con = server.con(COUNTERS_DB);
        }
    }
}
