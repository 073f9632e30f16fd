//! The SONiC backend end to end: a real `redis-server` seeded like a SONiC switch (32 ports,
//! lossless queues 3 and 4 on `AZURE_LOSSLESS`), `ecn-tuner actuator --backend sonic` in front
//! of it, and the real controller (`ecn-tuner run`) against that: the online-control acceptance
//! scenarios, Redis going away in the middle of an apply, counter wraps and resets, and
//! `ecn-tuner sonic restore`.
//!
//! Needs `redis-server` (Debian package `redis-server`; scripts/test installs it). Every test
//! starts its own server on a free loopback port in a scratch directory.

use ecn_tests::sonic::{
    client_in_multi, queue_setting, recording, seed, set_config_field, tables, Counters, Orchagent, Proxy, RedisServer,
    Spec, Ticker, Traffic, APPL_DB, ASIC_DB, CONFIG_DB, COUNTERS_DB, STATE_DB,
};
use ecn_tests::{
    assert_applied_within_bounds, assert_apply_refused, change, decision_reasons, enforce_flags, events, eventually,
    pb, read_json_lines, run_cli, send_signal, stop_process, telemetry, Actuator, FABRIC_PATIENCE,
};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_stream::StreamExt;

const WAIT: Duration = Duration::from_secs(60);
/// The seeded profile, as the wire reports it.
const ORIGINAL: (u64, u64, u64) = (1_048_576, 2_097_152, 5);
/// The controller's default baseline (hpcc-alibaba) at 100 Gb/s.
const BASELINE: (u64, u64, u64) = (400_000, 1_600_000, 20);

/// A seeded switch with counters ticking every 50 ms, and an actuator polling it every 100 ms.
struct Rig {
    redis: RedisServer,
    ticker: Ticker,
    act: Actuator,
}

async fn rig(spec: Spec, extra: &[&str]) -> Rig {
    let redis = RedisServer::start();
    seed(&redis, &spec);
    let ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(50));
    let url = redis.url();
    let mut args = vec!["--backend", "sonic", "--redis", url.as_str(), "--poll-interval", "100ms"];
    args.extend_from_slice(extra);
    let act = Actuator::start(&args).await;
    Rig { redis, ticker, act }
}

fn setting_of(x: &serde_json::Value) -> (u64, u64, u64) {
    let a = &x["after_guardrails"];
    let p = (a["pmax"].as_f64().unwrap() * 100.0).round() as u64;
    (a["kmin_bytes"].as_u64().unwrap(), a["kmax_bytes"].as_u64().unwrap(), p)
}

/// Every controlled queue's green setting, as CONFIG_DB has it.
fn switch_settings(redis: &RedisServer, spec: &Spec) -> Vec<(String, (u64, u64, u64))> {
    let mut con = redis.con(CONFIG_DB);
    let mut out = Vec::new();
    for p in &spec.ports {
        for &q in &spec.lossless {
            out.push((format!("{p}|{q}"), queue_setting(&mut con, p, q)));
        }
    }
    out
}

async fn lease(c: &mut ecn_tests::Client, who: &str) -> String {
    c.acquire_writer(pb::AcquireWriterRequest { controller_id: who.into(), ttl_ms: 120_000 })
        .await
        .expect("AcquireWriter")
        .into_inner()
        .lease_id
}

fn qid(port: &str, queue: u32) -> pb::QueueId {
    pb::QueueId { switch: "sonic-leaf0".into(), port: port.into(), queue }
}

#[tokio::test(flavor = "multi_thread")]
async fn capabilities_and_telemetry_come_from_the_switch() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.unwrap().into_inner();
    assert_eq!(caps.backend, "sonic");
    assert_eq!(caps.queues.len(), 64, "32 ports x 2 lossless queues");
    let ids: Vec<pb::QueueId> = caps.queues.iter().map(|q| q.id.clone().unwrap()).collect();
    assert_eq!(&ids[..3], &[qid("Ethernet0", 3), qid("Ethernet0", 4), qid("Ethernet4", 3)], "natural port order");
    assert_eq!(ids[63], qid("Ethernet124", 4));
    assert!(caps.queues.iter().all(|q| q.link_bps == 100_000_000_000));
    assert_eq!(caps.buffer_bytes, 32_099_072, "egress_lossless_pool");
    assert_eq!(caps.bounds.unwrap().kmax_max_bytes, 32_099_072);
    assert_eq!(caps.min_telemetry_interval_ns, 100_000_000);
    let cfg = c.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner();
    for q in &cfg.queues {
        let s = q.setting.unwrap();
        assert_eq!((s.kmin_bytes, s.kmax_bytes, s.pmax), (1_048_576, 2_097_152, 0.05));
    }

    let mut stream = telemetry(&mut c).await;
    let (mut bytes, mut span, mut marked, mut last_ts) = (0u64, 0u64, 0u64, None);
    for _ in 0..15 {
        let b = tokio::time::timeout(WAIT, stream.next()).await.expect("a batch").unwrap().unwrap();
        assert_eq!(b.samples.len(), 64, "one sample per queue");
        assert_eq!(b.samples.iter().map(|s| s.id.clone().unwrap()).collect::<Vec<_>>(), ids);
        let s = &b.samples[0];
        // SONiC refreshes ECN marks every 10 s unless told otherwise, and the poller reads
        // every 100 ms: their zeros say nothing.
        assert!(b.samples.iter().all(|s| !s.ecn_marks_counted), "marks refreshed every 10 s, read every 100 ms");
        assert_eq!(s.queue_bytes_max, 150_000, "the shared watermark");
        assert!(s.ecn.is_some() && s.link_bps == 100_000_000_000);
        if let Some(t) = last_ts {
            span += b.ts_ns - t;
            bytes += s.tx_bytes;
            marked += s.ecn_marked_pkts;
        }
        last_ts = Some(b.ts_ns);
    }
    // The fixture sends 40 Gb/s per queue: 5 bytes per ns.
    let rate = bytes as f64 / span as f64;
    assert!((3.0..7.0).contains(&rate), "{rate} bytes/ns");
    assert!(marked > 0);

    // On the clock of the batches, a write lands after every batch already sent, and counts as
    // in effect a poll interval later (orchagent programs the ASIC after CONFIG_DB).
    let l = lease(&mut c, "ctl-a").await;
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    let r = c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("apply").into_inner();
    let last_ts = last_ts.expect("batches");
    assert!(r.landed_ts_ns >= last_ts, "{r:?}, a batch at {last_ts} ns came before");
    assert!(r.in_effect_from_ts_ns >= r.landed_ts_ns + 100_000_000, "{r:?}");
    let now = c.get_config(pb::GetConfigRequest {}).await.expect("config").into_inner().telemetry_now_ts_ns;
    assert!(now >= r.landed_ts_ns, "present {now} ns, before the write at {r:?}");
    drop(rig.ticker);
}

/// SONiC's `database_config.json` for three Redis instances on loopback, by port: CONFIG_DB and
/// APPL_DB on the first, COUNTERS_DB and ASIC_DB on the second, STATE_DB on the third (by socket
/// address; a real switch's map also gives each instance's Unix socket, which the actuator
/// prefers).
fn database_map(ports: [u16; 3]) -> String {
    let db = |id: u32, separator: &str, instance: &str| {
        format!(r#"{{ "id": {id}, "separator": "{separator}", "instance": "{instance}" }}"#)
    };
    let [first, second, third] = ports;
    format!(
        r#"{{ "INSTANCES": {{ "redis": {{ "hostname": "127.0.0.1", "port": {first} }},
                           "redis2": {{ "hostname": "127.0.0.1", "port": {second} }},
                           "redis3": {{ "hostname": "127.0.0.1", "port": {third} }} }},
             "DATABASES": {{ "APPL_DB": {}, "ASIC_DB": {}, "COUNTERS_DB": {}, "LOGLEVEL_DB": {},
                            "CONFIG_DB": {}, "FLEX_COUNTER_DB": {}, "STATE_DB": {} }},
             "VERSION": "1.0" }}"#,
        db(0, ":", "redis"),
        db(1, ":", "redis2"),
        db(2, ":", "redis2"),
        db(3, ":", "redis"),
        db(4, "|", "redis"),
        db(5, ":", "redis2"),
        db(6, "|", "redis3"),
    )
}

/// A switch with SONiC's multi-database layout, its databases on three Redis instances as its
/// `database_config.json` says: given that map (`--database-config`), the actuator finds the
/// queues and profiles on the first, reads the counters from the second, writes to the first,
/// keeps its recording on the third, and `sonic restore` takes the same map. Each instance is
/// emptied of the databases the others hold, so that a read or a write on the wrong one finds
/// nothing (without the map, the actuator found no counters). A running actuator is seen
/// wherever its connections are: STATE_DB's instance holds none of them, and a restore or a
/// second actuator that looked only there went ahead.
#[tokio::test(flavor = "multi_thread")]
async fn a_multi_database_switch_is_found_through_its_database_map() {
    let spec = Spec::default();
    let servers = [RedisServer::start(), RedisServer::start(), RedisServer::start()];
    let [first, second, third] = &servers;
    let held: [&[i64]; 3] = [&[CONFIG_DB, APPL_DB], &[COUNTERS_DB, ASIC_DB], &[STATE_DB]];
    for (server, own) in servers.iter().zip(held) {
        seed(server, &spec);
        for db in [CONFIG_DB, APPL_DB, COUNTERS_DB, ASIC_DB, STATE_DB].into_iter().filter(|db| !own.contains(db)) {
            redis::cmd("FLUSHDB").query::<()>(&mut server.con(db)).expect("FLUSHDB");
        }
    }
    let _ticker = Ticker::start(second, Counters::new(&spec, 64), Duration::from_millis(50));
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("database_config.json");
    std::fs::write(&map, database_map(servers.each_ref().map(|s| s.port))).unwrap();
    let map = map.display().to_string();
    let before = tables(&mut first.con(CONFIG_DB));

    let act = Actuator::start(&["--backend", "sonic", "--database-config", &map, "--poll-interval", "100ms"]).await;
    let mut c = act.client().await;
    let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.unwrap().into_inner();
    assert_eq!(caps.queues.len(), 64, "32 ports x 2 lossless queues, from the first instance's CONFIG_DB");
    let mut stream = telemetry(&mut c).await;
    let mut sent = 0;
    for _ in 0..5 {
        let b = tokio::time::timeout(WAIT, stream.next()).await.expect("a batch").unwrap().unwrap();
        assert_eq!(b.samples.len(), 64, "one sample per queue");
        sent += b.samples[0].tx_bytes;
    }
    assert!(sent > 0, "the second instance's counters move");
    let l = lease(&mut c, "ctl-a").await;
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("apply");
    assert_eq!(queue_setting(&mut first.con(CONFIG_DB), "Ethernet0", 3), (300_000, 900_000, 25));
    for other in [second, third] {
        assert!(tables(&mut other.con(CONFIG_DB)).is_empty(), "nothing written to another instance");
    }
    assert!(recording(third).is_some(), "the originals recorded in the third instance's STATE_DB");

    let tuned = tables(&mut first.con(CONFIG_DB));
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--database-config", &map]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("an ecn-tuner actuator is connected to this switch"), "{stderr}");
    assert_eq!(tables(&mut first.con(CONFIG_DB)), tuned, "nothing restored under the actuator");
    let journal = dir.path().join("second.jsonl").display().to_string();
    let args =
        ["actuator", "--backend", "sonic", "--database-config", &map, "--listen", "127.0.0.1:0", "--journal", &journal];
    let (code, _, stderr) = run_cli(&args).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("another ecn-tuner actuator is connected to this switch"), "{stderr}");
    // Named as the user gave it: the map and the instance, not a `--redis` never given.
    assert!(stderr.contains(&format!("--database-config {map} (Redis at {}): another", first.url())), "{stderr}");

    let (code, _) = act.stop().await;
    assert_eq!(code, Some(0));
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--database-config", &map]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("removed 1 ecn-tuner profile(s)"), "{stdout}");
    assert_eq!(tables(&mut first.con(CONFIG_DB)), before, "WRED_PROFILE and QUEUE byte-identical");
    // Said of the instance that holds STATE_DB.
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--database-config", &map]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&format!("STATE_DB (db {STATE_DB}) at {}", third.url())), "{stdout}");

    // The map says where every database is: --redis or an index beside it is refused.
    let url = first.url();
    for (args, said) in [
        (["--redis", url.as_str()], "--redis: --database-config"),
        (["--config-db", "4"], "--config-db: --database-config"),
    ] {
        let (code, _, stderr) =
            run_cli(&[&["sonic", "restore", "--database-config", &map], args.as_slice()].concat()).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    let broken = dir.path().join("broken.json");
    let text = database_map(servers.each_ref().map(|s| s.port)).replace("\"CONFIG_DB\"", "\"CONFIG\"");
    std::fs::write(&broken, text).unwrap();
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--database-config", &broken.display().to_string()]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("broken.json: DATABASES.CONFIG_DB: missing"), "{stderr}");
    // An index the instance lacks is the map's entry, as it would be the flag's.
    let text = database_map(servers.each_ref().map(|s| s.port)).replace(
        r#""id": 6, "separator": "|", "instance": "redis3""#,
        r#""id": 99, "separator": "|", "instance": "redis3""#,
    );
    std::fs::write(&broken, text).unwrap();
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--database-config", &broken.display().to_string()]).await;
    assert_eq!(code, Some(2), "{stderr}");
    let said = format!("broken.json: DATABASES.STATE_DB.id 99: Redis at {} has no such database", third.url());
    assert!(stderr.contains(&said), "{stderr}");
}

/// A switch whose orchagent programs CONFIG_DB into ASIC_DB: `lag` after each change, or not
/// at all once its `stuck` flag is set.
async fn rig_with_orchagent(lag: Duration, extra: &[&str]) -> (Rig, Orchagent) {
    rig_with_orchagent_and(lag, extra, |_| {}).await
}

/// [`rig_with_orchagent`], with `before` run on the seeded server before anything starts.
async fn rig_with_orchagent_and(lag: Duration, extra: &[&str], before: impl FnOnce(&RedisServer)) -> (Rig, Orchagent) {
    rig_with_orchagent_on(Spec::default(), lag, extra, before).await
}

/// [`rig_with_orchagent_and`] on a switch seeded as `spec` says.
async fn rig_with_orchagent_on(
    spec: Spec,
    lag: Duration,
    extra: &[&str],
    before: impl FnOnce(&RedisServer),
) -> (Rig, Orchagent) {
    let redis = RedisServer::start();
    seed(&redis, &spec);
    before(&redis);
    let orchagent = Orchagent::start(&redis, &spec, lag);
    let ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(50));
    let url = redis.url();
    let mut args = vec!["--backend", "sonic", "--redis", url.as_str(), "--poll-interval", "100ms"];
    args.extend_from_slice(extra);
    let act = Actuator::start(&args).await;
    (Rig { redis, ticker, act }, orchagent)
}

/// The green curve ASIC_DB shows for port `i`'s queue `q` (its object id as
/// COUNTERS_QUEUE_NAME_MAP gives it): (kmin, kmax, percent).
fn asic_curve(redis: &RedisServer, i: usize, q: u32) -> Option<(u64, u64, u64)> {
    let name = format!("{}:{q}", Spec::default().ports[i]);
    let oid: String =
        redis::cmd("HGET").arg("COUNTERS_QUEUE_NAME_MAP").arg(name).query(&mut redis.con(COUNTERS_DB)).ok()?;
    let mut con = redis.con(ASIC_DB);
    let key = format!("ASIC_STATE:SAI_OBJECT_TYPE_QUEUE:{oid}");
    let wred: Option<String> =
        redis::cmd("HGET").arg(key).arg("SAI_QUEUE_ATTR_WRED_PROFILE_ID").query(&mut con).ok()?;
    let fields: Vec<Option<u64>> = redis::cmd("HMGET")
        .arg(format!("ASIC_STATE:SAI_OBJECT_TYPE_WRED:{}", wred?))
        .arg(&[
            "SAI_WRED_ATTR_GREEN_MIN_THRESHOLD",
            "SAI_WRED_ATTR_GREEN_MAX_THRESHOLD",
            "SAI_WRED_ATTR_GREEN_DROP_PROBABILITY",
        ])
        .query(&mut con)
        .ok()?;
    Some((fields[0]?, fields[1]?, fields[2]?))
}

/// Where ASIC_DB shows what orchagent programmed, a write is done once it shows there: an
/// orchagent 1.5 s late holds the Apply reply that long, and the reply's `in_effect_from_ts_ns`
/// (before which an interval may still have run on the old curve) is that late too, not the
/// one poll interval (100 ms) allowed where nothing can be read back.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_is_in_effect_once_asic_db_shows_it_programmed() {
    // A timeout well above the lag: the default (2 s) left a loaded machine half a second.
    let (rig, _orchagent) = rig_with_orchagent(Duration::from_millis(1500), &["--program-timeout", "10s"]).await;
    assert_eq!(asic_curve(&rig.redis, 0, 3), Some(ORIGINAL), "the seeded curve, programmed");
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    let sent = std::time::Instant::now();
    let r = c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("apply").into_inner();
    let waited = sent.elapsed();
    assert!(waited >= Duration::from_millis(1400), "the reply waited for orchagent: {waited:?}");
    assert!(r.in_effect_from_ts_ns >= r.landed_ts_ns + 1_400_000_000, "{r:?}");
    assert_eq!(asic_curve(&rig.redis, 0, 3), Some((300_000, 900_000, 25)));
    assert_eq!(asic_curve(&rig.redis, 0, 4), Some(ORIGINAL), "the queue left alone");
}

/// SONiC before 202106 writes references bracketed (`[WRED_PROFILE|AZURE_LOSSLESS]`), and its
/// orchagent takes no other form. The actuator refused such a switch ("the queue's WRED profile
/// does not exist" for every queue); it reads both forms, binds in the switch's own, and a
/// restore puts back every entry byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn a_switch_with_bracketed_references_is_tuned_in_their_form_and_restored() {
    let spec = Spec { bracketed: true, ..Spec::default() };
    let (rig, _orchagent) = rig_with_orchagent_on(spec, Duration::ZERO, &["--program-timeout", "10s"], |_| {}).await;
    let url = rig.redis.url();
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("apply, read back");
    assert_eq!(asic_curve(&rig.redis, 0, 3), Some((300_000, 900_000, 25)), "programmed");
    assert_eq!(asic_curve(&rig.redis, 0, 4), Some(ORIGINAL), "the queue left alone");
    let binding: String =
        redis::cmd("HGET").arg("QUEUE|Ethernet0|3").arg("wred_profile").query(&mut rig.redis.con(CONFIG_DB)).unwrap();
    assert_eq!(binding, "[WRED_PROFILE|ECN_TUNER_Ethernet0_3]");
    let (code, _) = rig.act.stop().await;
    assert_eq!(code, Some(0));
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &url]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("removed 1 ecn-tuner profile(s)"), "{stdout}");
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), before, "WRED_PROFILE and QUEUE byte-identical");
}

