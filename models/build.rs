// Link libtorch so that the binaries, tests and benches of this crate run as built: bake
// libtorch's directory (reported by torch-sys) into the rpath, so they run without
// LD_LIBRARY_PATH, and record it for `cuda::available`, which loads libtorch_cuda from there at
// run time where a GPU may be. It is not linked: the linker's default --as-needed drops it
// (nothing calls into it directly), and forced in, it cost every process 400 MiB and 0.3 s to
// start, GPU or not.
fn main() {
    record_source_commit();
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else { return };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:rustc-env=ECN_TUNER_LIBTORCH_LIB={dir}");
}

// The commit this build comes from, for the model cards it writes (`source_commit`): which
// code trained a model is otherwise a search through history. Rebuilt when HEAD moves; outside
// a git checkout, or without git, nothing is recorded.
fn record_source_commit() {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "HEAD"]) else { return };
    println!("cargo:rustc-env=ECN_TUNER_SOURCE_COMMIT={commit}");
    // HEAD names the branch; the branch's ref (loose, or packed) moves with each commit.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let mut args = vec!["rev-parse", "--path-format=absolute", "--git-path", "HEAD", "--git-path", "packed-refs"];
    if let Some(branch) = &branch {
        args.extend(["--git-path", branch]);
    }
    for path in git(&args).unwrap_or_default().lines().filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
}
