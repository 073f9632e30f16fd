//! The actuator over real gRPC on loopback: `ecn-tuner actuator` runs as a child process.
//!
//! Timing: every deadline is generous and every wait polls with a timeout, so that a loaded
//! two-core machine slows the tests down without failing them.

use ecn_tests::pb;
use ecn_tests::{
    assert_apply_refused, change, events, eventually, run_cli, run_cli_within, send_signal, telemetry, Actuator,
    Client, START_TIMEOUT,
};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_stream::StreamExt;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(60);

async fn caps(c: &mut Client) -> pb::Capabilities {
    c.get_capabilities(pb::GetCapabilitiesRequest {}).await.expect("GetCapabilities").into_inner()
}

async fn config(c: &mut Client) -> pb::Config {
    c.get_config(pb::GetConfigRequest {}).await.expect("GetConfig").into_inner()
}

async fn lease(c: &mut Client, controller: &str) -> String {
    c.acquire_writer(pb::AcquireWriterRequest { controller_id: controller.into(), ttl_ms: 120_000 })
        .await
        .expect("AcquireWriter")
        .into_inner()
        .lease_id
}

fn ids(caps: &pb::Capabilities) -> Vec<pb::QueueId> {
    caps.queues.iter().map(|q| q.id.clone().expect("queue id")).collect()
}

fn setting_of(cfg: &pb::Config, id: &pb::QueueId) -> pb::EcnSetting {
    cfg.queues.iter().find(|q| q.id.as_ref() == Some(id)).and_then(|q| q.setting).expect("queue in config")
}

