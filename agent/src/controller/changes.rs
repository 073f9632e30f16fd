//! Enforce mode's writes: an Apply with a confirm deadline, the health window that judges it
//! (confirm, or roll back and quarantine), reading the actuator back when an outcome is
//! unknown, and the kill switch.

use super::guardrails::TelemetryHealth;
use super::health::{self, Check, Finding, IntervalStats, WindowStats};
use super::log::Decision;
use super::metrics::TargetSeries;
use super::{
    current_generation, decision, record, said, set_queue_metrics, timed_out, to_pb, to_setting, ControlLoop, Mode,
    Planned, QueueState, RunReport,
};
use crate::error::CliError;
use ecn_env::EcnSetting;
use ecn_proto::v1 as pb;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// A change under health watch: per changed queue, the last `window` intervals before the
/// change and the intervals measured since.
///
/// Batches sampled before the change can arrive after the apply's reply, from a backlogged
/// stream or a slow network. The actuator's times sort them, on the telemetry's clock: an
/// interval that ends by the time the write landed joins the window before (it is more recent
/// than what the queue had when the change was made), one that starts once the change is in
/// effect joins the window after, and one in between joins neither. Unknown times (0) put
/// every interval that arrives into the window after.
pub(super) struct Pending {
    pub(super) generation: u64,
    pub(super) landed_ns: u64,
    pub(super) in_effect_from_ns: u64,
    pub(super) window: usize,
    pub(super) queues: Vec<usize>,
    /// Each changed queue's place in `queues` (and `before`, `after`): every interval that
    /// arrives during the watch looks its queue up here. A search of `queues` made the watch
    /// quadratic: at 39 000 changed queues a 100 ms batch took seconds, the telemetry fell
    /// behind, and the whole fabric fell back to its baseline.
    pub(super) slots: HashMap<usize, usize>,
    pub(super) before: Vec<Vec<IntervalStats>>,
    pub(super) after: Vec<Vec<IntervalStats>>,
    pub(super) deadline: Instant,
    pub(super) previous: Vec<(usize, EcnSetting)>,
    /// After a Rollback the actuator could not carry out: not before this is it tried again.
    pub(super) retry_rollback_at: Option<Instant>,
}

impl Pending {
    /// [`Pending::slots`] for `queues`.
    pub(super) fn slots_of(queues: &[usize]) -> HashMap<usize, usize> {
        queues.iter().enumerate().map(|(k, &i)| (i, k)).collect()
    }

    /// Sort an interval of changed queue `k` into its windows.
    pub(super) fn take(&mut self, k: usize, stats: IntervalStats) {
        if stats.start_ns >= self.in_effect_from_ns {
            self.after[k].push(stats);
        } else if stats.start_ns + stats.span_ns <= self.landed_ns {
            let before = &mut self.before[k];
            before.push(stats);
            if before.len() > self.window {
                before.remove(0);
            }
        }
    }
}

/// An apply the actuator took.
struct Applied {
    generation: u64,
    /// The confirm deadline, on this controller's clock.
    deadline: Instant,
    /// [`pb::ApplyResponse`]'s `landed_ts_ns` and `in_effect_from_ts_ns` (0: unknown).
    landed_ns: u64,
    in_effect_from_ns: u64,
}

/// A telemetry time from the actuator, where 0 means unknown.
fn known_time(ts_ns: u64) -> Option<u64> {
    (ts_ns > 0).then_some(ts_ns)
}

/// `rollbacks_total`'s reason for a change the actuator reverted by itself, its confirm
/// deadline having passed before the controller confirmed or rolled it back.
pub(super) const REVERTED_AT_DEADLINE: &str = "reverted_at_deadline";

/// `rollbacks_total`'s reason for a change pending when the actuator granted this controller
/// a new lease: it restarted, or let the old lease lapse, and reverted the change either way.
pub(super) const LEASE_ENDED: &str = "lease_ended";

/// Count a rollback the actuator accepted, in the run report and under `reason` in
/// `rollbacks_total`.
pub(super) fn count_rollback(report: &mut RunReport, series: &TargetSeries, reason: &str) {
    report.rollbacks += 1;
    series.rollback(reason);
}

impl ControlLoop {
    /// Judge the pending change, if any. Returns true while it is still being watched (no new
    /// round until it is judged).
    pub(super) async fn check_pending(&mut self) -> Result<bool, CliError> {
        let Some(p) = self.pending.take() else { return Ok(false) };
        if let Some(p) = self.finish_health_check(p).await? {
            self.pending = Some(p);
            return Ok(true);
        }
        self.generation = current_generation(&mut self.client).await.unwrap_or(self.generation);
        Ok(false)
    }

