//! The scenario's `driver` block of an external trainer (`kind: command`): its command line and
//! environment, where its metrics come from, where the recording proxy listens, and the
//! variables it records. The command driver reads it (`driver::command` re-exports it) and
//! starts the trainer from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where the trainer's per-step metrics come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum MetricsSource {
    /// `$VERL_FILE_LOGGER_PATH`, tailed as it grows.
    VerlJsonl,
    /// `step:N - key:value ...` lines anywhere in stdout or stderr.
    VerlConsole,
}

/// `driver: {kind: command, command: [...], env: {...}, metrics_from: verl-jsonl}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawCommandDriverSpec")]
pub struct CommandDriverSpec {
    /// Program and arguments, without a shell. A relative program path with a `/` is relative
    /// to the scenario file's folder; a bare name is looked up on PATH.
    pub(crate) command: Vec<String>,
    /// Extra environment for the trainer (on top of the harness's own).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) metrics_from: MetricsSource,
    /// Where the recording proxy listens when the scenario has an Arctic backend; default
    /// `127.0.0.1:7000`, the Arctic client's address. `127.0.0.1:0` picks a free port (the
    /// trainer then learns it from `RLHARNESS_BACKEND_URL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) proxy_listen: Option<String>,
    /// The environment variables that name the trainer's source checkouts (`[VERL_SRC,
    /// ARCTIC_SRC]`): `run.json` records each one's `git describe`, so a history orders runs
    /// by the trainer's code, and a bisect knows which repository it walks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sources: Vec<String>,
    /// Environment variables whose values in each of the trainer's processes the run records
    /// (`trainer_env.json`), beside every `env` key: whether what the scenario passes reaches
    /// the processes that read it (`propagate` watches its environment knobs this way).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) watch_env: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommandDriverSpec {
    command: Vec<String>,
    #[serde(default, deserialize_with = "env_values")]
    env: BTreeMap<String, String>,
    metrics_from: MetricsSource,
    #[serde(default)]
    proxy_listen: Option<String>,
    #[serde(default)]
    sources: Vec<String>,
    #[serde(default)]
    watch_env: Vec<String>,
}

/// `env`: each value a string; a number or `true`/`false` is taken as its text (what
/// `--set driver.env.X=1` gives); a sequence or a map is an error at that variable.
fn env_values<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    use serde::de::{Error, MapAccess, Visitor};
    struct Scalar(String);
    impl<'de> Deserialize<'de> for Scalar {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Scalar;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a string (a number or true/false is taken as its text)")
                }
                fn visit_str<E: Error>(self, v: &str) -> Result<Scalar, E> {
                    Ok(Scalar(v.to_string()))
                }
                fn visit_bool<E: Error>(self, v: bool) -> Result<Scalar, E> {
                    Ok(Scalar(v.to_string()))
                }
                fn visit_i64<E: Error>(self, v: i64) -> Result<Scalar, E> {
                    Ok(Scalar(v.to_string()))
                }
                fn visit_u64<E: Error>(self, v: u64) -> Result<Scalar, E> {
                    Ok(Scalar(v.to_string()))
                }
                fn visit_f64<E: Error>(self, v: f64) -> Result<Scalar, E> {
                    Ok(Scalar(v.to_string()))
                }
            }
            d.deserialize_any(V)
        }
    }
    struct Env;
    impl<'de> Visitor<'de> for Env {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of environment variables to their values")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                let Scalar(value) = map.next_value().map_err(|e| {
                    A::Error::custom(crate::model::util::at_key(&format!("env.{key}"), e))
                })?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Env)
}

impl TryFrom<RawCommandDriverSpec> for CommandDriverSpec {
    type Error = String;
    fn try_from(r: RawCommandDriverSpec) -> Result<Self, String> {
        match r.command.first() {
            None => return Err("`command` must name a program (it is empty)".into()),
            Some(p) if p.trim().is_empty() => {
                return Err("`command`: the program name is empty".into())
            }
            Some(_) => {}
        }
        for k in r.env.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(format!("`env`: invalid variable name {k:?}"));
            }
        }
        for (key, names) in [("sources", &r.sources), ("watch_env", &r.watch_env)] {
            for k in names {
                let ok = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ok {
                    return Err(format!(
                        "`{key}`: {k:?} is not an environment variable name (letters, digits, `_`)"
                    ));
                }
            }
        }
        if let Some(l) = &r.proxy_listen {
            l.parse::<std::net::SocketAddr>().map_err(|e| {
                format!("`proxy_listen`: {l:?} is not an address such as 127.0.0.1:7000: {e}")
            })?;
        }
        Ok(CommandDriverSpec {
            command: r.command,
            env: r.env,
            metrics_from: r.metrics_from,
            proxy_listen: r.proxy_listen,
            sources: r.sources,
            watch_env: r.watch_env,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_rejects_an_empty_command_and_bad_addresses() {
        let raw = |command: Vec<&str>, listen: Option<&str>| RawCommandDriverSpec {
            command: command.into_iter().map(String::from).collect(),
            env: BTreeMap::new(),
            metrics_from: MetricsSource::VerlConsole,
            proxy_listen: listen.map(String::from),
            sources: Vec::new(),
            watch_env: Vec::new(),
        };
        let with_sources = |sources: &[&str]| RawCommandDriverSpec {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            ..raw(vec!["x"], None)
        };
        assert!(CommandDriverSpec::try_from(with_sources(&["VERL_SRC", "A_1"])).is_ok());
        assert!(CommandDriverSpec::try_from(with_sources(&["verl src"]))
            .unwrap_err()
            .contains("`sources`: \"verl src\" is not an environment variable name"));
        let watching = |names: &[&str]| RawCommandDriverSpec {
            watch_env: names.iter().map(|s| s.to_string()).collect(),
            ..raw(vec!["x"], None)
        };
        assert!(CommandDriverSpec::try_from(watching(&["CUDA_VISIBLE_DEVICES"])).is_ok());
        assert!(CommandDriverSpec::try_from(watching(&["A=B"]))
            .unwrap_err()
            .contains("`watch_env`: \"A=B\" is not an environment variable name"));
        assert!(CommandDriverSpec::try_from(raw(vec![], None))
            .unwrap_err()
            .contains("empty"));
        assert!(
            CommandDriverSpec::try_from(raw(vec!["x"], Some("localhost")))
                .unwrap_err()
                .contains("proxy_listen")
        );
        assert!(CommandDriverSpec::try_from(raw(vec!["x"], Some("127.0.0.1:0"))).is_ok());
    }
}
