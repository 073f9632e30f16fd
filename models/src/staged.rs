//! Output files that belong together (a model's weights, card and training curve; a run's
//! report files) replaced as one: each is written under a temporary name beside its
//! destination (in a folder of its own, for this user alone), and none is renamed into place
//! until every one is written. A failure part way
//! (a full disk, a plot that cannot be drawn) leaves the previous files as they were, never new
//! weights under an old card. From the first file staged until the commit ends, SIGINT, SIGTERM
//! and SIGHUP wait ([`HeldSignals`]): Ctrl-C between two renames would otherwise leave exactly
//! that, and the temporary files besides.

use ecn_datasets::signals::HeldSignals;
use std::path::{Path, PathBuf};

/// Files written under temporary names, moved into place together by [`StagedFiles::commit`].
/// Dropped without a commit, it removes what was written.
#[derive(Debug, Default)]
pub struct StagedFiles {
    /// (temporary, destination), in the order they were staged.
    files: Vec<(PathBuf, PathBuf)>,
    /// The temporary files whose writer succeeded.
    written: Vec<PathBuf>,
    /// A destination whose temporary file could not be made.
    failed: Option<PathBuf>,
    /// Taken with the first file staged; released after the commit or the clean-up.
    held: Option<HeldSignals>,
}

impl StagedFiles {
    /// Nothing staged yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The path to write `destination`'s content to. It lies on the same file system, so that
    /// the rename is atomic, and ends in the destination's file name, so that writers choosing
    /// a format by extension (libtorch's safetensors, the PNG encoder) choose the same one.
    ///
    /// It is in a folder of its own beside the destination (`.tmp-PID-N/NAME`), made here,
    /// exclusively and for this user alone: the writers open the path by name, and where
    /// another user may write the destination's folder, a link planted at a temporary name, or
    /// swapped in for the file between its creation and the writer's open, would have them
    /// write through it into the file it points to.
    fn stage(&mut self, destination: &Path) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let name = destination.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        self.held.get_or_insert_with(HeldSignals::new);
        // Once a folder: sim stages four files in one, and each scanned it.
        if !self.files.iter().any(|(_, d)| d.parent() == destination.parent()) {
            remove_leftovers_beside(destination);
        }
        let folder = at_a_free_name(
            |n| destination.with_file_name(format!(".tmp-{}-{n}", std::process::id())),
            |folder| std::fs::DirBuilder::new().mode(0o700).create(folder),
        )
        // A commit of the set then fails: it is not written whole.
        .inspect_err(|_| self.failed = Some(destination.to_path_buf()))?;
        let temporary = folder.join(name);
        self.files.push((temporary.clone(), destination.to_path_buf()));
        Ok(temporary)
    }

    /// Stage `destination` and write its content with `write`, which is given the temporary
    /// path. An error message names `destination` wherever it named the temporary file, which
    /// the user never asked for and which is gone once the files are dropped.
    pub fn write<E: std::fmt::Display>(
        &mut self,
        destination: &Path,
        write: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<(), String> {
        let temporary = self.stage(destination).map_err(|e| format!("{}: {e}", destination.display()))?;
        write(&temporary)
            .map_err(|e| e.to_string().replace(&temporary.display().to_string(), &destination.display().to_string()))?;
        self.written.push(temporary);
        Ok(())
    }

    /// Give the set up, keeping the files written so far under their temporary names, as
    /// (destination, where it is): for outputs that took long to make, such as a trained model
    /// whose chart a full disk could not take. The rest are removed.
    pub fn keep_written(mut self) -> Vec<(PathBuf, PathBuf)> {
        let mut kept = Vec::new();
        for (temporary, destination) in std::mem::take(&mut self.files) {
            if self.written.contains(&temporary) && temporary.is_file() {
                kept.push((destination, temporary));
            } else {
                remove_staged(&temporary);
            }
        }
        kept
    }

    /// Rename every staged file into place, in the order staged. Before renaming any, it checks
    /// that every temporary file was written and that no destination is a directory, the
    /// failures a rename within one folder can meet. A rename that fails all the same (a
    /// read-only or immutable file) puts back every file already replaced: on an error nothing
    /// has been replaced, and no temporary file is left.
    pub fn commit(self) -> std::io::Result<()> {
        self.commit_with(|from, to| std::fs::rename(from, to))
    }

    /// [`StagedFiles::commit`], renaming with `rename` (a test makes it fail).
    fn commit_with(mut self, mut rename: impl FnMut(&Path, &Path) -> std::io::Result<()>) -> std::io::Result<()> {
        let error = |path: &Path, why: String| std::io::Error::other(format!("{}: {why}", path.display()));
        if let Some(destination) = &self.failed {
            return Err(error(destination, "its temporary file could not be made".into()));
        }
        for (temporary, destination) in &self.files {
            if destination.is_dir() {
                return Err(error(destination, "is a directory".into()));
            }
            if !temporary.is_file() || !self.written.contains(temporary) {
                return Err(error(destination, format!("{} was not written", temporary.display())));
            }
            // A file replaced keeps its mode (a model or report kept from other users stays so).
            if let Ok(old) = std::fs::metadata(destination) {
                let _ = std::fs::set_permissions(temporary, old.permissions());
            }
            // On disk before its name is: a crash after the rename must not find it empty.
            std::fs::File::open(temporary).and_then(|f| f.sync_all()).map_err(|e| error(destination, e.to_string()))?;
        }
        // Each previous file is kept under a second name first (a hard link, else a copy), so
        // that a failure part way can put it back; the rename over it stays atomic, so the
        // destination always holds the old file or the new one, for a reader or a crash.
        let mut kept: Vec<(PathBuf, PathBuf)> = Vec::new();
        let mut placed: Vec<PathBuf> = Vec::new();
        for (temporary, destination) in &self.files {
            let mut replace = || -> std::io::Result<()> {
                if destination.exists() {
                    kept.push((keep_aside(destination)?, destination.clone()));
                }
                rename(temporary, destination)
            };
            if let Err(e) = replace() {
                for new in &placed {
                    if !kept.iter().any(|(_, d)| d == new) {
                        let _ = std::fs::remove_file(new);
                    }
                }
                // A destination not yet replaced still is its old file (renaming a second link
                // of a file over it would do nothing): only its extra name goes.
                for (old, destination) in &kept {
                    if placed.contains(destination) {
                        let _ = std::fs::rename(old, destination);
                    } else {
                        let _ = std::fs::remove_file(old);
                    }
                }
                return Err(error(destination, format!("cannot move {} into place: {e}", temporary.display())));
            }
            placed.push(destination.clone());
        }
        for (old, _) in kept {
            let _ = std::fs::remove_file(old);
        }
        // The renames themselves are made durable by syncing the folders that hold them.
        let mut folders: Vec<&Path> = self.files.iter().filter_map(|(_, d)| d.parent()).collect();
        folders.dedup();
        for folder in folders {
            let folder = if folder.as_os_str().is_empty() { Path::new(".") } else { folder };
            let _ = std::fs::File::open(folder).and_then(|f| f.sync_all());
        }
        for (temporary, _) in std::mem::take(&mut self.files) {
            remove_staged(&temporary);
        }
        Ok(())
    }
}

