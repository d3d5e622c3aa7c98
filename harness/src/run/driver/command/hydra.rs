//! Hydra overrides: the keys the harness sets, and values quoted the way Hydra reads them.

use serde_json::Value;

/// Keys the harness sets itself; a scenario's values for them are replaced.
pub(crate) const HARNESS_KEYS: &[&str] = &[
    "trainer.total_training_steps",
    "trainer.logger",
    "trainer.project_name",
    "trainer.experiment_name",
];

/// A string as a Hydra quoted value: single quotes; `\'` for a quote; backslashes doubled
/// where Hydra would read them as escapes (before a quote or at the end); `${` escaped so
/// OmegaConf does not interpolate a value the harness already resolved.
pub(crate) fn hydra_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    let mut run = 0usize;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => run += 1,
            '\'' => {
                out.push_str(&"\\".repeat(run * 2));
                out.push_str("\\'");
                run = 0;
            }
            // OmegaConf reads `\${` as a literal backslash and a live interpolation: the
            // backslashes before an escaped `${` are doubled too.
            '$' if chars.peek() == Some(&'{') => {
                out.push_str(&"\\".repeat(run * 2));
                out.push_str("\\$");
                run = 0;
            }
            other => {
                out.push_str(&"\\".repeat(run));
                out.push(other);
                run = 0;
            }
        }
    }
    out.push_str(&"\\".repeat(run * 2));
    out.push('\'');
    out
}

/// A JSON value in Hydra's override grammar: strings quoted, floats always with a `.` or an
/// exponent (so `1.0` stays a float), lists `[a,b]`, mappings `{k:v}`.
pub(crate) fn hydra_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                n.to_string()
            } else {
                match n.as_f64() {
                    Some(f) if f.is_nan() => "nan".into(),
                    Some(f) if f.is_infinite() => if f > 0.0 { "inf" } else { "-inf" }.into(),
                    Some(f) => format!("{f:?}"),
                    None => n.to_string(),
                }
            }
        }
        Value::String(s) => hydra_quote(s),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(hydra_value).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", hydra_value(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}
