//! Layers merged into one spanned tree: strict keys, replacements and `include`.

use std::path::PathBuf;

use super::{load_layer_file, load_layer_text, BuiltinLayer, BUILTIN_LAYERS};
use crate::scenario::error::{closest, push_unique};
use crate::scenario::yaml::{join_path, Pos, SpannedNode, SpannedValue};
use crate::scenario::SpecError;

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

    pub(super) fn error(&mut self, pos: &Pos, path: &str, message: String) {
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
                if strict {
                    self.check_against_builtin_mount(&entries, &origin, &pos, path);
                }
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

    /// A scenario's mapping where a built-in layer is mounted (`remote_backend`), written
    /// without including a file: its keys are checked against that layer (the repository's
    /// copy, else the built-in one), so a misspelt knob is refused at its line in any
    /// repository. The mapping still replaces the null default as it is: nothing is added.
    fn check_against_builtin_mount(
        &mut self,
        entries: &[(String, Pos, SpannedNode)],
        origin: &crate::scenario::yaml::Origin,
        pos: &Pos,
        path: &str,
    ) {
        let Some(layer) = BUILTIN_LAYERS.iter().find(|l| l.mount == path) else {
            return;
        };
        let own = self.root.join(layer.path);
        let (name, loaded) = if own.is_file() {
            (own.display().to_string(), load_layer_file(&own))
        } else {
            let name = layer.source_name();
            (
                name.display().to_string(),
                load_layer_text(layer.text, &name),
            )
        };
        let Ok(mut base) = loaded else {
            // Unreadable: reported where it is included; nothing to check against here.
            return;
        };
        let mut quiet = Layering::new(self.root.clone());
        let over = SpannedNode {
            value: SpannedValue::Map(entries.to_vec()),
            origin: origin.clone(),
            pos: pos.clone(),
        };
        quiet.apply(&mut base, over, path, true);
        for mut e in quiet.errors {
            if e.message.starts_with("unknown key") {
                e.message.push_str(&format!(
                    " (`{path}` is checked against the Arctic layer {name}; `include: {}` also layers its defaults)",
                    layer.alias
                ));
            }
            push_unique(&mut self.errors, e);
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
            let builtin = BuiltinLayer::named(rel);
            let rel = builtin.map_or(rel, |b| b.path);
            let mut file = self.root.join(rel);
            let include_path = join_path(path, "include");
            let loaded = if file.is_file() {
                load_layer_file(&file)
            } else if let Some(b) = builtin {
                // The repository has no copy of its own: the one built into the binary.
                file = b.source_name();
                load_layer_text(b.text, &file)
            } else {
                let built_in: Vec<String> = BUILTIN_LAYERS
                    .iter()
                    .map(|b| format!("`{}` (or `{}`)", b.path, b.alias))
                    .collect();
                self.error(
                    key_pos,
                    &include_path,
                    format!(
                        "included file `{rel}` not found (looked for {}; include paths are relative to the scenarios root {}; built in: {})",
                        file.display(),
                        self.root.display(),
                        built_in.join(", ")
                    ),
                );
                continue;
            };
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
            let node = match loaded {
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
