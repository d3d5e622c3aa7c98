//! Typed reads of the resolved config, each knob's default taken from the knob table.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::run::knobs::{arctic, lookup, KnobTable};

#[derive(Debug, thiserror::Error)]
#[error("config key `{key}`: {message}")]
pub(crate) struct TranslateError {
    pub(crate) key: String,
    pub(crate) message: String,
}

/// Typed access to the resolved config tree with errors that name the key. A knob the config
/// leaves out (or sets to `null`) takes its default from the knob table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cfg<'a> {
    tree: &'a Value,
    pub(super) table: &'static KnobTable,
}

impl<'a> Cfg<'a> {
    pub(crate) fn new(tree: &'a Value) -> Result<Self, TranslateError> {
        let table = arctic().map_err(|e| TranslateError {
            key: String::new(),
            message: e.to_string(),
        })?;
        Ok(Self { tree, table })
    }
    /// The config's own value, `null` counting as unset (no default).
    pub(super) fn raw(&self, path: &str) -> Option<&'a Value> {
        lookup(self.tree, path).filter(|v| !v.is_null())
    }
    pub(super) fn err(path: &str, expected: &str, v: &Value) -> TranslateError {
        TranslateError {
            key: path.to_string(),
            message: format!("expected {expected}, found {v}"),
        }
    }
    /// The knob's value, or its default; `null` when both are.
    pub(super) fn value(&self, path: &str) -> Result<Value, TranslateError> {
        self.table
            .value(self.tree, path)
            .ok_or_else(|| TranslateError {
                key: path.to_string(),
                message: "not set, and the knob table has no row for it".into(),
            })
    }
    fn typed<T>(
        &self,
        path: &str,
        expected: &str,
        get: impl Fn(&Value) -> Option<T>,
    ) -> Result<T, TranslateError> {
        let v = self.value(path)?;
        get(&v).ok_or_else(|| Self::err(path, expected, &v))
    }
    pub(super) fn f64(&self, path: &str) -> Result<f64, TranslateError> {
        self.typed(path, "a number", Value::as_f64)
    }
    pub(super) fn u64(&self, path: &str) -> Result<u64, TranslateError> {
        self.typed(path, "a non-negative integer", Value::as_u64)
    }
    pub(super) fn i64(&self, path: &str) -> Result<i64, TranslateError> {
        self.typed(path, "an integer", Value::as_i64)
    }
    pub(super) fn bool(&self, path: &str) -> Result<bool, TranslateError> {
        self.typed(path, "true or false", Value::as_bool)
    }
    pub(super) fn string(&self, path: &str) -> Result<String, TranslateError> {
        self.typed(path, "a string", |v| v.as_str().map(str::to_string))
    }
    /// A knob whose value or default may be `null` ("unset").
    pub(super) fn opt_u64(&self, path: &str) -> Result<Option<u64>, TranslateError> {
        match self.value(path)? {
            Value::Null => Ok(None),
            v => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| Self::err(path, "a non-negative integer", &v)),
        }
    }
    /// A step count where verl writes `-1` or `null` for "unset".
    pub(super) fn opt_positive(&self, path: &str) -> Result<Option<u64>, TranslateError> {
        match self.value(path)? {
            Value::Null => Ok(None),
            v => v
                .as_i64()
                .map(|n| u64::try_from(n).ok().filter(|&n| n > 0))
                .ok_or_else(|| Self::err(path, "an integer", &v)),
        }
    }
    /// A key the knob table has no row for (the adapter's own fallbacks, verl keys read only
    /// here): the config's value or `default`.
    pub(super) fn f64_or(&self, path: &str, default: f64) -> Result<f64, TranslateError> {
        match self.raw(path) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| Self::err(path, "a number", v)),
        }
    }
    pub(super) fn bool_or(&self, path: &str, default: bool) -> Result<bool, TranslateError> {
        match self.raw(path) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| Self::err(path, "true or false", v)),
        }
    }
    pub(super) fn value_or(&self, path: &str, default: Value) -> Value {
        self.raw(path).cloned().unwrap_or(default)
    }
    /// Whether every knob of a row's `when` has its value.
    pub(super) fn holds(&self, when: &BTreeMap<String, Value>) -> Result<bool, TranslateError> {
        for (path, want) in when {
            if self.value(path)? != *want {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