    /// Apply a round's changes and put them under health watch; a refused apply leaves the
    /// settings unchanged. Telemetry fallbacks go alone and are confirmed at once: they cannot
    /// be judged on telemetry, and a blind health check would roll them back, round after
    /// round. The other changes wait for a later round then. Shadow mode only logs.
    pub(super) async fn apply_round(&mut self, mut round: Vec<Planned>) -> Result<(), CliError> {
        let lease_id = match (&self.lease, self.cfg.mode) {
            (Some((id, _)), Mode::Enforce) => id.clone(),
            _ => return self.record_planned(&round, false, ""),
        };
        let fallback = round.iter().any(|p| p.telemetry_fallback);
        if fallback {
            let (fallbacks, deferred): (Vec<Planned>, Vec<Planned>) =
                round.into_iter().partition(|p| p.telemetry_fallback);
            self.record_planned(&deferred, false, "; deferred: telemetry fallbacks of this round go first")?;
            round = fallbacks;
        }
        let changes: Vec<(usize, EcnSetting)> = round.iter().map(|p| (p.queue, p.setting)).collect();
        let previous: Vec<(usize, EcnSetting)> = changes.iter().map(|(i, _)| (*i, self.queues[*i].current)).collect();
        let within = if fallback { Duration::ZERO } else { self.cfg.confirm_within };
        // The journal's word for the write: a fallback is not the policy's.
        let reason = if fallback {
            format!("telemetry fallback to the baseline {}", self.cfg.baseline.name())
        } else {
            format!("policy {}", self.cfg.policy)
        };
        let generation_before = self.generation;
        match self.apply(&lease_id, &changes, within, reason).await {
            Ok(Applied { generation: g, deadline, landed_ns, in_effect_from_ns }) => {
                self.freshness.measure(landed_ns);
                self.report.applies += 1;
                self.series.applies.inc();
                self.generation = g;
                for (i, _) in &changes {
                    set_queue_metrics(&self.metrics, &self.cfg.target, &self.queues[*i]);
                }
                if fallback {
                    for (i, _) in &changes {
                        self.queues[*i].fallback_refused_at = None;
                    }
                }
                let note = if fallback { "; confirmed at once (telemetry fallback)" } else { "" };
                // Logged after the change is under watch: a log that cannot be written ends the
                // controller, whose stop must then find the change to roll back.
                let logged = self.record_planned(&round, true, note);
                if fallback {
                    self.report.confirms += 1;
                    self.series.confirms.inc();
                    return logged;
                }
                let idx: Vec<usize> = changes.iter().map(|(i, _)| *i).collect();
                let window = self.cfg.health.window;
                let before = idx.iter().map(|&i| self.queues[i].watch.recent(window).copied().collect()).collect();
                let after = vec![Vec::new(); idx.len()];
                self.pending = Some(Pending {
                    generation: g,
                    landed_ns,
                    in_effect_from_ns,
                    window,
                    slots: Pending::slots_of(&idx),
                    queues: idx,
                    before,
                    after,
                    deadline,
                    previous,
                    retry_rollback_at: None,
                });
                logged
            }
            Err(e) => {
                warn!(error = %e, "apply failed; reading the actuator back");
                self.apply_failed(generation_before, e.clone());
                let logged = self.record_planned(&round, false, &format!("; {e}"));
                if fallback {
                    let now = Instant::now();
                    for (i, _) in &changes {
                        self.queues[*i].fallback_refused_at = Some(now);
                    }
                }
                // Whether the write landed all the same is read back first, log or no log.
                self.settle_unknown_outcome("Apply").await?;
                logged
            }
        }
    }

