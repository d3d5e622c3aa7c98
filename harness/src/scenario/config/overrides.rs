//! `--set` arguments: parsed, and applied to the layered tree.

use std::path::Path;

use super::layering::Layering;
use crate::scenario::error::closest;
use crate::scenario::yaml::{self, Origin, Pos, SpannedNode, SpannedValue};
use crate::scenario::SpecError;

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
