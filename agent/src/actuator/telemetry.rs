//! Telemetry on the wire: conversion from simulator rows, and coarsening to the interval a
//! subscriber asks for.

use super::backend::QueueKey;
use ecn_datasets::telemetry::QueueKey as SampleKey;
use ecn_datasets::{QueueSample, TelemetrySample};
use ecn_proto::v1 as pb;
use std::collections::HashMap;

/// A simulator/recording row as a wire sample, its timestamp shifted by `ts_offset_ns`;
/// `marks_counted` says whether its source counts ECN marks (a simulator does; a recording's
/// zeros may be a switch that did not).
pub fn sample_to_wire(r: &TelemetrySample, ts_offset_ns: u64, marks_counted: bool) -> pb::TelemetrySample {
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
        // As the row says; 0 (implicit) covers the step from its queue's previous one.
        span_ns: s.span_ns,
        ecn_marks_counted: marks_counted,
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
        span_ns: s.span_ns,
    }
}

/// A wire sample as a telemetry row (the inverse of [`sample_to_wire`]); `None` without a
/// queue id or a priority beyond 255. A sample without its ECN setting takes `setting`.
pub fn sample_from_wire(s: &pb::TelemetrySample, setting: Option<&pb::EcnSetting>) -> Option<TelemetrySample> {
    let id = s.id.as_ref()?;
    let ecn = s.ecn.as_ref().or(setting)?;
    let key = SampleKey::new(&id.switch, &id.port, u8::try_from(id.queue).ok()?);
    Some(queue_sample_from_wire(s, ecn).to_row(&key))
}

/// Group rows (already in time order) into one batch per timestamp (`marks_counted` as for
/// [`sample_to_wire`]).
pub fn batches_from_rows(rows: &[TelemetrySample], ts_offset_ns: u64, marks_counted: bool) -> Vec<pb::TelemetryBatch> {
    let mut out: Vec<pb::TelemetryBatch> = Vec::new();
    for r in rows {
        let ts = r.sample.ts_ns + ts_offset_ns;
        match out.last_mut() {
            Some(b) if b.ts_ns == ts => b.samples.push(sample_to_wire(r, ts_offset_ns, marks_counted)),
            _ => out
                .push(pb::TelemetryBatch { ts_ns: ts, samples: vec![sample_to_wire(r, ts_offset_ns, marks_counted)] }),
        }
    }
    out
}

/// Merges consecutive native batches into one per `factor` of them, as one sample per queue
/// over the longer interval: counters and spans add up, the depth at the end and the ECN
/// setting are the last ones, the maximum is the maximum and the average is the mean of the
/// averages weighted by the time each covers.
///
/// Every merged sample states its span (`span_ns`): a native sample that leaves it implicit
/// covers the step from its queue's previous sample, or, with none seen since the
/// subscription began or skipped ahead, one native interval. A receiver then measures rates
/// over the time the counters cover even where the stream has a hole: a queue missing from a
/// native batch (a poller dropped that interval) or batches a slow subscriber never got.
#[derive(Debug)]
pub struct Coarsener {
    factor: u32,
    native_ns: u64,
    seen: u32,
    acc: Vec<Merging>,
    pos: HashMap<QueueKey, usize>,
    /// Each queue's latest `ts_ns`, across windows, until a skip.
    last_ts: HashMap<QueueKey, u64>,
    /// Batches were lost since the last one passed on.
    after_skip: bool,
}

/// One queue's sample being merged, with the sum of its averages weighted by their spans.
#[derive(Debug)]
struct Merging {
    sample: pb::TelemetrySample,
    weighted_avg: f64,
}

impl Coarsener {
    /// Merge every `factor` batches (1 = pass on each, its spans stated) of a backend whose
    /// native interval is `native_ns`.
    pub fn new(factor: u32, native_ns: u64) -> Coarsener {
        Coarsener {
            factor: factor.max(1),
            native_ns: native_ns.max(1),
            seen: 0,
            acc: Vec::new(),
            pos: HashMap::new(),
            last_ts: HashMap::new(),
            after_skip: false,
        }
    }

