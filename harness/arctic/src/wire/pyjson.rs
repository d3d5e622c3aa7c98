//! JSON as Python's `json` module writes and reads it by default, which is what an Arctic peer
//! puts inside a DSSST1 frame's `dss` string.
//!
//! Python differs from strict JSON in two ways that matter on the wire:
//! - `json.dumps` writes `NaN`, `Infinity` and `-Infinity` for non-finite floats, and
//!   `json.loads` reads them back;
//! - its default output uses the separators `", "` and `": "`, escapes every non-ASCII
//!   character as `\uXXXX` (surrogate pairs above U+FFFF, lowercase hex) and writes floats in
//!   `repr` form (`1e-06`, `0.1`, `1.0`, `1e+16`).
//!
//! `serde_json::Value` cannot hold a non-finite float, so inside the harness one travels as the
//! one-key object `{"$float": "NaN"}` (or `"Infinity"`, `"-Infinity"`): [`float`] builds it,
//! [`as_f64`] reads it (and plain numbers), [`to_python`] writes it back as the literal. The
//! same object is what a recording shows, so a NaN stays distinguishable from `null`.

use serde_json::{Map, Number, Value};

/// Key of the object that stands for a non-finite float.
pub(crate) const FLOAT_KEY: &str = "$float";

/// Deepest nesting [`parse`] accepts (hostile input must not overflow the stack).
pub(crate) const MAX_DEPTH: usize = 256;

/// A float as a JSON value: a number when finite, the `{"$float": ...}` object otherwise.
pub fn float(x: f64) -> Value {
    match Number::from_f64(x) {
        Some(n) => Value::Number(n),
        None => {
            let word = if x.is_nan() {
                "NaN"
            } else if x > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            };
            let mut m = Map::with_capacity(1);
            m.insert(FLOAT_KEY.into(), Value::from(word));
            Value::Object(m)
        }
    }
}

/// The non-finite float a `{"$float": ...}` object stands for.
pub(crate) fn non_finite(v: &Value) -> Option<f64> {
    let m = v.as_object().filter(|m| m.len() == 1)?;
    match m.get(FLOAT_KEY)?.as_str()? {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// A number or a non-finite float as `f64`.
pub fn as_f64(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| non_finite(v))
}

/// The value with every non-finite float turned into `null`: what the adapter does to a
/// config before sending it as JSON (`actor_config`, `policy_loss_config`).
pub fn json_safe(v: &Value) -> Value {
    if non_finite(v).is_some() {
        return Value::Null;
    }
    match v {
        Value::Array(items) => Value::Array(items.iter().map(json_safe).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), json_safe(v))).collect())
        }
        other => other.clone(),
    }
}

/// `json.dumps(v)` with Python's default settings.
pub(crate) fn to_python(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Value) {
    if let Some(x) = non_finite(v) {
        out.push_str(if x.is_nan() {
            "NaN"
        } else if x > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        });
        return;
    }
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_f64() {
                out.push_str(&float_repr(n.as_f64().unwrap_or(f64::NAN)));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, k);
                out.push_str(": ");
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// A string with `ensure_ascii` escaping.
pub(crate) fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// Python's `repr` of a finite float: the shortest digits that round-trip, written in
/// positional form when the decimal exponent lies in `-4..16`, otherwise as `d.ddde+XX`.
pub(crate) fn float_repr(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "NaN".into()
        } else if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits too: `-1.2345e-7`.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if !(-4..16).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.unsigned_abs()));
    } else if exp < 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-exp - 1) as usize));
        out.push_str(&digits);
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            out.push_str(&"0".repeat(int_len - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

/// `json.loads(text)`: strict JSON plus the `NaN`, `Infinity` and `-Infinity` literals, which
/// become `{"$float": ...}` objects. Integers stay integers and floats stay floats (`1.0` is a
/// float), so [`to_python`] writes back the same text for Python-written input.
pub(crate) fn parse(text: &str) -> Result<Value, PyJsonError> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let v = p.value(0).map_err(PyJsonError)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(PyJsonError(p.err("trailing characters")));
    }
    Ok(v)
}

