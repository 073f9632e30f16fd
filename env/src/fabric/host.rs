//! Host behaviour: the NIC's transmit scheduler, DCQCN reaction points, and receivers that
//! ACK every packet (REFERENCE.md §2; shared/reference/README.md "Senders", "ECN and CNP").

use super::event::Event;
use super::packet::{Packet, PacketKind};
use super::{AckQueue, NicWakeup, Simulator, ACK_BYTES, CNP_BYTES, DATA_HEADER_BYTES};
use crate::dcqcn::DcqcnVariant;
use crate::units::BitsPerSec;

/// Minimum gap between two NACKs of one flow for the same sequence (the reference's 500 µs).
const NACK_INTERVAL_NS: u64 = 500_000;

impl Simulator {
    /// Flow `i` starts: it joins its NIC's round-robin at line rate.
    pub(super) fn start_flow(&mut self, i: u32) {
        let now = self.now;
        let f = &mut self.flows[i as usize];
        f.next_avail = now;
        let nic_idx = self.node_nic[f.spec.src as usize] as usize;
        self.nics[nic_idx].active.push(i);
        self.next_flow = i as usize + 1;
        if let Some(rto) = self.cfg.rto {
            f.progress_at = now;
            self.events.push(now + rto.0, Event::Rto(i));
        }
        if let Some(next) = self.flows.get(i as usize + 1) {
            let t = next.spec.start.0;
            self.events.push(t.max(now), Event::FlowStart(i + 1));
        }
        let port = self.nics[nic_idx].port;
        self.host_try_send(port);
    }

    /// The NIC on `port` sends its next packet if idle: ACKs and other control frames first,
    /// then round-robin over flows whose pacing time has come and whose priority is not paused.
    pub(super) fn host_try_send(&mut self, port: u32) {
        let now = self.now;
        let p = &self.ports[port as usize];
        if p.busy_until > now {
            let t = p.busy_until;
            self.schedule_ready(port, t);
            return;
        }
        // Control frames first. An ACK travels on its flow's priority, so PFC holds it like the
        // flow's data: the reference NIC sends ACKs through a pause, which overruns the
        // switch's headroom during long pauses (zero drops under PFC requires this).
        let paused = self.ports[port as usize].paused;
        let q = &self.ports[port as usize].queues[0];
        if let Some(i) = q.iter().position(|&id| paused & (1 << self.pool.get(id).prio) == 0) {
            let ctrl = self.ports[port as usize].dequeue_at(0, i).expect("position is in range");
            self.transmit(port, ctrl);
            self.schedule_ready(port, self.ports[port as usize].busy_until);
            return;
        }
        let nic_idx = self.node_nic[self.ports[port as usize].node as usize] as usize;
        let nic = &mut self.nics[nic_idx];
        let n = nic.active.len();
        let mut chosen = None;
        for k in 1..=n {
            let idx = (nic.rr + k) % n;
            let fi = nic.active[idx];
            let f = &self.flows[fi as usize];
            if f.snd_nxt < f.spec.size_bytes && paused & (1 << f.spec.priority) == 0 && f.next_avail <= now {
                chosen = Some((idx, fi));
                break;
            }
        }
        let Some((idx, fi)) = chosen else {
            // Nothing eligible: arm the pacing timer for the earliest flow with data left.
            let earliest = nic
                .active
                .iter()
                .map(|&fi| &self.flows[fi as usize])
                .filter(|f| f.snd_nxt < f.spec.size_bytes)
                .map(|f| f.next_avail)
                .min()
                .unwrap_or(u64::MAX);
            let armed = nic.pacing_wake != u64::MAX && nic.pacing_wake > now;
            let arm = match self.cfg.nic_wakeup {
                NicWakeup::Hpcc => !armed,
                NicWakeup::Exact => earliest < nic.pacing_wake || !armed,
            };
            if arm && earliest != u64::MAX && earliest > now {
                nic.pacing_wake = earliest;
                self.events.push(earliest, Event::NicWake(nic_idx as u32));
            }
            return;
        };
        nic.rr = idx;
        let mtu = self.cfg.mtu_payload as u64;
        let f = &mut self.flows[fi as usize];
        let payload = (f.spec.size_bytes - f.snd_nxt).min(mtu);
        let size = payload + DATA_HEADER_BYTES;
        let pkt = Packet {
            flow: fi,
            seq: f.snd_nxt as u32,
            in_port: port,
            dst: f.spec.dst,
            ecmp: f.key_fwd,
            size: size as u16,
            payload: payload as u16,
            kind: PacketKind::Data,
            prio: f.spec.priority,
            ecn: false,
            cnp: false,
        };
        f.snd_nxt += payload;
        let last_byte_first_time = f.snd_nxt >= f.spec.size_bytes && f.sent_at.is_none();
        // Pacing: the next packet may leave after this one's size at the current rate.
        f.next_avail = now + BitsPerSec(f.cc.rate_bps as u64).tx_time(size).0;
        f.cc.on_bytes_sent(size, &self.cfg.dcqcn);
        let id = self.pool.alloc(pkt);
        self.transmit(port, id);
        let done = self.ports[port as usize].busy_until;
        if last_byte_first_time {
            self.flows[fi as usize].sent_at = Some(done);
        }
        self.schedule_ready(port, done);
    }

