//! How libtorch computes on the CPU, and how to pin it so that training reproduces on other CPUs.
//!
//! On the CPU, libtorch's results depend on the processor in their last bits: MKL, its matrix
//! library, picks a code path by instruction set and vendor, and ATen dispatches its vectorized
//! kernels to the widest instruction set present. Training is a long chain of such results, so
//! the same command with the same seed trains another network on another kind of CPU (README
//! "Reproducing the shipped weights"). Pinning both, MKL's conditional numerical
//! reproducibility mode `COMPATIBLE` (one code path for every processor, given the same MKL,
//! thread count and 64-byte-aligned data, which libtorch allocates) and ATen's scalar `default`
//! kernels, takes the processor out of the arithmetic. Tested by holding MKL to narrower
//! instruction sets on one CPU; not yet run on another vendor's. CUDA kernels are another
//! arithmetic again; pinning concerns the CPU only.

use serde::Serialize;

/// MKL's conditional numerical reproducibility setting.
pub const MKL_CBWR: &str = "MKL_CBWR";
/// The instruction set ATen's CPU kernels may use.
pub const ATEN_CPU_CAPABILITY: &str = "ATEN_CPU_CAPABILITY";

/// Pin libtorch's CPU arithmetic to the code paths every x86-64 CPU runs alike.
///
/// Both libraries read their variable once, at their first computation, so this must run
/// before libtorch computes anything. It sets environment variables, which is only sound while
/// no other thread reads the environment: call it first thing in `main`.
pub fn pin_portable() {
    std::env::set_var(MKL_CBWR, "COMPATIBLE");
    std::env::set_var(ATEN_CPU_CAPABILITY, "default");
}

/// The CPU arithmetic a training ran with, as its model card records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuArithmetic {
    /// Pinned with [`pin_portable`] (or the same two variables set by hand): a rerun on any
    /// x86-64 CPU computes alike. Otherwise only the same kind of CPU does.
    pub portable: bool,
    /// The processor's model name, where the system says (`/proc/cpuinfo` on Linux).
    pub cpu: Option<String>,
    /// `MKL_CBWR` as set, if it was.
    pub mkl_cbwr: Option<String>,
    /// `ATEN_CPU_CAPABILITY` as set, if it was.
    pub aten_cpu_capability: Option<String>,
}

impl CpuArithmetic {
    /// What a card records for networks trained on `device`: the CPU's arithmetic, or nothing
    /// on CUDA, whose kernels pinning does not concern.
    pub fn on(device: tch::Device) -> Option<Self> {
        (device == tch::Device::Cpu).then(Self::current)
    }

    /// The arithmetic this process runs with.
    pub fn current() -> Self {
        let var = |name| std::env::var(name).ok();
        Self::of(var(MKL_CBWR), var(ATEN_CPU_CAPABILITY), cpu_model())
    }

    fn of(mkl_cbwr: Option<String>, aten_cpu_capability: Option<String>, cpu: Option<String>) -> Self {
        let portable = mkl_cbwr.as_deref() == Some("COMPATIBLE") && aten_cpu_capability.as_deref() == Some("default");
        CpuArithmetic { portable, cpu, mkl_cbwr, aten_cpu_capability }
    }
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // `pin_portable` itself is tested through `train --portable-arithmetic` in a process of its
    // own: setting the environment here would race with the tests that run libtorch.
    #[test]
    fn portable_needs_both_libraries_pinned() {
        let of = |mkl: Option<&str>, aten: Option<&str>| {
            CpuArithmetic::of(mkl.map(String::from), aten.map(String::from), None).portable
        };
        assert!(of(Some("COMPATIBLE"), Some("default")));
        assert!(!of(Some("COMPATIBLE"), Some("avx2")), "ATen's vector kernels differ by CPU");
        assert!(!of(Some("AVX2"), Some("default")), "MKL's AVX2 path differs by vendor");
        assert!(!of(None, None));
    }
}