/// Why a text is not Python's JSON: what was expected, and at which byte.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PyJsonError(String);

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        format!("{what} at byte {}", self.i)
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("JSON nests deeper than {MAX_DEPTH} levels"));
        }
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end of input")),
            Some(b'{') => {
                self.i += 1;
                let mut m = Map::new();
                self.ws();
                if self.eat("}") {
                    return Ok(Value::Object(m));
                }
                loop {
                    self.ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return Err(self.err("expected a string key"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if !self.eat(":") {
                        return Err(self.err("expected ':'"));
                    }
                    self.ws();
                    let v = self.value(depth + 1)?;
                    m.insert(k, v);
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    if self.eat("}") {
                        return Ok(Value::Object(m));
                    }
                    return Err(self.err("expected ',' or '}'"));
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat("]") {
                    return Ok(Value::Array(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    if self.eat("]") {
                        return Ok(Value::Array(items));
                    }
                    return Err(self.err("expected ',' or ']'"));
                }
            }
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(_) => {
                for (lit, v) in [
                    ("null", Value::Null),
                    ("true", Value::Bool(true)),
                    ("false", Value::Bool(false)),
                    ("NaN", float(f64::NAN)),
                    ("Infinity", float(f64::INFINITY)),
                    ("-Infinity", float(f64::NEG_INFINITY)),
                ] {
                    if self.eat(lit) {
                        return Ok(v);
                    }
                }
                self.number()
            }
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        let mut is_float = false;
        while let Some(&b) = self.s.get(self.i) {
            match b {
                b'0'..=b'9' | b'-' | b'+' => {}
                b'.' | b'e' | b'E' => is_float = true,
                _ => break,
            }
            self.i += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        if text.is_empty() {
            return Err(self.err("expected a JSON value"));
        }
        // The strict grammar (no leading '+', no bare '.') is serde_json's.
        let n: Number = serde_json::from_str(text)
            .map_err(|_| format!("invalid number {text:?} at byte {start}"))?;
        if is_float && !n.is_f64() {
            // `1e2` is a float in Python; serde_json keeps it as such already, this is a guard.
            return Ok(float(n.as_f64().unwrap_or(f64::NAN)));
        }
        Ok(Value::Number(n))
    }

    fn string(&mut self) -> Result<String, String> {
        // Find the closing quote, then let serde_json unescape the literal.
        let start = self.i;
        self.i += 1;
        loop {
            match self.s.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'\\') => self.i += 2,
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(_) => self.i += 1,
            }
        }
        let lit = std::str::from_utf8(&self.s[start..self.i.min(self.s.len())])
            .map_err(|_| format!("string at byte {start} is not UTF-8"))?;
        serde_json::from_str::<String>(lit).map_err(|e| format!("string at byte {start}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_are_written_in_python_repr() {
        for (x, want) in [
            (1e-6, "1e-06"),
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123.456, "123.456"),
            (1.2345678901234567e300, "1.2345678901234567e+300"),
            (5e-324, "5e-324"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn dumps_uses_python_separators_and_ascii_escapes() {
        let v = json!({"v": "DSSST1", "tree": ["j", {"é": "日本\u{1F600}\u{7f}\n", "n": [1, 2.0, null, true]}]});
        assert_eq!(
            to_python(&v),
            r#"{"v": "DSSST1", "tree": ["j", {"\u00e9": "\u65e5\u672c\ud83d\ude00\u007f\n", "n": [1, 2.0, null, true]}]}"#
        );
    }

    #[test]
    fn non_finite_floats_round_trip_and_stay_apart_from_null() {
        let text = r#"{"a": NaN, "b": Infinity, "c": -Infinity, "d": null, "e": 1e-06}"#;
        let v = parse(text).unwrap();
        assert!(as_f64(&v["a"]).unwrap().is_nan());
        assert_eq!(as_f64(&v["b"]), Some(f64::INFINITY));
        assert_eq!(as_f64(&v["c"]), Some(f64::NEG_INFINITY));
        assert_eq!(v["d"], Value::Null);
        assert_ne!(v["a"], Value::Null);
        assert_eq!(to_python(&v), text);
        assert_eq!(float(f64::NAN), json!({"$float": "NaN"}));
    }

    #[test]
    fn parse_refuses_what_python_refuses() {
        for bad in [
            "{'a': 1}",
            "[1,]",
            "nan",
            "+1",
            "{\"a\" 1}",
            "[1] x",
            "\"open",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 2), "]".repeat(MAX_DEPTH + 2));
        assert!(parse(&deep)
            .unwrap_err()
            .to_string()
            .contains("nests deeper"));
    }
}
