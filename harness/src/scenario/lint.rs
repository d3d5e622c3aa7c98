//! The format verl's CI enforces on its config YAML, applied to our backend and defaults
//! files: every field has a comment line directly above it, every field line is followed by
//! a blank line (so fields are separated and a mapping's first child starts after one), and
//! no field carries an inline comment. The documentation then lives next to each knob and
//! survives copy-paste into verl's own config tree.
//!
//! A field is a line whose first token is `key:` (letters, digits, `_`, `-`), the same
//! detection verl's check uses, so multi-line values must be written in flow style
//! (`betas: [0.9, 0.999]`).

use std::fmt;
use std::path::{Path, PathBuf};

/// One format violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintIssue {
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) message: String,
}

impl fmt::Display for LintIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// The key of a field line, if the line is one.
fn field_key(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let end = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(t.len());
    if end == 0 || t.starts_with('-') {
        return None;
    }
    let rest = &t[end..];
    let after = rest.strip_prefix(':')?;
    if after.is_empty() || after.starts_with([' ', '\t']) {
        Some(&t[..end])
    } else {
        None
    }
}

/// Byte offset of a comment that follows content on the line (`# ` after whitespace, outside
/// quotes), if any.
fn inline_comment(line: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut prev_space = false;
    let mut seen_content = false;
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
            }
            None => {
                if c == '#' && prev_space && seen_content {
                    return Some(i);
                }
                if (c == '\'' || c == '"') && (prev_space || !seen_content) {
                    quote = Some(c);
                }
            }
        }
        prev_space = c == ' ' || c == '\t';
        if !prev_space {
            seen_content = true;
        }
    }
    None
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

/// Lint YAML text. `file` is only used in the issues.
pub(crate) fn lint_text(file: &Path, text: &str) -> Vec<LintIssue> {
    let lines: Vec<&str> = text.lines().collect();
    let mut issues = Vec::new();
    let issue = |line: usize, message: String| LintIssue {
        file: file.to_path_buf(),
        line,
        message,
    };
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() || is_comment(line) || line.trim() == "---" {
            continue;
        }
        if inline_comment(line).is_some() {
            issues.push(issue(
                i + 1,
                "inline comment; move it to its own line above the field".to_string(),
            ));
        }
        let Some(key) = field_key(line) else {
            continue;
        };
        if i == 0 || !is_comment(lines[i - 1]) {
            issues.push(issue(
                i + 1,
                format!("field `{key}` has no comment line directly above it"),
            ));
        }
        if let Some(next) = lines.get(i + 1) {
            if !next.trim().is_empty() {
                issues.push(issue(
                    i + 1,
                    format!("field `{key}` must be followed by a blank line"),
                ));
            }
        }
    }
    issues
}

/// Lint one file; an unreadable file is one issue at line 0.
pub fn lint_file(path: &Path) -> Vec<LintIssue> {
    match std::fs::read_to_string(path) {
        Ok(text) => lint_text(path, &text),
        Err(e) => vec![LintIssue {
            file: path.to_path_buf(),
            line: 0,
            message: format!("cannot read file: {e}"),
        }],
    }
}

/// The layer files of a scenarios root that must follow the format: `backends/*.yaml`
/// (except `*.knobs.yaml` manifests, which are data, not config) and `defaults/*.yaml`.
pub(crate) fn layer_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["backends", "defaults"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
            if p.is_file() && yaml && !name.ends_with(".knobs.yaml") && !name.starts_with('.') {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lint(text: &str) -> Vec<(usize, String)> {
        lint_text(Path::new("b.yaml"), text)
            .into_iter()
            .map(|i| (i.line, i.message))
            .collect()
    }

    #[test]
    fn well_formed_file_passes() {
        let text = "# Header.\n\n# Colocate.\ncolocate: true\n\n# Train.\ntrain:\n\n  # Balance.\n  load_balancer: true\n\n  # Quoted hash is not a comment.\n  name: 'a # b'\n\n  # Betas.\n  betas: [0.9, 0.999]\n";
        assert_eq!(lint(text), vec![]);
    }

    #[test]
    fn each_violation_is_reported_on_its_line() {
        let missing_comment = "# A.\na: 1\n\nb: 2\n";
        assert_eq!(
            lint(missing_comment),
            vec![(
                4,
                "field `b` has no comment line directly above it".to_string()
            )]
        );
        let missing_blank = "# A.\na: 1\n# B.\nb: 2\n";
        assert_eq!(
            lint(missing_blank),
            vec![(2, "field `a` must be followed by a blank line".to_string())]
        );
        let nested = "# T.\ntrain:\n  # X.\n  x: 1\n";
        assert_eq!(
            lint(nested),
            vec![(
                2,
                "field `train` must be followed by a blank line".to_string()
            )]
        );
        let inline = "# A.\na: 1  # one\n";
        assert_eq!(
            lint(inline),
            vec![(
                2,
                "inline comment; move it to its own line above the field".to_string()
            )]
        );
        let comment_separated_by_blank = "# A.\n\na: 1\n";
        assert_eq!(lint(comment_separated_by_blank).len(), 1);
    }

    #[test]
    fn inline_comment_detection_respects_quotes_and_urls() {
        assert_eq!(inline_comment("a: \"x # y\""), None);
        assert_eq!(inline_comment("a: x#y"), None);
        assert_eq!(inline_comment("a: 1 # c"), Some(5));
        assert_eq!(field_key("  zorro_train:"), Some("zorro_train"));
        assert_eq!(field_key("- a: 1"), None);
        assert_eq!(field_key("url: http://x"), Some("url"));
        assert_eq!(field_key("http://x"), None);
    }
}
