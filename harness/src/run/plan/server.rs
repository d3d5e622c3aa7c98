//! The start-up options of a server the harness starts itself (mock, torch child): the GPU
//! counts and `--colocate` of the backend block, each knob's default from the knob table, and
//! `server_flags.json` as they would be passed to the real server.

use serde_json::{json, Value};

use super::translate::TranslateError;
use crate::run::knobs::KnobTable;
use rlharness_arctic::server::ServerOptions;

/// How the harness starts a server of its own.
#[derive(Debug, Clone)]
pub(crate) struct ServerPlan {
    pub(crate) options: ServerOptions,
    /// `remote_backend.colocate`: the `--colocate` switch, and the torch child's layout.
    pub(crate) colocate: bool,
    /// What `server_flags.json` records (only the builtin driver's runs write it).
    pub(crate) flags: Value,
}

fn invalid(path: &str, expected: &str, v: &Value) -> TranslateError {
    TranslateError {
        key: path.to_string(),
        message: format!("expected {expected}, found {v}"),
    }
}

fn knob(table: &KnobTable, config: &Value, path: &str) -> Result<Value, TranslateError> {
    table.value(config, path).ok_or_else(|| TranslateError {
        key: path.to_string(),
        message: "not set, and the knob table has no row for it".into(),
    })
}

fn gpus(table: &KnobTable, config: &Value, name: &str) -> Result<u32, TranslateError> {
    let path = format!("remote_backend.{name}");
    let v = knob(table, config, &path)?;
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| invalid(&path, "a GPU count", &v))
}

/// The server options of the resolved `config`.
pub(crate) fn server_plan(table: &KnobTable, config: &Value) -> Result<ServerPlan, TranslateError> {
    let options = ServerOptions {
        training_gpus: gpus(table, config, "training_gpus")?,
        sampling_gpus: gpus(table, config, "sampling_gpus")?,
        log_prob_gpus: gpus(table, config, "log_prob_gpus")?,
        ..Default::default()
    };
    let path = "remote_backend.colocate";
    let v = knob(table, config, path)?;
    let colocate = v
        .as_bool()
        .ok_or_else(|| invalid(path, "true or false", &v))?;
    // How the harness started its server, as the Arctic client would start a real one. Only
    // the builtin driver stands in for the client; an external trainer did not start this
    // server, so its runs record no flags. `--colocate` is a switch of the real server:
    // present only when colocated.
    let mut argv = vec![
        "--training-gpus".to_string(),
        options.training_gpus.to_string(),
        "--sampling-gpus".to_string(),
        options.sampling_gpus.to_string(),
        "--log-prob-gpus".to_string(),
        options.log_prob_gpus.to_string(),
    ];
    if colocate {
        argv.push("--colocate".to_string());
    }
    let flags = json!({
        "started_by": "rlharness, standing in for the Arctic client's server launch (builtin driver)",
        "argv": argv,
        "flags": {
            "training_gpus": options.training_gpus,
            "sampling_gpus": options.sampling_gpus,
            "log_prob_gpus": options.log_prob_gpus,
            "colocate": colocate,
        },
    });
    Ok(ServerPlan {
        options,
        colocate,
        flags,
    })
}
