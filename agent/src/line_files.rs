//! Files of JSON lines that a process appends to and a crash or a full disk may cut short:
//! the actuator's journal and the controller's decision log.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Open `path` for appending lines (created if missing). A last line cut short (a crash, a full
/// disk) is ended first, so that the first line written now is a line of its own, not glued to
/// the fragment, where a reader would lose both.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    let mut f = OpenOptions::new().create(true).read(true).append(true).open(path)?;
    end_partial_line(&mut f)?;
    Ok(f)
}

/// Whether an error opening or writing such a file is the machine's (a full disk, a quota),
/// not the path the user gave: exit 1, not 2.
pub fn out_of_space(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

/// End a partial last line of `f` (open for reading and appending) with a newline.
pub fn end_partial_line(f: &mut File) -> std::io::Result<()> {
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    f.seek(SeekFrom::Start(len - 1))?;
    f.read_exact(&mut last)?;
    if last[0] != b'\n' {
        f.write_all(b"\n")?;
    }
    Ok(())
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
}
