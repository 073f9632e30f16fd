//! libtorch's CUDA library, loaded at run time, and only where a GPU may be.
//!
//! Linked at build time, `libtorch_cuda` and the CUDA libraries it pulls in cost every process
//! of the binary about 400 MiB of memory and 0.3 s to start, on hosts without a GPU too: the
//! actuator, which never runs a network, included. Only training picks a device, so it loads
//! the library when it asks, on a host with an NVIDIA driver. Its static initializers then
//! register libtorch's CUDA backend, and `tch::Cuda::is_available()` sees the GPU. (Not linked
//! and not loaded, that call is false on a GPU host: tch-rs issue #980.)

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use tracing::{debug, warn};

/// Whether libtorch sees a CUDA device, loading its CUDA library first where a driver is
/// present. Call it before anything else asks libtorch about CUDA: libtorch settles once, on
/// the first question, whether it has a CUDA backend.
pub fn available() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(load) && tch::Cuda::is_available()
}

/// Load `libtorch_cuda.so` from libtorch's directory (recorded by the build) if an NVIDIA
/// driver is present; whether it is loaded.
fn load() -> bool {
    let driver = ["/proc/driver/nvidia", "/dev/nvidiactl"].iter().any(|p| Path::new(p).exists());
    let Some(dir) = option_env!("ECN_TUNER_LIBTORCH_LIB") else { return false };
    let lib = Path::new(dir).join("libtorch_cuda.so");
    if !driver || !lib.exists() {
        debug!(driver, library = %lib.display(), "libtorch's CUDA library not loaded");
        return false;
    }
    match load_global(&lib) {
        Ok(()) => true,
        Err(e) => {
            warn!("an NVIDIA driver is present, but {} does not load: {e}; running on the CPU", lib.display());
            false
        }
    }
}

/// `dlopen` `lib` for the life of the process, its symbols visible to libraries loaded later.
fn load_global(lib: &Path) -> Result<(), String> {
    let path = CString::new(lib.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: `path` is a valid C string for the call; the handle is never closed, so nothing
    // the library registers outlives it.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if !handle.is_null() {
        return Ok(());
    }
    // SAFETY: dlerror returns a thread-local C string, or null; read at once.
    let why = unsafe { libc::dlerror() };
    if why.is_null() {
        return Err("dlopen failed".into());
    }
    // SAFETY: non-null, NUL-terminated, as dlerror guarantees.
    Err(unsafe { std::ffi::CStr::from_ptr(why) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library loads where the build found it (on a host without a GPU too: only its use
    /// needs one), and a missing one is an error that says why.
    #[test]
    fn the_cuda_library_loads_where_the_build_found_it() {
        assert!(load_global(Path::new("/nonexistent/libtorch_cuda.so")).unwrap_err().contains("libtorch_cuda"));
        let Some(dir) = option_env!("ECN_TUNER_LIBTORCH_LIB") else { return };
        let lib = Path::new(dir).join("libtorch_cuda.so");
        if lib.exists() {
            load_global(&lib).unwrap();
        }
    }
}
