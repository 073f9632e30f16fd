//! Reading a whole file that a user names, with a bound on its size: a path like `/dev/zero`,
//! or a large file named by mistake, is an error that names the bound instead of a process
//! that reads until memory runs out.

use std::io::Read;
use std::path::Path;

/// Read all of `path`, refusing a file larger than `max_bytes` (`InvalidData`, saying so).
pub fn read_at_most(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {}", size(max_bytes))));
    }
    Ok(bytes)
}

/// [`read_at_most`] for a UTF-8 text file.
pub fn read_text_at_most(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    String::from_utf8(read_at_most(path, max_bytes)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// `256 MiB`, `1 MiB`, `4 KiB`, or bytes.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_the_bound_is_refused_and_an_endless_one_ends() {
        let dir = std::env::temp_dir().join(format!("ecn-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, [b'x'; 1024]).unwrap();
        assert_eq!(read_at_most(&p, 1024).unwrap().len(), 1024);
        let e = read_at_most(&p, 1023).unwrap_err();
        assert_eq!(e.to_string(), "larger than 1023 bytes");
        assert_eq!(read_at_most(Path::new("/dev/zero"), 1 << 20).unwrap_err().to_string(), "larger than 1 MiB");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_text_at_most(&p, 16).unwrap_err().to_string().contains("UTF-8"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
