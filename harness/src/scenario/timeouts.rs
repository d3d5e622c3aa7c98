//! The `timeouts` block, and durations read as seconds or with a unit.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Time limits. In YAML each is seconds (`90`, `0.5`) or a string with a unit (`"90s"`,
/// `"10m"`, `"1h"`, `"500ms"`); absent means no limit of that kind.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Timeouts {
    /// One training step.
    #[serde(
        default,
        deserialize_with = "de_duration",
        serialize_with = "ser_duration"
    )]
    pub(crate) step: Option<Duration>,
    /// The whole run.
    #[serde(
        default,
        deserialize_with = "de_duration",
        serialize_with = "ser_duration"
    )]
    pub(crate) run: Option<Duration>,
    /// One HTTP request to the backend.
    #[serde(
        default,
        deserialize_with = "de_duration",
        serialize_with = "ser_duration"
    )]
    pub(crate) request: Option<Duration>,
    /// How long a Ray job (`run --executor ray`) may wait to be scheduled before it is stopped
    /// and reported unschedulable (exit 3); [`DEFAULT_QUEUE_TIMEOUT`] when absent. Not part of
    /// the plan: where a scenario waits does not change what it computes.
    #[serde(
        default,
        deserialize_with = "de_duration",
        serialize_with = "ser_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) queue: Option<Duration>,
}

/// `timeouts.queue` when a scenario does not set it.
pub(crate) const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(600);

fn ser_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// Parse `90`, `1.5s`, `500ms`, `10m`, `1h` into a duration.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| DurationError::NoNumber(text.to_string()))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(DurationError::Unit {
                text: text.to_string(),
                unit: other.to_string(),
            })
        }
    };
    seconds(value * scale)
}

fn seconds(x: f64) -> Result<Duration, DurationError> {
    Duration::try_from_secs_f64(x).map_err(|_| DurationError::Seconds(x))
}

/// Why a text or number is not a duration.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DurationError {
    #[error("invalid duration {0:?}: expected a number with a unit such as 90s, 10m, 1h or 500ms")]
    NoNumber(String),
    #[error("invalid duration {text:?}: unknown unit `{unit}` (expected ms, s, m or h)")]
    Unit { text: String, unit: String },
    #[error("invalid duration {0}: expected a finite, non-negative number of seconds")]
    Seconds(f64),
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<Duration>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("seconds as a number, or a string such as \"90s\", \"10m\", \"1h\"")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(V)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(Duration::from_secs(v)))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map(|s| Some(Duration::from_secs(s)))
                .map_err(|_| {
                    E::custom(format!(
                        "invalid duration {v}: expected a non-negative number of seconds"
                    ))
                })
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            seconds(v).map(Some).map_err(E::custom)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse_duration(v).map(Some).map_err(E::custom)
        }
    }
    d.deserialize_any(V)
}
