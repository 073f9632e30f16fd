//! Files of JSON lines that a process appends to and a crash or a full disk may cut short:
//! the actuator's journal and the controller's decision log.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Open `path` for appending lines (created if missing). In a regular file, a last line cut
/// short (a crash, a full disk) is ended first, so that the first line written now is a line of
/// its own, not glued to the fragment, where a reader would lose both. Anything else (a pipe to
/// a log shipper, `/dev/stdout`) is appended to as it is.
///
/// Opened for writing only: a pipe opened to read too is one whose reader never goes, so a
/// writer whose reader had died never saw the broken pipe and, once the pipe was full, waited
/// for ever. `/dev/stdout` and `/dev/stderr` are this process's own descriptors, taken as they
/// are: a socket (systemd's journal, some container runtimes) cannot be opened by its path.
/// Such a descriptor may be non-blocking (its owner's choice): its writer must wait for room.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    let own = own_output(path).map(|out| out.as_fd().try_clone_to_owned()).transpose()?;
    let mut f = match own {
        // A regular file behind it (`> decisions.jsonl`) is written through the description
        // the process's own output shares, switched to appending: opened by its path instead,
        // lines went to the end while the report, through fd 1, went from fd 1's offset, over
        // the first lines; and without appending, a copytruncate rotation left a hole.
        Some(fd) => {
            let f = File::from(fd);
            if f.metadata()?.is_file() {
                set_status_flags(&f, libc::O_APPEND, 0)?;
            }
            f
        }
        // Opening a FIFO to write waits for a reader: with none, the controller hung at its
        // start, or, reopening on SIGHUP, mid-run with every decision waiting behind it. Not
        // waiting, the open fails (ENXIO) and says so; the writes after it wait as usual.
        None => {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| if e.raw_os_error() == Some(libc::ENXIO) { no_reader(path, e) } else { e })?;
            set_status_flags(&f, 0, libc::O_NONBLOCK)?;
            f
        }
    };
    if f.metadata()?.is_file() {
        let mut read = File::open(path)?;
        if !ends_with_newline(&mut read)? {
            f.write_all(b"\n")?;
        }
    }
    Ok(f)
}

/// Whether `path` names this process's own stdout or stderr, which [`open_append`] takes as
/// they are.
pub fn is_own_output(path: &Path) -> bool {
    own_output(path).is_some()
}

/// This process's own output that `path` names, `/dev/stdout` or `/dev/stderr`, if it names one.
fn own_output(path: &Path) -> Option<Box<dyn AsFd>> {
    match path.to_str() {
        Some("/dev/stdout") => Some(Box::new(std::io::stdout())),
        Some("/dev/stderr") => Some(Box::new(std::io::stderr())),
        _ => None,
    }
}

/// ENXIO from opening `path` to write, in words: a FIFO with no reader, or a socket.
fn no_reader(path: &Path, e: std::io::Error) -> std::io::Error {
    use std::os::unix::fs::FileTypeExt;
    let why = match std::fs::metadata(path).map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() => "a FIFO that no process reads yet: start its reader first",
        Ok(t) if t.is_socket() => {
            "a Unix socket, which cannot be opened as a file (under systemd, /dev/stdout reaches the journal)"
        }
        _ => return e,
    };
    std::io::Error::new(e.kind(), why)
}

/// Set the status flags `add` on `f`'s open file description and clear `clear`.
fn set_status_flags(f: &File, add: libc::c_int, clear: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor `f` owns, reading and then setting its status flags.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(f.as_raw_fd(), libc::F_SETFL, (flags | add) & !clear) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Write all of `buf` to `f`, waiting for room where `f` is non-blocking (a pipe its owner
/// made so: EAGAIN is no failure, only a full pipe).
pub fn write_all_waiting(mut f: &File, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        match f.write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fd = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd; an error (EINTR) only tries the write again.
                unsafe { libc::poll(&mut fd, 1, -1) };
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether `f` is empty or its last byte is a newline.
fn ends_with_newline(f: &mut File) -> std::io::Result<bool> {
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    let mut last = [0u8; 1];
    f.seek(SeekFrom::Start(len - 1))?;
    f.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// Open `path` to read back and append to (created if missing), refusing anything but a
/// regular file: a device or a pipe given by mistake (`/dev/zero` as a journal) was read
/// without end, past every memory limit, deaf to SIGTERM meanwhile.
pub fn open_read_append(path: &Path) -> std::io::Result<File> {
    let f = OpenOptions::new().create(true).read(true).append(true).open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a device or a pipe?): it is read back and appended to",
        ));
    }
    Ok(f)
}

