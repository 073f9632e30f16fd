//! The packet-level fabric simulator.
//!
//! Components follow htsim's small, explicit pieces, but as data: ports, switch buffers, NICs,
//! flows and packets are rows in `Vec`s addressed by `u32` indices, and the only dispatch is a
//! `match` on a compact [`event::Event`]. Every link end is a port; link `i` owns ports `2i`
//! (at `a`) and `2i + 1` (at `b`), so a port's peer is `port ^ 1`.
//!
//! - [`buffer`]: shared buffer, reserve, headroom, dynamic PFC threshold (REFERENCE.md §3).
//! - `switch`: forwarding, ECMP, admission, egress scheduling, ECN marking at dequeue, PFC frames.
//! - `host`: NICs, per-flow DCQCN senders and receivers, ACK/CNP generation (REFERENCE.md §2).
//! - [`stats`]: per-queue counters that become telemetry samples.
//! - `credit`: the data queues each flow crosses, and the slowdown that accrues behind each queue.

pub mod buffer;
pub mod event;
pub mod packet;
pub mod stats;

mod credit;
mod host;
mod switch;

use crate::dcqcn::{DcqcnParams, DcqcnSender};
use crate::ecn::{Baseline, EcnError, EcnSetting};
use crate::rng::Rng;
use crate::topology::{NodeId, NodeKind, Topology};
use crate::units::{BitsPerSec, Bytes, Nanos};
use crate::workload::FlowSpec;
use buffer::{IngressState, SharedBuffer};
use ecn_datasets::{FlowRecord, QueueSample, TelemetrySample};
use event::{Event, EventQueue};
use packet::{Packet, PacketPool};
use stats::QueueStats;
use std::collections::VecDeque;
use std::sync::OnceLock;

/// Bytes on the wire around a data payload: 6 B sequence/timestamp, 8 B UDP, 20 B IPv4,
/// 2 B PPP (shared/reference/README.md, "Packets").
pub const DATA_HEADER_BYTES: u64 = 36;
/// An ACK or NACK on the wire.
pub const ACK_BYTES: u64 = 48;
/// A stand-alone CNP on the wire (paper variant).
pub const CNP_BYTES: u64 = 64;
/// A PFC frame on the wire.
pub const PFC_FRAME_BYTES: u64 = 64;
/// Headers counted per packet by the ideal-FCT formula (REFERENCE.md §4).
pub const IDEAL_HEADER_BYTES: u64 = 48;

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
    /// Go-back-N retransmission timeout; `None` disables it (lossless fabrics need none).
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

/// How a mis-programmed ECN profile marks, for fault injection
/// ([`Simulator::set_marking_fault`]): what a write whose thresholds landed in the wrong unit
/// does to a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkingFault {
    /// CE-mark every data packet, as thresholds that landed at zero do: DCQCN starves the
    /// senders.
    MarkEvery,
    /// Mark nothing, as thresholds that landed above the buffer do: the senders never slow
    /// down and the queue grows until PFC stops them.
    MarkNone,
}

/// Why a simulator could not be built or changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A flow names a node that is not a host, or itself.
    #[error("flow {index}: {why}")]
    BadFlow {
        /// Index in the flow list.
        index: usize,
        /// What is wrong.
        why: String,
    },
    /// A queue index out of range.
    #[error("unknown queue {0}")]
    UnknownQueue(usize),
    /// An invalid ECN setting.
    #[error("{0}")]
    Ecn(#[from] EcnError),
    /// Any other invalid configuration.
    #[error("{0}")]
    Config(String),
}

/// A data egress queue of a switch port: what telemetry reports and what the tuner sets.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    /// Switch name.
    pub switch: String,
    /// Port name on the switch (`eth1`, `eth2`, ... in link order).
    pub port: String,
    /// Priority.
    pub queue: u8,
    /// Line rate of the port.
    pub link: BitsPerSec,
    /// Name of the node at the other end of the link.
    pub peer: String,
    /// True when the peer is a host (a downlink).
    pub to_host: bool,
    pub(crate) port_id: u32,
}

