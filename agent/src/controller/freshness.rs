//! How fresh the telemetry a control loop decides from is: when its batches last arrived, and
//! how far behind the fabric they were when last measured.
//!
//! Staleness by arrival alone misses a stream that arrives regularly but late: the policy then
//! decides from telemetry older than a stalled stream's would be. So the loop also reads the
//! actuator's present on the telemetry's clock from time to time (a lag probe, and every apply
//! and read-back) and compares it with the newest sample taken. Either past `--stale-after`
//! makes every queue count as stale.

use super::metrics::{Metrics, TargetLabels};
use super::Client;
use crate::actuator::backend::wall_interval;
use ecn_proto::v1 as pb;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

/// The shortest time between two reads of the actuator's telemetry clock.
const LAG_PROBE_MIN: Duration = Duration::from_millis(100);

/// A lag probe in flight ([`Freshness::probe`]).
struct LagProbe {
    /// The stream epoch when it was sent: an answer about another stream's clock is not a lag.
    epoch: u64,
    /// The newest `ts_ns` taken when it was sent.
    newest_ts_ns: u64,
    sent_at: Instant,
    /// The actuator's configuration, with its telemetry clock.
    answer: oneshot::Receiver<Result<pb::Config, tonic::Status>>,
}

/// The freshness of one target's telemetry stream.
pub(super) struct Freshness {
    target: String,
    metrics: Metrics,
    /// The guardrails' staleness limit (after tightening to the actuator's bounds).
    stale_after: Duration,
    /// The actuator's telemetry-clock ns per wall-clock ns.
    time_scale: f64,
    last_batch_at: Instant,
    /// The newest `ts_ns` received on the stream in use (0: none yet).
    newest_ts_ns: u64,
    /// How far behind the fabric the telemetry read so far was when last measured, if the
    /// actuator tells its telemetry clock.
    lag: Option<Duration>,
    /// When telemetry came back after a silence past `--stale-after`, until a lag probe sent
    /// since answers: it counts as stale meanwhile ([`Freshness::lagging`]).
    unmeasured_since: Option<Instant>,
    /// Telemetry streams lost so far: a lag probe sent on one stream is not measured on the next.
    stream_epoch: u64,
    last_probe_at: Instant,
    probe: Option<LagProbe>,
}

impl Freshness {
    /// No stream yet; [`Freshness::watching_from`] starts the clock.
    pub(super) fn new(target: &str, metrics: Metrics, stale_after: Duration, time_scale: f64, now: Instant) -> Self {
        Freshness {
            target: target.to_string(),
            metrics,
            stale_after,
            time_scale,
            last_batch_at: now,
            newest_ts_ns: 0,
            lag: None,
            unmeasured_since: None,
            stream_epoch: 0,
            last_probe_at: now,
            probe: None,
        }
    }

    /// The actuator's telemetry interval changed (it restarted): a new staleness limit, and the
    /// time scale of its telemetry clock.
    pub(super) fn retune(&mut self, stale_after: Duration, time_scale: f64) {
        (self.stale_after, self.time_scale) = (stale_after, time_scale);
    }

    /// The stream counts as fresh from `now`, before its first batch: a stream opened, or
    /// being reopened, has until `--stale-after` to bring one.
    pub(super) fn watching_from(&mut self, now: Instant) {
        self.last_batch_at = now;
        self.metrics.telemetry_arrived(&self.target, now);
    }

    /// A batch with newest sample `ts_ns` arrived at `now`.
    pub(super) fn batch_arrived(&mut self, ts_ns: u64, now: Instant) {
        // Telemetry back after a silence past --stale-after (a paused actuator, a lost stream):
        // the first batches may be a backlog far behind the fabric, and the last lag measured
        // says nothing of them. Stale until a probe sent from now on says otherwise.
        if now.duration_since(self.last_batch_at) > self.stale_after {
            self.unmeasured_since = Some(now);
        }
        self.last_batch_at = now;
        self.metrics.telemetry_arrived(&self.target, now);
        self.newest_ts_ns = self.newest_ts_ns.max(ts_ns);
    }

    /// The telemetry stream is gone. The newest timestamp it brought says nothing about the
    /// next one's: an actuator that restarted starts its telemetry clock again, and measured
    /// against the old stream's newest sample its lag would read 0 until the new clock passed it.
    pub(super) fn stream_lost(&mut self) {
        self.newest_ts_ns = 0;
        self.stream_epoch += 1;
    }

    /// When the last batch arrived.
    pub(super) fn last_batch_at(&self) -> Instant {
        self.last_batch_at
    }

    /// Whether a sample came on the stream in use.
    pub(super) fn has_sample(&self) -> bool {
        self.newest_ts_ns > 0
    }

    /// Whether no batch came for `--stale-after`, or the telemetry lags (every queue counts
    /// as stale then, whatever its own samples say).
    pub(super) fn stale(&self, now: Instant) -> bool {
        self.lagging() || self.silent(now)
    }

    /// Whether no batch came for `--stale-after`.
    pub(super) fn silent(&self, now: Instant) -> bool {
        now.duration_since(self.last_batch_at) > self.stale_after
    }

    /// Whether the telemetry was last measured more than `--stale-after` behind the fabric,
    /// or has not been measured since it came back from a silence.
    pub(super) fn lagging(&self) -> bool {
        self.unmeasured_since.is_some() || self.lag.is_some_and(|l| l > self.stale_after)
    }

    /// For a decision's reason: `None` when not lagging, else the lag measured (`None` when
    /// not measured since a silence).
    pub(super) fn lag_said(&self) -> Option<Option<Duration>> {
        match (self.lagging(), self.unmeasured_since) {
            (false, _) => None,
            (true, Some(_)) => Some(None),
            (true, None) => self.lag.map(Some),
        }
    }

