//! The built-in GSM8K-style task (`arith`), its character tokenizer (shared by driver and
//! backends), and the reward scorers. Task and scorer are separate so a scenario can pair the
//! task with another scorer.

pub mod scorer;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Character-level tokenizer over a fixed alphabet. Id 0 is padding, 1 is end-of-sequence.
/// Every backend and the driver use this one, so token counts agree across the wire.
#[derive(Debug, Clone)]
pub struct CharTokenizer;

pub const PAD_ID: i64 = 0;
pub const EOS_ID: i64 = 1;
/// The characters the tokenizer knows, in id order starting at 2.
pub const ALPHABET: &str = "0123456789+-*= #\n?:QA";

/// A character the arith tokenizer has no id for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("character {0:?} is not in the arith alphabet")]
pub struct NotInAlphabet(pub char);

impl CharTokenizer {
    pub fn vocab_size() -> usize {
        ALPHABET.chars().count() + 2
    }

    /// Encode text; characters outside the alphabet are an error naming the character.
    pub fn encode(text: &str) -> Result<Vec<i64>, NotInAlphabet> {
        text.chars()
            .map(|c| {
                ALPHABET
                    .chars()
                    .position(|a| a == c)
                    .map(|p| p as i64 + 2)
                    .ok_or(NotInAlphabet(c))
            })
            .collect()
    }

    /// Decode ids; padding and end-of-sequence are dropped, unknown ids become `\u{fffd}`.
    pub fn decode(ids: &[i64]) -> String {
        ids.iter()
            .filter(|&&i| i != PAD_ID && i != EOS_ID)
            .map(|&i| {
                usize::try_from(i - 2)
                    .ok()
                    .and_then(|p| ALPHABET.chars().nth(p))
                    .unwrap_or('\u{fffd}')
            })
            .collect()
    }
}

/// Settings of the `arith` task (`driver.task` in a scenario).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArithConfig {
    /// Operands are drawn from `0..=max_operand`.
    #[serde(default = "default_max_operand")]
    pub max_operand: i64,
    /// Operators to draw from: any of `+`, `-`, `*`.
    #[serde(default = "default_ops")]
    pub ops: Vec<char>,
}

fn default_max_operand() -> i64 {
    9
}
fn default_ops() -> Vec<char> {
    vec!['+']
}

impl Default for ArithConfig {
    fn default() -> Self {
        Self {
            max_operand: default_max_operand(),
            ops: default_ops(),
        }
    }
}

/// One problem: the prompt text and the ground truth in GSM8K form.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub prompt: String,
    pub answer: i64,
}

impl Problem {
    /// GSM8K's ground-truth form: the number after `#### `.
    pub fn ground_truth(&self) -> String {
        self.answer.to_string()
    }
    /// The response a perfect policy writes (the warm start teaches this form, then
    /// end-of-sequence): what GSM8K's strict scorer accepts.
    pub fn ideal_response(&self) -> String {
        format!("#### {}", self.answer)
    }
}

/// Why an arithmetic task's configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("arith: max_operand must be at least 1")]
    MaxOperand,
    #[error("arith: ops must be a non-empty list of `+`, `-`, `*`")]
    Ops,
}

/// Seeded problem generator: the same seed and step give the same prompts.
#[derive(Debug, Clone)]
pub struct ArithTask {
    config: ArithConfig,
}

impl ArithTask {
    pub fn new(config: ArithConfig) -> Result<Self, TaskError> {
        if config.max_operand < 1 {
            return Err(TaskError::MaxOperand);
        }
        if config.ops.is_empty() || config.ops.iter().any(|c| !matches!(c, '+' | '-' | '*')) {
            return Err(TaskError::Ops);
        }
        Ok(Self { config })
    }

    /// `count` problems for training step `step` of a run seeded with `seed`.
    pub fn batch(&self, seed: u64, step: u64, count: usize) -> Vec<Problem> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        (0..count).map(|_| self.draw(&mut rng)).collect()
    }

    /// How many different prompts the task can draw (saturating).
    pub fn distinct_problems(&self) -> u64 {
        let ops: std::collections::BTreeSet<&char> = self.config.ops.iter().collect();
        let operands = u64::try_from(self.config.max_operand)
            .unwrap_or(0)
            .saturating_add(1);
        operands
            .saturating_mul(operands)
            .saturating_mul(ops.len() as u64)
    }

    /// One problem from `rng`: the draw every batch is made of.
    pub fn draw(&self, rng: &mut ChaCha8Rng) -> Problem {
        let a = rng.random_range(0..=self.config.max_operand);
        let b = rng.random_range(0..=self.config.max_operand);
        let op = self.config.ops[rng.random_range(0..self.config.ops.len())];
        let answer = match op {
            '+' => a + b,
            '-' => a - b,
            _ => a * b,
        };
        Problem {
            prompt: format!("Q:{a}{op}{b}=?\nA:"),
            answer,
        }
    }

    /// Parse one of this task's prompts back into its answer (the mock's sampler uses this to
    /// answer correctly with a scripted probability).
    pub fn solve(prompt: &str) -> Option<i64> {
        let body = prompt.strip_prefix("Q:")?.strip_suffix("=?\nA:")?;
        let (pos, op) = body
            .char_indices()
            .skip(1)
            .find(|(_, c)| matches!(c, '+' | '-' | '*'))?;
        let a: i64 = body[..pos].parse().ok()?;
        let b: i64 = body[pos + op.len_utf8()..].parse().ok()?;
        Some(match op {
            '+' => a + b,
            '-' => a - b,
            _ => a * b,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_round_trips_task_text() {
        let task = ArithTask::new(ArithConfig {
            max_operand: 99,
            ops: vec!['+', '-', '*'],
        })
        .unwrap();
        for p in task.batch(7, 3, 50) {
            let text = format!("{}{}", p.prompt, p.ideal_response());
            let ids = CharTokenizer::encode(&text).unwrap();
            assert_eq!(CharTokenizer::decode(&ids), text);
            assert_eq!(ArithTask::solve(&p.prompt), Some(p.answer));
        }
        assert!(CharTokenizer::encode("x")
            .unwrap_err()
            .to_string()
            .contains("'x'"));
    }

    #[test]
    fn batches_are_seeded() {
        let task = ArithTask::new(ArithConfig::default()).unwrap();
        assert_eq!(task.batch(1, 1, 8), task.batch(1, 1, 8));
        assert_ne!(task.batch(1, 1, 8), task.batch(1, 2, 8));
    }
}