/// A write orchagent does not program (stopped, busy, or refusing what the ASIC cannot do) is
/// undone: CONFIG_DB holds exactly what it held before, the Apply fails, and the settings the
/// actuator reports are the old ones. Without the read-back, the write counted as done, and a
/// health check would have judged the old curve as the new one.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_orchagent_does_not_program_is_undone_and_fails() {
    let (rig, orchagent) = rig_with_orchagent(Duration::ZERO, &["--program-timeout", "2s"]).await;
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    orchagent.stuck.store(true, Ordering::SeqCst);
    let refused = c
        .apply(pb::ApplyRequest { lease_id: l.clone(), changes: changes.clone(), ..Default::default() })
        .await
        .expect_err("an unprogrammed write fails");
    assert!(refused.message().contains("orchagent did not program it within --program-timeout"), "{refused:?}");
    assert!(refused.message().contains("ASIC_DB shows queue Ethernet0|3 at (1048576, 2097152, 5)"), "{refused:?}");
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), before, "CONFIG_DB as it was, byte for byte");
    let cfg = c.get_config(pb::GetConfigRequest {}).await.expect("config").into_inner();
    let s = cfg.queues[0].setting.unwrap();
    assert_eq!((s.kmin_bytes, s.kmax_bytes), (ORIGINAL.0, ORIGINAL.1), "the actuator reports the old setting");

    orchagent.stuck.store(false, Ordering::SeqCst);
    c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("programmed this time");
    assert_eq!(asic_curve(&rig.redis, 0, 3), Some((300_000, 900_000, 25)));
}

/// A syncd cold restart (`config reload`, a reboot) brings every queue back under a new SAI
/// object id, and COUNTERS_QUEUE_NAME_MAP returns only once flex counters start. A write made
/// while the map is missing cannot be read back: it is undone and refused, naming the queue
/// without an id. One made while it is being published is read back at the new ids, found
/// while the write waits. Before, the ids were read once, at start-up: after a restart every
/// write was undone until the actuator restarted.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_syncd_cold_restart_writes_are_read_back_at_the_queues_new_ids() {
    let (rig, orchagent) = rig_with_orchagent(Duration::ZERO, &["--program-timeout", "3s"]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let q = qid("Ethernet0", 3);
    let apply = |changes| pb::ApplyRequest { lease_id: l.clone(), changes, ..Default::default() };
    c.apply(apply(vec![change(&q, 300_000, 900_000, 0.25)])).await.expect("apply");
    assert_eq!(asic_curve(&rig.redis, 0, 3), Some((300_000, 900_000, 25)));

    orchagent.cold_restart(&rig.redis);
    let refused = c.apply(apply(vec![change(&q, 350_000, 1_000_000, 0.3)])).await.expect_err("no ids to read");
    assert!(
        refused.message().contains("COUNTERS_QUEUE_NAME_MAP has no object id for queue Ethernet0|3"),
        "{refused:?}"
    );
    assert!(refused.message().contains("CONFIG_DB holds the previous settings again"), "{refused:?}");

    let second = apply(vec![change(&q, 400_000, 1_200_000, 0.5)]);
    let waiting = tokio::spawn(async move { c.apply(second).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    orchagent.publish_queue_map(&rig.redis);
    waiting.await.unwrap().expect("programmed, and read back at the new ids");
    assert_eq!(asic_curve(&rig.redis, 0, 3), Some((400_000, 1_200_000, 50)));
    assert_eq!(asic_curve(&rig.redis, 0, 4), Some(ORIGINAL), "the queue left alone");
}

/// A restarted actuator starts on what the switch holds, which may be an edit made outside
/// ecn-tuner while it was down: the journal says so, with every queue's setting, as the next
/// generation (a SONiC restart used to take that generation without a line).
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_journals_the_settings_it_starts_on() {
    let mut rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let req = pb::ApplyRequest {
        lease_id: l,
        changes: vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)],
        ..Default::default()
    };
    c.apply(req).await.expect("apply");
    drop(c);
    let before = rig.act.journal().iter().filter_map(|e| e["generation"].as_u64()).max().unwrap();
    rig.act.restart(Duration::from_millis(200)).await;
    set_config_field(&rig.redis, "WRED_PROFILE|AZURE_LOSSLESS", "green_min_threshold", "393216");
    rig.act.restart(Duration::from_millis(200)).await;
    let journal = rig.act.journal();
    let start = events(&journal, "start");
    assert_eq!(start.len(), 2, "{journal:?}");
    assert_eq!(start[1]["generation"].as_u64(), Some(before + 2), "{journal:?}");
    let queues = start[1]["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 64);
    let edited = queues.iter().filter(|q| q["kmin_bytes"].as_u64() == Some(393_216)).count();
    assert_eq!(edited, 63, "the hand edit, on every queue of the shared profile: {:?}", start[1]);
}

/// STATE_DB loses the recording of the original profiles while the actuator runs (its Redis
/// restarted without its data, or the key was flushed): the next write puts back the recording
/// this actuator saw, not the tables it has tuned since. It used to check only before its
/// first write, and `sonic restore` then found nothing to restore.
#[tokio::test(flavor = "multi_thread")]
async fn a_recording_lost_from_state_db_is_put_back_before_the_next_write() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let apply = |kmin: u64| pb::ApplyRequest {
        lease_id: l.clone(),
        changes: vec![change(&qid("Ethernet0", 3), kmin, 900_000, 0.25)],
        ..Default::default()
    };
    c.apply(apply(300_000)).await.expect("apply");
    let original = recording(&rig.redis).expect("recorded before the first write");
    redis::cmd("DEL").arg("ECN_TUNER|ORIGINALS").query::<()>(&mut rig.redis.con(STATE_DB)).unwrap();
    c.apply(apply(350_000)).await.expect("apply");
    assert_eq!(recording(&rig.redis).as_deref(), Some(original.as_str()), "the first recording, put back");
    assert!(rig.act.log_text().contains("STATE_DB lost the recording"), "{}", rig.act.log_text());
}

/// A file copy of the recording torn by a crash or a full disk (here: emptied), with STATE_DB's
/// whole: the restarted actuator's first Apply moves it aside and writes it afresh. Every Apply
/// used to fail with INTERNAL "not a recording", and a controller saw exit 0 with 0 applies.
#[tokio::test(flavor = "multi_thread")]
async fn a_torn_copy_of_the_recording_is_written_afresh_from_state_db() {
    let mut rig = rig(Spec::default(), &[]).await;
    let apply = |l: &str, kmin: u64| pb::ApplyRequest {
        lease_id: l.to_string(),
        changes: vec![change(&qid("Ethernet0", 3), kmin, 900_000, 0.25)],
        ..Default::default()
    };
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let g = c.apply(apply(&l, 300_000)).await.expect("apply").into_inner().generation;
    c.confirm(pb::ConfirmRequest { lease_id: l.clone(), generation: g }).await.expect("confirm");
    let file = rig.act.journal.with_file_name("journal.jsonl.sonic-originals.json");
    let whole = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, "").unwrap();
    rig.act.restart(Duration::ZERO).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-b").await;
    c.apply(apply(&l, 350_000)).await.expect("apply after the restart");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), whole, "the copy, whole again");
    let aside = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("journal.jsonl.sonic-originals.json.unreadable-"));
    assert!(aside, "the torn copy moved aside");
    assert!(rig.act.log_text().contains("unreadable"), "{}", rig.act.log_text());
}

/// After a reboot (STATE_DB cleared) `sonic restore` without `--from` has no recording, but
/// the switch still holds ecn-tuner's profiles: it exits 1 naming them and `--from`, where it
/// said "nothing to restore" and exited 0. With `--from` it restores.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_that_finds_no_recording_but_our_profiles_fails() {
    let rig = rig(Spec { two_profiles: true, ..Spec::default() }, &[]).await;
    let url = rig.redis.url();
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let req = pb::ApplyRequest {
        lease_id: l.clone(),
        changes: vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)],
        ..Default::default()
    };
    let g = c.apply(req).await.expect("apply").into_inner().generation;
    c.confirm(pb::ConfirmRequest { lease_id: l, generation: g }).await.expect("confirm");
    // The actuator's scratch folder goes with it: keep the copy beside its journal.
    let kept = tempfile::tempdir().unwrap();
    let file = kept.path().join("journal.jsonl.sonic-originals.json");
    std::fs::copy(rig.act.journal.with_file_name("journal.jsonl.sonic-originals.json"), &file).unwrap();
    let (code, _) = rig.act.stop().await;
    assert_eq!(code, Some(0));
    let redis = rig.redis;
    redis::cmd("DEL").arg("ECN_TUNER|ORIGINALS").query::<()>(&mut redis.con(STATE_DB)).unwrap();
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &url]).await;
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("WRED_PROFILE|ECN_TUNER_Ethernet0_3") && stderr.contains("--from"), "{stderr}");
    // The database flags: one Redis lacks is the flag's error (exit 2, where it read as an
    // unreachable Redis, exit 1); those restore never reads are refused, not checked against
    // the ones it reads (`--config-db 2` was refused as the default COUNTERS_DB's index).
    let from = file.to_str().unwrap();
    let (code, _, stderr) =
        run_cli(&["sonic", "restore", "--redis", &url, "--from", from, "--config-db", "2", "--state-db", "99"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--state-db 99: Redis at") && stderr.contains("has no such database"), "{stderr}");
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--redis", &url, "--counters-db", "3"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--counters-db: not used here"), "{stderr}");
    // A device is refused; through a symbolic link, the recording itself is retired once
    // restored, not the link (renamed, it left the recording to be restored again).
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--redis", &url, "--from", "/dev/null"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--from /dev/null: /dev/null is not a regular file"), "{stderr}");
    let link = kept.path().join("recording-link.json");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--redis", &url, "--from", link.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), before);
    assert!(!file.exists(), "the recording is retired");
    assert!(std::fs::symlink_metadata(&link).is_ok(), "the link is left where it was");
}

/// An actuator started before flex counters have published COUNTERS_QUEUE_NAME_MAP (an
/// on-switch actuator after a reboot) has no telemetry, and cannot read writes back at first,
/// so it allows orchagent a poll interval, as the log says. Once the map is there, telemetry
/// starts within seconds (queues missing from the map are looked up every 5 s, not every
/// minute), and read-back turns on before the next write: a write orchagent does not program
/// is then undone and refused.
#[tokio::test(flavor = "multi_thread")]
async fn telemetry_and_read_back_start_once_the_name_map_appears() {
    let no_map = |redis: &RedisServer| {
        redis::cmd("DEL").arg("COUNTERS_QUEUE_NAME_MAP").query::<()>(&mut redis.con(COUNTERS_DB)).unwrap();
    };
    let (rig, orchagent) = rig_with_orchagent_and(Duration::ZERO, &["--program-timeout", "500ms"], no_map).await;
    let mut c = rig.act.client().await;
    let mut stream = telemetry(&mut c).await;
    let l = lease(&mut c, "ctl-a").await;
    let q = qid("Ethernet0", 3);
    let apply = |changes| pb::ApplyRequest { lease_id: l.clone(), changes, ..Default::default() };
    orchagent.stuck.store(true, Ordering::SeqCst);
    c.apply(apply(vec![change(&q, 300_000, 900_000, 0.25)])).await.expect("nothing to read back: allowed");
    orchagent.stuck.store(false, Ordering::SeqCst);

    orchagent.publish_queue_map(&rig.redis);
    let published = std::time::Instant::now();
    let every_queue = async { while stream.next().await.expect("a batch").expect("telemetry").samples.len() < 64 {} };
    tokio::time::timeout(Duration::from_secs(10), every_queue).await.expect("telemetry for every queue");
    eprintln!("telemetry for every queue {:?} after the map appeared", published.elapsed());
    assert_eq!(asic_curve(&rig.redis, 0, 3), Some((300_000, 900_000, 25)), "orchagent programmed the first write");

    orchagent.stuck.store(true, Ordering::SeqCst);
    let refused = c.apply(apply(vec![change(&q, 400_000, 1_200_000, 0.5)])).await.expect_err("read back now");
    assert!(refused.message().contains("orchagent did not program it within --program-timeout"), "{refused:?}");
    let log = rig.act.log_text();
    assert!(log.contains("no ASIC_DB read-back (COUNTERS_QUEUE_NAME_MAP has no object id"), "{log}");
    assert!(log.contains("ASIC_DB now shows the queues' WRED curves"), "{log}");
}

/// An edit to a controlled queue's profile from outside ecn-tuner (an operator, `config
/// reload` loading the saved configuration) is noticed while the actuator is idle (every 5 poll
/// intervals) and logged, naming the queue and both curves, and so is its end. Nothing is
/// written: CONFIG_DB keeps the edit until the next write.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_from_outside_is_noticed_and_left_alone() {
    let rig = rig(Spec::default(), &[]).await;
    let profile = "WRED_PROFILE|AZURE_LOSSLESS";
    set_config_field(&rig.redis, profile, "green_min_threshold", "500000");
    let edited = tables(&mut rig.redis.con(CONFIG_DB));
    // The profile is every controlled queue's: the warning says so.
    let noticed = "CONFIG_DB shows queue Ethernet0|3 at (500000, 2097152, 5), not the settings last applied, \
                   (1048576, 2097152, 5) (Kmin, Kmax, percent) (and 63 other queues: Ethernet0|4, Ethernet4|3, \
                   Ethernet4|4, Ethernet8|3, Ethernet8|4, ...): changed outside ecn-tuner";
    eventually("the edit noticed", WAIT, || async { rig.act.log_text().contains(noticed).then_some(()) }).await;
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), edited, "the edit left alone");
    set_config_field(&rig.redis, profile, "green_min_threshold", "1048576");
    let again = "CONFIG_DB holds the settings last applied again";
    eventually("the edit undone noticed", WAIT, || async { rig.act.log_text().contains(again).then_some(()) }).await;
    assert_eq!(rig.act.log_text().matches("changed outside ecn-tuner").count(), 1, "one warning per edit");
}

/// Each new edit from outside is warned of, not only the first while one stands; and one that
/// a write overwrites before any comparison caught it (made within 5 poll intervals of the
/// write) is warned of by the write, with what it was. Both went unsaid: an operator's edit
/// vanished without a line.
#[tokio::test(flavor = "multi_thread")]
async fn every_edit_from_outside_is_warned_of_even_one_a_write_overwrites_at_once() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let apply = |c: &mut ecn_tests::Client, port: &str, kmin: u64| {
        let changes = vec![change(&qid(port, 3), kmin, 900_000, 0.25)];
        let req = pb::ApplyRequest { lease_id: l.clone(), changes, ..Default::default() };
        let mut c = c.clone();
        async move { c.apply(req).await.expect("applied") }
    };
    // Ethernet0|3 on a profile of its own; the other 63 queues on AZURE_LOSSLESS.
    apply(&mut c, "Ethernet0", 300_000).await;
    let warned = |needle: String| {
        let log = rig.act.log_text();
        async move { log.lines().any(|l| l.contains(&needle) && l.contains("changed outside ecn-tuner")).then_some(()) }
    };
    set_config_field(&rig.redis, "WRED_PROFILE|AZURE_LOSSLESS", "green_min_threshold", "500000");
    eventually("the first edit", WAIT, || warned("queue Ethernet0|4 at (500000, 2097152, 5)".into())).await;
    // A second edit while the first stands.
    set_config_field(&rig.redis, OWN_PROFILE, "green_min_threshold", "100000");
    eventually("the second edit", WAIT, || warned("queue Ethernet0|3 at (100000, 900000, 25)".into())).await;
    // An operator's profile for a queue the first edit reached: the same queues differ, one
    // with another curve (it went unsaid, the warning naming only the first queue's curve).
    for (f, v) in
        [("green_min_threshold", "111111"), ("green_max_threshold", "222222"), ("green_drop_probability", "9")]
    {
        set_config_field(&rig.redis, "WRED_PROFILE|OPS", f, v);
    }
    set_config_field(&rig.redis, "QUEUE|Ethernet12|4", "wred_profile", "OPS");
    eventually("the rebinding", WAIT, || warned("queue Ethernet12|4 at (111111, 222222, 9)".into())).await;
    // A third, written over at once by an apply to another queue.
    set_config_field(&rig.redis, OWN_PROFILE, "green_max_threshold", "950000");
    apply(&mut c, "Ethernet8", 300_000).await;
    eventually("the overwritten edit", WAIT, || warned("queue Ethernet0|3 at (100000, 950000, 25)".into())).await;
    let mut con = rig.redis.con(CONFIG_DB);
    assert_eq!(queue_setting(&mut con, "Ethernet0", 3), (300_000, 900_000, 25), "the write set it again");
    assert_eq!(queue_setting(&mut con, "Ethernet0", 4), ORIGINAL, "and the shared profile");
}

#[tokio::test(flavor = "multi_thread")]
async fn shadow_makes_no_writes() {
    let rig = rig(Spec::default(), &[]).await;
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    let log = rig
        .act
        .controller_to_end(
            "shadow",
            &["--mode", "shadow", "--policy", "static:100KB,400KB,0.5", "--interval", "200ms", "--duration", "4s"],
        )
        .await;
    let d = read_json_lines(&log);
    assert!(d.len() > 64 * 5, "decisions were logged");
    assert!(d.iter().all(|x| x["mode"] == "shadow" && x["applied"] == false));
    assert!(d.iter().any(|x| setting_of(x) != ORIGINAL), "it would have changed something");
    let journal = rig.act.journal();
    for kind in ["apply", "confirm", "revert", "rollback"] {
        assert!(events(&journal, kind).is_empty(), "shadow mode wrote: {journal:?}");
    }
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), before, "CONFIG_DB untouched");
    assert!(recording(&rig.redis).is_none(), "nothing recorded: nothing was changed");
}