    /// Read the actuator's generation and settings back into `generation` and every queue's
    /// `current` (and their gauges); returns what it read. A failure leaves `needs_resync` set,
    /// so that no change is made until a read succeeds.
    pub(super) async fn resync(&mut self) -> Result<pb::Config, tonic::Status> {
        let mut answer = self.client.get_config(pb::GetConfigRequest {}).await;
        // The read-back that follows a failed call is sent as the channel reconnects, and a
        // call queued on the connection that just broke is cancelled within a millisecond:
        // the read-back after a lost reply almost always failed so, and the write's outcome
        // went unread. Two more tries, 0.1 and 0.3 s later, give the channel its new connection.
        for pause in [Duration::from_millis(100), Duration::from_millis(300)] {
            match &answer {
                // Not a call that ran out of --call-timeout (also `Cancelled`): retried, a hung
                // actuator held the loop, and the kill switch, three timeouts.
                Err(s) if s.code() == tonic::Code::Cancelled && !timed_out(s) => {
                    tokio::time::sleep(pause).await;
                    answer = self.client.get_config(pb::GetConfigRequest {}).await;
                }
                _ => break,
            }
        }
        let config = match answer {
            Ok(c) => c.into_inner(),
            Err(s) => {
                self.needs_resync = true;
                return Err(s);
            }
        };
        // An Apply whose reply was lost but whose change this read finds in effect did apply:
        // counted so, its rollback has an apply behind it, and `applies = confirms + rollbacks +
        // pending` holds (it went negative).
        if let Some(before) = self.unread_apply.take() {
            if config.generation > before && config.generation != config.confirmed_generation {
                self.report.applies += 1;
                self.series.applies.inc();
            }
        }
        if config.generation == config.confirmed_generation {
            self.unrolled = None;
        }
        self.generation = config.generation;
        self.take_settings(&config);
        // A change whose Confirm failed unread is settled by `try_resync`, which this keeps
        // being called: read back elsewhere (a new lease), it went unsettled for good.
        self.needs_resync = self.unsettled.is_some();
        self.freshness.measure(config.telemetry_now_ts_ns);
        Ok(config)
    }

    /// Every queue's `current` (and its gauges) as the actuator's `config` says.
    pub(super) fn take_settings(&mut self, config: &pb::Config) {
        for qs in &config.queues {
            let (Some(id), Some(setting)) = (qs.id.as_ref(), to_setting(qs.setting.as_ref())) else { continue };
            let Some(&i) = self.index.get(&id.to_string()) else { continue };
            let q = &mut self.queues[i];
            if q.set_current(setting, None) {
                set_queue_metrics(&self.metrics, &self.cfg.target, q);
            }
        }
    }

    /// Retry a failed read-back; whether the controller's view is in sync again, with no
    /// unconfirmed change in effect that this controller does not watch (one it could not roll
    /// back before: a new change would stack on it, and confirming that would confirm both).
    pub(super) async fn try_resync(&mut self) -> Result<bool, CliError> {
        match self.resync().await {
            Ok(config) => {
                if let Some((p, failure)) = self.unsettled.take() {
                    // In sync once it is settled (its own read-backs say otherwise if not).
                    self.needs_resync = false;
                    self.settle_failed_confirm(p, failure, config, false).await?;
                } else if self.pending.is_none() {
                    self.roll_back_unwatched(&config, "when read back").await?;
                }
                Ok(!self.needs_resync)
            }
            Err(s) => {
                warn!(error = %said(&s), "still cannot read the actuator back; no change until then");
                Ok(false)
            }
        }
    }

    /// A write failed, but it may have landed with only its reply lost: read the actuator back,
    /// and roll back an unconfirmed change that nobody is watching (only this controller
    /// writes, under its lease). Without this, a stale `generation` would have every later
    /// Apply refused, and `current` would be wrong for the step limits and the kill switch.
    async fn settle_unknown_outcome(&mut self, call: &str) -> Result<(), CliError> {
        match self.resync().await {
            Ok(config) => self.roll_back_unwatched(&config, &format!("after a failed {call}")).await.map(drop),
            Err(s) => {
                warn!(error = %said(&s), "cannot read the actuator back after a failed {call}");
                Ok(())
            }
        }
    }

