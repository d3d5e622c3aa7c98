//! One file per command of `cli.rs`, each a short chain of calls into the layers below.
//! `app::dispatch` picks the file; what the command prints and its exit status come back.

pub(crate) mod assets;
pub(crate) mod audit;
pub(crate) mod bisect;
pub(crate) mod calibrate;
pub(crate) mod check;
pub(crate) mod compare;
pub(crate) mod filter;
pub(crate) mod golden;
pub(crate) mod history;
pub(crate) mod job_entry;
pub(crate) mod json_out;
pub(crate) mod list;
pub(crate) mod propagate;
pub(crate) mod proxy;
pub(crate) mod record;
pub(crate) mod run;
pub(crate) mod select;
pub(crate) mod serve;
