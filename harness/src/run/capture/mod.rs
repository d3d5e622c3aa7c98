//! Metric sources of an external trainer: verl's file logger (JSONL) and its console logger.
//!
//! The two parsers are pure and total: any input, however mangled, gives a value or an error,
//! never a panic (they are fuzzed). The formats are those of `verl.utils.tracking`:
//! - file logger: one compact JSON object per step, `{"step":1,"data":{"actor/pg_loss":-0.002,...}}`,
//!   non-finite values written as `null`, key order not stable;
//! - console logger: `step:<n> - <key>:<python repr> - ...`, printed inside a Ray actor, so the
//!   driver's stream shows it behind `(TaskRunner pid=..., ip=...)`, perhaps in ANSI colours.
//!
//! Step 0 is verl's validation before training (`val-*` keys only); callers keep it apart from
//! the training series, whose steps start at 1.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::model::metrics::StepMetrics;

/// One parsed console line: the step and its numeric values, in line order.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleRecord {
    pub step: u64,
    pub(crate) values: Vec<(String, f64)>,
    /// `key:value` parts whose value is not a number this parser reads (kept for warnings).
    pub(crate) unparsed: Vec<String>,
}

/// One parsed file-logger line.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlRecord {
    pub(crate) step: u64,
    /// Numeric values; `null` (a non-finite value in verl's output) reads as NaN.
    pub values: Vec<(String, f64)>,
    /// Keys whose value was `null`: non-finite in the trainer, exact value lost.
    pub non_finite: Vec<String>,
    /// Keys whose value is not a number (strings, objects, lists): skipped.
    pub(crate) skipped: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CaptureError {
    #[error("invalid JSON: {0}")]
    Json(String),
    #[error("expected a JSON object with `step` and `data`, found {0}")]
    NotAnObject(&'static str),
    #[error("missing key `{0}`")]
    Missing(&'static str),
    #[error("`step` must be a non-negative integer, found {0}")]
    BadStep(String),
    #[error("`data` must be an object, found {0}")]
    BadData(&'static str),
}

impl From<ConsoleRecord> for StepMetrics {
    fn from(r: ConsoleRecord) -> Self {
        let mut m = StepMetrics::new(r.step);
        for (k, v) in r.values {
            m.insert(k, v);
        }
        m
    }
}

impl From<JsonlRecord> for StepMetrics {
    fn from(r: JsonlRecord) -> Self {
        let mut m = StepMetrics::new(r.step);
        for (k, v) in r.values {
            m.insert(k, v);
        }
        m
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parse one line of verl's file logger.
pub fn parse_jsonl_line(line: &str) -> Result<JsonlRecord, CaptureError> {
    let line = line.trim();
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        // Python's `json.dumps` writes `NaN`/`Infinity` unless told not to; a logger that
        // bypasses verl's null conversion still parses, its non-finite values as null.
        Err(e) => match null_bare_non_finite(line) {
            Some(fixed) => {
                serde_json::from_str(&fixed).map_err(|_| CaptureError::Json(e.to_string()))?
            }
            None => return Err(CaptureError::Json(e.to_string())),
        },
    };
    let Value::Object(obj) = v else {
        return Err(CaptureError::NotAnObject(kind(&v)));
    };
    let step = match obj.get("step") {
        None => return Err(CaptureError::Missing("step")),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(s) => s,
            // `3.0` from a float step counter is still step 3.
            None => match n.as_f64() {
                Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 1e15 => f as u64,
                _ => return Err(CaptureError::BadStep(n.to_string())),
            },
        },
        Some(other) => return Err(CaptureError::BadStep(kind(other).to_string())),
    };
    let data = match obj.get("data") {
        None => return Err(CaptureError::Missing("data")),
        Some(Value::Object(d)) => d,
        Some(other) => return Err(CaptureError::BadData(kind(other))),
    };
    let mut rec = JsonlRecord {
        step,
        values: Vec::with_capacity(data.len()),
        non_finite: Vec::new(),
        skipped: Vec::new(),
    };
    for (k, v) in data {
        match v {
            Value::Number(n) => match n.as_f64() {
                Some(x) => rec.values.push((k.clone(), x)),
                None => rec.skipped.push(k.clone()),
            },
            Value::Bool(b) => rec.values.push((k.clone(), if *b { 1.0 } else { 0.0 })),
            Value::Null => {
                rec.values.push((k.clone(), f64::NAN));
                rec.non_finite.push(k.clone());
            }
            _ => rec.skipped.push(k.clone()),
        }
    }
    Ok(rec)
}

/// `NaN`, `Infinity` and `-Infinity` outside strings replaced by `null`; `None` if none found.
fn null_bare_non_finite(line: &str) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut in_str = false;
    let mut escaped = false;
    let mut changed = false;
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_str = true;
        }
        let token = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t));
        match token {
            Some(t) => {
                out.push_str("null");
                rest = &rest[t.len()..];
                changed = true;
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    changed.then_some(out)
}

/// Remove ANSI escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ESC \`, and
/// two-character escapes).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            Some('[') => {
                chars.next();
                // Parameters and intermediates, then one final byte in @..~.
                for d in chars.by_ref() {
                    if ('@'..='~').contains(&d) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(d) = chars.next() {
                    if d == '\u{7}' {
                        break;
                    }
                    if d == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

/// Strip Ray's `(ActorName pid=123, ip=10.0.0.2) ` prefix from a line (ANSI already removed).
/// A line without one is returned as it is.
pub(crate) fn strip_ray_prefix(line: &str) -> &str {
    let t = line.trim_start();
    let Some(rest) = t.strip_prefix('(') else {
        return line;
    };
    let Some(close) = rest.find(')') else {
        return line;
    };
    let inside = &rest[..close];
    // `Name pid=N` with optional `, ip=...` (and, on some Ray versions, `, node=...`).
    let mut words = inside.split_whitespace();
    let name_ok = words
        .next()
        .is_some_and(|n| n.chars().all(|c| c.is_alphanumeric() || "_.:-".contains(c)));
    let pid_ok = inside.split([' ', ',']).any(|w| {
        w.strip_prefix("pid=")
            .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    });
    if name_ok && pid_ok {
        rest[close + 1..].trim_start()
    } else {
        line
    }
}

/// A Python repr of a number as verl's console logger prints it: `0.5`, `1e-06`, `nan`, `inf`,
/// `-inf`, `True`, `np.float64(0.455)`, `np.int64(2)`, `np.True_`. `None` for anything else.
pub fn parse_python_number(repr: &str) -> Option<f64> {
    let s = repr.trim();
    if let Some(inner) = s.strip_prefix("np.").or_else(|| s.strip_prefix("numpy.")) {
        if let Some(b) = inner.strip_suffix('_') {
            return match b {
                "True" => Some(1.0),
                "False" => Some(0.0),
                _ => None,
            };
        }
        let open = inner.find('(')?;
        let ty = &inner[..open];
        let known = ["float", "int", "uint", "bool"]
            .iter()
            .any(|p| ty.starts_with(p) && ty[p.len()..].chars().all(|c| c.is_ascii_digit()))
            || ty == "bool_"
            || ty == "longlong"
            || ty == "double";
        if !known {
            return None;
        }
        let arg = inner[open + 1..].strip_suffix(')')?;
        return parse_python_number(arg);
    }
    match s {
        "True" => return Some(1.0),
        "False" => return Some(0.0),
        "nan" | "-nan" => return Some(f64::NAN),
        "inf" => return Some(f64::INFINITY),
        "-inf" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    // Python ints may use `_` only in source, never in a repr; Rust's parser would accept
    // `infinity` and `NaN` spellings Python never prints, so only digits-and-signs pass.
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        return None;
    }
    s.parse::<f64>().ok()
}

/// Parse one line of a trainer's stdout or stderr as verl's console logger output. `None` for
/// every other line (progress bars, `Initial validation metrics: {...}`, warnings).
pub fn parse_console_line(line: &str) -> Option<ConsoleRecord> {
    let clean = strip_ansi(line);
    let body = strip_ray_prefix(clean.trim_end_matches(['\r', '\n']));
    // Ray's log deduplication appends ` [repeated 2x across cluster]`.
    let body = match body.rfind(" [repeated ") {
        Some(i) if body.ends_with(" across cluster]") => &body[..i],
        _ => body,
    };
    let body = body.trim();
    let rest = body.strip_prefix("step:")?;
    let mut parts = rest.split(" - ");
    let step_text = parts.next()?.trim();
    let step = if step_text.bytes().all(|b| b.is_ascii_digit()) {
        step_text.parse::<u64>().ok()?
    } else if step_text.starts_with("np.") {
        parse_python_number(step_text)
            .filter(|s| *s >= 0.0 && s.fract() == 0.0 && *s < 1e15)
            .map(|s| s as u64)?
    } else {
        return None;
    };
    let mut rec = ConsoleRecord {
        step,
        values: Vec::new(),
        unparsed: Vec::new(),
    };
    for part in parts {
        let Some((key, value)) = part.split_once(':') else {
            rec.unparsed.push(part.to_string());
            continue;
        };
        let key = key.trim();
        if key.is_empty() {
            rec.unparsed.push(part.to_string());
            continue;
        }
        match parse_python_number(value) {
            Some(v) => match rec.values.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = v,
                None => rec.values.push((key.to_string(), v)),
            },
            None => rec.unparsed.push(part.to_string()),
        }
    }
    Some(rec)
}

/// Follows a JSONL file as a trainer appends to it: complete lines only, from where the last
/// read stopped. A file that shrinks was truncated (verl opens it with `"w"`): reading starts
/// over. A file that does not exist yet gives no lines.
#[derive(Debug)]
pub(crate) struct JsonlTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl JsonlTail {
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The complete lines appended since the last call.
    pub(crate) fn poll(&mut self) -> std::io::Result<Vec<String>> {
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        if len == self.offset {
            return Ok(Vec::new());
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.take(len - self.offset).read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let mut lines = Vec::new();
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            if !text.trim().is_empty() {
                lines.push(text);
            }
        }
        Ok(lines)
    }

    /// What is left after the writer stopped: a last line without its newline.
    pub(crate) fn finish(&mut self) -> std::io::Result<Vec<String>> {
        let mut lines = self.poll()?;
        if !self.partial.is_empty() {
            let text = String::from_utf8_lossy(&self.partial).into_owned();
            self.partial.clear();
            if !text.trim().is_empty() {
                lines.push(text);
            }
        }
        Ok(lines)
    }
}

/// verl's step-0 validation record, kept apart from the training series.
pub(crate) fn validation_json(values: &[(String, f64)]) -> Value {
    let m: BTreeMap<&str, Value> = values
        .iter()
        .map(|(k, v)| {
            (
                k.as_str(),
                serde_json::Number::from_f64(*v)
                    .map(Value::Number)
                    .unwrap_or_else(|| Value::String(crate::model::metrics::format_value(*v))),
            )
        })
        .collect();
    serde_json::json!({ "step": 0, "data": m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_lines_with_ray_prefix_ansi_and_numpy_reprs() {
        let line = "\u{1b}[36m(TaskRunner pid=12345)\u{1b}[0m step:3 - actor/pg_loss:-0.0021 - \
                    critic/score/mean:np.float64(0.455) - training/global_step:np.int64(3) - \
                    actor/lr:1e-06 - perf/mfu/actor:0.30000000000000004 - x/flag:True";
        let r = parse_console_line(line).unwrap();
        assert_eq!(r.step, 3);
        assert_eq!(
            r.values,
            vec![
                ("actor/pg_loss".to_string(), -0.0021),
                ("critic/score/mean".to_string(), 0.455),
                ("training/global_step".to_string(), 3.0),
                ("actor/lr".to_string(), 1e-6),
                ("perf/mfu/actor".to_string(), 0.30000000000000004),
                ("x/flag".to_string(), 1.0),
            ]
        );
        assert!(r.unparsed.is_empty());
    }

    #[test]
    fn console_values_split_on_the_first_colon_and_keep_non_finite() {
        let r = parse_console_line(
            "(TaskRunnerV1 pid=4242, ip=10.0.0.2) step:7 - a:nan - b:inf - c:-inf - d:np.float32(0.5) - e:oops:1 - f",
        )
        .unwrap();
        assert_eq!(r.step, 7);
        assert!(r.values[0].1.is_nan());
        assert_eq!(r.values[1].1, f64::INFINITY);
        assert_eq!(r.values[2].1, f64::NEG_INFINITY);
        assert_eq!(r.values[3], ("d".to_string(), 0.5));
        assert_eq!(r.unparsed, vec!["e:oops:1".to_string(), "f".to_string()]);
    }

    #[test]
    fn other_lines_are_ignored() {
        for l in [
            "Initial validation metrics: {'val-core/openai/gsm8k/acc/mean@1': 0.1}",
            "Training Progress:  17%|█▋        | 1/6 [00:41<03:25, 41.2s/it]",
            "(TaskRunner pid=1) INFO: step:3 is starting",
            "step:abc - a:1",
            "step:-1 - a:1",
            "step:1.5 - a:1",
            "",
            "\u{1b}[",
            "(",
            "step:",
        ] {
            assert_eq!(parse_console_line(l), None, "{l:?}");
        }
    }

    #[test]
    fn ray_repeat_suffix_is_dropped() {
        let r =
            parse_console_line("(TaskRunner pid=9) step:2 - a:0.25 [repeated 2x across cluster]")
                .unwrap();
        assert_eq!(r.values, vec![("a".to_string(), 0.25)]);
    }

    #[test]
    fn python_numbers() {
        assert_eq!(parse_python_number("np.int64(2)"), Some(2.0));
        assert_eq!(parse_python_number("np.True_"), Some(1.0));
        assert_eq!(parse_python_number("False"), Some(0.0));
        assert_eq!(parse_python_number("np.str_('x')"), None);
        assert_eq!(parse_python_number("tensor(0.5)"), None);
        assert_eq!(parse_python_number("infinity"), None);
        assert_eq!(parse_python_number("'0.5'"), None);
    }

    #[test]
    fn jsonl_records_with_nulls_and_skips() {
        let r = parse_jsonl_line(
            r#"{"step":2,"data":{"actor/grad_norm":null,"actor/lr":1e-06,"note":"x","ok":true}}"#,
        )
        .unwrap();
        assert_eq!(r.step, 2);
        assert!(r.values[0].1.is_nan());
        assert_eq!(r.non_finite, vec!["actor/grad_norm".to_string()]);
        assert_eq!(r.values[1], ("actor/lr".to_string(), 1e-6));
        assert_eq!(r.values[2], ("ok".to_string(), 1.0));
        assert_eq!(r.skipped, vec!["note".to_string()]);
    }

    #[test]
    fn jsonl_tolerates_python_bare_nan() {
        let r = parse_jsonl_line(r#"{"data": {"a": NaN, "b": -Infinity, "s": "NaN"}, "step": 4}"#)
            .unwrap();
        assert_eq!(r.step, 4);
        assert_eq!(r.non_finite, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(r.skipped, vec!["s".to_string()]);
    }

    #[test]
    fn jsonl_errors_say_what_is_wrong() {
        let e = |l: &str| parse_jsonl_line(l).unwrap_err().to_string();
        assert!(e("{").starts_with("invalid JSON"));
        for (line, want) in [
            (
                "[1]",
                "expected a JSON object with `step` and `data`, found a list",
            ),
            (r#"{"data":{}}"#, "missing key `step`"),
            (
                r#"{"step":-1,"data":{}}"#,
                "`step` must be a non-negative integer, found -1",
            ),
            (
                r#"{"step":"1","data":{}}"#,
                "`step` must be a non-negative integer, found a string",
            ),
            (r#"{"step":1}"#, "missing key `data`"),
            (
                r#"{"step":1,"data":3}"#,
                "`data` must be an object, found a number",
            ),
        ] {
            assert_eq!(e(line), want);
        }
        assert_eq!(
            parse_jsonl_line(r#"{"step":1.0,"data":{}}"#).unwrap().step,
            1
        );
    }

    proptest::proptest! {
        /// Total on any input (the fuzz targets go further): never a panic.
        #[test]
        fn parsers_never_panic(s in "\\PC*", prefix in proptest::sample::select(vec![
            "", "step:", "step:1 - ", "(TaskRunner pid=1) step:2 - a:", "\u{1b}[36m(", "{\"step\":1,\"data\":{",
            "np.float64(", "\u{1b}]", "(X pid=) step:",
        ])) {
            let line = format!("{prefix}{s}");
            let _ = parse_console_line(&line);
            let _ = parse_jsonl_line(&line);
            let _ = parse_python_number(&line);
            let _ = strip_ansi(&line);
        }
    }

    #[test]
    fn tail_reads_complete_lines_and_restarts_after_truncation() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        let mut t = JsonlTail::new(&p);
        assert!(t.poll().unwrap().is_empty());
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(b"{\"a\":1}\n{\"b\":").unwrap();
        f.flush().unwrap();
        assert_eq!(t.poll().unwrap(), vec!["{\"a\":1}".to_string()]);
        f.write_all(b"2}\n").unwrap();
        f.flush().unwrap();
        assert_eq!(t.poll().unwrap(), vec!["{\"b\":2}".to_string()]);
        drop(f);
        std::fs::write(&p, b"{\"c\":3}").unwrap();
        assert!(t.poll().unwrap().is_empty());
        assert_eq!(t.finish().unwrap(), vec!["{\"c\":3}".to_string()]);
    }
}