    /// Roll back the unconfirmed change that `config`, just read back, shows in effect, if any
    /// (`when`: "after a failed Apply", ...), and read the actuator back again. Nobody
    /// health-checks such a change, so it is never inherited. While one is still in effect
    /// (the rollback failed), `needs_resync` holds every new change back: stacked on it, a
    /// change's confirm would confirm it too. The decision log gets a line for each queue the
    /// rollback moved, as read back. Returns whether no unconfirmed change is left in effect
    /// (there was none, or the rollback went through; without a lease, false).
    pub(super) async fn roll_back_unwatched(&mut self, config: &pb::Config, when: &str) -> Result<bool, CliError> {
        let Some((lease_id, _)) = self.lease.clone() else { return Ok(false) };
        if config.generation == config.confirmed_generation {
            return Ok(true);
        }
        let before: Vec<EcnSetting> = self.queues.iter().map(|q| q.current).collect();
        let mut rolled_back = false;
        warn!(
            generation = config.generation,
            "an unconfirmed change is in effect {when}: rolling it back, it was never health-checked"
        );
        let req = pb::RollbackRequest {
            lease_id,
            to_generation: None,
            reason: format!("generation {} is unconfirmed {when}", config.generation),
        };
        match self.client.rollback(req).await {
            Ok(_) => {
                count_rollback(&mut self.report, &self.series, "unknown_outcome");
                rolled_back = true;
                self.unrolled = None;
            }
            Err(s) => {
                warn!(error = %said(&s), "rollback failed; no change until it succeeds or the confirm deadline reverts it");
                self.unrolled = Some(config.generation);
            }
        }
        match self.resync().await {
            Ok(after) => self.needs_resync = after.generation != after.confirmed_generation,
            Err(s) => {
                warn!(error = %said(&s), "cannot read the actuator back after the rollback")
            }
        }
        if rolled_back {
            let reason = format!("rolled back generation {}: unconfirmed {when}", config.generation);
            for (q, was) in self.queues.iter().zip(before) {
                if q.current != was {
                    record(&self.log, &decision(&self.cfg, q, q.current, true, reason.clone()))?;
                }
            }
        }
        Ok(rolled_back)
    }

    /// Whether the actuator has reverted pending change `p` by itself, its confirm deadline
    /// having passed: a rollback now would be a no-op, and counting it as this controller's
    /// would misreport what happened. Asked (a read-back) only once the deadline has passed on
    /// this controller's clock, whose deadline starts before the actuator's.
    pub(super) async fn reverted_at_deadline(&mut self, p: &Pending) -> bool {
        if Instant::now() < p.deadline {
            return false;
        }
        self.change_gone(p).await
    }

    /// Whether the actuator, read back, no longer holds pending change `p` (rolled back,
    /// reverted, or replaced by a later generation); false where it cannot be read.
    pub(super) async fn change_gone(&mut self, p: &Pending) -> bool {
        match self.resync().await {
            Ok(c) => c.generation != p.generation && c.confirmed_generation != p.generation,
            Err(s) => {
                warn!(error = %said(&s), "cannot read the actuator back to see whether a change is gone");
                false
            }
        }
    }

    /// Pending change `p` was reverted by the actuator at its confirm deadline (`how`: what
    /// else the log should say): counted under `reverted_at_deadline`, its queues (on their
    /// settings before it, as read back) quarantined as after a rollback, and logged.
    pub(super) fn reverted_by_actuator(&mut self, p: &Pending, how: &str) -> Result<(), CliError> {
        warn!(
            generation = p.generation,
            queues = p.queues.len(),
            "the actuator reverted the change at its confirm deadline"
        );
        let why = format!("generation {} was reverted by the actuator at its confirm deadline{how}", p.generation);
        self.ended_by_actuator(p, REVERTED_AT_DEADLINE, why)
    }

    /// The actuator granted a new writer lease (it restarted, or let the old one lapse): a
    /// change pending under the old one was reverted with it. Read everything back, end the
    /// pending change as [`LEASE_ENDED`], and roll back whatever else is unconfirmed.
    pub(super) async fn lease_regranted(&mut self) -> Result<(), CliError> {
        let config = match self.resync().await {
            Ok(c) => c,
            Err(s) => {
                // `needs_resync` holds every change back until a read succeeds; the pending
                // change stays, judged (and rolled back) as its telemetry allows.
                warn!(error = %said(&s), "cannot read the actuator back after a new lease");
                return Ok(());
            }
        };
        // A change whose Confirm failed unread went the same way.
        let unsettled = self.unsettled.take().map(|(p, _)| p);
        self.needs_resync = false;
        for p in self.pending.take().into_iter().chain(unsettled) {
            warn!(
                generation = p.generation,
                queues = p.queues.len(),
                "the change pending under the old lease was reverted by the actuator"
            );
            self.ended_with_lease(&p)?;
        }
        self.roll_back_unwatched(&config, "under a new lease").await.map(drop)
    }

    /// Pending change `p` went with the writer lease: counted under [`LEASE_ENDED`].
    fn ended_with_lease(&mut self, p: &Pending) -> Result<(), CliError> {
        let why = format!(
            "generation {} ended with the writer lease: the actuator restarted or let it lapse, reverting it",
            p.generation
        );
        self.ended_by_actuator(p, LEASE_ENDED, why)
    }

