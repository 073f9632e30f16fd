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
    // On Linux the rpath goes in as DT_RPATH, which is searched before LD_LIBRARY_PATH, not
    // as the newer DT_RUNPATH, searched after it: a user's LD_LIBRARY_PATH naming another
    // libtorch (tch's usual setup) then loaded that one's libc10 beside ours, and the binary
    // died at its first symbol lookup.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags");
    }
    println!("cargo:rustc-env=ECN_TUNER_LIBTORCH_LIB={dir}");
}

// The commit this build comes from, for the model cards it writes (`source_commit`): which
// code trained a model is otherwise a search through history. Rebuilt when HEAD moves. Nothing
// is recorded without git, or where the repository around the sources is not ecn-tuner's own
// (a source tarball unpacked inside another repository would record that one's HEAD).
fn record_source_commit() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(args).current_dir(manifest).output().ok()?;
        out.status.success().then(|| String::from_utf8(out.stdout).ok()).flatten().map(|s| s.trim().to_string())
    };
    // The workspace's root holds Cargo.lock beside this crate's folder.
    let ours = manifest.parent().and_then(|root| root.canonicalize().ok());
    let top = git(&["rev-parse", "--show-toplevel"]).and_then(|t| std::path::Path::new(&t).canonicalize().ok());
    if ours.is_none() || top != ours {
        return;
    }
    let Some(commit) = git(&["rev-parse", "HEAD"]) else { return };
    println!("cargo:rustc-env=ECN_TUNER_SOURCE_COMMIT={commit}");
    // What moves with HEAD: HEAD itself (a checkout), its reflog (every commit, reset or
    // checkout, even once the branch's ref is packed), the branch's loose ref, packed-refs, and
    // a reftable repository's tables.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    // One at a time: a branch path fails in a reftable repository, and must not take the rest.
    for name in ["HEAD", "logs/HEAD", "packed-refs", "reftable"].into_iter().chain(branch.as_deref()) {
        // Relative to the directory git ran in; not `--path-format=absolute`, which git before
        // 2.31 printed back as a path of its own.
        let Some(path) = git(&["rev-parse", "--git-path", name]) else { continue };
        let path = manifest.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
