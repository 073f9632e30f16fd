//! Prometheus metrics of the online controller, served at `GET /metrics` ([`super::exporter`]).

use super::guardrails::Clamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Labels of a per-queue metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// Actuator URL.
    pub target: String,
    /// Switch name.
    pub switch: String,
    /// Port name.
    pub port: String,
    /// Queue index.
    pub queue: u32,
}

/// Labels of a per-target metric: with several targets, one that stalls must show apart from the
/// rest.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    /// Actuator URL.
    pub target: String,
}

/// Labels of a per-target metric with a reason or rule name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetReasonLabels {
    /// Actuator URL.
    pub target: String,
    /// Reason or rule.
    pub reason: String,
}

/// Whether the kill switch is thrown, asked at each scrape.
type KillSwitchState = Box<dyn Fn() -> bool + Send + Sync>;

/// Every metric the controller exports.
#[derive(Clone)]
pub struct Metrics {
    /// Decisions made (one per queue per decision round), per target.
    decisions: Family<TargetLabels, Counter>,
    /// Apply calls that succeeded, per target.
    applies: Family<TargetLabels, Counter>,
    /// Apply calls that failed (refused, or no reply), per target.
    apply_failures: Family<TargetLabels, Counter>,
    /// Changes confirmed after their health check, per target.
    confirms: Family<TargetLabels, Counter>,
    /// Rollbacks, per target and reason.
    rollbacks: Family<TargetReasonLabels, Counter>,
    /// Guardrail interventions, per target and rule.
    clamps: Family<TargetReasonLabels, Counter>,
    /// Telemetry arrival to decision, seconds, per target: one actuator's slow decisions are
    /// not hidden among the others'.
    decision_latency_seconds: Family<TargetLabels, Histogram, fn() -> Histogram>,
    /// Seconds since the last telemetry batch, per target: set at each scrape from
    /// [`Metrics::telemetry_arrived`].
    telemetry_age_seconds: Family<TargetLabels, Gauge<f64, AtomicU64>>,
    /// When each target's last telemetry batch arrived (its connection, before the first).
    /// The age is worked out from it when scraped: set by the control loop, it stood still
    /// while the loop waited (a long `--interval`) or was blocked (a call timing out), and a
    /// stalled actuator read as fresh.
    telemetry_at: Arc<Mutex<HashMap<String, Instant>>>,
    /// Telemetry streams reopened after one was lost, per target.
    telemetry_reconnects: Family<TargetLabels, Counter>,
    /// How far the newest telemetry sample the controller had was behind the actuator's
    /// telemetry clock at its last measurement (a probe, an apply, a read-back), in wall-clock
    /// seconds, per target.
    pub telemetry_lag_seconds: Family<TargetLabels, Gauge<f64, AtomicU64>>,
    /// 1 while the kill switch is thrown (SIGUSR1, or the kill file exists): set at each
    /// scrape from [`Metrics::watch_kill_switch`], since a loop blocked on a hung actuator is
    /// just when it matters.
    kill_switch_thrown: Gauge,
    kill_switch_state: Arc<OnceLock<KillSwitchState>>,
    /// 1 while a change applied to the target awaits its health check and confirmation.
    change_pending: Family<TargetLabels, Gauge>,
    /// Decisions that kept a queue as it was because the learned model never trained at its
    /// line rate, per target.
    untrained_rate_holds: Family<TargetLabels, Counter>,
    /// Decisions that kept a queue as it was because its telemetry intervals are not the
    /// learned model's control interval, per target.
    untrained_interval_holds: Family<TargetLabels, Counter>,
    /// Learned-model choices made from an observation outside the model's training range (an
    /// extrapolation; `recommend` refuses those), per target.
    outside_training_decisions: Family<TargetLabels, Counter>,
    /// Current Kmin per queue.
    pub kmin_bytes: Family<QueueLabels, Gauge>,
    /// Current Kmax per queue.
    pub kmax_bytes: Family<QueueLabels, Gauge>,
    /// Current Pmax per queue.
    pub pmax: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    registry: Arc<Mutex<Registry>>,
}