    /// Pending change `p`, ended by the actuator: counted under `reason`, its queues (on their
    /// settings before it, as read back) quarantined as after a rollback, and logged.
    fn ended_by_actuator(&mut self, p: &Pending, reason: &str, why: String) -> Result<(), CliError> {
        count_rollback(&mut self.report, &self.series, reason);
        let until = Instant::now() + self.cfg.quarantine;
        for &i in &p.queues {
            let q = &mut self.queues[i];
            q.quarantine_until = Some(until);
            set_queue_metrics(&self.metrics, &self.cfg.target, q);
            record(&self.log, &decision(&self.cfg, q, q.current, true, why.clone()))?;
        }
        Ok(())
    }

    /// Apply the round's changes in one atomic call with a confirm deadline. On success the
    /// queues' `current` become the new settings.
    async fn apply(
        &mut self,
        lease_id: &str,
        round: &[(usize, EcnSetting)],
        confirm_within: Duration,
        reason: String,
    ) -> Result<Applied, String> {
        let changes = round
            .iter()
            .map(|(i, s)| pb::QueueSetting { id: Some(self.queues[*i].id.clone()), setting: Some(to_pb(*s)) })
            .collect();
        let req = pb::ApplyRequest {
            lease_id: lease_id.to_string(),
            changes,
            validate_only: false,
            expected_generation: Some(self.generation),
            confirm_within_ms: confirm_within.as_millis() as u64,
            reason,
        };
        // The actuator's deadline starts when it takes the request, and its reply comes after
        // the journal's sync and the device's write (seconds, for a SONiC write that timed out
        // and was read back): counted from the reply, a confirm could come after it.
        let sent = Instant::now();
        let resp = match self.client.apply(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => {
                // No lease held (the actuator restarted): take it again before the next round.
                self.renew_now |= s.code() == tonic::Code::PermissionDenied;
                // Only an answer is a refusal: without one the write may have landed.
                let refusal = !matches!(
                    s.code(),
                    tonic::Code::Cancelled
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Unavailable
                        | tonic::Code::Unknown
                );
                if refusal {
                    return Err(format!("the actuator refused the apply: {}", said(&s)));
                }
                // Its outcome is unread until a read-back succeeds (a fallback is confirmed as
                // it lands: nothing of it would be left to take back).
                if !confirm_within.is_zero() {
                    self.unread_apply = Some(self.generation);
                }
                return Err(format!("the apply got no answer ({}); whether it landed is read back", said(&s)));
            }
        };
        let (i, s) = round[0];
        let first = &self.queues[i];
        info!(
            generation = resp.generation,
            queues = round.len(),
            first = %format!("{} {} -> {}", first.id, first.current, s),
            "{}",
            // A fallback to the baseline goes without a deadline: confirmed as it lands.
            if resp.confirmed { "applied, confirmed without a health check" } else { "applied; watching health before confirming" }
        );
        let now = Instant::now();
        for (i, s) in round {
            self.queues[*i].set_current(*s, known_time(resp.in_effect_from_ts_ns));
            self.queues[*i].last_change = Some(now);
        }
        Ok(Applied {
            generation: resp.generation,
            deadline: sent + confirm_within,
            landed_ns: resp.landed_ts_ns,
            in_effect_from_ns: resp.in_effect_from_ts_ns,
        })
    }

