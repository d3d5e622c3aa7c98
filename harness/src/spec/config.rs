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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::de::from_node;
use super::error::{closest, push_unique};
use super::yaml::{self, join_path, Origin, Pos, SpannedNode, SpannedValue};
use super::SpecError;
use crate::fsx;

/// The defaults file, relative to the scenarios root.
pub(crate) const DEFAULTS_FILE: &str = "defaults/verl.yaml";

/// The verl defaults built into the binary: used when the scenarios root has no
/// `defaults/verl.yaml` of its own (a scenario in a user's repository or a temp folder).
pub(crate) const BUILTIN_DEFAULTS: &str = include_str!("../../../scenarios/defaults/verl.yaml");

/// The name the built-in defaults go by in origins and error messages.
pub(crate) const BUILTIN_DEFAULTS_NAME: &str = "<built-in>/defaults/verl.yaml";

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
fn load_layer_text(text: &str, path: &Path) -> Result<SpannedNode, SpecError> {
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

/// Merges layers into one spanned tree, collecting every error it meets.
pub(crate) struct Layering {
    root: PathBuf,
    pub(crate) errors: Vec<SpecError>,
    /// Every file read, in reading order (for the scenario hash).
    pub(crate) sources: Vec<PathBuf>,
    include_stack: Vec<PathBuf>,
}

impl Layering {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self {
            root,
            errors: Vec::new(),
            sources: Vec::new(),
            include_stack: Vec::new(),
        }
    }

    fn error(&mut self, pos: &Pos, path: &str, message: String) {
        push_unique(
            &mut self.errors,
            SpecError::at(pos, join_path("config", path), message),
        );
    }

    /// Apply `over` onto `base` at `path`. With `strict`, keys must exist in `base` (the
    /// scenario and `--set` layers); without, a layer may add keys (included files).
    pub(crate) fn apply(
        &mut self,
        base: &mut SpannedNode,
        over: SpannedNode,
        path: &str,
        strict: bool,
    ) {
        let SpannedNode { value, origin, pos } = over;
        let mut entries = match value {
            SpannedValue::Map(entries) => entries,
            value => {
                let over = SpannedNode { value, origin, pos };
                self.replace(base, over, path, strict);
                return;
            }
        };
        if let Some(i) = entries.iter().position(|(k, _, _)| k == "include") {
            let (_, key_pos, spec) = entries.remove(i);
            self.include(base, &spec, &key_pos, path);
        }
        match &mut base.value {
            SpannedValue::Map(base_entries) => {
                for (key, key_pos, child) in entries {
                    match base_entries.iter_mut().find(|(k, _, _)| *k == key) {
                        Some((_, _, base_child)) => {
                            self.apply(base_child, child, &join_path(path, &key), strict)
                        }
                        None if strict => {
                            let known: Vec<&str> =
                                base_entries.iter().map(|(k, _, _)| k.as_str()).collect();
                            let hint = match closest(&key, known.iter().copied()) {
                                Some(c) => format!("; did you mean `{c}`?"),
                                None if known.is_empty() => String::new(),
                                None => format!("; expected one of: {}", known.join(", ")),
                            };
                            let where_ = if path.is_empty() {
                                "the config root".to_string()
                            } else {
                                format!("`{path}`")
                            };
                            self.error(
                                &key_pos,
                                &join_path(path, &key),
                                format!(
                                    "unknown key `{key}`: no default or included file defines it under {where_}{hint}"
                                ),
                            );
                        }
                        None => {
                            let mut fresh = SpannedNode {
                                value: SpannedValue::Null,
                                origin: child.origin.clone(),
                                pos: child.pos.clone(),
                            };
                            self.apply(&mut fresh, child, &join_path(path, &key), false);
                            base_entries.push((key, key_pos, fresh));
                        }
                    }
                }
                base.origin = origin;
                base.pos = pos;
            }
            SpannedValue::Null => {
                // A null default is an optional block: the mapping replaces it. Nested
                // includes still expand, against an empty base.
                let mut fresh = SpannedNode {
                    value: SpannedValue::Map(Vec::new()),
                    origin: origin.clone(),
                    pos: pos.clone(),
                };
                self.apply(
                    &mut fresh,
                    SpannedNode {
                        value: SpannedValue::Map(entries),
                        origin,
                        pos,
                    },
                    path,
                    false,
                );
                *base = fresh;
            }
            other => {
                if strict {
                    let kind = other.kind();
                    self.error(
                        &pos,
                        path,
                        format!("expected {kind} like the default, found a mapping"),
                    );
                } else {
                    *base = SpannedNode {
                        value: SpannedValue::Map(entries),
                        origin,
                        pos,
                    };
                }
            }
        }
    }

    fn replace(&mut self, base: &mut SpannedNode, over: SpannedNode, path: &str, strict: bool) {
        let base_is_map = matches!(&base.value, SpannedValue::Map(e) if !e.is_empty());
        let over_is_null = matches!(over.value, SpannedValue::Null);
        if strict && base_is_map && !over_is_null {
            let keys = match &base.value {
                SpannedValue::Map(e) => e.iter().map(|(k, _, _)| k.as_str()).collect::<Vec<_>>(),
                _ => Vec::new(),
            };
            self.error(
                &over.pos,
                path,
                format!(
                    "expected a mapping (with keys {}), found {}",
                    keys.join(", "),
                    over.value.kind()
                ),
            );
            return;
        }
        *base = over;
    }

    fn include(&mut self, base: &mut SpannedNode, spec: &SpannedNode, key_pos: &Pos, path: &str) {
        let paths: Vec<(&str, &Pos)> = match &spec.value {
            SpannedValue::Str(s) => vec![(s.as_str(), &spec.pos)],
            SpannedValue::Seq(items) => {
                let mut out = Vec::new();
                for item in items {
                    match &item.value {
                        SpannedValue::Str(s) => out.push((s.as_str(), &item.pos)),
                        other => {
                            let message = format!(
                                "expected an include path (a string), found {}",
                                other.kind()
                            );
                            self.error(&item.pos, &join_path(path, "include"), message);
                        }
                    }
                }
                out
            }
            other => {
                let message = format!(
                    "expected an include path or a list of them, found {}",
                    other.kind()
                );
                self.error(&spec.pos, &join_path(path, "include"), message);
                return;
            }
        };
        for (rel, _) in paths {
            let file = self.root.join(rel);
            let include_path = join_path(path, "include");
            if !file.is_file() {
                self.error(
                    key_pos,
                    &include_path,
                    format!(
                        "included file `{rel}` not found (looked for {}; include paths are relative to the scenarios root {})",
                        file.display(),
                        self.root.display()
                    ),
                );
                continue;
            }
            if self.include_stack.contains(&file) {
                let chain: Vec<String> = self
                    .include_stack
                    .iter()
                    .chain(std::iter::once(&file))
                    .map(|p| p.display().to_string())
                    .collect();
                self.error(
                    key_pos,
                    &include_path,
                    format!("include cycle: {}", chain.join(" -> ")),
                );
                continue;
            }
            let node = match load_layer_file(&file) {
                Ok(n) => n,
                Err(e) => {
                    push_unique(&mut self.errors, e);
                    continue;
                }
            };
            if !node.is_map() {
                self.error(
                    &node.pos,
                    "",
                    format!(
                        "included file {} must hold a mapping, found {}",
                        file.display(),
                        node.value.kind()
                    ),
                );
                continue;
            }
            self.sources.push(file.clone());
            self.include_stack.push(file);
            self.apply(base, node, path, false);
            self.include_stack.pop();
        }
    }
}

