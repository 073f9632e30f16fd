//! Telemetry on the wire: conversion from simulator rows, and coarsening to the interval a
//! subscriber asks for.

use ecn_datasets::telemetry::QueueKey;
use ecn_datasets::{QueueSample, TelemetrySample};
use ecn_proto::v1 as pb;
use std::collections::HashMap;

/// A simulator/recording row as a wire sample, its timestamp shifted by `ts_offset_ns`.
pub fn sample_to_wire(r: &TelemetrySample, ts_offset_ns: u64) -> pb::TelemetrySample {
    let s = &r.sample;
    pb::TelemetrySample {
        ts_ns: s.ts_ns + ts_offset_ns,
        id: Some(pb::QueueId { switch: r.switch.clone(), port: r.port.clone(), queue: u32::from(r.queue) }),
        link_bps: s.link_bps,
        queue_bytes: s.queue_bytes,
        queue_bytes_avg: s.queue_bytes_avg,
        queue_bytes_max: s.queue_bytes_max,
        tx_bytes: s.tx_bytes,
        tx_pkts: s.tx_pkts,
        ecn_marked_pkts: s.ecn_marked_pkts,
        pfc_pause_rx: s.pfc_pause_rx,
        pfc_pause_tx: s.pfc_pause_tx,
        paused_ns: s.paused_ns,
        drops: s.drops,
        ecn: Some(pb::EcnSetting { kmin_bytes: s.kmin_bytes, kmax_bytes: s.kmax_bytes, pmax: s.pmax }),
    }
}

/// A wire sample's measurements, with `ecn` as the setting in effect: the part of a row that
/// does not name the queue.
pub fn queue_sample_from_wire(s: &pb::TelemetrySample, ecn: &pb::EcnSetting) -> QueueSample {
    QueueSample {
        ts_ns: s.ts_ns,
        link_bps: s.link_bps,
        queue_bytes: s.queue_bytes,
        queue_bytes_avg: s.queue_bytes_avg,
        queue_bytes_max: s.queue_bytes_max,
        tx_bytes: s.tx_bytes,
        tx_pkts: s.tx_pkts,
        ecn_marked_pkts: s.ecn_marked_pkts,
        pfc_pause_rx: s.pfc_pause_rx,
        pfc_pause_tx: s.pfc_pause_tx,
        paused_ns: s.paused_ns,
        drops: s.drops,
        kmin_bytes: ecn.kmin_bytes,
        kmax_bytes: ecn.kmax_bytes,
        pmax: ecn.pmax,
    }
}

/// A wire sample as a telemetry row (the inverse of [`sample_to_wire`]); `None` without a
/// queue id or a priority beyond 255. A sample without its ECN setting takes `setting`.
pub fn sample_from_wire(s: &pb::TelemetrySample, setting: Option<&pb::EcnSetting>) -> Option<TelemetrySample> {
    let id = s.id.as_ref()?;
    let ecn = s.ecn.as_ref().or(setting)?;
    let key = QueueKey::new(&id.switch, &id.port, u8::try_from(id.queue).ok()?);
    Some(queue_sample_from_wire(s, ecn).to_row(&key))
}

/// Group rows (already in time order) into one batch per timestamp.
pub fn batches_from_rows(rows: &[TelemetrySample], ts_offset_ns: u64) -> Vec<pb::TelemetryBatch> {
    let mut out: Vec<pb::TelemetryBatch> = Vec::new();
    for r in rows {
        let ts = r.sample.ts_ns + ts_offset_ns;
        match out.last_mut() {
            Some(b) if b.ts_ns == ts => b.samples.push(sample_to_wire(r, ts_offset_ns)),
            _ => out.push(pb::TelemetryBatch { ts_ns: ts, samples: vec![sample_to_wire(r, ts_offset_ns)] }),
        }
    }
    out
}

/// Merges consecutive native batches into one per `factor` of them, as one sample per queue
/// over the longer interval: counters add up, the depth at the end and the ECN setting are
/// the last ones, the maximum is the maximum and the average is the mean of the averages
/// (native intervals have equal length).
#[derive(Debug)]
pub struct Coarsener {
    factor: u32,
    seen: u32,
    acc: Vec<pb::TelemetrySample>,
    avg_n: Vec<u32>,
    pos: HashMap<(String, String, u32), usize>,
}