    /// Judge a pending change once its window is complete (or its deadline is near): confirm it,
    /// or roll it back and quarantine its queues. Returns the change if it is still being watched.
    async fn finish_health_check(&mut self, p: Pending) -> Result<Option<Pending>, CliError> {
        let cfg = &self.cfg;
        let window = cfg.health.window;
        let now = Instant::now();
        let near_deadline = now + cfg.judging_margin() >= p.deadline;
        let complete = p.after.iter().all(|a| a.len() >= window);
        // Health cannot be confirmed without trustworthy telemetry: judge at once if it went bad.
        let blind = p
            .queues
            .iter()
            .any(|&i| self.queues[i].watch.health(now, cfg.guardrails.stale_after) != TelemetryHealth::Good);
        let Some((lease_id, _)) = &self.lease else { return Ok(None) };
        let before: Vec<WindowStats> = p.before.iter().map(WindowStats::of).collect();
        let after: Vec<WindowStats> = p.after.iter().map(WindowStats::of).collect();
        let verdict = if blind {
            Err(vec![Finding {
                check: Check::Telemetry,
                detail: "telemetry of a changed queue became stale or invalid during the health check".into(),
            }])
        } else {
            let mut why = Vec::new();
            for (k, &i) in p.queues.iter().enumerate() {
                let judged = if complete {
                    health::judge(&cfg.health, &before[k], &after[k])
                } else {
                    health::judge_strong(&cfg.health, &before[k], &after[k])
                };
                if let Err(w) = judged {
                    let queue = self.queues[i].id.to_string();
                    why.extend(w.into_iter().map(|f| Finding { detail: format!("{queue}: {}", f.detail), ..f }));
                }
            }
            if complete {
                if let Err(w) = health::judge_utilization(&cfg.health, &before, &after) {
                    why.push(w);
                }
            } else if why.is_empty() && !near_deadline {
                return Ok(Some(p));
            } else if why.is_empty() {
                why.push(Finding {
                    check: Check::Deadline,
                    detail: format!("fewer than {window} telemetry intervals arrived before the confirm deadline"),
                });
            }
            if why.is_empty() {
                Ok(())
            } else {
                Err(why)
            }
        };
        let judged_at = Instant::now();
        match verdict {
            Ok(()) => {
                let req = pb::ConfirmRequest { lease_id: lease_id.clone(), generation: p.generation };
                match self.client.confirm(req).await {
                    Ok(_) => self.confirmed(&p, ""),
                    Err(s) => {
                        warn!(error = %said(&s), "confirm failed; reading the actuator back");
                        self.after_failed_confirm(p, s, judged_at).await?;
                    }
                }
            }
            Err(why) => {
                let reason = why.iter().map(Finding::to_string).collect::<Vec<_>>().join("; ");
                let lease_id = lease_id.clone();
                if p.retry_rollback_at.is_some_and(|t| Instant::now() < t) {
                    return Ok(Some(p));
                }
                if self.reverted_at_deadline(&p).await {
                    return self.reverted_by_actuator(&p, &format!(", before it was judged: {reason}")).map(|()| None);
                }
                let cfg = &self.cfg;
                // Counted once, under the gravest check that failed (the order of `Check`).
                let gravest = why.iter().map(|f| f.check).min().unwrap_or(Check::Deadline);
                warn!(generation = p.generation, %reason, "degraded: rolling back");
                let req = pb::RollbackRequest { lease_id, to_generation: None, reason: reason.clone() };
                let resp = match self.client.rollback(req).await {
                    Ok(r) => r.into_inner(),
                    // The actuator could not take it back now (its device away: a switch's Redis
                    // restarting). The change stays pending: judged, and rolled back, again next
                    // round, or reverted by the actuator at its confirm deadline, which the next
                    // round then reads back. Ending the controller would stop all tuning for
                    // what the actuator makes good by itself.
                    Err(s) => {
                        // Refused for want of a lease (the actuator restarted): take one again
                        // at once, which ends the change as the lease's (`lease_regranted`).
                        self.renew_now |= s.code() == tonic::Code::PermissionDenied;
                        if p.retry_rollback_at.is_none() {
                            warn!(
                                generation = p.generation,
                                "Rollback failed ({}); the change stays pending: rolled back once the actuator can, \
                                 tried every --interval, or reverted by the actuator at its confirm deadline",
                                said(&s)
                            );
                        }
                        let mut p = p;
                        p.retry_rollback_at = Some(Instant::now() + self.cfg.interval);
                        return Ok(Some(p));
                    }
                };
                let until = Instant::now() + cfg.quarantine;
                count_rollback(&mut self.report, &self.series, gravest.label());
                for (k, (i, old)) in p.previous.iter().enumerate() {
                    let q = &mut self.queues[*i];
                    q.set_current(*old, known_time(resp.in_effect_from_ts_ns));
                    q.quarantine_until = Some(until);
                    set_queue_metrics(&self.metrics, &cfg.target, q);
                    let observation = serde_json::json!({"before": before[k], "after": after[k]});
                    let reason = format!("rolled back generation {}: {reason}", p.generation);
                    record(&self.log, &Decision { observation, ..decision(cfg, q, *old, true, reason) })?;
                }
            }
        }
        Ok(None)
    }