/// The path README gives for a real switch, end to end on this one: record its telemetry
/// (`record --target`, at the actuator's poll interval), train a model offline on it, and in
/// the controller that model decides for the switch's queues, where the shipped one, trained
/// on the simulator's 100 µs intervals, holds every one of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_trained_on_the_switchs_own_recording_decides_for_it() {
    let rig = rig(Spec::default(), &[]).await;
    let dir = tempfile::Builder::new().prefix("ecn-sonic-offline-").tempdir().unwrap();
    let file = |name: &str| dir.path().join(name).display().to_string();
    // Two recordings: a poller's timestamps jitter, so their intervals differ by a little.
    let (rec, rec2, model) = (file("switch.parquet"), file("switch-2.parquet"), file("switch.safetensors"));
    let url = rig.act.url();
    for out in [&rec, &rec2] {
        let (code, _, stderr) = run_cli(&["record", "--target", &url, "--duration", "3s", "--out", out]).await;
        assert_eq!(code, Some(0), "record: {stderr}");
    }
    let (code, _, stderr) =
        run_cli(&["train", "--telemetry", &rec, &rec2, "--steps", "300", "--seed", "1", "--out", &model]).await;
    assert_eq!(code, Some(0), "train: {stderr}");
    let card: serde_json::Value = serde_json::from_slice(&std::fs::read(file("switch.card.json")).unwrap()).unwrap();
    // The poll interval, as measured: within a percent of the poller's 100 ms.
    let interval = card["tuning"]["control_interval"].as_str().unwrap();
    let ns: f64 = interval.strip_suffix("ns").map_or(1e8, |n| n.parse().unwrap());
    assert!((ns / 1e8 - 1.0).abs() < 0.01, "{interval}");

    let holds = "telemetry intervals, and this queue's cover";
    for (name, policy) in [("own", format!("model:{model}")), ("shipped", "model:default".to_string())] {
        let flags = ["--mode", "shadow", "--policy", &policy, "--interval", "200ms", "--duration", "4s"];
        let d = read_json_lines(&rig.act.controller_to_end(name, &flags).await);
        let on_telemetry: Vec<&serde_json::Value> = d.iter().filter(|x| x["observation"]["ts_ns"].is_u64()).collect();
        let proposed = on_telemetry.iter().filter(|x| !x["proposed"].is_null()).count();
        let held = on_telemetry.iter().filter(|x| x["reason"].as_str().unwrap_or_default().contains(holds)).count();
        eprintln!("{name}: {} decisions on telemetry, {proposed} by the model, {held} held", on_telemetry.len());
        assert!(on_telemetry.len() > 64 * 5, "{name}: {} decisions on telemetry", on_telemetry.len());
        if name == "own" {
            assert!(proposed > on_telemetry.len() / 2, "{name}: the model decided {proposed} times");
            // The switch's profile is no template entry; the model knows it as the entry
            // nearest it, as training labelled it. Choosing that entry keeps the profile, as
            // `recommend` says: it used to propose the entry, and the guardrails stepped every
            // queue towards it.
            let original = serde_json::json!({"kmin_bytes": ORIGINAL.0, "kmax_bytes": ORIGINAL.1, "pmax": 0.05});
            let keeps = on_telemetry.iter().filter(|x| x["proposed"] == original).count();
            assert!(keeps > proposed / 2, "{name}: {keeps} of {proposed} proposals keep the switch's profile");
        } else {
            // Every queue held; all but at most one round for the interval (a round on a poll
            // that came late under load holds for that instead).
            let others: std::collections::BTreeSet<&str> =
                on_telemetry.iter().filter_map(|x| x["reason"].as_str()).filter(|r| !r.contains(holds)).collect();
            assert_eq!(proposed, 0, "{name}: every queue held");
            assert!(
                held + 64 >= on_telemetry.len(),
                "{name}: {held} of {} held for the interval: {others:?}",
                on_telemetry.len()
            );
        }
    }
}

/// A poll that comes late (the actuator stalled for four poll intervals) covers its whole step,
/// and the recording says so (`span_ns`): the file reads without a gap, where without the span
/// the late row read as lost polls, one interval of bytes each, and failed validation.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_poll_is_recorded_as_covering_its_whole_step() {
    let rig = rig(Spec::default(), &[]).await;
    let dir = tempfile::Builder::new().prefix("ecn-sonic-late-").tempdir().unwrap();
    let out = dir.path().join("late.parquet").display().to_string();
    let url = rig.act.url();
    let args = ["record", "--target", &url, "--duration", "3s", "--out", &out];
    // The stall must fall within the stream, so it is timed from the recorder's start (its
    // temporary file appears just before it connects), not from its spawn: a loaded machine
    // took most of a second to load the binary, and the stall then came before the stream.
    let (started, actuator) = (dir.path().to_path_buf(), rig.act.pid());
    let stall = async move {
        eventually("the recorder's temporary file", WAIT, || {
            let mut files = std::fs::read_dir(&started).unwrap().flatten();
            let started = files.any(|e| e.file_name().to_string_lossy().ends_with(".tmp"));
            async move { started.then_some(()) }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        stop_process(actuator);
        tokio::time::sleep(Duration::from_millis(400)).await;
        send_signal(actuator, "CONT");
    };
    let ((code, _, stderr), ()) = tokio::join!(run_cli(&args), stall);
    assert_eq!(code, Some(0), "record: {stderr}");
    let rows = ecn_datasets::io::read_telemetry_parquet(std::path::Path::new(&out)).unwrap();
    let longest = rows.iter().map(|r| r.sample.span_ns).max().unwrap_or(0);
    assert!(rows.iter().all(|r| r.sample.span_ns > 0) && longest >= 350_000_000, "longest span {longest} ns");
    let (code, stdout, stderr) = run_cli(&["validate", "--telemetry", &out]).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

/// A Redis that stops answering (SIGSTOP: a hung process, a host gone quiet) holds a pipelined
/// read one `--redis-timeout` per command: the poller's 96 commands made SIGTERM take 96
/// timeouts (five minutes at the default), and the writer's comparison of CONFIG_DB with the
/// settings last applied, stopped in the middle, as long. Each pipeline now asks Redis first (`ECHO`),
/// and shutdown waits for what only reads a poll interval and two timeouts at most.
#[tokio::test(flavor = "multi_thread")]
async fn the_actuator_stops_promptly_while_redis_hangs() {
    let rig = rig(Spec::default(), &["--redis-timeout", "1s"]).await;
    rig.act.wait_for_telemetry_time(500_000_000, WAIT).await;
    stop_process(rig.redis.pid());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let started = std::time::Instant::now();
    let Rig { redis, act, ticker } = rig;
    let (code, _) = act.stop().await;
    let took = started.elapsed();
    send_signal(redis.pid(), "CONT");
    drop(ticker);
    assert_eq!(code, Some(0), "stopped within 30 s (took {took:?})");
    assert!(took < Duration::from_secs(12), "{took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn enforce_applies_bounded_settings_and_confirms_them() {
    let spec = Spec::default();
    // An orchagent that programs each write 300 ms late: every apply waits for ASIC_DB.
    let (rig, _orchagent) = rig_with_orchagent(Duration::from_millis(300), &[]).await;
    let target = (100_000, 400_000, 50);
    let (log, ()) = rig
        .act
        .controller_until(
            "enforce",
            &enforce_flags(
                "static:100KB,400KB,0.5",
                &["--min-dwell", "0s", "--confirm-within", "60s", "--health-window", "3"],
            ),
            "every queue on the policy's setting in CONFIG_DB, confirmed",
            FABRIC_PATIENCE,
            || {
                let on_target = switch_settings(&rig.redis, &spec).iter().all(|(_, s)| *s == target);
                let confirmed = rig.act.last_change_confirmed();
                async move { (on_target && confirmed).then_some(()) }
            },
        )
        .await;
    let journal = rig.act.journal();
    assert!(!events(&journal, "apply").is_empty(), "{journal:?}");
    for (q, s) in switch_settings(&rig.redis, &spec) {
        assert_eq!(s, target, "{q} in CONFIG_DB");
    }
    let t = tables(&mut rig.redis.con(CONFIG_DB));
    assert!(t.keys().all(|k| !k.contains("ECN_TUNER")), "one setting for all: the shared profile carries it");
    assert!(recording(&rig.redis).is_some(), "the originals were recorded before the first change");
    assert_applied_within_bounds(&log, 32_099_072);
    for (i, q) in (0..spec.ports.len()).flat_map(|i| spec.lossless.iter().map(move |&q| (i, q))) {
        assert_eq!(asic_curve(&rig.redis, i, q), Some(target), "port {i} queue {q} as programmed in ASIC_DB");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_storm_after_a_change_is_rolled_back() {
    let rig = rig(Spec::default(), &[]).await;
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    // 50 polls of 100 ms: the first apply waits 5 s for its window before, and the pauses
    // injected right after it fall within the 5 s after.
    let (child, log) = rig.act.controller(
        "health",
        &enforce_flags("static:200KB,800KB,0.3", &["--confirm-within", "120s", "--health-window", "50"]),
    );
    rig.act.wait_for_event("apply", WAIT).await;
    // Ethernet0's priority 3 is paused by its downstream 80% of the time from now on.
    rig.ticker.counters.lock().unwrap().traffic.insert((0, 3), Traffic { paused_fraction: 0.8, ..Traffic::default() });
    let journal = rig.act.wait_for_event("rollback", WAIT).await;
    rig.act.stop_controller("health", child).await;
    assert!(events(&journal, "confirm").is_empty(), "{journal:?}");
    let reasons = decision_reasons(&log);
    assert!(reasons.iter().any(|r| r.contains("rolled back") && r.contains("paused")), "{reasons:?}");
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), before, "back on the original profiles, byte for byte");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_controller_leaves_only_confirmed_settings() {
    let spec = Spec::default();
    let rig = rig(spec.clone(), &[]).await;
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    // 80 polls of 100 ms: the controller is killed right after its apply, 8 s before it could
    // judge the change, and the actuator reverts it at the 10 s deadline.
    let (mut child, _) = rig.act.controller(
        "victim",
        &enforce_flags("static:200KB,800KB,0.3", &["--confirm-within", "10s", "--health-window", "80"]),
    );
    rig.act.wait_for_event("apply", WAIT).await;
    // The journal line goes to disk before the write to CONFIG_DB, so the write may trail it.
    eventually("the apply in CONFIG_DB", WAIT, || {
        let changed = switch_settings(&rig.redis, &spec)[0].1 != ORIGINAL;
        async move { changed.then_some(()) }
    })
    .await;
    child.kill().await.unwrap(); // SIGKILL: no chance to clean up
    let journal = rig.act.wait_for_event("revert", WAIT).await;
    assert!(events(&journal, "confirm").is_empty());
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_applies_are_refused_whole_and_nothing_changes() {
    let rig = rig(Spec::default(), &[]).await;
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    // What the settings are; the telemetry clock moves on regardless.
    let settings_state = |cfg: pb::Config| pb::Config { telemetry_now_ts_ns: 0, ..cfg };
    let cfg = settings_state(c.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner());
    let good = change(&qid("Ethernet0", 3), 100_000, 1_000_000, 0.3);
    let other_switch = pb::QueueId { switch: "leaf9".into(), port: "Ethernet0".into(), queue: 3 };
    let cases: Vec<(Vec<pb::QueueSetting>, &str, &str)> = vec![
        (
            vec![good.clone(), change(&qid("Ethernet4", 3), 2_000_000, 1_000_000, 0.2)],
            "sonic-leaf0/Ethernet4/3",
            "kmin_bytes",
        ),
        (vec![good.clone(), change(&qid("Ethernet4", 4), 100_000, 1_000_000, 1.5)], "sonic-leaf0/Ethernet4/4", "pmax"),
        (vec![change(&qid("Ethernet8", 3), 100_000, 1_000_000, -0.1), good.clone()], "sonic-leaf0/Ethernet8/3", "pmax"),
        (vec![good.clone(), change(&other_switch, 100_000, 1_000_000, 0.2)], "leaf9/Ethernet0/3", "unknown queue"),
        (
            vec![good.clone(), change(&qid("Ethernet0", 0), 100_000, 1_000_000, 0.2)],
            "sonic-leaf0/Ethernet0/0",
            "unknown queue",
        ),
        (
            vec![good.clone(), change(&qid("Ethernet4", 3), 100_000, 64_000_000, 0.2)],
            "sonic-leaf0/Ethernet4/3",
            "kmax_bytes",
        ),
    ];
    let n = cases.len();
    for (changes, queue, field) in cases {
        assert_apply_refused(&mut c, &l, changes, queue, field).await;
        let now = settings_state(c.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner());
        assert_eq!(now, cfg, "nothing changed");
        assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), before, "CONFIG_DB untouched");
    }
    assert!(recording(&rig.redis).is_none());
    assert_eq!(events(&rig.act.journal(), "reject").len(), n);
}

#[tokio::test(flavor = "multi_thread")]
async fn queues_that_differ_get_profiles_of_their_own_and_restore_is_byte_identical() {
    let spec = Spec { two_profiles: true, ..Spec::default() };
    let rig = rig(spec.clone(), &[]).await;
    let url = rig.redis.url();
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let apply = |changes: Vec<pb::QueueSetting>| pb::ApplyRequest {
        lease_id: l.clone(),
        changes,
        reason: "test".into(),
        ..Default::default()
    };
    c.apply(apply(vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)])).await.expect("apply one queue");
    {
        let mut con = rig.redis.con(CONFIG_DB);
        let t = tables(&mut con);
        let own = &t["WRED_PROFILE|ECN_TUNER_Ethernet0_3"];
        let get = |k: &str| own.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
        assert_eq!(get("green_min_threshold"), Some("300000"));
        assert_eq!(get("green_max_threshold"), Some("900000"));
        assert_eq!(get("green_drop_probability"), Some("25"));
        assert_eq!(get("yellow_min_threshold"), Some("300000"), "yellow followed green (one curve originally)");
        assert_eq!(get("ecn"), Some("ecn_all"), "copied from AZURE_LOSSLESS");
        assert_eq!(
            t["WRED_PROFILE|AZURE_LOSSLESS"], before["WRED_PROFILE|AZURE_LOSSLESS"],
            "the shared one is as it was"
        );
        assert_eq!(queue_setting(&mut con, "Ethernet0", 3), (300_000, 900_000, 25));
        assert_eq!(queue_setting(&mut con, "Ethernet4", 3), ORIGINAL);
        assert_eq!(queue_setting(&mut con, "Ethernet0", 4), ORIGINAL);
    }
    // Every queue 4 (their own shared profile) but Ethernet4's moves: the majority keeps the
    // shared profile, the odd one out gets its own.
    let fours: Vec<pb::QueueSetting> =
        spec.ports.iter().filter(|p| *p != "Ethernet4").map(|p| change(&qid(p, 4), 500_000, 1_500_000, 0.1)).collect();
    c.apply(apply(fours)).await.expect("apply to most queues 4");
    {
        let mut con = rig.redis.con(CONFIG_DB);
        assert_eq!(queue_setting(&mut con, "Ethernet0", 4), (500_000, 1_500_000, 10));
        assert_eq!(queue_setting(&mut con, "Ethernet4", 4), ORIGINAL);
        let binding: String = redis::cmd("HGET").arg("QUEUE|Ethernet4|4").arg("wred_profile").query(&mut con).unwrap();
        assert_eq!(binding, "ECN_TUNER_Ethernet4_4");
        let binding: String = redis::cmd("HGET").arg("QUEUE|Ethernet8|4").arg("wred_profile").query(&mut con).unwrap();
        assert_eq!(binding, "AZURE_LOSSLESS_Q4");
    }
    assert!(recording(&rig.redis).is_some());
    let file = rig.act.journal.with_file_name("journal.jsonl.sonic-originals.json");
    assert!(file.exists(), "a copy of the recording beside the journal");

    // A restore under the running actuator would retire the recording its later writes need:
    // refused, nothing touched. So is a second actuator on the same switch.
    let tuned = tables(&mut rig.redis.con(CONFIG_DB));
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--redis", &url]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("an ecn-tuner actuator is connected to this switch (client id"), "{stderr}");
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), tuned);
    assert!(recording(&rig.redis).is_some() && file.exists());
    let journal = rig.act.journal.with_file_name("second.jsonl").display().to_string();
    let args = ["actuator", "--backend", "sonic", "--redis", &url, "--listen", "127.0.0.1:0", "--journal", &journal];
    let (code, _, stderr) = run_cli(&args).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("another ecn-tuner actuator is connected to this switch"), "{stderr}");

    // The actuator stops; confirmed changes stay on the switch. Then undo everything.
    let (code, _) = rig.act.stop().await;
    assert_eq!(code, Some(0));
    assert_ne!(tables(&mut rig.redis.con(CONFIG_DB)), before);
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &url]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("removed 2 ecn-tuner profile(s)"), "{stdout}");
    assert_eq!(tables(&mut rig.redis.con(CONFIG_DB)), before, "WRED_PROFILE and QUEUE byte-identical");
    assert!(recording(&rig.redis).is_none(), "the recording is retired");
    assert!(!file.exists(), "so is its file copy");
    let (code, stdout, _) = run_cli(&["sonic", "restore", "--redis", &url]).await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains("nothing to restore"), "{stdout}");
}

/// A port removed from CONFIG_DB while the actuator runs: writing its queues' bindings back
/// would recreate entries for queues the switch no longer has. They are left out, and every
/// other queue is written as asked: a pending change's deadline revert, and later applies, go
/// through. A restore does not recreate the recorded entries either.
#[tokio::test(flavor = "multi_thread")]
async fn a_port_removed_while_running_is_not_written_back() {
    port_removed_while_running(rig(Spec::default(), &[]).await).await;
}

/// The same with ASIC_DB read-back on: a write waits for orchagent to program the queues it
/// wrote, not the gone ones. It waited for those too, so every write failed after a port was
/// removed, the deadline revert among them, which was retried every few seconds for ever,
/// flipping the other queues between the expired change and their settings.
#[tokio::test(flavor = "multi_thread")]
async fn a_port_removed_under_read_back_is_not_waited_for() {
    let (rig, _orchagent) = rig_with_orchagent(Duration::ZERO, &["--program-timeout", "2s"]).await;
    port_removed_while_running(rig).await;
}

