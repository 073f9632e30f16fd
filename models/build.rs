// Link libtorch so that the binaries, tests and benches of this crate run as built:
// - Bake libtorch's directory (reported by torch-sys) into the rpath, so they run without
//   LD_LIBRARY_PATH.
// - Keep libtorch_cuda linked where the install has it. torch-sys asks for it, but nothing
//   calls into it directly, so the linker's default --as-needed drops it, and then
//   `tch::Cuda::is_available()` is false on a GPU host and `--device auto` silently trains on the
//   CPU (tch-rs issue #980). Loading it on a host without a GPU is harmless.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else { return };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    let target_is_linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if target_is_linux && std::path::Path::new(&dir).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
