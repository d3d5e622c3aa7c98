//! The verl-style `config:` tree: layers, includes, `--set` overrides and `${a.b}`
//! interpolation, ending in a [`ConfigTree`] where every value knows its origin.
//!
//! Rules (the scenario documentation repeats them):
//! - Layers, lowest first: `defaults/verl.yaml` of the scenarios root (the copy built into
//!   the binary when that root has none, so a scenario kept in any folder works), then included files,
//!   then the scenario's own `config`, then `--set`. Values from the defaults file and from
//!   included files carry `Origin::Default`: to a scenario they are the base it starts from.
//! - A scenario key that no layer below defines is an error (this catches misspelled verl
//!   knobs). A mapping may replace a `null` default wholesale (verl leaves optional blocks
//!   null); replacing a mapping by a scalar, or a non-null scalar by a mapping, is an error.
//! - `include: backends/arctic.yaml` (or a list of paths) inside any mapping of `config`
//!   makes that file's tree the base of the mapping; the sibling keys override it and must
//!   exist in it (or in the defaults). Include paths are relative to the scenarios root (the
//!   nearest ancestor folder named `scenarios`, else the scenario's own folder), like a Hydra
//!   config group, so every scenario names a backend file the same way wherever it lives.
//!   Included files may include others; a cycle is an error. `include` is a reserved key.
//! - `--set config.a.b=v` must name an existing key; `+config.a.b=v` adds a key that must not
//!   exist yet and `++config.a.b=v` sets it either way (Hydra's rules).
//! - `${a.b.c}` is resolved after all layers and overrides, against the whole config tree
//!   (OmegaConf's absolute interpolation); `${.x}` is relative to the containing mapping and
//!   each further dot goes one level up. A string that is exactly one `${...}` takes the
//!   referenced value with its type (a subtree included); a reference inside a longer string
//!   is formatted into it (scalars only). `\${` is a literal `${`. Resolvers (`${oc.env:X}`)
//!   and nested references are not supported and say so.
//!
//! `layering` merges the layers and their includes, `overrides` applies `--set`,
//! `interpolate` resolves `${...}`; the tree and the order of the layers are here.

mod interpolate;
mod layering;
mod overrides;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::de::from_node;
use super::yaml::{self, join_path, Origin, SpannedNode, SpannedValue};
use super::SpecError;
use interpolate::resolve_interpolations;
use layering::{includes_only, Layering};
use overrides::apply_config_override;
pub(crate) use overrides::Override;
use rlharness_arctic::fsx;

/// The defaults file, relative to the scenarios root.
pub(crate) const DEFAULTS_FILE: &str = "defaults/verl.yaml";

/// The verl defaults built into the binary: used when the scenarios root has no
/// `defaults/verl.yaml` of its own (a scenario in a user's repository or a temp folder).
pub(crate) const BUILTIN_DEFAULTS: &str = include_str!("../../../../scenarios/defaults/verl.yaml");

/// The name the built-in defaults go by in origins and error messages.
pub(crate) const BUILTIN_DEFAULTS_NAME: &str = "<built-in>/defaults/verl.yaml";

/// A layer file built into the binary, so that `include:` finds it from any repository. A file
/// at the same path under the scenarios root overrides it.
pub(crate) struct BuiltinLayer {
    /// Its path relative to a scenarios root (`backends/arctic.yaml`).
    pub(crate) path: &'static str,
    /// The short name `include:` also accepts (`arctic`).
    pub(crate) alias: &'static str,
    /// The config path the layer is written for (`remote_backend`): a scenario that writes a
    /// mapping there without including any file has its keys checked against this layer.
    pub(crate) mount: &'static str,
    pub(crate) text: &'static str,
}

/// The layers built in: Arctic RL's `remote_backend` block, as shipped under `scenarios/`.
pub(crate) const BUILTIN_LAYERS: &[BuiltinLayer] = &[BuiltinLayer {
    path: "backends/arctic.yaml",
    alias: "arctic",
    mount: "remote_backend",
    text: include_str!("../../../../scenarios/backends/arctic.yaml"),
}];

/// What built-in layers go by in origins, error messages and a run's list of sources.
const BUILTIN_PREFIX: &str = "<built-in>/";

