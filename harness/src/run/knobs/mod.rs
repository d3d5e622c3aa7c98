//! The knob table: one row per knob of a backend block (and per trainer knob its adapter
//! translates), with its default, where the translation writes it (`to`, under a condition),
//! where the server reads it (`consumers`) and how a propagation trial perturbs it (`try`).
//! The rows are the Arctic knob manifest (`scenarios/backends/arctic.knobs.yaml`): the builtin
//! driver's translation reads its defaults and destinations from [`arctic`], and `propagate`
//! judges the wire against the same rows.

mod table;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use table::{
    arctic, lookup, KnobTable, BUILTIN_BACKEND, BUILTIN_MANIFEST, BUILTIN_MANIFEST_NAME,
};

/// One knob: a dotted path from the scenario's `config` root.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Knob {
    pub(crate) path: String,
    /// The value the backend YAML (or the trainer's defaults) gives it; `null` when unset. The
    /// translation uses it when the config leaves the knob out (or sets it to `null`); a
    /// string default may refer to other knobs (`${actor_rollout_ref.rollout.n}`).
    pub(crate) default: Value,
    /// Perturbations, each valid for the server. The matrix runs those that differ from the
    /// scenario's own value, so a second value covers scenarios that already set the first.
    #[serde(rename = "try")]
    pub(crate) tries: Vec<Value>,
    /// Where the translation copies the knob's value as it is (a `meta` key, a key of a
    /// JobConfig block), each under its condition. Values the translation computes from the
    /// knob (batch sizes, the scheduler) are not listed here but in `sent_to`.
    #[serde(default)]
    pub(crate) to: Vec<Destination>,
    /// Every other wire location the adapter writes the knob to (whether or not anything
    /// reads it).
    #[serde(default)]
    pub(crate) sent_to: Vec<String>,
    /// Where the server reads it, and when.
    #[serde(default)]
    pub(crate) consumers: Vec<Consumer>,
    /// Wire changes the knob causes on purpose that are not reads of its value (call counts).
    #[serde(default)]
    pub(crate) effects: Vec<String>,
    /// The server's own default when the key is absent; absent when the reference gives none.
    #[serde(default)]
    pub(crate) server_default: Option<Value>,
    /// Why the knob may change nothing the server reads (forward-compatible knobs).
    #[serde(default)]
    pub(crate) allowed_noop: Option<String>,
    /// Interaction pairs: run the knob under each value of each listed knob.
    #[serde(default)]
    pub(crate) conditions: BTreeMap<String, Vec<Value>>,
    /// Free text for the report (why a consumer is conditional, what the server ignores).
    #[serde(default)]
    pub(crate) note: Option<String>,
    /// A key no layer file defines (default null): a user adds it (Hydra's `+`, the scenario
    /// loader's `--set +key=value`), and so do the trials. Exempt from the layer's coverage.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) added: bool,
}

impl Knob {
    /// Every wire location the adapter writes the knob to: its destinations, then `sent_to`.
    pub(crate) fn sent_locations(&self) -> impl Iterator<Item = &String> {
        self.to.iter().map(|d| &d.at).chain(&self.sent_to)
    }
}

/// Where the translation writes a knob: a wire location (`meta.<key>`,
/// `job.training.ds_worker_config.<key>`, `job.sampling.vllm_config.<key>`), written only when
/// every `when` knob has its value. A `null` value is not written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Destination {
    pub(crate) at: String,
    pub(crate) when: BTreeMap<String, Value>,
}

/// A destination is written as its location alone, or as `{at, when}`.
impl<'de> Deserialize<'de> for Destination {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            at: String,
            #[serde(default)]
            when: BTreeMap<String, Value>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            At(String),
            Full(Full),
        }
        Ok(match Form::deserialize(d)? {
            Form::At(at) => Destination {
                at,
                when: BTreeMap::new(),
            },
            Form::Full(Full { at, when }) => Destination { at, when },
        })
    }
}

/// One reader of a knob on the server side.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Consumer {
    /// The wire location (`job.training.ds_worker_config.logits_compute_in_fp32`); a prefix of
    /// a location names its whole subtree.
    pub(crate) at: String,
    /// Conditions for the read: config paths (`remote_backend.train.zorro_train.enable`) or
    /// wire locations (`job.training.full_determinism`), each with the value it must have.
    #[serde(default)]
    pub(crate) when: BTreeMap<String, Value>,
    /// The JSON type the consumer declares.
    #[serde(default, rename = "type")]
    pub(crate) value_type: Option<ValueType>,
    /// The location holds a value computed from the knob (a product, a sum), not the knob
    /// itself: a change is enough, equality is not expected.
    #[serde(default)]
    pub(crate) derived: bool,
}

/// JSON types a consumer can declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ValueType {
    Bool,
    Int,
    Float,
    Number,
    String,
    List,
    Object,
}

impl ValueType {
    pub(crate) fn matches(self, v: &Value) -> bool {
        match self {
            ValueType::Bool => v.is_boolean(),
            ValueType::Int => v.is_i64() || v.is_u64(),
            ValueType::Float => v.is_f64(),
            ValueType::Number => v.is_number(),
            ValueType::String => v.is_string(),
            ValueType::List => v.is_array(),
            ValueType::Object => v.is_object(),
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            ValueType::Bool => "bool",
            ValueType::Int => "int",
            ValueType::Float => "float",
            ValueType::Number => "number",
            ValueType::String => "string",
            ValueType::List => "list",
            ValueType::Object => "object",
        }
    }
}
