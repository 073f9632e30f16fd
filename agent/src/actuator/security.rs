//! Who may talk to the actuator: loopback by default; TLS and a bearer token for anything else.
//!
//! The actuator can change a fabric's congestion control, so an open, unauthenticated port on
//! a network interface is refused outright rather than merely warned about.

use super::ActuatorError;
use ecn_datasets::bounded::{read_at_most, read_text_at_most};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Status};

/// PEM files of the server's certificate chain and private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
}

impl TlsFiles {
    /// Read both files into a tonic server TLS configuration.
    pub fn load(&self) -> Result<ServerTlsConfig, ActuatorError> {
        let cert = read_pem_certificates("--tls-cert", &self.cert).map_err(ActuatorError::BadInput)?;
        let key = read_pem("--tls-key", &self.key).map_err(ActuatorError::BadInput)?;
        if !String::from_utf8_lossy(&key).contains("PRIVATE KEY-----") {
            return Err(ActuatorError::BadInput(format!("--tls-key {}: no PEM private key found", self.key.display())));
        }
        // Whoever reads the key can pose as this actuator to its controllers.
        warn_if_others_may_use("--tls-key", &self.key);
        Ok(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
    }
}

/// Whether `pem` holds at least one certificate and every certificate block in it decodes;
/// tonic would only fail later, at the TLS handshake, with a transport error that names no
/// file.
pub fn holds_pem_certificate(pem: &[u8]) -> bool {
    use rustls_pki_types::{pem::PemObject, CertificateDer};
    let mut certs = CertificateDer::pem_slice_iter(pem).peekable();
    certs.peek().is_some() && certs.all(|c| c.is_ok_and(|der| der.first() == Some(&0x30)))
}

/// The most read of a PEM file (a certificate chain, a key, a CA bundle): system CA bundles
/// are some hundred KiB.
const PEM_MAX_BYTES: u64 = 16 << 20;

/// Read a PEM file given to `flag` (a certificate chain, a key, a CA bundle): the error names
/// both. UTF-8 byte order marks, which Windows editors put first (and `cat` of such files puts
/// inside a bundle), are dropped: PEM parsers take one for part of its line, and a certificate
/// read as none, a key as a TLS "transport error" naming no file. No PEM holds those bytes.
pub fn read_pem(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    let pem = read_at_most(path, PEM_MAX_BYTES).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    let mut kept = Vec::with_capacity(pem.len());
    let mut rest = pem.as_slice();
    while !rest.is_empty() {
        if rest.starts_with(UTF8_BOM) {
            rest = &rest[UTF8_BOM.len()..];
        } else {
            kept.push(rest[0]);
            rest = &rest[1..];
        }
    }
    Ok(kept)
}

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// [`read_pem`] for a file of certificates (a chain, a CA bundle): one that holds none is
/// refused here, naming the file, not later at a handshake or beside a URL.
pub fn read_pem_certificates(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    let pem = read_pem(flag, path)?;
    if !holds_pem_certificate(&pem) {
        return Err(format!("{flag} {}: no PEM certificate found", path.display()));
    }
    Ok(pem)
}

/// The most read of a token file, which holds one line.
const TOKEN_MAX_BYTES: u64 = 64 << 10;

/// Read a bearer token from a file: its content, surrounding whitespace removed. The actuator
/// and every client (`run`, `record`, `recommend`) read it here, so a file one side accepts
/// the other does too, and a bad one is named where it is read instead of surfacing as an
/// `Unauthenticated` reply from the far side.
pub fn read_token_file(path: &Path) -> Result<String, ActuatorError> {
    let text = read_text_at_most(path, TOKEN_MAX_BYTES)
        .map_err(|e| ActuatorError::BadInput(format!("--token-file {}: {e}", path.display())))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ActuatorError::BadInput(format!("--token-file {}: the file is empty", path.display())));
    }
    // A bearer token travels in an HTTP header: printable ASCII only (RFC 6750's token68 is a
    // subset). A byte-order mark or a non-breaking space from an editor would otherwise make
    // every call fail far from the file.
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ActuatorError::BadInput(format!(
            "--token-file {}: the token must be one line of printable ASCII without spaces",
            path.display()
        )));
    }
    // Anyone who can read the file can write the switch's settings.
    warn_if_others_may_use("--token-file", path);
    Ok(token.to_string())
}