/// Keep only what the include layer contributes: the `include` keys and the mappings that
/// lead to them. Applying this to the defaults gives the scenario's base, its "defaults".
pub(crate) fn includes_only(node: &SpannedNode) -> Option<SpannedNode> {
    let SpannedValue::Map(entries) = &node.value else {
        return None;
    };
    let kept: Vec<(String, Pos, SpannedNode)> = entries
        .iter()
        .filter_map(|(k, kpos, child)| {
            if k == "include" {
                Some((k.clone(), kpos.clone(), child.clone()))
            } else {
                includes_only(child).map(|c| (k.clone(), kpos.clone(), c))
            }
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    Some(SpannedNode {
        value: SpannedValue::Map(kept),
        origin: node.origin.clone(),
        pos: node.pos.clone(),
    })
}

/// One parsed `--set` argument.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Override {
    /// `KEY=VALUE` as given, minus nothing (for messages and provenance).
    pub(crate) arg: String,
    /// 0: plain; 1: `+key` (add a new key); 2: `++key` (add or replace).
    pub(crate) plus: u8,
    pub(crate) segments: Vec<String>,
    pub(crate) value: SpannedNode,
}

impl Override {
    /// Parse `KEY=VALUE`. VALUE is a YAML flow value (`[1, 2]`, `true`, `'text'`, `{a: 1}`);
    /// an empty VALUE is the empty string, as in Hydra.
    pub(crate) fn parse(arg: &str) -> Result<Self, SpecError> {
        let pos = Pos::set_arg(arg);
        let Some((key, raw)) = arg.split_once('=') else {
            return Err(SpecError::at(&pos, "", "expected KEY=VALUE"));
        };
        let plus = if key.starts_with("++") {
            2
        } else if key.starts_with('+') {
            1
        } else {
            0
        };
        let bare = key.trim_start_matches('+').trim();
        let segments: Vec<String> = bare.split('.').map(str::to_string).collect();
        if bare.is_empty() || segments.iter().any(|s| s.is_empty()) {
            return Err(SpecError::at(
                &pos,
                bare,
                format!("expected a dotted key path such as `config.data.train_batch_size`, found `{key}`"),
            ));
        }
        let mut value = if raw.trim().is_empty() {
            SpannedNode::new(SpannedValue::Str(String::new()), pos.clone())
        } else {
            yaml::parse(raw, Path::new(&format!("--set {arg}")))
                .map_err(|e| SpecError::at(&pos, bare, format!("invalid value: {}", e.message)))?
        };
        let origin = Origin::Set {
            arg: arg.to_string(),
        };
        value.set_origin_deep(&|_| origin.clone());
        set_pos_deep(&mut value, &pos);
        Ok(Self {
            arg: arg.to_string(),
            plus,
            segments,
            value,
        })
    }

    pub(crate) fn key(&self) -> String {
        self.segments.join(".")
    }

    pub(crate) fn pos(&self) -> Pos {
        Pos::set_arg(&self.arg)
    }
}

fn set_pos_deep(node: &mut SpannedNode, pos: &Pos) {
    node.pos = pos.clone();
    match &mut node.value {
        SpannedValue::Seq(items) => items.iter_mut().for_each(|n| set_pos_deep(n, pos)),
        SpannedValue::Map(entries) => entries.iter_mut().for_each(|(_, kpos, n)| {
            *kpos = pos.clone();
            set_pos_deep(n, pos);
        }),
        _ => {}
    }
}

/// Apply a config override (segments relative to the config root) to the layered tree.
pub(crate) fn apply_config_override(
    layering: &mut Layering,
    tree: &mut SpannedNode,
    ov: &Override,
    segments: &[String],
) {
    let pos = ov.pos();
    let dotted = segments.join(".");
    let exists = tree.lookup(segments).is_some();
    if ov.plus == 1 && exists {
        layering.error(
            &pos,
            &dotted,
            format!("cannot add `{dotted}`: it already exists (use `{}` without `+` to change it, or `++` to add or change)", ov.key()),
        );
        return;
    }
    let strict = ov.plus == 0;
    if strict && !exists {
        // Report the first missing segment, with a hint from its siblings.
        let mut node = &*tree;
        for (i, seg) in segments.iter().enumerate() {
            match node.lookup(std::slice::from_ref(seg)) {
                Some(child) => node = child,
                None => {
                    let at = segments[..=i].join(".");
                    let hint = match &node.value {
                        SpannedValue::Map(e) => closest(seg, e.iter().map(|(k, _, _)| k.as_str()))
                            .map(|c| format!("; did you mean `{c}`?"))
                            .unwrap_or_default(),
                        _ => String::new(),
                    };
                    layering.error(
                        &pos,
                        &at,
                        format!(
                            "unknown key `{seg}`: no default or included file defines it{hint} (prefix the key with `+` to add a new one)"
                        ),
                    );
                    return;
                }
            }
        }
        return;
    }
    // Wrap the value into nested mappings down from the root, then merge like a layer.
    let mut over = ov.value.clone();
    for seg in segments.iter().rev() {
        over = SpannedNode {
            value: SpannedValue::Map(vec![(seg.clone(), pos.clone(), over)]),
            origin: ov.value.origin.clone(),
            pos: pos.clone(),
        };
    }
    // Merging at the root must not re-stamp the root mapping's own provenance.
    let root_origin = tree.origin.clone();
    let root_pos = tree.pos.clone();
    layering.apply(tree, over, "", strict);
    if !segments.is_empty() {
        tree.origin = root_origin;
        tree.pos = root_pos;
    }
}

/// Resolve every `${...}` of a tree. Errors name the position of the string holding the
/// reference and its `config.` key path.
pub(crate) fn resolve_interpolations(
    root: &SpannedNode,
    errors: &mut Vec<SpecError>,
) -> SpannedNode {
    let mut r = Resolver {
        root,
        done: HashMap::new(),
        failed: HashMap::new(),
        stack: Vec::new(),
        errors: Vec::new(),
    };
    let out = r.walk(root, &[]);
    for e in r.errors {
        push_unique(errors, e);
    }
    out
}

struct Resolver<'a> {
    root: &'a SpannedNode,
    done: HashMap<Vec<String>, SpannedNode>,
    failed: HashMap<Vec<String>, SpecError>,
    stack: Vec<Vec<String>>,
    errors: Vec<SpecError>,
}

