//! YAML into a spanned tree: every node keeps the file, line and column it came from, so a
//! later stage (typed deserialization, layering, interpolation) can point at the exact spot.
//!
//! The scenario language is deliberately a strict subset of YAML: anchors, aliases and tags
//! are rejected (a scenario should read top to bottom; `${a.b}` interpolation covers reuse),
//! keys must be strings, and a key may appear only once in a mapping.

use std::fmt;
use std::path::{Path, PathBuf};

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::SpecError;

/// A place in a source. `line == 0` means the node did not come from a file line (a `--set`
/// argument, whose "file" is the argument text); lines and columns are 1-based otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pos {
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) col: usize,
}

impl Pos {
    pub(crate) fn new(file: impl Into<PathBuf>, line: usize, col: usize) -> Self {
        Self {
            file: file.into(),
            line,
            col,
        }
    }

    /// The position of a `--set` argument: it has no file lines.
    pub(crate) fn set_arg(arg: &str) -> Self {
        Self::new(format!("--set {arg}"), 0, 0)
    }

    fn from_marker(file: &Path, m: &Marker) -> Self {
        Self::new(file, m.line(), m.col() + 1)
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file.display())
        } else {
            write!(f, "{}:{}:{}", self.file.display(), self.line, self.col)
        }
    }
}

/// Where a resolved value came from. This is the provenance the propagation report prints.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    /// Written in a scenario file.
    File {
        path: PathBuf,
        line: usize,
        col: usize,
    },
    /// From a layer below the scenario: the defaults file or an included backend file.
    Default { path: PathBuf, line: usize },
    /// From a `--set KEY=VALUE` argument (`arg` is `KEY=VALUE`). `--seed N` and `--steps N` are
    /// recorded as `seed=N` and `steps=N`: they are sugar for the same override.
    Set { arg: String },
    /// The value of `${from}`. For a whole-string reference `origin` is the referenced value's
    /// own origin (the value really comes from there); for a reference embedded in a longer
    /// string it is the origin of the template string.
    Interpolated { from: String, origin: Box<Origin> },
}

impl Origin {
    /// The origin of the node's source position, as a file value.
    pub(crate) fn file(pos: &Pos) -> Self {
        Origin::File {
            path: pos.file.clone(),
            line: pos.line,
            col: pos.col,
        }
    }

    /// True when the value was not written by the scenario or the command line.
    pub(crate) fn is_default(&self) -> bool {
        match self {
            Origin::Default { .. } => true,
            Origin::Interpolated { origin, .. } => origin.is_default(),
            _ => false,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line, col } => write!(f, "{}:{line}:{col}", path.display()),
            Origin::Default { path, line } => write!(f, "default ({}:{line})", path.display()),
            Origin::Set { arg } => write!(f, "--set {arg}"),
            Origin::Interpolated { from, origin } => write!(f, "${{{from}}} <- {origin}"),
        }
    }
}

impl serde::Serialize for Origin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A node of the spanned tree. `pos` is where the node's text is (for errors); `origin` is
/// where its value comes from (for provenance); they differ after layering or interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct SpannedNode {
    pub(crate) value: SpannedValue,
    pub(crate) origin: Origin,
    pub(crate) pos: Pos,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SpannedValue {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<SpannedNode>),
    /// Entries in file order, each with the key's own position.
    Map(Vec<(String, Pos, SpannedNode)>),
}

impl SpannedValue {
    /// What the value is, in the words an error message uses.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            SpannedValue::Null => "null",
            SpannedValue::Bool(_) => "a boolean",
            SpannedValue::Int(_) => "an integer",
            SpannedValue::Float(_) => "a float",
            SpannedValue::Str(_) => "a string",
            SpannedValue::Seq(_) => "a sequence",
            SpannedValue::Map(_) => "a mapping",
        }
    }
}

impl SpannedNode {
    pub(crate) fn new(value: SpannedValue, pos: Pos) -> Self {
        Self {
            origin: Origin::file(&pos),
            value,
            pos,
        }
    }

    pub(crate) fn is_map(&self) -> bool {
        matches!(self.value, SpannedValue::Map(_))
    }

