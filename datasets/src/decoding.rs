//! A corrupt file that asks for more memory than there is exits 2, naming the file.
//!
//! A Parquet page carries lengths (run lengths, value counts) that the decoder sizes its
//! buffers by. A corrupt one can ask for exabytes, and a failed allocation aborts a Rust process
//! (exit 134) before any `catch_unwind` can turn it into an error, so "bad input exits 2 with a
//! line naming the file" would not hold. [`while_decoding`] names the file being decoded; a
//! binary that installs [`ReportingAllocator`] as its global allocator then exits 2 with that
//! file's error line when an allocation fails meanwhile. Any other failed allocation aborts,
//! as with the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// The error line's start, up to the size asked for, for the file being decoded now; null
/// while none is. It points into [`LINES`], which never frees one, so the allocator may read it
/// at any moment.
static DECODING: AtomicPtr<String> = AtomicPtr::new(ptr::null_mut());
/// One line start per file decoded so far.
static LINES: Mutex<Vec<(PathBuf, &'static String)>> = Mutex::new(Vec::new());

/// Runs `f`, a decoder reading `path`, so that an allocation it cannot get is reported as that
/// file's problem (with [`ReportingAllocator`] installed). Where threads decode several files at
/// once, the file named is the one whose decoding began last.
pub fn while_decoding<T>(path: &Path, f: impl FnOnce() -> T) -> T {
    struct Restore(*mut String);
    impl Drop for Restore {
        fn drop(&mut self) {
            DECODING.store(self.0, Ordering::SeqCst);
        }
    }
    let line = line_for(path);
    let _restore = Restore(DECODING.swap(ptr::from_ref(line).cast_mut(), Ordering::SeqCst));
    f()
}

/// Whether a decoder is running (see [`while_decoding`]): a panic then is the file's problem,
/// which the reader reports, not a bug to print a backtrace for.
pub fn is_decoding() -> bool {
    !DECODING.load(Ordering::SeqCst).is_null()
}

fn line_for(path: &Path) -> &'static String {
    let mut lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, line)) = lines.iter().find(|(p, _)| p == path) {
        return line;
    }
    let line: &'static String =
        Box::leak(Box::new(format!("error: {}: not a readable Parquet file: decoding it asked for ", path.display())));
    lines.push((path.to_path_buf(), line));
    line
}

/// The system allocator, except that an allocation failing while a file is decoded (see
/// [`while_decoding`]) ends the process with exit code 2 and that file's error line on stderr.
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: ecn_datasets::decoding::ReportingAllocator = ecn_datasets::decoding::ReportingAllocator;
/// # fn main() {}
/// ```
pub struct ReportingAllocator;

// SAFETY: every call is passed to `System` unchanged; `failed` only reads a static and, at
// most, ends the process without unwinding.
unsafe impl GlobalAlloc for ReportingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            failed(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            failed(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from `System` through this allocator.
        unsafe { System.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`.
        let q = unsafe { System.realloc(p, layout, new_size) };
        if q.is_null() {
            failed(new_size);
        }
        q
    }
}

/// With a file being decoded, print its error line and exit 2; otherwise return, and the
/// caller's allocation error handler aborts as usual. Allocates nothing: the heap just failed.
fn failed(size: usize) {
    let line = DECODING.load(Ordering::SeqCst);
    if line.is_null() {
        return;
    }
    // SAFETY: a non-null pointer is one of the leaked lines, which live as long as the process.
    let line = unsafe { &*line };
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = size;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let rest: &[u8] = b" bytes at once, which this process cannot get (a corrupt page, or too little memory?)\n";
    for part in [line.as_bytes(), &digits[at..], rest] {
        // SAFETY: writing a live buffer to stderr; a short or failed write loses only text.
        unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
    }
    // SAFETY: `_exit` ends the process at once, running no destructor or handler that could
    // allocate; the exit code is the one for bad input.
    unsafe { libc::_exit(2) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_gets_one_line_naming_it() {
        // Other tests decode files meanwhile, so this looks at the lines, not at `DECODING`.
        let a = line_for(Path::new("a.parquet"));
        assert!(a.starts_with("error: a.parquet: not a readable Parquet file: decoding it asked for "), "{a}");
        assert!(ptr::eq(a, line_for(Path::new("a.parquet"))), "made once, however often the file is read");
        assert!(line_for(Path::new("b.parquet")).starts_with("error: b.parquet: "));
    }
}
