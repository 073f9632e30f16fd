//! What a fabric is made of besides its flows: topology, buffer, PFC, initial ECN settings,
//! DCQCN parameters, timers and telemetry interval ([`FabricConfig`], defaults from
//! REFERENCE.md §2–3), and the buffer arithmetic checked before a run (PFC headroom).

use super::{DATA_HEADER_BYTES, PFC_FRAME_BYTES};
use crate::dcqcn::DcqcnParams;
use crate::ecn::{Baseline, EcnSetting};
use crate::topology::{NodeKind, Topology};
use crate::units::{BitsPerSec, Bytes, Nanos};

/// How every data queue's ECN setting starts.
#[derive(Debug, Clone, PartialEq)]
pub enum EcnPlan {
    /// The same setting on every data queue.
    Fixed(EcnSetting),
    /// A REFERENCE.md §5 row, scaled to each port's speed.
    Baseline(Baseline),
    /// One setting per link speed (the HPCC simulator's `KMIN_MAP`/`KMAX_MAP`/`PMAX_MAP`);
    /// a speed without an entry takes the nearest listed speed's setting.
    PerRate(Vec<(BitsPerSec, EcnSetting)>),
}

impl EcnPlan {
    /// The setting for a port of the given speed.
    pub fn setting_for(&self, rate: BitsPerSec) -> EcnSetting {
        match self {
            EcnPlan::Fixed(s) => *s,
            EcnPlan::Baseline(b) => b.setting(rate),
            EcnPlan::PerRate(map) => map
                .iter()
                .min_by_key(|(r, _)| r.0.abs_diff(rate.0))
                .map(|(_, s)| *s)
                .unwrap_or_else(|| Baseline::HpccAlibaba.setting(rate)),
        }
    }
}

/// The shortest telemetry sample interval, control interval and retransmission timeout
/// accepted. Every interval writes one telemetry row per queue and every timeout re-arms an
/// event, so far shorter values make a run's memory and time grow without bound rather than
/// model anything: 1 µs is already under the 10 µs reference RTT.
pub const MIN_INTERVAL: Nanos = Nanos(1_000);

/// The packet payloads a fabric may use, in bytes. RoCEv2 path MTUs run from 256 to 4096 and
/// jumbo Ethernet frames to 9000; below 256 a flow becomes so many packets that a run crawls
/// (a 1-byte payload makes a 1 MB flow a million packets).
pub const MTU_PAYLOAD_BYTES: std::ops::RangeInclusive<u32> = 256..=9000;

/// When a NIC has data but every flow is waiting for its pacing time, it arms a timer for the
/// earliest one. The HPCC simulator arms it only if no timer is pending, so a new or faster
/// flow can wait for a slower flow's timer (its `m_nextSend.IsExpired()` check); `Exact` is
/// what an ideal NIC would do. The two can differ only when a flow that started while a slow
/// flow's timer was pending is rate-cut before that timer fires; with HPCC's DCQCN rate floor
/// of 1 Gb/s (REFERENCE.md §2) a pending timer is at most 8.3 µs away, about a new flow's
/// first CNP round trip. They differed in none of the runs measured across websearch-50,
/// hadoop-50, mixed and leafspine-64 (a counter of the idle checks where the modes disagree
/// read 0 of 2–10 M; the runs compared under both were event for event the same), nor in a
/// 4-to-1 incast with a 100 Mb/s floor. With a 10 Mb/s floor they do: a flow that starts beside
/// one held at that floor waits up to 829 µs for its timer, which doubles its completion time
/// (the physics test `hpcc_wakeup_lets_a_slow_flows_timer_hold_back_a_paced_newcomer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NicWakeup {
    /// As the HPCC simulator: keep a pending timer even if an earlier flow becomes due.
    #[default]
    Hpcc,
    /// Always wake at the earliest pacing time.
    Exact,
}

/// Which switch egress queue carries ACKs/NACKs (NICs always send them before data).
///
/// REFERENCE.md §2 says the HPCC simulator sends ACKs on a high-priority queue
/// (`ACK_HIGH_PRIO 1`). Its `third.cc` applies that flag to the hosts only
/// (`RdmaEgressQueue::ack_q_idx`) and never sets the switches' `AckHighPrio`, so inside the
/// fabric an ACK rides in its flow's data queue, counts against the buffer and waits behind
/// data. That is also what RoCE RC ACKs do on real fabrics (same traffic class as the QP), so it
/// is the default; the `ls16` reference run only matches with it (see the fidelity test).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckQueue {
    /// The flow's data priority.
    #[default]
    Data,
    /// Strict-priority queue 0, with PFC frames.
    Control,
}

