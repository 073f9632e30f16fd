//! The gRPC service (`ecn_tuner.v1.Actuator`) over any [`Backend`].
//!
//! Everything that makes the actuator safe lives here, the same for every backend:
//! - the single-writer lease ([`super::lease`]);
//! - validation of every change set before anything changes ([`super::validate`]);
//! - generations and commit-confirm ([`super::ledger`]), with a server-side timer that reverts
//!   an unconfirmed change when its deadline passes, whether or not its client is still there;
//! - the journal ([`super::journal`]);
//! - the clients' gRPC deadlines: a call that changes something and waited for the state past
//!   its `grpc-timeout` is not carried out.
//!
//! All state sits behind one mutex, held only for short synchronous sections (backend calls
//! are quick by contract, and the journal write is one append), so changes, reverts and their
//! journal lines are totally ordered.

use super::admission::{Arrived, StreamPlaces};
use super::backend::{Backend, BackendCaps, NoTelemetry};
use super::journal::{unix_ms, Event, EventKind, Journal, QueueEntry};
use super::lease::{LeaseError, LeaseTable, DEFAULT_TTL, MAX_TTL};
use super::ledger::{Deadline, Ledger, LedgerError};
use super::telemetry::Coarsener;
use super::validate::{check_changes, check_setting, quoted, quoted_at_most, QueueIndex};
use crate::grpc_timeout;
use ecn_env::EcnSetting;
use ecn_proto::v1 as pb;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{broadcast, mpsc, watch, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{debug, error, info, warn};

/// Longest confirm deadline accepted: an unconfirmed change must not linger for days.
pub const MAX_CONFIRM_WITHIN: Duration = Duration::from_secs(3600);

/// The most queues of a refused request its journal line records.
const MAX_REFUSED_QUEUES: usize = 64;

/// The most characters of an Apply's `reason` its journal line keeps (free text; the rest
/// is cut, not refused).
const MAX_REASON_CHARS: usize = 1024;

/// How often the journal looks whether the backend has settled a write in doubt.
const SETTLE_CHECK: Duration = Duration::from_millis(500);

/// Mutable state, behind one lock.
struct State {
    ledger: Ledger,
    leases: LeaseTable,
    journal: Journal,
    /// The generation a deadline (or stop-time) revert to it failed for, once that failure is
    /// journaled: the watcher retries every second while the device is away, and one `reject`
    /// line says it; the retries do not add one each.
    failed_revert: Option<u64>,
    /// How many refusals of requests without a lease may still be journaled.
    unleased_refusals: RefusalBudget,
    /// How many refusals of the writer role (another writer holds it) may still be logged: a
    /// flood of those wrote a line each, 400 KB in a second.
    acquire_refusals: RefusalBudget,
    /// How many calls refused for their client's deadline may still be logged: anyone who can
    /// send calls can send them with a deadline already gone.
    late_refusals: RefusalBudget,
    /// Set by [`ActuatorService::stop`] with its revert: the server's connections outlive its
    /// accept loop, and an Apply that came in after the revert reached the device with nobody
    /// left to confirm or revert it (and the stop blamed a failed revert for it).
    stopping: bool,
}

/// Refusals of requests that hold no lease journaled in a burst, then one a second (as many a
/// minute): anyone with the token can send those as fast as they like, and each line is synced
/// to disk. The rest are counted, and the next such line journaled says how many were left out.
/// A flood of them filled the journal's disk in seconds, after which the lease holder could
/// change nothing, not even roll back.
const UNLEASED_REFUSALS_PER_MINUTE: f64 = 60.0;

/// A token bucket of journal lines for refusals.
struct RefusalBudget {
    lines: f64,
    at: Instant,
    left_out: u64,
}

impl RefusalBudget {
    fn new(now: Instant) -> Self {
        RefusalBudget { lines: UNLEASED_REFUSALS_PER_MINUTE, at: now, left_out: 0 }
    }

    /// At `now`, whether one more refusal is journaled: `Some(n)` with the `n` refusals left
    /// out since the last, or `None` (it is counted).
    fn take(&mut self, now: Instant) -> Option<u64> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * UNLEASED_REFUSALS_PER_MINUTE / 60.0;
        (self.lines, self.at) = ((self.lines + refill).min(UNLEASED_REFUSALS_PER_MINUTE), now);
        if self.lines < 1.0 {
            self.left_out += 1;
            return None;
        }
        self.lines -= 1.0;
        Some(std::mem::take(&mut self.left_out))
    }
}

struct Inner<B> {
    backend: B,
    caps: BackendCaps,
    index: QueueIndex,
    state: Mutex<State>,
    /// Wakes the deadline watcher when the pending deadline changes.
    deadline_changed: Notify,
    /// Flips to true when the server stops; ends telemetry streams and the watcher.
    stopping: watch::Receiver<bool>,
    /// [`pb::Capabilities::instance_id`]: random, this process's.
    instance_id: String,
    /// Places for telemetry streams; each stream holds one until it ends.
    streams: Arc<StreamPlaces>,
}

/// The actuator service. Cheap to clone (shared state).
pub struct ActuatorService<B> {
    inner: Arc<Inner<B>>,
}

impl<B> Clone for ActuatorService<B> {
    fn clone(&self) -> Self {
        ActuatorService { inner: self.inner.clone() }
    }
}