/// The lines of `reader` without their newlines, each at most `max_bytes` long: a longer one
/// is an error (a file that is no such file), not a line grown in memory without bound.
pub fn lines_at_most<R: BufRead>(mut reader: R, max_bytes: u64) -> impl Iterator<Item = std::io::Result<Vec<u8>>> {
    let mut done = false;
    let mut number = 0u64;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let mut line = Vec::new();
        let read = (&mut reader).take(max_bytes + 1).read_until(b'\n', &mut line);
        number += 1;
        match read {
            Ok(0) => {
                done = true;
                None
            }
            Ok(_) if line.last() == Some(&b'\n') => {
                line.pop();
                Some(Ok(line))
            }
            Ok(_) if line.len() as u64 > max_bytes => {
                done = true;
                Some(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("line {number} is longer than {max_bytes} bytes"),
                )))
            }
            Ok(_) => Some(Ok(line)),
            Err(e) => {
                done = true;
                Some(Err(e))
            }
        }
    })
}

/// Whether an error opening or writing such a file is the machine's (a full disk, a quota),
/// not the path the user gave: exit 1, not 2.
pub fn out_of_space(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

/// End a partial last line of `f` (open for reading and appending) with a newline.
pub fn end_partial_line(f: &mut File) -> std::io::Result<()> {
    if !ends_with_newline(f)? {
        f.write_all(b"\n")?;
    }
    Ok(())
}

/// A FIFO named `decisions.fifo` made in `dir`: its path.
#[cfg(test)]
pub fn make_fifo(dir: &Path) -> std::path::PathBuf {
    let fifo = dir.join("decisions.fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    fifo
}

/// A reader of the FIFO at `path` that never waits: opened before a writer comes, read only
/// when the test chooses.
#[cfg(test)]
pub fn fifo_reader(path: &Path) -> File {
    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_last_line_is_ended_before_lines_are_added() {
        let dir = tempfile::tempdir().unwrap();
        for (before, after) in
            [("", "{}\n"), ("{\"a\":1}\n", "{\"a\":1}\n{}\n"), ("{\"a\":1}\n{\"b\"", "{\"a\":1}\n{\"b\"\n{}\n")]
        {
            let p = dir.path().join("log.jsonl");
            std::fs::write(&p, before).unwrap();
            open_append(&p).unwrap().write_all(b"{}\n").unwrap();
            assert_eq!(std::fs::read_to_string(&p).unwrap(), after, "{before:?}");
        }
    }

    /// A FIFO nobody reads is refused at once (opening it waited for a reader, for ever); one
    /// that is read is written to as a blocking pipe, so that a slow reader slows the writer
    /// instead of failing it.
    #[test]
    fn a_fifo_is_opened_only_while_someone_reads_it() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let fifo = make_fifo(dir.path());
        let e = open_append(&fifo).unwrap_err();
        assert!(e.to_string().contains("no process reads"), "{e}");
        let reader = fifo_reader(&fifo);
        let mut writer = open_append(&fifo).unwrap();
        // SAFETY: F_GETFL on a descriptor the test owns.
        let flags = unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0, "the writer blocks");
        writer.write_all(b"{}\n").unwrap();
        let mut got = String::new();
        std::io::BufReader::new(reader).read_line(&mut got).unwrap();
        assert_eq!(got, "{}\n");
    }

    /// A Unix socket's path cannot be opened: said as such, not as a FIFO without a reader.
    #[test]
    fn a_socket_path_is_said_to_be_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sock");
        let _listening = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let e = open_append(&path).unwrap_err();
        assert!(e.to_string().contains("a Unix socket"), "{e}");
    }

    /// A non-blocking descriptor (its owner's choice) that is full is waited on, not failed.
    #[test]
    fn a_full_non_blocking_pipe_is_waited_on() {
        use std::os::fd::AsRawFd;
        let (mut reader, writer) = std::io::pipe().unwrap();
        let writer = File::from(std::os::fd::OwnedFd::from(writer));
        set_status_flags(&writer, libc::O_NONBLOCK, 0).unwrap();
        // SAFETY: F_SETPIPE_SZ on a pipe descriptor the test owns.
        assert!(unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) } > 0);
        let drained = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let mut all = Vec::new();
            reader.read_to_end(&mut all).unwrap();
            all.len()
        });
        write_all_waiting(&writer, &[b'x'; 100_000]).unwrap();
        drop(writer);
        assert_eq!(drained.join().unwrap(), 100_000);
    }

    #[test]
    fn lines_are_read_whole_up_to_a_bound() {
        let read = |text: &[u8], max| lines_at_most(text, max).collect::<std::io::Result<Vec<_>>>();
        assert_eq!(read(b"ab\ncd", 4).unwrap(), [b"ab".to_vec(), b"cd".to_vec()]);
        assert_eq!(read(b"abcd\n", 4).unwrap(), [b"abcd".to_vec()]);
        assert_eq!(read(b"", 4).unwrap(), Vec::<Vec<u8>>::new());
        let e = read(b"ab\nabcde\nab\n", 4).unwrap_err();
        assert_eq!(e.to_string(), "line 2 is longer than 4 bytes");
    }

    #[test]
    fn only_regular_files_are_opened_to_append() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open_read_append(&dir.path().join("new.jsonl")).is_ok());
        let e = open_read_append(Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