/// Read a Redis password from a file (`--redis-password-file`): its content, without the
/// line's end. On the command line (in the URL), `ps` showed it to every user of the machine.
pub fn read_password_file(flag: &str, path: &Path) -> Result<String, ActuatorError> {
    let text = read_text_at_most(path, TOKEN_MAX_BYTES)
        .map_err(|e| ActuatorError::BadInput(format!("{flag} {}: {e}", path.display())))?;
    // Only the line's end goes: a password may hold spaces, at either end too.
    let password = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    if password.is_empty() {
        return Err(ActuatorError::BadInput(format!("{flag} {}: the file is empty", path.display())));
    }
    if password.contains('\n') {
        return Err(ActuatorError::BadInput(format!("{flag} {}: the password must be one line", path.display())));
    }
    warn_if_others_may_use(flag, path);
    Ok(password.to_string())
}

/// The access bits of `path` other users have, when they have any: a secret they may read is
/// said, as ssh says of a private key (not refused: a container's secret mount may show other
/// modes).
fn others_access(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then_some(mode)
}

/// Warn that the secret `flag` names, at `path`, is open to other users.
fn warn_if_others_may_use(flag: &str, path: &Path) {
    if let Some(mode) = others_access(path) {
        tracing::warn!(
            file = %path.display(),
            mode = %format!("{mode:04o}"),
            "{flag} is readable or writable by other users; chmod 600 it"
        );
    }
}

/// Refuse to serve on a non-loopback address unless both TLS and a token protect it.
pub fn check_exposure(addr: SocketAddr, tls: bool, token: bool) -> Result<(), ActuatorError> {
    if addr.ip().is_loopback() || (tls && token) {
        return Ok(());
    }
    let missing = match (tls, token) {
        (false, false) => "--tls-cert/--tls-key and --token-file",
        (false, true) => "--tls-cert/--tls-key",
        _ => "--token-file",
    };
    Err(ActuatorError::BadInput(format!(
        "--listen {addr}: a non-loopback address needs TLS and a bearer token; add {missing}, or listen on 127.0.0.1"
    )))
}

/// The gRPC interceptor that checks `authorization: Bearer <token>` on every call, when a
/// token is configured.
#[derive(Clone, Default)]
pub struct BearerAuth {
    token: Option<Arc<str>>,
    /// Calls refused since the last warning: anyone who can reach the port can send them, and
    /// a warning each filled the log (570 KB/s).
    refused: Arc<std::sync::Mutex<Refused>>,
}

/// Refused calls not yet warned of, and when the last warning was.
#[derive(Default)]
struct Refused {
    wrong_token: u64,
    no_token: u64,
    last_peer: Option<std::net::SocketAddr>,
    warned_at: Option<std::time::Instant>,
}

impl Refused {
    fn warn(&mut self, now: std::time::Instant) {
        let peer = self.last_peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
        tracing::warn!(
            wrong_token = self.wrong_token,
            no_token = self.no_token,
            last_from = %peer,
            "refused calls without the right bearer token (counted since the last warning): a client with \
             another token file, or none"
        );
        *self = Refused { warned_at: Some(now), ..Refused::default() };
    }
}

impl BearerAuth {
    /// Check for `token`, or let everything through when `None` (loopback without a token).
    pub fn new(token: Option<String>) -> BearerAuth {
        BearerAuth { token: token.map(Arc::from), refused: Arc::default() }
    }

    /// Count a refused call; warn at most once a second, with the counts since the last.
    fn refuse(&self, wrong_token: bool, peer: Option<std::net::SocketAddr>) {
        let mut r = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if wrong_token {
            r.wrong_token += 1;
        } else {
            r.no_token += 1;
        }
        r.last_peer = peer.or(r.last_peer);
        let now = std::time::Instant::now();
        if r.warned_at.is_none_or(|at| now.duration_since(at) >= std::time::Duration::from_secs(1)) {
            r.warn(now);
        }
    }

    /// Warn of refused calls counted since the last warning, if any (at shutdown: they would
    /// otherwise wait for a next refusal that may never come).
    pub fn flush(&self) {
        let mut r = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if r.wrong_token + r.no_token > 0 {
            r.warn(std::time::Instant::now());
        }
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.token else { return Ok(req) };
        let given = req.metadata().get("authorization").and_then(|v| v.to_str().ok());
        let presented = given.and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        match presented {
            Some(t) if constant_time_eq(t.trim().as_bytes(), expected.as_bytes()) => Ok(req),
            Some(_) => {
                self.refuse(true, req.remote_addr());
                Err(Status::unauthenticated("invalid bearer token"))
            }
            None => {
                self.refuse(false, req.remote_addr());
                Err(Status::unauthenticated("missing 'authorization: Bearer <token>' metadata"))
            }
        }
    }
}

