//! Where a scenario file writes a key or a rule: the line a finding about it points at.

use std::path::{Path, PathBuf};

use super::error::SpecError;

/// The line of `file` that declares `rule` (`golden:<metric>`, `expect:<name or expression>`,
/// `sanity:...`, `presence:<metric>`), read from the scenario's YAML structure: the key of the
/// rule's metric in `checks.<kind>`, or the entry of a `checks.expect` list with that name or
/// expression. `None` when the file does not write the rule (a default rule, or one from a
/// `--set`): an annotation without a line is better than one on the wrong line.
pub(crate) fn rule_line(file: &std::path::Path, rule: &str) -> Option<usize> {
    use super::yaml::SpannedValue;
    let (kind, name) = rule.split_once(':')?;
    let name = name.trim();
    let text = std::fs::read_to_string(file).ok()?;
    let root = super::yaml::parse(&text, file).ok()?;
    let block = root.get("checks")?.get(kind)?;
    let pos = match &block.value {
        SpannedValue::Map(entries) => entries
            .iter()
            .find(|(k, _, _)| k == name)
            .map(|(_, p, _)| p.clone()),
        SpannedValue::Seq(items) => items
            .iter()
            .find(|item| match &item.value {
                SpannedValue::Str(s) => s.trim() == name,
                SpannedValue::Map(_) => ["name", "expr"].iter().any(|k| {
                    item.get(k).is_some_and(
                        |v| matches!(&v.value, SpannedValue::Str(s) if s.trim() == name),
                    )
                }),
                _ => false,
            })
            .map(|item| item.pos.clone()),
        _ => None,
    }?;
    (pos.line > 0).then_some(pos.line)
}

/// Where a rule is written: the line of `needle` in the scenario file (after a line that
/// starts `after`, when given), else the line of `checks:`, else line 1.
pub(crate) fn line_of(text: &str, after: Option<&str>, needle: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let start = after
        .and_then(|a| lines.iter().position(|l| l.trim_start().starts_with(a)))
        .unwrap_or(0);
    lines
        .iter()
        .enumerate()
        .skip(start)
        .find(|(_, l)| l.contains(needle))
        .or_else(|| {
            lines
                .iter()
                .enumerate()
                .find(|(_, l)| l.trim_start().starts_with("checks:"))
        })
        .map_or(1, |(i, _)| i + 1)
}

/// A lint's finding at `file:line`, first column, under `key`.
pub(crate) fn error_at(file: &Path, line: usize, key: String, message: String) -> SpecError {
    SpecError {
        file: PathBuf::from(file),
        line,
        col: 1,
        key_path: key,
        message,
    }
}

/// A band's edge as the lints write it: `+∞`, `−∞` or the number.
pub(crate) fn fmt(v: f64) -> String {
    if v == f64::INFINITY {
        "+∞".into()
    } else if v == f64::NEG_INFINITY {
        "−∞".into()
    } else {
        crate::model::checks::expr::fmt_num(v)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_rule_is_found_where_the_scenario_declares_it_not_where_its_name_first_appears() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.yaml");
        std::fs::write(
            &file,
            "name: s\n\
             checks:\n\
             \x20 expect:\n\
             \x20   - {name: converges, expr: \"mean(critic/rewards/mean, last 3) >= 0.5\"}\n\
             \x20   - \"max(actor/entropy) <= 1\"\n\
             \x20 golden:\n\
             \x20   # critic/rewards/mean: its band\n\
             \x20   critic/rewards/mean: {rel: 0.1}\n",
        )
        .unwrap();
        let at = |rule: &str| super::rule_line(&file, rule);
        assert_eq!(at("golden:critic/rewards/mean"), Some(8));
        assert_eq!(at("expect:converges"), Some(4));
        assert_eq!(at("expect:max(actor/entropy) <= 1"), Some(5));
        // Default rules the file does not write: no line rather than a wrong one.
        assert_eq!(at("golden:actor/entropy"), None);
        assert_eq!(at("sanity:0 < perf/mfu/actor <= 1"), None);
    }
}
