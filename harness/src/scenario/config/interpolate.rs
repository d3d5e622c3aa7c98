//! `${a.b}` interpolation over the whole tree (OmegaConf's absolute and relative references).

use std::collections::HashMap;

use crate::scenario::error::push_unique;
use crate::scenario::yaml::{join_path, Origin, SpannedNode, SpannedValue};
use crate::scenario::SpecError;

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
