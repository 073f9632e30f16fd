//! Results on stdout.
//!
//! `println!` panics when stdout is a pipe whose reader has gone (`ecn-tuner scenarios | head
//! -1`). A reader that stops early has read all it wanted, so [`outln!`] and [`out!`] end the
//! process quietly with exit 0 instead; any other write error (a full disk behind a redirect)
//! ends it with exit 1 and says so. Results are printed last, after every file is written, so
//! ending here loses nothing.

use std::fmt;
use std::io::{self, Write};

/// `println!` for results: see the module docs.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` for results: see the module docs.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};

/// Write `args` to stdout, ending the process if stdout cannot take it.
pub fn write(args: fmt::Arguments) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing results to stdout: {e}");
        std::process::exit(1);
    }
}
