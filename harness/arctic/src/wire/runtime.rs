//! What a backend process says about where and how it computes: the torch child sends it in
//! its ready line, the mock reports its own; `run.json`, goldens' provenance and the exact
//! lane of `compare` read it.

/// Where and how a backend the harness starts computes, for `run.json` and a golden's
/// provenance (the torch child sends it in its ready line).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Runtime {
    /// As reported: `cpu`, `cuda:0`.
    pub device: String,
    pub threads: Option<u64>,
    pub torch_version: Option<String>,
    /// Set for a backend whose numbers are a function of the seed on a host (the mock, torch
    /// on the CPU): the run can be held bit for bit to a golden of the same fingerprint.
    pub numerics: Option<Numerics>,
}

/// A deterministic backend's numeric identity on this host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Numerics {
    /// A hash of the exact bits of a probe computation (the backend's kernels on this host,
    /// at this thread count): equal fingerprints, equal arithmetic.
    pub fingerprint: String,
    /// How the CPU kernels were pinned (torch on the CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_kernels: Option<CpuKernels>,
    /// The backend's times are simulated from its cost model, not measured (the mock): its
    /// timing, MFU and throughput series are as exact as the rest, and the exact lane holds
    /// them bit for bit too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated_time: bool,
}

/// A fingerprint's text: the first 6 bytes of a digest, in hex.
pub fn fingerprint_hex(digest: &[u8]) -> String {
    crate::util::hex(&digest[..digest.len().min(6)])
}

/// The instruction-set level libtorch's CPU kernels ran at, and the switches that set it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuKernels {
    /// `avx2`, `avx512`, `baseline`, `native`.
    pub isa: String,
    /// The switches as the process saw them (`ATEN_CPU_CAPABILITY=avx2`, ...).
    pub env: Vec<String>,
    /// Why the level differs from the one asked for (a CPU without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}
