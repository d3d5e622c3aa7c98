//! The hand-shake between `rlharness run` and the `rlharness-torch` executable it starts as a
//! child process (the spawning side is the harness's `backend::child`).
//!
//! The protocol: the runner passes the resolved backend block (`--backend-json`: a
//! `TorchSpec` as JSON, its paths already resolved beside the scenario), the seed, the
//! server's start-up flags and `--port 0`, and sets the CPU kernel switches of the pinned
//! level in the child's environment, so libtorch reads them from its first instruction. With
//! `--child` the child prints exactly one line on stdout once it listens, [`Ready`] as JSON
//! (its address and its runtime), and exits when its stdin closes (its parent is gone, even
//! killed).

use crate::engine::Runtime;

/// The executable's file name (next to `rlharness`).
pub const EXE_NAME: &str = "rlharness-torch";

/// Overrides where the executable is looked for.
pub const EXE_ENV: &str = "RLHARNESS_TORCH_BIN";

/// How a missing executable is built.
pub const BUILD_HINT: &str =
    "build it with `cargo build --release --features torch` (after `bash ci/setup-libtorch.sh`), \
     which puts it beside `rlharness`, or point RLHARNESS_TORCH_BIN at it";

/// The one line a `--child` prints on stdout once it listens.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ready {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// What the engine reports of itself, for `run.json` (device, threads, torch version,
    /// numerics).
    pub runtime: Runtime,
}
