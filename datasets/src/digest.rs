//! File digests: the SHA-256 a model card records of what it was made from and of its own
//! weights, so that a file changed or swapped since shows.

use sha2::{Digest, Sha256};
use std::path::Path;

/// The SHA-256 of the file at `path`, as lowercase hex, read in pieces (a training file may
/// not fit in memory).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hex(&hasher.finalize()))
}

/// The SHA-256 of `bytes` already read (a file's text as a program used it), as lowercase hex.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_a_known_file() {
        let path = std::env::temp_dir().join(format!("ecn-digest-{}", std::process::id()));
        std::fs::write(&path, b"abc").unwrap();
        let digest = sha256_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // FIPS 180-2, appendix B.1.
        assert_eq!(digest, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(sha256_bytes(b"abc"), digest);
        assert!(sha256_file(Path::new("/no/such/file")).is_err());
    }
}
