//! Exit codes of the `rlharness` binary (fixed interface, see docs/architecture.md): the
//! statuses and the error that carries one are `rlharness_arctic::exit`'s, shared with
//! `rlharness-torch`. In the harness only the command layer (`app`) makes a `CommandError`:
//! each lower module's own error converts into it in `app/errors.rs`, so `main` only prints
//! and exits.

pub use rlharness_arctic::exit::{CommandError, ExitStatus};