/// The `rollbacks_total` reasons besides the health checks' (see `changes.rs`).
const OTHER_ROLLBACK_REASONS: [&str; 5] =
    ["kill_switch", "shutdown", "unknown_outcome", "reverted_at_deadline", "lease_ended"];

impl Metrics {
    /// A fresh registry with every metric registered under the `ecn_tuner_` prefix.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("ecn_tuner");
        let m = Metrics {
            decisions: Family::default(),
            applies: Family::default(),
            apply_failures: Family::default(),
            confirms: Family::default(),
            rollbacks: Family::default(),
            clamps: Family::default(),
            decision_latency_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e-5, 2.0, 20))
            }),
            telemetry_age_seconds: Family::default(),
            telemetry_at: Arc::default(),
            telemetry_reconnects: Family::default(),
            telemetry_lag_seconds: Family::default(),
            kill_switch_thrown: Gauge::default(),
            kill_switch_state: Arc::default(),
            change_pending: Family::default(),
            untrained_rate_holds: Family::default(),
            untrained_interval_holds: Family::default(),
            outside_training_decisions: Family::default(),
            kmin_bytes: Family::default(),
            kmax_bytes: Family::default(),
            pmax: Family::default(),
            registry: Arc::new(Mutex::new(Registry::default())),
        };
        r.register("decisions", "Decisions made (one per queue per round)", m.decisions.clone());
        r.register("applies", "Changes applied to the actuator", m.applies.clone());
        r.register(
            "apply_failures",
            "Apply calls that failed: refused by the actuator, or without a reply",
            m.apply_failures.clone(),
        );
        r.register("confirms", "Changes confirmed after a healthy check", m.confirms.clone());
        r.register("rollbacks", "Changes rolled back, by reason", m.rollbacks.clone());
        r.register("guardrail_clamps", "Guardrail interventions, by rule", m.clamps.clone());
        r.register(
            "untrained_rate_holds",
            "Decisions that kept a queue because the model never trained at its line rate",
            m.untrained_rate_holds.clone(),
        );
        r.register(
            "untrained_interval_holds",
            "Decisions that kept a queue because its telemetry interval is not the model's control interval",
            m.untrained_interval_holds.clone(),
        );
        r.register(
            "outside_training_decisions",
            "Learned-model choices made from an observation outside the model's training range",
            m.outside_training_decisions.clone(),
        );
        r.register(
            "decision_latency_seconds",
            "Time from a telemetry batch's arrival to the decision it triggers",
            m.decision_latency_seconds.clone(),
        );
        r.register("telemetry_age_seconds", "Seconds since the last telemetry batch", m.telemetry_age_seconds.clone());
        r.register(
            "telemetry_reconnects",
            "Telemetry streams reopened after one was lost",
            m.telemetry_reconnects.clone(),
        );
        r.register(
            "telemetry_lag_seconds",
            "How far the newest telemetry sample was behind the actuator's clock when last measured",
            m.telemetry_lag_seconds.clone(),
        );
        r.register(
            "kill_switch_thrown",
            "1 while the kill switch is thrown (SIGUSR1, or the kill file exists)",
            m.kill_switch_thrown.clone(),
        );
        r.register(
            "change_pending",
            "1 while a change applied to the target awaits its health check and confirmation",
            m.change_pending.clone(),
        );
        r.register("queue_kmin_bytes", "ECN Kmin in effect", m.kmin_bytes.clone());
        r.register("queue_kmax_bytes", "ECN Kmax in effect", m.kmax_bytes.clone());
        r.register("queue_pmax", "ECN Pmax in effect", m.pmax.clone());
        *m.registry.lock().expect("fresh mutex") = r;
        m
    }

    /// The series of `target`, every one created at 0 (each rollback reason, each guardrail):
    /// a series that appears only with its first event is invisible to dashboards, and
    /// `increase()` misses that first event.
    pub fn target(&self, target: &str) -> TargetSeries {
        let labels = TargetLabels { target: target.to_string() };
        let counter = |f: &Family<TargetLabels, Counter>| f.get_or_create(&labels).clone();
        let reasons = super::health::Check::ALL.map(super::health::Check::label);
        let by_reason = |f: &Family<TargetReasonLabels, Counter>, reason: &str| {
            f.get_or_create(&TargetReasonLabels { target: target.to_string(), reason: reason.into() }).clone()
        };
        TargetSeries {
            decisions: counter(&self.decisions),
            applies: counter(&self.applies),
            apply_failures: counter(&self.apply_failures),
            confirms: counter(&self.confirms),
            untrained_rate_holds: counter(&self.untrained_rate_holds),
            untrained_interval_holds: counter(&self.untrained_interval_holds),
            outside_training_decisions: counter(&self.outside_training_decisions),
            telemetry_reconnects: counter(&self.telemetry_reconnects),
            decision_latency_seconds: self.decision_latency_seconds.get_or_create(&labels).clone(),
            change_pending: self.change_pending.get_or_create(&labels).clone(),
            rollbacks: reasons
                .into_iter()
                .chain(OTHER_ROLLBACK_REASONS)
                .map(|r| (r, by_reason(&self.rollbacks, r)))
                .collect(),
            clamps: super::guardrails::Clamp::ALL.map(|c| (c, by_reason(&self.clamps, c.name()))).into_iter().collect(),
        }
    }

    /// `target`'s telemetry last arrived at `at`; its `telemetry_age_seconds` series appears
    /// with the first call.
    pub fn telemetry_arrived(&self, target: &str, at: Instant) {
        self.telemetry_at.lock().unwrap_or_else(|e| e.into_inner()).insert(target.to_string(), at);
    }

    /// Where `kill_switch_thrown` comes from: `thrown` says whether the switch is thrown now.
    /// The first call counts.
    pub fn watch_kill_switch(&self, thrown: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.kill_switch_state.set(Box::new(thrown));
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        if let Some(thrown) = self.kill_switch_state.get() {
            self.kill_switch_thrown.set(i64::from(thrown()));
        }
        let now = Instant::now();
        for (target, at) in self.telemetry_at.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let age = now.saturating_duration_since(*at).as_secs_f64();
            self.telemetry_age_seconds.get_or_create(&TargetLabels { target: target.clone() }).set(age);
        }
        let mut out = String::new();
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }

    /// Serve `GET /metrics` on `addr` until the process ends ([`super::exporter`]); returns
    /// the bound address.
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let me = self.clone();
        super::exporter::serve(addr, move || me.render()).await
    }
}