/// A key under a table's name that is not a hash (a list someone pushed): its `WRONGTYPE`
/// failed every read of the tables, so the deadline revert failed and the switch kept an
/// unconfirmed change. It reads as absent now, said once.
#[tokio::test(flavor = "multi_thread")]
async fn a_stray_key_of_another_type_does_not_block_the_revert() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    apply_pending(&mut c, &l).await;
    let mut con = rig.redis.con(CONFIG_DB);
    let _: () = redis::cmd("RPUSH").arg("QUEUE|Ethernet0|7").arg("x").query(&mut con).unwrap();
    reverted_once(&rig).await;
    assert_eq!(queue_setting(&mut con, "Ethernet0", 3), ORIGINAL);
    let log = rig.act.log_text();
    assert!(log.contains("a list, not a hash") && log.contains("key=QUEUE|Ethernet0|7"), "{log}");
}

/// Keys of another type under the tables read at start, and hashes with bytes that are not
/// UTF-8, are read as absent: each made the start fail with a bare `WRONGTYPE` or "Cannot
/// convert from UTF-8" (exit 1, no key named). A pool size past any buffer is not read.
#[tokio::test(flavor = "multi_thread")]
async fn stray_keys_of_another_type_do_not_stop_the_start() {
    let spec = Spec::default();
    let redis = RedisServer::start();
    seed(&redis, &spec);
    let mut con = redis.con(CONFIG_DB);
    let _: () = redis::cmd("SET").arg("PORT|junk").arg("x").query(&mut con).unwrap();
    let _: () = redis::cmd("RPUSH").arg("BUFFER_POOL|junk").arg("x").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("WRED_PROFILE|JUNK").arg("x").query(&mut con).unwrap();
    // Bytes that are not UTF-8, and a pool no switch has: read as absent too, and said.
    let _: () =
        redis::cmd("HSET").arg("WRED_PROFILE|BYTES").arg("ecn").arg(&[0xffu8, 0xfe][..]).query(&mut con).unwrap();
    let _: () = redis::cmd("HSET").arg("BUFFER_POOL|huge").arg("size").arg(u64::MAX).query(&mut con).unwrap();
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url]).await;
    let mut c = act.client().await;
    let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.expect("capabilities").into_inner();
    assert!(!caps.queues.is_empty());
    let log = act.log_text();
    for said in ["key=PORT|junk", "a string, not a hash", "key=BUFFER_POOL|junk", "a list, not a hash"] {
        assert!(log.contains(said), "{said}: {log}");
    }
    assert!(log.contains("key=WRED_PROFILE|BYTES") && log.contains("bytes that are not UTF-8"), "{log}");
    assert!(log.contains("key=BUFFER_POOL|huge") && log.contains("larger than any switch's buffer"), "{log}");
}

/// Apply a change to Ethernet0 queue 3 under a 1 s confirm deadline.
async fn apply_pending(c: &mut ecn_tests::Client, lease_id: &str) {
    c.apply(pb::ApplyRequest {
        lease_id: lease_id.to_string(),
        changes: vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)],
        confirm_within_ms: 1_000,
        ..Default::default()
    })
    .await
    .expect("a pending change");
}

/// Wait for the actuator's journal to show one deadline revert.
async fn reverted_once(rig: &Rig) {
    eventually("the deadline revert", WAIT, || {
        let reverted = events(&rig.act.journal(), "revert").len() == 1;
        async move { reverted.then_some(()) }
    })
    .await;
}

async fn port_removed_while_running(rig: Rig) {
    let url = rig.redis.url();
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    apply_ethernet4(&mut c, &l).await.expect("an apply while the port is there");
    // A change under a 1 s confirm deadline, then the port goes.
    apply_pending(&mut c, &l).await;
    let mut con = rig.redis.con(CONFIG_DB);
    for q in 0..8 {
        let _: () = redis::cmd("DEL").arg(format!("QUEUE|Ethernet4|{q}")).query(&mut con).unwrap();
    }
    let _: () = redis::cmd("DEL").arg("PORT|Ethernet4").query(&mut con).unwrap();
    let gone = |con: &mut redis::Connection| -> Vec<String> {
        tables(con).keys().filter(|k| k.starts_with("QUEUE|Ethernet4|")).cloned().collect()
    };
    reverted_once(&rig).await;
    assert_eq!(queue_setting(&mut con, "Ethernet0", 3), ORIGINAL, "reverted despite the gone port");
    assert!(gone(&mut con).is_empty(), "{:?}", gone(&mut con));
    c.apply(pb::ApplyRequest {
        lease_id: l.clone(),
        changes: vec![change(&qid("Ethernet8", 3), 300_000, 900_000, 0.25)],
        ..Default::default()
    })
    .await
    .expect("later applies go through");
    assert_eq!(queue_setting(&mut con, "Ethernet8", 3), (300_000, 900_000, 25));
    assert!(gone(&mut con).is_empty(), "{:?}", gone(&mut con));
    assert!(rig.act.log_text().contains("controlled queues are gone from CONFIG_DB"), "{}", rig.act.log_text());
    drop(c);
    let (code, _) = rig.act.stop().await;
    assert_eq!(code, Some(0));
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &url]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("not written back: QUEUE|Ethernet4|3 is recorded but no longer in CONFIG_DB"), "{stdout}");
    assert!(gone(&mut con).is_empty(), "{:?}", gone(&mut con));
    assert_eq!(queue_setting(&mut con, "Ethernet8", 3), ORIGINAL);
    drop(rig.ticker);
}

/// CONFIG_DB's `WRED_PROFILE` and `QUEUE` tables, as [`tables`] reads them.
type Tables = std::collections::BTreeMap<String, Vec<(String, String)>>;

/// The profile of its own that Ethernet0|3 gets when it alone changes.
const OWN_PROFILE: &str = "WRED_PROFILE|ECN_TUNER_Ethernet0_3";

/// A switch after one confirmed change that gave Ethernet0|3 a profile of its own, with the
/// actuator stopped: its Redis (and counters), the tables before the change, and that
/// profile's fields.
async fn one_queue_on_its_own_profile() -> (RedisServer, Ticker, Tables, Vec<(String, String)>) {
    let Rig { redis, ticker, act } = rig(Spec::default(), &[]).await;
    let before = tables(&mut redis.con(CONFIG_DB));
    let mut c = act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("apply one queue");
    let (code, _) = act.stop().await;
    assert_eq!(code, Some(0));
    let profile = tables(&mut redis.con(CONFIG_DB)).remove(OWN_PROFILE).expect("the queue's own profile");
    (redis, ticker, before, profile)
}

/// After a restore that kept [`OWN_PROFILE`] for `QUEUE|Ethernet0|7`: that queue and the
/// profile as they were, everything else as recorded, the recording retired.
fn assert_restored_but_for_ethernet0_7(
    redis: &RedisServer,
    before: &Tables,
    profile: Vec<(String, String)>,
    stdout: &str,
) {
    assert!(stdout.contains(&format!("kept {OWN_PROFILE}")) && stdout.contains("QUEUE|Ethernet0|7"), "{stdout}");
    assert!(stdout.contains("removed 0 ecn-tuner profile(s)"), "{stdout}");
    let mut after = tables(&mut redis.con(CONFIG_DB));
    assert_eq!(after.remove(OWN_PROFILE), Some(profile), "the profile under the added queue, as it was");
    assert!(after.remove("QUEUE|Ethernet0|7").is_some());
    assert_eq!(&after, before, "everything else as recorded");
    assert!(recording(redis).is_none(), "the recording is retired");
}

/// A key of another type under the name of a profile of ours (read as absent) made the
/// profile's HSET fail inside EXEC while Redis ran the binding to it: the Apply failed with
/// "nothing changed" and CONFIG_DB held a queue bound to no profile. The key is ours: the
/// transaction replaces it.
#[tokio::test(flavor = "multi_thread")]
async fn a_stray_key_under_our_profiles_name_is_replaced_by_the_profile() {
    let rig = rig(Spec::default(), &[]).await;
    let mut con = rig.redis.con(CONFIG_DB);
    let _: () = redis::cmd("SET").arg(OWN_PROFILE).arg("stray").query(&mut con).unwrap();
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("apply one queue");
    assert_eq!(queue_setting(&mut con, "Ethernet0", 3), (300_000, 900_000, 25));
    assert!(tables(&mut con).contains_key(OWN_PROFILE), "{:?}", tables(&mut con));
    drop(rig.ticker);
}

/// A rig whose switch a first apply (on Ethernet4) has recorded: with its client, the lease
/// and an admin connection to CONFIG_DB.
async fn recorded_rig() -> (Rig, ecn_tests::Client, String, redis::Connection) {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    apply_ethernet4(&mut c, &l).await.expect("a first apply, which records the switch");
    let admin = rig.redis.con(CONFIG_DB);
    (rig, c, l, admin)
}

/// `CONFIG SET key value` on the server `con` reaches.
fn config_set(con: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("CONFIG").arg("SET").arg(key).arg(value).query(con).unwrap();
}

/// A transaction Redis refuses (here `OOM`: maxmemory reached) ran nothing, and its answer
/// says so: the Apply fails naming the refusal, and nothing is left in doubt. It was taken
/// for one without an answer: fenced off on a new connection, and where none could be opened
/// (maxclients reached) journaled in doubt, the stop exiting 1 and a restart refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_redis_refuses_is_no_write_in_doubt() {
    let (rig, mut c, l, mut admin) = recorded_rig().await;
    config_set(&mut admin, "maxmemory-policy", "noeviction");
    config_set(&mut admin, "maxmemory", "1");
    config_set(&mut admin, "maxclients", "1");
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    let refused = c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.unwrap_err();
    config_set(&mut admin, "maxclients", "10000");
    config_set(&mut admin, "maxmemory", "0");
    assert!(refused.message().contains("refused the transaction") && refused.message().contains("OOM"), "{refused:?}");
    assert_eq!(queue_setting(&mut admin, "Ethernet0", 3), ORIGINAL);
    drop(c);
    let (code, journal) = rig.act.stop().await;
    assert_eq!(code, Some(0), "{journal:?}");
    assert!(journal.iter().all(|e| e.get("in_doubt_generation").is_none()), "{journal:?}");
    drop(rig.ticker);
}

/// A Redis whose snapshot cannot be saved (a full or failing disk: `MISCONF`) refuses every
/// write, and `PING` with them, but serves reads. The actuator's batches ask `ECHO` first, so
/// telemetry goes on and an Apply is refused naming `MISCONF`, nothing in doubt; once Redis
/// takes writes again the next Apply goes through. With `PING` as the probe, telemetry stopped
/// and no read-back could run. Staged as a failed `BGSAVE` into a removed directory.
#[tokio::test(flavor = "multi_thread")]
async fn under_misconf_telemetry_goes_on_and_an_apply_is_refused_cleanly() {
    let (rig, mut c, l, mut admin) = recorded_rig().await;
    // MISCONF needs save points and a failed background save: the server's working directory
    // removed under it, the save cannot create its file (root or not).
    config_set(&mut admin, "save", "3600 1");
    std::fs::remove_dir_all(rig.redis.dir.path()).expect("remove the server's directory");
    let _: String = redis::cmd("BGSAVE").query(&mut admin).unwrap();
    eventually("the background save failed", WAIT, || {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut rig.redis.con(CONFIG_DB)).unwrap();
        let failed = info.contains("rdb_bgsave_in_progress:0") && info.contains("rdb_last_bgsave_status:err");
        async move { failed.then_some(()) }
    })
    .await;
    let refused: redis::RedisResult<()> = redis::cmd("PING").query(&mut admin);
    assert!(refused.is_err_and(|e| e.code() == Some("MISCONF")), "PING is refused under MISCONF");

    let mut stream = telemetry(&mut c).await;
    for _ in 0..3 {
        let b = tokio::time::timeout(WAIT, stream.next()).await.expect("telemetry under MISCONF").unwrap().unwrap();
        assert_eq!(b.samples.len(), 64);
    }
    let to = |kmin: u64| vec![change(&qid("Ethernet0", 3), kmin, 900_000, 0.25)];
    let refused = c
        .apply(pb::ApplyRequest { lease_id: l.clone(), changes: to(300_000), ..Default::default() })
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("refused the transaction") && refused.message().contains("MISCONF"),
        "{refused:?}"
    );
    assert_eq!(queue_setting(&mut admin, "Ethernet0", 3), ORIGINAL);

    // Without save points Redis takes writes again.
    config_set(&mut admin, "save", "");
    c.apply(pb::ApplyRequest { lease_id: l, changes: to(200_000), ..Default::default() }).await.expect("apply");
    assert_eq!(queue_setting(&mut admin, "Ethernet0", 3), (200_000, 900_000, 25));
    drop((c, stream));
    let (code, journal) = rig.act.stop().await;
    assert_eq!(code, Some(0), "{journal:?}");
    assert!(journal.iter().all(|e| e.get("in_doubt_generation").is_none()), "{journal:?}");
    drop(rig.ticker);
}

/// The writer's connection closed by Redis while it idled (`CLIENT KILL`, an idle timeout)
/// failed the next Apply with "unexpected end of file": its first read is tried again on a new
/// connection.
#[tokio::test(flavor = "multi_thread")]
async fn an_apply_after_redis_closed_the_idle_writer_connection_goes_through() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    apply_ethernet4(&mut c, &l).await.expect("a first apply, which opens the writer's connection");
    let mut admin = rig.redis.con(CONFIG_DB);
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let writer = clients.lines().find(|l| l.contains(" name=ecn-tuner-config ")).expect("the writer's connection");
    let id = writer.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
    let _: () = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query(&mut admin).unwrap();
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("the next apply");
    assert_eq!(queue_setting(&mut admin, "Ethernet0", 3), (300_000, 900_000, 25));
    drop(rig.ticker);
}

/// A profile of ours that is a hash but reads as absent (a value that is not UTF-8) is written
/// over, not deleted first: deleting a profile a queue is bound to makes orchagent remove and
/// re-add a WRED profile in use. Only a key of another type is deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_profile_of_ours_that_reads_as_absent_is_written_over_not_deleted() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let to = |kmin: u64| vec![change(&qid("Ethernet0", 3), kmin, 900_000, 0.25)];
    c.apply(pb::ApplyRequest { lease_id: l.clone(), changes: to(300_000), ..Default::default() }).await.unwrap();
    let mut con = rig.redis.con(CONFIG_DB);
    let _: () = redis::cmd("HSET").arg(OWN_PROFILE).arg("note").arg(&b"\xff"[..]).query(&mut con).unwrap();
    c.apply(pb::ApplyRequest { lease_id: l, changes: to(200_000), ..Default::default() }).await.unwrap();
    let note: Option<Vec<u8>> = redis::cmd("HGET").arg(OWN_PROFILE).arg("note").query(&mut con).unwrap();
    assert_eq!(note.as_deref(), Some(&b"\xff"[..]), "the profile was deleted and written anew");
    let _: () = redis::cmd("HDEL").arg(OWN_PROFILE).arg("note").query(&mut con).unwrap();
    assert_eq!(queue_setting(&mut con, "Ethernet0", 3), (200_000, 900_000, 25));
    drop(rig.ticker);
}

/// A MULTI Redis refuses (an ACL changed while the actuator runs) leaves each command of the
/// write to run on its own: the Apply fails saying so, and the settings last applied are put
/// back once Redis takes transactions again. Read as "refused, nothing written", the write
/// stayed on the switch while the journal and GetConfig said the old settings.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_whose_multi_is_refused_is_taken_back() {
    let (rig, mut c, l, mut admin) = recorded_rig().await;
    let acl = |con: &mut redis::Connection, rule: &str| {
        let _: () = redis::cmd("ACL").arg("SETUSER").arg("default").arg(rule).query(con).unwrap();
    };
    acl(&mut admin, "-multi");
    let changes = vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)];
    let refused = c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.unwrap_err();
    acl(&mut admin, "+multi");
    assert!(refused.message().contains("refused MULTI") && refused.message().contains("part of"), "{refused:?}");
    eventually("the settings last applied put back", WAIT, || {
        let back = queue_setting(&mut rig.redis.con(CONFIG_DB), "Ethernet0", 3) == ORIGINAL;
        async move { back.then_some(()) }
    })
    .await;
    drop(rig.ticker);
}

/// A restore whose transaction Redis runs in part (a command refused while EXEC runs the rest:
/// here the recreation of a shared profile someone replaced with a string) says that CONFIG_DB
/// holds part of it, and keeps the recording. It said the transaction "ran whole or not at
/// all", after it had rebound the queue and deleted our profile.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_that_redis_runs_in_part_says_so() {
    let (redis, _ticker, _, _) = one_queue_on_its_own_profile().await;
    let mut con = redis.con(CONFIG_DB);
    let _: () = redis::cmd("DEL").arg("WRED_PROFILE|AZURE_LOSSLESS").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("WRED_PROFILE|AZURE_LOSSLESS").arg("stray").query(&mut con).unwrap();
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--redis", &redis.url()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("CONFIG_DB may hold part of the restore") && stderr.contains("WRONGTYPE"), "{stderr}");
    assert!(recording(&redis).is_some(), "the recording is kept");
}

/// Someone binds a queue the recording does not hold to one of our profiles after the actuator
/// stopped: the restore keeps that profile and names the queue, since deleting it would leave
/// the queue bound to a profile that does not exist, and restores everything else. It used to
/// delete every `ECN_TUNER_*` profile.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_keeps_our_profile_while_a_queue_it_does_not_restore_is_bound_to_it() {
    let (redis, _ticker, before, profile) = one_queue_on_its_own_profile().await;
    set_config_field(&redis, "QUEUE|Ethernet0|7", "wred_profile", "ECN_TUNER_Ethernet0_3");
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &redis.url()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_restored_but_for_ethernet0_7(&redis, &before, profile, &stdout);
}