/// Remove a temporary file, if it is still there, and the private folder that held it.
/// How old a dead process's leftovers must be before they are removed: a folder shared with
/// another host may hold a live process's, whose PID means nothing here, and those live for
/// seconds (files are staged at the end of the work).
const LEFTOVER_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Remove what a process that died mid-write (killed, out of memory) left beside
/// `destination`: its `.tmp-PID-N` folders and `.old-PID-N-NAME` files, where no process PID
/// runs here and the entry is over [`LEFTOVER_AGE`] old. Nothing else ever removed them.
fn remove_leftovers_beside(destination: &Path) {
    let folder = destination.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(folder) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((staged, rest)) =
            name.strip_prefix(".tmp-").map(|r| (true, r)).or_else(|| name.strip_prefix(".old-").map(|r| (false, r)))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let age = entry.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
        if pid == std::process::id() || runs(pid) || age.is_none_or(|a| a < LEFTOVER_AGE) {
            continue;
        }
        let path = entry.path();
        if staged {
            for file in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                let _ = std::fs::remove_file(file.path());
            }
            let _ = std::fs::remove_dir(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether a process `pid` runs on this host (another user's included).
fn runs(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 is not sent; kill only checks that the process exists.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn remove_staged(temporary: &Path) {
    let _ = std::fs::remove_file(temporary);
    if let Some(folder) = temporary.parent() {
        let _ = std::fs::remove_dir(folder);
    }
}

impl Drop for StagedFiles {
    fn drop(&mut self) {
        for (temporary, _) in &self.files {
            remove_staged(temporary);
        }
    }
}

/// The number in the next temporary folder's or kept file's name (`.tmp-PID-N`, `.old-PID-N-NAME`).
static NEXT_NAME: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Make something under a name nobody holds: `make` is tried at `path(n)`, for a fresh `n`
/// each time, while it finds the name taken (up to 100 times more); its error otherwise.
fn at_a_free_name(
    path: impl Fn(u64) -> PathBuf,
    mut make: impl FnMut(&Path) -> std::io::Result<()>,
) -> std::io::Result<PathBuf> {
    let mut tries = 0;
    loop {
        let candidate = path(NEXT_NAME.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        match make(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// A second name for `destination`'s file (a hard link, else a copy), made exclusively under a
/// name nobody holds, never through a link planted there: `.old-PID-N-NAME`.
fn keep_aside(destination: &Path) -> std::io::Result<PathBuf> {
    let name = destination.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let link_or_copy = |old: &Path| {
        match std::fs::hard_link(destination, old) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {}
            // Made, or the name taken.
            linked => return linked,
        }
        // No hard links here (or not to that file): a copy, into a file made anew.
        let mut to = std::fs::OpenOptions::new().write(true).create_new(true).open(old)?;
        let copied = std::fs::File::open(destination).and_then(|mut from| std::io::copy(&mut from, &mut to));
        copied.map(|_| ()).inspect_err(|_| {
            let _ = std::fs::remove_file(old);
        })
    };
    at_a_free_name(|n| destination.with_file_name(format!(".old-{}-{n}-{name}", std::process::id())), link_or_copy)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => std::io::Error::other(format!(
                "{}: no free name to keep the previous file under",
                destination.display()
            )),
            _ => e,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_replaced_until_every_file_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("m.safetensors"), dir.path().join("m.card.json"));
        std::fs::write(&a, "old weights").unwrap();
        std::fs::write(&b, "old card").unwrap();

        // The second file is never written: the first destination keeps its old content.
        let mut staged = StagedFiles::new();
        staged.write(&a, |p| std::fs::write(p, "new weights")).unwrap();
        let _ = staged.write(&b, |_| Err("disk full"));
        assert!(staged.commit().unwrap_err().to_string().contains("m.card.json"));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "old weights");

        // Dropped part way, it leaves no temporary file behind.
        let mut staged = StagedFiles::new();
        staged.write(&a, |p| std::fs::write(p, "new weights")).unwrap();
        drop(staged);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");

        let mut staged = StagedFiles::new();
        for (path, text) in [(&a, "new weights"), (&b, "new card")] {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            staged
                .write(path, |p| {
                    assert!(p.to_string_lossy().ends_with(&name), "{}", p.display());
                    std::fs::write(p, text)
                })
                .unwrap();
        }
        staged.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new weights");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "new card");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// Given up after a failed write, the files written so far are kept where they were
    /// written, the failed one is gone, and the destinations are untouched.
    /// What a process killed mid-write left is removed by the next write beside it, once old;
    /// a fresh one, or a live process's, stays.
    #[test]
    fn a_dead_processs_old_leftovers_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        let _ = { dead }.wait();
        let an_hour_ago = std::time::SystemTime::now() - LEFTOVER_AGE - std::time::Duration::from_secs(60);
        let left = |name: &str, folder: bool, old: bool| {
            let path = dir.path().join(name);
            if folder {
                std::fs::create_dir(&path).unwrap();
                std::fs::write(path.join("flows.parquet"), "half").unwrap();
            } else {
                std::fs::write(&path, "old model").unwrap();
            }
            if old {
                std::fs::File::open(&path).unwrap().set_modified(an_hour_ago).unwrap();
            }
            path
        };
        let stale = left(&format!(".tmp-{dead_pid}-0"), true, true);
        let stale_old = left(&format!(".old-{dead_pid}-0-m.safetensors"), false, true);
        let fresh = left(&format!(".tmp-{dead_pid}-1"), true, false);
        let live = left(&format!(".tmp-{}-7", std::process::id()), true, true);
        let mut staged = StagedFiles::new();
        staged.write(&dir.path().join("fct.txt"), |p| std::fs::write(p, "new")).unwrap();
        staged.commit().unwrap();
        assert!(!stale.exists() && !stale_old.exists());
        assert!(fresh.exists() && live.exists());
    }

    #[test]
    fn a_file_replaced_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (kept, fresh) = (dir.path().join("m.safetensors"), dir.path().join("m.card.json"));
        std::fs::write(&kept, "old").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut staged = StagedFiles::new();
        staged.write(&kept, |p| std::fs::write(p, "new")).unwrap();
        staged.write(&fresh, |p| std::fs::write(p, "card")).unwrap();
        staged.commit().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&kept), 0o600);
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "new");
        assert_ne!(mode(&fresh), 0, "a new file takes the umask");
    }

    #[test]
    fn given_up_it_keeps_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("m.safetensors"), dir.path().join("m.training.png"));
        let mut staged = StagedFiles::new();
        staged.write(&a, |p| std::fs::write(p, "new weights")).unwrap();
        let mut failed = None;
        let e = staged.write(&b, |p| {
            failed = Some(p.to_path_buf());
            std::fs::write(p, "half a chart")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(e.is_err());
        let kept = staged.keep_written();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0, a);
        assert_eq!(std::fs::read_to_string(&kept[0].1).unwrap(), "new weights");
        assert!(!failed.unwrap().exists() && !a.exists() && !b.exists());
    }

    /// A link planted where a temporary file would go (another user's, in a shared folder) is
    /// not written through: the temporary file goes in a folder made anew, for this user alone.
    #[test]
    fn a_planted_link_is_not_written_through() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        let out = dir.path().join("summary.json");
        std::fs::write(&out, "before").unwrap();
        // Links at the next names, for the temporary folder and for the previous file kept
        // aside (other tests of this binary may take a few of them meanwhile).
        let next = NEXT_NAME.load(std::sync::atomic::Ordering::Relaxed);
        for n in next..next + 40 {
            let pid = std::process::id();
            std::os::unix::fs::symlink(&victim, dir.path().join(format!(".tmp-{pid}-{n}"))).unwrap();
            let old = dir.path().join(format!(".old-{pid}-{n}-summary.json"));
            std::os::unix::fs::symlink(victim.join("kept"), old).unwrap();
        }
        let mut staged = StagedFiles::new();
        staged
            .write(&out, |p| {
                let mode = std::fs::metadata(p.parent().unwrap()).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o700, "a folder for this user alone");
                std::fs::write(p, "ours")
            })
            .unwrap();
        staged.commit().unwrap();
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "nothing written through a link");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "ours");
        assert!(!std::fs::symlink_metadata(&out).unwrap().file_type().is_symlink());
    }

    /// A rename that fails part way (an immutable card, say) puts back the files already
    /// replaced and leaves no temporary file: the weights used to be new under the old card.
    #[test]
    fn a_rename_that_fails_part_way_puts_everything_back() {
        let dir = tempfile::tempdir().unwrap();
        let names = ["m.safetensors", "m.card.json", "m.training.csv"];
        let paths: Vec<PathBuf> = names.iter().map(|n| dir.path().join(n)).collect();
        for p in &paths[..2] {
            std::fs::write(p, "old").unwrap();
        }
        for fail_at in 1..=3 {
            let mut staged = StagedFiles::new();
            for p in &paths {
                staged.write(p, |t| std::fs::write(t, "new")).unwrap();
            }
            let mut calls = 0;
            let e = staged
                .commit_with(|from, to| {
                    calls += 1;
                    if calls == fail_at {
                        return Err(std::io::Error::other("immutable"));
                    }
                    std::fs::rename(from, to)
                })
                .unwrap_err();
            assert!(e.to_string().contains("immutable"), "{e}");
            assert_eq!(std::fs::read_to_string(&paths[0]).unwrap(), "old", "failing rename {fail_at}");
            assert_eq!(std::fs::read_to_string(&paths[1]).unwrap(), "old", "failing rename {fail_at}");
            assert!(!paths[2].exists(), "failing rename {fail_at}");
            let mut left: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into())
                .collect();
            left.sort();
            assert_eq!(left, ["m.card.json", "m.safetensors"], "failing rename {fail_at}");
        }
    }

    #[test]
    fn a_failed_write_names_the_destination() {
        let dir = tempfile::tempdir().unwrap();
        let destination = dir.path().join("missing").join("flows.parquet");
        let mut staged = StagedFiles::new();
        let e = staged
            .write(&destination, |p| std::fs::write(p, "x").map_err(|e| format!("{}: {e}", p.display())))
            .unwrap_err();
        assert!(e.starts_with(&format!("{}: ", destination.display())), "{e}");
        assert!(!e.contains(".tmp-"), "{e}");
        staged.write(&dir.path().join("ok.txt"), |p| std::fs::write(p, "x")).unwrap();
        staged.commit().unwrap_err();
    }
}