/// One target's series, from [`Metrics::target`]: handles on the registry's.
#[derive(Clone)]
pub struct TargetSeries {
    /// Decisions made (one per queue per decision round).
    pub decisions: Counter,
    /// Apply calls that succeeded.
    pub applies: Counter,
    /// Apply calls that failed: refused, or no reply.
    pub apply_failures: Counter,
    /// Changes confirmed after their health check.
    pub confirms: Counter,
    /// Decisions that kept a queue because the model never trained at its line rate.
    pub untrained_rate_holds: Counter,
    /// Decisions that kept a queue because its telemetry interval is not the model's.
    pub untrained_interval_holds: Counter,
    /// Learned-model choices made from an observation outside the training range.
    pub outside_training_decisions: Counter,
    /// Telemetry streams reopened after one was lost.
    pub telemetry_reconnects: Counter,
    /// Telemetry arrival to decision, seconds.
    pub decision_latency_seconds: Histogram,
    /// 1 while a change applied to the target awaits its health check and confirmation.
    pub change_pending: Gauge,
    rollbacks: HashMap<&'static str, Counter>,
    clamps: HashMap<Clamp, Counter>,
}

impl TargetSeries {
    /// Count a rollback under `reason`, one of the health checks' labels or
    /// `OTHER_ROLLBACK_REASONS`.
    pub fn rollback(&self, reason: &str) {
        debug_assert!(self.rollbacks.contains_key(reason), "rollback reason '{reason}' has no series");
        if let Some(c) = self.rollbacks.get(reason) {
            c.inc();
        }
    }

    /// Count an intervention of guardrail `clamp`.
    pub fn clamp(&self, clamp: Clamp) {
        self.clamps[&clamp].inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
