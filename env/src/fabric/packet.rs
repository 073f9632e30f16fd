//! Packets and the pool that recycles them.
//!
//! Packets live in one `Vec` and travel as `u32` indices through queues and events, so the hot
//! path never allocates.

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    /// RoCEv2 data (ECN-capable).
    Data,
    /// Per-packet ACK; its `cnp` flag echoes a CE mark (HPCC variant).
    Ack,
    /// Go-back-N request after a gap in sequence numbers.
    Nack,
    /// Stand-alone congestion notification (DCQCN-paper variant).
    Cnp,
    /// PFC XOFF for priority `prio`.
    Pause,
    /// PFC XON for priority `prio`.
    Resume,
}

/// One packet in flight or in a queue.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    /// Flow the packet belongs to (unused for PFC frames).
    pub flow: u32,
    /// Data: byte offset of the payload. ACK/NACK: next expected byte.
    pub seq: u32,
    /// Ingress port at the current switch, for buffer accounting.
    pub in_port: u32,
    /// Destination node, so switches route without looking the flow up.
    pub dst: u32,
    /// The flow's ECMP key for this direction (a hash of the 5-tuple).
    pub ecmp: u64,
    /// Bytes on the wire.
    pub size: u16,
    /// Payload bytes (data only).
    pub payload: u16,
    /// Kind of packet.
    pub kind: PacketKind,
    /// Queue/priority the packet travels on; for PFC frames, the priority paused or resumed.
    pub prio: u8,
    /// CE mark (data) set by a switch.
    pub ecn: bool,
    /// CNP flag (ACK/NACK).
    pub cnp: bool,
}

impl Packet {
    /// A PFC frame (XOFF if `pause`, else XON) for priority `prio`, leaving or reaching `port`.
    pub fn pfc(port: u32, prio: u8, pause: bool) -> Packet {
        Packet {
            flow: u32::MAX,
            seq: 0,
            in_port: port,
            dst: u32::MAX,
            ecmp: 0,
            size: super::PFC_FRAME_BYTES as u16,
            payload: 0,
            kind: if pause { PacketKind::Pause } else { PacketKind::Resume },
            prio,
            ecn: false,
            cnp: false,
        }
    }
}

/// Free-list allocator of packets.
#[derive(Debug, Default)]
pub struct PacketPool {
    slots: Vec<Packet>,
    free: Vec<u32>,
}

impl PacketPool {
    /// Store a packet, returning its index.
    #[inline]
    pub fn alloc(&mut self, p: Packet) -> u32 {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = p;
            i
        } else {
            self.slots.push(p);
            (self.slots.len() - 1) as u32
        }
    }

    /// Release a packet index for reuse.
    #[inline]
    pub fn free(&mut self, i: u32) {
        self.free.push(i);
    }

    /// Read a packet.
    #[inline]
    pub fn get(&self, i: u32) -> &Packet {
        &self.slots[i as usize]
    }

    /// Modify a packet.
    #[inline]
    pub fn get_mut(&mut self, i: u32) -> &mut Packet {
        &mut self.slots[i as usize]
    }

    /// Packets ever allocated at once (the pool's high-water mark).
    pub fn capacity_used(&self) -> usize {
        self.slots.len()
    }
}
