//! The end-to-end tests of `rlharness`, one test binary with a module per area: one build and
//! one link for the whole suite instead of one per file. Shared helpers live in `common`;
//! snapshots in `harness/tests/snapshots/`; test data in `harness/tests/data/`, the conformance
//! scripts in `harness/tests/conformance/`, the verl + Arctic stand-in in
//! `harness/tests/fixtures/`.
//!
//! Runs that several tests read are made once per test binary (`common::shared`): the first
//! test to ask makes the run, a test asking meanwhile waits for it, and later ones read it. So
//! are the fault, replay and mock self-test runs that `run::reproduce` re-judges and their own
//! tests check, and the reference of the torch self-tests: the self-tests of one scenario (the
//! 5-step ones with the same rules, the 20-step ones) share one, and each trains its planted run
//! only. A shared run is known by the library's plan hash of what it runs (a self-test's
//! reference: of its scenario with the name, description, tags and expected verdict set alike,
//! which no run uses), the run options, and the path, size and modification time of the test
//! binary, `rlharness` and `rlharness-torch`: a changed scenario, option or rebuilt binary makes
//! a new run, never reuses an old one. Shared runs live in `target/tmp/shared-runs/<pid>/` while
//! the binary runs and go with it; the next invocation makes its own (the golden store and the
//! files a scenario reads are not in the key, so runs are not kept between invocations).

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
