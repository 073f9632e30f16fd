//! One module per subcommand.
//!
//! The argument structs' doc comments are also the `--help` text, where `<KMIN>` and
//! `[:SEED]` are usage syntax, not HTML or intra-doc links; rustdoc is told so here.
#![allow(rustdoc::invalid_html_tags, rustdoc::broken_intra_doc_links)]

pub mod actuator;
pub mod eval;
pub mod recommend;
pub mod record;
pub mod run;
pub mod scenarios;
pub mod sim;
pub mod sonic;
pub mod train;
pub mod validate;

use crate::error::CliError;
use ecn_env::fabric::MIN_INTERVAL;
use ecn_env::Nanos;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a `--scenario` argument names: the built-in's name, or the file's canonical path (the
/// argument itself where there is no such file; loading it will say so).
fn scenario_identity(arg: &str) -> PathBuf {
    if ecn_env::scenario::builtin(arg).is_some() {
        return PathBuf::from(format!("builtin:{arg}"));
    }
    file_identity(Path::new(arg))
}

/// What a file argument names: its canonical path, or the path as given where there is no
/// such file (reading it will say so). A path, not its text: two names that differ only in
/// bytes that are not UTF-8 read alike as text.
fn file_identity(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The first flag of `flags`, `(flag, given)` pairs, that was given: one the command as invoked
/// would ignore, to refuse by name.
pub(crate) fn first_given(flags: &[(&'static str, bool)]) -> Option<&'static str> {
    flags.iter().find_map(|&(flag, given)| given.then_some(flag))
}

/// Refuse an argument of `flag` given twice, as `args` spell them, where `same[i]` is what
/// `args[i]` names (a file however spelled, a policy): it would run, or weigh, twice.
fn refuse_repeats<T: PartialEq>(flag: &str, args: &[String], same: &[T]) -> Result<(), CliError> {
    let Some(later) = (0..same.len()).find(|&j| same[..j].contains(&same[j])) else { return Ok(()) };
    let earlier = same.iter().position(|x| *x == same[later]).unwrap_or(later);
    let (a, b) = (&args[earlier], &args[later]);
    let how = if a == b { String::new() } else { format!(" (as {a} and {b})") };
    Err(CliError::BadInput(format!("{flag} {b}: given twice{how}")))
}

/// A duration flag's value (`--interval 200ms`): a number and a unit, as in scenario files
/// (ns, us, ms, s, min or h). `flag` is the flag as typed, `--interval`.
fn duration(flag: &str, v: &str) -> Result<Duration, CliError> {
    let n: Nanos = v.parse().map_err(|e| CliError::BadInput(format!("{flag} '{v}': {e}")))?;
    Ok(Duration::from_nanos(n.0))
}

/// As [`duration`], for a flag where 0 means nothing useful, or would disable a safety
/// mechanism: a zero confirm deadline rolls back every change, zero staleness calls all
/// telemetry stale.
fn positive_duration(flag: &str, v: &str) -> Result<Duration, CliError> {
    let d = duration(flag, v)?;
    if d.is_zero() {
        return Err(CliError::BadInput(format!("{flag} '{v}': must be greater than 0")));
    }
    Ok(d)
}

/// `--interval` of `train` and `record`: a control or sample interval, at least
/// [`MIN_INTERVAL`] (each interval writes a telemetry row per queue).
fn interval(text: &str) -> Result<Nanos, CliError> {
    let interval: Nanos = text.parse().map_err(|e| CliError::BadInput(format!("--interval '{text}': {e}")))?;
    if interval < MIN_INTERVAL {
        return Err(CliError::BadInput(format!("--interval {interval}: the minimum is {MIN_INTERVAL}")));
    }
    Ok(interval)
}

/// Make ready for an `--out` file before any work: refuse a path that is a directory, and
/// check that the folder it goes into is one, or can be made, and takes a file. The folder is
/// made when the file is written ([`make_folder_of`]): a command stopped before then (Ctrl-C,
/// SIGTERM) leaves no empty folders behind.
fn prepare_out_file(out: &Path) -> Result<(), CliError> {
    if out.is_dir() {
        return Err(CliError::BadInput(format!("--out {}: is a directory", out.display())));
    }
    let probe = ecn_datasets::io::name_beside(out, &format!(".probe-{}", std::process::id()));
    check_folder(folder_of(out), out, probe.file_name().unwrap_or_default())
}

/// The folder an `--out` file goes into (`.` for a bare name).
fn folder_of(out: &Path) -> &Path {
    out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Check, making nothing, that `dir` is a folder or can be made one, and takes a file: the
/// nearest part of it that exists must be a folder (not a file, nor a link to nothing) in which
/// `probe`, a file name, can be created. `out` is the `--out` the error names.
fn check_folder(dir: &Path, out: &Path, probe: &std::ffi::OsStr) -> Result<(), CliError> {
    // Parts that cannot be looked up for another reason than their absence (a name too long,
    // a folder that may not be searched) would fail the making too: said now, not after the work.
    let mut unusable = None;
    let nearest = dir.ancestors().find(|a| match a.symlink_metadata() {
        _ if a.as_os_str().is_empty() => true,
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            unusable.get_or_insert(e);
            false
        }
    });
    // A relative path none of whose parts exists starts from the current folder.
    let nearest = nearest.filter(|a| !a.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !nearest.is_dir() {
        return Err(CliError::BadInput(format!("--out {}: {}", out.display(), not_a_folder(nearest))));
    }
    if let Some(e) = unusable {
        return Err(CliError::output_path(format!("--out {}: {e}", out.display()), &e));
    }
    probe_writable(&nearest.join(probe), out)
}

/// Why `path`, which is there, is no folder: a file, or a link to nothing.
fn not_a_folder(path: &Path) -> String {
    if path.exists() {
        return format!("{} is a file, not a folder", path.display());
    }
    let to = std::fs::read_link(path).unwrap_or_default();
    let target = path.parent().unwrap_or(Path::new(".")).join(&to);
    // A link to a link that leads nowhere: a loop, or a chain ending in nothing.
    let why = if target.symlink_metadata().is_ok() { "which leads nowhere" } else { "which does not exist" };
    format!("{} is a link to {}, {why}", path.display(), to.display())
}

/// The writers put a temporary file beside their destination and rename it into place: make
/// sure the folder takes one now, not after the work, by creating and removing `probe`.
/// `out` is the `--out` the error names.
fn probe_writable(probe: &Path, out: &Path) -> Result<(), CliError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(probe)
        .map_err(|e| CliError::output_path(format!("--out {}: cannot write there: {e}", out.display()), &e))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// As [`prepare_out_file`], for a telemetry file: its extension must name a format
/// (`.parquet` or `.csv`).
fn prepare_telemetry_out(out: &Path) -> Result<(), CliError> {
    if ecn_datasets::io::TelemetryFormat::of(out).is_none() {
        return Err(CliError::BadInput(format!("--out {}: the file must end in .parquet or .csv", out.display())));
    }
    prepare_out_file(out)
}

/// Make ready for an `--out` folder before any work: check that it is one, or can be made, and
/// takes a file, and refuse it if one of the `files` the command will write there is a
/// directory. Found after the work, that would fail with some files written and others not.
/// The folder is made when the files are written ([`create_folder`]).
fn prepare_out_dir<'a>(dir: &Path, files: impl IntoIterator<Item = &'a str>) -> Result<(), CliError> {
    refuse_directories(files.into_iter().map(|name| dir.join(name)))?;
    check_folder(dir, dir, std::ffi::OsStr::new(&format!(".probe-{}", std::process::id())))
}

/// Make the folder an `--out` file goes into, as it is written.
fn make_folder_of(out: &Path) -> Result<(), CliError> {
    create_folder(folder_of(out), out)
}

/// `create_dir_all`, saying which part of the path is a file, or a link to nothing, where it
/// fails for that (its own error, "File exists", names neither); the error names `--out out`.
/// Called as the outputs are written, so that a command stopped before leaves no empty folders.
fn create_folder(dir: &Path, out: &Path) -> Result<(), CliError> {
    // The folders this makes, deepest first: removed again if the command fails.
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && a.symlink_metadata().is_err())
        .map(Path::to_path_buf)
        .collect();
    let made = std::fs::create_dir_all(dir);
    CREATED_FOLDERS.lock().unwrap_or_else(|e| e.into_inner()).extend(missing);
    made.map_err(|e| {
        let in_the_way = |a: &&Path| !a.as_os_str().is_empty() && a.symlink_metadata().is_ok() && !a.is_dir();
        let why = dir.ancestors().find(in_the_way).map_or_else(|| e.to_string(), not_a_folder);
        CliError::output_path(format!("--out {}: {why}", out.display()), &e)
    })
}

/// Folders [`create_folder`] made for outputs, deepest first.
static CREATED_FOLDERS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Remove the folders made for outputs that are still empty: a command that failed left
/// `--out deep/a/b/c/x.csv`'s folders behind, empty.
pub fn remove_created_folders() {
    for dir in CREATED_FOLDERS.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        let _ = std::fs::remove_dir(dir);
    }
}

/// The files a scenario given as `name_or_path` reads: its own, and those it names (CDFs, an
/// HPCC configuration's flow and topology files); none for a built-in. An output over one of
/// them destroyed it (a CDF in `sim --out`'s folder named `fct.txt`, a training curve over a
/// CDF), and a rerun failed on the output's text.
fn scenario_files(name_or_path: &str) -> Vec<PathBuf> {
    if ecn_env::scenario::builtin(name_or_path).is_some() {
        return Vec::new();
    }
    let mut files = vec![PathBuf::from(name_or_path)];
    // What the loading reads; a scenario that does not load is said so by the command's own load.
    if let Ok(text) = ecn_env::scenario::ScenarioText::read(name_or_path) {
        if text.load(None).is_ok() {
            files.extend(text.referenced_files().into_iter().map(|(p, _)| p));
        }
    }
    files
}

/// Refuse an output that is one of the inputs, the same file however named: writing it would
/// destroy what the command read (and a model card would record a file that is gone).
/// `outputs` are the files it will write (they may exist already); `inputs`, the files it
/// reads, with the flag that names each.
fn refuse_overwriting_inputs(outputs: &[PathBuf], inputs: &[(&str, &Path)]) -> Result<(), CliError> {
    use std::os::unix::fs::MetadataExt;
    let identity = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    for out in outputs {
        let Some(written) = identity(out) else { continue };
        if let Some((flag, input)) = inputs.iter().find(|(_, input)| identity(input) == Some(written)) {
            return Err(CliError::BadInput(format!(
                "--out: {} would be written over {flag} {}, which this command reads",
                out.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Refuse the first of `paths`, files an `--out` will write, that is a directory: writing it
/// would fail only after the work.
fn refuse_directories(paths: impl IntoIterator<Item = PathBuf>) -> Result<(), CliError> {
    match paths.into_iter().find(|path| path.is_dir()) {
        Some(path) => Err(CliError::BadInput(format!("--out: {} is a directory", path.display()))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output over a file the scenario reads (its CDF), however named, is refused; the
    /// scenario file alone was checked, and `sim --out` overwrote a CDF named `fct.txt`.
    #[test]
    fn outputs_over_the_files_a_scenario_reads_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("fct.txt"), "1000 0\n2000 100\n").unwrap();
        let scenario = dir.path().join("s.toml");
        let toml =
            "name = \"s\"\nbase = \"websearch-50\"\n[[workload]]\nkind = \"poisson\"\ncdf = \"fct.txt\"\nload = 0.3\n";
        std::fs::write(&scenario, toml).unwrap();
        let read = scenario_files(scenario.to_str().unwrap());
        assert_eq!(read.len(), 2, "{read:?}");
        let inputs: Vec<_> = read.iter().map(|f| ("--scenario", f.as_path())).collect();
        let over_cdf = [dir.path().join(".").join("fct.txt")];
        let e = refuse_overwriting_inputs(&over_cdf, &inputs).unwrap_err().to_string();
        assert!(e.contains("fct.txt") && e.contains("which this command reads"), "{e}");
        assert!(refuse_overwriting_inputs(&[dir.path().join("eval.json")], &inputs).is_ok());
        assert!(scenario_files("websearch-50").is_empty(), "a built-in reads no file");
    }

    /// Outputs are checked before the work without making their folders, which come as they
    /// are written: a command stopped between (Ctrl-C, SIGTERM) left them behind, empty.
    #[test]
    fn outputs_are_checked_without_making_their_folders() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        prepare_out_dir(&deep, ["eval.md"]).unwrap();
        prepare_out_file(&deep.join("m.safetensors")).unwrap();
        prepare_telemetry_out(&dir.path().join("x/t.parquet")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no folder made, no probe left");
        // What creating them would have met, said as before.
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let e = prepare_out_dir(&file.join("x"), ["eval.md"]).unwrap_err().to_string();
        assert!(e.contains("f is a file, not a folder"), "{e}");
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
        let e = prepare_out_file(&link.join("deeper/m.safetensors")).unwrap_err().to_string();
        assert!(e.contains("l is a link to") && e.contains("which does not exist"), "{e}");
        // A name too long to make is refused before the work too (it was passed over as absent).
        let long = dir.path().join("n".repeat(300)).join("x.csv");
        let e = prepare_telemetry_out(&long).unwrap_err().to_string();
        assert!(e.contains("File name too long"), "{e}");
        assert!(prepare_out_dir(&dir.path().join("a/".repeat(2100)), ["eval.md"]).is_err(), "a path over PATH_MAX");
    }

    /// The folders made for an output that never came go again; one holding a file stays.
    #[test]
    fn folders_made_for_outputs_are_removed_while_empty() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a/b/c/x.csv");
        create_folder(out.parent().unwrap(), &out).unwrap();
        let kept = dir.path().join("k/y.csv");
        create_folder(kept.parent().unwrap(), &kept).unwrap();
        std::fs::write(&kept, "").unwrap();
        remove_created_folders();
        assert!(!dir.path().join("a").exists());
        assert!(kept.exists());
    }
}
