//! A serde `Deserializer` over a spanned node, so every block of a scenario is a plain
//! `#[derive(Deserialize)] #[serde(deny_unknown_fields)]` type owned by its module, and every
//! serde error comes out with the file, line, column and key path of the offending node.
//!
//! Positions: each node attaches its own position to an error that has none yet, so the
//! innermost node wins. Internally tagged and untagged enums are the exception: serde buffers
//! their whole mapping into its private `Content` before picking a variant, so errors from the
//! variant's fields surface at the enclosing mapping without a position. For those, the
//! mapping searches its own subtree for the node the message names (the unknown key, the
//! unknown variant, or the value described as "invalid type: string \"x\"") and points there;
//! the first match in document order wins, and the mapping itself is the fallback.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::yaml::{join_path, Pos, SpannedNode, SpannedValue};
use super::SpecError;

/// A serde error on its way out: position and key path are filled in by the innermost node
/// that sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeError {
    pub(crate) message: String,
    pub(crate) at: Option<(Pos, String)>,
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            at: None,
        }
    }
}

impl DeError {
    fn into_spec(self, fallback: &SpannedNode, path: &str) -> SpecError {
        let (pos, key_path) = self
            .at
            .unwrap_or_else(|| (fallback.pos.clone(), path.to_string()));
        SpecError::at(&pos, key_path, self.message)
    }
}

/// Deserialize a typed value from a node. `path` is the node's key path (for messages).
pub(crate) fn from_node<'a, T: de::Deserialize<'a>>(
    node: &'a SpannedNode,
    path: &str,
) -> Result<T, SpecError> {
    let r = T::deserialize(NodeDe {
        node,
        path: path.to_string(),
    });
    located(node, path, r).map_err(|e| e.into_spec(node, path))
}

/// Give an error without a position the position of `node`, or of the node inside it that
/// the message names. Called both inside a node's deserializer and around each call that
/// deserializes a node, because serde finishes tagged enums after the deserializer returned.
fn located<T>(node: &SpannedNode, path: &str, r: Result<T, DeError>) -> Result<T, DeError> {
    r.map_err(|mut e| {
        if e.at.is_none() {
            if let Some((hit, rest)) = at_path(node, path, &e.message) {
                e.at = Some(hit);
                e.message = rest;
                return e;
            }
            e.at = Some(
                refine(node, path, &e.message)
                    .unwrap_or_else(|| (node.pos.clone(), path.to_string())),
            );
        }
        e
    })
}

/// The node a `util::at_key` message names under `root`, and the message without its prefix.
fn at_path(root: &SpannedNode, path: &str, message: &str) -> Option<((Pos, String), String)> {
    let rest = message.strip_prefix("at `")?;
    let (rel, msg) = rest.split_once("`: ")?;
    let mut node = root;
    let mut node_path = path.to_string();
    for key in rel.split('.') {
        let SpannedValue::Map(entries) = &node.value else {
            return None;
        };
        let (_, _, child) = entries.iter().find(|(k, _, _)| k == key)?;
        node = child;
        node_path = join_path(&node_path, key);
    }
    Some(((node.pos.clone(), node_path), msg.to_string()))
}

/// A deserializer over one node, knowing its key path.
pub(crate) struct NodeDe<'a> {
    pub(crate) node: &'a SpannedNode,
    pub(crate) path: String,
}

impl<'a> NodeDe<'a> {
    fn locate<T>(&self, r: Result<T, DeError>) -> Result<T, DeError> {
        located(self.node, &self.path, r)
    }

    fn visit_any<V: Visitor<'a>>(&self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.value {
            SpannedValue::Null => visitor.visit_unit(),
            SpannedValue::Bool(b) => visitor.visit_bool(*b),
            SpannedValue::Int(i) => visitor.visit_i64(*i),
            SpannedValue::Float(x) => visitor.visit_f64(*x),
            SpannedValue::Str(s) => visitor.visit_borrowed_str(s),
            SpannedValue::Seq(items) => visitor.visit_seq(SeqDe {
                items: items.iter(),
                index: 0,
                path: &self.path,
            }),
            SpannedValue::Map(entries) => visitor.visit_map(MapDe {
                entries: entries.iter(),
                value: None,
                path: &self.path,
            }),
        }
    }
}

