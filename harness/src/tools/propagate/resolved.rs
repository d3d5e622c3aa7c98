//! The trainer's resolved config, and the knobs in it that the manifest does not list.
//!
//! verl's `main_ppo` prints, in its Ray `TaskRunner` actor, `TaskRunner hostname: <host>, PID:
//! <pid>` and then `pprint(OmegaConf.to_container(config, resolve=True))`: a Python dict repr
//! over many lines, each forwarded to the driver's stdout behind Ray's `(TaskRunner pid=N) `
//! prefix (perhaps in ANSI colours). The command driver saves that stdout as `stdout.log`; the
//! plain baseline's is read here, and every leaf of its backend block (`remote_backend.*`) that
//! no manifest knob covers is an unlisted knob: a flag, unless a known gap accepts it.

use serde::Serialize;
use serde_json::{Map, Value};

use super::knob_manifest::{KnobManifest, ProblemKind};

/// Deepest nesting [`parse_python`] accepts.
const MAX_DEPTH: usize = 256;

/// A Python literal as `repr`/`pprint` write it: dicts, lists, tuples (as lists), strings in
/// either quote with escapes (adjacent literals concatenated, as pprint splits long ones), ints,
/// floats (`inf`, `nan` as the harness's non-finite float object), `True`, `False`, `None`.
pub(crate) fn parse_python(text: &str) -> Result<Value, String> {
    let mut p = Py {
        s: text.as_bytes(),
        text,
        i: 0,
        depth: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.err("trailing text"));
    }
    Ok(v)
}

struct Py<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    depth: usize,
}

impl Py<'_> {
    fn err(&self, what: &str) -> String {
        format!("{what} at byte {}", self.i)
    }
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nested too deep"));
        }
        let v = match self.peek() {
            Some(b'{') => self.dict(),
            Some(b'[') => self.seq(b']').map(Value::Array),
            Some(b'(') => self.paren(),
            Some(b'\'' | b'"') => self.strings().map(Value::String),
            Some(_) => self.word(),
            None => Err(self.err("expected a value")),
        };
        self.depth -= 1;
        v
    }

    fn dict(&mut self) -> Result<Value, String> {
        self.i += 1;
        let mut m = Map::new();
        if self.eat(b'}') {
            return Ok(Value::Object(m));
        }
        loop {
            let key = match self.value()? {
                Value::String(s) => s,
                other => other.to_string(),
            };
            if !self.eat(b':') {
                return Err(self.err("expected `:`"));
            }
            let v = self.value()?;
            m.insert(key, v);
            if self.eat(b',') {
                if self.eat(b'}') {
                    return Ok(Value::Object(m));
                }
                continue;
            }
            if self.eat(b'}') {
                return Ok(Value::Object(m));
            }
            return Err(self.err("expected `,` or `}`"));
        }
    }

    /// Items up to `close` (the opening bracket already seen or not: skipped here).
    fn seq(&mut self, close: u8) -> Result<Vec<Value>, String> {
        self.i += 1;
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.value()?);
            if self.eat(b',') {
                if self.eat(close) {
                    return Ok(out);
                }
                continue;
            }
            if self.eat(close) {
                return Ok(out);
            }
            return Err(self.err("expected `,` or a closing bracket"));
        }
    }

    /// `(x)` is x, `(x,)` and `(x, y)` are tuples (lists here).
    fn paren(&mut self) -> Result<Value, String> {
        let start = self.i;
        self.i += 1;
        if self.eat(b')') {
            return Ok(Value::Array(Vec::new()));
        }
        let first = self.value()?;
        if self.eat(b')') {
            return Ok(first);
        }
        self.i = start;
        self.seq(b')').map(Value::Array)
    }

    /// One or more adjacent string literals, concatenated.
    fn strings(&mut self) -> Result<String, String> {
        let mut out = String::new();
        while matches!(self.peek(), Some(b'\'' | b'"')) {
            self.string(&mut out)?;
        }
        Ok(out)
    }

    fn string(&mut self, out: &mut String) -> Result<(), String> {
        let quote = self.s[self.i];
        self.i += 1;
        loop {
            let Some(c) = self.text[self.i..].chars().next() else {
                return Err(self.err("unterminated string"));
            };
            self.i += c.len_utf8();
            match c {
                '\\' => self.escape(out)?,
                c if c as u32 == quote as u32 => return Ok(()),
                '\n' => return Err(self.err("newline in a string")),
                c => out.push(c),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), String> {
        let Some(c) = self.text[self.i..].chars().next() else {
            return Err(self.err("unterminated escape"));
        };
        self.i += c.len_utf8();
        let hex = |p: &mut Self, n: usize| -> Result<char, String> {
            let digits = p
                .text
                .get(p.i..p.i + n)
                .ok_or_else(|| p.err("short escape"))?;
            let code = u32::from_str_radix(digits, 16).map_err(|_| p.err("bad escape"))?;
            p.i += n;
            char::from_u32(code).ok_or_else(|| p.err("bad code point"))
        };
        match c {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            'x' => out.push(hex(self, 2)?),
            'u' => out.push(hex(self, 4)?),
            'U' => out.push(hex(self, 8)?),
            '\\' | '\'' | '"' => out.push(c),
            '\n' => {}
            other => {
                out.push('\\');
                out.push(other);
            }
        }
        Ok(())
    }

    fn word(&mut self) -> Result<Value, String> {
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || b"+-._".contains(&self.s[self.i]))
        {
            self.i += 1;
        }
        let w = &self.text[start..self.i];
        let num = w.replace('_', "");
        Ok(match w {
            "True" => Value::Bool(true),
            "False" => Value::Bool(false),
            "None" => Value::Null,
            "inf" => rlharness_arctic::wire::pyjson::float(f64::INFINITY),
            "-inf" => rlharness_arctic::wire::pyjson::float(f64::NEG_INFINITY),
            "nan" => rlharness_arctic::wire::pyjson::float(f64::NAN),
            _ => {
                if let Ok(n) = num.parse::<i64>() {
                    Value::from(n)
                } else if let Ok(n) = num.parse::<u64>() {
                    Value::from(n)
                } else if let Ok(x) = num.parse::<f64>() {
                    rlharness_arctic::wire::pyjson::float(x)
                } else {
                    self.i = start;
                    return Err(self.err(&format!(
                        "unexpected `{}`",
                        w.chars().take(20).collect::<String>()
                    )));
                }
            }
        })
    }
}

