//! The end-to-end tests of `rlharness`, one test binary with a module per area: one build and
//! one link for the whole suite instead of one per file. Shared helpers live in `common`;
//! snapshots in `harness/tests/snapshots/`; test data in `harness/tests/data/`, the conformance
//! scripts in `harness/tests/conformance/`, the verl + Arctic stand-in in
//! `harness/tests/fixtures/`.

mod common;

mod accounted;
mod assets;
mod bisect;
mod budget;
mod cli_habits;
mod command_driver;
mod conformance;
mod crash;
mod dssst1;
mod faults;
mod flagship;
mod history;
mod lanes;
mod layers;
mod layout;
mod load;
mod mock_server;
mod netns;
mod other_host;
mod propagate;
mod propagate_env;
mod proxy;
mod ray;
mod real_verl;
mod replay;
mod run;
mod scale_out;
mod selftests;
mod spec;
mod tensorboard;
mod torch_child;
mod verdict;
mod weight_sync;