    /// A packet finished arriving at the NIC on `port`.
    pub(super) fn host_receive(&mut self, port: u32, pkt_id: u32) {
        let pkt = *self.pool.get(pkt_id);
        self.pool.free(pkt_id);
        match pkt.kind {
            PacketKind::Pause | PacketKind::Resume => self.receive_pfc(port, pkt),
            PacketKind::Data => self.receive_data(port, pkt),
            PacketKind::Ack | PacketKind::Nack | PacketKind::Cnp => self.receive_feedback(port, pkt),
        }
    }

    /// Receiver (notification point): ACK in-order data, NACK a gap, ignore duplicates.
    fn receive_data(&mut self, port: u32, pkt: Packet) {
        let now = self.now;
        let variant = self.cfg.dcqcn.variant;
        let cnp_interval = self.cfg.dcqcn.cnp_interval.0;
        let f = &mut self.flows[pkt.flow as usize];
        let seq = pkt.seq as u64;
        let kind = if seq == f.rcv_expected {
            f.rcv_expected += pkt.payload as u64;
            if f.rcv_expected >= f.spec.size_bytes && f.delivered_at.is_none() {
                f.delivered_at = Some(now);
            }
            PacketKind::Ack
        } else if seq > f.rcv_expected {
            if now < f.last_nack_at + NACK_INTERVAL_NS && f.last_nack_seq == f.rcv_expected {
                return;
            }
            f.last_nack_at = now;
            f.last_nack_seq = f.rcv_expected;
            PacketKind::Nack
        } else {
            return;
        };
        // HPCC variant: the ACK echoes the CE mark. Paper variant: a separate CNP, at most one
        // per flow per CNP interval.
        let (ack_cnp, send_cnp) = match variant {
            DcqcnVariant::Hpcc => (pkt.ecn, false),
            DcqcnVariant::Paper => {
                let due = pkt.ecn && f.last_cnp_at.is_none_or(|t| now >= t + cnp_interval);
                if due {
                    f.last_cnp_at = Some(now);
                }
                (false, due)
            }
        };
        let ack = Packet {
            flow: pkt.flow,
            seq: f.rcv_expected as u32,
            in_port: port,
            dst: f.spec.src,
            ecmp: f.key_rev,
            size: ACK_BYTES as u16,
            payload: 0,
            kind,
            prio: match self.cfg.ack_queue {
                AckQueue::Data => pkt.prio,
                AckQueue::Control => 0,
            },
            ecn: false,
            cnp: ack_cnp,
        };
        self.cnps += u64::from(ack_cnp || send_cnp);
        if send_cnp {
            // Stand-alone CNPs get the strict-priority queue, as deployments configure them.
            let cnp = Packet { size: CNP_BYTES as u16, kind: PacketKind::Cnp, cnp: true, prio: 0, ..ack };
            let id = self.pool.alloc(cnp);
            self.ports[port as usize].enqueue(0, id);
        }
        self.send_control(port, ack);
    }

