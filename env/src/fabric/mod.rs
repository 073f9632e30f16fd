//! The packet-level fabric simulator.
//!
//! Components follow htsim's small, explicit pieces, but as data: ports, switch buffers, NICs,
//! flows and packets are rows in `Vec`s addressed by `u32` indices, and the only dispatch is a
//! `match` on a compact [`event::Event`]. Every link end is a port; link `i` owns ports `2i`
//! (at `a`) and `2i + 1` (at `b`), so a port's peer is `port ^ 1`.
//!
//! - `config`: [`FabricConfig`], what a fabric is besides its flows, and its buffer checks.
//! - `port`: a link end's transmitter, its egress queues and the choice of the next one to serve.
//! - [`buffer`]: shared buffer, reserve, headroom, dynamic PFC threshold (REFERENCE.md §3).
//! - `switch`: forwarding, ECMP, admission, egress scheduling, ECN marking at dequeue, PFC frames.
//! - `host`: NICs, per-flow DCQCN senders and receivers, ACK/CNP generation (REFERENCE.md §2).
//! - [`stats`]: per-queue counters that become telemetry samples.
//! - [`event`]: the compact event and its time-ordered queue.
//! - [`packet`]: packets, pooled by index.
//! - `credit`: the data queues each flow crosses, and the slowdown that accrues behind each queue.

pub mod buffer;
pub mod event;
pub mod packet;
pub mod stats;

mod config;
mod credit;
mod host;
mod port;
mod switch;

pub use config::{
    check_buffer, headroom_bytes, reference_buffer, AckQueue, EcnPlan, FabricConfig, NicWakeup, MIN_INTERVAL,
    MTU_PAYLOAD_BYTES,
};
pub(crate) use port::Port;

/// Priorities (and so egress queues) per port, as in 802.1Qbb PFC.
pub const PRIORITIES: usize = 8;

/// Index of (port, priority)'s queue in the per-queue tables (`queue_stats` and the like).
#[inline]
pub(crate) fn queue_slot(port: usize, prio: usize) -> usize {
    port * PRIORITIES + prio
}