/// One end of a link: a transmitter with its queues.
#[derive(Debug)]
pub(crate) struct Port {
    pub node: NodeId,
    pub rate: BitsPerSec,
    pub delay: u64,
    /// The transmitter is busy until this time.
    pub busy_until: u64,
    /// Earliest pending `PortReady` event, `u64::MAX` if none.
    pub ready_at: u64,
    /// Egress queues by priority (switch ports; hosts use queue 0 for ACKs). Change them
    /// through [`Port::enqueue`] and [`Port::dequeue`], which keep `backlog` in step.
    pub queues: [VecDeque<u32>; 8],
    /// Bit p set: `queues[p]` is non-empty.
    pub backlog: u8,
    /// Bytes waiting per priority (the depth ECN marking looks at).
    pub queued_bytes: [u64; 8],
    /// Priorities paused by the peer's PFC.
    pub paused: u8,
    /// Round-robin position among data priorities.
    pub rr_last: u8,
    /// ECN profile per priority.
    pub ecn: [EcnSetting; 8],
    /// Bit p set: priority p CE-marks every data packet whatever its profile says (an
    /// injected fault, [`Simulator::set_marking_fault`]).
    pub mark_all: u8,
    /// Bit p set: priority p marks no packet whatever its profile says (an injected fault).
    pub mark_none: u8,
    /// Bytes sent before the end of the arrival window.
    pub window_tx_bytes: u64,
    /// When each priority's current pause began (`u64::MAX`: not paused), for the
    /// fabric-wide paused time.
    pub pause_began: [u64; 8],
}

impl Port {
    /// Append a packet to priority `prio`.
    #[inline]
    pub fn enqueue(&mut self, prio: usize, pkt: u32) {
        self.queues[prio].push_back(pkt);
        self.backlog |= 1 << prio;
    }

    /// Take the head of priority `prio`.
    #[inline]
    pub fn dequeue(&mut self, prio: usize) -> Option<u32> {
        self.dequeue_at(prio, 0)
    }

    /// Take the packet at position `index` of priority `prio`.
    #[inline]
    pub fn dequeue_at(&mut self, prio: usize, index: usize) -> Option<u32> {
        let pkt = if index == 0 { self.queues[prio].pop_front() } else { self.queues[prio].remove(index) };
        if self.queues[prio].is_empty() {
            self.backlog &= !(1 << prio);
        }
        pkt
    }

