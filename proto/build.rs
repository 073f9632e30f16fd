//! Generate the gRPC code with the protoc that ships inside `protoc-bin-vendored`, so building
//! needs no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/ecn_tuner/v1/actuator.proto");
    tonic_prost_build::configure().compile_protos(&["proto/ecn_tuner/v1/actuator.proto"], &["proto"])?;
    Ok(())
}