    /// Batches were lost (a slow subscriber skipped ahead): a window half filled before the
    /// hole starts again, so that it never merges intervals from both sides of it, and no
    /// span is measured across it.
    pub fn skipped(&mut self) {
        self.seen = 0;
        self.acc.clear();
        self.pos.clear();
        self.last_ts.clear();
        self.after_skip = true;
    }

    /// A batch passed on alone (factor 1). Its samples' spans stay as the backend stated them,
    /// implicit ones too (the step from the queue's previous sample is right), except in the
    /// first batch after a skip, where that step spans the batches lost: there an implicit
    /// span is one native interval. (Backends that can miss a queue in a batch, SONiC's
    /// poller, state every span.) No per-queue state: a busy actuator passes on every batch so.
    fn pass_on(&mut self, b: &pb::TelemetryBatch) -> pb::TelemetryBatch {
        let mut out = b.clone();
        if std::mem::take(&mut self.after_skip) {
            for s in out.samples.iter_mut().filter(|s| s.span_ns == 0) {
                s.span_ns = self.native_ns;
            }
        }
        out
    }

    /// The time `s` covers: its own `span_ns` (at most the step from its queue's previous
    /// sample), else that step, else one native interval.
    fn span_of(&mut self, key: &QueueKey, s: &pb::TelemetrySample) -> u64 {
        let last = self.last_ts.get(key).copied();
        let step = last.filter(|&t| s.ts_ns > t).map(|t| s.ts_ns - t);
        if s.ts_ns >= last.unwrap_or(0) {
            self.last_ts.insert(key.clone(), s.ts_ns);
        }
        match (s.span_ns, step) {
            (0, Some(step)) => step,
            (0, None) => self.native_ns,
            (span, Some(step)) => span.min(step),
            (span, None) => span,
        }
    }

    /// Feed one native batch; returns a merged batch every `factor` calls.
    pub fn push(&mut self, b: &pb::TelemetryBatch) -> Option<pb::TelemetryBatch> {
        if self.factor == 1 {
            return Some(self.pass_on(b));
        }
        for s in &b.samples {
            let key = s.id.as_ref().map(QueueKey::from).unwrap_or_default();
            let span = self.span_of(&key, s);
            match self.pos.get(&key) {
                None => {
                    self.pos.insert(key, self.acc.len());
                    let sample = pb::TelemetrySample { span_ns: span, ..s.clone() };
                    self.acc.push(Merging { weighted_avg: s.queue_bytes_avg * span as f64, sample });
                }
                Some(&i) => {
                    let m = &mut self.acc[i];
                    m.weighted_avg += s.queue_bytes_avg * span as f64;
                    let a = &mut m.sample;
                    a.ts_ns = s.ts_ns;
                    a.span_ns = a.span_ns.saturating_add(span);
                    a.link_bps = s.link_bps;
                    a.queue_bytes = s.queue_bytes;
                    a.queue_bytes_max = a.queue_bytes_max.max(s.queue_bytes_max);
                    a.tx_bytes = a.tx_bytes.saturating_add(s.tx_bytes);
                    a.tx_pkts = a.tx_pkts.saturating_add(s.tx_pkts);
                    a.ecn_marked_pkts = a.ecn_marked_pkts.saturating_add(s.ecn_marked_pkts);
                    a.ecn_marks_counted &= s.ecn_marks_counted;
                    a.pfc_pause_rx = a.pfc_pause_rx.saturating_add(s.pfc_pause_rx);
                    a.pfc_pause_tx = a.pfc_pause_tx.saturating_add(s.pfc_pause_tx);
                    a.paused_ns = a.paused_ns.saturating_add(s.paused_ns);
                    a.drops = a.drops.saturating_add(s.drops);
                    a.ecn = s.ecn;
                }
            }
        }
        self.seen += 1;
        if self.seen < self.factor {
            return None;
        }
        let samples = self
            .acc
            .drain(..)
            .map(|m| {
                let mut s = m.sample;
                if s.span_ns > 0 {
                    s.queue_bytes_avg = m.weighted_avg / s.span_ns as f64;
                }
                s
            })
            .collect();
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
        let mut c = Coarsener::new(3, 100);
        assert!(c.push(&batch(100, 10, 1)).is_none());
        assert!(c.push(&batch(200, 40, 2)).is_none());
        let m = c.push(&batch(300, 20, 3)).unwrap();
        assert_eq!(m.ts_ns, 300);
        let s = &m.samples[0];
        assert_eq!((s.ts_ns, s.queue_bytes, s.queue_bytes_max, s.tx_bytes, s.paused_ns), (300, 20, 40, 6, 30));
        // The first sample of a subscription covers one native interval.
        assert_eq!(s.span_ns, 300);
        assert!((s.queue_bytes_avg - 70.0 / 3.0).abs() < 1e-9);
        assert!(c.push(&batch(400, 1, 1)).is_none(), "a new window starts");
        assert_eq!(Coarsener::new(1, 100).push(&batch(1, 1, 1)).unwrap(), batch(1, 1, 1), "passed on as it is");
    }