/// What ecn-tuner never writes is no restore's to put back: an operator's scheduler on a
/// controlled queue and the binding of a queue it did not control, changed after the
/// recording, stay as the operator left them and are listed; the controlled queue's binding
/// and profiles go back. A restore used to put every recorded entry back whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_leaves_what_ecn_tuner_never_writes_as_the_operator_left_it() {
    let (redis, _ticker, before, _) = one_queue_on_its_own_profile().await;
    set_config_field(&redis, "QUEUE|Ethernet0|3", "scheduler", "scheduler.7");
    set_config_field(&redis, "QUEUE|Ethernet4|0", "wred_profile", "AZURE_LOSSLESS");
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &redis.url()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    for key in ["QUEUE|Ethernet0|3", "QUEUE|Ethernet4|0"] {
        assert!(
            stdout.contains(&format!(
                "left as it is (changed since the recording, where ecn-tuner does not write): {key}"
            )),
            "{stdout}"
        );
    }
    let mut after = tables(&mut redis.con(CONFIG_DB));
    let field = |t: &Tables, key: &str, f: &str| t[key].iter().find(|(k, _)| k == f).map(|(_, v)| v.clone());
    assert_eq!(field(&after, "QUEUE|Ethernet0|3", "scheduler").as_deref(), Some("scheduler.7"));
    assert_eq!(field(&after, "QUEUE|Ethernet0|3", "wred_profile"), field(&before, "QUEUE|Ethernet0|3", "wred_profile"));
    assert_eq!(field(&after, "QUEUE|Ethernet4|0", "wred_profile").as_deref(), Some("AZURE_LOSSLESS"));
    assert!(!after.contains_key(OWN_PROFILE));
    for key in ["QUEUE|Ethernet0|3", "QUEUE|Ethernet4|0"] {
        after.remove(key);
    }
    let mut before = before;
    for key in ["QUEUE|Ethernet0|3", "QUEUE|Ethernet4|0"] {
        before.remove(key);
    }
    assert_eq!(after, before, "everything else as recorded");
}

/// An actuator restarted once a port has its speed again controls more queues than the one
/// that made the recording. Its queues all want one setting, so it edits their shared profile
/// in place; the restore puts that profile back. The recording named only the first actuator's
/// queues: the profile counted as shared with queues ecn-tuner never controlled, was left as
/// edited ("left as it is"), and the recording retired.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_that_controls_more_queues_is_restored_whole() {
    let mut rig = rig(Spec::default(), &[]).await;
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    let caps = |c: &mut ecn_tests::Client| {
        let mut c = c.clone();
        async move {
            let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.expect("caps").into_inner();
            caps.queues.into_iter().filter_map(|q| q.id).collect::<Vec<pb::QueueId>>()
        }
    };
    // Ethernet0 without a speed: its queues are not controlled.
    for (key, db) in [("PORT|Ethernet0", CONFIG_DB), ("PORT_TABLE:Ethernet0", APPL_DB)] {
        let _: () = redis::cmd("HDEL").arg(key).arg("speed").query(&mut rig.redis.con(db)).unwrap();
    }
    rig.act.restart(Duration::from_millis(200)).await;
    let mut c = rig.act.client().await;
    assert_eq!(caps(&mut c).await.len(), 62, "Ethernet0's queues left out");
    let l = lease(&mut c, "ctl-a").await;
    apply_ethernet4(&mut c, &l).await.expect("the first actuator records the switch");
    drop(c);
    for (key, db) in [("PORT|Ethernet0", CONFIG_DB), ("PORT_TABLE:Ethernet0", APPL_DB)] {
        let _: () = redis::cmd("HSET").arg(key).arg("speed").arg("100000").query(&mut rig.redis.con(db)).unwrap();
    }
    rig.act.restart(Duration::from_millis(200)).await;
    let mut c = rig.act.client().await;
    let queues = caps(&mut c).await;
    assert_eq!(queues.len(), 64, "Ethernet0's queues controlled again");
    let l = lease(&mut c, "ctl-a").await;
    let changes = queues.iter().map(|q| change(q, 300_000, 900_000, 0.25)).collect();
    c.apply(pb::ApplyRequest { lease_id: l, changes, ..Default::default() }).await.expect("every queue");
    let mut con = rig.redis.con(CONFIG_DB);
    let edited = tables(&mut con);
    assert!(
        edited["WRED_PROFILE|AZURE_LOSSLESS"].contains(&("green_min_threshold".into(), "300000".into())),
        "edited in place"
    );
    drop(c);
    let (code, _) = rig.act.stop().await;
    assert_eq!(code, Some(0));
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &rig.redis.url()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("WRED_PROFILE|AZURE_LOSSLESS"), "{stdout}");
    assert_eq!(tables(&mut con), before, "{stdout}");
    drop(rig.ticker);
}

/// The same binding, made while the restore's transaction is on its way, after the restore
/// read the tables: `WATCH` does not cover a key created then, so the transaction deletes the
/// profile. The restore finds the queue bound to nothing, puts the profile back as it was, and
/// reports it as kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_bound_to_our_profile_during_a_restore_gets_its_profile_back() {
    let (redis, _ticker, before, profile) = one_queue_on_its_own_profile().await;
    let proxy = Proxy::start(redis.port);
    proxy.stall_every_transaction();
    let restore = tokio::spawn({
        let url = proxy.url();
        async move { run_cli(&["sonic", "restore", "--redis", &url]).await }
    });
    eventually("the restore's MULTI held on the way", WAIT, || async { proxy.holding().then_some(()) }).await;
    set_config_field(&redis, "QUEUE|Ethernet0|7", "wred_profile", "ECN_TUNER_Ethernet0_3");
    proxy.release();
    let (code, stdout, stderr) = restore.await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("putting it back"), "{stderr}");
    assert_restored_but_for_ethernet0_7(&redis, &before, profile, &stdout);
}

/// A profile that queues ecn-tuner does not control also use (a range entry, which it leaves
/// alone) is never edited in place, even when every controlled queue wants the same setting:
/// the change would reach those queues too, with nothing watching their health.
#[tokio::test(flavor = "multi_thread")]
async fn a_profile_shared_with_queues_left_alone_is_never_edited() {
    let spec = Spec::default();
    let redis = RedisServer::start();
    seed(&redis, &spec);
    set_config_field(&redis, "QUEUE|Ethernet0,Ethernet4|1-2", "wred_profile", "AZURE_LOSSLESS");
    let before = tables(&mut redis.con(CONFIG_DB));
    let _ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(50));
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms"]).await;
    let mut c = act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let all: Vec<pb::QueueSetting> = spec
        .ports
        .iter()
        .flat_map(|p| spec.lossless.iter().map(move |&q| change(&qid(p, q), 300_000, 900_000, 0.25)))
        .collect();
    c.apply(pb::ApplyRequest { lease_id: l, changes: all, ..Default::default() }).await.expect("apply to every queue");
    let t = tables(&mut redis.con(CONFIG_DB));
    assert_eq!(t["WRED_PROFILE|AZURE_LOSSLESS"], before["WRED_PROFILE|AZURE_LOSSLESS"], "the shared profile as it was");
    assert_eq!(t["QUEUE|Ethernet0,Ethernet4|1-2"], before["QUEUE|Ethernet0,Ethernet4|1-2"]);
    for (q, s) in switch_settings(&redis, &spec) {
        assert_eq!(s, (300_000, 900_000, 25), "{q} in CONFIG_DB");
    }
    // The actuator stops (the change was confirmed at once, so it stays); restore undoes it.
    let (code, _) = act.stop().await;
    assert_eq!(code, Some(0));
    let (code, _, stderr) = run_cli(&["sonic", "restore", "--redis", &url]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), before);
}

/// A queue whose WRED curve marks in a step (min = max) is left alone: ecn-tuner could not put
/// it back, and it used to be controlled, so that every apply (which carries every queue's
/// setting) was refused for it, whichever queues it changed.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_with_step_marking_is_left_alone_and_blocks_nothing() {
    let spec = Spec::default();
    let redis = RedisServer::start();
    seed(&redis, &spec);
    {
        let mut con = redis.con(CONFIG_DB);
        let mut step: Vec<(String, String)> =
            redis::cmd("HGETALL").arg("WRED_PROFILE|AZURE_LOSSLESS").query(&mut con).unwrap();
        for (f, v) in &mut step {
            if f.ends_with("_min_threshold") || f.ends_with("_max_threshold") {
                *v = "2097152".into();
            }
        }
        let mut cmd = redis::cmd("HSET");
        cmd.arg("WRED_PROFILE|STEP");
        for (f, v) in &step {
            cmd.arg(f).arg(v);
        }
        cmd.query::<()>(&mut con).unwrap();
    }
    set_config_field(&redis, "QUEUE|Ethernet4|3", "wred_profile", "STEP");
    let _ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(50));
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms"]).await;
    let mut c = act.client().await;
    let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.unwrap().into_inner();
    let ids: Vec<pb::QueueId> = caps.queues.iter().filter_map(|q| q.id.clone()).collect();
    assert!(!ids.contains(&qid("Ethernet4", 3)), "{ids:?}");
    assert!(ids.contains(&qid("Ethernet0", 3)), "{ids:?}");
    let l = lease(&mut c, "ctl-a").await;
    let one = change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25);
    c.apply(pb::ApplyRequest { lease_id: l, changes: vec![one], ..Default::default() })
        .await
        .expect("an apply to another queue goes through");
    assert_eq!(queue_setting(&mut redis.con(CONFIG_DB), "Ethernet0", 3), (300_000, 900_000, 25));
    assert_eq!(queue_setting(&mut redis.con(CONFIG_DB), "Ethernet4", 3), (2_097_152, 2_097_152, 5));
}

/// An operator binds a queue ecn-tuner does not control to the profile it edits in place,
/// between two applies: the second apply reads CONFIG_DB again, sees the new binding, and
/// leaves that profile alone, moving the controlled queues to profiles of their own. It used to
/// plan from the tables as it had last read them, and edited the profile under the operator's
/// queue.
#[tokio::test(flavor = "multi_thread")]
async fn a_profile_an_operator_shares_between_two_applies_is_not_edited() {
    let spec = Spec::default();
    let rig = rig(spec.clone(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let every_queue = |kmin, kmax, pmax| -> Vec<pb::QueueSetting> {
        let ports = spec.ports.iter();
        ports.flat_map(|p| spec.lossless.iter().map(move |&q| change(&qid(p, q), kmin, kmax, pmax))).collect()
    };
    let first =
        pb::ApplyRequest { lease_id: l.clone(), changes: every_queue(300_000, 900_000, 0.25), ..Default::default() };
    c.apply(first).await.expect("first apply");
    set_config_field(&rig.redis, "QUEUE|Ethernet0|1", "wred_profile", "AZURE_LOSSLESS");
    let shared = tables(&mut rig.redis.con(CONFIG_DB))["WRED_PROFILE|AZURE_LOSSLESS"].clone();
    let second = pb::ApplyRequest { lease_id: l, changes: every_queue(200_000, 800_000, 0.3), ..Default::default() };
    c.apply(second).await.expect("second apply");
    let t = tables(&mut rig.redis.con(CONFIG_DB));
    assert_eq!(t["WRED_PROFILE|AZURE_LOSSLESS"], shared, "the profile under the operator's queue, as it was");
    assert!(t["QUEUE|Ethernet0|1"].contains(&("wred_profile".into(), "AZURE_LOSSLESS".into())), "{t:?}");
    for (q, s) in switch_settings(&rig.redis, &spec) {
        assert_eq!(s, (200_000, 800_000, 30), "{q} in CONFIG_DB");
    }
}

/// Someone binds a queue ecn-tuner does not control to one of ecn-tuner's own profiles: the
/// next apply leaves that profile as it is under their queue, and moves the controlled queue to
/// a fresh profile of its own. A rollback is such an apply too, so it cannot be refused for
/// this. (The apply used to be refused whole.)
#[tokio::test(flavor = "multi_thread")]
async fn an_apply_moves_off_our_profile_once_someone_elses_queue_is_bound_to_it() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let one = |kmin| pb::ApplyRequest {
        lease_id: l.clone(),
        changes: vec![change(&qid("Ethernet0", 3), kmin, 900_000, 0.25)],
        ..Default::default()
    };
    c.apply(one(300_000)).await.expect("a queue of its own");
    set_config_field(&rig.redis, "QUEUE|Ethernet0|1", "wred_profile", "ECN_TUNER_Ethernet0_3");
    let theirs = "WRED_PROFILE|ECN_TUNER_Ethernet0_3";
    let before = tables(&mut rig.redis.con(CONFIG_DB));
    c.apply(one(200_000)).await.expect("the queue moves to a profile no one else uses");
    let mut con = rig.redis.con(CONFIG_DB);
    let after = tables(&mut con);
    assert_eq!(after[theirs], before[theirs], "the profile under their queue, as it was");
    assert_eq!(after["QUEUE|Ethernet0|1"], before["QUEUE|Ethernet0|1"]);
    let binding: String = redis::cmd("HGET").arg("QUEUE|Ethernet0|3").arg("wred_profile").query(&mut con).unwrap();
    assert_eq!(binding, "ECN_TUNER_Ethernet0_3_v1");
    assert_eq!(queue_setting(&mut con, "Ethernet0", 3), (200_000, 900_000, 25));
}

/// Another client edits a WRED profile after an apply has read CONFIG_DB and before its
/// transaction runs: the transaction is a no-op (the keys read are watched), the apply is
/// refused, the edit stands, and the next apply goes through.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_between_an_applys_read_and_its_transaction_aborts_the_transaction() {
    // Time enough to make the edit while the transaction is held.
    let p = proxied_with_timeout("5s").await;
    let (redis, proxy, act) = (&p.redis, &p.proxy, &p.act);
    let mut c = act.client().await;
    let (l, _) = leased_after_a_first_change(&mut c, redis).await;

    proxy.stall_at_transaction();
    let apply = tokio::spawn({
        let (mut c, l) = (c.clone(), l.clone());
        async move { apply_ethernet4(&mut c, &l).await }
    });
    eventually("the apply's MULTI held on the way", WAIT, || async { proxy.holding().then_some(()) }).await;
    set_config_field(redis, "WRED_PROFILE|AZURE_LOSSLESS", "green_drop_probability", "7");
    let edited = tables(&mut redis.con(CONFIG_DB));
    proxy.release();
    let e = apply.await.unwrap().expect_err("the transaction must not run over the edit");
    assert!(e.message().contains("another client changed a WRED profile"), "{}", e.message());
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), edited, "the edit stands, and nothing else was written");

    apply_ethernet4(&mut c, &l).await.expect("the next apply plans from the new tables");
    assert_eq!(queue_setting(&mut redis.con(CONFIG_DB), "Ethernet4", 3), (200_000, 800_000, 30));
}

/// Redis dies while the actuator is inside a MULTI/EXEC transaction: CONFIG_DB comes back fully
/// old (Redis discards an unfinished transaction), the apply is refused, and the controller,
/// blind while Redis is away, falls back to the baseline; once Redis is back its applies land
/// whole.
#[tokio::test(flavor = "multi_thread")]
async fn redis_going_away_mid_apply_leaves_config_db_whole_and_the_controller_falls_back() {
    let spec = Spec::default();
    let mut redis = RedisServer::start_durable();
    seed(&redis, &spec);
    let proxy = Proxy::start(redis.port);
    let ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(50));
    let url = proxy.url();
    let act =
        Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms", "--redis-timeout", "5s"])
            .await;
    // A first change records the originals, so that the cut below falls inside the transaction.
    let mut c = act.client().await;
    let l = lease(&mut c, "setup").await;
    c.apply(pb::ApplyRequest {
        lease_id: l.clone(),
        changes: vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)],
        ..Default::default()
    })
    .await
    .expect("setup apply");
    c.release_writer(pb::ReleaseWriterRequest { lease_id: l }).await.unwrap();
    let old = tables(&mut redis.con(CONFIG_DB));

    // Writes wait: the controller's first apply stops inside MULTI, its commands queued.
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(60_000).arg("WRITE").query(&mut redis.con(0)).unwrap();
    let (mut child, log) = act.controller(
        "cut",
        &enforce_flags(
            "static:200KB,800KB,0.3",
            &["--min-dwell", "0s", "--confirm-within", "30s", "--health-window", "3", "--stale-after", "1s"],
        ),
    );
    let line = eventually("the actuator inside MULTI", WAIT, || {
        let l = client_in_multi(&redis, "ecn-tuner-config");
        async move { l }
    })
    .await;
    // Redis goes away (SIGKILL) with the transaction open, and stays out of reach for a while.
    proxy.close();
    redis.kill();
    let cut_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    eprintln!("cut inside: {line}");
    eventually("the refused apply in the journal", WAIT, || {
        let j = act.journal();
        async move {
            events(&j, "reject")
                .iter()
                .any(|e| e["detail"].as_str().unwrap_or("").contains("failed to apply"))
                .then_some(())
        }
    })
    .await;
    // Blind (no telemetry), the controller decides the baseline for every queue.
    eventually("baseline decisions on stale telemetry", WAIT, || {
        let d = read_json_lines(&log);
        async move {
            let fallback = d.iter().filter(|x| {
                x["ts"].as_u64().unwrap_or(0) > cut_at
                    && x["reason"].as_str().unwrap_or("").contains("stale_telemetry")
                    && setting_of(x) == BASELINE
            });
            (fallback.count() >= 64).then_some(())
        }
    })
    .await;

    // Redis comes back from its append-only file: the transaction never happened.
    redis.restart();
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), old, "CONFIG_DB is fully old");
    // The actuator reaches it again; the controller's next applies land whole.
    proxy.open();
    let whole = eventually("a new apply on CONFIG_DB", WAIT, || {
        let j = act.journal();
        let settings = switch_settings(&redis, &spec);
        async move {
            let applied = events(&j, "apply").len() >= 2;
            let first = settings[0].1;
            let uniform = settings.iter().all(|(_, s)| *s == first);
            (applied && uniform && first != ORIGINAL).then_some(first)
        }
    })
    .await;
    assert!(whole == BASELINE || whole == (200_000, 800_000, 30), "{whole:?}");
    child.kill().await.unwrap();
    drop(ticker);
}

/// Collect batches until `n` more have arrived.
async fn take(stream: &mut tonic::Streaming<pb::TelemetryBatch>, n: usize, into: &mut Vec<pb::TelemetryBatch>) {
    for _ in 0..n {
        let b = tokio::time::timeout(WAIT, stream.next()).await.expect("a batch").expect("open").expect("ok");
        into.push(b);
    }
}

