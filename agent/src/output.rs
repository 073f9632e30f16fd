//! Results on stdout, logs and errors on stderr, neither of which may end the process.
//!
//! `println!` and `eprintln!` panic when their stream is a pipe whose reader has gone
//! (`ecn-tuner scenarios | head -1`, `2>&1 | head`, a log collector that died), and so does
//! tracing's own report of a failed write: a recording in progress was lost, exit 101. A reader
//! that stops early has read all it wanted, so [`outln!`] and [`out!`] then write nothing more
//! and the command runs to its end, with its own exit code (0 when it succeeds: quietly, as
//! README promises; 1 for a recording cut short, which it still is); any other stdout error (a
//! full disk behind a redirect) ends it with exit 1 and says so. Logs and the final error line
//! go through [`Stderr`] and [`errln!`], which drop what stderr cannot take: there is nowhere
//! else to say it.
//!
//! A progress bar on stderr is registered with [`showing`] while it is drawn: every log line
//! clears it first, whichever thread logs, or a line written over the bar is garbled.
//!
//! Log lines reach stderr from a thread of their own ([`log_in_background`]): a stderr that
//! takes nothing (a terminal stopped with Ctrl-S, `2>&1 | less` left unread, a log collector
//! that hangs) made whatever logged wait, the actuator's deadline revert behind a lock held
//! while logging, and the controller's loop with its kill switch. Lines that find
//! [`LOG_QUEUE_LINES`] waiting are dropped and counted, and the count is said where they were
//! dropped. [`errln!`] lines go the same way, after the log lines before them. [`flush_logs`]
//! waits for the queue to empty before the process ends, for as long as stderr takes lines.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

/// `println!` for results: see the module docs.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` for results: see the module docs.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};

/// `eprintln!` that drops what stderr cannot take: see the module docs.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use errln;

/// Set once stdout's reader has gone: nothing more is written there.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Write `args` to stdout, unless its reader has gone; end the process if stdout fails
/// otherwise.
pub fn write(args: fmt::Arguments) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    // Straight to the descriptor, waiting for room where its owner made it non-blocking (a
    // reader that pauses is no failure); the lock keeps writers apart.
    let text = args.to_string();
    let mut stdout = io::stdout().lock();
    let written = stdout.flush().and_then(|()| {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: fd 1 stays open; ManuallyDrop never closes it.
        let fd1 = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(stdout.as_raw_fd()) });
        match crate::line_files::write_all_waiting(&fd1, text.as_bytes()) {
            // No stdout at all (closed at the start): nothing to say it to, as std's own
            // stdout takes it.
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => Ok(()),
            other => other,
        }
    });
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            return;
        }
        errln!("error: writing results to stdout: {e}");
        flush_logs(FLUSH_AT_EXIT);
        std::process::exit(1);
    }
}

/// Write `args` to stderr, dropping them if it cannot take them; after the log lines queued
/// before them (see the module docs).
pub fn write_err(args: fmt::Arguments) {
    let _ = Stderr.write_all(fmt::format(args).as_bytes());
}

/// Stderr for the log: a write it cannot take is dropped and reported as done, where
/// tracing would report the failure on stderr itself, with `eprintln!`, and panic. Once
/// [`log_in_background`] has run, a write only queues the line.
#[derive(Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match LOG_QUEUE.get() {
            Some(queue) => enqueue(queue, buf.to_vec()),
            None => write_log_line(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if LOG_QUEUE.get().is_none() {
            let _ = io::stderr().flush();
        }
        Ok(())
    }
}

/// How many log lines may wait for stderr before more are dropped.
pub const LOG_QUEUE_LINES: usize = 4096;

/// How long [`flush_logs`] waits at the end of a command for a stderr that takes nothing.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

static LOG_QUEUE: OnceLock<SyncSender<Vec<u8>>> = OnceLock::new();
/// Lines queued and not yet written.
static QUEUED: AtomicU64 = AtomicU64::new(0);
/// Lines dropped since the last said so.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Queue `line` for the log thread, or drop and count it if the queue is full. Lines dropped
/// before are said first, where the gap is.
fn enqueue(queue: &SyncSender<Vec<u8>>, line: Vec<u8>) {
    let send = |line: Vec<u8>| {
        // Counted before it is sent, so that `flush_logs` never sees it gone early.
        QUEUED.fetch_add(1, Ordering::SeqCst);
        let sent = queue.try_send(line).is_ok();
        if !sent {
            QUEUED.fetch_sub(1, Ordering::SeqCst);
        }
        sent
    };
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        let said = format!("warning: {dropped} log lines were dropped here: stderr took nothing for a while\n");
        if !send(said.into_bytes()) {
            DROPPED.fetch_add(dropped, Ordering::Relaxed);
        }
    }
    if !send(line) {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Write log lines to stderr from a thread of their own from now on (see the module docs).
pub fn log_in_background() {
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(LOG_QUEUE_LINES);
    let started = std::thread::Builder::new().name("ecn-log".into()).spawn(move || {
        for line in rx {
            write_log_line(&line);
            QUEUED.fetch_sub(1, Ordering::SeqCst);
        }
    });
    // Without the thread, lines are written as they come.
    if started.is_ok() {
        let _ = LOG_QUEUE.set(tx);
    }
}

/// Wait until every queued log line is written, for as long as stderr takes lines, however
/// slowly; give up once it has taken none for `stalled` (it may take nothing at all).
pub fn flush_logs(stalled: Duration) {
    let (mut left, mut moved) = (QUEUED.load(Ordering::SeqCst), Instant::now());
    while left > 0 && moved.elapsed() < stalled {
        std::thread::sleep(Duration::from_millis(1));
        let now = QUEUED.load(Ordering::SeqCst);
        if now < left {
            moved = Instant::now();
        }
        left = now;
    }
}

/// Write one log line to stderr, clearing the progress bar first if one is shown.
fn write_log_line(buf: &[u8]) {
    // Cloned out, so that the lock is not held while the bar is cleared and redrawn.
    let bar = SHOWN.lock().ok().and_then(|b| b.clone());
    let write = || {
        let _ = io::stderr().write_all(buf);
    };
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

/// The progress bar log lines make way for, if one is shown.
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Whether stderr is a terminal that can redraw a line in place: not a pipe or a file, and not
/// `TERM=dumb` (Emacs' shell, some CI consoles), where every redraw of a progress bar came out
/// as a line of its own. Progress bars show only there, and log colours.
pub fn stderr_redraws() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// A progress bar of `len` steps drawn as `template` says, on stderr where it can redraw a line
/// ([`stderr_redraws`]) and hidden elsewhere.
pub fn progress_bar(len: u64, template: &str) -> ProgressBar {
    let bar = ProgressBar::new(len)
        .with_style(indicatif::ProgressStyle::with_template(template).expect("static template").progress_chars("=> "));
    if !stderr_redraws() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}

/// Log lines clear `bar` while they are written, until the returned guard is dropped. Do not
/// log from inside `bar.suspend`: the line would wait for the bar it is suspended in.
#[must_use = "the bar is shown only while the guard lives"]
pub fn showing(bar: &ProgressBar) -> Showing {
    if let Ok(mut shown) = SHOWN.lock() {
        *shown = Some(bar.clone());
    }
    Showing
}

/// See [`showing`].
pub struct Showing;

impl Drop for Showing {
    fn drop(&mut self) {
        if let Ok(mut shown) = SHOWN.lock() {
            *shown = None;
        }
    }
}