    /// The next queue to serve: 0 if it has packets (strict priority), else the next
    /// non-empty, non-paused data priority after the last one served (round-robin).
    #[inline]
    pub fn next_queue(&self) -> Option<usize> {
        if self.backlog & 1 != 0 {
            return Some(0);
        }
        let eligible = self.backlog & !self.paused & 0xFE;
        if eligible == 0 {
            return None;
        }
        let from = (self.rr_last as u32 + 1) % 8;
        Some(((from + eligible.rotate_right(from).trailing_zeros()) % 8) as usize)
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

/// Sender and receiver state of one flow (queue pair).
#[derive(Debug)]
pub(crate) struct Flow {
    pub spec: FlowSpec,
    pub sport: u16,
    pub ideal_ns: u64,
    /// The base RTT part of `ideal_ns`.
    pub base_rtt_ns: u64,
    /// ECMP keys of the data and ACK directions.
    pub key_fwd: u64,
    pub key_rev: u64,
    // Sender.
    pub snd_nxt: u64,
    pub snd_una: u64,
    pub next_avail: u64,
    pub cc: DcqcnSender,
    pub finished_at: Option<u64>,
    /// When the last byte first finished leaving the NIC.
    pub sent_at: Option<u64>,
    pub una_at_last_rto: u64,
    // Receiver.
    pub rcv_expected: u64,
    pub last_nack_at: u64,
    pub last_nack_seq: u64,
    pub last_cnp_at: Option<u64>,
    /// When the receiver first held every byte in order.
    pub delivered_at: Option<u64>,
}

/// A host's NIC: its port, active flows and ACK queue.
#[derive(Debug, Default)]
pub(crate) struct Nic {
    pub port: u32,
    pub active: Vec<u32>,
    pub rr: usize,
    /// Pending pacing wake-up (`u64::MAX`: none).
    pub pacing_wake: u64,
}

/// The simulator. Build it with [`Simulator::new`], drive it with [`Simulator::run_until`] or
/// [`Simulator::run`], read [`Simulator::take_telemetry`] and [`Simulator::flow_records`].
pub struct Simulator {
    cfg: FabricConfig,
    now: u64,
    events: EventQueue,
    events_processed: u64,
    pool: PacketPool,
    ports: Vec<Port>,
    ingress: Vec<IngressState>,
    queue_stats: Vec<QueueStats>,
    node_kind: Vec<NodeKind>,
    /// Per node: its shared buffer (switches) — index into `buffers`.
    node_buffer: Vec<u32>,
    buffers: Vec<SharedBuffer>,
    /// Per node: index into `nics` (hosts).
    node_nic: Vec<u32>,
    nics: Vec<Nic>,
    /// Routes: for switch node `s` and destination host `h`, `routes[route_index[s][h]]` ..
    route_start: Vec<u32>,
    route_len: Vec<u16>,
    routes: Vec<u32>,
    n_nodes: usize,
    flows: Vec<Flow>,
    next_flow: usize,
    flows_done: usize,
    mark_rng: Rng,
    data_queues: Vec<QueueInfo>,
    telemetry: Vec<TelemetrySample>,
    interval_start: u64,
    depth_avg_samples: Vec<f64>,
    depth_max_samples: Vec<f64>,
    pause_frames: u64,
    paused_ns_total: u64,
    drops: u64,
    ecn_marks: u64,
    cnps: u64,
    record_telemetry: bool,
    /// The data queues each flow crosses, built on the first `flow_wait` call: only training
    /// with the flow-wait credit needs them.
    flow_paths: OnceLock<credit::FlowPaths>,
}

impl Simulator {
    /// Build a simulator for `cfg` that will start `flows` (any order).
    pub fn new(cfg: FabricConfig, mut flows: Vec<FlowSpec>) -> Result<Self, SimError> {
        cfg.dcqcn.validate(cfg.topology.nic_rate()).map_err(SimError::Config)?;
        if !MTU_PAYLOAD_BYTES.contains(&cfg.mtu_payload) {
            return Err(SimError::Config(format!(
                "mtu_payload {} must be within {MTU_PAYLOAD_BYTES:?}",
                cfg.mtu_payload
            )));
        }
        if cfg.sample_interval.0 == 0 {
            return Err(SimError::Config("sample_interval must be greater than 0".into()));
        }
        let topo = &cfg.topology;
        topo.validate().map_err(|e| SimError::Config(e.to_string()))?;
        let n_nodes = topo.nodes.len();
        let node_kind: Vec<NodeKind> = topo.nodes.iter().map(|n| n.kind).collect();

        // Stable sort: flows starting together keep their file order, as HPCC schedules them.
        flows.sort_by_key(|f| f.start);
        let mut data_prios = 1u8 << 3;
        for (index, f) in flows.iter().enumerate() {
            let bad = |why: String| SimError::BadFlow { index, why };
            for n in [f.src, f.dst] {
                if n as usize >= n_nodes || node_kind[n as usize] != NodeKind::Host {
                    return Err(bad(format!("node {n} is not a host")));
                }
            }
            if f.src == f.dst {
                return Err(bad("src equals dst".into()));
            }
            if f.priority == 0 || f.priority > 7 {
                return Err(bad(format!("priority {} must be 1-7", f.priority)));
            }
            if f.size_bytes == 0 || f.size_bytes > u32::MAX as u64 {
                return Err(bad(format!("size {} must be within 1..=4294967295", f.size_bytes)));
            }
            data_prios |= 1 << f.priority;
        }

        // Ports: two per link, in link order.
        let mut ports = Vec::with_capacity(topo.links.len() * 2);
        let mut node_ports: Vec<Vec<u32>> = vec![Vec::new(); n_nodes];
        for l in &topo.links {
            for node in [l.a, l.b] {
                node_ports[node as usize].push(ports.len() as u32);
                let ecn = cfg.ecn.setting_for(l.rate);
                ecn.validate()?;
                ports.push(Port {
                    node,
                    rate: l.rate,
                    delay: l.delay.0,
                    busy_until: 0,
                    ready_at: u64::MAX,
                    queues: Default::default(),
                    backlog: 0,
                    queued_bytes: [0; 8],
                    paused: 0,
                    rr_last: 0,
                    ecn: [ecn; 8],
                    mark_all: 0,
                    mark_none: 0,
                    window_tx_bytes: 0,
                    pause_began: [u64::MAX; 8],
                });
            }
        }

        // Switch buffers and per-ingress headroom/shift.
        check_buffer(&cfg).map_err(SimError::Config)?;
        let nic_rate = topo.nic_rate();
        let mut ingress = vec![IngressState::default(); ports.len()];
        let mut buffers = Vec::new();
        let mut node_buffer = vec![u32::MAX; n_nodes];
        for n in 0..n_nodes {
            if node_kind[n] != NodeKind::Switch {
                continue;
            }
            let mut total_headroom = 0;
            for &p in &node_ports[n] {
                let port = &ports[p as usize];
                let headroom = headroom_bytes(port.rate, Nanos(port.delay), cfg.mtu_payload);
                let mut shift = cfg.pfc_shift;
                let mut r = port.rate.0;
                while r > nic_rate.0 && shift > 0 {
                    shift -= 1;
                    r /= 2;
                }
                ingress[p as usize] = IngressState { headroom, shift, ..Default::default() };
                total_headroom += headroom;
            }
            let total_reserve = cfg.reserve.0 * node_ports[n].len() as u64;
            node_buffer[n] = buffers.len() as u32;
            buffers.push(SharedBuffer {
                size: cfg.buffer.0,
                reserve: cfg.reserve.0,
                resume_offset: cfg.resume_offset.0,
                total_headroom,
                total_reserve,
                shared_used: 0,
            });
        }

        // NICs.
        let mut nics = Vec::new();
        let mut node_nic = vec![u32::MAX; n_nodes];
        for n in 0..n_nodes {
            if node_kind[n] == NodeKind::Host {
                node_nic[n] = nics.len() as u32;
                nics.push(Nic { port: node_ports[n][0], active: Vec::new(), rr: 0, pacing_wake: u64::MAX });
            }
        }

        // Routes: BFS from every host; at each switch keep every port one hop closer.
        let hosts = topo.hosts();
        let mut route_start = vec![0u32; n_nodes * n_nodes];
        let mut route_len = vec![0u16; n_nodes * n_nodes];
        let mut routes = Vec::new();
        let mut dist_to: Vec<Vec<u32>> = vec![Vec::new(); n_nodes];
        for &h in &hosts {
            let dist = topo.distances_from(h);
            for s in 0..n_nodes {
                if node_kind[s] != NodeKind::Switch || dist[s] == u32::MAX {
                    continue;
                }
                let start = routes.len();
                for &p in &node_ports[s] {
                    let peer = ports[(p ^ 1) as usize].node as usize;
                    let closer = dist[peer] + 1 == dist[s];
                    if closer && (node_kind[peer] == NodeKind::Switch || peer == h as usize) {
                        routes.push(p);
                    }
                }
                route_start[s * n_nodes + h as usize] = start as u32;
                route_len[s * n_nodes + h as usize] = (routes.len() - start) as u16;
            }
            dist_to[h as usize] = dist;
        }

        // Flows: source ports per (src, dst) pair in flow order; ideal FCT per REFERENCE.md §4.
        let mut next_sport = std::collections::HashMap::new();
        let mut flow_table = Vec::with_capacity(flows.len());
        for spec in flows {
            let sport = next_sport.entry((spec.src, spec.dst)).or_insert(10000u16);
            let this_sport = *sport;
            *sport = sport.wrapping_add(1);
            let path = topo.path(spec.src, spec.dst, &dist_to[spec.dst as usize]);
            let mut base_rtt = 0u64;
            let mut bottleneck = u64::MAX;
            for &li in &path {
                let l = &topo.links[li];
                base_rtt += 2 * l.delay.0 + cfg.mtu_payload as u64 * 8 * 1_000_000_000 / l.rate.0;
                bottleneck = bottleneck.min(l.rate.0);
            }
            let pkts = spec.size_bytes.div_ceil(cfg.mtu_payload as u64);
            let total_bytes = spec.size_bytes + pkts * IDEAL_HEADER_BYTES;
            let ideal_ns = base_rtt + (total_bytes as u128 * 8_000_000_000 / bottleneck as u128) as u64;
            let line = ports[node_ports[spec.src as usize][0] as usize].rate;
            // The 5-tuple (sip, dip, sport | dport << 16) that ECMP hashes (REFERENCE.md §3).
            let tuple = |a: u32, b: u32, sp: u16, dp: u16| {
                (((a as u64) << 32) | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (sp as u64 | (dp as u64) << 16)
            };
            flow_table.push(Flow {
                spec,
                sport: this_sport,
                ideal_ns,
                base_rtt_ns: base_rtt,
                key_fwd: tuple(spec.src, spec.dst, this_sport, spec.dport),
                key_rev: tuple(spec.dst, spec.src, spec.dport, this_sport),
                snd_nxt: 0,
                snd_una: 0,
                next_avail: 0,
                cc: DcqcnSender::new(line),
                finished_at: None,
                sent_at: None,
                una_at_last_rto: 0,
                rcv_expected: 0,
                last_nack_at: 0,
                last_nack_seq: u64::MAX,
                last_cnp_at: None,
                delivered_at: None,
            });
        }

        // The data queues telemetry reports on: every switch port × data priority in use.
        let mut data_queues = Vec::new();
        for n in 0..n_nodes {
            if node_kind[n] != NodeKind::Switch {
                continue;
            }
            for (k, &p) in node_ports[n].iter().enumerate() {
                let peer = ports[(p ^ 1) as usize].node as usize;
                for prio in 1..8u8 {
                    if data_prios & (1 << prio) != 0 {
                        data_queues.push(QueueInfo {
                            switch: topo.nodes[n].name.clone(),
                            port: format!("eth{}", k + 1),
                            queue: prio,
                            link: ports[p as usize].rate,
                            peer: topo.nodes[peer].name.clone(),
                            to_host: node_kind[peer] == NodeKind::Host,
                            port_id: p,
                        });
                    }
                }
            }
        }

        let mut sim = Simulator {
            now: 0,
            events: EventQueue::default(),
            events_processed: 0,
            pool: PacketPool::default(),
            queue_stats: vec![QueueStats::default(); ports.len() * 8],
            ports,
            ingress,
            node_kind,
            node_buffer,
            buffers,
            node_nic,
            nics,
            route_start,
            route_len,
            routes,
            n_nodes,
            flows: flow_table,
            next_flow: 0,
            flows_done: 0,
            mark_rng: Rng::new(cfg.seed, 0xEC4),
            data_queues,
            telemetry: Vec::new(),
            interval_start: cfg.window_start.0,
            depth_avg_samples: Vec::new(),
            depth_max_samples: Vec::new(),
            pause_frames: 0,
            paused_ns_total: 0,
            drops: 0,
            ecn_marks: 0,
            cnps: 0,
            record_telemetry: true,
            flow_paths: OnceLock::new(),
            cfg,
        };
        if let Some(f) = sim.flows.first() {
            let t = f.spec.start.0;
            sim.events.push(t, Event::FlowStart(0));
        }
        sim.events.push(sim.cfg.window_start.0 + sim.cfg.sample_interval.0, Event::Sample);
        Ok(sim)
    }

    /// Keep (default) or discard telemetry rows. Discarding saves memory in long benchmark
    /// runs; the summary's queue statistics are kept either way.
    pub fn set_record_telemetry(&mut self, on: bool) {
        self.record_telemetry = on;
    }

    /// Current simulated time.
    pub fn now(&self) -> Nanos {
        Nanos(self.now)
    }

    /// The configuration the simulator was built with.
    pub fn config(&self) -> &FabricConfig {
        &self.cfg
    }

    /// Events processed so far.
    pub fn events_processed(&self) -> u64 {
        self.events_processed
    }

    /// Flows started, completed and in total.
    pub fn flow_counts(&self) -> (usize, usize, usize) {
        (self.next_flow, self.flows_done, self.flows.len())
    }

    /// True once every flow has completed.
    pub fn all_flows_done(&self) -> bool {
        self.flows_done == self.flows.len()
    }

    /// Process every event up to and including time `t`, then stand at `t` (or at the hard
    /// stop, whichever is earlier).
    pub fn run_until(&mut self, t: Nanos) {
        let t = t.0.min(self.cfg.stop_at.0);
        while let Some((time, ev)) = self.events.pop_until(t) {
            self.now = time;
            self.events_processed += 1;
            self.dispatch(ev);
        }
        self.now = self.now.max(t);
    }

    /// Run until every flow has completed or the hard stop, calling `progress` now and then
    /// with the current time. Returns true if every flow completed.
    pub fn run(&mut self, mut progress: impl FnMut(&Simulator)) -> bool {
        let stop = self.cfg.stop_at.0;
        let mut next_report = 0u64;
        while !self.all_flows_done() {
            let Some((time, ev)) = self.events.pop_until(stop) else { break };
            self.now = time;
            self.events_processed += 1;
            self.dispatch(ev);
            if self.events_processed >= next_report {
                next_report = self.events_processed + (1 << 20);
                progress(self);
            }
        }
        // Close the last, partial telemetry interval so that no counted byte is lost.
        if self.now > self.interval_start {
            self.close_interval();
        }
        progress(self);
        self.all_flows_done()
    }

    #[inline]
    fn dispatch(&mut self, ev: Event) {
        match ev {
            Event::Arrive { port, pkt } => {
                if self.node_kind[self.ports[port as usize].node as usize] == NodeKind::Switch {
                    self.switch_receive(port, pkt)
                } else {
                    self.host_receive(port, pkt)
                }
            }
            Event::PortReady(port) => {
                let p = &mut self.ports[port as usize];
                if p.ready_at <= self.now {
                    p.ready_at = u64::MAX;
                }
                self.try_send(port);
            }
            Event::NicWake(nic) => {
                let n = &mut self.nics[nic as usize];
                if n.pacing_wake <= self.now {
                    n.pacing_wake = u64::MAX;
                }
                let port = n.port;
                self.host_try_send(port);
            }
            Event::FlowStart(i) => self.start_flow(i),
            Event::DecreaseCheck(f) => self.decrease_check(f),
            Event::IncreaseTimer { flow, gen } => self.increase_timer(flow, gen),
            Event::Rto(f) => self.rto(f),
            Event::InjectedPfc { port, prio, pause } => self.receive_pfc(port, Packet::pfc(port, prio, pause)),
            Event::Sample => {
                self.close_interval();
                let next = self.now + self.cfg.sample_interval.0;
                if next <= self.cfg.stop_at.0 {
                    self.events.push(next, Event::Sample);
                }
            }
        }
    }

    /// Try to start a transmission on `port`.
    #[inline]
    fn try_send(&mut self, port: u32) {
        if self.node_kind[self.ports[port as usize].node as usize] == NodeKind::Switch {
            self.switch_try_send(port)
        } else {
            self.host_try_send(port)
        }
    }

    /// Ask for a `PortReady` at `t` unless one is already due by then.
    #[inline]
    fn schedule_ready(&mut self, port: u32, t: u64) {
        let p = &mut self.ports[port as usize];
        if t < p.ready_at {
            p.ready_at = t;
            self.events.push(t, Event::PortReady(port));
        }
    }

    /// Put `pkt` on the wire of `port` now: the peer receives it after serialization and
    /// propagation.
    #[inline]
    fn transmit(&mut self, port: u32, pkt: u32) {
        let size = self.pool.get(pkt).size as u64;
        let now = self.now;
        let p = &mut self.ports[port as usize];
        let tx = p.rate.tx_time(size).0;
        p.busy_until = now + tx;
        if now < self.cfg.window_end.0 && now >= self.cfg.window_start.0 {
            p.window_tx_bytes += size;
        }
        let arrive = now + tx + p.delay;
        self.events.push(arrive, Event::Arrive { port: port ^ 1, pkt });
    }

    /// Queue a control frame (ACK, CNP, PFC) on priority 0 of `port` and try to send it.
    fn send_control(&mut self, port: u32, pkt: Packet) {
        let id = self.pool.alloc(pkt);
        self.ports[port as usize].enqueue(0, id);
        self.try_send(port);
    }

    // ---- telemetry -------------------------------------------------------------------------

    fn close_interval(&mut self) {
        let (start, now) = (self.interval_start, self.now);
        for qi in 0..self.data_queues.len() {
            let q = &self.data_queues[qi];
            let (port, prio) = (q.port_id as usize, q.queue as usize);
            let p = &self.ports[port];
            let depth = p.queued_bytes[prio];
            let ecn = p.ecn[prio];
            let st = &mut self.queue_stats[port * 8 + prio];
            let (tx_bytes, tx_pkts, marked, pause_rx, pause_tx, drops, depth_max) =
                (st.tx_bytes, st.tx_pkts, st.marked, st.pause_rx, st.pause_tx, st.drops, st.depth_max);
            let (avg, paused_ns) = st.close_interval(start, now, depth);
            // The run's depth figures cover the arrival window, as utilization does: how long
            // the stragglers take to drain would otherwise dilute (or inflate) them.
            if start < self.cfg.window_end.0 {
                self.depth_avg_samples.push(avg);
                self.depth_max_samples.push(depth_max as f64);
            }
            if self.record_telemetry {
                self.telemetry.push(TelemetrySample {
                    switch: q.switch.clone(),
                    port: q.port.clone(),
                    queue: q.queue,
                    sample: QueueSample {
                        ts_ns: now,
                        link_bps: q.link.0,
                        queue_bytes: depth,
                        queue_bytes_avg: avg,
                        queue_bytes_max: depth_max,
                        tx_bytes,
                        tx_pkts,
                        ecn_marked_pkts: marked,
                        pfc_pause_rx: pause_rx,
                        pfc_pause_tx: pause_tx,
                        paused_ns,
                        drops,
                        kmin_bytes: ecn.kmin_bytes,
                        kmax_bytes: ecn.kmax_bytes,
                        pmax: ecn.pmax,
                    },
                });
            }
        }
        self.interval_start = now;
    }

    /// Telemetry rows produced since the last call, one per data queue per interval.
    pub fn take_telemetry(&mut self) -> Vec<TelemetrySample> {
        std::mem::take(&mut self.telemetry)
    }

    /// Hand back rows taken with [`Simulator::take_telemetry`], ahead of any produced since,
    /// so that a later reader sees the whole recording (the tuning environment reads every
    /// interval as it goes, and `sim --out` still writes them all).
    pub fn restore_telemetry(&mut self, mut rows: Vec<TelemetrySample>) {
        rows.append(&mut self.telemetry);
        self.telemetry = rows;
    }

    // ---- control ---------------------------------------------------------------------------

    /// The data egress queues of every switch, in a stable order; indices into this list
    /// identify queues in [`Simulator::set_ecn`] and [`Simulator::ecn`].
    pub fn queues(&self) -> &[QueueInfo] {
        &self.data_queues
    }

    /// ECN setting of queue `q`.
    pub fn ecn(&self, q: usize) -> Result<EcnSetting, SimError> {
        let info = self.data_queues.get(q).ok_or(SimError::UnknownQueue(q))?;
        Ok(self.ports[info.port_id as usize].ecn[info.queue as usize])
    }

    /// Change the ECN setting of queue `q`; it applies from the next dequeue.
    pub fn set_ecn(&mut self, q: usize, setting: EcnSetting) -> Result<(), SimError> {
        setting.validate()?;
        let info = self.data_queues.get(q).ok_or(SimError::UnknownQueue(q))?;
        self.ports[info.port_id as usize].ecn[info.queue as usize] = setting;
        Ok(())
    }

    /// The PFC XOFF level of the ingress port feeding queue `q`'s switch from the same link,
    /// at an empty shared buffer: reserve plus the dynamic threshold. An ECN Kmax above it lets
    /// PFC fire before ECN can act (REFERENCE.md §1).
    pub fn pfc_xoff_bytes(&self, q: usize) -> Result<u64, SimError> {
        let info = self.data_queues.get(q).ok_or(SimError::UnknownQueue(q))?;
        let port = info.port_id as usize;
        let node = self.ports[port].node as usize;
        let b = &self.buffers[self.node_buffer[node] as usize];
        let idle = SharedBuffer { shared_used: 0, ..b.clone() };
        Ok(b.reserve + idle.pfc_threshold(self.ingress[port].shift))
    }

    /// Shared buffer size per switch.
    pub fn buffer_bytes(&self) -> u64 {
        self.cfg.buffer.0
    }

    /// Fault injection: while `fault` is set, data queue `q` marks as the fault says instead of
    /// as its ECN profile does; `None` clears it. [`Simulator::ecn`] still reports the profile
    /// as configured, as a switch reports its config: only the marks give the fault away.
    pub fn set_marking_fault(&mut self, q: usize, fault: Option<MarkingFault>) -> Result<(), SimError> {
        let info = self.data_queues.get(q).ok_or(SimError::UnknownQueue(q))?;
        let port = &mut self.ports[info.port_id as usize];
        let bit = 1u8 << info.queue;
        port.mark_all &= !bit;
        port.mark_none &= !bit;
        match fault {
            Some(MarkingFault::MarkEvery) => port.mark_all |= bit,
            Some(MarkingFault::MarkNone) => port.mark_none |= bit,
            None => {}
        }
        Ok(())
    }

    /// Fault injection: from now on, the device downstream of data queue `q` holds PFC PAUSE
    /// on the queue's priority for `duration`, as a NIC stuck in a PFC storm does. The queue
    /// stops, its buffer fills and pauses spread upstream; telemetry shows the pauses.
    pub fn inject_pause_storm(&mut self, q: usize, duration: Nanos) -> Result<(), SimError> {
        let info = self.data_queues.get(q).ok_or(SimError::UnknownQueue(q))?;
        let (port, prio) = (info.port_id, info.queue);
        self.events.push(self.now, Event::InjectedPfc { port, prio, pause: true });
        self.events.push(self.now + duration.0, Event::InjectedPfc { port, prio, pause: false });
        Ok(())
    }

    // ---- results ---------------------------------------------------------------------------

    /// One record per flow, in start order; flows that did not complete have no FCT.
    pub fn flow_records(&self) -> Vec<FlowRecord> {
        self.flows
            .iter()
            .map(|f| {
                let start = f.spec.start.0;
                let fct = f.finished_at.map(|t| t - start);
                FlowRecord {
                    src: f.spec.src,
                    dst: f.spec.dst,
                    sport: f.sport,
                    dport: f.spec.dport,
                    priority: f.spec.priority,
                    size_bytes: f.spec.size_bytes,
                    start_ns: f.spec.start.0,
                    fct_ns: fct,
                    ideal_ns: f.ideal_ns,
                    slowdown: fct.map(|fct| (fct as f64 / f.ideal_ns as f64).max(1.0)),
                    sent_ns: f.sent_at.map(|t| t - start),
                    delivered_ns: f.delivered_at.map(|t| t - start),
                    base_rtt_ns: Some(f.base_rtt_ns),
                }
            })
            .collect()
    }

    /// Fabric-wide counters for the summary.
    pub fn counters(&self) -> FabricCounters {
        let window = self.cfg.window_end.0.min(self.now).saturating_sub(self.cfg.window_start.0).max(1);
        let (mut bytes, mut cap) = (0f64, 0f64);
        for q in self.data_queues.iter().filter(|q| q.to_host) {
            bytes += self.ports[q.port_id as usize].window_tx_bytes as f64 * 8.0;
            cap += q.link.0 as f64 * window as f64 * 1e-9;
        }
        // Host downlinks may be listed once per data priority; both sums double alike.
        let finite_avg = || self.depth_avg_samples.iter().filter(|x| x.is_finite());
        let (avg_sum, avg_n) = (finite_avg().sum::<f64>(), finite_avg().count());
        let mut max = self.depth_max_samples.clone();
        max.sort_by(f64::total_cmp);
        let ongoing: u64 =
            self.ports.iter().flat_map(|p| p.pause_began).filter(|&t| t != u64::MAX).map(|t| self.now - t).sum();
        FabricCounters {
            pause_frames: self.pause_frames,
            paused_ns: self.paused_ns_total + ongoing,
            drops: self.drops,
            ecn_marks: self.ecn_marks,
            cnps: self.cnps,
            utilization: if cap > 0.0 { bytes / cap } else { 0.0 },
            queue_bytes_avg: if avg_n == 0 { 0.0 } else { avg_sum / avg_n as f64 },
            queue_bytes_p99: stats::percentile_sorted(&max, 99.0).unwrap_or(0.0),
            peak_packets_in_flight: self.pool.capacity_used(),
        }
    }

    /// Progress of every flow, in start order (the order of [`Simulator::flow_records`]).
    pub fn flow_progress(&self) -> Vec<FlowProgress> {
        self.flows
            .iter()
            .map(|f| FlowProgress {
                started: f.spec.start.0 <= self.now && self.next_flow > 0,
                acked_bytes: f.snd_una,
                rate_bps: f.cc.rate_bps,
                finished: f.finished_at.is_some(),
            })
            .collect()
    }
}

/// Where a flow stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowProgress {
    /// The flow's start time has passed.
    pub started: bool,
    /// Bytes acknowledged so far.
    pub acked_bytes: u64,
    /// Current DCQCN rate, bits/s.
    pub rate_bps: f64,
    /// All bytes acknowledged.
    pub finished: bool,
}

/// Fabric-wide totals over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricCounters {
    /// PFC XOFF frames sent by switches.
    pub pause_frames: u64,
    /// Σ over every port and priority (switches and NICs) of the time it was paused, ns.
    pub paused_ns: u64,
    /// Packets dropped at admission.
    pub drops: u64,
    /// Packets CE-marked.
    pub ecn_marks: u64,
    /// Congestion notifications sent by receivers: CNP-flagged ACKs under the HPCC variant,
    /// stand-alone CNPs under the paper variant (REFERENCE.md §2 "Notification point").
    pub cnps: u64,
    /// Mean utilization of host downlinks over the arrival window.
    pub utilization: f64,
    /// Mean of the per-interval time-weighted depth over every switch data queue and every
    /// interval that starts within the arrival window.
    pub queue_bytes_avg: f64,
    /// 99th percentile of the per-interval maximum depth over the same population.
    pub queue_bytes_p99: f64,
    /// High-water mark of packets alive at once.
    pub peak_packets_in_flight: usize,
}