/// Everything the simulator needs besides the flows.
#[derive(Debug, Clone)]
pub struct FabricConfig {
    /// Nodes and links.
    pub topology: Topology,
    /// Shared buffer per switch.
    pub buffer: Bytes,
    /// Send PFC PAUSE frames (lossless). Without PFC the same admission drops packets.
    pub pfc: bool,
    /// Initial ECN settings.
    pub ecn: EcnPlan,
    /// DCQCN at the NICs.
    pub dcqcn: DcqcnParams,
    /// Data payload per packet.
    pub mtu_payload: u32,
    /// Go-back-N retransmission timeout; `None` disables it. A lossless fabric drops nothing,
    /// but scenario files still set one (10 ms with PFC, 1 ms without), as NICs keep theirs.
    pub rto: Option<Nanos>,
    /// How a NIC whose flows are all pacing-limited wakes up (see [`NicWakeup`]).
    pub nic_wakeup: NicWakeup,
    /// Which switch queue ACKs and NACKs travel in (see [`AckQueue`]).
    pub ack_queue: AckQueue,
    /// Telemetry interval.
    pub sample_interval: Nanos,
    /// Seed of the marking random stream.
    pub seed: u64,
    /// Start of the arrival window; telemetry starts here.
    pub window_start: Nanos,
    /// End of the arrival window (utilization is measured over `[window_start, window_end)`,
    /// queue depth over the telemetry intervals that start before it).
    pub window_end: Nanos,
    /// Hard stop, even if flows remain.
    pub stop_at: Nanos,
    /// Private buffer per ingress (port, priority) (REFERENCE.md §3: 4 KB).
    pub reserve: Bytes,
    /// XON hysteresis (3 KB).
    pub resume_offset: Bytes,
    /// Dynamic-threshold shift for ports at NIC speed (3, i.e. α = 1/8).
    pub pfc_shift: u32,
}

/// The shared buffer per switch of REFERENCE.md §2 for NICs of `nic_rate`: 16·bw/50 MiB at
/// bw Gb/s (HPCC's `run.py`), 32 MiB at 100G. Scaling it keeps PFC's dynamic threshold in step
/// with the ECN thresholds, which scale with bw too: a fixed 32 MiB at 400G would put XOFF below
/// the hpcc-alibaba Kmax, so that PFC fires before ECN can act (§1).
pub fn reference_buffer(nic_rate: BitsPerSec) -> Bytes {
    const MIB: u128 = 1024 * 1024;
    Bytes((u128::from(nic_rate.0) * 16 * MIB / 50_000_000_000).min(u128::from(u64::MAX)) as u64)
}

impl FabricConfig {
    /// Defaults of REFERENCE.md §2–3 around a topology.
    pub fn new(topology: Topology) -> Self {
        let line = topology.nic_rate();
        FabricConfig {
            topology,
            buffer: reference_buffer(line),
            pfc: true,
            ecn: EcnPlan::Baseline(Baseline::HpccAlibaba),
            dcqcn: DcqcnParams::hpcc(line),
            mtu_payload: 1000,
            rto: None,
            nic_wakeup: NicWakeup::Hpcc,
            ack_queue: AckQueue::Data,
            sample_interval: Nanos::from_micros(100),
            seed: 1,
            window_start: Nanos(0),
            window_end: Nanos::from_millis(20),
            stop_at: Nanos::from_millis(50),
            reserve: Bytes(4096),
            resume_offset: Bytes(3072),
            pfc_shift: 3,
        }
    }
}

/// PFC headroom of one ingress port, in bytes: 3 × rate × delay (REFERENCE.md §3), or what
/// can arrive after XOFF if that is more. The packet whose arrival crossed the threshold may
/// itself sit in headroom; the PAUSE frame may wait for a packet leaving on the reverse link,
/// then crosses it; the sender finishes the packet it is sending, and everything on the wire
/// arrives: 2 × rate × delay + 3 packets + the PAUSE frame. The reference's rule covers that at
/// 40G and faster with 1 µs links (47 bytes short at 25G); at 10G it holds under four packets
/// and a lossless fabric dropped (tests/physics.rs, `a_slow_lossless_fabric_never_drops`).
pub fn headroom_bytes(rate: BitsPerSec, delay: Nanos, mtu_payload: u32) -> u64 {
    let in_flight = |k: u128| (k * rate.0 as u128 * delay.0 as u128 / 8 / 1_000_000_000).min(u64::MAX as u128) as u64;
    let packets = 3 * (mtu_payload as u64 + DATA_HEADER_BYTES) + PFC_FRAME_BYTES;
    in_flight(3).max(in_flight(2).saturating_add(packets))
}

/// Every switch's buffer must exceed its ports' headroom and reserve together, or PFC could
/// never admit a packet into the shared pool. Scenario loading calls this to name the field.
pub fn check_buffer(cfg: &FabricConfig) -> Result<(), String> {
    let topo = &cfg.topology;
    let mut need = vec![0u64; topo.nodes.len()];
    for l in &topo.links {
        for n in [l.a, l.b] {
            if topo.nodes[n as usize].kind == NodeKind::Switch {
                let port = headroom_bytes(l.rate, l.delay, cfg.mtu_payload).saturating_add(cfg.reserve.0);
                need[n as usize] = need[n as usize].saturating_add(port);
            }
        }
    }
    match need.iter().enumerate().max_by_key(|(_, b)| **b) {
        Some((n, &bytes)) if bytes >= cfg.buffer.0 => Err(format!(
            "buffer {} is smaller than the headroom and reserve of switch {} ({bytes} bytes)",
            cfg.buffer, topo.nodes[n].name
        )),
        _ => Ok(()),
    }
}
