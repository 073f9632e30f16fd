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

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

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
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            return;
        }
        errln!("error: writing results to stdout: {e}");
        std::process::exit(1);
    }
}

/// Write `args` to stderr, dropping them if it cannot take them.
pub fn write_err(args: fmt::Arguments) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Stderr for the log: a write it cannot take is dropped and reported as done, where
/// tracing would report the failure on stderr itself, with `eprintln!`, and panic.
#[derive(Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Cloned out, so that the lock is not held while the bar is cleared and redrawn.
        let bar = SHOWN.lock().ok().and_then(|b| b.clone());
        let write = || {
            let _ = io::stderr().write_all(buf);
        };
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// The progress bar log lines make way for, if one is shown.
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

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