/// How serde describes a node in "invalid type" messages (`serde::de::Unexpected`).
fn unexpected_text(node: &SpannedNode) -> String {
    match &node.value {
        SpannedValue::Null => "unit value".into(),
        SpannedValue::Bool(b) => format!("boolean `{b}`"),
        SpannedValue::Int(i) => format!("integer `{i}`"),
        SpannedValue::Float(x) => format!("{}", de::Unexpected::Float(*x)),
        SpannedValue::Str(s) => format!("string {s:?}"),
        SpannedValue::Seq(_) => "sequence".into(),
        SpannedValue::Map(_) => "map".into(),
    }
}

fn backticked<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let rest = message.strip_prefix(prefix)?.strip_prefix('`')?;
    rest.split('`').next()
}

/// Find the node inside `root`'s subtree that an error message names (see the module doc).
fn refine(root: &SpannedNode, path: &str, message: &str) -> Option<(Pos, String)> {
    if !matches!(root.value, SpannedValue::Map(_) | SpannedValue::Seq(_)) {
        return None;
    }
    enum Want<'m> {
        Key(&'m str),
        Unexpected(&'m str),
    }
    let want = if let Some(key) = backticked(message, "unknown field ") {
        Want::Key(key)
    } else if let Some(v) = backticked(message, "unknown variant ") {
        return find(
            root,
            path,
            &mut |n| matches!(&n.value, SpannedValue::Str(s) if s == v),
        );
    } else if let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
    {
        Want::Unexpected(rest.split(", expected").next()?)
    } else {
        return None;
    };
    match want {
        Want::Key(key) => find_key(root, path, key),
        Want::Unexpected(text) => {
            // Serde says "integer" for both signs and floats print with a decimal point; compare
            // on serde's own rendering. Prefer a strict descendant; the root is the fallback.
            find(root, path, &mut |n| unexpected_text(n) == text)
        }
    }
}

fn children<'n>(
    node: &'n SpannedNode,
    path: &str,
) -> Vec<(Option<&'n Pos>, String, &'n SpannedNode)> {
    match &node.value {
        SpannedValue::Map(entries) => entries
            .iter()
            .map(|(k, kpos, n)| (Some(kpos), join_path(path, k), n))
            .collect(),
        SpannedValue::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, n)| (None, format!("{path}[{i}]"), n))
            .collect(),
        _ => Vec::new(),
    }
}

fn find(
    node: &SpannedNode,
    path: &str,
    pred: &mut dyn FnMut(&SpannedNode) -> bool,
) -> Option<(Pos, String)> {
    for (_, child_path, child) in children(node, path) {
        if pred(child) {
            return Some((child.pos.clone(), child_path));
        }
        if let Some(hit) = find(child, &child_path, pred) {
            return Some(hit);
        }
    }
    None
}

fn find_key(node: &SpannedNode, path: &str, key: &str) -> Option<(Pos, String)> {
    for (kpos, child_path, child) in children(node, path) {
        if let Some(kpos) = kpos {
            if child_path.rsplit('.').next() == Some(key) {
                return Some((kpos.clone(), child_path));
            }
        }
        if let Some(hit) = find_key(child, &child_path, key) {
            return Some(hit);
        }
    }
    None
}

macro_rules! forward_located {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
                let r = self.visit_any(visitor);
                self.locate(r)
            }
        )*
    };
}

