//! Step ranges: `"2.."`, `"..10"`, `"3..7"`, `"5"`, the one type every rule, window and
//! suppression uses to name steps.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a step range does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StepRangeError {
    #[error("`{text}` is not a step number")]
    NotANumber {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("an empty step range")]
    Empty,
    #[error("empty step range `{0}`: the start is after the end")]
    Backwards(String),
}

/// An inclusive range of step numbers, open at either end: `"2.."`, `"..10"`, `"3..7"`, `"5"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepRange {
    pub(crate) from: Option<u64>,
    pub(crate) to: Option<u64>,
}

impl StepRange {
    pub(crate) fn contains(&self, step: u64) -> bool {
        self.from.is_none_or(|a| step >= a) && self.to.is_none_or(|b| step <= b)
    }

    pub(crate) fn parse(s: &str) -> Result<StepRange, StepRangeError> {
        let s = s.trim();
        let num = |t: &str| -> Result<Option<u64>, StepRangeError> {
            let t = t.trim();
            if t.is_empty() {
                Ok(None)
            } else {
                t.parse()
                    .map(Some)
                    .map_err(|source| StepRangeError::NotANumber {
                        text: t.to_string(),
                        source,
                    })
            }
        };
        let r = match s.split_once("..") {
            Some((a, b)) => StepRange {
                from: num(a)?,
                to: num(b)?,
            },
            None => {
                let n = num(s)?.ok_or(StepRangeError::Empty)?;
                StepRange {
                    from: Some(n),
                    to: Some(n),
                }
            }
        };
        if let (Some(a), Some(b)) = (r.from, r.to) {
            if a > b {
                return Err(StepRangeError::Backwards(s.to_string()));
            }
        }
        Ok(r)
    }
}

impl StepRange {
    /// Always as `a..b` (either end left out when open), where `Display` writes a one-step
    /// range as `5`: the form of the expressions' `steps a..b`.
    pub(crate) fn bounds(&self) -> String {
        let end = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        format!("{}..{}", end(self.from), end(self.to))
    }
}

impl fmt::Display for StepRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.from, self.to) {
            (Some(a), Some(b)) if a == b => write!(f, "{a}"),
            _ => f.write_str(&self.bounds()),
        }
    }
}

impl Serialize for StepRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StepRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StepRange;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a step range such as \"2..\", \"..10\", \"3..7\" or a step number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StepRange, E> {
                StepRange::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StepRange, E> {
                Ok(StepRange {
                    from: Some(v),
                    to: Some(v),
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StepRange, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("step {v} is negative")))
                    .and_then(|v| self.visit_u64(v))
            }
        }
        d.deserialize_any(V)
    }
}
