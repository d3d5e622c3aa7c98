//! Reward scorers. `gsm8k` follows verl's GSM8K reward: only the last 300 characters are
//! searched; strict mode takes the last `#### <number>` (commas and `$` stripped), flexible
//! mode the last number; no match scores 0, a correct answer 1.0, a wrong one `format_score`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Gsm8kMode {
    #[default]
    Strict,
    Flexible,
}

/// A scorer a scenario can name (`driver.scorer`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScorerConfig {
    Gsm8k {
        #[serde(default)]
        mode: Gsm8kMode,
        #[serde(default)]
        format_score: f64,
        #[serde(default = "one")]
        score: f64,
    },
}

fn one() -> f64 {
    1.0
}

impl Default for ScorerConfig {
    fn default() -> Self {
        ScorerConfig::Gsm8k {
            mode: Gsm8kMode::Strict,
            format_score: 0.0,
            score: 1.0,
        }
    }
}

impl ScorerConfig {
    pub fn score(&self, response: &str, ground_truth: &str) -> f64 {
        match self {
            ScorerConfig::Gsm8k {
                mode,
                format_score,
                score,
            } => match extract_solution(response, *mode) {
                None => 0.0,
                Some(ans) if ans == ground_truth => *score,
                Some(_) => *format_score,
            },
        }
    }
}

/// verl's `extract_solution`: search the last 300 characters.
pub(crate) fn extract_solution(response: &str, mode: Gsm8kMode) -> Option<String> {
    let chars: Vec<char> = response.chars().collect();
    let tail: String = chars[chars.len().saturating_sub(300)..].iter().collect();
    match mode {
        Gsm8kMode::Strict => {
            // Last `#### ` followed by an optional minus and digits, dots, commas, `$`.
            let mut found = None;
            let mut search = tail.as_str();
            while let Some(pos) = search.find("#### ") {
                let rest = &search[pos + 5..];
                let num: String = rest
                    .chars()
                    .enumerate()
                    .take_while(|(i, c)| {
                        c.is_ascii_digit() || matches!(c, '.' | ',' | '$') || (*i == 0 && *c == '-')
                    })
                    .map(|(_, c)| c)
                    .collect();
                let cleaned: String = num.chars().filter(|c| *c != ',' && *c != '$').collect();
                if cleaned.chars().any(|c| c.is_ascii_digit()) {
                    found = Some(cleaned);
                }
                search = &search[pos + 5..];
            }
            found
        }
        Gsm8kMode::Flexible => {
            let mut last = None;
            let mut cur = String::new();
            let flush = |cur: &mut String, last: &mut Option<String>| {
                let c: String = cur.chars().filter(|c| *c != ',' && *c != '$').collect();
                if c.chars().any(|ch| ch.is_ascii_digit()) && c != "." {
                    *last = Some(c.trim_end_matches('.').to_string());
                }
                cur.clear();
            };
            for c in tail.chars() {
                if c.is_ascii_digit()
                    || matches!(c, '.' | ',' | '$')
                    || (c == '-' && cur.is_empty())
                {
                    cur.push(c);
                } else {
                    flush(&mut cur, &mut last);
                }
            }
            flush(&mut cur, &mut last);
            last
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_takes_last_marker_and_strips_commas_and_dollars() {
        let s = ScorerConfig::default();
        assert_eq!(s.score("#### 12", "12"), 1.0);
        assert_eq!(s.score("#### 1 then #### $1,234", "1234"), 1.0);
        assert_eq!(s.score("the answer is 12", "12"), 0.0);
        assert_eq!(s.score("#### -3", "-3"), 1.0);
        assert_eq!(s.score("#### 13", "12"), 0.0);
        let padded = format!("#### 12{}", " ".repeat(300));
        assert_eq!(
            s.score(&padded, "12"),
            0.0,
            "only the last 300 characters count"
        );
    }

    #[test]
    fn flexible_takes_last_number_and_format_score_applies() {
        let s = ScorerConfig::Gsm8k {
            mode: Gsm8kMode::Flexible,
            format_score: 0.1,
            score: 1.0,
        };
        assert_eq!(s.score("so 3 + 4 = 7.", "7"), 1.0);
        assert_eq!(s.score("so it is 8", "7"), 0.1);
        assert_eq!(s.score("no idea", "7"), 0.0);
    }
}