    /// Sender (reaction point): advance the acknowledged point, go back on NACK, react to CNPs.
    fn receive_feedback(&mut self, port: u32, pkt: Packet) {
        let now = self.now;
        let fi = pkt.flow;
        let f = &mut self.flows[fi as usize];
        if f.finished_at.is_some() {
            return;
        }
        if matches!(pkt.kind, PacketKind::Ack | PacketKind::Nack) {
            if pkt.seq as u64 > f.snd_una {
                f.progress_at = now;
            }
            f.snd_una = f.snd_una.max(pkt.seq as u64);
            if f.snd_una >= f.spec.size_bytes {
                self.complete_flow(fi);
                self.host_try_send(port);
                return;
            }
            if pkt.kind == PacketKind::Nack {
                f.snd_nxt = f.snd_una;
            }
        }
        if pkt.cnp {
            if let Some(t) = f.cc.on_cnp(crate::units::Nanos(now), &self.cfg.dcqcn) {
                self.events.push(t.0, Event::DecreaseCheck(fi));
            }
        }
        self.host_try_send(port);
    }

    /// The last byte is acknowledged: record the FCT and leave the NIC's round-robin.
    fn complete_flow(&mut self, fi: u32) {
        let now = self.now;
        let f = &mut self.flows[fi as usize];
        f.finished_at = Some(now);
        // Any pending DCQCN timer of this flow is now stale.
        f.cc.increase_timer_gen = f.cc.increase_timer_gen.wrapping_add(1);
        let nic = &mut self.nics[self.node_nic[f.spec.src as usize] as usize];
        if let Some(idx) = nic.active.iter().position(|&x| x == fi) {
            nic.active.remove(idx);
            if idx <= nic.rr && nic.rr > 0 {
                nic.rr -= 1;
            }
        }
        self.flows_done += 1;
    }

    pub(super) fn decrease_check(&mut self, fi: u32) {
        let now = self.now();
        let f = &mut self.flows[fi as usize];
        if f.finished_at.is_some() {
            return;
        }
        if let Some(t) = f.cc.on_decrease_check(now, &self.cfg.dcqcn) {
            let gen = f.cc.increase_timer_gen;
            self.events.push(t.0, Event::IncreaseTimer { flow: fi, gen });
        }
    }

    pub(super) fn increase_timer(&mut self, fi: u32, gen: u32) {
        let now = self.now();
        let f = &mut self.flows[fi as usize];
        if f.finished_at.is_some() || f.cc.increase_timer_gen != gen {
            return;
        }
        let next = f.cc.on_increase_timer(now, &self.cfg.dcqcn);
        self.events.push(next.0, Event::IncreaseTimer { flow: fi, gen });
    }

    /// Retransmission timeout: with bytes outstanding and no ACK progress for one whole `rto`,
    /// go back to the last acknowledged byte. Scenario files set it with PFC too (10 ms, against
    /// 1 ms without): a long PFC storm can stall a flow that long.
    ///
    /// The timer counts from the last progress, as a NIC's restarts on each ACK that moves it:
    /// one that only checked every `rto` whether anything had moved since its last check fired
    /// anywhere from one to two `rto` after the stall (2·rto + 10 µs in a 7-to-1 incast
    /// without PFC).
    pub(super) fn rto(&mut self, fi: u32) {
        let Some(rto) = self.cfg.rto else { return };
        let now = self.now;
        let f = &mut self.flows[fi as usize];
        if f.finished_at.is_some() {
            return;
        }
        let outstanding = f.snd_nxt > f.snd_una;
        let stalled = outstanding && now >= f.progress_at.saturating_add(rto.0);
        // Nothing in flight: nothing to time out, and the timer starts over from now.
        if stalled || !outstanding {
            f.progress_at = now;
        }
        self.events.push(f.progress_at.saturating_add(rto.0).max(now + 1), Event::Rto(fi));
        if stalled {
            f.snd_nxt = f.snd_una;
            let port = self.nics[self.node_nic[f.spec.src as usize] as usize].port;
            self.host_try_send(port);
        }
    }
}