/// A queue counter that is there but not a count drops that queue's interval, said: read as
/// absent, it made 0 bytes beside the packets that moved.
/// Writes `value` to `field` of Ethernet4's `COUNTERS:` hash (`port`: the port's, else queue
/// 3's) at every step while both controlled queues count traffic; checks that Ethernet4|3 gets
/// no sample while Ethernet0|3 keeps its own, and that the log names the field.
async fn a_garbled_counter_drops_the_interval(port: bool, field: &str, value: &[u8]) {
    let spec = Spec::default();
    let redis = RedisServer::start();
    seed(&redis, &spec);
    let mut counters = Counters::new(&spec, 64);
    counters.flush(&mut redis.con(COUNTERS_DB)).unwrap();
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms"]).await;
    let mut c = act.client().await;
    let mut stream = telemetry(&mut c).await;
    let mut got = Vec::new();
    take(&mut stream, 2, &mut got).await;
    let (q0, q1) = (ecn_tests::sonic::queue_oid(0, 3), ecn_tests::sonic::queue_oid(1, 3));
    let garbled_key = if port { ecn_tests::sonic::port_oid(1) } else { q1.clone() };
    let (id0, id1) = (qid("Ethernet0", 3), qid("Ethernet4", 3));
    let has = |b: &pb::TelemetryBatch, id: &pb::QueueId| b.samples.iter().any(|s| s.id.as_ref() == Some(id));
    let mut garbled = Vec::new();
    for _ in 0..4 {
        for q in [&q0, &q1] {
            counters.add(&format!("COUNTERS:{q}"), "SAI_QUEUE_STAT_BYTES", 1_000_000);
            counters.add(&format!("COUNTERS:{q}"), "SAI_QUEUE_STAT_PACKETS", 1_000);
        }
        counters.flush(&mut redis.con(COUNTERS_DB)).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("COUNTERS:{garbled_key}"))
            .arg(field)
            .arg(value)
            .query(&mut redis.con(COUNTERS_DB))
            .unwrap();
        take(&mut stream, 2, &mut garbled).await;
    }
    // The first batch may predate the edit; after it, Ethernet4|3 has no sample, Ethernet0|3 has.
    assert!(garbled[2..].iter().all(|b| !has(b, &id1) && has(b, &id0)), "{garbled:?}");
    let log = act.log_text();
    assert!(log.contains("not a whole count") && log.contains(&format!("Ethernet4|3: {field}")), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queue_counter_that_is_not_a_count_drops_the_interval() {
    a_garbled_counter_drops_the_interval(false, "SAI_QUEUE_STAT_BYTES", b"1.5e9").await;
}

/// Bytes that are not UTF-8 failed the whole poll's reply: all telemetry stopped, and the log
/// blamed COUNTERS_DB.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_counter_that_is_not_text_drops_the_interval() {
    a_garbled_counter_drops_the_interval(false, "SAI_QUEUE_STAT_PACKETS", b"12\xff\xfe").await;
}

/// Read as absent, it made the queue's pauses 0.
#[tokio::test(flavor = "multi_thread")]
async fn a_pfc_counter_that_is_not_a_count_drops_the_interval_of_its_queue() {
    a_garbled_counter_drops_the_interval(true, "SAI_PORT_STAT_PFC_3_RX_PKTS", b"many").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn counter_wraps_and_resets_give_true_deltas() {
    let spec = Spec::default();
    let redis = RedisServer::start();
    seed(&redis, &spec);
    // 32-bit counters; Ethernet0 queue 3's byte counter starts 25 MB below the top.
    let mut counters = Counters::new(&spec, 32);
    let q0 = format!("COUNTERS:{}", ecn_tests::sonic::queue_oid(0, 3));
    let q1 = format!("COUNTERS:{}", ecn_tests::sonic::queue_oid(1, 3));
    let start = (1u64 << 32) - 25_000_000;
    counters.set(&q0, "SAI_QUEUE_STAT_BYTES", start);
    counters.flush(&mut redis.con(COUNTERS_DB)).unwrap();
    let url = redis.url();
    let act =
        Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms", "--counter-bits", "32"])
            .await;
    let mut c = act.client().await;
    let mut stream = telemetry(&mut c).await;
    let mut got = Vec::new();
    take(&mut stream, 2, &mut got).await;
    const D: u64 = 10_000_000;
    let mut added_q1 = 0;
    for step in 0..8 {
        for key in [&q0, &q1] {
            if key == &q1 && step == 4 {
                // `sonic-clear queuecounters`: back to zero.
                counters.clear_queue(1, 3);
                continue;
            }
            counters.add(key, "SAI_QUEUE_STAT_BYTES", D);
            counters.add(key, "SAI_QUEUE_STAT_PACKETS", D / 1_000);
            if key == &q1 {
                added_q1 += D;
            }
        }
        counters.flush(&mut redis.con(COUNTERS_DB)).unwrap();
        // At least one poll after each step, before the next.
        take(&mut stream, 3, &mut got).await;
    }
    assert!(counters.get(&q0, "SAI_QUEUE_STAT_BYTES") < start, "the counter wrapped");
    let id0 = qid("Ethernet0", 3);
    let id1 = qid("Ethernet4", 3);
    let series = |id: &pb::QueueId| -> Vec<u64> {
        got.iter().flat_map(|b| b.samples.iter().filter(|s| s.id.as_ref() == Some(id)).map(|s| s.tx_bytes)).collect()
    };
    let (s0, s1) = (series(&id0), series(&id1));
    assert!(
        s0.iter().chain(&s1).all(|&b| b == 0 || b == D),
        "every delta is 0 or one step, never a spike: {s0:?} {s1:?}"
    );
    assert_eq!(s0.iter().sum::<u64>(), 8 * D, "the wrap counted exactly: {s0:?}");
    // The interval with the reset has no sample for that queue; nothing else is lost.
    assert_eq!(s1.iter().sum::<u64>(), added_q1, "{s1:?}");
    let dropped = got.iter().filter(|b| {
        b.samples.iter().any(|s| s.id.as_ref() == Some(&id0)) && !b.samples.iter().any(|s| s.id.as_ref() == Some(&id1))
    });
    let dropped: Vec<u64> = dropped.map(|b| b.ts_ns).collect();
    assert_eq!(dropped.len(), 1, "exactly one interval dropped for the reset queue");
    // And the log says so (it used to say nothing at the default level).
    let log = act.log_text();
    assert!(log.contains("samples dropped: counters went back") && log.contains("queues=1"), "{log}");
    // Each sample states the time its deltas cover: the step from the queue's previous
    // sample, except just after the drop, where the deltas count from the reading at the
    // reset. Rates measured over the step there would read half the truth.
    for id in [&id0, &id1] {
        let samples: Vec<&pb::TelemetrySample> =
            got.iter().flat_map(|b| b.samples.iter().filter(|s| s.id.as_ref() == Some(id))).collect();
        for w in samples.windows(2) {
            let covered_from = if w[0].ts_ns < dropped[0] && w[1].ts_ns > dropped[0] { dropped[0] } else { w[0].ts_ns };
            assert_eq!(w[1].span_ns, w[1].ts_ns - covered_from, "{id:?}: {:?}", w[1]);
        }
    }
    for b in &got {
        for s in &b.samples {
            let pkts_ok = s.tx_pkts == 0 || s.tx_pkts == D / 1_000;
            assert!(pkts_ok, "{s:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_urls_unreachable_redis_and_empty_config_db_exit_with_clear_errors() {
    let empty = RedisServer::start();
    let empty_url = empty.url();
    let nobody = format!("redis://127.0.0.1:{}", ecn_tests::ports::free_port());
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["actuator", "--backend", "sonic", "--redis", "http://example"], 2, "--redis"),
        (vec!["actuator", "--backend", "sonic"], 2, "--redis"),
        (vec!["actuator", "--backend", "sonic", "--redis", &nobody], 1, "cannot reach Redis"),
        (vec!["actuator", "--backend", "sonic", "--redis", &empty_url], 2, "no WRED_PROFILE"),
        (vec!["actuator", "--backend", "sonic", "--redis", &empty_url, "--poll-interval", "0s"], 2, "--poll-interval"),
        (vec!["actuator", "--backend", "sonic", "--redis", &empty_url, "--poll-interval", "1ms"], 2, "at least 100ms"),
        (
            vec!["actuator", "--backend", "sonic", "--redis", &empty_url, "--state-db", "4"],
            2,
            "the same index as --config-db",
        ),
        (vec!["sonic", "restore", "--redis", &empty_url, "--state-db=-1"], 2, "--state-db -1"),
        // A database restore does not use is refused, not checked.
        (vec!["sonic", "restore", "--redis", &empty_url, "--counters-db=-1"], 2, "--counters-db: not used here"),
        (
            vec!["actuator", "--backend", "sonic", "--redis", &empty_url, "--counters-db", "99"],
            2,
            "--counters-db 99: Redis",
        ),
        (vec!["actuator", "--backend", "dry-run", "--redis", &empty_url], 2, "--redis"),
        (vec!["sonic", "restore", "--redis", "nope"], 2, "--redis"),
        (vec!["sonic", "restore", "--redis", &nobody], 1, "cannot reach Redis"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let journal = journal.to_str().unwrap();
    for (mut args, want, text) in cases {
        if args[0] == "actuator" {
            args.extend(["--listen", "127.0.0.1:0", "--journal", journal]);
        }
        let (code, _, stderr) = run_cli(&args).await;
        assert_eq!(code, Some(want), "{args:?}: {stderr}");
        assert!(stderr.contains(text), "{args:?} should say {text}: {stderr}");
    }
    let (code, stdout, _) = run_cli(&["sonic", "restore", "--redis", &empty_url]).await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains("nothing to restore"), "{stdout}");
}

/// [`refused_start`] with a journal of its own, as every start that gets as far as Redis needs.
async fn refused_start_journaled(url: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    refused_start(url, Some(&dir.path().join("journal.jsonl"))).await
}

/// Start a SONiC actuator on `url` (with `journal`, if given) that is expected to refuse to
/// start: its exit code and stderr.
async fn refused_start(url: &str, journal: Option<&std::path::Path>) -> (Option<i32>, String) {
    let journal = journal.map(|p| p.display().to_string());
    let mut args = vec!["actuator", "--backend", "sonic", "--redis", url, "--listen", "127.0.0.1:0"];
    if let Some(j) = &journal {
        args.extend(["--journal", j.as_str()]);
    }
    let (code, _, stderr) = run_cli(&args).await;
    (code, stderr)
}

/// Nothing ecn-tuner writes may become impossible to undo, and `sonic restore` writes only what
/// could be this switch's original state: a recording file of another switch, one with
/// thresholds no switch holds, or one binding a queue to a profile it lacks is refused before
/// anything is written, and a restore never renames a file a recording merely names. A switch
/// without a buffer pool size (no bound on Kmax) is refused at start-up.
#[tokio::test(flavor = "multi_thread")]
async fn recordings_that_cannot_be_this_switchs_and_unbounded_switches_are_refused() {
    let spec = Spec::default();
    let redis = RedisServer::start();
    seed(&redis, &spec);
    let url = redis.url();
    let before = tables(&mut redis.con(CONFIG_DB));
    let dir = tempfile::Builder::new().prefix("ecn-recordings-").tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "not a recording").unwrap();
    // A recording of the switch as it is, naming the victim as its file copy.
    let recording = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut profiles = serde_json::Map::new();
        let mut queues = serde_json::Map::new();
        for (key, fields) in &before {
            let (table, name) = key.split_once('|').unwrap();
            let map = if table == "WRED_PROFILE" { &mut profiles } else { &mut queues };
            map.insert(name.to_string(), serde_json::json!(fields));
        }
        let mut r = serde_json::json!({
            "format": "ecn-tuner/sonic-originals/v1", "recorded_unix_ms": 1, "switch": spec.hostname,
            "config_db": CONFIG_DB, "file": victim, "wred_profile": profiles, "queue": queues,
        });
        edit(&mut r);
        r
    };
    let profile = |r: &mut serde_json::Value, field: &str, value: &str| {
        let fields = r["wred_profile"]["AZURE_LOSSLESS"].as_array_mut().unwrap();
        let pair = fields.iter_mut().find(|p| p[0] == field).unwrap();
        pair[1] = value.into();
    };
    type Edit<'a> = Box<dyn Fn(&mut serde_json::Value) + 'a>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("other-switch", Box::new(|r| r["switch"] = "some-other-switch".into()), "not 'sonic-leaf0'"),
        ("other-db", Box::new(|r| r["config_db"] = 7.into()), "CONFIG_DB db 7"),
        ("not-bytes", Box::new(|r| profile(r, "green_min_threshold", "abc")), "green_min_threshold 'abc'"),
        ("min-above-max", Box::new(|r| profile(r, "green_min_threshold", "9999999999")), "is above"),
        ("not-percent", Box::new(|r| profile(r, "green_drop_probability", "9999")), "0-100"),
        (
            "missing-profile",
            Box::new(|r| r["queue"]["Ethernet0|3"] = serde_json::json!([["wred_profile", "DOES_NOT_EXIST"]])),
            "WRED_PROFILE|DOES_NOT_EXIST",
        ),
        // Each of these wrote CONFIG_DB, then failed the restore's check, or left a queue on a
        // profile of ours and retired the file.
        ("empty-profile", Box::new(|r| r["wred_profile"]["AZURE_LOSSLESS"] = serde_json::json!([])), "no fields"),
        ("empty-queue", Box::new(|r| r["queue"]["Ethernet0|3"] = serde_json::json!([])), "no fields"),
        (
            "field-twice",
            Box::new(|r| {
                let fields = r["wred_profile"]["AZURE_LOSSLESS"].as_array_mut().unwrap();
                let first = fields[0].clone();
                fields.push(first);
            }),
            "given twice",
        ),
        (
            "our-profile",
            Box::new(|r| {
                let p = r["wred_profile"]["AZURE_LOSSLESS"].clone();
                r["wred_profile"]["ECN_TUNER_Ethernet0_3"] = p;
            }),
            "a profile of ecn-tuner's",
        ),
    ];
    for (name, edit, says) in &cases {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, recording(edit.as_ref()).to_string()).unwrap();
        let (code, _, stderr) = run_cli(&["sonic", "restore", "--redis", &url, "--from", file.to_str().unwrap()]).await;
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains(&format!("{name}.json")),
            "{name} should say {says}: {stderr}"
        );
        assert_eq!(tables(&mut redis.con(CONFIG_DB)), before, "{name}: CONFIG_DB untouched");
        assert!(file.exists() && victim.exists(), "{name}: no file renamed");
    }

    // The actuator refuses a file beside its journal that is another switch's recording: it
    // would go back into STATE_DB as this switch's originals.
    let journal = dir.path().join("j.jsonl");
    let beside = dir.path().join("j.jsonl.sonic-originals.json");
    std::fs::write(&beside, recording(cases[0].1.as_ref()).to_string()).unwrap();
    let (code, stderr) = refused_start(&url, Some(&journal)).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("j.jsonl.sonic-originals.json") && stderr.contains("some-other-switch"), "{stderr}");
    std::fs::remove_file(&beside).unwrap();

    // This switch's own recording restores (nothing to change), and only the file given is
    // retired, not the one the recording names.
    let good = dir.path().join("good.json");
    std::fs::write(&good, recording(&|_| {}).to_string()).unwrap();
    let (code, stdout, stderr) =
        run_cli(&["sonic", "restore", "--redis", &url, "--from", good.to_str().unwrap()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("restored 0 WRED profile(s)"), "{stdout}");
    assert!(!good.exists() && victim.exists(), "the given file is retired, the named one left alone");
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), before);

    // A recording in STATE_DB taken before a controlled queue existed: a restore could not
    // undo ecn-tuner's writes to that queue, so the actuator refuses to start on it.
    let partial = recording(&|r| {
        r["queue"].as_object_mut().unwrap().remove("Ethernet0|3");
    });
    let mut state = redis.con(STATE_DB);
    let _: () =
        redis::cmd("HSET").arg("ECN_TUNER|ORIGINALS").arg("json").arg(partial.to_string()).query(&mut state).unwrap();
    let (code, stderr) = refused_start_journaled(&url).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("QUEUE|Ethernet0|3") && stderr.contains("sonic restore"), "{stderr}");
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), before, "nothing written");

    // The same Redis under a mistyped --switch-name: the recording names this switch as it was
    // recorded, so the advice is to give that name, not a restore that would undo everything.
    let own = recording(&|_| {});
    let _: () =
        redis::cmd("HSET").arg("ECN_TUNER|ORIGINALS").arg("json").arg(own.to_string()).query(&mut state).unwrap();
    let journal = dir.path().join("typo.jsonl").display().to_string();
    for (name, says) in [("leaf1", "--switch-name \"leaf1\": the recording"), ("", "--switch-name: empty")] {
        let args = ["actuator", "--backend", "sonic", "--redis", &url, "--journal", &journal, "--switch-name", name];
        let (code, _, stderr) = run_cli(&args).await;
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), before, "nothing written");
    let _: () = redis::cmd("DEL").arg("ECN_TUNER|ORIGINALS").query(&mut state).unwrap();

    // No buffer pool size: Kmax would have no bound.
    let mut con = redis.con(CONFIG_DB);
    let _: () = redis::cmd("DEL")
        .arg("BUFFER_POOL|egress_lossless_pool")
        .arg("BUFFER_POOL|ingress_lossless_pool")
        .query(&mut con)
        .unwrap();
    let (code, stderr) = refused_start_journaled(&url).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("BUFFER_POOL"), "{stderr}");
}

/// An actuator killed between an apply and its confirm leaves the change on the switch (a
/// switch keeps what it is given); a new actuator on the same journal refuses to start rather
/// than serve that change as if it were confirmed.
#[tokio::test(flavor = "multi_thread")]
async fn a_journal_ending_on_an_unconfirmed_apply_stops_the_next_actuator() {
    let rig = rig(Spec::default(), &[]).await;
    let url = rig.redis.url();
    let mut c = rig.act.client().await;
    let l = lease(&mut c, "ctl-a").await;
    let req = pb::ApplyRequest {
        lease_id: l,
        changes: vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)],
        confirm_within_ms: 60_000,
        reason: "test".into(),
        ..Default::default()
    };
    c.apply(req).await.expect("apply");
    let journal_text = std::fs::read_to_string(&rig.act.journal).unwrap();
    drop(c);
    let Rig { redis, ticker, act } = rig;
    drop(act); // SIGKILL: no revert
    let dir = tempfile::Builder::new().prefix("ecn-sonic-restart-").tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    std::fs::write(&journal, journal_text).unwrap();
    let (code, stderr) = refused_start(&url, Some(&journal)).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("never confirmed") && stderr.contains("sonic restore"), "{stderr}");
    assert_eq!(queue_setting(&mut redis.con(CONFIG_DB), "Ethernet0", 3), (300_000, 900_000, 25), "still on the switch");
    drop(ticker);
}