    /// A Confirm failed: the deadline may have passed first (the actuator reverted the change
    /// by itself), or the confirm landed and only its reply was lost. The actuator says which.
    async fn after_failed_confirm(
        &mut self,
        p: Pending,
        failure: tonic::Status,
        judged_at: Instant,
    ) -> Result<(), CliError> {
        match self.resync().await {
            Ok(config) => {
                // Sent again only on a verdict no newer telemetry interval could have changed.
                let fresh = judged_at.elapsed() <= self.cfg.interval;
                self.settle_failed_confirm(p, failure, config, fresh).await
            }
            Err(s) => {
                // Its fate is read at the next read-back that succeeds (`needs_resync` holds
                // every change back until then): counted as confirmed, reverted or rolled back,
                // and its queues quarantined as such. Forgotten here, it went uncounted and a
                // change the actuator had reverted was made again at once.
                warn!(
                    error = %said(&s),
                    generation = p.generation,
                    "cannot read the actuator back after a failed Confirm; the change is settled once it can be"
                );
                self.unsettled = Some((p, failure));
                Ok(())
            }
        }
    }

    /// Pending change `p` was confirmed (`how`: what else the log should say): counted and said.
    fn confirmed(&mut self, p: &Pending, how: &str) {
        self.report.confirms += 1;
        self.series.confirms.inc();
        info!(generation = p.generation, queues = p.queues.len(), "healthy: confirmed{how}");
    }

    /// Settle pending change `p`, whose Confirm failed with `failure`, by `config` read back
    /// after it: confirmed after all (its reply lost), gone with the lease, reverted at its
    /// deadline, or still waiting for a confirm. In the last case a transport failure's Confirm
    /// is sent again if `may_confirm_again` (the change was judged healthy within an interval);
    /// otherwise, or if that fails too, it is rolled back.
    pub(super) async fn settle_failed_confirm(
        &mut self,
        p: Pending,
        failure: tonic::Status,
        config: pb::Config,
        may_confirm_again: bool,
    ) -> Result<(), CliError> {
        if config.confirmed_generation == p.generation {
            self.confirmed(&p, " (the reply was lost)");
            return Ok(());
        }
        if failure.code() == tonic::Code::PermissionDenied {
            // The actuator holds no lease of ours (it restarted, or let it lapse): the change
            // went with the lease. Take a lease again before the next round.
            self.renew_now = true;
            warn!(generation = p.generation, "the change could not be confirmed: the writer lease is gone");
            return self.ended_with_lease(&p);
        }
        if config.generation != p.generation {
            let how = format!(", before its confirm landed ({})", said(&failure));
            return self.reverted_by_actuator(&p, &how);
        }
        // Still waiting for its confirm. One lost to the network (not refused) is sent again
        // while the verdict is fresh: rolling back a change judged healthy for a reset
        // connection undid good work.
        let transport = matches!(
            failure.code(),
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded | tonic::Code::Unknown
        );
        if may_confirm_again && transport {
            if let Some((lease_id, _)) = self.lease.clone() {
                let req = pb::ConfirmRequest { lease_id, generation: p.generation };
                match self.client.confirm(req).await {
                    Ok(_) => {
                        self.confirmed(&p, " (sent again)");
                        return Ok(());
                    }
                    Err(s) => warn!(error = %said(&s), "the Confirm sent again failed too"),
                }
                // Read again: the second Confirm's outcome is as unknown as the first's.
                let config = match self.resync().await {
                    Ok(c) => c,
                    Err(s) => {
                        warn!(error = %said(&s), "cannot read the actuator back after a failed Confirm");
                        self.unsettled = Some((p, failure));
                        return Ok(());
                    }
                };
                return Box::pin(self.settle_failed_confirm(p, failure, config, false)).await;
            }
        }
        // Still waiting for a confirm that will not come: take it back now (that logs each
        // queue it moves). Its queues keep their known-good setting for the quarantine, as
        // after a rollback.
        warn!(generation = p.generation, queues = p.queues.len(), "the change could not be confirmed: rolling it back");
        self.roll_back_unwatched(&config, "after a failed Confirm").await?;
        let until = Instant::now() + self.cfg.quarantine;
        for &i in &p.queues {
            self.queues[i].quarantine_until = Some(until);
        }
        Ok(())
    }