use crate::dcqcn::DcqcnSender;
use crate::ecn::{EcnError, EcnSetting};
use crate::rng::Rng;
use crate::topology::NodeKind;
use crate::units::{BitsPerSec, Nanos};
use crate::workload::FlowSpec;
use buffer::{IngressState, SharedBuffer};
use ecn_datasets::{FlowRecord, QueueSample, TelemetrySample};
use event::{Event, EventQueue};
use packet::{Packet, PacketPool};
use stats::QueueStats;
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
/// Headers counted per packet by the ideal-FCT formula (the reference runs' "Ideal
/// (standalone) FCT", `shared/reference/README.md`; REFERENCE.md §4 says bytes-with-headers).
pub const IDEAL_HEADER_BYTES: u64 = 48;

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
    /// When the acknowledged point last moved (or the retransmission timer last restarted):
    /// the timeout counts from here.
    pub progress_at: u64,
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
    /// Routes: for switch node `s` and destination host `h`, at `i = s * n_nodes + h`, the
    /// next-hop ports `routes[route_start[i] .. route_start[i] + route_len[i]]`.
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
        let data_prios = data_priorities(&flows, &node_kind)?;

        // Ports: two per link, in link order.
        let mut ports = Vec::with_capacity(topo.links.len() * 2);
        let mut node_ports: Vec<Vec<u32>> = vec![Vec::new(); n_nodes];
        for l in &topo.links {
            for node in [l.a, l.b] {
                node_ports[node as usize].push(ports.len() as u32);
                let ecn = cfg.ecn.setting_for(l.rate);
                ecn.validate()?;
                ports.push(Port::new(node, l.rate, l.delay, ecn));
            }
        }

        let SwitchBuffers { ingress, buffers, node_buffer } = switch_buffers(&cfg, &node_kind, &node_ports, &ports)?;

        // NICs.
        let mut nics = Vec::new();
        let mut node_nic = vec![u32::MAX; n_nodes];
        for n in 0..n_nodes {
            if node_kind[n] == NodeKind::Host {
                node_nic[n] = nics.len() as u32;
                nics.push(Nic { port: node_ports[n][0], active: Vec::new(), rr: 0, pacing_wake: u64::MAX });
            }
        }

        let Routes { start: route_start, len: route_len, ports: routes, dist_to, adjacency } =
            build_routes(topo, &node_kind, &node_ports, &ports)?;

        // Flows: source ports per (src, dst) pair in flow order; ideal FCT per REFERENCE.md §4.
        let mut next_sport = std::collections::HashMap::new();
        let mut flow_table = Vec::with_capacity(flows.len());
        for spec in flows {
            let sport = next_sport.entry((spec.src, spec.dst)).or_insert(10000u16);
            let this_sport = *sport;
            *sport = sport.wrapping_add(1);
            let path = topo.path(&adjacency, spec.src, spec.dst, &dist_to[spec.dst as usize]);
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
                progress_at: 0,
                rcv_expected: 0,
                last_nack_at: 0,
                last_nack_seq: u64::MAX,
                last_cnp_at: None,
                delivered_at: None,
            });
        }

        let data_queues = data_queues(topo, &node_kind, &node_ports, &ports, data_prios);

        let mut sim = Simulator {
            now: 0,
            events: EventQueue::default(),
            events_processed: 0,
            pool: PacketPool::default(),
            queue_stats: vec![QueueStats::default(); ports.len() * PRIORITIES],
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

    /// Run until every flow has completed and the arrival window has closed, or the hard stop,
    /// calling `progress` now and then with the current time. Returns true if every flow
    /// completed.
    ///
    /// A fabric whose last flow ends early in the window still runs, idle, to its end: the
    /// run's utilization and depth figures cover the arrival window (README "Comparing
    /// policies"), as they do for a closed-loop policy, whose episode ends there too. Stopping
    /// at the last flow measured the same traffic over a shorter time.
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
        if self.all_flows_done() && self.now < self.cfg.window_end.0 {
            self.run_until(self.cfg.window_end);
        }
        self.close_partial_interval();
        progress(self);
        self.all_flows_done()
    }

    /// Close the current telemetry interval where it has begun (the run stops between sample
    /// times), so that no counted byte is lost; its sample is stamped now.
    pub fn close_partial_interval(&mut self) {
        if self.now > self.interval_start {
            self.close_interval();
        }
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
        let arrive = now + tx + p.delay.0;
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
            let st = &mut self.queue_stats[queue_slot(port, prio)];
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
                        span_ns: now - start,
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

    /// The PFC XOFF level of the ingress on queue `q`'s own port (the same link, the other
    /// direction), at an empty shared buffer: reserve plus the dynamic threshold. An ECN Kmax
    /// above the XOFF level lets PFC fire before ECN can act (REFERENCE.md §1). The ingresses
    /// that fill the queue are others, and each holds only its share of the queue: a queue
    /// builds only when they send faster than its port (five 100G hosts into a 400G uplink),
    /// so in a leaf–spine fabric this level, at the port's own speed, is below theirs summed.
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

// ---- building a simulator --------------------------------------------------------------

/// Checks every flow (hosts at both ends, a data priority, a size that fits a packet count)
/// and returns the data priorities in use, one bit each.
fn data_priorities(flows: &[FlowSpec], node_kind: &[NodeKind]) -> Result<u8, SimError> {
    let n_nodes = node_kind.len();
    // Priority 3, the scenarios' default lossless class, is reported even with no flow on
    // it, so a fabric's queue list (the agents, the actuator's queues) does not change with
    // which flows a run draws.
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
    Ok(data_prios)
}

/// Each switch's shared buffer, and each switch port's ingress state: its PFC headroom and
/// threshold shift (the [`Simulator`] fields of the same names).
struct SwitchBuffers {
    ingress: Vec<IngressState>,
    buffers: Vec<SharedBuffer>,
    node_buffer: Vec<u32>,
}

fn switch_buffers(
    cfg: &FabricConfig,
    node_kind: &[NodeKind],
    node_ports: &[Vec<u32>],
    ports: &[Port],
) -> Result<SwitchBuffers, SimError> {
    check_buffer(cfg).map_err(SimError::Config)?;
    let n_nodes = node_kind.len();
    let nic_rate = cfg.topology.nic_rate();
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
            let headroom = headroom_bytes(port.rate, port.delay, cfg.mtu_payload);
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
    Ok(SwitchBuffers { ingress, buffers, node_buffer })
}

/// The routing tables of [`Simulator`] (`route_start`, `route_len`, `routes`), and each host's
/// hop counts from every node, which the flows' paths follow.
struct Routes {
    start: Vec<u32>,
    len: Vec<u16>,
    ports: Vec<u32>,
    dist_to: Vec<Vec<u32>>,
    /// The adjacency they were found over, which the flows' paths follow too.
    adjacency: Vec<Vec<(usize, crate::topology::NodeId)>>,
}

fn build_routes(
    topo: &crate::topology::Topology,
    node_kind: &[NodeKind],
    node_ports: &[Vec<u32>],
    ports: &[Port],
) -> Result<Routes, SimError> {
    // Routes: BFS from every host; at each switch keep every port one hop closer. A switch's
    // list toward the next host is mostly the one toward the last (a leaf's uplinks toward
    // every remote host): stored once, or an 800x800 leaf-spine's lists took 4 GB.
    let n_nodes = node_kind.len();
    let hosts = topo.hosts();
    let mut route_start = vec![0u32; n_nodes * n_nodes];
    let mut route_len = vec![0u16; n_nodes * n_nodes];
    let mut routes = Vec::new();
    let mut last_list: Vec<(u32, u16)> = vec![(0, 0); n_nodes];
    let mut dist_to: Vec<Vec<u32>> = vec![Vec::new(); n_nodes];
    let adjacency = topo.adjacency();
    for &h in &hosts {
        let dist = topo.distances_over(&adjacency, h);
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
            let Ok(len) = u16::try_from(routes.len() - start) else {
                return Err(SimError::Config(format!(
                    "{} has {} equal-cost links toward {}; at most {} are supported",
                    topo.nodes[s].name,
                    routes.len() - start,
                    topo.nodes[h as usize].name,
                    u16::MAX
                )));
            };
            let (last_start, last_len) = last_list[s];
            let start = if len > 0
                && len == last_len
                && routes[start..] == routes[last_start as usize..last_start as usize + len as usize]
            {
                routes.truncate(start);
                last_start
            } else {
                last_list[s] = (start as u32, len);
                start as u32
            };
            route_start[s * n_nodes + h as usize] = start;
            route_len[s * n_nodes + h as usize] = len;
        }
        dist_to[h as usize] = dist;
    }
    Ok(Routes { start: route_start, len: route_len, ports: routes, dist_to, adjacency })
}