impl Coarsener {
    /// Merge every `factor` batches (1 = pass through).
    pub fn new(factor: u32) -> Coarsener {
        Coarsener { factor: factor.max(1), seen: 0, acc: Vec::new(), avg_n: Vec::new(), pos: HashMap::new() }
    }

    /// Feed one native batch; returns a merged batch every `factor` calls.
    pub fn push(&mut self, b: &pb::TelemetryBatch) -> Option<pb::TelemetryBatch> {
        if self.factor == 1 {
            return Some(b.clone());
        }
        for s in &b.samples {
            let key = s.id.as_ref().map(|i| (i.switch.clone(), i.port.clone(), i.queue)).unwrap_or_default();
            match self.pos.get(&key) {
                None => {
                    self.pos.insert(key, self.acc.len());
                    self.acc.push(s.clone());
                    self.avg_n.push(1);
                }
                Some(&i) => {
                    let a = &mut self.acc[i];
                    a.ts_ns = s.ts_ns;
                    a.link_bps = s.link_bps;
                    a.queue_bytes = s.queue_bytes;
                    a.queue_bytes_max = a.queue_bytes_max.max(s.queue_bytes_max);
                    a.queue_bytes_avg += s.queue_bytes_avg;
                    a.tx_bytes = a.tx_bytes.saturating_add(s.tx_bytes);
                    a.tx_pkts = a.tx_pkts.saturating_add(s.tx_pkts);
                    a.ecn_marked_pkts = a.ecn_marked_pkts.saturating_add(s.ecn_marked_pkts);
                    a.pfc_pause_rx = a.pfc_pause_rx.saturating_add(s.pfc_pause_rx);
                    a.pfc_pause_tx = a.pfc_pause_tx.saturating_add(s.pfc_pause_tx);
                    a.paused_ns = a.paused_ns.saturating_add(s.paused_ns);
                    a.drops = a.drops.saturating_add(s.drops);
                    a.ecn = s.ecn;
                    self.avg_n[i] += 1;
                }
            }
        }
        self.seen += 1;
        if self.seen < self.factor {
            return None;
        }
        let mut samples = std::mem::take(&mut self.acc);
        for (s, n) in samples.iter_mut().zip(&self.avg_n) {
            s.queue_bytes_avg /= f64::from(*n);
        }
        self.avg_n.clear();
        self.pos.clear();
        self.seen = 0;
        Some(pb::TelemetryBatch { ts_ns: b.ts_ns, samples })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(ts: u64, depth: u64, tx: u64) -> pb::TelemetryBatch {
        let s = pb::TelemetrySample {
            ts_ns: ts,
            id: Some(pb::QueueId { switch: "s".into(), port: "p".into(), queue: 3 }),
            queue_bytes: depth,
            queue_bytes_avg: depth as f64,
            queue_bytes_max: depth,
            tx_bytes: tx,
            paused_ns: 10,
            ..Default::default()
        };
        pb::TelemetryBatch { ts_ns: ts, samples: vec![s] }
    }

    #[test]
    fn coarsening_sums_counters_and_keeps_the_last_depth() {
        let mut c = Coarsener::new(3);
        assert!(c.push(&batch(100, 10, 1)).is_none());
        assert!(c.push(&batch(200, 40, 2)).is_none());
        let m = c.push(&batch(300, 20, 3)).unwrap();
        assert_eq!(m.ts_ns, 300);
        let s = &m.samples[0];
        assert_eq!((s.ts_ns, s.queue_bytes, s.queue_bytes_max, s.tx_bytes, s.paused_ns), (300, 20, 40, 6, 30));
        assert!((s.queue_bytes_avg - 70.0 / 3.0).abs() < 1e-9);
        assert!(c.push(&batch(400, 1, 1)).is_none(), "a new window starts");
        assert_eq!(Coarsener::new(1).push(&batch(1, 1, 1)).unwrap(), batch(1, 1, 1));
    }
}