/// The config a trainer printed as a Python dict (Ray prefixes and ANSI colours removed): the
/// first dict that parses, preferring one after a `TaskRunner hostname:` line.
pub(crate) fn find_resolved_config(stdout: &str) -> Option<Value> {
    let lines: Vec<String> = stdout
        .lines()
        .map(|l| {
            let clean = crate::run::capture::strip_ansi(l);
            crate::run::capture::strip_ray_prefix(clean.trim_end_matches('\r')).to_string()
        })
        .collect();
    let after = lines
        .iter()
        .position(|l| l.trim_start().starts_with("TaskRunner hostname:"))
        .map_or(0, |i| i + 1);
    let starts = (after..lines.len()).chain(0..after);
    for start in starts.filter(|&i| lines[i].trim_start().starts_with('{')) {
        let mut text = String::new();
        for line in &lines[start..] {
            text.push_str(line);
            text.push('\n');
            if line.trim_end().ends_with('}') {
                if let Ok(v @ Value::Object(_)) = parse_python(&text) {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// A key of the trainer's backend block that no manifest knob covers.
#[derive(Debug, Clone, Serialize)]
pub struct UnlistedKnob {
    pub path: String,
    pub value: Value,
    /// The known gap that accepts it (reason, link).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_gap: Option<String>,
}

/// The unlisted-knob check: where the resolved config came from (`None`: not seen, nothing
/// could be checked) and the keys found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Unlisted {
    pub seen_in: Option<String>,
    pub knobs: Vec<UnlistedKnob>,
}

impl Unlisted {
    /// Unlisted keys that no known gap accepts.
    pub fn new_flags(&self) -> usize {
        self.knobs.iter().filter(|k| k.known_gap.is_none()).count()
    }
}

/// The leaves of the resolved config's backend block that no knob covers (a knob covers its
/// own path, its subtree, and an empty block above it).
pub(crate) fn unlisted(m: &KnobManifest, resolved: Option<(Value, String)>) -> Unlisted {
    let Some((config, seen_in)) = resolved else {
        return Unlisted::default();
    };
    let mut leaves = Vec::new();
    if let Some(block) = crate::run::knobs::lookup(&config, &m.backend_prefix) {
        super::knob_manifest::flatten_leaves(block, &m.backend_prefix, &mut leaves);
    }
    let covered = |leaf: &str| {
        m.knobs.iter().any(|k| {
            leaf == k.path
                || leaf.starts_with(&format!("{}.", k.path))
                || k.path.starts_with(&format!("{leaf}."))
        })
    };
    Unlisted {
        seen_in: Some(seen_in),
        knobs: leaves
            .into_iter()
            .filter(|(p, _)| !covered(p))
            .map(|(path, value)| UnlistedKnob {
                path,
                value,
                known_gap: None,
            })
            .collect(),
    }
}

/// Match the unlisted keys against `known_gaps` entries with `problem: unlisted`; an entry
/// whose key is no longer unlisted has closed (returned in words). Nothing closes when the
/// resolved config was not seen.
pub(crate) fn apply_unlisted_gaps(m: &KnobManifest, u: &mut Unlisted) -> Vec<String> {
    if u.seen_in.is_none() {
        return Vec::new();
    }
    let mut closed = Vec::new();
    for g in m
        .known_gaps
        .iter()
        .filter(|g| g.problem == ProblemKind::Unlisted)
    {
        match u.knobs.iter_mut().find(|k| k.path == g.knob) {
            Some(k) => {
                k.known_gap = Some(match &g.link {
                    Some(l) => format!("{} ({l})", g.reason),
                    None => g.reason.clone(),
                })
            }
            None => closed.push(format!(
                "`{}`: known gap `unlisted` has closed (the trainer's config no longer carries \
                 it, or the manifest lists it): remove it from known_gaps",
                g.knob
            )),
        }
    }
    closed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_literals_as_pprint_writes_them() {
        let v = parse_python(
            "{'a': {'b': [1, -2.5, 1e-06, inf, -inf, nan],\n       'c': True, 'd': None, 'e': False},\n 'f': ('long '\n       'string'),\n \"g'\": 'it\\'s \\n \\x41\\u00e9',\n 'h': (1, 2), 'i': (), 'j': [], 'k': {}, 3: 'x'}",
        )
        .unwrap();
        assert_eq!(v["a"]["b"][0], json!(1));
        assert_eq!(v["a"]["b"][1], json!(-2.5));
        assert_eq!(v["a"]["b"][2], json!(1e-6));
        assert_eq!(v["a"]["b"][3], json!({"$float": "Infinity"}));
        assert_eq!(v["a"]["b"][5], json!({"$float": "NaN"}));
        assert_eq!(
            (v["a"]["c"].clone(), v["a"]["d"].clone()),
            (json!(true), json!(null))
        );
        assert_eq!(v["f"], json!("long string"));
        assert_eq!(v["g'"], json!("it's \n Aé"));
        assert_eq!(v["h"], json!([1, 2]));
        assert_eq!(v["i"], json!([]));
        assert_eq!(v["3"], json!("x"));
        for bad in [
            "{'a': }",
            "{'a' 1}",
            "[1, 2",
            "'open",
            "{'a': 1} x",
            "frobnicate",
        ] {
            assert!(parse_python(bad).is_err(), "{bad}");
        }
        let deep = "[".repeat(MAX_DEPTH + 5);
        assert!(parse_python(&deep).unwrap_err().contains("deep"));
    }

    #[test]
    fn finds_the_dict_behind_ray_prefixes_and_colours() {
        let out = "starting\n\u{1b}[36m(TaskRunner pid=12345)\u{1b}[0m TaskRunner hostname: h, PID: 12345\n\
                   \u{1b}[36m(TaskRunner pid=12345)\u{1b}[0m {'remote_backend': {'colocate': True,\n\
                   \u{1b}[36m(TaskRunner pid=12345)\u{1b}[0m                     'new': {'x': 1}},\n\
                   (TaskRunner pid=12345)  'trainer': {'total_training_steps': 20}}\n\
                   (TaskRunner pid=12345) step:1 - a:0.5\n";
        let v = find_resolved_config(out).unwrap();
        assert_eq!(v["remote_backend"]["new"]["x"], json!(1));
        assert_eq!(v["trainer"]["total_training_steps"], json!(20));
        assert!(find_resolved_config("no dict here\n{broken\n").is_none());
    }

    #[test]
    fn unlisted_keys_and_their_known_gaps() {
        let mut m = super::super::knob_manifest::parse(
            "backend: arctic\nbackend_yaml: b.yaml\nbackend_prefix: rb\nknobs:\n  - {path: rb.a, default: 1, try: [2], consumers: [{at: meta.a}]}\n  - {path: rb.sub, default: 1, try: [2], consumers: [{at: meta.s}]}\n",
            std::path::Path::new("k.yaml"),
        )
        .unwrap();
        let config = json!({"rb": {"a": 1, "sub": {"x": 1, "y": 2}, "new": {"k": true}, "e": {}}, "other": 1});
        let mut u = unlisted(&m, Some((config.clone(), "here".into())));
        let mut paths: Vec<&str> = u.knobs.iter().map(|k| k.path.as_str()).collect();
        paths.sort();
        assert_eq!(paths, vec!["rb.e", "rb.new.k"]);
        assert_eq!(u.new_flags(), 2);
        m.known_gaps.push(super::super::knob_manifest::KnownGap {
            knob: "rb.new.k".into(),
            verdict: "unlisted".into(),
            problem: ProblemKind::Unlisted,
            at: None,
            reason: "forward-compatible".into(),
            link: None,
        });
        assert!(
            super::super::knob_manifest::validate(&m).is_empty(),
            "{:?}",
            super::super::knob_manifest::validate(&m)
        );
        assert!(apply_unlisted_gaps(&m, &mut u).is_empty());
        assert_eq!(u.new_flags(), 1);
        let mut gone = unlisted(&m, Some((json!({"rb": {"a": 1}}), "here".into())));
        assert!(apply_unlisted_gaps(&m, &mut gone)[0].contains("remove it"));
        let mut unseen = unlisted(&m, None);
        assert!(unseen.seen_in.is_none() && apply_unlisted_gaps(&m, &mut unseen).is_empty());
    }
}