    /// The child of a mapping.
    pub(crate) fn get(&self, key: &str) -> Option<&SpannedNode> {
        match &self.value {
            SpannedValue::Map(entries) => entries.iter().find(|(k, _, _)| k == key).map(|e| &e.2),
            _ => None,
        }
    }

    /// The node at a dotted path split into segments; a numeric segment indexes a sequence.
    pub(crate) fn lookup(&self, segments: &[String]) -> Option<&SpannedNode> {
        let mut node = self;
        for seg in segments {
            node = match &node.value {
                SpannedValue::Map(_) => node.get(seg)?,
                SpannedValue::Seq(items) => items.get(seg.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// Set the origin of this node and all nodes below it.
    pub(crate) fn set_origin_deep(&mut self, f: &dyn Fn(&SpannedNode) -> Origin) {
        self.origin = f(self);
        match &mut self.value {
            SpannedValue::Seq(items) => items.iter_mut().for_each(|n| n.set_origin_deep(f)),
            SpannedValue::Map(entries) => entries
                .iter_mut()
                .for_each(|(_, _, n)| n.set_origin_deep(f)),
            _ => {}
        }
    }

    /// The plain JSON value (non-finite floats become strings such as `"inf"`: JSON has none).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.value {
            SpannedValue::Null => Value::Null,
            SpannedValue::Bool(b) => Value::Bool(*b),
            SpannedValue::Int(i) => Value::from(*i),
            SpannedValue::Float(x) => serde_json::Number::from_f64(*x)
                .map(Value::Number)
                .unwrap_or_else(|| Value::String(x.to_string())),
            SpannedValue::Str(s) => Value::String(s.clone()),
            SpannedValue::Seq(items) => Value::Array(items.iter().map(|n| n.to_json()).collect()),
            SpannedValue::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, _, n)| (k.clone(), n.to_json()))
                    .collect(),
            ),
        }
    }
}

/// Join a key path and a key: `a.b` + `c` = `a.b.c`.
pub(crate) fn join_path(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

/// Parse YAML text into one spanned document. `file` is only used for positions. An empty
/// document is `Null` at 1:1; a stream with more than one document is an error.
pub(crate) fn parse(text: &str, file: &Path) -> Result<SpannedNode, SpecError> {
    let mut builder = Builder {
        file: file.to_path_buf(),
        stack: Vec::new(),
        docs: Vec::new(),
        error: None,
    };
    let mut parser = Parser::new_from_str(text);
    if let Err(e) = parser.load(&mut builder, true) {
        let pos = Pos::from_marker(file, e.marker());
        return Err(SpecError::at(
            &pos,
            builder.path(),
            format!("invalid YAML: {}", e.info()),
        ));
    }
    if let Some(e) = builder.error {
        return Err(e);
    }
    let mut docs = builder.docs.into_iter();
    let doc = docs
        .next()
        .unwrap_or_else(|| SpannedNode::new(SpannedValue::Null, Pos::new(file, 1, 1)));
    if let Some(second) = docs.next() {
        return Err(SpecError::at(
            &second.pos,
            "",
            "expected one YAML document, found a second one (remove the `---` separator)",
        ));
    }
    Ok(doc)
}

/// Parse one scalar the way a plain (unquoted) YAML scalar resolves: YAML 1.2 core schema,
/// which is also what OmegaConf does for the values verl configs use (`1e-6` is a float).
pub(crate) fn resolve_plain_scalar(v: &str) -> SpannedValue {
    match v {
        "" | "~" | "null" | "Null" | "NULL" => return SpannedValue::Null,
        "true" | "True" | "TRUE" => return SpannedValue::Bool(true),
        "false" | "False" | "FALSE" => return SpannedValue::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return SpannedValue::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return SpannedValue::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return SpannedValue::Float(f64::NAN),
        _ => {}
    }
    let unsigned = v.strip_prefix(['+', '-']).unwrap_or(v);
    let negative = v.starts_with('-');
    let radix = |digits: &str, radix: u32| {
        i64::from_str_radix(digits, radix)
            .ok()
            .map(|i| SpannedValue::Int(if negative { -i } else { i }))
    };
    if let Some(hex) = unsigned.strip_prefix("0x") {
        if let Some(i) = radix(hex, 16) {
            return i;
        }
    } else if let Some(oct) = unsigned.strip_prefix("0o") {
        if let Some(i) = radix(oct, 8) {
            return i;
        }
    }
    let numeric_start = unsigned
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '.');
    if numeric_start && unsigned.bytes().any(|b| b.is_ascii_digit()) {
        if let Ok(i) = v.parse::<i64>() {
            return SpannedValue::Int(i);
        }
        if let Ok(x) = v.parse::<f64>() {
            if x.is_finite() {
                return SpannedValue::Float(x);
            }
        }
    }
    SpannedValue::Str(v.to_string())
}

