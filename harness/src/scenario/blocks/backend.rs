//! The scenario's `backend` block: which server sits behind the proxy. The mock's script and
//! the torch block are the Arctic crate's types; the backends read the block (`backend`
//! re-exports it).

use rlharness_arctic::mock::MockScript;
use rlharness_arctic::torch_spec::TorchSpec;

/// The scenario's `backend` block: which server sits behind the proxy.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BackendSpec {
    /// The scripted mock, in-process on an ephemeral port.
    Mock(MockScript),
    /// The libtorch backend (feature `torch`): the `rlharness-torch` executable, started as
    /// a child process on an ephemeral port.
    Torch(TorchSpec),
    /// A running Arctic server.
    Remote { url: String },
    /// A recorded cassette, served back in order.
    Replay { cassette: String },
    /// The trainer brings its own backend.
    None,
}

impl BackendSpec {
    /// The block's `kind:` as the scenario writes it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            BackendSpec::Mock(_) => "mock",
            BackendSpec::Torch(_) => "torch",
            BackendSpec::Remote { .. } => "remote",
            BackendSpec::Replay { .. } => "replay",
            BackendSpec::None => "none",
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{BackendSpec, MockScript};

    #[test]
    fn the_scenario_backend_block_selects_the_mock() {
        let plain: BackendSpec = serde_json::from_value(json!({"kind": "mock"})).unwrap();
        assert_eq!(plain, BackendSpec::Mock(MockScript::default()));
        let tuned: BackendSpec = serde_json::from_value(
            json!({"kind": "mock", "reward": {"offset": -0.1}, "efficiency": {"scale": 0.9}}),
        )
        .unwrap();
        let BackendSpec::Mock(script) = tuned else {
            panic!("not the mock: {tuned:?}")
        };
        assert_eq!(script.reward.offset, -0.1);
        assert_eq!(script.efficiency.scale, 0.9);
        assert!(
            serde_json::from_value::<BackendSpec>(json!({"kind": "mock", "rewrd": {}})).is_err()
        );
    }
}