async fn apply(c: &mut Client, lease_id: &str, changes: Vec<pb::QueueSetting>, within_ms: u64) -> pb::ApplyResponse {
    c.apply(pb::ApplyRequest {
        lease_id: lease_id.into(),
        changes,
        confirm_within_ms: within_ms,
        reason: "test".into(),
        ..Default::default()
    })
    .await
    .expect("Apply")
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_applies_are_refused_whole_and_nothing_changes() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut c = a.client().await;
    let q = ids(&caps(&mut c).await);
    let l = lease(&mut c, "ctl-a").await;
    let before = config(&mut c).await;
    assert_eq!((before.generation, before.confirmed_generation), (1, 1));

    let good = change(&q[0], 100_000, 1_000_000, 0.3);
    let unknown = pb::QueueId { switch: "leaf9".into(), port: "eth77".into(), queue: 3 };
    let cases: Vec<(Vec<pb::QueueSetting>, String, &str)> = vec![
        (vec![good.clone(), change(&q[1], 2_000_000, 1_000_000, 0.2)], q[1].to_string(), "kmin_bytes"),
        (vec![good.clone(), change(&q[1], 100_000, 1_000_000, 1.5)], q[1].to_string(), "pmax"),
        (vec![change(&q[2], 100_000, 1_000_000, -0.1), good.clone()], q[2].to_string(), "pmax"),
        (vec![good.clone(), change(&unknown, 100_000, 1_000_000, 0.2)], "leaf9/eth77/3".into(), "unknown queue"),
    ];
    for (changes, queue, field) in cases {
        assert_apply_refused(&mut c, &l, changes, &queue, field).await;
        assert_eq!(config(&mut c).await, before, "nothing changed");
    }

    let stale = c
        .apply(pb::ApplyRequest {
            lease_id: l.clone(),
            changes: vec![good.clone()],
            expected_generation: Some(before.generation + 5),
            ..Default::default()
        })
        .await
        .expect_err("a stale expected_generation must be refused");
    assert_eq!(stale.code(), Code::Aborted, "{stale:?}");
    assert!(stale.message().contains("expected_generation"), "{}", stale.message());
    assert_eq!(config(&mut c).await, before, "nothing changed");

    // The right expected_generation goes through.
    let ok = c
        .apply(pb::ApplyRequest {
            lease_id: l.clone(),
            changes: vec![good],
            expected_generation: Some(before.generation),
            ..Default::default()
        })
        .await
        .expect("Apply with the current generation")
        .into_inner();
    assert_eq!((ok.generation, ok.confirmed), (2, true));

    let j = a.journal();
    assert_eq!(events(&j, "reject").len(), 5, "{j:#?}");
    assert_eq!(events(&j, "apply").len(), 1, "{j:#?}");
    for e in events(&j, "reject") {
        assert_eq!(e["generation"], 1);
        assert!(e["detail"].as_str().unwrap().contains("Invalid") || e["detail"].as_str().unwrap().contains("Aborted"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_only_changes_nothing_and_needs_no_lease() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut c = a.client().await;
    let q = ids(&caps(&mut c).await);
    let before = config(&mut c).await;
    let ask = |changes, lease_id: &str| pb::ApplyRequest {
        lease_id: lease_id.into(),
        changes,
        validate_only: true,
        confirm_within_ms: 5_000,
        ..Default::default()
    };
    let r = c.apply(ask(vec![change(&q[0], 100_000, 1_000_000, 0.3)], "")).await.expect("validate_only").into_inner();
    assert_eq!((r.generation, r.confirmed), (before.generation, true));
    let e = c.apply(ask(vec![change(&q[0], 1_000_000, 100_000, 0.3)], "")).await.expect_err("invalid");
    assert_eq!(e.code(), Code::InvalidArgument);
    let l = lease(&mut c, "ctl-a").await;
    c.apply(ask(vec![change(&q[1], 100_000, 1_000_000, 0.3)], &l)).await.expect("validate_only with a lease");
    assert_eq!(config(&mut c).await, before);
    assert!(a.journal().is_empty(), "validate_only leaves no journal line: {:#?}", a.journal());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_writer() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let (mut ca, mut cb) = (a.client().await, a.client().await);
    let q = ids(&caps(&mut ca).await);
    let la = lease(&mut ca, "ctl-a").await;

    let refused = cb
        .acquire_writer(pb::AcquireWriterRequest { controller_id: "ctl-b".into(), ttl_ms: 60_000 })
        .await
        .expect_err("a second controller must be refused");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("ctl-a"), "{}", refused.message());

    for lease_id in ["", "not-a-lease"] {
        let e = cb
            .apply(pb::ApplyRequest {
                lease_id: lease_id.into(),
                changes: vec![change(&q[0], 100_000, 1_000_000, 0.3)],
                ..Default::default()
            })
            .await
            .expect_err("writes without the lease are refused");
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    }
    let e = cb
        .rollback(pb::RollbackRequest { lease_id: "x".into(), to_generation: Some(1), ..Default::default() })
        .await
        .expect_err("rollback without the lease");
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = cb.confirm(pb::ConfirmRequest { lease_id: "x".into(), generation: 1 }).await.expect_err("confirm");
    assert_eq!(e.code(), Code::PermissionDenied);

    // The holder renews (same lease) and writes.
    assert_eq!(lease(&mut ca, "ctl-a").await, la);
    apply(&mut ca, &la, vec![change(&q[0], 100_000, 1_000_000, 0.3)], 0).await;

    // A short lease lapses: the role frees up, the confirmed setting stays.
    ca.acquire_writer(pb::AcquireWriterRequest { controller_id: "ctl-a".into(), ttl_ms: 300 }).await.expect("renew");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let e = ca
        .apply(pb::ApplyRequest {
            lease_id: la.clone(),
            changes: vec![change(&q[1], 100_000, 1_000_000, 0.3)],
            ..Default::default()
        })
        .await
        .expect_err("a lapsed lease cannot write");
    assert_eq!(e.code(), Code::PermissionDenied);
    let lb = lease(&mut cb, "ctl-b").await;
    assert_ne!(lb, la);
    let cfg = config(&mut cb).await;
    assert_eq!(setting_of(&cfg, &q[0]), pb::EcnSetting { kmin_bytes: 100_000, kmax_bytes: 1_000_000, pmax: 0.3 });
    assert_eq!((cfg.generation, cfg.confirmed_generation), (2, 2));

    // Releasing frees the role at once.
    cb.release_writer(pb::ReleaseWriterRequest { lease_id: lb }).await.expect("release");
    lease(&mut ca, "ctl-a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_apply_reverts_after_its_client_vanishes() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut watcher = a.client().await;
    let q = ids(&caps(&mut watcher).await);
    let before = config(&mut watcher).await;
    let applied = {
        let mut c = a.client().await;
        let l = lease(&mut c, "ctl-gone").await;
        let r = apply(&mut c, &l, vec![change(&q[0], 100_000, 1_000_000, 0.5)], 3_000).await;
        assert!(!r.confirmed && r.confirm_deadline_unix_ms > 0, "{r:?}");
        r.generation
        // The client (and its connection) is dropped here, without confirming.
    };
    let cfg = eventually("the revert", WAIT, || {
        let mut w = watcher.clone();
        async move { Some(config(&mut w).await).filter(|c| c.generation > applied) }
    })
    .await;
    assert_eq!(cfg.generation, applied + 1, "a revert is a new generation");
    assert_eq!(cfg.confirmed_generation, cfg.generation);
    assert_eq!(cfg.confirm_deadline_unix_ms, 0);
    assert_eq!(cfg.queues, before.queues, "back to the confirmed settings");
    let j = a.journal();
    let reverts = events(&j, "revert");
    assert_eq!(reverts.len(), 1, "{j:#?}");
    assert_eq!(reverts[0]["generation"], applied + 1);
    assert_eq!(reverts[0]["queues"][0]["port"], q[0].port.as_str());
    assert!(reverts[0]["detail"].as_str().unwrap().contains("deadline"), "{}", reverts[0]);
    assert_eq!(events(&j, "apply")[0]["confirm_deadline_unix_ms"].as_u64().map(|d| d > 0), Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_writer_process_is_reverted_by_the_actuator() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut watcher = a.client().await;
    let before = config(&mut watcher).await;
    let mut writer = tokio::process::Command::new(env!("CARGO_BIN_EXE_ecn-test-writer"))
        .args([&a.url(), "ctl-doomed", "2000"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn ecn-test-writer");
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("writer output").unwrap().unwrap();
    let applied: u64 = line.strip_prefix("applied generation ").and_then(|g| g.parse().ok()).expect(&line);
    writer.start_kill().expect("SIGKILL the writer");
    writer.wait().await.expect("reap the writer");

    let cfg = eventually("the revert", WAIT, || {
        let mut w = watcher.clone();
        async move { Some(config(&mut w).await).filter(|c| c.generation > applied) }
    })
    .await;
    assert_eq!(cfg.queues, before.queues);
    let j = a.journal();
    assert_eq!(events(&j, "apply").len(), 1);
    assert_eq!(events(&j, "apply")[0]["controller"], "ctl-doomed");
    assert_eq!(events(&j, "revert").len(), 1, "{j:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_makes_a_change_stick_past_its_deadline() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut c = a.client().await;
    let q = ids(&caps(&mut c).await);
    let l = lease(&mut c, "ctl-a").await;
    let wanted = pb::EcnSetting { kmin_bytes: 100_000, kmax_bytes: 1_000_000, pmax: 0.5 };
    // 5 s: two calls' time to confirm in, however loaded the machine.
    let r = apply(&mut c, &l, vec![change(&q[0], 100_000, 1_000_000, 0.5)], 5_000).await;
    let cfg = config(&mut c).await;
    assert_eq!((cfg.generation, cfg.confirmed_generation), (r.generation, 1));
    let done = c.confirm(pb::ConfirmRequest { lease_id: l.clone(), generation: r.generation }).await;
    let done = done.expect("Confirm within the deadline").into_inner();
    assert_eq!(done.confirmed_generation, r.generation);
    // Wait well past the deadline.
    tokio::time::sleep(Duration::from_millis(6_500)).await;
    let cfg = config(&mut c).await;
    assert_eq!(
        (cfg.generation, cfg.confirmed_generation, cfg.confirm_deadline_unix_ms),
        (r.generation, r.generation, 0)
    );
    assert_eq!(setting_of(&cfg, &q[0]), wanted);
    // Confirming a generation that does not exist is refused.
    let e = c.confirm(pb::ConfirmRequest { lease_id: l, generation: 99 }).await.expect_err("unknown generation");
    assert_eq!(e.code(), Code::NotFound);
    let j = a.journal();
    assert_eq!(events(&j, "confirm").len(), 1, "{j:#?}");
    assert_eq!(events(&j, "confirm")[0]["queues"][0]["kmin_bytes"], 100_000);
    assert!(events(&j, "revert").is_empty(), "{j:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_a_named_generation_and_to_the_confirmed_one() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut c = a.client().await;
    let q = ids(&caps(&mut c).await);
    let l = lease(&mut c, "ctl-a").await;
    let g1 = config(&mut c).await;
    let g2 = apply(&mut c, &l, vec![change(&q[0], 100_000, 1_000_000, 0.5)], 0).await.generation;
    let cfg2 = config(&mut c).await;
    let g3 = apply(&mut c, &l, vec![change(&q[1], 200_000, 2_000_000, 0.1)], 0).await.generation;
    assert_eq!((g2, g3), (2, 3));

    let r = c
        .rollback(pb::RollbackRequest { lease_id: l.clone(), to_generation: Some(g2), reason: "test".into() })
        .await
        .expect("Rollback to generation 2")
        .into_inner();
    assert_eq!(r.generation, 4);
    let cfg = config(&mut c).await;
    assert_eq!((cfg.generation, cfg.confirmed_generation), (4, 4));
    assert_eq!(cfg.queues, cfg2.queues);

    // An unconfirmed change, then a rollback to the last confirmed generation.
    apply(&mut c, &l, vec![change(&q[2], 100_000, 1_000_000, 0.9)], 60_000).await;
    let r = c.rollback(pb::RollbackRequest { lease_id: l.clone(), ..Default::default() }).await.expect("Rollback");
    assert_eq!(r.into_inner().generation, 6);
    let cfg = config(&mut c).await;
    assert_eq!((cfg.confirmed_generation, cfg.confirm_deadline_unix_ms), (6, 0));
    assert_eq!(cfg.queues, cfg2.queues);
    // Generation 5 was reverted before anyone confirmed it: no rollback returns to it.
    let e = c
        .rollback(pb::RollbackRequest { lease_id: l.clone(), to_generation: Some(5), ..Default::default() })
        .await
        .expect_err("never confirmed");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("never confirmed"), "{e:?}");

    c.rollback(pb::RollbackRequest { lease_id: l.clone(), to_generation: Some(1), ..Default::default() })
        .await
        .expect("Rollback to the start");
    assert_eq!(config(&mut c).await.queues, g1.queues);
    let e = c
        .rollback(pb::RollbackRequest { lease_id: l, to_generation: Some(99), ..Default::default() })
        .await
        .expect_err("no such generation");
    assert_eq!(e.code(), Code::NotFound);

    let j = a.journal();
    let rb = events(&j, "rollback");
    assert_eq!(rb.len(), 3, "{j:#?}");
    assert_eq!(rb[0]["generation"], 4);
    assert!(rb[0]["detail"].as_str().unwrap().contains("generation 2"), "{}", rb[0]);
    assert_eq!(rb[0]["queues"][0]["port"], q[1].port.as_str(), "the queue that changed back");
    assert_eq!(events(&j, "reject").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_required_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let a = Actuator::start(&["--backend", "dry-run", "--token-file", token_file.to_str().unwrap()]).await;
    let channel = tonic::transport::Channel::from_shared(a.url()).unwrap().connect().await.expect("connect");

    let mut none = pb::actuator_client::ActuatorClient::new(channel.clone());
    let e = none.get_config(pb::GetConfigRequest {}).await.expect_err("no token");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    // Warned of at once, with where it came from: a call without a token went unlogged.
    let log = eventually("the refusal warned of", Duration::from_secs(10), || {
        let log = a.log_text();
        std::future::ready(log.contains("refused calls without the right bearer token").then_some(log))
    })
    .await;
    assert!(log.contains("wrong_token=0 no_token=1 last_from=127.0.0.1:"), "{log}");

    for (token, ok) in [("Bearer wrong", false), ("Bearer s3cret-token", true)] {
        let value: tonic::metadata::MetadataValue<_> = token.parse().unwrap();
        let mut c =
            pb::actuator_client::ActuatorClient::with_interceptor(channel.clone(), move |mut r: tonic::Request<()>| {
                r.metadata_mut().insert("authorization", value.clone());
                Ok(r)
            });
        let r = c.get_config(pb::GetConfigRequest {}).await;
        match ok {
            true => assert_eq!(r.expect("the right token").into_inner().generation, 1),
            false => assert_eq!(r.expect_err("a wrong token").code(), Code::Unauthenticated),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_self_signed_certificate() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("self-signed cert");
    let dir = tempfile::Builder::new().prefix("ecn-actuator-tls-").tempdir().unwrap();
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    let (cert_path, key_path, token_path) =
        (dir.path().join("cert.pem"), dir.path().join("key.pem"), dir.path().join("token"));
    // Both saved as Windows editors save text, with a byte order mark first: the certificate
    // read as none, the key as "unusable: transport error".
    std::fs::write(&cert_path, format!("\u{feff}{cert_pem}")).unwrap();
    std::fs::write(&key_path, format!("\u{feff}{key_pem}")).unwrap();
    std::fs::write(&token_path, "tls-token").unwrap();
    let a = Actuator::start_in(
        dir,
        &[
            "--backend",
            "dry-run",
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
            "--token-file",
            token_path.to_str().unwrap(),
        ],
    )
    .await;
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&cert_pem))
        .domain_name("localhost");
    let channel = tonic::transport::Channel::from_shared(format!("https://{}", a.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("TLS connect");
    let mut c = pb::actuator_client::ActuatorClient::with_interceptor(channel, |mut r: tonic::Request<()>| {
        r.metadata_mut().insert("authorization", "Bearer tls-token".parse().unwrap());
        Ok(r)
    });
    let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.expect("GetCapabilities over TLS");
    assert_eq!(caps.into_inner().backend, "dry-run");

    // A client trusting another CA is refused, and says why: it read "transport error" alone,
    // whether the certificate was another's, expired, or not yet valid by this host's clock.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("another cert");
    let other_ca = a.dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, other.cert.pem()).unwrap();
    let out = a.dir.path().join("never.csv");
    let target = format!("https://localhost:{}", a.addr.port());
    let (token, out) = (token_path.to_str().unwrap(), out.to_str().unwrap());
    let record_trusting = |ca: &std::path::Path| {
        let ca = ca.to_str().unwrap().to_string();
        let target = target.clone();
        async move {
            let args = ["record", "--target", &target, "--tls-ca", &ca, "--token-file", token, "--duration", "1s"];
            run_cli(&[&args[..], &["--out", out]].concat()).await
        }
    };
    let (code, _, stderr) = record_trusting(&other_ca).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach the actuator") && stderr.contains("certificate"), "{stderr}");

    // The right CA, with its byte order mark, is trusted: the call gets through TLS to the
    // dry-run backend, which has no telemetry of its own.
    let (code, _, stderr) = record_trusting(&cert_path).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("StreamTelemetry: Unimplemented"), "{stderr}");

    // Plain text to a TLS port fails.
    let plain = tonic::transport::Channel::from_shared(a.url()).unwrap().connect().await;
    if let Ok(ch) = plain {
        let mut p = pb::actuator_client::ActuatorClient::new(ch);
        assert!(p.get_config(pb::GetConfigRequest {}).await.is_err(), "plain text must not work on a TLS port");
    }

    // A key that is not the certificate's is refused naming both files and why (it read
    // "unusable: transport error" alone).
    let other_key = a.dir.path().join("other-key.pem");
    std::fs::write(&other_key, other.signing_key.serialize_pem()).unwrap();
    let (cert, key) = (cert_path.to_str().unwrap(), other_key.to_str().unwrap());
    let args = ["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key];
    let (code, _, stderr) = run_cli(&[&args[..], &["--token-file", token]].concat()).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("other-key.pem") && stderr.contains("KeyMismatch"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_command_lines_exit_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--backend", "dry-run", "--listen", "0.0.0.0:0"], "--listen"),
        (&["--backend", "dry-run", "--listen", "not an address"], "--listen"),
        (&["--backend", "sim", "--scenario", "no-such-scenario"], "no-such-scenario"),
        (&["--backend", "sim", "--inject-storm", "3@soon:1ms"], "--inject-storm"),
        (&["--backend", "sim", "--inject-storm", "9999@1ms:1ms"], "--inject-storm"),
        (&["--backend", "sim", "--inject-bad-write", "0"], "--inject-bad-write"),
        (&["--backend", "dry-run", "--inject-bad-write", "1"], "--inject-bad-write"),
        (&["--backend", "sim", "--bad-write-marks", "none"], "--inject-bad-write"),
        (&["--backend", "sim", "--inject-bad-write", "1", "--bad-write-marks", "some"], "--bad-write-marks"),
        (&["--backend", "sim", "--time-scale", "0"], "--time-scale"),
        (&["--backend", "dry-run", "--token-file", "/nonexistent/token"], "--token-file"),
        (&["--backend", "dry-run", "--tls-cert", "/nonexistent/c", "--tls-key", "/nonexistent/k"], "--tls-cert"),
        (&["--backend", "dry-run", "--journal", "/nonexistent/dir/j.jsonl"], "--journal"),
        // A device: /dev/null took every line and kept none, /dev/zero was read without end.
        (&["--backend", "dry-run", "--journal", "/dev/null"], "--journal /dev/null: not a regular file"),
        // A flag of another backend is refused, not ignored.
        (&["--backend", "sim", "--poll-interval", "banana"], "--poll-interval"),
        (&["--backend", "dry-run", "--counter-bits", "0"], "--counter-bits"),
        (&["--backend", "sim", "--config-db", "5"], "--config-db"),
        (&["--backend", "sonic", "--redis", "redis://127.0.0.1:1", "--seed", "3"], "--seed"),
    ];
    for (args, flag) in cases {
        let mut full = vec!["actuator"];
        full.extend_from_slice(args);
        if !args.contains(&"--listen") {
            full.extend_from_slice(&["--listen", "127.0.0.1:0"]);
        }
        let (code, _, stderr) = run_cli(&full).await;
        assert_eq!(code, Some(2), "{full:?}: {stderr}");
        assert!(stderr.contains(flag), "{full:?} should name {flag}: {stderr}");
    }
    // The SONiC database flags say why (they used to ask for --redis, which was refused next).
    for (flag, value) in [("--config-db", "5"), ("--asic-db", "3"), ("--redis-timeout", "1s")] {
        let args = ["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", flag, value];
        let (code, _, stderr) = run_cli(&args).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(&format!("{flag}: only the sonic backend")), "{args:?}: {stderr}");
    }
    // A journal of another device (a path reused by mistake): its generations and what it
    // leaves unconfirmed mean nothing here. Refused, and left as it was.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.jsonl");
    let line = r#"{"ts":"2026-12-05T12:00:00.000Z","ts_unix_ms":1,"event":"confirm","generation":8,"confirmed_generation":8,"queues":[{"switch":"sonic-leaf0","port":"Ethernet16","queue":3,"kmin_bytes":1000,"kmax_bytes":2000,"pmax":0.1}],"detail":"x"}"#;
    std::fs::write(&other, format!("{line}\n")).unwrap();
    let other_s = other.display().to_string();
    let args = ["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", "--journal", &other_s];
    let (code, _, stderr) = run_cli(&args).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("its events are for {\"sonic-leaf0\"}") && stderr.contains("a journal belongs to one device"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&other).unwrap(), format!("{line}\n"));
}

/// SIGTERM, SIGINT and SIGHUP (the terminal went away) stop cleanly: a pending change is
/// reverted and journaled. SIGHUP's default action would end the process mid-change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_and_reverts_a_pending_change() {
    for signal in ["TERM", "INT", "HUP"] {
        let a = Actuator::start(&["--backend", "dry-run"]).await;
        let mut c = a.client().await;
        let q = ids(&caps(&mut c).await);
        let l = lease(&mut c, "ctl-a").await;
        apply(&mut c, &l, vec![change(&q[0], 100_000, 1_000_000, 0.5)], 600_000).await;
        drop(c);
        let (code, j) = a.stop_with(signal).await;
        assert_eq!(code, Some(0), "SIG{signal}");
        let reverts = events(&j, "revert");
        assert_eq!(reverts.len(), 1, "SIG{signal}: {j:#?}");
        assert!(reverts[0]["detail"].as_str().unwrap().contains("stopping"), "{}", reverts[0]);
    }
}

/// A second signal ends the grace open connections get (one that never said a word here, which
/// holds the stop 5 s), and the pending change is still reverted: the second Ctrl-C was ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_cuts_the_grace_for_open_connections_short() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let silent = tokio::net::TcpStream::connect(a.addr).await.expect("connect");
    let mut c = a.client().await;
    let q = ids(&caps(&mut c).await);
    let l = lease(&mut c, "ctl-a").await;
    apply(&mut c, &l, vec![change(&q[0], 100_000, 1_000_000, 0.5)], 600_000).await;
    send_signal(a.pid(), "INT");
    // Taken before the second is sent: two pending at once are one to its signal stream.
    eventually("the first SIGINT taken", Duration::from_secs(30), || {
        std::future::ready(a.log_text().contains("SIGINT: stopping").then_some(()))
    })
    .await;
    let second = std::time::Instant::now();
    let (code, j) = a.stop_with("INT").await;
    let took = second.elapsed();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(3), "stopped {took:?} after the second SIGINT; the grace is 5 s");
    let reverts = events(&j, "revert");
    assert_eq!(reverts.len(), 1, "{j:#?}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_streams_one_sample_per_queue_and_applies_settings() {
    let a = Actuator::start(&["--backend", "sim", "--scenario", "websearch-50", "--time-scale", "0.02"]).await;
    let mut c = a.client().await;
    let caps = caps(&mut c).await;
    assert_eq!(caps.backend, "sim");
    let q = ids(&caps);
    assert!(!q.is_empty());
    assert!(caps.queues.iter().all(|q| q.link_bps > 0 && q.pfc_xoff_bytes > 0), "{caps:?}");
    let native = caps.min_telemetry_interval_ns;
    assert!(native > 0);

    let mut stream = telemetry(&mut c).await;
    let mut last_ts = 0;
    for _ in 0..5 {
        let b = tokio::time::timeout(WAIT, stream.next()).await.expect("a batch in time").expect("open").expect("ok");
        assert_eq!(b.samples.len(), q.len(), "one sample per queue");
        let got: Vec<pb::QueueId> = b.samples.iter().map(|s| s.id.clone().unwrap()).collect();
        assert_eq!(got, q, "samples in capabilities order");
        assert!(b.samples.iter().all(|s| s.ts_ns == b.ts_ns && s.ecn.is_some()));
        assert!(b.samples.iter().all(|s| s.ecn_marks_counted), "the simulator counts every mark");
        assert!(b.ts_ns > last_ts);
        last_ts = b.ts_ns;
    }
    // Its present on the telemetry's clock is no earlier than any batch it has sent.
    let now = config(&mut c).await.telemetry_now_ts_ns;
    assert!(now >= last_ts, "present {now} ns, a batch at {last_ts} ns came before");

    // A coarser interval merges native batches.
    let mut coarse =
        c.stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 3 * native }).await.expect("stream").into_inner();
    let b1 = tokio::time::timeout(WAIT, coarse.next()).await.unwrap().unwrap().unwrap();
    let b2 = tokio::time::timeout(WAIT, coarse.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(b1.samples.len(), q.len());
    assert_eq!(b2.ts_ns - b1.ts_ns, 3 * native);

    // An applied setting shows in the telemetry of that queue from the time the reply names:
    // every batch up to it was simulated with the old setting (the interval in progress at the
    // apply among them), every batch after it with the new one.
    let old = setting_of(&config(&mut c).await, &q[0]);
    let l = lease(&mut c, "ctl-a").await;
    let r = apply(&mut c, &l, vec![change(&q[0], 200_000, 800_000, 0.5)], 0).await;
    let want = pb::EcnSetting { kmin_bytes: 200_000, kmax_bytes: 800_000, pmax: 0.5 };
    assert!(r.in_effect_from_ts_ns > 0 && r.landed_ts_ns == r.in_effect_from_ts_ns, "{r:?}");
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut after = 0;
    while after < 3 {
        let b = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("the new setting in telemetry")
            .unwrap()
            .unwrap();
        let expected = if b.ts_ns <= r.in_effect_from_ts_ns { old } else { want };
        assert_eq!(b.samples[0].ecn, Some(expected), "batch at {} ns, in effect from {r:?}", b.ts_ns);
        after += usize::from(b.ts_ns > r.in_effect_from_ts_ns);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_pause_storm_shows_in_telemetry() {
    // Queue 0 stalls from 2 ms of simulated time (0.2 s of wall time at this scale) for 20 ms.
    let a = Actuator::start(&[
        "--backend",
        "sim",
        "--scenario",
        "websearch-50",
        "--time-scale",
        "0.01",
        "--inject-storm",
        "0@2ms:20ms",
    ])
    .await;
    let mut c = a.client().await;
    let mut stream = telemetry(&mut c).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let b =
            tokio::time::timeout_at(deadline, stream.next()).await.expect("paused time on queue 0").unwrap().unwrap();
        if b.samples[0].paused_ns > 0 {
            assert!(b.ts_ns > 2_000_000, "the storm starts at 2 ms: {}", b.ts_ns);
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_has_no_telemetry_without_a_recording() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut c = a.client().await;
    let e = c.stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 0 }).await.expect_err("no telemetry");
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert!(e.message().contains("--telemetry"), "{}", e.message());
}

/// SIGTERM right after the actuator says where it listens (a service manager, a script that
/// restarts it) stops it cleanly: its handler used to be installed only after that line, and a
/// signal in between ended the process by the default action (seen once in a CI run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_right_after_start_stops_the_actuator_cleanly() {
    for _ in 0..5 {
        let a = Actuator::start(&["--backend", "dry-run"]).await;
        let (code, _) = a.stop().await;
        assert_eq!(code, Some(0), "exit code (None: ended by the signal itself)");
    }
}

/// A recording with problems is refused before the actuator serves (exit 2), and since the
/// actuator takes no reader flags, the error says how to write a checked copy to replay, where
/// `validate` can write one: repaired, or read as cumulative. Following it gives a copy the
/// actuator replays (the suggestion lacked `--repair`, which `--out` needs, and a repaired copy
/// with a gap where a sample was dropped was refused again, with the same suggestion). Where
/// no copy would do (a conflicting duplicate), none is offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_with_problems_is_refused_saying_how_to_fix_it() {
    let dir = tempfile::Builder::new().prefix("ecn-actuator-bad-replay-").tempdir().unwrap();
    let fixtures = ecn_tests::telemetry_fixtures::write_fixtures(dir.path());
    let cases = [
        ("wrap", Some("--repair")),
        ("gap", None),
        ("cumulative_without_key", Some("--counters cumulative --repair")),
        ("conflicting_duplicate", None),
    ];
    for (name, flags) in cases {
        let f = fixtures.iter().find(|f| f.name == name).unwrap();
        let path = f.path.to_str().unwrap();
        let replay = ["--backend", "dry-run", "--telemetry", path];
        if name == "gap" {
            let a = Actuator::start(&replay).await;
            replays_the_gap_as_a_gap(&a).await;
            continue;
        }
        let (code, stdout, stderr) = run_cli(&[&["actuator"][..], &replay].concat()).await;
        assert_eq!(code, Some(2), "{name}: {stdout}{stderr}");
        assert!(!stdout.contains("listening on"), "{name}: {stdout}");
        assert!(stderr.contains("the actuator replays a file as it is"), "{name}: {stderr}");
        let Some(flags) = flags else {
            assert!(!stderr.contains("FIXED.parquet"), "{name}: {stderr}");
            continue;
        };
        let fix = format!("`ecn-tuner validate --telemetry {path} {flags} --out FIXED.parquet`");
        assert!(stderr.contains(&fix), "{name}: {stderr}");
        let fixed = dir.path().join(format!("{name}-fixed.parquet"));
        let mut validate = vec!["validate", "--telemetry", path];
        validate.extend(flags.split(' '));
        validate.extend(["--out", fixed.to_str().unwrap()]);
        let (code, stdout, stderr) = run_cli(&validate).await;
        assert_eq!(code, Some(0), "{name}: {stdout}{stderr}");
        let a = Actuator::start(&["--backend", "dry-run", "--telemetry", fixed.to_str().unwrap()]).await;
        drop(a);
    }
}

/// The `gap` fixture's queue, missing from intervals 70–74 of the recording, is missing from
/// those batches of the replay and no others: a gap is replayed as a gap, not filled or
/// refused.
async fn replays_the_gap_as_a_gap(a: &Actuator) {
    use ecn_tests::telemetry_fixtures::{queues, INTERVALS, INTERVAL_NS};
    let gap_queue = queues()[5].to_string();
    let mut stream = telemetry(&mut a.client().await).await;
    // The recording's intervals 1..=INTERVALS loop; the replay's clock keeps growing.
    let mut seen = std::collections::BTreeMap::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while seen.len() < INTERVALS as usize {
        let b = tokio::time::timeout_at(deadline, stream.next()).await.expect("a whole loop").unwrap().unwrap();
        let interval = (b.ts_ns / INTERVAL_NS - 1) % INTERVALS + 1;
        seen.insert(interval, b.samples.iter().any(|s| s.id.as_ref().unwrap().to_string() == gap_queue));
    }
    let absent: Vec<u64> = seen.iter().filter(|(_, has)| !**has).map(|(t, _)| *t).collect();
    assert_eq!(absent, (70..75).collect::<Vec<u64>>(), "intervals without {gap_queue}");
}

/// A fabric past gRPC's default 4 MiB a message: 48 000 queues make 4.8 MB telemetry batches.
/// A client took none (`OutOfRange: decoded message length too large`): a controller held
/// every queue for want of a first sample and exited 0, `record` and `recommend` failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_of_a_fabric_past_four_megabytes_a_batch_arrives() {
    let dir = tempfile::Builder::new().prefix("ecn-actuator-big-").tempdir().unwrap();
    let file = dir.path().join("big.parquet");
    let mut rows = Vec::new();
    for t in 1..=3u64 {
        for sw in 0..100 {
            for port in 0..60 {
                for queue in 0..8u8 {
                    rows.push(ecn_datasets::TelemetrySample {
                        switch: format!("dc1-leaf-{sw:03}"),
                        port: format!("Ethernet{}", port * 4),
                        queue,
                        sample: ecn_datasets::QueueSample {
                            ts_ns: t * 100_000_000,
                            link_bps: 100_000_000_000,
                            // Every field set, as a switch's would be: a field at 0 takes no
                            // bytes on the wire.
                            queue_bytes: 123_456,
                            queue_bytes_avg: 100_000.5,
                            queue_bytes_max: 234_567,
                            tx_bytes: 1_000_000,
                            tx_pkts: 1_000,
                            ecn_marked_pkts: 100,
                            pfc_pause_rx: 3,
                            pfc_pause_tx: 2,
                            paused_ns: 12_345,
                            span_ns: 100_000_000,
                            kmin_bytes: 400_000,
                            kmax_bytes: 1_600_000,
                            pmax: 0.2,
                            ..Default::default()
                        },
                    });
                }
            }
        }
    }
    ecn_datasets::io::write_telemetry_parquet(&file, &rows).unwrap();
    let a =
        Actuator::start(&["--backend", "dry-run", "--telemetry", file.to_str().unwrap(), "--time-scale", "1"]).await;
    let out = dir.path().join("again.parquet");
    let (code, stdout, stderr) =
        run_cli(&["record", "--target", &a.url(), "--duration", "3s", "--out", out.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("(48000 queues"), "{stdout}");
}

/// A replayed recording that states its rows' spans (a poller's jittered steps) loops back to
/// its first row an interval after its last: that row's span, stated for a longer step, used to
/// go out as it was, and a recording of the replay then failed validation at every loop, a row
/// covering more than its step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looped_replay_of_stated_spans_records_a_valid_file() {
    let dir = tempfile::Builder::new().prefix("ecn-actuator-loop-").tempdir().unwrap();
    let mut ts = 0;
    let rows: Vec<ecn_datasets::TelemetrySample> = (0..12u64)
        .map(|i| {
            // 10 ms ± 0.4 ms, the first step the longest: every step occurs once.
            let step = 10_000_000 + [390_000, 0, 130_000, 260_000][(i % 4) as usize] - 200_000 + i * 1_000;
            ts += step;
            ecn_datasets::TelemetrySample {
                switch: "leaf0".into(),
                port: "eth1".into(),
                queue: 3,
                sample: ecn_datasets::QueueSample {
                    ts_ns: ts,
                    span_ns: step,
                    link_bps: 100_000_000_000,
                    tx_bytes: 1_000_000,
                    tx_pkts: 1_000,
                    kmin_bytes: 100_000,
                    kmax_bytes: 400_000,
                    pmax: 0.2,
                    ..Default::default()
                },
            }
        })
        .collect();
    let rec = dir.path().join("jittered.csv");
    ecn_datasets::io::write_telemetry_csv(&rec, &rows).unwrap();
    let (code, stdout, stderr) = run_cli(&["validate", "--telemetry", rec.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let out = dir.path().join("replayed.csv").display().to_string();
    let a = Actuator::start(&["--backend", "dry-run", "--telemetry", rec.to_str().unwrap(), "--time-scale", "1"]).await;
    let (code, stdout, stderr) = run_cli(&["record", "--target", &a.url(), "--duration", "1s", "--out", &out]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(std::fs::read_to_string(&out).unwrap().lines().count() > 24, "more than one loop recorded");
    let (code, stdout, stderr) = run_cli(&["validate", "--telemetry", &out]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

/// Two switches polled every 10 ms, 3 ms apart, near line rate: the replay's interval is the
/// queues' own (it was the most common step between any two rows, 3 ms), and a loop's first
/// row of each queue comes at least its interval after its last row of the loop before (it
/// came 6 ms later, carrying 10 ms of traffic: a recording of the replay failed validation at
/// every loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looped_replay_of_queues_polled_out_of_phase_records_a_valid_file() {
    let dir = tempfile::Builder::new().prefix("ecn-actuator-phase-").tempdir().unwrap();
    let interval = 10_000_000u64;
    let mut rows = Vec::new();
    for i in 0..12u64 {
        for (switch, offset) in [("leaf0", 0), ("leaf1", 3_000_000)] {
            rows.push(ecn_datasets::TelemetrySample {
                switch: switch.into(),
                port: "eth1".into(),
                queue: 3,
                sample: ecn_datasets::QueueSample {
                    ts_ns: (i + 1) * interval + offset,
                    link_bps: 100_000_000_000,
                    // 90% of line rate.
                    tx_bytes: 112_500_000,
                    tx_pkts: 112_500,
                    kmin_bytes: 100_000,
                    kmax_bytes: 400_000,
                    pmax: 0.2,
                    ..Default::default()
                },
            });
        }
    }
    rows.sort_by_key(|r| r.sample.ts_ns);
    let rec = dir.path().join("out-of-phase.parquet");
    ecn_datasets::io::write_telemetry_parquet(&rec, &rows).unwrap();
    let a = Actuator::start(&["--backend", "dry-run", "--telemetry", rec.to_str().unwrap(), "--time-scale", "1"]).await;
    let mut c = a.client().await;
    assert_eq!(caps(&mut c).await.min_telemetry_interval_ns, interval);
    let out = dir.path().join("replayed.parquet").display().to_string();
    let (code, stdout, stderr) = run_cli(&["record", "--target", &a.url(), "--duration", "600ms", "--out", &out]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let recorded = ecn_datasets::io::read_telemetry_parquet(std::path::Path::new(&out)).unwrap();
    assert!(recorded.len() > 2 * 12, "more than one loop recorded: {} rows", recorded.len());
    let (code, stdout, stderr) = run_cli(&["validate", "--telemetry", &out]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_replays_a_csv_recording_as_its_telemetry() {
    let dir = tempfile::Builder::new().prefix("ecn-actuator-replay-").tempdir().unwrap();
    let out = dir.path().join("rec");
    let (code, _, stderr) = run_cli(&["sim", "--scenario", "incast-15", "--out", out.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    // Replay reads telemetry as `validate` does, so a CSV copy serves as well as the Parquet.
    let rows = ecn_datasets::io::read_telemetry_parquet(&out.join("telemetry.parquet")).expect("recording");
    let rec = out.join("telemetry.csv");
    ecn_datasets::io::write_telemetry_csv(&rec, &rows).expect("csv copy");
    let a =
        Actuator::start_in(dir, &["--backend", "dry-run", "--telemetry", rec.to_str().unwrap(), "--time-scale", "0.1"])
            .await;
    let mut c = a.client().await;
    let caps = caps(&mut c).await;
    assert_eq!(caps.backend, "dry-run");
    assert!(caps.min_telemetry_interval_ns > 0);
    let mut stream = telemetry(&mut c).await;
    let mut last = 0;
    for _ in 0..3 {
        let b = tokio::time::timeout(WAIT, stream.next()).await.expect("a batch").unwrap().unwrap();
        assert_eq!(b.samples.len(), caps.queues.len());
        // A recording's zero marks may be a switch that did not count them.
        assert!(b.samples.iter().all(|s| !s.ecn_marks_counted));
        assert!(b.ts_ns > last);
        last = b.ts_ns;
    }
    // A change, which the recording does not follow, is judged from the replay's present on:
    // never on a batch already sent.
    let l = lease(&mut c, "ctl-replay").await;
    let r = apply(&mut c, &l, vec![change(&ids(&caps)[0], 200_000, 800_000, 0.5)], 0).await;
    assert!(
        r.landed_ts_ns >= last && r.in_effect_from_ts_ns == r.landed_ts_ns,
        "{r:?}, a batch at {last} ns came first"
    );
    let now = config(&mut c).await.telemetry_now_ts_ns;
    assert!(now >= last, "present {now} ns, a batch at {last} ns came first");
}

/// A scenario run that ends between sample times (its hard stop, 1.15 ms, is off the 200 µs
/// grid) closes its last, partial interval before the next run starts, as `sim --out` does:
/// a recording of the actuator has no gap at its restarts, and validates. The partial
/// interval's counters were lost at every restart, leaving a 350 µs gap each time.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_ends_between_samples_loses_no_interval() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("short.toml");
    std::fs::write(
        &scenario,
        "base = \"websearch-50\"\nduration = \"1ms\"\ndrain = \"150us\"\nsample_interval = \"200us\"\n",
    )
    .unwrap();
    let a = Actuator::start(&["--backend", "sim", "--scenario", scenario.to_str().unwrap()]).await;
    let out = dir.path().join("rec.parquet").display().to_string();
    let (code, stdout, stderr) = run_cli(&["record", "--target", &a.url(), "--duration", "3s", "--out", &out]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let (code, stdout, stderr) = run_cli(&["validate", "--telemetry", &out]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(a.log_text().matches("restarting with the next seed").count() >= 2, "{}", a.log_text());
}

/// A raw HTTP/2 connection to an actuator: for requests its gRPC client never makes, half-sent
/// or not protobuf at all.
struct RawConnection {
    send: h2::client::SendRequest<bytes::Bytes>,
    connection: h2::client::Connection<tokio::net::TcpStream, bytes::Bytes>,
}

/// Wait for `f`, driving `connection` meanwhile.
async fn driving<F: std::future::Future>(
    connection: &mut h2::client::Connection<tokio::net::TcpStream, bytes::Bytes>,
    f: F,
) -> F::Output {
    tokio::select! {
        out = f => out,
        ended = connection => panic!("the actuator ended the connection: {ended:?}"),
    }
}

impl RawConnection {
    async fn open(a: &Actuator) -> RawConnection {
        let tcp = tokio::net::TcpStream::connect(a.addr).await.expect("connect");
        let (send, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
        RawConnection { send, connection }
    }

    /// Start a call of `method` whose request frame says `declared` bytes, and send `body`
    /// (and the end of the request if `end`).
    async fn start(
        &mut self,
        method: &str,
        declared: u32,
        body: &[u8],
        end: bool,
    ) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
        let request = http::Request::post(format!("http://127.0.0.1/ecn_tuner.v1.Actuator/{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("a request");
        let send = &mut self.send;
        driving(&mut self.connection, std::future::poll_fn(|cx| send.poll_ready(cx))).await.expect("a stream");
        let (response, mut stream) = self.send.send_request(request, false).expect("send request");
        let mut frame = vec![0u8];
        frame.extend_from_slice(&declared.to_be_bytes());
        frame.extend_from_slice(body);
        stream.send_data(frame.into(), end).expect("send data");
        (response, stream)
    }
}

/// What a client can make the actuator hold is bounded: a connection may have 32 streams open,
/// and 16 requests are read past 16 KiB at once, all connections together. Without either, one
/// connection that began hundreds of 4 MiB Applies and never finished them held 1.8 GB. Calls
/// that stay under 16 KiB (every call but a large Apply) never wait for those places: taken at
/// a call's start, one client that opened 16 calls held back the lease holder's renewals,
/// Confirms and kill switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_left_unfinished_hold_sixteen_places_and_no_more() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut raw = RawConnection::open(&a).await;
    // A request that is not protobuf is the client's mistake, INVALID_ARGUMENT (controller_id
    // holds bytes that are not UTF-8), not INTERNAL, the code for the device's failures.
    let (answer, _stream) = raw.start("AcquireWriter", 4, &[0x0a, 0x02, 0xc3, 0x28], true).await;
    let answer = driving(&mut raw.connection, answer).await.expect("an answer");
    assert_eq!(answer.headers()["grpc-status"], "3", "{:?}", answer.headers());
    assert_eq!(raw.connection.max_concurrent_send_streams(), 32);

    // Eight calls begun and never sent take nothing; sixteen Applies that say 4 MiB and send
    // 17 KiB take every place.
    let mut hoard = Vec::new();
    for _ in 0..8 {
        hoard.push(raw.start("Apply", 4 << 20, &[], false).await);
    }
    for _ in 0..16 {
        hoard.push(raw.start("Apply", 4 << 20, &[0x12; 17 << 10], false).await);
    }
    // A connection's frames go out in order: once a call sent after them is answered, the
    // actuator has them all.
    let (answer, _stream) = raw.start("StreamTelemetry", 0, &[], true).await;
    driving(&mut raw.connection, answer).await.expect("an answer");
    let RawConnection { send, connection } = raw;
    let driver = tokio::spawn(async move {
        let _hoard = hoard;
        let _ = connection.await;
    });
    // Small calls go through.
    let mut c = a.client().await;
    let small = tokio::time::timeout(WAIT, c.get_config(pb::GetConfigRequest {})).await;
    assert!(small.is_ok_and(|r| r.is_ok()), "a small call waited behind calls that hold no place");
    // A 17th large request (an Apply whose `reason` is 32 KiB) waits for a place.
    let mut large = RawConnection::open(&a).await;
    let mut body = vec![0x32, 0x80, 0x80, 0x02];
    body.extend_from_slice(&[b'r'; 32 << 10]);
    let (answer, _stream) = large.start("Apply", body.len() as u32, &body, true).await;
    tokio::pin!(answer);
    let waited = tokio::time::timeout(Duration::from_secs(3), driving(&mut large.connection, &mut answer)).await;
    assert!(waited.is_err(), "a 17th large request was read while 16 held every place: {waited:?}");
    // Once they are gone, it is read and answered.
    driver.abort();
    let _ = driver.await;
    drop(send);
    let answered = tokio::time::timeout(WAIT, driving(&mut large.connection, &mut answer)).await;
    let answered = answered.expect("answered in time").expect("an answer");
    assert!(answered.headers().contains_key("grpc-status"), "{:?}", answered.headers());
}

/// Telemetry streams are bounded too, each may hold batches its client has not read: four a
/// connection, and in all as many as 256 MiB of unread batches hold (256 on this small fabric).
/// A bound for all alone let one connection that opened 16 lock every controller out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_streams_beyond_four_a_connection_are_refused_until_one_ends() {
    let a = Actuator::start(&["--backend", "sim", "--scenario", "websearch-50", "--time-scale", "0.02"]).await;
    let mut c = a.client().await;
    let mut streams = Vec::new();
    for _ in 0..4 {
        streams.push(c.stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 0 }).await.expect("stream"));
    }
    let refused = c.stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 0 }).await.expect_err("a 5th");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("at most 4 telemetry streams"), "{refused:?}");
    // Another connection has its own.
    let mut other = a.client().await;
    let mut theirs = other.stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 0 }).await.expect("stream");
    tokio::time::timeout(WAIT, theirs.get_mut().next()).await.expect("a batch in time").expect("open").expect("ok");
    streams.pop();
    let mut again = eventually("a stream once one ended", WAIT, || {
        let mut c = c.clone();
        async move { c.stream_telemetry(pb::StreamTelemetryRequest { interval_ns: 0 }).await.ok() }
    })
    .await
    .into_inner();
    tokio::time::timeout(WAIT, again.next()).await.expect("a batch in time").expect("open").expect("ok");
}

/// Refusals of the writer role are logged in a burst, then one a second, as refusals of
/// requests without a lease are journaled: a flood of them wrote a line each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_writer_requests_logs_a_burst() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    let mut c = a.client().await;
    lease(&mut c, "holder").await;
    let started = std::time::Instant::now();
    for _ in 0..300 {
        let r = c.acquire_writer(pb::AcquireWriterRequest { controller_id: "other".into(), ttl_ms: 0 }).await;
        assert_eq!(r.expect_err("held by another").code(), Code::FailedPrecondition);
    }
    let most = 60 + started.elapsed().as_secs() as usize + 1;
    let logged = eventually("the burst logged", WAIT, || {
        let n = a.log_text().matches("writer role refused").count();
        async move { (n >= 60).then_some(n) }
    })
    .await;
    assert!(logged <= most, "{logged} lines for 300 refusals, at most {most}");
}

/// A peer that takes TCP connections and never answers (a hung actuator whose kernel still
/// accepts, a middlebox): over https:// the TLS handshake had no time limit, nor the call that
/// waited for it, so `run` (and its stop, and its kill switch) waited for ever. It fails now
/// within the connect and call timeouts, saying what it waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_peer_that_never_answers_fails_the_start_within_its_timeouts() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            keep.lock().unwrap().push(conn);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let target = format!("https://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let args = ["run", "--target", &target, "--tls-ca", ca.to_str().unwrap(), "--mode", "shadow", "--duration", "5s"];
    let (code, _, stderr) =
        run_cli_within(&[&args[..], &["--call-timeout", "1s"]].concat(), Duration::from_secs(60)).await;
    assert_eq!(code, Some(1), "{stderr}");
    let waited = stderr.contains("TLS handshake timeout") || stderr.contains("no connection within");
    assert!(stderr.contains("cannot reach the actuator") && waited, "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    assert!(!held.lock().unwrap().is_empty(), "the client never connected");
}

/// SIGUSR1 is the controller's kill switch; thrown at every ecn-tuner at once (`pkill -USR1
/// ecn-tuner`), its default action killed the actuator, a change unconfirmed and never
/// reverted. The actuator takes it, says it does nothing there, and serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_does_not_stop_an_actuator() {
    let a = Actuator::start(&["--backend", "dry-run"]).await;
    send_signal(a.pid(), "USR1");
    let said = eventually("the SIGUSR1 warning", Duration::from_secs(20), || {
        let log = std::fs::read_to_string(&a.log).unwrap_or_default();
        async move { log.contains("SIGUSR1 does nothing here").then_some(()) }
    });
    said.await;
    let mut c = a.client().await;
    c.get_capabilities(pb::GetCapabilitiesRequest {}).await.expect("still serving after SIGUSR1");
    drop(c);
    let (code, _) = a.stop().await;
    assert_eq!(code, Some(0));
}

/// The address an actuator `child` (its stdout piped) says it listens on, in its first line.
async fn listening_on(child: &mut tokio::process::Child) -> String {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await.unwrap().unwrap().unwrap();
    first.strip_prefix("listening on ").expect("the address line").trim().to_string()
}

/// An actuator started with SIGHUP ignored (`nohup ecn-tuner actuator ... &`) keeps it
/// ignored: the terminal that closes sends its jobs SIGHUP, and the actuator stopped, though
/// `nohup` was asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actuator_started_under_nohup_ignores_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let mut cmd = tokio::process::Command::new("nohup");
    cmd.arg(ecn_tests::ecn_tuner_bin())
        .args(["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", "--journal"])
        .arg(&journal)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("nohup");
    let addr = listening_on(&mut child).await;
    send_signal(child.id(), "HUP");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(child.try_wait().unwrap().is_none(), "the actuator stopped on SIGHUP under nohup");
    let mut c = pb::actuator_client::ActuatorClient::connect(format!("http://{addr}")).await.expect("connect");
    c.get_capabilities(pb::GetCapabilitiesRequest {}).await.expect("still serving after SIGHUP");
    send_signal(child.id(), "TERM");
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
}

/// A stderr that takes nothing (a terminal stopped with Ctrl-S, `2>&1 | less` left unread, a
/// log collector that hangs): log lines were written while the actuator held its state lock,
/// so once the pipe was full the deadline revert, every call and SIGTERM waited for a reader.
/// Here the pipe holds 4 KiB and nobody reads it: calls are answered, and an unconfirmed
/// change is reverted at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_nobody_reads_holds_neither_calls_nor_the_deadline_revert() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe(2) writes two new descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just made, and each is owned by one OwnedFd from here.
    let (unread, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl(2) on a descriptor we own; a smaller pipe only fills sooner.
    unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let mut child = ecn_tests::ecn_tuner_command()
        .args(["actuator", "--backend", "dry-run", "--listen", "127.0.0.1:0", "--journal"])
        .arg(&journal)
        .env("ECN_TUNER_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(write_end))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let addr = listening_on(&mut child).await;
    let mut c = pb::actuator_client::ActuatorClient::connect(format!("http://{addr}")).await.expect("connect");
    let q = ids(&c.get_capabilities(pb::GetCapabilitiesRequest {}).await.unwrap().into_inner());
    let l = c
        .acquire_writer(pb::AcquireWriterRequest { controller_id: "ctl".into(), ttl_ms: 120_000 })
        .await
        .unwrap()
        .into_inner()
        .lease_id;
    let answered = Duration::from_secs(20);
    let apply = |c: &mut pb::actuator_client::ActuatorClient<tonic::transport::Channel>, kmin: u64, within_ms: u64| {
        let request = pb::ApplyRequest {
            lease_id: l.clone(),
            changes: vec![change(&q[0], kmin, 1_000_000, 0.5)],
            confirm_within_ms: within_ms,
            reason: "test".into(),
            ..Default::default()
        };
        let mut c = c.clone();
        async move { tokio::time::timeout(answered, c.apply(request)).await.expect("an Apply answered").unwrap() }
    };
    // Far more log than the pipe holds: every apply is logged and journaled.
    for i in 0..60 {
        apply(&mut c, 100_000 + i * 1_000, 0).await;
    }
    let applied = apply(&mut c, 200_000, 1_000).await.into_inner().generation;
    let reverted = eventually("the deadline revert", Duration::from_secs(30), || {
        let mut c = c.clone();
        async move {
            let cfg = tokio::time::timeout(answered, c.get_config(pb::GetConfigRequest {})).await.ok()?.ok()?;
            Some(cfg.into_inner()).filter(|cfg| cfg.generation > applied)
        }
    })
    .await;
    assert_eq!(reverted.confirmed_generation, reverted.generation);
    drop(unread);
}
