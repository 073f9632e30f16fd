//! Switch behaviour: forwarding with ECMP, buffer admission and PFC, egress scheduling (strict
//! priority for queue 0, round-robin over data queues) and ECN marking at dequeue
//! (REFERENCE.md §1, §3).

use super::packet::{Packet, PacketKind};
use super::{queue_slot, Simulator};
use crate::rng::mix_hash;

impl Simulator {
    /// The egress port switch `node` forwards a packet for host `dst` with ECMP key `key` to:
    /// a hash of the key picks one of the equal-cost routes (REFERENCE.md §3). `None` when
    /// `dst` is unreachable, which validated topologies never are.
    #[inline]
    pub(super) fn ecmp_egress(&self, node: usize, dst: usize, key: u64) -> Option<u32> {
        let ri = node * self.n_nodes + dst;
        let n = self.route_len[ri] as u32;
        if n == 0 {
            return None;
        }
        let pick = if n == 1 { 0 } else { mix_hash(key, node as u64) % n };
        Some(self.routes[(self.route_start[ri] + pick) as usize])
    }

    /// A packet finished arriving at switch port `port`.
    pub(super) fn switch_receive(&mut self, port: u32, pkt_id: u32) {
        let pkt = *self.pool.get(pkt_id);
        match pkt.kind {
            PacketKind::Pause | PacketKind::Resume => {
                self.pool.free(pkt_id);
                self.receive_pfc(port, pkt);
                return;
            }
            _ => {}
        }
        let node = self.ports[port as usize].node as usize;
        let Some(egress) = self.ecmp_egress(node, pkt.dst as usize, pkt.ecmp) else {
            // Unreachable destination: validated topologies never get here.
            self.pool.free(pkt_id);
            return;
        };
        let prio = pkt.prio as usize;
        let size = pkt.size as u64;

        if prio != 0 {
            let b = self.node_buffer[node] as usize;
            let ing = &mut self.ingress[port as usize];
            if !self.buffers[b].admits(ing, prio, size) {
                self.drops += 1;
                self.queue_stats[queue_slot(egress as usize, prio)].drops += 1;
                self.pool.free(pkt_id);
                return;
            }
            self.buffers[b].enqueue(ing, prio, size);
            if self.cfg.pfc && self.buffers[b].should_pause(ing, prio) {
                ing.paused_upstream |= 1 << prio;
                self.send_pfc(port, prio as u8, true);
            }
        }
        self.pool.get_mut(pkt_id).in_port = port;
        let now = self.now;
        let p = &mut self.ports[egress as usize];
        if prio != 0 {
            let st = &mut self.queue_stats[queue_slot(egress as usize, prio)];
            st.before_depth_change(now, p.queued_bytes[prio]);
            p.queued_bytes[prio] += size;
            st.after_depth_change(p.queued_bytes[prio]);
        }
        p.enqueue(prio, pkt_id);
        self.switch_try_send(egress);
    }

    /// Transmit the next packet of switch port `port` if its transmitter is idle.
    pub(super) fn switch_try_send(&mut self, port: u32) {
        let now = self.now;
        let p = &mut self.ports[port as usize];
        if p.busy_until > now {
            let t = p.busy_until;
            self.schedule_ready(port, t);
            return;
        }
        let Some(prio) = p.next_queue() else { return };
        if prio != 0 {
            p.rr_last = prio as u8;
        }
        let pkt_id = p.dequeue(prio).expect("non-empty queue");
        if prio != 0 {
            self.dequeue_data(port, prio, pkt_id);
        } else {
            // XOFF frames count as they leave (one cancelled while queued never does), in the
            // telemetry interval they leave in.
            let frame = self.pool.get(pkt_id);
            if frame.kind == PacketKind::Pause {
                let paused = frame.prio as usize;
                self.pause_frames += 1;
                self.queue_stats[queue_slot(port as usize, paused)].pause_tx += 1;
            }
        }
        self.transmit(port, pkt_id);
        let p = &self.ports[port as usize];
        if p.backlog != 0 {
            let t = p.busy_until;
            self.schedule_ready(port, t);
        }
    }

    /// Release buffer, mark, count and check XON for a data-priority packet leaving `port`.
    fn dequeue_data(&mut self, port: u32, prio: usize, pkt_id: u32) {
        let now = self.now;
        let pkt = *self.pool.get(pkt_id);
        let size = pkt.size as u64;
        let p = &mut self.ports[port as usize];
        let st = &mut self.queue_stats[queue_slot(port as usize, prio)];
        st.before_depth_change(now, p.queued_bytes[prio]);
        p.queued_bytes[prio] -= size;
        st.after_depth_change(p.queued_bytes[prio]);
        st.tx_bytes += size;
        st.tx_pkts += 1;
        // Dequeue marking on the queue left behind (REFERENCE.md §1).
        let bit = 1u8 << prio;
        if pkt.kind == PacketKind::Data
            && (p.mark_all & bit != 0
                || (p.mark_none & bit == 0 && p.ecn[prio].should_mark(p.queued_bytes[prio], &mut self.mark_rng)))
        {
            self.pool.get_mut(pkt_id).ecn = true;
            st.marked += 1;
            self.ecn_marks += 1;
        }
        let in_port = pkt.in_port as usize;
        let node = self.ports[in_port].node as usize;
        let b = self.node_buffer[node] as usize;
        let ing = &mut self.ingress[in_port];
        self.buffers[b].dequeue(ing, prio, size);
        if self.buffers[b].should_resume(ing, prio) {
            ing.paused_upstream &= !(1 << prio);
            self.send_pfc(in_port as u32, prio as u8, false);
        }
    }

    /// Send a PFC XOFF (`pause`) or XON for `prio` out of `port`, to the upstream device.
    fn send_pfc(&mut self, port: u32, prio: u8, pause: bool) {
        // A frame for this priority still waiting in the control queue has told the peer
        // nothing yet, and says the opposite (XOFF and XON alternate): the two cancel out. Queued
        // one behind the other, a flapping ingress (a shared pool near 0, where each packet in
        // starts headroom use and each packet out ends it) queued hundreds of frames, its last
        // XOFF reached the sender microseconds late, and a lossless fabric dropped.
        let waiting = self.ports[port as usize].queues[0].iter().position(|&id| {
            let p = self.pool.get(id);
            matches!(p.kind, PacketKind::Pause | PacketKind::Resume) && p.prio == prio
        });
        if let Some(at) = waiting {
            let id = self.ports[port as usize].dequeue_at(0, at).expect("found in the queue");
            self.pool.free(id);
            return;
        }
        self.send_control(port, Packet::pfc(port, prio, pause));
    }

    /// A PFC frame arrived on `port` (switch or host): pause or resume that egress priority.
    pub(super) fn receive_pfc(&mut self, port: u32, frame: Packet) {
        let prio = frame.prio as usize;
        let now = self.now;
        let p = &mut self.ports[port as usize];
        let st = &mut self.queue_stats[queue_slot(port as usize, prio)];
        if frame.kind == PacketKind::Pause {
            st.pause_rx += 1;
            if p.paused & (1 << prio) == 0 {
                p.paused |= 1 << prio;
                p.pause_began[prio] = now;
                st.paused_since = now;
            }
        } else if p.paused & (1 << prio) != 0 {
            p.paused &= !(1 << prio);
            self.paused_ns_total += now - p.pause_began[prio];
            p.pause_began[prio] = u64::MAX;
            if st.paused_since != u64::MAX {
                st.paused_ns += now - st.paused_since;
                st.paused_since = u64::MAX;
            }
            self.try_send(port);
        }
    }
}