impl BuiltinLayer {
    /// The built-in layer an include names, by path or short name.
    pub(crate) fn named(name: &str) -> Option<&'static BuiltinLayer> {
        BUILTIN_LAYERS
            .iter()
            .find(|l| l.path == name || l.alias == name)
    }

    /// The name of the built-in copy (`<built-in>/backends/arctic.yaml`).
    pub(crate) fn source_name(&self) -> PathBuf {
        PathBuf::from(format!("{BUILTIN_PREFIX}{}", self.path))
    }
}

/// The text of a source that is built into the binary (named `<built-in>/...`): the scenario
/// hash covers it as it covers a file read from disk.
pub(crate) fn builtin_text(source: &Path) -> Option<&'static str> {
    if source == Path::new(BUILTIN_DEFAULTS_NAME) {
        return Some(BUILTIN_DEFAULTS);
    }
    let rel = source.to_str()?.strip_prefix(BUILTIN_PREFIX)?;
    BUILTIN_LAYERS
        .iter()
        .find(|l| l.path == rel)
        .map(|l| l.text)
}

/// A resolved value (a leaf or a whole subtree) and where it came from. For a subtree the
/// origin is that of the highest layer that wrote the mapping itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub value: Value,
    pub origin: Origin,
}

/// The resolved `config` tree: every layer merged, every override applied, every `${}`
/// resolved. Paths are dotted from the config root (`actor_rollout_ref.rollout.n`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigTree {
    root: SpannedNode,
    entries: BTreeMap<String, Resolved>,
    /// Leaf values of the layers below the scenario (defaults and includes), resolved.
    defaults: BTreeMap<String, Value>,
}

impl ConfigTree {
    fn build(root: SpannedNode, defaults_root: Option<&SpannedNode>) -> Self {
        let mut entries = BTreeMap::new();
        collect_entries(&root, "", &mut entries, true);
        let mut defaults = BTreeMap::new();
        if let Some(d) = defaults_root {
            let mut all = BTreeMap::new();
            collect_entries(d, "", &mut all, false);
            defaults = all.into_iter().map(|(k, r)| (k, r.value)).collect();
        }
        Self {
            root,
            entries,
            defaults,
        }
    }

    /// A leaf or a subtree; `""` is the whole tree.
    pub fn get(&self, path: &str) -> Option<&Resolved> {
        self.entries.get(path)
    }

    /// The spanned node at a path (for positioned errors in later stages).
    pub(crate) fn node(&self, path: &str) -> Option<&SpannedNode> {
        if path.is_empty() {
            return Some(&self.root);
        }
        self.root.lookup(&split_path(path))
    }

    /// A typed value; a type error names the value's source position and the `config.` path.
    pub fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>, SpecError> {
        match self.node(path) {
            None => Ok(None),
            Some(node) => from_node::<T>(node, &join_path("config", path)).map(Some),
        }
    }

    /// Every leaf (scalar, sequence or empty mapping) with its dotted path, sorted by path.
    pub fn leaves(&self) -> Vec<(String, &Resolved)> {
        let mut out = Vec::new();
        collect_leaf_paths(&self.root, "", &mut out);
        let mut leaves: Vec<(String, &Resolved)> = out
            .into_iter()
            .filter_map(|p| self.entries.get(&p).map(|r| (p, r)))
            .collect();
        leaves.sort_by(|a, b| a.0.cmp(&b.0));
        leaves
    }

    /// The default value of a leaf (from the defaults file and included files), if any.
    pub(crate) fn default_of(&self, path: &str) -> Option<&Value> {
        self.defaults.get(path)
    }

    pub fn to_json(&self) -> Value {
        self.root.to_json()
    }
}