/// Compare without an early exit, so response time does not leak how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    /// Every byte order mark goes, the one inside a bundle too (`cat` of two files saved so):
    /// the second CA was lost.
    #[test]
    fn byte_order_marks_are_dropped_wherever_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let block = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
        let path = dir.path().join("bundle.pem");
        std::fs::write(&path, format!("\u{feff}{block}\u{feff}{block}")).unwrap();
        let pem = read_pem("--tls-ca", &path).unwrap();
        assert_eq!(pem, format!("{block}{block}").into_bytes());
        assert!(holds_pem_certificate(&pem));
    }

    #[test]
    fn only_decodable_certificates_pass() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap().cert.pem();
        assert!(holds_pem_certificate(cert.as_bytes()));
        let two = format!("{cert}\n{cert}");
        assert!(holds_pem_certificate(two.as_bytes()));
        let garbage = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        assert!(!holds_pem_certificate(garbage.as_bytes()), "base64 that is not DER");
        let broken = "-----BEGIN CERTIFICATE-----\n!!! not base64 !!!\n-----END CERTIFICATE-----\n";
        assert!(!holds_pem_certificate(broken.as_bytes()));
        assert!(!holds_pem_certificate(format!("{cert}\n{broken}").as_bytes()), "one bad block spoils the file");
        assert!(!holds_pem_certificate(b"no PEM at all"));
    }

    /// The secrets (token file, TLS key) are said to be open to others by their access bits.
    #[test]
    fn secrets_open_to_other_users_are_found() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key.pem");
        std::fs::write(&p, "secret").unwrap();
        for (mode, others) in [(0o600, None), (0o400, None), (0o644, Some(0o644)), (0o620, Some(0o620))] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(others_access(&p), others, "{mode:o}");
        }
        assert_eq!(others_access(&dir.path().join("absent")), None);
    }

    #[test]
    fn a_token_file_must_hold_one_printable_ascii_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        assert_eq!(read_token_file(&file("ok", "s3cr3t-token_1\n")).unwrap(), "s3cr3t-token_1");
        for (name, text, why) in [
            ("empty", " \n", "the file is empty"),
            ("two-words", "one two\n", "printable ASCII"),
            ("bom", "\u{feff}s3cr3t\n", "printable ASCII"),
            ("nbsp", "s3\u{a0}cr3t", "printable ASCII"),
        ] {
            let e = read_token_file(&file(name, text)).unwrap_err().to_string();
            assert!(e.contains(&format!("--token-file {}", dir.path().join(name).display())) && e.contains(why), "{e}");
        }
    }

    #[test]
    fn exposure_rules() {
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let lo6: SocketAddr = "[::1]:1".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        assert!(check_exposure(lo, false, false).is_ok());
        assert!(check_exposure(lo6, false, false).is_ok());
        assert!(check_exposure(any, true, true).is_ok());
        for (tls, tok) in [(false, false), (true, false), (false, true)] {
            let e = check_exposure(any, tls, tok).unwrap_err().to_string();
            assert!(e.contains("--listen"), "{e}");
        }
    }

    #[test]
    fn bearer_token_checks() {
        let mut auth = BearerAuth::new(Some("s3cret".into()));
        let with = |v: Option<&str>| {
            let mut r = Request::new(());
            if let Some(v) = v {
                r.metadata_mut().insert("authorization", v.parse().unwrap());
            }
            r
        };
        assert!(auth.call(with(Some("Bearer s3cret"))).is_ok());
        assert_eq!(auth.call(with(None)).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert_eq!(auth.call(with(Some("Bearer nope"))).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert_eq!(auth.call(with(Some("s3cret"))).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(BearerAuth::new(None).call(with(None)).is_ok());
    }

    /// Refusals are counted by kind; the first is warned of at once, those within the next
    /// second wait for a later one or for `flush` (at shutdown), which leaves none pending.
    #[test]
    fn refusals_are_counted_and_flushed() {
        let auth = BearerAuth::new(Some("s3cret".into()));
        let pending = || {
            let r = auth.refused.lock().unwrap();
            (r.wrong_token, r.no_token)
        };
        auth.refuse(false, None);
        assert_eq!(pending(), (0, 0), "the first is warned of at once");
        auth.refuse(true, None);
        auth.refuse(true, None);
        auth.refuse(false, None);
        assert_eq!(pending(), (2, 1));
        auth.flush();
        assert_eq!(pending(), (0, 0));
    }
}