enum Part {
    Lit(String),
    Ref(String),
}

fn parse_template(s: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("\\${") {
            lit.push_str("${");
            rest = r;
        } else if let Some(r) = rest.strip_prefix("${") {
            let Some(end) = r.find('}') else {
                return Err(format!(
                    "unterminated interpolation in {s:?}: expected `}}`"
                ));
            };
            let reference = r[..end].trim();
            if reference.contains("${") {
                return Err(format!("nested interpolation in {s:?} is not supported"));
            }
            if reference.contains(':') {
                return Err(format!(
                    "resolver interpolation `${{{reference}}}` is not supported; only `${{a.b.c}}` references to config keys are"
                ));
            }
            if reference.is_empty() {
                return Err(format!("empty interpolation `${{}}` in {s:?}"));
            }
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(Part::Ref(reference.to_string()));
            rest = &r[end + 1..];
        } else {
            let mut chars = rest.chars();
            if let Some(c) = chars.next() {
                lit.push(c);
            }
            rest = chars.as_str();
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(parts)
}

fn needs_resolution(node: &SpannedNode) -> bool {
    matches!(&node.value, SpannedValue::Str(s) if s.contains("${"))
}

fn dotted(path: &[String]) -> String {
    path.join(".")
}

impl<'a> Resolver<'a> {
    fn walk(&mut self, node: &SpannedNode, path: &[String]) -> SpannedNode {
        match &node.value {
            SpannedValue::Map(entries) => {
                let mut out = Vec::with_capacity(entries.len());
                for (k, kpos, child) in entries {
                    let mut p = path.to_vec();
                    p.push(k.clone());
                    out.push((k.clone(), kpos.clone(), self.walk(child, &p)));
                }
                SpannedNode {
                    value: SpannedValue::Map(out),
                    origin: node.origin.clone(),
                    pos: node.pos.clone(),
                }
            }
            SpannedValue::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, child) in items.iter().enumerate() {
                    let mut p = path.to_vec();
                    p.push(i.to_string());
                    out.push(self.walk(child, &p));
                }
                SpannedNode {
                    value: SpannedValue::Seq(out),
                    origin: node.origin.clone(),
                    pos: node.pos.clone(),
                }
            }
            _ if needs_resolution(node) => match self.resolve_leaf(path) {
                Ok(n) => n,
                Err(e) => {
                    push_unique(&mut self.errors, e);
                    node.clone()
                }
            },
            _ => node.clone(),
        }
    }

    /// The fully resolved node at `path` (which exists in the original tree).
    fn resolve_at(&mut self, path: &[String], from: &[String]) -> Result<SpannedNode, SpecError> {
        if let Some(n) = self.done.get(path) {
            return Ok(n.clone());
        }
        if let Some(e) = self.failed.get(path) {
            return Err(e.clone());
        }
        if self.stack.iter().any(|p| p == path) {
            let mut chain: Vec<String> = self
                .stack
                .iter()
                .skip_while(|p| p.as_slice() != path)
                .map(|p| dotted(p))
                .collect();
            chain.push(dotted(path));
            let at = self
                .root
                .lookup(from)
                .map(|n| n.pos.clone())
                .unwrap_or_else(|| self.root.pos.clone());
            return Err(SpecError::at(
                &at,
                join_path("config", &dotted(from)),
                format!("interpolation cycle: {}", chain.join(" -> ")),
            ));
        }
        let Some(node) = self.root.lookup(path) else {
            return Err(SpecError::at(
                &self.root.pos,
                join_path("config", &dotted(path)),
                "internal: resolved path vanished",
            ));
        };
        let resolved = if needs_resolution(node) {
            self.resolve_leaf(path)?
        } else if matches!(node.value, SpannedValue::Map(_) | SpannedValue::Seq(_)) {
            // A subtree: resolve its leaves, propagating the first failure.
            self.stack.push(path.to_vec());
            let before = self.errors.len();
            let n = self.walk(node, path);
            self.stack.pop();
            if self.errors.len() > before {
                return Err(self.errors[before].clone());
            }
            n
        } else {
            node.clone()
        };
        self.done.insert(path.to_vec(), resolved.clone());
        Ok(resolved)
    }

    fn resolve_leaf(&mut self, path: &[String]) -> Result<SpannedNode, SpecError> {
        if let Some(n) = self.done.get(path) {
            return Ok(n.clone());
        }
        if let Some(e) = self.failed.get(path) {
            return Err(e.clone());
        }
        let result = self.resolve_leaf_inner(path);
        match &result {
            Ok(n) => {
                self.done.insert(path.to_vec(), n.clone());
            }
            Err(e) => {
                self.failed.insert(path.to_vec(), e.clone());
            }
        }
        result
    }

    fn resolve_leaf_inner(&mut self, path: &[String]) -> Result<SpannedNode, SpecError> {
        let root = self.root;
        let Some(node) = root.lookup(path) else {
            return Err(SpecError::at(
                &root.pos,
                dotted(path),
                "internal: missing node",
            ));
        };
        let SpannedValue::Str(template) = &node.value else {
            return Ok(node.clone());
        };
        let key_path = join_path("config", &dotted(path));
        let err = |m: String| SpecError::at(&node.pos, key_path.clone(), m);
        let parts = parse_template(template).map_err(err)?;
        self.stack.push(path.to_vec());
        let mut resolved_parts = Vec::new();
        for part in &parts {
            match part {
                Part::Lit(s) => resolved_parts.push(Err(s.clone())),
                Part::Ref(reference) => {
                    let target = match self.target_path(path, reference) {
                        Ok(t) => t,
                        Err(m) => {
                            self.stack.pop();
                            return Err(err(m));
                        }
                    };
                    if root.lookup(&target).is_none() {
                        self.stack.pop();
                        return Err(err(format!(
                            "interpolation `${{{reference}}}` refers to `{}`, which does not exist in the config",
                            dotted(&target)
                        )));
                    }
                    match self.resolve_at(&target, path) {
                        Ok(n) => resolved_parts.push(Ok((dotted(&target), n))),
                        Err(e) => {
                            self.stack.pop();
                            return Err(e);
                        }
                    }
                }
            }
        }
        self.stack.pop();
        // A whole-string reference keeps the value's type and provenance.
        if let [Ok((from, target))] = resolved_parts.as_slice() {
            let mut out = target.clone();
            let from = from.clone();
            out.set_origin_deep(&|n| Origin::Interpolated {
                from: from.clone(),
                origin: Box::new(n.origin.clone()),
            });
            out.pos = node.pos.clone();
            return Ok(out);
        }
        let mut text = String::new();
        let mut froms = Vec::new();
        for part in resolved_parts {
            match part {
                Err(lit) => text.push_str(&lit),
                Ok((from, target)) => {
                    let piece = match &target.value {
                        SpannedValue::Null => "null".to_string(),
                        SpannedValue::Bool(b) => b.to_string(),
                        SpannedValue::Int(i) => i.to_string(),
                        SpannedValue::Float(x) => x.to_string(),
                        SpannedValue::Str(s) => s.clone(),
                        other => {
                            return Err(err(format!(
                                "interpolation `${{{from}}}` inside a longer string must refer to a scalar, found {}",
                                other.kind()
                            )))
                        }
                    };
                    text.push_str(&piece);
                    froms.push(from);
                }
            }
        }
        Ok(SpannedNode {
            value: SpannedValue::Str(text),
            origin: Origin::Interpolated {
                from: froms.join(", "),
                origin: Box::new(node.origin.clone()),
            },
            pos: node.pos.clone(),
        })
    }

    fn target_path(&self, here: &[String], reference: &str) -> Result<Vec<String>, String> {
        let dots = reference.chars().take_while(|c| *c == '.').count();
        let rest = &reference[dots..];
        let mut base: Vec<String> = if dots == 0 {
            Vec::new()
        } else {
            // `${.x}`: a sibling; each extra dot goes one mapping up.
            let up = dots;
            if up > here.len() {
                return Err(format!(
                    "relative interpolation `${{{reference}}}` goes above the config root"
                ));
            }
            here[..here.len() - up].to_vec()
        };
        if rest.is_empty() {
            return Ok(base);
        }
        for seg in rest.split('.') {
            if seg.is_empty() {
                return Err(format!("invalid interpolation key `{reference}`"));
            }
            base.push(seg.to_string());
        }
        Ok(base)
    }
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
mod tests {
    use super::*;