fn split_path(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

fn is_leaf(node: &SpannedNode) -> bool {
    !matches!(&node.value, SpannedValue::Map(e) if !e.is_empty())
}

fn collect_leaf_paths(node: &SpannedNode, path: &str, out: &mut Vec<String>) {
    if let SpannedValue::Map(entries) = &node.value {
        if !entries.is_empty() {
            for (k, _, child) in entries {
                collect_leaf_paths(child, &join_path(path, k), out);
            }
            return;
        }
    }
    out.push(path.to_string());
}

fn collect_entries(
    node: &SpannedNode,
    path: &str,
    out: &mut BTreeMap<String, Resolved>,
    with_subtrees: bool,
) {
    if with_subtrees || is_leaf(node) {
        out.insert(
            path.to_string(),
            Resolved {
                value: node.to_json(),
                origin: node.origin.clone(),
            },
        );
    }
    if let SpannedValue::Map(entries) = &node.value {
        for (k, _, child) in entries {
            collect_entries(child, &join_path(path, k), out, with_subtrees);
        }
    }
}

/// The scenarios root of a scenario file: the nearest ancestor folder named `scenarios`, else
/// the file's own folder.
pub(crate) fn scenarios_root(scenario: &Path) -> PathBuf {
    let parent = scenario.parent().unwrap_or(Path::new(""));
    parent
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "scenarios"))
        .unwrap_or(parent)
        .to_path_buf()
}

/// Read and parse a layer file (defaults or include); its values become `Origin::Default`.
pub(crate) fn load_layer_file(path: &Path) -> Result<SpannedNode, SpecError> {
    let text = fsx::read_to_string(path).map_err(|e| SpecError::file(path, e.to_string()))?;
    load_layer_text(&text, path)
}

/// A layer from its text; `path` names it in origins and errors.
pub(crate) fn load_layer_text(text: &str, path: &Path) -> Result<SpannedNode, SpecError> {
    let mut node = yaml::parse(text, path)?;
    node.set_origin_deep(&|n| Origin::Default {
        path: n.pos.file.clone(),
        line: n.pos.line,
    });
    if matches!(node.value, SpannedValue::Null) {
        node.value = SpannedValue::Map(Vec::new());
    }
    Ok(node)
}

/// Everything layering produces for one scenario.
pub(crate) struct LayeredConfig {
    pub(crate) tree: ConfigTree,
    pub(crate) sources: Vec<PathBuf>,
}

/// Build the config tree of a scenario: defaults, includes and the scenario's `config` node
/// (`None` when the scenario has none), then the config overrides, then interpolation.
pub(crate) fn layer_config(
    root_dir: &Path,
    scenario_config: Option<SpannedNode>,
    overrides: &[(&Override, Vec<String>)],
    errors: &mut Vec<SpecError>,
) -> Option<LayeredConfig> {
    let mut defaults_path = root_dir.join(DEFAULTS_FILE);
    let loaded = if defaults_path.exists() {
        load_layer_file(&defaults_path)
    } else {
        defaults_path = PathBuf::from(BUILTIN_DEFAULTS_NAME);
        load_layer_text(BUILTIN_DEFAULTS, &defaults_path)
    };
    let defaults = match loaded {
        Ok(d) => d,
        Err(mut e) => {
            if e.line == 0 {
                e.message = format!(
                    "cannot read the verl defaults file ({}); every scenario's config is layered over it",
                    e.message
                );
            }
            errors.push(e);
            return None;
        }
    };
    let mut layering = Layering::new(root_dir.to_path_buf());
    layering.sources.push(defaults_path);
    let mut base_only = defaults.clone();
    let mut tree = defaults;
    if let Some(cfg) = scenario_config {
        match &cfg.value {
            SpannedValue::Map(_) => {
                if let Some(inc) = includes_only(&cfg) {
                    // Includes-only pass: what the scenario starts from (its defaults).
                    let mut quiet = Layering::new(root_dir.to_path_buf());
                    quiet.apply(&mut base_only, inc, "", true);
                }
                layering.apply(&mut tree, cfg, "", true);
            }
            SpannedValue::Null => {}
            other => {
                let message = format!("expected a mapping, found {}", other.kind());
                layering
                    .errors
                    .push(SpecError::at(&cfg.pos, "config", message));
            }
        }
    }
    for (ov, segments) in overrides {
        apply_config_override(&mut layering, &mut tree, ov, segments);
    }
    let resolved = resolve_interpolations(&tree, &mut layering.errors);
    let mut ignored = Vec::new();
    let base_resolved = resolve_interpolations(&base_only, &mut ignored);
    errors.extend(layering.errors);
    Some(LayeredConfig {
        tree: ConfigTree::build(resolved, Some(&base_resolved)),
        sources: layering.sources,
    })
}

#[cfg(test)]
mod tests;