/// The lease, and a first change that records the original profiles (a STATE_DB write that the
/// stalls below would hold as well), and CONFIG_DB after it.
async fn leased_after_a_first_change(
    c: &mut ecn_tests::Client,
    redis: &RedisServer,
) -> (String, std::collections::BTreeMap<String, Vec<(String, String)>>) {
    let l = lease(c, "fence").await;
    c.apply(pb::ApplyRequest {
        lease_id: l.clone(),
        changes: vec![change(&qid("Ethernet0", 3), 300_000, 900_000, 0.25)],
        ..Default::default()
    })
    .await
    .expect("first apply");
    (l, tables(&mut redis.con(CONFIG_DB)))
}

async fn apply_ethernet4(c: &mut ecn_tests::Client, lease_id: &str) -> Result<(), tonic::Status> {
    c.apply(pb::ApplyRequest {
        lease_id: lease_id.into(),
        changes: vec![change(&qid("Ethernet4", 3), 200_000, 800_000, 0.3)],
        ..Default::default()
    })
    .await
    .map(|_| ())
}

/// A seeded switch with ticking counters, and a sonic actuator reaching its Redis through a
/// [`Proxy`] with a 1 s `--redis-timeout`.
async fn proxied() -> Proxied {
    proxied_with_timeout("1s").await
}

/// [`proxied`], with `--redis-timeout` at `timeout`.
struct Proxied {
    redis: RedisServer,
    proxy: Proxy,
    _ticker: Ticker,
    act: Actuator,
}

async fn proxied_with_timeout(timeout: &str) -> Proxied {
    let spec = Spec::default();
    let redis = RedisServer::start();
    seed(&redis, &spec);
    let proxy = Proxy::start(redis.port);
    let ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(50));
    let url = proxy.url();
    let act = Actuator::start(&[
        "--backend",
        "sonic",
        "--redis",
        &url,
        "--poll-interval",
        "100ms",
        "--redis-timeout",
        timeout,
    ])
    .await;
    Proxied { redis, proxy, _ticker: ticker, act }
}

/// A transaction that outlives `--redis-timeout` (the network path holds it; Redis itself is
/// reachable) is reported failed, so it must never land afterwards: the writer closes its
/// connection at the server before it reads CONFIG_DB back.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_that_outlives_its_timeout_never_lands_later() {
    let p = proxied().await;
    let mut c = p.act.client().await;
    let (l, before) = leased_after_a_first_change(&mut c, &p.redis).await;

    p.proxy.stall_at_transaction();
    let e = apply_ethernet4(&mut c, &l).await.expect_err("an apply that times out fails");
    assert_eq!(e.code(), tonic::Code::Internal, "{e:?}");
    assert!(e.message().contains("nothing changed"), "{}", e.message());
    // The network delivers what it held: a transaction still open at the server would run now.
    p.proxy.release();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(tables(&mut p.redis.con(CONFIG_DB)), before, "the failed transaction never lands");

    // The writer is whole: the same change goes through now.
    apply_ethernet4(&mut c, &l).await.expect("the apply after the stall");
    assert_eq!(queue_setting(&mut p.redis.con(CONFIG_DB), "Ethernet4", 3), (200_000, 800_000, 30));
}

/// When Redis cannot be reached to fence a timed-out transaction off (the network holds it, and
/// new connections fail), the apply is reported failed, and the actuator makes that true once
/// the transaction does land: it puts the settings last applied back without being asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_held_in_the_network_is_undone_when_it_lands() {
    let p = proxied().await;
    let mut c = p.act.client().await;
    let (l, before) = leased_after_a_first_change(&mut c, &p.redis).await;

    p.proxy.hold_at_transaction();
    let e = apply_ethernet4(&mut c, &l).await.expect_err("an apply that times out fails");
    assert!(e.message().contains("cannot reach Redis to fence"), "{}", e.message());
    assert_eq!(tables(&mut p.redis.con(CONFIG_DB)), before, "held: nothing landed yet");
    // The network delivers the transaction late and it runs; the actuator, retrying every
    // second, fences the connection off, sees it and puts the settings last applied back.
    // The journal line that settles the doubt follows that undo.
    p.proxy.release();
    let journal = eventually("the doubt settled in the journal", WAIT, || {
        let journal = p.act.journal();
        let settled = journal.last().is_some_and(|l| l["event"] == "revert");
        async move { settled.then_some(journal) }
    })
    .await;
    assert_eq!(tables(&mut p.redis.con(CONFIG_DB)), before, "the late transaction is undone");
    assert_eq!(queue_setting(&mut p.redis.con(CONFIG_DB), "Ethernet4", 3), ORIGINAL);
    // The journal kept the write in doubt on record until then, and says when it was settled.
    let reject = journal.iter().rev().find(|l| l["event"] == "reject").expect("the failed apply's reject line");
    let doubt = reject["in_doubt_generation"].as_u64().unwrap_or_else(|| panic!("stamped in doubt: {journal:?}"));
    let last = journal.last().unwrap();
    assert!(last.get("in_doubt_generation").is_none(), "{journal:?}");
    assert!(last["detail"].as_str().unwrap().contains(&format!("generation {doubt} can no longer land")), "{last}");
}

/// An actuator that dies while a failed write is in doubt (Redis could not be reached to fence
/// it off) cannot settle it; when the write lands after all, the switch holds a change nobody
/// checked, so the next actuator on that journal refuses to start rather than serve it.
#[tokio::test(flavor = "multi_thread")]
async fn an_actuator_that_dies_with_a_write_in_doubt_stops_the_next_one() {
    let p = proxied().await;
    let mut c = p.act.client().await;
    let (l, _) = leased_after_a_first_change(&mut c, &p.redis).await;

    p.proxy.hold_at_transaction();
    let e = apply_ethernet4(&mut c, &l).await.expect_err("an apply that times out fails");
    assert!(e.message().contains("cannot reach Redis to fence"), "{}", e.message());
    drop(c);
    let journal_text = std::fs::read_to_string(&p.act.journal).unwrap();
    let Proxied { redis, proxy, _ticker, act } = p;
    drop(act); // SIGKILL: the writer never settles
    proxy.release();
    eventually("the held transaction lands", WAIT, || async {
        (queue_setting(&mut redis.con(CONFIG_DB), "Ethernet4", 3) == (200_000, 800_000, 30)).then_some(())
    })
    .await;

    let dir = tempfile::Builder::new().prefix("ecn-sonic-doubt-").tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    std::fs::write(&journal, journal_text).unwrap();
    let (code, stderr) = refused_start(&redis.url(), Some(&journal)).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("failed without an answer") && stderr.contains("sonic restore"), "{stderr}");
}

/// After a Redis restart client ids start again from 1, so by the time the actuator fences off
/// a failed transaction, its connection's id may name another program's connection (a SONiC
/// daemon's). That one must stay open: only a connection bearing ecn-tuner's name is closed.
#[tokio::test(flavor = "multi_thread")]
async fn fencing_after_a_redis_restart_never_closes_another_programs_connection() {
    let mut redis = RedisServer::start_durable();
    seed(&redis, &Spec::default());
    let proxy = Proxy::start(redis.port);
    let url = proxy.url();
    let act =
        Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms", "--redis-timeout", "1s"])
            .await;
    let mut c = act.client().await;
    let (l, _) = leased_after_a_first_change(&mut c, &redis).await;
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut redis.con(0)).unwrap();
    let stale: i64 = list
        .lines()
        .find(|line| line.split(' ').any(|kv| kv == "name=ecn-tuner-config"))
        .and_then(|line| line.split(' ').find_map(|kv| kv.strip_prefix("id=")))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("the writer's connection in CLIENT LIST: {list}"));

    proxy.hold_at_transaction();
    let e = apply_ethernet4(&mut c, &l).await.expect_err("an apply that times out fails");
    assert!(e.message().contains("cannot reach Redis to fence"), "{}", e.message());
    redis.restart();
    // Another program's connections take the ids up to the writer's old one.
    let mut others = Vec::new();
    loop {
        let mut con = redis.con(0);
        let _: () = redis::cmd("CLIENT").arg("SETNAME").arg("sonic-daemon").query(&mut con).unwrap();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).unwrap();
        others.push((id, con));
        if id >= stale {
            break;
        }
    }
    assert_eq!(others.last().map(|(id, _)| *id), Some(stale), "the old id now names another program's connection");
    // The actuator retries the fence every --redis-timeout once it reaches Redis again.
    proxy.release();
    tokio::time::sleep(Duration::from_secs(4)).await;
    for (id, con) in &mut others {
        let pong: redis::RedisResult<String> = redis::cmd("PING").query(con);
        assert!(pong.is_ok(), "client {id} (not ecn-tuner's) was closed: {pong:?}\n{}", act.log_text());
    }
    apply_ethernet4(&mut c, &l).await.expect("the writer is whole again");
    assert_eq!(queue_setting(&mut redis.con(CONFIG_DB), "Ethernet4", 3), (200_000, 800_000, 30));
}

/// Counters that stop moving (syncd hung, `counterpoll` off) are not an idle fabric: once
/// nothing has moved for `--frozen-after`, the actuator publishes no telemetry, so that a
/// controller sees it stale and falls back, and it resumes when the counters move again.
#[tokio::test(flavor = "multi_thread")]
async fn counters_that_stop_moving_stop_the_telemetry() {
    let rig = rig(Spec::default(), &["--frozen-after", "1s"]).await;
    let mut c = rig.act.client().await;
    let mut stream = telemetry(&mut c).await;
    let mut seen = Vec::new();
    take(&mut stream, 3, &mut seen).await;

    let moving = rig.ticker.counters.lock().unwrap().default_traffic;
    let still = Traffic { bps: 0, ecn_fraction: 0.0, ..moving };
    rig.ticker.counters.lock().unwrap().default_traffic = still;
    let frozen_at = std::time::Instant::now();
    // Batches go on for about a second (zero deltas, as from an idle fabric), then stop.
    let silent = loop {
        assert!(frozen_at.elapsed() < Duration::from_secs(20), "telemetry never stopped");
        match tokio::time::timeout(Duration::from_secs(2), stream.next()).await {
            Ok(b) => seen.push(b.expect("open").expect("ok")),
            Err(_) => break frozen_at.elapsed(),
        }
    };
    // Silent for 2 s from about a second after the stop (the poll is 100 ms): about 3 s.
    assert!(silent < Duration::from_secs(8), "telemetry stopped late: {silent:?}");

    rig.ticker.counters.lock().unwrap().default_traffic = moving;
    let b = tokio::time::timeout(WAIT, stream.next()).await.expect("telemetry resumes").unwrap().unwrap();
    assert_eq!(b.samples.len(), 64);
    drop(rig.ticker);
}

/// `counterpoll queue disable` on a running switch leaves every queue counter standing still
/// while port octets move: not a stop the liveness check sees, and samples would read an idle
/// fabric. The actuator reads the groups' `FLEX_COUNTER_STATUS` every few polls, publishes
/// nothing while queue (or port) polling is off, and resumes when it is on again; ECN marks
/// polling off is only warned of.
#[tokio::test(flavor = "multi_thread")]
async fn counter_polling_turned_off_while_running_stops_the_telemetry() {
    let rig = rig(Spec::default(), &[]).await;
    let mut c = rig.act.client().await;
    let mut stream = telemetry(&mut c).await;
    let mut seen = Vec::new();
    // ECN marks refreshed as often as the poller reads them (`counterpoll wredqueue interval
    // 100`): vouched for, from the next read of the groups on.
    set_config_field(&rig.redis, "FLEX_COUNTER_TABLE|WRED_ECN_QUEUE", "POLL_INTERVAL", "100");
    let counted = |b: &pb::TelemetryBatch| b.samples.iter().any(|s| s.ecn_marks_counted);
    for _ in 0..30 {
        take(&mut stream, 1, &mut seen).await;
        if counted(&seen[seen.len() - 1]) {
            break;
        }
    }
    take(&mut stream, 3, &mut seen).await;

    set_config_field(&rig.redis, "FLEX_COUNTER_TABLE|WRED_ECN_QUEUE", "FLEX_COUNTER_STATUS", "disable");
    let marks_off = "SONiC stopped polling wredqueue counters";
    eventually("the warning", WAIT, || async { rig.act.log_text().contains(marks_off).then_some(()) }).await;
    // Their counters stand still: a zero no longer says that nothing was marked (batches polled
    // before the status was read may still be on their way).
    let n = seen.len();
    assert!(seen[n - 3..].iter().all(|b| b.samples.iter().all(|s| s.ecn_marks_counted)));
    for _ in 0..20 {
        take(&mut stream, 1, &mut seen).await;
        if !counted(&seen[seen.len() - 1]) {
            break;
        }
    }
    take(&mut stream, 2, &mut seen).await;
    assert!(!seen[seen.len() - 3..].iter().any(counted), "marks still vouched for once their polling stopped");

    for group in ["QUEUE", "PORT"] {
        let key = format!("FLEX_COUNTER_TABLE|{group}");
        set_config_field(&rig.redis, &key, "FLEX_COUNTER_STATUS", "disable");
        let off_at = std::time::Instant::now();
        // A few batches may still come (the status is read every 5 polls of 100 ms), then none.
        let silent = loop {
            assert!(off_at.elapsed() < Duration::from_secs(20), "{group}: telemetry never stopped");
            match tokio::time::timeout(Duration::from_secs(2), stream.next()).await {
                Ok(b) => seen.push(b.expect("open").expect("ok")),
                Err(_) => break off_at.elapsed(),
            }
        };
        // About 2.5 s (the status read within 0.5 s, then 2 s of silence); a loaded machine's
        // slow poll has room.
        assert!(silent < Duration::from_secs(6), "{group}: telemetry stopped late: {silent:?}");
        let group = group.to_lowercase();
        let stopped = format!("SONiC stopped polling {group} counters");
        eventually("the warning", WAIT, || async { rig.act.log_text().contains(&stopped).then_some(()) }).await;
        let log = rig.act.log_text();
        assert!(log.contains(&format!("`counterpoll {group} enable`")), "{log}");

        set_config_field(&rig.redis, &key, "FLEX_COUNTER_STATUS", "enable");
        let b = tokio::time::timeout(WAIT, stream.next()).await.expect("telemetry resumes").unwrap().unwrap();
        assert_eq!(b.samples.len(), 64);
        let again = format!("SONiC polls {group} counters again");
        eventually("polling back", WAIT, || async { rig.act.log_text().contains(&again).then_some(()) }).await;
    }
    drop(rig.ticker);
}

/// A Redis user that may not close connections could not fence off a transaction that timed
/// out, so the actuator refuses to start (exit 2) rather than fail on the first timeout; and
/// the error, like every message, masks the password of the URL.
#[tokio::test(flavor = "multi_thread")]
async fn a_redis_user_that_cannot_fence_is_refused_at_start() {
    let redis = RedisServer::start();
    seed(&redis, &Spec::default());
    // An actuator started as a user allowed everything but `denied`: its exit code and stderr.
    let start_as = |user: &'static str, denied: &'static str| {
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", user, "on", ">hunter2", "~*", "&*", "+@all", denied])
            .query(&mut redis.con(0))
            .unwrap();
        let url = format!("redis://{user}:hunter2@127.0.0.1:{}", redis.port);
        async move { refused_start_journaled(&url).await }
    };
    let (code, stderr) = start_as("tuner", "-client|kill").await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("CLIENT KILL ID") && stderr.contains("+client|kill"), "{stderr}");
    assert!(stderr.contains("tuner:***@") && !stderr.contains("hunter2"), "{stderr}");

    // Nor one that may not ECHO, which every batch of commands asks first: it used to start,
    // and then no poll or write could run.
    let (code, stderr) = start_as("echoless", "-echo").await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("ECHO: ") && stderr.contains("+echo"), "{stderr}");

    // Nor one that may not MULTI: Redis then runs each command of a write on its own.
    let (code, stderr) = start_as("multiless", "-multi").await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("+@transaction") && stderr.contains("NOPERM"), "{stderr}");
}

/// `--redis-password-file`: the password stays off the command line (`ps` showed it to every
/// user), for the actuator and `sonic restore` alike; a wrong one, and one given twice (in the
/// URL too), are refused (exit 2) without the password in the message.
#[tokio::test(flavor = "multi_thread")]
async fn a_redis_password_can_come_from_a_file() {
    let redis = RedisServer::start();
    seed(&redis, &Spec::default());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "tuner", "on", ">hunter2 x", "~*", "&*", "+@all"])
        .query(&mut redis.con(0))
        .unwrap();
    let dir = tempfile::Builder::new().prefix("ecn-redis-password-").tempdir().unwrap();
    let secret = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    // A space inside the password, and the file's line end, which is not part of it.
    let (good, bad) = (secret("good", "hunter2 x\n"), secret("bad", "hunter3\n"));
    let url = format!("redis://tuner@127.0.0.1:{}", redis.port);
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--redis-password-file", &good]).await;
    let mut c = act.client().await;
    assert!(!c.get_capabilities(pb::GetCapabilitiesRequest {}).await.unwrap().into_inner().queues.is_empty());
    drop(act);
    let (code, stdout, stderr) = run_cli(&["sonic", "restore", "--redis", &url, "--redis-password-file", &good]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("restored") || stdout.contains("nothing to restore"), "{stdout}");

    let journal = dir.path().join("journal.jsonl").display().to_string();
    let start = |url: String, file: String| {
        let journal = journal.clone();
        async move {
            let args = ["actuator", "--backend", "sonic", "--redis", &url, "--listen", "127.0.0.1:0"];
            let (code, _, stderr) =
                run_cli(&[&args[..], &["--journal", &journal, "--redis-password-file", &file]].concat()).await;
            (code, stderr)
        }
    };
    let (code, stderr) = start(url.clone(), bad).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("authentication refused") && !stderr.contains("hunter"), "{stderr}");
    let twice = format!("redis://tuner:hunter2@127.0.0.1:{}", redis.port);
    let (code, stderr) = start(twice, good).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("has a password already") && !stderr.contains("hunter2"), "{stderr}");
}

/// Without a journal, an actuator restarted after a crash would take an unconfirmed change it
/// finds on the switch for confirmed settings: the SONiC backend refuses to start without one,
/// and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_sonic_actuator_needs_a_journal() {
    let redis = RedisServer::start();
    seed(&redis, &Spec::default());
    let before = tables(&mut redis.con(CONFIG_DB));
    let (code, stderr) = refused_start(&redis.url(), None).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--journal: required with the sonic backend"), "{stderr}");
    assert_eq!(tables(&mut redis.con(CONFIG_DB)), before);
}