    #[test]
    fn a_coarse_sample_vouches_for_its_marks_only_if_every_fine_one_did() {
        let counted = |ts: u64, yes: bool| {
            let mut b = batch(ts, 1, 1);
            b.samples[0].ecn_marks_counted = yes;
            b
        };
        let mut c = Coarsener::new(2, 100);
        c.push(&counted(100, true));
        assert!(c.push(&counted(200, true)).unwrap().samples[0].ecn_marks_counted);
        c.push(&counted(300, true));
        assert!(!c.push(&counted(400, false)).unwrap().samples[0].ecn_marks_counted);
    }

    fn spanning(ts: u64, span: u64, depth: u64, tx: u64) -> pb::TelemetryBatch {
        let mut b = batch(ts, depth, tx);
        b.samples[0].span_ns = span;
        b
    }

    #[test]
    fn a_hole_in_the_stream_shows_in_the_span_not_in_the_rates() {
        // A poller dropped the interval ending at 200 for this queue: its sample at 300 states
        // the one poll its deltas cover.
        let mut c = Coarsener::new(3, 100);
        c.push(&spanning(100, 100, 10, 1));
        c.push(&pb::TelemetryBatch { ts_ns: 200, samples: vec![] });
        let s = c.push(&spanning(300, 100, 40, 3)).unwrap().samples.remove(0);
        assert_eq!((s.span_ns, s.tx_bytes), (200, 4));
        assert!((s.queue_bytes_avg - 25.0).abs() < 1e-9);
        // Averages are weighted by the time they cover: a short (partial) interval counts less.
        let mut c = Coarsener::new(2, 100);
        c.push(&spanning(100, 100, 10, 1));
        let s = c.push(&batch(125, 50, 1)).unwrap().samples.remove(0);
        assert_eq!(s.span_ns, 125);
        assert!((s.queue_bytes_avg - (10.0 * 100.0 + 50.0 * 25.0) / 125.0).abs() < 1e-9);
        // A span is never longer than the step from the queue's previous sample.
        let mut c = Coarsener::new(2, 100);
        c.push(&batch(100, 1, 1));
        assert_eq!(c.push(&spanning(150, 100, 1, 1)).unwrap().samples[0].span_ns, 150);
    }

    #[test]
    fn after_a_skip_no_span_is_measured_across_the_batches_lost() {
        let mut c = Coarsener::new(1, 100);
        c.push(&batch(100, 1, 1));
        assert_eq!(c.push(&batch(200, 1, 1)).unwrap().samples[0].span_ns, 0, "implicit: the step");
        c.skipped();
        // Batches up to 900 were lost: the one at 1000 covers its own interval, not 800 ns.
        assert_eq!(c.push(&batch(1000, 1, 1)).unwrap().samples[0].span_ns, 100);
        assert_eq!(c.push(&spanning(1100, 60, 1, 1)).unwrap().samples[0].span_ns, 60, "a stated span as stated");
        assert_eq!(c.push(&batch(1200, 1, 1)).unwrap().samples[0].span_ns, 0);
        let mut c = Coarsener::new(3, 100);
        c.push(&batch(100, 1, 1));
        c.push(&batch(200, 1, 1));
        c.skipped();
        assert!(c.push(&batch(900, 1, 1)).is_none(), "the half-filled window starts again");
        c.push(&batch(1000, 1, 1));
        let s = c.push(&batch(1100, 1, 1)).unwrap().samples.remove(0);
        assert_eq!((s.span_ns, s.tx_bytes), (300, 3));
    }
}
