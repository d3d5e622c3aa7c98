//! The one error type of scenario loading: it always says where (file, line, column, key path)
//! and what was expected.

use std::fmt;
use std::path::PathBuf;

use super::yaml::Pos;

/// One problem in a scenario or a file it uses. `line == 0` means no line applies (an I/O
/// error on the whole file, or a `--set` argument, whose `file` is the argument text).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpecError {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    /// Dotted key path from the document root (`config.actor_rollout_ref.actor.optim.lr`);
    /// empty when the error is about the whole document.
    pub key_path: String,
    pub message: String,
}

impl SpecError {
    pub(crate) fn at(pos: &Pos, key_path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: pos.file.clone(),
            line: pos.line,
            col: pos.col,
            key_path: key_path.into(),
            message: message.into(),
        }
    }

    /// An error about a whole file (it cannot be read, or is missing).
    pub(crate) fn file(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line: 0,
            col: 0,
            key_path: String::new(),
            message: message.into(),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.col)?;
        }
        if !self.key_path.is_empty() {
            write!(f, ": {}", self.key_path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for SpecError {}

/// One or more errors of one scenario; `Display` lists them all, one a line.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecErrors(pub Vec<SpecError>);

impl SpecErrors {
    pub fn iter(&self) -> std::slice::Iter<'_, SpecError> {
        self.0.iter()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::error::Error for SpecErrors {}

impl From<SpecError> for SpecErrors {
    fn from(e: SpecError) -> Self {
        SpecErrors(vec![e])
    }
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Push an error unless an identical one is already there (one root cause can surface through
/// several paths, e.g. a value referenced by two interpolations).
pub(crate) fn push_unique(errors: &mut Vec<SpecError>, e: SpecError) {
    if !errors.contains(&e) {
        errors.push(e);
    }
}

/// The closest candidate to a misspelled name, for "did you mean" hints.
pub(crate) fn closest<'c>(
    name: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Option<&'c str> {
    let limit = (name.len() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_compiler_like() {
        let e = SpecError::at(&Pos::new("s/x.yaml", 3, 5), "config.a", "unknown key `a`");
        assert_eq!(e.to_string(), "s/x.yaml:3:5: config.a: unknown key `a`");
        let e = SpecError::at(&Pos::set_arg("a=1"), "config.a", "bad");
        assert_eq!(e.to_string(), "--set a=1: config.a: bad");
        assert_eq!(SpecError::file("f", "gone").to_string(), "f: gone");
    }

    #[test]
    fn closest_suggests_near_names_only() {
        assert_eq!(closest("lrr", ["lr", "betas"]), Some("lr"));
        assert_eq!(
            closest("ppo_epoch", ["ppo_epochs", "clip_ratio"]),
            Some("ppo_epochs")
        );
        assert_eq!(closest("zzzzzz", ["lr", "betas"]), None);
    }
}