/// SONiC refreshes queue counters every 10 s unless `counterpoll` says otherwise; polled every
/// 100 ms, 99 samples in 100 would show no traffic, and the next one, past 1.25% of line rate,
/// more than the line carries in a poll (dropped as a reset). The actuator warns at start-up,
/// naming the key, that share and the `counterpoll` command, and is quiet once the switch polls
/// as fast.
#[tokio::test(flavor = "multi_thread")]
async fn counters_sonic_refreshes_less_often_than_polled_are_warned_of() {
    let spec = Spec::default();
    let warning = "less often than --poll-interval";
    let unpolled = "SONiC does not poll";
    for fast in [false, true] {
        let redis = RedisServer::start();
        seed(&redis, &spec);
        if fast {
            for key in ["FLEX_COUNTER_TABLE|QUEUE", "FLEX_COUNTER_TABLE|PORT", "FLEX_COUNTER_TABLE|WRED_ECN_QUEUE"] {
                let _: () = redis::cmd("HSET")
                    .arg(key)
                    .arg("POLL_INTERVAL")
                    .arg("100")
                    .query(&mut redis.con(CONFIG_DB))
                    .unwrap();
            }
        }
        let url = redis.url();
        let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms"]).await;
        let log = act.log_text();
        if fast {
            assert!(!log.contains(warning) && !log.contains(unpolled), "{log}");
        } else {
            assert!(log.contains("every 10000 ms (FLEX_COUNTER_TABLE|QUEUE, no POLL_INTERVAL"), "{log}");
            assert!(log.contains("counterpoll queue interval 100"), "{log}");
            // 10 s of traffic in one 100 ms poll: past 1.25% of line rate, a "reset".
            assert!(log.contains("carries more than 1% of line rate that lump"), "{log}");
            assert!(log.contains("every 1000 ms (FLEX_COUNTER_TABLE|PORT"), "{log}");
            // Marks lumps are no reset: their samples say the marks are not counted.
            assert!(log.contains("refreshes ECN mark counters every 10000 ms"), "{log}");
            assert!(log.contains("samples say ecn_marks_counted false"), "{log}");
        }
    }
    // ECN marks are a polling group of their own, off unless enabled: without it every mark
    // count reads 0, which used to pass unremarked.
    let redis = RedisServer::start();
    seed(&redis, &spec);
    let _: () = redis::cmd("DEL").arg("FLEX_COUNTER_TABLE|WRED_ECN_QUEUE").query(&mut redis.con(CONFIG_DB)).unwrap();
    let _: () = redis::cmd("HSET")
        .arg("FLEX_COUNTER_TABLE|QUEUE")
        .arg("FLEX_COUNTER_STATUS")
        .arg("disable")
        .query(&mut redis.con(CONFIG_DB))
        .unwrap();
    // A port whose PFC priorities 3 and 4 go to queues 4 and 3: queue 3's PAUSE counters are
    // priority 4's.
    set_config_field(&redis, "PORT_QOS_MAP|Ethernet0", "pfc_to_queue_map", "SWAPPED");
    set_config_field(&redis, "MAP_PFC_PRIORITY_TO_QUEUE|SWAPPED", "3", "4");
    set_config_field(&redis, "MAP_PFC_PRIORITY_TO_QUEUE|SWAPPED", "4", "3");
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms"]).await;
    let log = act.log_text();
    assert!(log.contains("does not poll ECN marks") && log.contains("counterpoll wredqueue enable"), "{log}");
    assert!(log.contains("does not poll queue counters") && log.contains("FLEX_COUNTER_STATUS disable"), "{log}");
    assert!(log.contains("PFC priorities [4] map to this queue"), "{log}");
}

/// Left out, `--poll-interval` is as often as SONiC refreshes queue and port counters: out of the
/// box every 10 s (queues; ports every second), so that no sample is an empty one or a lump;
/// after `counterpoll queue interval 200` and `counterpoll port interval 300`, every 400 ms (a
/// whole number of queue refreshes, which the polls can keep clear of); never below 100 ms. A refresh no shorter than `--frozen-after` is refused, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn the_poll_interval_left_out_follows_sonics_counter_refresh() {
    let spec = Spec::default();
    for (queue, port, want_ms, whence) in [
        (None, None, 10_000, "FLEX_COUNTER_TABLE|QUEUE, no POLL_INTERVAL: SONiC's default"),
        (Some("200"), Some("300"), 400, "FLEX_COUNTER_TABLE|PORT, POLL_INTERVAL, rounded up to 2 queue refreshes"),
        (Some("30"), Some("20"), 120, "FLEX_COUNTER_TABLE|QUEUE, POLL_INTERVAL, rounded up to 4 queue refreshes"),
        (Some("50"), Some("20"), 100, "FLEX_COUNTER_TABLE|QUEUE, POLL_INTERVAL"),
    ] {
        let redis = RedisServer::start();
        seed(&redis, &spec);
        for (group, ms) in [("QUEUE", queue), ("PORT", port)] {
            if let Some(ms) = ms {
                set_config_field(&redis, &format!("FLEX_COUNTER_TABLE|{group}"), "POLL_INTERVAL", ms);
            }
        }
        let url = redis.url();
        let act = Actuator::start(&["--backend", "sonic", "--redis", &url]).await;
        let mut c = act.client().await;
        let caps = c.get_capabilities(pb::GetCapabilitiesRequest {}).await.unwrap().into_inner();
        assert_eq!(caps.min_telemetry_interval_ns, want_ms * 1_000_000, "queue {queue:?}, port {port:?}");
        let log = act.log_text();
        assert!(log.contains("as often as SONiC refreshes the counters it reads"), "{log}");
        assert!(log.contains(whence), "{whence}: {log}");
        // Queue and port counters are polled no faster than SONiC refreshes them.
        assert!(!log.contains("FLEX_COUNTER_TABLE|QUEUE, no POLL_INTERVAL: SONiC's default), less often"), "{log}");
    }
    // A value that is no whole number, or a key that is no hash, is SONiC's default, said so
    // (it stopped the actuator, or passed as read).
    for odd in ["10000ms", "2500.5", "-5", "", "not a hash"] {
        let redis = RedisServer::start();
        seed(&redis, &spec);
        let key = "FLEX_COUNTER_TABLE|QUEUE";
        if odd == "not a hash" {
            let _: () = redis::cmd("DEL").arg(key).query(&mut redis.con(CONFIG_DB)).unwrap();
            let _: () = redis::cmd("SET").arg(key).arg("5000").query(&mut redis.con(CONFIG_DB)).unwrap();
        } else {
            set_config_field(&redis, key, "POLL_INTERVAL", odd);
        }
        let url = redis.url();
        let act = Actuator::start(&["--backend", "sonic", "--redis", &url]).await;
        let caps = act.client().await.get_capabilities(pb::GetCapabilitiesRequest {}).await.unwrap().into_inner();
        assert_eq!(caps.min_telemetry_interval_ns, 10_000_000_000, "{odd:?}");
        let log = act.log_text();
        let said = if odd == "not a hash" { "is not a hash" } else { "is not a whole number of milliseconds" };
        assert!(log.contains(said) && log.contains("SONiC's default, 10000 ms"), "{odd:?}: {log}");
        // Once: start-up reads it twice (the default, then the check of every group's refresh).
        assert_eq!(log.lines().filter(|l| l.contains(said)).count(), 1, "{odd:?}: {log}");
    }
    let redis = RedisServer::start();
    seed(&redis, &spec);
    set_config_field(&redis, "FLEX_COUNTER_TABLE|QUEUE", "POLL_INTERVAL", "60000");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let url = redis.url();
    let args = ["actuator", "--backend", "sonic", "--redis", &url, "--listen", "127.0.0.1:0", "--journal"];
    let (code, _, stderr) = run_cli(&[&args[..], &[journal.to_str().unwrap()]].concat()).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("SONiC refreshes the counters every 60s (FLEX_COUNTER_TABLE|QUEUE, POLL_INTERVAL)")
            && stderr.contains("not within --frozen-after (60s)")
            && stderr.contains("counterpoll queue interval"),
        "{stderr}"
    );
}

/// A seeded switch whose CONFIG_DB says SONiC refreshes queue and port counters every `ms`.
fn refreshing_every(ms: &str) -> (RedisServer, Spec) {
    let redis = RedisServer::start();
    let spec = Spec::default();
    seed(&redis, &spec);
    for group in ["QUEUE", "PORT"] {
        set_config_field(&redis, &format!("FLEX_COUNTER_TABLE|{group}"), "POLL_INTERVAL", ms);
    }
    (redis, spec)
}

/// At SONiC's own refresh interval, the polls keep clear of its refreshes as the two drift: a
/// refresh that came to a poll made one interval hold none and the next two (an idle queue, then
/// one at twice its rate). The stand-in refreshes every 530 ms under `POLL_INTERVAL` 500, a drift
/// far faster than SONiC's (about half a millisecond a period) to see crossings within seconds;
/// at that rate an unguarded poll every 500 ms finds no refresh in its interval once in 17. Every
/// interval sampled holds one refresh's traffic; the polls move, and say so, a few times. So too
/// beside a PFC watchdog that refreshes the queues' packet counters every 100 ms (a guard that
/// watched packets moved at every poll).
#[tokio::test(flavor = "multi_thread")]
async fn polls_at_sonics_refresh_interval_keep_clear_of_its_refreshes() {
    for watchdog in [None, Some(Duration::from_millis(100))] {
        let (redis, spec) = refreshing_every("500");
        let tick = Duration::from_millis(530);
        let _ticker = Ticker::start_with_pfc_watchdog(&redis, Counters::new(&spec, 64), tick, watchdog);
        let url = redis.url();
        let act = Actuator::start(&["--backend", "sonic", "--redis", &url]).await;
        let mut c = act.client().await;
        let mut stream = telemetry(&mut c).await;
        let mut seen = Vec::new();
        take(&mut stream, 36, &mut seen).await;
        // One refresh carries the 40 Gb/s of a tick of 530 ms and a little more (the stand-in's
        // own write, scheduling); none carries nothing, two twice as much.
        let one = Traffic::default().bps / 8 * tick.as_millis() as u64 / 1_000;
        // The first two intervals come before the guard has seen traffic to watch.
        for b in &seen[2..] {
            for s in &b.samples {
                let refreshes = s.tx_bytes as f64 / one as f64;
                assert!(
                    (0.6..1.4).contains(&refreshes),
                    "{watchdog:?}, {:?}: {refreshes} refreshes in {} ns",
                    s.id,
                    s.span_ns
                );
            }
        }
        // A move needs the refresh to drift from half a period off to within a quarter of a
        // poll: 30 ms a period, 6 periods or more, and a baseline poll after each.
        let log = act.log_text();
        let moves = log.lines().filter(|l| l.contains("polls move to half a refresh clear of it")).count();
        assert!((1..=8).contains(&moves), "{watchdog:?}: {moves} moves: {log}");
    }
}

/// A `--poll-interval` that is no whole number of SONiC's queue refreshes aliases against them
/// (intervals of one refresh and of two, now and then), and no timetable keeps it clear of
/// them: it is warned of at start-up; a multiple is not.
#[tokio::test(flavor = "multi_thread")]
async fn a_poll_interval_that_is_no_multiple_of_the_refresh_is_warned_of() {
    let (redis, _) = refreshing_every("1000");
    let url = redis.url();
    for (given, warned) in [("1500ms", true), ("1010ms", true), ("2s", false), ("1s", false)] {
        let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", given]).await;
        let log = act.log_text();
        let said = log.contains("is not a whole number of SONiC's queue counter refreshes, every 1000 ms");
        assert_eq!(said, warned, "{given}: {log}");
    }
}

/// A look of the refresh guard that timed out left its replies on their way, and the next poll
/// on the same connection read them as its counters: the poller panicked, and telemetry stopped
/// for good while the actuator ran on. The look drops its connection, as a failed poll does.
#[tokio::test(flavor = "multi_thread")]
async fn a_refresh_look_that_times_out_drops_its_connection() {
    let (redis, spec) = refreshing_every("1000");
    let _ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(1_000));
    let proxy = Proxy::start(redis.port);
    let url = proxy.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--redis-timeout", "300ms"]).await;
    let mut c = act.client().await;
    let mut stream = telemetry(&mut c).await;
    let mut seen = Vec::new();
    take(&mut stream, 3, &mut seen).await;
    // The next look's reads (the poller's only HGETs), a quarter second after a poll, are held
    // past --redis-timeout, then sent before the next poll.
    proxy.stall_at(b"*3\r\n$4\r\nHGET\r\n");
    eventually("a look held on its way", WAIT, || async { proxy.holding().then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    proxy.release();
    take(&mut stream, 8, &mut seen).await;
    let log = act.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// A Redis where every look of the refresh guard fails (here an ACL that refuses `HGET`, the
/// looks' command, and lets the polls' `HMGET` through) left the polls unguarded without a word
/// (each failure was logged at debug): a few failures in a row are warned of, once, and the
/// first look that succeeds again is said too. Telemetry flows throughout.
#[tokio::test(flavor = "multi_thread")]
async fn looks_of_the_refresh_guard_that_keep_failing_are_warned_of() {
    let (redis, spec) = refreshing_every("300");
    let _ticker = Ticker::start(&redis, Counters::new(&spec, 64), Duration::from_millis(300));
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url]).await;
    let mut c = act.client().await;
    let mut stream = telemetry(&mut c).await;
    let mut seen = Vec::new();
    take(&mut stream, 3, &mut seen).await;
    let acl = |rule: &str| {
        let _: () = redis::cmd("ACL").arg("SETUSER").arg("default").arg(rule).query(&mut redis.con(0)).unwrap();
    };
    let warning = "the refresh guard's last 3 looks failed";
    acl("-hget");
    take(&mut stream, 8, &mut seen).await;
    let log = act.log_text();
    assert_eq!(log.matches(warning).count(), 1, "{log}");
    assert!(log.contains("NOPERM") && !log.contains("looks succeed again"), "{log}");
    acl("+hget");
    eventually("a look succeeds again", WAIT, || {
        let said = act.log_text().contains("looks succeed again");
        async move { said.then_some(()) }
    })
    .await;
    take(&mut stream, 2, &mut seen).await;
    assert_eq!(act.log_text().matches(warning).count(), 1);
}

/// A `pfc_to_queue_map` that is not a hash fell back to SONiC's default map without a word, so
/// a queue whose pauses come on another priority read none; it is warned of, naming the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_pfc_map_that_cannot_be_read_is_warned_of() {
    let redis = RedisServer::start();
    let spec = Spec::default();
    seed(&redis, &spec);
    set_config_field(&redis, "PORT_QOS_MAP|Ethernet0", "pfc_to_queue_map", "SWAPPED");
    let _: () = redis::cmd("RPUSH")
        .arg("MAP_PFC_PRIORITY_TO_QUEUE|SWAPPED")
        .arg("3")
        .arg("4")
        .query(&mut redis.con(CONFIG_DB))
        .unwrap();
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms"]).await;
    let log = act.log_text();
    let warned = log.lines().filter(|l| l.contains("cannot read MAP_PFC_PRIORITY_TO_QUEUE|SWAPPED")).count();
    assert!(warned == 1 && log.contains("SONiC's default PFC map"), "{log}");
}

/// A port whose `pfc_to_queue_map` sends PFC priority 4 to queue 3 and 3 to 4: queue 3's
/// pauses are priority 4's PAUSE frames, and telemetry reads them for it (it used to read
/// priority 3's, another queue's pauses); a queue no priority maps to reads none.
#[tokio::test(flavor = "multi_thread")]
async fn pauses_are_read_from_the_priorities_the_port_maps_to_the_queue() {
    let redis = RedisServer::start();
    let spec = Spec::default();
    seed(&redis, &spec);
    set_config_field(&redis, "PORT_QOS_MAP|Ethernet0", "pfc_to_queue_map", "SWAPPED");
    set_config_field(&redis, "MAP_PFC_PRIORITY_TO_QUEUE|SWAPPED", "3", "4");
    set_config_field(&redis, "MAP_PFC_PRIORITY_TO_QUEUE|SWAPPED", "4", "3");
    set_config_field(&redis, "PORT_QOS_MAP|Ethernet4", "pfc_to_queue_map", "BOTH_TO_3");
    set_config_field(&redis, "MAP_PFC_PRIORITY_TO_QUEUE|BOTH_TO_3", "4", "3");
    let mut counters = Counters::new(&spec, 64);
    // Ethernet0 queue 3 is paused half the time, by priority 4's frames; every other queue is not.
    counters.pfc_priority.insert((0, 3), 4);
    counters.pfc_priority.insert((0, 4), 3);
    counters.traffic.insert((0, 3), Traffic { paused_fraction: 0.5, ..Traffic::default() });
    let ticker = Ticker::start(&redis, counters, Duration::from_millis(50));
    let url = redis.url();
    let act = Actuator::start(&["--backend", "sonic", "--redis", &url, "--poll-interval", "100ms"]).await;
    let mut c = act.client().await;
    let mut stream = telemetry(&mut c).await;
    let mut seen = Vec::new();
    take(&mut stream, 6, &mut seen).await;
    let of = |port: &str, queue: u32| {
        let mut paused_ns = 0;
        let mut frames = 0;
        for b in &seen[1..] {
            let s = b.samples.iter().find(|s| s.id.as_ref() == Some(&qid(port, queue))).expect("sampled");
            paused_ns += s.paused_ns;
            frames += s.pfc_pause_rx;
        }
        (paused_ns, frames)
    };
    let span: u64 = seen[1..].iter().zip(&seen).map(|(b, a)| b.ts_ns - a.ts_ns).sum();
    let (paused, frames) = of("Ethernet0", 3);
    let fraction = paused as f64 / span as f64;
    assert!((0.3..0.7).contains(&fraction) && frames > 0, "Ethernet0|3 paused {fraction} of the time, {frames} frames");
    assert_eq!(of("Ethernet0", 4), (0, 0));
    assert_eq!(of("Ethernet4", 3), (0, 0));
    assert_eq!(of("Ethernet4", 4), (0, 0));
    let log = act.log_text();
    assert!(log.contains("maps no PFC priority to this queue") && log.contains("Ethernet4|4"), "{log}");
    drop(ticker);
}