impl<'a> de::Deserializer<'a> for NodeDe<'a> {
    type Error = DeError;

    forward_located! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_char deserialize_str deserialize_string
        deserialize_bytes deserialize_byte_buf deserialize_seq deserialize_map
        deserialize_identifier
    }

    fn deserialize_f32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match self.node.value {
            // `lr: 1` is a float knob written as an integer literal.
            SpannedValue::Int(i) => visitor.visit_f64(i as f64),
            _ => self.visit_any(visitor),
        };
        self.locate(r)
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match self.node.value {
            SpannedValue::Null => visitor.visit_none(),
            _ => visitor.visit_some(NodeDe {
                node: self.node,
                path: self.path.clone(),
            }),
        };
        self.locate(r)
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = self.visit_any(visitor);
        self.locate(r)
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let path = self.path.clone();
        let r = visitor.visit_newtype_struct(NodeDe {
            node: self.node,
            path,
        });
        self.locate(r)
    }

    fn deserialize_tuple<V: Visitor<'a>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let r = match &self.node.value {
            SpannedValue::Str(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            SpannedValue::Map(entries) if entries.len() == 1 => {
                let (key, key_pos, value) = &entries[0];
                visitor.visit_enum(EnumDe {
                    key,
                    key_pos,
                    value,
                    path: join_path(&self.path, key),
                })
            }
            other => Err(DeError {
                message: format!(
                    "invalid type: {}, expected a variant name or a mapping with one key",
                    other.kind()
                ),
                at: None,
            }),
        };
        self.locate(r)
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }
}

struct SeqDe<'a, 'p> {
    items: std::slice::Iter<'a, SpannedNode>,
    index: usize,
    path: &'p str,
}

impl<'a> de::SeqAccess<'a> for SeqDe<'a, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'a>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(node) = self.items.next() else {
            return Ok(None);
        };
        let path = format!("{}[{}]", self.path, self.index);
        self.index += 1;
        let r = seed.deserialize(NodeDe {
            node,
            path: path.clone(),
        });
        located(node, &path, r).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'a, 'p> {
    entries: std::slice::Iter<'a, (String, Pos, SpannedNode)>,
    value: Option<(&'a SpannedNode, String)>,
    path: &'p str,
}

impl<'a> de::MapAccess<'a> for MapDe<'a, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, key_pos, node)) = self.entries.next() else {
            return Ok(None);
        };
        let path = join_path(self.path, key);
        let k = seed.deserialize(KeyDe { key }).map_err(|mut e: DeError| {
            if e.at.is_none() {
                e.at = Some((key_pos.clone(), path.clone()));
            }
            e
        })?;
        self.value = Some((node, path));
        Ok(Some(k))
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some((node, path)) => {
                let r = seed.deserialize(NodeDe {
                    node,
                    path: path.clone(),
                });
                located(node, &path, r)
            }
            None => Err(de::Error::custom("value requested before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A mapping key: always a string (the YAML layer rejects other keys).
struct KeyDe<'a> {
    key: &'a str,
}

impl<'de> de::Deserializer<'de> for KeyDe<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_borrowed_str(self.key)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct EnumDe<'a> {
    key: &'a str,
    key_pos: &'a Pos,
    value: &'a SpannedNode,
    path: String,
}

impl<'a> de::EnumAccess<'a> for EnumDe<'a> {
    type Error = DeError;
    type Variant = NodeDe<'a>;

    fn variant_seed<V: DeserializeSeed<'a>>(
        self,
        seed: V,
    ) -> Result<(V::Value, NodeDe<'a>), DeError> {
        let key_pos = self.key_pos.clone();
        let path = self.path.clone();
        let v = seed.deserialize(KeyDe { key: self.key }).map_err(|mut e| {
            if e.at.is_none() {
                e.at = Some((key_pos, path));
            }
            e
        })?;
        Ok((
            v,
            NodeDe {
                node: self.value,
                path: self.path,
            },
        ))
    }
}

impl<'a> de::VariantAccess<'a> for NodeDe<'a> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        <() as de::Deserialize>::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'a>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'a>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'a>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_map(self, visitor)
    }
}

#[cfg(test)]
mod tests;