enum Frame {
    Seq {
        pos: Pos,
        items: Vec<SpannedNode>,
    },
    Map {
        pos: Pos,
        entries: Vec<(String, Pos, SpannedNode)>,
        pending_key: Option<(String, Pos)>,
    },
}

struct Builder {
    file: PathBuf,
    stack: Vec<Frame>,
    docs: Vec<SpannedNode>,
    error: Option<SpecError>,
}

impl Builder {
    /// The key path of the node being built, for error messages.
    fn path(&self) -> String {
        let mut path = String::new();
        for frame in &self.stack {
            match frame {
                Frame::Seq { items, .. } => path.push_str(&format!("[{}]", items.len())),
                Frame::Map {
                    pending_key: Some((k, _)),
                    ..
                } => path = join_path(&path, k),
                Frame::Map { .. } => {}
            }
        }
        path
    }

    fn fail(&mut self, pos: &Pos, message: String) {
        if self.error.is_none() {
            self.error = Some(SpecError::at(pos, self.path(), message));
        }
    }

    fn push(&mut self, node: SpannedNode) {
        let awaiting_key = matches!(
            self.stack.last(),
            Some(Frame::Map {
                pending_key: None,
                ..
            })
        );
        if awaiting_key {
            let key = match &node.value {
                SpannedValue::Str(s) => s.clone(),
                other => {
                    let message = format!(
                        "expected a string key, found {} (quote the key if it is meant as text)",
                        other.kind()
                    );
                    self.fail(&node.pos, message);
                    return;
                }
            };
            let first = match self.stack.last() {
                Some(Frame::Map { entries, .. }) => entries
                    .iter()
                    .find(|(k, _, _)| *k == key)
                    .map(|(_, p, _)| p.line),
                _ => None,
            };
            if let Some(first_line) = first {
                let path = join_path(&self.path(), &key);
                if self.error.is_none() {
                    self.error = Some(SpecError::at(
                        &node.pos,
                        path,
                        format!("duplicate key `{key}` (first defined at line {first_line})"),
                    ));
                }
                return;
            }
            if let Some(Frame::Map { pending_key, .. }) = self.stack.last_mut() {
                *pending_key = Some((key, node.pos));
            }
            return;
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                pending_key,
                ..
            }) => {
                if let Some((key, key_pos)) = pending_key.take() {
                    entries.push((key, key_pos, node));
                }
            }
        }
    }

    fn check_unsupported(&mut self, pos: &Pos, anchor: usize, tag: bool) -> bool {
        if anchor != 0 {
            self.fail(
                pos,
                "anchors (`&name`) are not supported; use `${a.b}` interpolation to reuse a value"
                    .into(),
            );
            return false;
        }
        if tag {
            self.fail(
                pos,
                "tags (`!name`) are not supported; write the plain value".into(),
            );
            return false;
        }
        true
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let pos = Pos::from_marker(&self.file, &mark);
        match ev {
            Event::Alias(_) => self.fail(
                &pos,
                "aliases (`*name`) are not supported; use `${a.b}` interpolation to reuse a value"
                    .into(),
            ),
            Event::Scalar(text, style, anchor, tag) => {
                if !self.check_unsupported(&pos, anchor, tag.is_some()) {
                    return;
                }
                let value = match style {
                    TScalarStyle::Plain => resolve_plain_scalar(&text),
                    _ => SpannedValue::Str(text),
                };
                self.push(SpannedNode::new(value, pos));
            }
            Event::SequenceStart(anchor, tag) => {
                if self.check_unsupported(&pos, anchor, tag.is_some()) {
                    self.stack.push(Frame::Seq {
                        pos,
                        items: Vec::new(),
                    });
                }
            }
            Event::MappingStart(anchor, tag) => {
                if self.check_unsupported(&pos, anchor, tag.is_some()) {
                    self.stack.push(Frame::Map {
                        pos,
                        entries: Vec::new(),
                        pending_key: None,
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                // The parser marks a block collection where it recognised it (after its first
                // key); the collection starts at its first entry when that comes earlier.
                let earliest = |pos: Pos, first: Option<&Pos>| match first {
                    Some(f) if (f.line, f.col) < (pos.line, pos.col) => f.clone(),
                    _ => pos,
                };
                let node = match self.stack.pop() {
                    Some(Frame::Seq { pos, items }) => {
                        let pos = earliest(pos, items.first().map(|n| &n.pos));
                        SpannedNode::new(SpannedValue::Seq(items), pos)
                    }
                    Some(Frame::Map { pos, entries, .. }) => {
                        let pos = earliest(pos, entries.first().map(|e| &e.1));
                        SpannedNode::new(SpannedValue::Map(entries), pos)
                    }
                    None => return,
                };
                self.push(node);
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<SpannedNode, SpecError> {
        parse(text, Path::new("t.yaml"))
    }

    #[test]
    fn positions_are_one_based() {
        let doc = p("a: 1\nb:\n  c: [1, 2.5, x]\n").unwrap();
        let c = doc.lookup(&["b".into(), "c".into()]).unwrap();
        assert_eq!((c.pos.line, c.pos.col), (3, 6));
        let SpannedValue::Map(entries) = &doc.get("b").unwrap().value else {
            panic!("not a map")
        };
        assert_eq!((entries[0].1.line, entries[0].1.col), (3, 3));
        let x = doc.lookup(&["b".into(), "c".into(), "2".into()]).unwrap();
        assert_eq!(x.value, SpannedValue::Str("x".into()));
        assert_eq!(x.origin.to_string(), "t.yaml:3:15");
    }

    #[test]
    fn scalars_resolve_like_yaml_core() {
        assert_eq!(resolve_plain_scalar("1e-6"), SpannedValue::Float(1e-6));
        assert_eq!(resolve_plain_scalar("-3"), SpannedValue::Int(-3));
        assert_eq!(resolve_plain_scalar("0x10"), SpannedValue::Int(16));
        assert_eq!(resolve_plain_scalar("~"), SpannedValue::Null);
        assert_eq!(resolve_plain_scalar("True"), SpannedValue::Bool(true));
        assert_eq!(resolve_plain_scalar("yes"), SpannedValue::Str("yes".into()));
        assert_eq!(resolve_plain_scalar("inf"), SpannedValue::Str("inf".into()));
        assert_eq!(
            resolve_plain_scalar("1.2.3"),
            SpannedValue::Str("1.2.3".into())
        );
        let quoted = p("a: '1'").unwrap();
        assert_eq!(
            quoted.get("a").unwrap().value,
            SpannedValue::Str("1".into())
        );
    }

    #[test]
    fn duplicate_keys_are_rejected_with_position() {
        let e = p("a:\n  b: 1\n  b: 2\n").unwrap_err();
        assert_eq!((e.line, e.col), (3, 3));
        assert_eq!(e.key_path, "a.b");
        assert!(e.message.contains("duplicate key `b`"), "{e}");
    }

    #[test]
    fn anchors_aliases_tags_and_non_string_keys_are_rejected() {
        let e = p("a: &x 1\nb: *x\n").unwrap_err();
        assert!(e.message.contains("anchors"), "{e}");
        let e = p("a: !!str 1\n").unwrap_err();
        assert!(e.message.contains("tags"), "{e}");
        let e = p("1: a\n").unwrap_err();
        assert!(e.message.contains("string key"), "{e}");
        let e = p("a: [1\n").unwrap_err();
        assert!(e.message.contains("invalid YAML"), "{e}");
        let e = p("a: 1\n---\nb: 2\n").unwrap_err();
        assert!(e.message.contains("one YAML document"), "{e}");
    }
}
