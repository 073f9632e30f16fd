//! Scaled wall-clock pacing for backends that replay or simulate time.
//!
//! `time_scale` is simulated nanoseconds per wall-clock nanosecond: 1.0 is real time, 0.01 is
//! a hundred times slower. When the producer cannot keep up, the pacer re-anchors instead of
//! bursting later to catch up, so subscribers never see telemetry faster than asked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest single sleep, so that a stop request is seen promptly.
const SLEEP_SLICE: Duration = Duration::from_millis(20);

/// The slowest and fastest `--time-scale`: at 10⁻⁶ a 100 µs interval takes 100 s of wall
/// time; far below it, every wall-clock figure derived from the interval (the controller's
/// staleness limit) overflows, and the run would show nothing for years.
pub const TIME_SCALES: std::ops::RangeInclusive<f64> = 1e-6..=1e6;

/// Check a `--time-scale` value: finite and within [`TIME_SCALES`].
pub fn check_time_scale(time_scale: f64) -> Result<(), super::ActuatorError> {
    if TIME_SCALES.contains(&time_scale) {
        return Ok(());
    }
    Err(super::ActuatorError::BadInput(format!(
        "--time-scale {time_scale}: simulated ns per wall-clock ns, from {:e} to {:e}",
        TIME_SCALES.start(),
        TIME_SCALES.end()
    )))
}

/// Maps a simulated clock onto the wall clock.
#[derive(Debug)]
pub struct Pacer {
    scale: f64,
    anchor_wall: Instant,
    anchor_sim_ns: u64,
    behind_warned: bool,
}

impl Pacer {
    /// Start pacing now, at simulated time `sim_ns`.
    pub fn new(time_scale: f64, sim_ns: u64) -> Pacer {
        Pacer { scale: time_scale, anchor_wall: Instant::now(), anchor_sim_ns: sim_ns, behind_warned: false }
    }

    /// Block until the wall clock reaches simulated time `sim_ns`, or `stop` is set. Returns
    /// false if stopped.
    pub fn wait_until(&mut self, sim_ns: u64, stop: &AtomicBool) -> bool {
        let ahead_ns = sim_ns.saturating_sub(self.anchor_sim_ns) as f64 / self.scale;
        let due = self.anchor_wall + Duration::from_secs_f64((ahead_ns / 1e9).min(1e9));
        loop {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= due {
                // More than a second late: the producer is slower than the requested scale.
                // Re-anchor so that a later fast stretch does not burst to catch up.
                if now - due > Duration::from_secs(1) {
                    if !self.behind_warned {
                        tracing::warn!(
                            time_scale = self.scale,
                            behind_s = format!("{:.1}", (now - due).as_secs_f64()),
                            "the simulated fabric fell behind the pace --time-scale asks (a simulator too slow \
                             for it, or the process held up); it goes on from here, as fast as it can where \
                             it is behind (warned once)"
                        );
                        self.behind_warned = true;
                    }
                    self.anchor_wall = now;
                    self.anchor_sim_ns = sim_ns;
                }
                return true;
            }
            std::thread::sleep((due - now).min(SLEEP_SLICE));
        }
    }
}
