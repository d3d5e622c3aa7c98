//! `-E/--filter EXPR` of `run` and `list`: a filter expression over each scenario's name, tags,
//! requirements and path, as nextest's `-E` is over tests (grammar: `filter.pest`).
//!
//! - `name(TEXT)`: the scenario's `name:` contains TEXT (`name(=TEXT)`: is TEXT);
//! - `tag(TAG)`: it has that tag;
//! - `requires(TEXT)`: its requirements (as `list` shows them: `1 GPU (H200)`, `feature
//!   torch`, `python verl`, `env VERL_SRC`) contain TEXT, any case;
//! - `path(TEXT)`: its file's path contains TEXT;
//! - `all()`: every scenario;
//! - `and` / `&`, `or` / `|`, `not` / `!`, parentheses.

pub(crate) use crate::app::errors::FilterError;
use pest::iterators::Pair;
use pest::Parser;

#[derive(pest_derive::Parser)]
#[grammar = "app/commands/filter.pest"]
struct FilterParser;

/// A parsed filter expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Filter {
    Name { text: String, exact: bool },
    Tag(String),
    Requires(String),
    Path(String),
    All,
    Not(Box<Filter>),
    And(Vec<Filter>),
    Or(Vec<Filter>),
}

/// What a filter reads of one scenario.
pub(crate) struct Facts<'a> {
    pub(crate) name: &'a str,
    pub(crate) tags: &'a [String],
    pub(crate) requires: &'a str,
    pub(crate) path: &'a str,
}

impl Filter {
    /// Parse `-E`'s text; the error names the column and what was expected.
    pub(crate) fn parse(text: &str) -> Result<Filter, FilterError> {
        let mut pairs = FilterParser::parse(Rule::filter, text).map_err(|e| {
            let col = match e.line_col {
                pest::error::LineColLocation::Pos((_, c)) => c,
                pest::error::LineColLocation::Span((_, c), _) => c,
            };
            FilterError::Syntax {
                text: text.to_string(),
                col,
            }
        })?;
        let top = pairs.next().and_then(|p| p.into_inner().next());
        top.map(build)
            .ok_or_else(|| FilterError::Empty(text.to_string()))
    }

    /// Whether the scenario of `facts` is selected.
    pub(crate) fn matches(&self, f: &Facts<'_>) -> bool {
        match self {
            Filter::Name { text, exact: true } => f.name == text,
            Filter::Name { text, exact: false } => f.name.contains(text.as_str()),
            Filter::Tag(t) => f.tags.iter().any(|x| x == t),
            Filter::Requires(t) => f.requires.to_lowercase().contains(&t.to_lowercase()),
            Filter::Path(t) => f.path.contains(t.as_str()),
            Filter::All => true,
            Filter::Not(x) => !x.matches(f),
            Filter::And(xs) => xs.iter().all(|x| x.matches(f)),
            Filter::Or(xs) => xs.iter().any(|x| x.matches(f)),
        }
    }
}

fn build(pair: Pair<'_, Rule>) -> Filter {
    let rule = pair.as_rule();
    let mut inner: Vec<Pair<'_, Rule>> = pair.into_inner().collect();
    match rule {
        Rule::or_expr | Rule::and_expr => {
            let mut parts: Vec<Filter> = inner.into_iter().map(build).collect();
            match (parts.len(), rule) {
                (1, _) => parts.remove(0),
                (_, Rule::or_expr) => Filter::Or(parts),
                _ => Filter::And(parts),
            }
        }
        Rule::unary => match inner[0].as_rule() {
            Rule::kw_not => Filter::Not(Box::new(build(inner.remove(1)))),
            _ => build(inner.remove(0)),
        },
        Rule::primary => build(inner.remove(0)),
        Rule::predicate => {
            let kind = inner[0].as_str();
            let arg = inner[1].as_str().trim().to_string();
            match kind {
                "name" => match arg.strip_prefix('=') {
                    Some(exact) => Filter::Name {
                        text: exact.to_string(),
                        exact: true,
                    },
                    None => Filter::Name {
                        text: arg,
                        exact: false,
                    },
                },
                "tag" => Filter::Tag(arg),
                "requires" => Filter::Requires(arg),
                "path" => Filter::Path(arg),
                _ => Filter::All,
            }
        }
        _ => Filter::All,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(name: &'a str, tags: &'a [String], requires: &'a str) -> Facts<'a> {
        Facts {
            name,
            tags,
            requires,
            path: "scenarios/smoke/x.yaml",
        }
    }

    #[test]
    fn precedence_negation_and_each_predicate() {
        let tags = vec!["smoke".to_string(), "mock".to_string()];
        let smoke = facts("mock-gsm8k-grpo", &tags, "-");
        let gpu = facts("qwen3-shape", &[], "1 GPU (H200)");
        let cases = [
            ("tag(smoke)", true, false),
            ("not tag(smoke)", false, true),
            ("!requires(gpu)", true, false),
            ("name(grpo) & tag(mock)", true, false),
            ("name(=mock-gsm8k-grpo)", true, false),
            ("name(=mock)", false, false),
            ("tag(none) or name(qwen3) and requires(h200)", false, true),
            ("(tag(none) or name(qwen3)) and requires(h200)", false, true),
            ("not (tag(smoke) | requires(GPU))", false, false),
            ("path(smoke/)", true, true),
            ("all()", true, true),
        ];
        for (text, a, b) in cases {
            let f = Filter::parse(text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                (f.matches(&smoke), f.matches(&gpu)),
                (a, b),
                "{text}: {f:?}"
            );
        }
    }

    #[test]
    fn a_bad_expression_names_its_column() {
        let e = Filter::parse("tag(smoke) and").unwrap_err().to_string();
        assert!(e.contains("column 15"), "{e}");
        let e = Filter::parse("colour(red)").unwrap_err().to_string();
        assert!(e.contains("column 1"), "{e}");
    }
}
