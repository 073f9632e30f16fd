// Link libtorch so that the binaries, tests and benches of this crate run as built: bake
// libtorch's directory (reported by torch-sys) into the rpath, so they run without
// LD_LIBRARY_PATH, and record it for `cuda::available`, which loads libtorch_cuda from there at
// run time where a GPU may be. It is not linked: the linker's default --as-needed drops it
// (nothing calls into it directly), and forced in, it cost every process 400 MiB and 0.3 s to
// start, GPU or not.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else { return };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:rustc-env=ECN_TUNER_LIBTORCH_LIB={dir}");
}
