//! A stand-in controller for crash tests: take the writer role, apply one change with a
//! confirm deadline, say so on stdout, then hang until killed. It never confirms.
//!
//! Usage: `ecn-test-writer URL CONTROLLER_ID CONFIRM_WITHIN_MS`

use ecn_tests::{change, connect, pb};
use std::io::Write;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, controller, within] = &args[..] else {
        eprintln!("usage: ecn-test-writer URL CONTROLLER_ID CONFIRM_WITHIN_MS");
        std::process::exit(2);
    };
    let within: u64 = within.parse().expect("CONFIRM_WITHIN_MS");
    let mut c = connect(url).await;
    let lease = c
        .acquire_writer(pb::AcquireWriterRequest { controller_id: controller.clone(), ttl_ms: 60_000 })
        .await
        .expect("acquire writer")
        .into_inner();
    let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.expect("capabilities").into_inner();
    let q0 = caps.queues[0].id.clone().expect("queue id");
    let r = c
        .apply(pb::ApplyRequest {
            lease_id: lease.lease_id,
            changes: vec![change(&q0, 100_000, 1_000_000, 0.5)],
            confirm_within_ms: within,
            reason: "crash test".into(),
            ..Default::default()
        })
        .await
        .expect("apply")
        .into_inner();
    println!("applied generation {}", r.generation);
    std::io::stdout().flush().expect("stdout");
    // Hang like a controller stuck mid-health-check, until killed.
    std::future::pending::<()>().await;
}