    /// Measure the lag from the actuator's present on the telemetry's clock
    /// (`actuator_now_ns`, 0: unknown), read just now. In step, the lag is up to about one
    /// interval (the one in progress).
    pub(super) fn measure(&mut self, actuator_now_ns: u64) {
        self.measure_against(actuator_now_ns, self.newest_ts_ns);
    }

    /// [`Freshness::measure`] against `newest_ts_ns`, the newest sample when the actuator's
    /// clock was asked for; exported and said when it crosses `--stale-after`.
    fn measure_against(&mut self, actuator_now_ns: u64, newest_ts_ns: u64) {
        if actuator_now_ns == 0 || newest_ts_ns == 0 {
            return;
        }
        let lag = wall_interval(actuator_now_ns.saturating_sub(newest_ts_ns), self.time_scale);
        let labels = TargetLabels { target: self.target.clone() };
        self.metrics.telemetry_lag_seconds.get_or_create(&labels).set(lag.as_secs_f64());
        let (was, is) = (self.lagging(), lag > self.stale_after);
        self.lag = Some(lag);
        if is && !was {
            warn!(
                target = %self.target,
                lag = ?lag,
                "the telemetry this controller decides from is behind the fabric by more than --stale-after \
                 (a backlog here, a slow path from the actuator, or an actuator withholding telemetry it cannot \
                 trust: see its log); its queues count as stale until it catches up"
            );
        } else if was && !is {
            info!(target = %self.target, lag = ?lag, "the telemetry has caught up with the fabric");
        }
    }

    /// Every third of `--stale-after` (at most once per [`LAG_PROBE_MIN`]), ask the actuator
    /// for its telemetry clock and measure the lag, in every mode. While lagging, every
    /// [`LAG_PROBE_MIN`]: the queues count as stale until a probe shows the telemetry caught
    /// up, and it may well have by the next batch. A failed read changes nothing: the
    /// stream's own staleness covers an actuator that stopped answering. Returns the
    /// actuator's configuration when a probe's answer came since the last call.
    ///
    /// The read runs beside the loop and is taken up at a later call, so that a slow answer
    /// never holds a decision back (awaited here, it put a busy actuator's round trip into
    /// one round in ten). The lag is measured against the newest sample when the read was
    /// sent, as it was when the loop waited for the answer: batches taken in meanwhile would
    /// make it read short by the round trip.
    pub(super) fn probe(&mut self, client: &Client, now: Instant) -> Option<pb::Config> {
        let mut answered = None;
        if let Some(probe) = self.probe.as_mut() {
            match probe.answer.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => return None,
                // A stream lost meanwhile (an actuator restart) starts its clock again: an
                // answer from before says nothing about the new one.
                Ok(Ok(config)) => {
                    let (epoch, newest_ts_ns, sent_at) = (probe.epoch, probe.newest_ts_ns, probe.sent_at);
                    if epoch == self.stream_epoch {
                        if self.unmeasured_since.is_some_and(|t| sent_at >= t) {
                            self.unmeasured_since = None;
                        }
                        self.measure_against(config.telemetry_now_ts_ns, newest_ts_ns);
                    }
                    answered = Some(config);
                }
                Ok(Err(s)) => {
                    debug!(code = ?s.code(), message = s.message(), "cannot read the actuator's telemetry clock")
                }
                Err(oneshot::error::TryRecvError::Closed) => {}
            }
            self.probe = None;
        }
        let every = if self.lagging() { LAG_PROBE_MIN } else { (self.stale_after / 3).max(LAG_PROBE_MIN) };
        let unmeasured = self.unmeasured_since.is_some_and(|t| self.last_probe_at < t);
        if now.duration_since(self.last_probe_at) < every && !unmeasured {
            return answered;
        }
        self.last_probe_at = now;
        let mut client = client.clone();
        let (tx, answer) = oneshot::channel();
        tokio::spawn(async move {
            let config = client.get_config(pb::GetConfigRequest {}).await.map(tonic::Response::into_inner);
            let _ = tx.send(config);
        });
        self.probe = Some(LagProbe { epoch: self.stream_epoch, newest_ts_ns: self.newest_ts_ns, sent_at: now, answer });
        answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn telemetry_lags_once_measured_or_back_from_a_silence() {
        let t0 = Instant::now();
        let mut f = Freshness::new("t", Metrics::new(), Duration::from_secs(3), 1.0, t0);
        f.watching_from(t0);
        assert!(!f.stale(t0) && !f.has_sample());
        // No sample yet: nothing to measure against.
        f.measure(100 * SECOND);
        assert_eq!(f.lag_said(), None);

        f.batch_arrived(10 * SECOND, t0 + Duration::from_secs(1));
        assert!(f.has_sample() && !f.stale(t0 + Duration::from_secs(2)));
        f.measure(15 * SECOND);
        assert!(f.lagging());
        assert_eq!(f.lag_said(), Some(Some(Duration::from_secs(5))));
        f.measure(11 * SECOND);
        assert!(!f.lagging() && !f.stale(t0 + Duration::from_secs(2)));
        assert!(f.silent(t0 + Duration::from_secs(5)) && f.stale(t0 + Duration::from_secs(5)));

        // Back after a silence past --stale-after: stale until a probe sent since answers,
        // whatever an apply's clock says meanwhile.
        f.batch_arrived(12 * SECOND, t0 + Duration::from_secs(5));
        assert_eq!(f.lag_said(), Some(None));
        f.measure(12 * SECOND);
        assert!(f.lagging());

        // A lost stream's newest sample says nothing of the next stream's clock.
        f.stream_lost();
        assert!(!f.has_sample());
    }
}
