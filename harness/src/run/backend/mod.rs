//! Servers behind the Arctic API, as the harness runs them. What an Arctic-compatible server
//! shares with its clients lives in the crate `rlharness-arctic`, used by its own name: the
//! `Engine` trait and its types, the HTTP surface (`server`), the scripted mock (`mock`), the
//! torch backend's spec (`torch_spec`). This module adds what only the harness does with
//! them: starting the `rlharness-torch` executable as a child process (`child`), and serving a
//! recorded cassette back (`replay`). The scenario's `backend` block ([`BackendSpec`]) is the
//! scenario's (`scenario::blocks`), re-exported here.
//! The torch engine (a real model) lives in the crate `rlharness-torch` and runs in a process
//! of its own, so this crate never links libtorch.

pub mod child;
pub mod replay;

pub use crate::scenario::blocks::BackendSpec;