impl<B: Backend> ActuatorService<B> {
    /// Serve `backend`, starting after the journal's last generation (at 1 for a new journal)
    /// with the settings it has now.
    pub fn new(backend: B, mut journal: Journal, stopping: watch::Receiver<bool>) -> ActuatorService<B> {
        let caps = backend.capabilities().clone();
        let initial = backend.read_settings();
        for (cap, s) in caps.queues.iter().zip(&initial) {
            // The device's own starting point is not ours to refuse, but it should be known.
            if let Err(e) = check_setting(cap, &caps.bounds, s) {
                warn!("initial setting violates the actuator's safety checks: {e}");
            }
        }
        let index = QueueIndex::new(&caps);
        // Generations continue after the journal's last, so a number never names two changes.
        let generation = journal.last_generation() + 1;
        if generation > 1 {
            // Say what the device starts with, or the journal would no longer tell what it ran:
            // a device that starts afresh does not hold the journal's last settings, and one
            // that keeps them may hold an edit made outside ecn-tuner meanwhile (it used to
            // take that as this generation without a line, and a rollback to it put back
            // settings the journal never showed).
            let all: Vec<(usize, EcnSetting)> = initial.iter().copied().enumerate().collect();
            let detail = if backend.keeps_changes_across_restarts() {
                format!(
                    "the {} device kept its settings across the restart: generation {generation} is what this \
                     actuator found there (the journal's last, unless changed outside ecn-tuner meanwhile)",
                    caps.backend
                )
            } else {
                format!(
                    "the {} backend starts afresh with each actuator: generation {generation} is its own settings, \
                     not the journal's last",
                    caps.backend
                )
            };
            let e = Event::now(EventKind::Start, generation, generation, QueueEntry::list(&caps, &all)).detail(detail);
            if let Err(err) = journal.write(&e) {
                error!("{err}");
            }
        }
        let ledger = Ledger::starting_at(generation, initial);
        let state = State {
            ledger,
            leases: LeaseTable::default(),
            journal,
            failed_revert: None,
            stopping: false,
            unleased_refusals: RefusalBudget::new(Instant::now()),
            acquire_refusals: RefusalBudget::new(Instant::now()),
            late_refusals: RefusalBudget::new(Instant::now()),
        };
        let streams = StreamPlaces::new(super::admission::telemetry_streams(caps.queues.len()));
        ActuatorService {
            inner: Arc::new(Inner {
                backend,
                caps,
                index,
                state: Mutex::new(state),
                deadline_changed: Notify::new(),
                stopping,
                // As random as a lease id, and like one no secret.
                instance_id: new_lease_id(),
                streams,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would leave the state as it was before the failed
        // operation (every mutation comes last), so a poisoned lock is still usable.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state lock, for a call whose client gives up on it at `by` (its `grpc-timeout`): one
    /// that reached the lock past that (behind a slow device write, after a slow upload) is not
    /// carried out. Its client has taken it for failed by then and acted on that (a read-back, a
    /// rollback, a new lease): carried out late, and in no set order among the calls waiting with
    /// it (the lock is not fair), a renewal re-granted the writer role to a controller that had
    /// gone, an Apply landed after the read-back that followed it, a Rollback undid a later change.
    /// Refusals are logged, not journaled: they change nothing, and a journal line is synced under
    /// this lock, which a burst of late calls would then hold for a sync each.
    fn lock_by(&self, call: &str, by: Option<Instant>) -> Result<MutexGuard<'_, State>, Status> {
        let mut st = self.lock();
        match by {
            Some(by) if Instant::now() >= by => {
                if let Some(left_out) = st.late_refusals.take(Instant::now()) {
                    warn!(call, left_out, "a call came to the actuator past its client's deadline: not carried out");
                }
                Err(Status::deadline_exceeded(format!(
                    "{call} reached the actuator's state past its deadline (grpc-timeout; held up by a slow device \
                     write or a slow upload): not carried out"
                )))
            }
            _ => Ok(st),
        }
    }

    fn entries(&self, changes: &[(usize, EcnSetting)]) -> Vec<QueueEntry> {
        QueueEntry::list(&self.inner.caps, changes)
    }

    /// Journal a refusal and turn it into the gRPC status.
    fn reject(&self, st: &mut State, status: Status, queues: Vec<QueueEntry>, controller: Option<&str>) -> Status {
        self.journal_refusal(st, &status, queues, controller, "");
        status
    }

    /// [`Self::reject`] for a request that holds no lease, which anyone with the token may send
    /// as fast as they like: journaled within [`RefusalBudget`], the rest counted, and the next
    /// one journaled says how many were left out.
    fn reject_unleased(&self, st: &mut State, status: Status, queues: Vec<QueueEntry>) -> Status {
        let Some(left_out) = st.unleased_refusals.take(Instant::now()) else { return status };
        let note = match left_out {
            0 => String::new(),
            n => format!(
                " ({n} refusals of requests without a lease before this one were not journaled: more than a \
                 burst of {UNLEASED_REFUSALS_PER_MINUTE}, then one a second)"
            ),
        };
        if !self.journal_refusal(st, &status, queues, None, &note) {
            st.unleased_refusals.left_out += left_out;
        }
        status
    }

    /// Write a refusal's journal line (`note` after its status); whether it was written.
    fn journal_refusal(
        &self,
        st: &mut State,
        status: &Status,
        mut queues: Vec<QueueEntry>,
        controller: Option<&str>,
        note: &str,
    ) -> bool {
        // A refused request's size is its sender's choice: the line keeps the first queues (a
        // 60 000-entry request without a lease wrote megabytes, synced, per call), and says so.
        let cut = match queues.len() {
            n if n > MAX_REFUSED_QUEUES => format!(" (the first {MAX_REFUSED_QUEUES} of its {n} queues)"),
            _ => String::new(),
        };
        queues.truncate(MAX_REFUSED_QUEUES);
        let e = Event::now(EventKind::Reject, st.ledger.current(), st.ledger.confirmed(), queues)
            .detail(format!("{:?}: {}{note}{cut}", status.code(), status.message()))
            .controller(controller);
        warn!(code = ?status.code(), "refused: {}", status.message());
        match st.journal.write(&e) {
            Ok(()) => true,
            Err(err) => {
                error!("{err}");
                false
            }
        }
    }

    /// After a failed device write: if the backend cannot tell whether it will still land, every
    /// journal line says so from now on, until [`Self::settle_doubt`]. A restart on a journal
    /// that ends that way refuses, as it does after a crash between an apply and its confirm.
    fn note_doubt(&self, st: &mut State, generation: u64) {
        if self.inner.backend.in_doubt() && st.journal.in_doubt().is_none() {
            error!(
                generation,
                "the {} backend cannot tell whether the failed write of generation {generation} will still land; \
                 it puts the settings of generation {} back once it can",
                self.inner.caps.backend,
                st.ledger.current()
            );
            st.journal.doubt(Some(generation));
            // The watcher looks for the backend to settle it only while it knows of the doubt.
            self.inner.deadline_changed.notify_one();
        }
    }

    /// Once the backend has settled a write in doubt (it can no longer land, and the device holds
    /// the current generation's settings), journal that, without the stamp.
    fn settle_doubt(&self, st: &mut State) {
        let Some(doubt) = st.journal.in_doubt() else { return };
        if self.inner.backend.in_doubt() {
            return;
        }
        let current = st.ledger.current();
        let e = Event::now(EventKind::Revert, current, st.ledger.confirmed(), Vec::new()).detail(format!(
            "the failed write of generation {doubt} can no longer land: the device holds the settings of generation \
             {current}"
        ));
        st.journal.doubt(None);
        match st.journal.write(&e) {
            Ok(()) => info!(generation = current, "the failed write of generation {doubt} is settled"),
            Err(err) => {
                // The stamp stays on the lines until one says otherwise: the safe side.
                error!("{err}");
                st.journal.doubt(Some(doubt));
            }
        }
    }

    /// Refuse a change while a revert that fell due has failed: a late Confirm would keep the
    /// expired change, an Apply would carry it along (one without a deadline confirming it
    /// outright). The timer and every later call retry the revert.
    fn revert_owed(&self, st: &mut State, queues: Vec<QueueEntry>) -> Status {
        let s = Status::unavailable(format!(
            "the confirm deadline of generation {} passed and reverting to generation {} failed on the {} backend; \
             nothing else changes until that revert goes through (it is retried)",
            st.ledger.due().unwrap_or(st.ledger.current()),
            st.ledger.confirmed(),
            self.inner.caps.backend
        ));
        self.reject(st, s, queues, None)
    }

    fn check_lease(&self, st: &mut State, lease_id: &str, queues: &[QueueEntry]) -> Result<String, Status> {
        match st.leases.check(lease_id, Instant::now()) {
            Ok(l) => Ok(l.controller_id.clone()),
            Err(e) => Err(self.reject_unleased(st, Status::permission_denied(e.to_string()), queues.to_vec())),
        }
    }

    fn do_acquire(&self, req: pb::AcquireWriterRequest, by: Option<Instant>) -> Result<pb::WriterLease, Status> {
        if let Err(why) = super::lease::check_controller_id(&req.controller_id) {
            return Err(Status::invalid_argument(format!("controller_id {why}")));
        }
        let ttl = match req.ttl_ms {
            0 => DEFAULT_TTL,
            ms if Duration::from_millis(ms) > MAX_TTL => {
                return Err(Status::invalid_argument(format!(
                    "ttl_ms ({ms}) is above the maximum ({})",
                    MAX_TTL.as_millis()
                )))
            }
            ms => Duration::from_millis(ms),
        };
        let mut st = self.lock_by("AcquireWriter", by)?;
        let now_ms = unix_ms(SystemTime::now());
        let previous = st.leases.current_id().map(str::to_string);
        match st.leases.acquire(&req.controller_id, ttl, Instant::now(), now_ms, new_lease_id) {
            Ok(l) => {
                debug!(controller = %l.controller_id, ttl_ms = ttl.as_millis() as u64, "writer lease granted");
                // A change left unconfirmed by the previous writer is not the new writer's to
                // confirm: its next Confirm would otherwise make it permanent unjudged.
                if previous.as_deref() != Some(l.id.as_str()) && st.ledger.deadline().is_some() {
                    let why = format!("the writer role passed to controller '{}'", l.controller_id);
                    if !self.revert_locked(&mut st, Instant::now(), Some(&why)) {
                        st.leases.release(&l.id);
                        return Err(Status::unavailable(format!(
                            "{why}, but reverting the previous writer's unconfirmed change failed; try again"
                        )));
                    }
                }
                Ok(pb::WriterLease { lease_id: l.id, expires_unix_ms: l.expires_unix_ms })
            }
            Err(e @ LeaseError::HeldByOther { .. }) => {
                // Logged within a budget, as refusals without a lease are journaled.
                if let Some(left_out) = st.acquire_refusals.take(Instant::now()) {
                    let note = match left_out {
                        0 => String::new(),
                        n => format!(" ({n} more refused since the last line: a burst is logged, then one a second)"),
                    };
                    warn!(controller = %req.controller_id, "writer role refused: {e}{note}");
                }
                Err(Status::failed_precondition(e.to_string()))
            }
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }

    fn do_release(
        &self,
        req: pb::ReleaseWriterRequest,
        by: Option<Instant>,
    ) -> Result<pb::ReleaseWriterResponse, Status> {
        if let Some(c) = self.lock_by("ReleaseWriter", by)?.leases.release(&req.lease_id) {
            info!(controller = %c, "writer lease released");
        }
        Ok(pb::ReleaseWriterResponse {})
    }

    fn do_apply(&self, req: pb::ApplyRequest, by: Option<Instant>) -> Result<pb::ApplyResponse, Status> {
        let mut st = self.lock_by("Apply", by)?;
        if st.stopping && !req.validate_only {
            return Err(stopping());
        }
        self.settle_doubt(&mut st);
        let reverted = self.revert_locked(&mut st, Instant::now(), None);
        let requested: Vec<QueueEntry> = req.changes.iter().map(raw_entry).collect();
        if !reverted && !req.validate_only {
            return Err(self.revert_owed(&mut st, requested));
        }
        // validate_only changes nothing, so it needs no lease (a shadow-mode controller may
        // check its proposals) and leaves no journal line (the journal records changes and
        // refused changes, not questions).
        let controller =
            if req.validate_only { None } else { Some(self.check_lease(&mut st, &req.lease_id, &requested)?) };
        let ctl = controller.as_deref();
        let refuse = |this: &Self, st: &mut State, s: Status| {
            if req.validate_only {
                debug!(code = ?s.code(), "validate_only refused: {}", s.message());
                s
            } else {
                this.reject(st, s, requested.clone(), ctl)
            }
        };
        if let Some(expected) = req.expected_generation {
            if expected != st.ledger.current() {
                let s = Status::aborted(format!(
                    "expected_generation {expected} is stale: the current generation is {}",
                    st.ledger.current()
                ));
                return Err(refuse(self, &mut st, s));
            }
        }
        let changes = match check_changes(&self.inner.caps, &self.inner.index, &req.changes) {
            Ok(c) => c,
            Err(msg) => return Err(refuse(self, &mut st, Status::invalid_argument(msg))),
        };
        let within = Duration::from_millis(req.confirm_within_ms);
        if within > MAX_CONFIRM_WITHIN {
            let s = Status::invalid_argument(format!(
                "confirm_within_ms ({}) is above the maximum ({})",
                req.confirm_within_ms,
                MAX_CONFIRM_WITHIN.as_millis()
            ));
            return Err(refuse(self, &mut st, s));
        }
        if req.validate_only {
            let (current, confirmed) = (st.ledger.current(), st.ledger.confirmed());
            return Ok(pb::ApplyResponse {
                generation: current,
                confirmed: current == confirmed,
                confirm_deadline_unix_ms: st.ledger.deadline().map_or(0, |d| d.unix_ms()),
                ..Default::default()
            });
        }
        let staged = st.ledger.staged(&changes);
        let deadline = (!within.is_zero()).then(|| Deadline { at: Instant::now() + within });
        let generation = st.ledger.next();
        // An apply without a deadline is confirmed at once, and with it any unconfirmed stack
        // it lands on, but only once it is on the device. Until then its line says the stack is
        // still pending: a crash during the write must leave a journal that ends unconfirmed,
        // or a restart would serve the stack's never-confirmed settings as confirmed.
        let stacked = st.ledger.confirmed() != st.ledger.current();
        let confirmed_after = if deadline.is_none() && !stacked { generation } else { st.ledger.confirmed() };
        let mut e = Event::now(EventKind::Apply, generation, confirmed_after, self.entries(&changes))
            .detail(if req.reason.is_empty() {
                "apply".to_string()
            } else {
                quoted_at_most(&req.reason, MAX_REASON_CHARS)
            })
            .controller(ctl);
        e.confirm_deadline_unix_ms = deadline.map(|d| d.unix_ms());
        // The line goes to disk before the device changes: an actuator killed in between must
        // leave a journal that ends on this unconfirmed change, not on the confirmed state
        // before it (a restart would take the device's tables for confirmed settings).
        if let Err(err) = st.journal.write(&e) {
            error!("{err}");
            return Err(Status::unavailable(format!("{err}; nothing changed")));
        }
        if let Err(e) = self.inner.backend.apply(&staged) {
            // The reject line puts the journal's last state back to the unchanged generation;
            // its number goes to the next change. A write that may still land stays on record.
            self.note_doubt(&mut st, generation);
            let s = Status::internal(format!(
                "the {} backend failed to apply generation {generation}: {e}",
                self.inner.caps.backend
            ));
            return Err(self.reject(&mut st, s, requested, ctl));
        }
        let times = self.inner.backend.write_times();
        let confirmed_before = st.ledger.confirmed();
        st.ledger.commit(staged, deadline);
        if deadline.is_none() && stacked {
            let e = Event::now(EventKind::Confirm, generation, generation, Vec::new())
                .detail(format!(
                    "generation {generation} applied without a deadline: confirmed, with the unconfirmed \
                     generations beneath it (previously confirmed: {confirmed_before})"
                ))
                .controller(ctl);
            if let Err(err) = st.journal.write(&e) {
                // The journal still ends on a pending change: a restart refuses to start rather
                // than trust the device, which is the safe side.
                error!("{err}");
            }
        }
        if deadline.is_some() {
            self.inner.deadline_changed.notify_one();
        }
        // A write that succeeds replaces whatever an earlier one in doubt could have left.
        self.settle_doubt(&mut st);
        info!(
            generation,
            queues = changes.len(),
            controller = ctl.unwrap_or(""),
            confirm_within_ms = req.confirm_within_ms,
            "applied"
        );
        Ok(pb::ApplyResponse {
            generation,
            confirmed: deadline.is_none(),
            // When this change reverts unless confirmed: the stack's earliest deadline, which
            // may be an earlier apply's.
            confirm_deadline_unix_ms: deadline.and(st.ledger.deadline()).map_or(0, |d| d.unix_ms()),
            landed_ts_ns: times.map_or(0, |t| t.landed_ns),
            in_effect_from_ts_ns: times.map_or(0, |t| t.in_effect_from_ns),
        })
    }

    fn do_confirm(&self, req: pb::ConfirmRequest, by: Option<Instant>) -> Result<pb::ConfirmResponse, Status> {
        let mut st = self.lock_by("Confirm", by)?;
        self.settle_doubt(&mut st);
        if !self.revert_locked(&mut st, Instant::now(), None) {
            return Err(self.revert_owed(&mut st, Vec::new()));
        }
        let ctl = self.check_lease(&mut st, &req.lease_id, &[])?;
        let mut plan = st.ledger.clone();
        let done = match plan.confirm(req.generation) {
            Ok(c) => c,
            Err(e) => {
                let s = ledger_status(&e);
                return Err(self.reject(&mut st, s, Vec::new(), Some(&ctl)));
            }
        };
        if !done.already {
            // The current generation, not the confirmed one: a stack above it stays pending, and
            // a restart must see that the journal ends unconfirmed.
            let e = Event::now(EventKind::Confirm, plan.current(), plan.confirmed(), self.entries(&done.changed))
                .detail(format!("generation {} confirmed (previously confirmed: {})", req.generation, done.previous))
                .controller(Some(&ctl));
            if let Err(err) = st.journal.write(&e) {
                // Refusing is the safe side: the change reverts at its deadline.
                error!("{err}");
                return Err(Status::unavailable(format!("{err}; not confirmed")));
            }
            info!(generation = req.generation, controller = %ctl, "confirmed");
        }
        let pending_before = st.ledger.deadline();
        st.ledger = plan;
        if st.ledger.deadline() != pending_before {
            self.inner.deadline_changed.notify_one();
        }
        Ok(pb::ConfirmResponse { confirmed_generation: st.ledger.confirmed() })
    }

    fn do_rollback(&self, req: pb::RollbackRequest, by: Option<Instant>) -> Result<pb::RollbackResponse, Status> {
        let mut st = self.lock_by("Rollback", by)?;
        if st.stopping {
            return Err(stopping());
        }
        self.settle_doubt(&mut st);
        if !self.revert_locked(&mut st, Instant::now(), None) {
            return Err(self.revert_owed(&mut st, Vec::new()));
        }
        let ctl = self.check_lease(&mut st, &req.lease_id, &[])?;
        let target = req.to_generation.unwrap_or(st.ledger.confirmed());
        let settings = match st.ledger.known_good(target) {
            Ok(s) => s,
            Err(e) => return Err(self.reject(&mut st, ledger_status(&e), Vec::new(), Some(&ctl))),
        };
        let what = format!("rollback to generation {target}");
        let reason = if req.reason.is_empty() {
            what
        } else {
            format!("{what}: {}", quoted_at_most(&req.reason, MAX_REASON_CHARS))
        };
        let generation = self.restore(&mut st, target, &settings, EventKind::Rollback, &reason, Some(&ctl))?;
        // Read after the journal's write, so later than the device's write: the safe side.
        let in_effect_from_ts_ns = self.inner.backend.write_times().map_or(0, |t| t.in_effect_from_ns);
        Ok(pb::RollbackResponse { generation, in_effect_from_ts_ns })
    }

    /// Put `settings` (those of generation `target`) back as a new confirmed generation:
    /// device first, then journal, then ledger.
    fn restore(
        &self,
        st: &mut State,
        target: u64,
        settings: &[EcnSetting],
        kind: EventKind,
        detail: &str,
        ctl: Option<&str>,
    ) -> Result<u64, Status> {
        let before = st.ledger.current_settings();
        // A Rollback is journaled after its device write, and undone if that line cannot go
        // in: with a revert's line still owed (a full disk) it could not, so the device is left
        // alone. A revert goes ahead regardless: safety before bookkeeping.
        if kind == EventKind::Rollback {
            if let Err(err) = st.journal.append_owed() {
                let s = Status::unavailable(format!("{err}; the journal owes an earlier line: nothing rolled back"));
                return Err(self.reject(st, s, Vec::new(), ctl));
            }
        }
        if let Err(e) = self.inner.backend.apply(settings) {
            let would_be = st.ledger.next();
            self.note_doubt(st, would_be);
            let s = Status::internal(format!(
                "the {} backend failed to restore generation {target}: {e}",
                self.inner.caps.backend
            ));
            if kind == EventKind::Revert {
                if st.failed_revert == Some(target) {
                    debug!("retried revert still failing: {}", s.message());
                    return Err(s);
                }
                st.failed_revert = Some(target);
            }
            return Err(self.reject(st, s, Vec::new(), ctl));
        }
        st.failed_revert = None;
        let generation = st.ledger.next();
        let changed = super::ledger::diff(&before, settings);
        let e = Event::now(kind, generation, generation, self.entries(&changed)).detail(detail).controller(ctl);
        // A revert has happened whatever the file says: a line that cannot be written now (a
        // full disk) is owed, and goes in before any later one.
        let written = if kind == EventKind::Revert { st.journal.write_done(&e) } else { st.journal.write(&e) };
        if let Err(err) = written {
            error!("{err}");
            if kind == EventKind::Rollback {
                if let Err(undo) = self.inner.backend.apply(&before) {
                    error!("journal failed and the undo failed too: {undo}");
                }
                return Err(Status::unavailable(format!("{err}; nothing rolled back")));
            }
            // A revert goes ahead without its journal line: safety before bookkeeping.
        }
        let (g, _) = st.ledger.restore(Some(target)).map_err(|e| Status::internal(e.to_string()))?;
        debug_assert_eq!(g, generation);
        self.settle_doubt(st);
        self.inner.deadline_changed.notify_one();
        if kind == EventKind::Revert {
            // The actuator undid a change on its own: its controller stalled, died or lost the
            // actuator. The controller warns of it too, when it is there to.
            warn!(generation, target, event = ?kind, queues = changed.len(), "{detail}");
        } else {
            info!(generation, target, event = ?kind, queues = changed.len(), "{detail}");
        }
        Ok(generation)
    }

    /// Revert the unconfirmed stack if its deadline has passed (or unconditionally, with
    /// `why`, at shutdown). Returns false if the backend failed and it must be retried.
    fn revert_if_due(&self, now: Instant, why: Option<&str>) -> bool {
        let mut st = self.lock();
        self.revert_locked(&mut st, now, why)
    }

    /// [`Self::revert_if_due`] with the lock held. Every change calls it first: a deadline
    /// that passed moments ago must not let a late confirm keep the change, nor a late apply
    /// carry it along, just because the timer task has not run yet.
    fn revert_locked(&self, st: &mut State, now: Instant, why: Option<&str>) -> bool {
        let Some(d) = st.ledger.deadline() else { return true };
        if why.is_none() && d.at > now {
            return true;
        }
        let (current, confirmed) = (st.ledger.current(), st.ledger.confirmed());
        // The generation whose deadline passed: the stack's earliest, not always the newest.
        let due = st.ledger.due().unwrap_or(current);
        let settings = st.ledger.confirmed_settings();
        let detail = match why {
            Some(w) => format!("{w}: generation {current} was unconfirmed; back to confirmed generation {confirmed}"),
            None if due == current => {
                format!("confirm deadline of generation {current} passed; back to confirmed generation {confirmed}")
            }
            None => format!(
                "confirm deadline of generation {due} passed (generations up to {current} stacked on it); back to \
                 confirmed generation {confirmed}"
            ),
        };
        self.restore(st, confirmed, &settings, EventKind::Revert, &detail, None).is_ok()
    }

    /// Reverts unconfirmed changes when their deadline passes. Runs until the server stops.
    pub async fn watch_deadlines(self) {
        let mut stopping = self.inner.stopping.clone();
        loop {
            let (next, doubt) = off_the_runtime(|| {
                let st = self.lock();
                (st.ledger.deadline().map(|d| d.at), st.journal.in_doubt().is_some())
            });
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {
                    if !off_the_runtime(|| self.revert_if_due(Instant::now(), None)) {
                        // The backend refused the revert: try again shortly rather than spin.
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                _ = self.inner.deadline_changed.notified() => {}
                // The backend settles a write in doubt by itself; the journal follows it.
                _ = tokio::time::sleep(SETTLE_CHECK), if doubt => off_the_runtime(|| self.settle_doubt(&mut self.lock())),
                r = stopping.changed() => if r.is_err() || *stopping.borrow() { break },
            }
        }
    }

    /// At shutdown: nobody will be left to confirm or revert a pending change, so revert it
    /// now; then stop the backend. `Err` says what the device may still hold that nobody
    /// confirmed (the revert failed, or a write is in doubt): the journal says it too, and the
    /// next actuator for a device that keeps changes refuses to start on it.
    pub fn stop(&self) -> Result<(), String> {
        {
            let mut st = self.lock();
            st.stopping = true;
            self.revert_locked(&mut st, Instant::now(), Some("actuator stopping"));
        }
        self.inner.backend.shutdown();
        // The backend's last try to settle a write in doubt has run by now.
        let mut st = self.lock();
        self.settle_doubt(&mut st);
        if st.ledger.deadline().is_some() {
            return Err(format!(
                "stopped with generation {} unconfirmed on the device: reverting it to confirmed generation {} failed \
                 (see above); the journal ends on it",
                st.ledger.current(),
                st.ledger.confirmed()
            ));
        }
        if let Some(generation) = st.journal.in_doubt() {
            return Err(format!(
                "stopped with a write of generation {generation} in doubt: it may still land on the device; the \
                 journal says so"
            ));
        }
        // A revert the journal could not record: a restart would take the file's last line, an
        // unconfirmed apply, for what the device may hold.
        if let Err(err) = st.journal.append_owed() {
            return Err(format!(
                "the journal lacks the line of generation(s) {:?} ({err}): the device holds confirmed generation {}, \
                 but a restart on this journal will read it as ending unconfirmed; free the space and append \
                 nothing by hand: start the next actuator with a new journal",
                st.journal.owed(),
                st.ledger.confirmed()
            ));
        }
        Ok(())
    }
}

/// A requested change as a refusal's journal line records it (even if it names no known
/// queue), its names quoted
/// ([`quoted`]): the request may come from anyone who can reach the port.
fn raw_entry(c: &pb::QueueSetting) -> QueueEntry {
    let id = c.id.clone().unwrap_or_default();
    let s = c.setting.unwrap_or_default();
    QueueEntry {
        switch: quoted(&id.switch),
        port: quoted(&id.port),
        queue: id.queue,
        kmin_bytes: s.kmin_bytes,
        kmax_bytes: s.kmax_bytes,
        pmax: s.pmax,
    }
}

/// The refusal of a write that comes in while the actuator stops: the device is left as
/// confirmed, and nobody would be left to confirm or revert it.
fn stopping() -> Status {
    Status::unavailable("the actuator is stopping: it makes no more changes")
}

fn ledger_status(e: &LedgerError) -> Status {
    match e {
        LedgerError::Unknown { .. } | LedgerError::Forgotten { .. } => Status::not_found(e.to_string()),
        LedgerError::NotPending { .. } | LedgerError::NeverConfirmed { .. } => {
            Status::failed_precondition(e.to_string())
        }
    }
}

/// A lease id: 128 bits from the standard library's randomly keyed SipHash. It fences
/// writers; it is not a credential (the bearer token is).
fn new_lease_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
    let part = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u64(t);
        h.write_u64(salt);
        h.finish()
    };
    format!("{:016x}{:016x}", part(1), part(2))
}

/// When the client of `req` gives up on it: its `grpc-timeout` from the moment its headers came
/// in ([`Arrived`]; now, where no admission layer stamped one), later than its client's start:
/// never a deadline the client still waits past. `None` without one, or with one that is not
/// in gRPC's wire format.
fn client_deadline<T>(req: &Request<T>) -> Option<Instant> {
    let text = req.metadata().get(grpc_timeout::HEADER)?.to_str().ok()?;
    let arrived = req.extensions().get::<Arrived>().map_or_else(Instant::now, |a| a.0);
    arrived.checked_add(grpc_timeout::decode(text)?)
}

/// Runs `f`, which may wait for the state lock and, under it, for a device write (a SONiC
/// write waits for orchagent, up to `--program-timeout`), without stalling the runtime: on a
/// multi-threaded runtime the worker first hands its other tasks to another thread. The
/// actuator runs two workers: a write held one, a call waiting for its lock the other, and
/// nothing else ran until the write ended (the telemetry streams, the deadline timer).
fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn settings_to_wire(caps: &BackendCaps, settings: &[EcnSetting]) -> Vec<pb::QueueSetting> {
    caps.queues
        .iter()
        .zip(settings)
        .map(|(q, s)| pb::QueueSetting {
            id: Some(pb::QueueId { switch: q.key.switch.clone(), port: q.key.port.clone(), queue: q.key.queue }),
            setting: Some(pb::EcnSetting { kmin_bytes: s.kmin_bytes, kmax_bytes: s.kmax_bytes, pmax: s.pmax }),
        })
        .collect()
}

type TelemetryStream = ReceiverStream<Result<pb::TelemetryBatch, Status>>;

#[tonic::async_trait]
impl<B: Backend> pb::actuator_server::Actuator for ActuatorService<B> {
    async fn get_capabilities(
        &self,
        _req: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        let c = &self.inner.caps;
        Ok(Response::new(pb::Capabilities {
            backend: c.backend.clone(),
            queues: c
                .queues
                .iter()
                .map(|q| pb::QueueCapability {
                    id: Some(pb::QueueId {
                        switch: q.key.switch.clone(),
                        port: q.key.port.clone(),
                        queue: q.key.queue,
                    }),
                    link_bps: q.link_bps,
                    pfc_xoff_bytes: q.pfc_xoff_bytes,
                })
                .collect(),
            buffer_bytes: c.buffer_bytes,
            bounds: Some(pb::Bounds {
                kmin_min_bytes: c.bounds.kmin_min_bytes,
                kmax_max_bytes: c.bounds.kmax_max_bytes,
                pmax_min: c.bounds.pmax_min,
                pmax_max: c.bounds.pmax_max,
                granularity_bytes: c.bounds.granularity_bytes,
            }),
            min_telemetry_interval_ns: c.min_telemetry_interval_ns,
            telemetry_time_scale: c.telemetry_time_scale,
            instance_id: self.inner.instance_id.clone(),
        }))
    }

    async fn get_config(&self, _req: Request<pb::GetConfigRequest>) -> Result<Response<pb::Config>, Status> {
        off_the_runtime(|| {
            let st = self.lock();
            Ok(Response::new(pb::Config {
                generation: st.ledger.current(),
                confirmed_generation: st.ledger.confirmed(),
                queues: settings_to_wire(&self.inner.caps, &st.ledger.current_settings()),
                confirm_deadline_unix_ms: st.ledger.deadline().map_or(0, |d| d.unix_ms()),
                telemetry_now_ts_ns: self.inner.backend.telemetry_now_ns().unwrap_or(0),
            }))
        })
    }

    async fn acquire_writer(
        &self,
        req: Request<pb::AcquireWriterRequest>,
    ) -> Result<Response<pb::WriterLease>, Status> {
        let by = client_deadline(&req);
        off_the_runtime(|| self.do_acquire(req.into_inner(), by).map(Response::new))
    }

    async fn release_writer(
        &self,
        req: Request<pb::ReleaseWriterRequest>,
    ) -> Result<Response<pb::ReleaseWriterResponse>, Status> {
        let by = client_deadline(&req);
        off_the_runtime(|| self.do_release(req.into_inner(), by).map(Response::new))
    }

    async fn apply(&self, req: Request<pb::ApplyRequest>) -> Result<Response<pb::ApplyResponse>, Status> {
        let by = client_deadline(&req);
        off_the_runtime(|| self.do_apply(req.into_inner(), by).map(Response::new))
    }

    async fn confirm(&self, req: Request<pb::ConfirmRequest>) -> Result<Response<pb::ConfirmResponse>, Status> {
        let by = client_deadline(&req);
        off_the_runtime(|| self.do_confirm(req.into_inner(), by).map(Response::new))
    }

    async fn rollback(&self, req: Request<pb::RollbackRequest>) -> Result<Response<pb::RollbackResponse>, Status> {
        let by = client_deadline(&req);
        off_the_runtime(|| self.do_rollback(req.into_inner(), by).map(Response::new))
    }

    type StreamTelemetryStream = TelemetryStream;

    async fn stream_telemetry(
        &self,
        req: Request<pb::StreamTelemetryRequest>,
    ) -> Result<Response<Self::StreamTelemetryStream>, Status> {
        let caps = &self.inner.caps;
        let place = self.inner.streams.take(req.remote_addr()).map_err(Status::resource_exhausted)?;
        let mut source = match self.inner.backend.subscribe_telemetry() {
            Ok(s) => s,
            Err(NoTelemetry::NoSource(why)) => return Err(Status::unimplemented(why)),
            Err(NoTelemetry::Stopped(why)) => return Err(Status::unavailable(why)),
        };
        let native = caps.min_telemetry_interval_ns.max(1);
        let asked = req.into_inner().interval_ns;
        // Whole multiples of the native interval, never below it (the contract's promise).
        let factor = if asked <= native { 1 } else { asked.div_ceil(native).min(u64::from(u32::MAX)) as u32 };
        debug!(interval_ns = native.saturating_mul(u64::from(factor)), "telemetry subscriber");
        let (tx, rx) = mpsc::channel(super::admission::UNREAD_BATCHES);
        let mut stopping = self.inner.stopping.clone();
        tokio::spawn(async move {
            let _place = place;
            let mut coarse = Coarsener::new(factor, native);
            loop {
                let batch = tokio::select! {
                    r = source.recv() => r,
                    _ = tx.closed() => break,
                    _ = stopping.changed() => break,
                };
                match batch {
                    Ok(b) => {
                        let Some(out) = coarse.push(&b) else { continue };
                        tokio::select! {
                            r = tx.send(Ok(out)) => if r.is_err() { break },
                            _ = stopping.changed() => break,
                        }
                    }
                    // A slow subscriber skips ahead; the gap shows in ts_ns, and the samples
                    // after it state the span their counters cover.
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        warn!(skipped = n, "telemetry subscriber lagged");
                        coarse.skipped();
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
            debug!("telemetry subscriber gone");
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::backend::{Bounds, QueueCap, QueueKey, TelemetryReceiver};
    use super::*;
    use crate::actuator::backend::BackendError;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A fresh journal path in a scratch directory (kept alive by the returned guard).
    fn scratch_journal() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new().prefix("ecn-service-").tempdir().unwrap();
        let p = dir.path().join("journal.jsonl");
        (dir, p)
    }

    fn journal_lines(p: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(p).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// Settings in memory; `fail` makes every apply fail. With `journal`, each apply first
    /// notes the journal's last line as it is on disk at that moment.
    struct Mem {
        caps: BackendCaps,
        settings: Mutex<Vec<EcnSetting>>,
        fail: AtomicBool,
        /// How long each apply takes (a SONiC write waiting for orchagent).
        slow: Duration,
        journal: Option<PathBuf>,
        journal_at_apply: Mutex<Vec<serde_json::Value>>,
    }

    impl Backend for Mem {
        fn capabilities(&self) -> &BackendCaps {
            &self.caps
        }
        fn read_settings(&self) -> Vec<EcnSetting> {
            self.settings.lock().unwrap().clone()
        }
        fn apply(&self, s: &[EcnSetting]) -> Result<(), BackendError> {
            if let Some(p) = &self.journal {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                let last = text.lines().last().map(|l| serde_json::from_str(l).unwrap());
                self.journal_at_apply.lock().unwrap().push(last.unwrap_or_default());
            }
            std::thread::sleep(self.slow);
            if self.fail.load(Ordering::SeqCst) {
                return Err(BackendError("device unreachable".into()));
            }
            *self.settings.lock().unwrap() = s.to_vec();
            Ok(())
        }
        fn subscribe_telemetry(&self) -> Result<TelemetryReceiver, NoTelemetry> {
            Err(NoTelemetry::NoSource("none".into()))
        }
    }

    const START: EcnSetting = EcnSetting { kmin_bytes: 400_000, kmax_bytes: 1_600_000, pmax: 0.2 };

    fn service(fail: bool) -> (ActuatorService<Mem>, watch::Sender<bool>) {
        service_with(fail, None)
    }

    fn service_with(fail: bool, journal: Option<&Path>) -> (ActuatorService<Mem>, watch::Sender<bool>) {
        let caps = BackendCaps {
            backend: "mem".into(),
            queues: vec![QueueCap {
                key: QueueKey { switch: "leaf0".into(), port: "eth1".into(), queue: 3 },
                link_bps: 100_000_000_000,
                pfc_xoff_bytes: 0,
            }],
            buffer_bytes: 32_000_000,
            bounds: Bounds::for_buffer(32_000_000),
            min_telemetry_interval_ns: 0,
            telemetry_time_scale: 1.0,
        };
        let mem = Mem {
            caps,
            settings: Mutex::new(vec![START]),
            fail: AtomicBool::new(fail),
            slow: Duration::ZERO,
            journal: journal.map(Path::to_path_buf),
            journal_at_apply: Mutex::new(Vec::new()),
        };
        let (tx, rx) = watch::channel(false);
        let j = journal.map_or_else(Journal::none, |p| Journal::open(p).unwrap());
        (ActuatorService::new(mem, j, rx), tx)
    }

    fn lease(s: &ActuatorService<Mem>) -> String {
        s.do_acquire(pb::AcquireWriterRequest { controller_id: "c".into(), ttl_ms: 60_000 }, None).unwrap().lease_id
    }

    fn apply_req(lease_id: &str, within_ms: u64) -> pb::ApplyRequest {
        pb::ApplyRequest {
            lease_id: lease_id.into(),
            changes: vec![pb::QueueSetting {
                id: Some(pb::QueueId { switch: "leaf0".into(), port: "eth1".into(), queue: 3 }),
                setting: Some(pb::EcnSetting { kmin_bytes: 100_000, kmax_bytes: 1_000_000, pmax: 0.5 }),
            }],
            confirm_within_ms: within_ms,
            ..Default::default()
        }
    }

    /// A slow device write holds the state lock, and a call waiting for that lock held the
    /// actuator's other worker: nothing else ran until the write ended (here timers of 200
    /// and 10 ms took the rest of the write's 1.5 s). Waiting calls now hand their worker's
    /// tasks on.
    #[test]
    fn a_slow_write_does_not_stall_the_runtime() {
        use pb::actuator_server::Actuator;
        let (mut s, _stop) = service(false);
        Arc::get_mut(&mut s.inner).unwrap().backend.slow = Duration::from_millis(1_500);
        let l = lease(&s);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let took = rt.block_on(async {
            let writer = s.clone();
            let write = tokio::spawn(async move { writer.apply(Request::new(apply_req(&l, 60_000))).await });
            tokio::time::sleep(Duration::from_millis(200)).await;
            let reader = s.clone();
            let read = tokio::spawn(async move { reader.get_config(Request::new(pb::GetConfigRequest {})).await });
            // Timers are driven by the workers too: with both waiting, this one waits as well.
            let started = Instant::now();
            tokio::time::sleep(Duration::from_millis(200)).await;
            tokio::spawn(tokio::time::sleep(Duration::from_millis(10))).await.unwrap();
            let took = started.elapsed();
            write.await.unwrap().unwrap();
            read.await.unwrap().unwrap();
            took
        });
        assert!(took < Duration::from_millis(800), "timers of 200 and 10 ms took {took:?}");
    }

    /// A Confirm that waits behind a slow write past its client's deadline (`grpc-timeout`) is
    /// not carried out: it confirmed the change after its client had given up on it and gone
    /// on as if it had failed. The write it waited for stands; so does one whose slow upload
    /// took it past its deadline; a Confirm in time goes through.
    #[test]
    fn a_call_that_waits_past_its_clients_deadline_is_not_carried_out() {
        use pb::actuator_server::Actuator;
        let (mut s, _stop) = service(false);
        Arc::get_mut(&mut s.inner).unwrap().backend.slow = Duration::from_millis(1_000);
        let l = lease(&s);
        let with_deadline = |req: pb::ConfirmRequest, timeout: &str| {
            let mut req = Request::new(req);
            req.metadata_mut().insert(grpc_timeout::HEADER, timeout.parse().unwrap());
            req
        };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (written, confirmed) = rt.block_on(async {
            let writer = s.clone();
            let (ll, write) = (l.clone(), apply_req(&l, 60_000));
            let write = tokio::spawn(async move { writer.apply(Request::new(write)).await });
            tokio::time::sleep(Duration::from_millis(200)).await;
            let confirm = pb::ConfirmRequest { lease_id: ll, generation: 2 };
            let confirmed = s.confirm(with_deadline(confirm, "300m")).await;
            (write.await.unwrap(), confirmed)
        });
        assert_eq!(written.unwrap().into_inner().generation, 2);
        let e = confirmed.unwrap_err();
        assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
        let ledger = s.lock().ledger.clone();
        assert_eq!((ledger.current(), ledger.confirmed()), (2, 1), "left unconfirmed");
        // The deadline counts from the call's headers (stamped by the admission layer), not
        // from its handler's start, after a slow upload: nothing in the way, still too late.
        let mut uploaded_slowly = with_deadline(pb::ConfirmRequest { lease_id: l.clone(), generation: 2 }, "1S");
        uploaded_slowly.extensions_mut().insert(Arrived(Instant::now() - Duration::from_secs(2)));
        let e = rt.block_on(s.confirm(uploaded_slowly)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
        let confirm = pb::ConfirmRequest { lease_id: l, generation: 2 };
        let confirmed = rt.block_on(s.confirm(with_deadline(confirm, "5S"))).unwrap().into_inner();
        assert_eq!(confirmed.confirmed_generation, 2);
    }

    #[test]
    fn a_late_confirm_is_refused_and_the_change_reverted() {
        let (s, _stop) = service(false);
        let l = lease(&s);
        let r = s.do_apply(apply_req(&l, 1), None).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        // The timer task is not running here: the confirm itself must notice the deadline.
        let e = s.do_confirm(pb::ConfirmRequest { lease_id: l, generation: r.generation }, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert_eq!(s.inner.backend.read_settings(), vec![START]);
        let st = s.lock();
        assert_eq!((st.ledger.current(), st.ledger.confirmed()), (3, 3));
    }

    #[test]
    fn a_late_apply_does_not_carry_an_expired_change_along() {
        let (s, _stop) = service(false);
        let l = lease(&s);
        s.do_apply(apply_req(&l, 1), None).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut other = apply_req(&l, 60_000);
        other.changes[0].setting.as_mut().unwrap().pmax = 0.7;
        let r = s.do_apply(other, None).unwrap();
        assert_eq!(r.generation, 4, "2 applied, 3 reverted it, 4 is the new apply");
        assert_eq!(s.lock().ledger.confirmed(), 3);
    }

    #[test]
    fn a_failing_backend_changes_nothing() {
        let (s, _stop) = service(true);
        let l = lease(&s);
        let e = s.do_apply(apply_req(&l, 0), None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        assert!(e.message().contains("device unreachable"), "{}", e.message());
        let st = s.lock();
        assert_eq!((st.ledger.current(), &*st.ledger.current_settings()), (1, &[START][..]));
    }

    #[test]
    fn a_new_writer_does_not_inherit_an_unconfirmed_change() {
        let (s, _stop) = service(false);
        // Short, but not so short that a preempted test thread finds it lapsed before applying.
        let short = pb::AcquireWriterRequest { controller_id: "a".into(), ttl_ms: 300 };
        let a = s.do_acquire(short.clone(), None).unwrap().lease_id;
        s.do_apply(apply_req(&a, 600_000), None).unwrap();
        // The same writer renewing keeps its change pending.
        assert_eq!(s.do_acquire(short, None).unwrap().lease_id, a);
        assert!(s.lock().ledger.deadline().is_some());
        std::thread::sleep(Duration::from_millis(400));
        let b = s.do_acquire(pb::AcquireWriterRequest { controller_id: "b".into(), ttl_ms: 60_000 }, None).unwrap();
        assert_ne!(b.lease_id, a);
        assert_eq!(s.inner.backend.read_settings(), vec![START], "a's change reverted when b took over");
        let st = s.lock();
        assert!(st.ledger.deadline().is_none());
        assert_eq!(st.ledger.current(), st.ledger.confirmed());
    }

    #[test]
    fn stopping_reverts_a_pending_change() {
        let (s, _stop) = service(false);
        let l = lease(&s);
        s.do_apply(apply_req(&l, 600_000), None).unwrap();
        assert_ne!(s.inner.backend.read_settings(), vec![START]);
        s.stop().unwrap();
        assert_eq!(s.inner.backend.read_settings(), vec![START]);
    }

    /// A write that comes in on a connection still open while the actuator stops is refused:
    /// it reached the device after the stop's revert, and the stop blamed a failed revert.
    #[test]
    fn writes_after_the_stop_are_refused() {
        let (s, _stop) = service(false);
        let l = lease(&s);
        s.stop().unwrap();
        let e = s.do_apply(apply_req(&l, 600_000), None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        let rollback = pb::RollbackRequest { lease_id: l.clone(), to_generation: None, reason: String::new() };
        assert_eq!(s.do_rollback(rollback, None).unwrap_err().code(), tonic::Code::Unavailable);
        assert_eq!(s.inner.backend.read_settings(), vec![START]);
    }

    /// A stop whose revert fails says so (the process then exits 1): the device still holds the
    /// unconfirmed change, and systemd or the operator must be able to tell.
    #[test]
    fn a_stop_whose_revert_fails_is_an_error() {
        let (s, _stop) = service(false);
        let l = lease(&s);
        s.do_apply(apply_req(&l, 600_000), None).unwrap();
        s.inner.backend.fail.store(true, Ordering::SeqCst);
        let e = s.stop().unwrap_err();
        assert!(e.contains("generation 2 unconfirmed on the device") && e.contains("confirmed generation 1"), "{e}");
    }

    /// A stop whose revert the journal cannot record (a full disk) reverts the device but
    /// exits 1: a restart would read the journal's last line, the apply, as still pending. It
    /// exited 0 with the revert line lost for good.
    // A full disk is /dev/full, which only Linux has.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_stop_whose_revert_the_journal_cannot_record_is_an_error() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let l = lease(&s);
        s.do_apply(apply_req(&l, 600_000), None).unwrap();
        s.lock().journal.simulate_full_disk(true);
        let e = s.stop().unwrap_err();
        assert!(e.contains("lacks the line of generation(s) [3]") && e.contains("confirmed generation 3"), "{e}");
        let mut st = s.lock();
        assert_eq!(st.ledger.current_settings(), st.ledger.confirmed_settings(), "reverted all the same");
        st.journal.simulate_full_disk(false);
    }

    /// While a revert's line is owed (a full disk), a Rollback leaves the device alone: it is
    /// journaled after its device write and undone when that line cannot go in, and it could
    /// not (it went in and out, and stayed on the device if the undo failed too).
    // A full disk is /dev/full, which only Linux has.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_rollback_waits_for_an_owed_revert_line() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let l = lease(&s);
        s.do_apply(apply_req(&l, 600_000), None).unwrap();
        s.do_confirm(pb::ConfirmRequest { lease_id: l.clone(), generation: 2 }, None).unwrap();
        let mut req = apply_req(&l, 600_000);
        req.changes[0].setting = Some(pb::EcnSetting { kmin_bytes: 200_000, kmax_bytes: 900_000, pmax: 0.3 });
        s.do_apply(req, None).unwrap();
        s.lock().journal.simulate_full_disk(true);
        assert!(s.revert_if_due(Instant::now() + Duration::from_secs(3600), None), "reverted on the device");
        assert_eq!(s.lock().journal.owed(), vec![4]);
        let on_device = s.inner.backend.settings.lock().unwrap().clone();
        let e = s.do_rollback(pb::RollbackRequest { lease_id: l, to_generation: Some(1), ..Default::default() }, None);
        assert_eq!(e.unwrap_err().code(), tonic::Code::Unavailable);
        assert_eq!(*s.inner.backend.settings.lock().unwrap(), on_device, "the device was not touched");
        s.lock().journal.simulate_full_disk(false);
    }

    #[test]
    fn the_apply_line_is_on_disk_before_the_device_changes() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let l = lease(&s);
        s.do_apply(apply_req(&l, 60_000), None).unwrap();
        let seen = s.inner.backend.journal_at_apply.lock().unwrap().clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            (seen[0]["event"].as_str(), seen[0]["generation"].as_u64(), seen[0]["confirmed_generation"].as_u64()),
            (Some("apply"), Some(2), Some(1)),
            "killed during the device write, the journal must already end unconfirmed: {seen:?}"
        );
        assert_eq!(Journal::peek(&path).unwrap().unconfirmed_at_end(), Some((2, 1)));
    }

    #[test]
    fn a_device_that_fails_after_the_apply_line_leaves_a_journal_that_says_nothing_changed() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(true, Some(&path));
        let l = lease(&s);
        let e = s.do_apply(apply_req(&l, 60_000), None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        let lines = journal_lines(&path);
        let last = lines.last().unwrap();
        assert_eq!(last["event"], "reject", "{lines:?}");
        assert_eq!((last["generation"].as_u64(), last["confirmed_generation"].as_u64()), (Some(1), Some(1)));
        let reopened = Journal::peek(&path).unwrap();
        assert_eq!(reopened.unconfirmed_at_end(), None, "a restart may start: the device kept generation 1");
        assert_eq!(reopened.last_generation(), 2, "a restart numbers after the failed apply's line");
        // In this process the number goes to the next change.
        s.inner.backend.fail.store(false, Ordering::SeqCst);
        assert_eq!(s.do_apply(apply_req(&l, 0), None).unwrap().generation, 2);
    }

    #[test]
    fn confirming_part_of_a_stack_leaves_a_journal_that_ends_unconfirmed() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let l = lease(&s);
        assert_eq!(s.do_apply(apply_req(&l, 60_000), None).unwrap().generation, 2);
        let mut next = apply_req(&l, 60_000);
        next.changes[0].setting.as_mut().unwrap().pmax = 0.7;
        assert_eq!(s.do_apply(next, None).unwrap().generation, 3);
        s.do_confirm(pb::ConfirmRequest { lease_id: l, generation: 2 }, None).unwrap();
        let lines = journal_lines(&path);
        let last = lines.last().unwrap();
        assert_eq!(last["event"], "confirm");
        assert_eq!((last["generation"].as_u64(), last["confirmed_generation"].as_u64()), (Some(3), Some(2)));
        assert_eq!(
            Journal::peek(&path).unwrap().unconfirmed_at_end(),
            Some((3, 2)),
            "generation 3 is still unconfirmed on the device"
        );
    }

    #[test]
    fn an_apply_without_a_deadline_confirms_a_stack_only_once_it_is_on_the_device() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let l = lease(&s);
        assert_eq!(s.do_apply(apply_req(&l, 60_000), None).unwrap().generation, 2);
        let mut at_once = apply_req(&l, 0);
        at_once.changes[0].setting.as_mut().unwrap().pmax = 0.7;
        assert!(s.do_apply(at_once, None).unwrap().confirmed);
        let seen = s.inner.backend.journal_at_apply.lock().unwrap().clone();
        assert_eq!(
            (seen[1]["event"].as_str(), seen[1]["generation"].as_u64(), seen[1]["confirmed_generation"].as_u64()),
            (Some("apply"), Some(3), Some(1)),
            "killed during the device write, the journal must end on generation 2 unconfirmed: {seen:?}"
        );
        let lines = journal_lines(&path);
        let last = lines.last().unwrap();
        assert_eq!(last["event"], "confirm", "{lines:?}");
        assert_eq!((last["generation"].as_u64(), last["confirmed_generation"].as_u64()), (Some(3), Some(3)));
        assert_eq!(Journal::peek(&path).unwrap().unconfirmed_at_end(), None);
        // With nothing pending, the apply line itself says confirmed: no second line.
        let n = journal_lines(&path).len();
        s.do_apply(apply_req(&l, 0), None).unwrap();
        let lines = journal_lines(&path);
        assert_eq!(lines.len(), n + 1);
        assert_eq!((lines[n]["generation"].as_u64(), lines[n]["confirmed_generation"].as_u64()), (Some(4), Some(4)));
    }

    /// What anyone who can reach the port sends without a lease is refused, and its journal
    /// line neither names the device (a switch name in it made the next start refuse the
    /// journal as another device's) nor grows with the request (60 000 entries wrote megabytes).
    #[test]
    fn a_refused_request_cannot_poison_or_swell_the_journal() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let mut foreign = apply_req("", 60_000);
        foreign.changes[0].id.as_mut().unwrap().switch = "evil".into();
        let many = foreign.changes[0].clone();
        foreign.changes = vec![many; 60_000];
        assert_eq!(s.do_apply(foreign, None).unwrap_err().code(), tonic::Code::PermissionDenied);
        let lines = journal_lines(&path);
        assert_eq!(lines[0]["queues"].as_array().unwrap().len(), MAX_REFUSED_QUEUES);
        let detail = lines[0]["detail"].as_str().unwrap();
        assert!(detail.ends_with("(the first 64 of its 60000 queues)"), "{detail}");
        assert!(Journal::peek(&path).unwrap().switches().is_empty(), "a refusal names no device");
        // A controller id is a short name without control characters.
        for id in ["x".repeat(crate::actuator::lease::MAX_CONTROLLER_ID_BYTES + 1), "a\nINFO forged".to_string()] {
            let e = s.do_acquire(pb::AcquireWriterRequest { controller_id: id, ttl_ms: 60_000 }, None).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        }
    }

    /// A flood of requests without a lease journals a minute's worth of refusals, not one line
    /// each (it filled the disk in seconds); each is still refused, and the next line journaled
    /// says how many were left out.
    #[test]
    fn a_flood_of_refusals_journals_a_minute_s_worth() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let started = Instant::now();
        for _ in 0..200 {
            assert_eq!(s.do_apply(apply_req("", 1), None).unwrap_err().code(), tonic::Code::PermissionDenied);
        }
        // The burst, and one a second for as long as the refusals took (their lines are synced).
        let journaled = journal_lines(&path).len() as u64;
        let most = 60 + started.elapsed().as_secs() + 1;
        assert!((60..=most).contains(&journaled), "{journaled} lines for 200 refusals, at most {most}");
        let mut budget = RefusalBudget::new(Instant::now());
        let t0 = Instant::now();
        assert!((0..60).all(|_| budget.take(t0) == Some(0)));
        assert_eq!((budget.take(t0), budget.take(t0)), (None, None));
        assert_eq!(budget.take(t0 + Duration::from_secs(1)), Some(2), "one line a second, saying two were left out");
        assert_eq!(budget.take(t0 + Duration::from_secs(1)), None);
    }

    #[test]
    fn a_failed_revert_refuses_changes_until_it_goes_through() {
        let (s, _stop) = service(false);
        let l = lease(&s);
        let r = s.do_apply(apply_req(&l, 1), None).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        s.inner.backend.fail.store(true, Ordering::SeqCst);
        let late = pb::ConfirmRequest { lease_id: l.clone(), generation: r.generation };
        let e = s.do_confirm(late.clone(), None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "the expired change must not be kept: {e:?}");
        for within_ms in [0, 60_000] {
            let e = s.do_apply(apply_req(&l, within_ms), None).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        }
        let e = s.do_rollback(pb::RollbackRequest { lease_id: l.clone(), ..Default::default() }, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        {
            let st = s.lock();
            assert_eq!((st.ledger.current(), st.ledger.confirmed()), (2, 1));
            assert!(st.ledger.deadline().is_some(), "the revert is still owed");
        }
        // The device is back: the next call reverts first, and the expired change is gone.
        s.inner.backend.fail.store(false, Ordering::SeqCst);
        let e = s.do_confirm(late, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert_eq!(s.inner.backend.read_settings(), vec![START]);
    }

    /// The watcher retries a failed deadline revert every second while the device is away: one
    /// `reject` line says so, not one per retry, and the revert line follows once it goes
    /// through.
    #[test]
    fn a_revert_retried_while_the_device_is_away_is_journaled_once() {
        let (_dir, path) = scratch_journal();
        let (s, _stop) = service_with(false, Some(&path));
        let l = lease(&s);
        s.do_apply(apply_req(&l, 1), None).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        s.inner.backend.fail.store(true, Ordering::SeqCst);
        for _ in 0..5 {
            assert!(!s.revert_if_due(Instant::now(), None));
        }
        s.inner.backend.fail.store(false, Ordering::SeqCst);
        assert!(s.revert_if_due(Instant::now(), None));
        let events: Vec<String> =
            journal_lines(&path).iter().map(|l| l["event"].as_str().unwrap().to_string()).collect();
        assert_eq!(events, ["apply", "reject", "revert"], "{events:?}");
    }
}