    /// A pending change rolled back whole by `why` (the kill switch, a shutdown): its queues
    /// are on their previous settings again, and the decision log says so, as after a health
    /// check's rollback.
    pub(super) fn taken_back(&mut self, p: &Pending, in_effect_from_ts_ns: u64, why: &str) -> Result<(), CliError> {
        for (i, old) in &p.previous {
            let q = &mut self.queues[*i];
            q.set_current(*old, known_time(in_effect_from_ts_ns));
            set_queue_metrics(&self.metrics, &self.cfg.target, q);
            let reason = format!("{why}: rolled back generation {}, never confirmed", p.generation);
            record(&self.log, &decision(&self.cfg, q, *old, true, reason))?;
        }
        Ok(())
    }

    /// Kill switch: any pending change rolled back, then every queue back to its baseline
    /// (inside the actuator's bounds), confirmed at once; no further changes.
    pub(super) async fn kill_switch(&mut self) -> Result<(), CliError> {
        let Some((lease_id, _)) = self.lease.clone() else {
            // Shadow mode (or no lease yet): nothing to undo, but a drill must show it took.
            warn!(target = %self.cfg.target, "kill switch thrown: this controller holds no writer lease and writes \
                 nothing; no decisions until it is released");
            return Ok(());
        };
        // A change whose Confirm failed unread is settled first (counted, logged); until the
        // actuator can be read, nothing below could be done anyway.
        if self.unsettled.is_some() && !self.try_resync().await? {
            return Err(CliError::Failed("kill switch: the actuator cannot be read back".into()));
        }
        if let Some(p) = self.pending.take() {
            if self.reverted_at_deadline(&p).await {
                self.reverted_by_actuator(&p, " (kill switch)")?;
            } else {
                let req = pb::RollbackRequest {
                    lease_id: lease_id.clone(),
                    to_generation: None,
                    reason: format!("kill switch; generation {} was never confirmed", p.generation),
                };
                let resp = match self.client.rollback(req).await {
                    Ok(r) => r.into_inner(),
                    Err(s) => {
                        // Kept for the kill switch's next try, which settles it (reverted at
                        // its deadline by then, or rolled back); dropped, it went uncounted and
                        // unlogged.
                        self.pending = Some(p);
                        return Err(CliError::Failed(format!("kill switch rollback: {}", said(&s))));
                    }
                };
                count_rollback(&mut self.report, &self.series, "kill_switch");
                self.taken_back(&p, resp.in_effect_from_ts_ns, "kill switch")?;
            }
        }
        // What the actuator holds, not what this controller believes: a lost reply can leave a
        // queue off its baseline while `current` says otherwise.
        self.resync().await.map_err(|s| CliError::Failed(format!("kill switch: GetConfig: {}", said(&s))))?;
        let guardrails = &self.guardrails;
        let queues = &mut self.queues;
        let target = |q: &QueueState| guardrails.safe_baseline(q.baseline, q.xoff_bytes);
        let off_baseline: Vec<usize> = (0..queues.len()).filter(|&i| queues[i].current != target(&queues[i])).collect();
        if off_baseline.is_empty() {
            // Nothing to write, but the operator must see that it took: no change follows.
            warn!("kill switch engaged: every queue is already on its baseline; no further changes");
            return Ok(());
        }
        warn!(queues = off_baseline.len(), "kill switch engaged: returning every queue to its baseline");
        let changes = off_baseline
            .iter()
            .map(|&i| pb::QueueSetting { id: Some(queues[i].id.clone()), setting: Some(to_pb(target(&queues[i]))) })
            .collect();
        let req = pb::ApplyRequest {
            lease_id,
            changes,
            validate_only: false,
            expected_generation: None,
            confirm_within_ms: 0,
            reason: "kill switch".into(),
        };
        let resp = match self.client.apply(req).await {
            Ok(resp) => resp,
            Err(s) => {
                self.apply_failed(self.generation, format!("kill switch: {}", said(&s)));
                return Err(CliError::Failed(format!("kill switch apply: {}", said(&s))));
            }
        };
        let resp = resp.into_inner();
        self.generation = resp.generation;
        // Confirmed at once (no deadline): an apply and a confirm, as a telemetry fallback is.
        self.report.applies += 1;
        self.series.applies.inc();
        self.report.confirms += 1;
        self.series.confirms.inc();
        for i in off_baseline {
            let setting = target(&queues[i]);
            let q = &mut queues[i];
            q.set_current(setting, known_time(resp.in_effect_from_ts_ns));
            set_queue_metrics(&self.metrics, &self.cfg.target, q);
            record(&self.log, &decision(&self.cfg, q, setting, true, "kill switch: baseline".into()))?;
        }
        Ok(())
    }
}