    fn node(text: &str) -> SpannedNode {
        yaml::parse(text, Path::new("c.yaml")).unwrap()
    }

    fn resolve(text: &str) -> (SpannedNode, Vec<SpecError>) {
        let mut errors = Vec::new();
        let n = resolve_interpolations(&node(text), &mut errors);
        (n, errors)
    }

    #[test]
    fn whole_string_reference_keeps_type_and_origin() {
        let (n, errs) = resolve("a: {n: 8}\nb: ${a.n}\nc: 'x-${a.n}-y'\nd: ${.b}\ne: ${a}\n");
        assert!(errs.is_empty(), "{errs:?}");
        let b = n.get("b").unwrap();
        assert_eq!(b.value, SpannedValue::Int(8));
        assert_eq!(b.origin.to_string(), "${a.n} <- c.yaml:1:8");
        assert_eq!(n.get("c").unwrap().value, SpannedValue::Str("x-8-y".into()));
        assert_eq!(n.get("d").unwrap().value, SpannedValue::Int(8));
        assert_eq!(n.get("e").unwrap().to_json(), serde_json::json!({"n": 8}));
    }

    #[test]
    fn missing_target_and_cycles_are_errors_with_positions() {
        let (_, errs) = resolve("a: 1\nb: ${a.x}\n");
        assert_eq!(errs.len(), 1);
        assert_eq!(
            (errs[0].line, errs[0].col, errs[0].key_path.as_str()),
            (2, 4, "config.b")
        );
        assert!(
            errs[0].message.contains("`a.x`, which does not exist"),
            "{}",
            errs[0]
        );

        let (_, errs) = resolve("a: ${b}\nb: ${c}\nc: ${a}\n");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0]
                .message
                .contains("interpolation cycle: a -> b -> c -> a"),
            "{}",
            errs[0]
        );

        let (_, errs) = resolve("a: ${oc.env:HOME}\nb: ${x\nc: \\${not}\n");
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].message.contains("resolver"));
        assert!(errs[1].message.contains("unterminated"));
    }

    #[test]
    fn escaped_dollar_is_literal() {
        let (n, errs) = resolve("c: \\${not}\n");
        assert!(errs.is_empty());
        assert_eq!(
            n.get("c").unwrap().value,
            SpannedValue::Str("${not}".into())
        );
    }

    #[test]
    fn override_values_parse_as_yaml_flow() {
        let o = Override::parse("config.a.b=[1, 2]").unwrap();
        assert_eq!(o.segments, vec!["config", "a", "b"]);
        assert_eq!(o.value.to_json(), serde_json::json!([1, 2]));
        assert_eq!(o.value.origin.to_string(), "--set config.a.b=[1, 2]");
        assert_eq!(Override::parse("+x=1").unwrap().plus, 1);
        assert_eq!(
            Override::parse("++x='1'").unwrap().value.to_json(),
            serde_json::json!("1")
        );
        assert_eq!(
            Override::parse("x=").unwrap().value.to_json(),
            serde_json::json!("")
        );
        assert!(Override::parse("noequals").is_err());
        assert!(Override::parse("a..b=1").is_err());
        assert!(Override::parse("a=[1").is_err());
    }

    #[test]
    fn strict_layer_rejects_unknown_keys_with_hint() {
        let mut l = Layering::new(PathBuf::from("."));
        let mut base = node("a:\n  lr: 1\n  wd: 0\n");
        l.apply(&mut base, node("a:\n  lrr: 2\n"), "", true);
        assert_eq!(l.errors.len(), 1);
        let e = &l.errors[0];
        assert_eq!((e.line, e.col, e.key_path.as_str()), (2, 3, "config.a.lrr"));
        assert!(e.message.contains("did you mean `lr`"), "{e}");
        l.errors.clear();
        l.apply(&mut base, node("a: 3\n"), "", true);
        assert!(
            l.errors[0].message.contains("expected a mapping"),
            "{}",
            l.errors[0]
        );
    }
}