/// The data queues telemetry reports on, in switch and port order.
fn data_queues(
    topo: &crate::topology::Topology,
    node_kind: &[NodeKind],
    node_ports: &[Vec<u32>],
    ports: &[Port],
    data_prios: u8,
) -> Vec<QueueInfo> {
    // The data queues telemetry reports on: every switch port × data priority in use.
    let mut data_queues = Vec::new();
    for n in 0..node_kind.len() {
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
    data_queues
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{Link, Node, Topology};

    /// Two switches joined by more parallel links than a route's length can count: refused,
    /// naming them. The count wrapped to 0 and every flow across was silently lost (65 536
    /// links), or took one link of many (65 537).
    #[test]
    fn more_equal_cost_links_than_a_route_holds_are_refused() {
        let mut t = Topology::default();
        for (name, kind) in
            [("h0", NodeKind::Host), ("h1", NodeKind::Host), ("a", NodeKind::Switch), ("b", NodeKind::Switch)]
        {
            t.nodes.push(Node { name: name.into(), kind });
        }
        let link = |a, b| Link { a, b, rate: BitsPerSec::from_gbps(100), delay: Nanos(1000) };
        t.links.extend([link(0, 2), link(1, 3)]);
        t.links.extend(std::iter::repeat_n(link(2, 3), 1 << 16));
        let mut cfg = FabricConfig::new(t);
        cfg.buffer = crate::units::Bytes(1 << 50);
        let flow = FlowSpec { src: 0, dst: 1, size_bytes: 1000, start: Nanos(0), priority: 3, dport: 100 };
        let err = Simulator::new(cfg, vec![flow]).err().expect("refused");
        assert_eq!(err.to_string(), "b has 65536 equal-cost links toward h0; at most 65535 are supported", "{err}");
    }
}
