//! Environment variables on their way to the trainer's processes, as the matrix's baselines saw
//! them: every variable the scenario's `driver.env` sets and every one the launcher sets on the
//! way, with the values each kind of process was started with (`trainer_env.json`, which every
//! command-driver run records). A variable `driver.env` sets that some process did not get is
//! flagged: a launcher that exports its own value over it, a process manager or a server
//! launcher that starts a process with another environment. What the launcher sets is shown,
//! never flagged: it is the launcher's own choice. Variables the manifest declares as knobs
//! (`env.NAME`) are judged as knobs, with trials, and are left out here.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::report::doc::{marked, plain, Block, Inline, Row, Table};
use crate::run::driver::command::envwatch::{is_wrapper, TrainerEnv};

/// What a matrix saw of the environment on its way to the trainer's processes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Environment {
    /// The kind of the trainer's own process (the first that is not a shell or a wrapper).
    pub trainer: Option<String>,
    /// Every kind of process read (the server the adapter launches among them, where it
    /// started one).
    pub processes: Vec<String>,
    /// The scenario's `driver.env` variables first, then the launcher's.
    pub variables: Vec<EnvPassage>,
    /// Why the environment was not followed, where it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Environment {
    /// Why nothing was followed.
    pub(crate) fn unseen(why: &str) -> Self {
        Environment {
            note: Some(why.to_string()),
            ..Environment::default()
        }
    }

    /// The flagged variables.
    pub fn flagged(&self) -> impl Iterator<Item = &EnvPassage> {
        self.variables.iter().filter(|p| p.flagged)
    }
}

/// Who set a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvSource {
    /// The scenario's `driver.env`.
    DriverEnv,
    /// The trainer's launcher, on the way to the trainer's process.
    Launcher,
}

/// One variable's way to the trainer's processes.
#[derive(Debug, Clone, Serialize)]
pub struct EnvPassage {
    pub name: String,
    pub source: EnvSource,
    /// The value the trainer's processes should hold: the one `driver.env` asks for, or the
    /// launcher's (`None`: the launcher removed it). Secrets only as a digest.
    pub value: Option<String>,
    /// For a launcher's variable: the value the harness gave the launcher (`None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given: Option<String>,
    /// Whether the trainer's own process got `value`.
    pub reaches_trainer: bool,
    /// Per kind of process (the wrappers before the trainer left out), every value seen.
    pub processes: BTreeMap<String, BTreeSet<Option<String>>>,
    /// The kinds of process that got another value or none, in words (`http_server: none`).
    pub missed_by: Vec<String>,
    pub flagged: bool,
}

impl EnvPassage {
    /// What the row says, in words.
    pub fn describe(&self) -> String {
        let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".into());
        let what = match self.source {
            EnvSource::DriverEnv => {
                format!("`driver.env` sets {}={}", self.name, value(&self.value))
            }
            EnvSource::Launcher => match &self.given {
                Some(g) => format!(
                    "the launcher sets {}={} over the {g} it was given",
                    self.name,
                    value(&self.value)
                ),
                None => format!("the launcher sets {}={}", self.name, value(&self.value)),
            },
        };
        let reach = if self.missed_by.is_empty() {
            format!("every process got it ({} kinds)", self.processes.len())
        } else {
            let trainer = if self.reaches_trainer {
                "the trainer's process got it"
            } else {
                "the trainer's process did not get it"
            };
            format!("{trainer}; other values in {}", self.missed_by.join(", "))
        };
        format!("{what}: {reach}")
    }
}

/// What a matrix of `base` saw: its `driver.env` and its launcher's variables as `seen` (the
/// baselines' records) shows them, the manifest's environment knobs left to their rows; or why
/// nothing was followed.
pub(crate) fn for_matrix(
    base: &crate::scenario::Scenario,
    manifest: &crate::tools::propagate::knob_manifest::KnobManifest,
    seen: &[TrainerEnv],
) -> Environment {
    let crate::run::driver::DriverSpec::Command(c) = &base.driver else {
        return Environment::default();
    };
    if seen.is_empty() {
        return Environment::unseen(
            "no baseline run recorded its trainer's environment (trainer_env.json: Linux only), \
             so the variables of `driver.env` and the launcher were not followed",
        );
    }
    let knobs = manifest
        .knobs
        .iter()
        .filter_map(|k| {
            k.path
                .strip_prefix(crate::tools::propagate::knob_manifest::ENV_PREFIX)
        })
        .map(str::to_string)
        .collect();
    environment(&c.env, &knobs, seen)
}

/// The passages of one matrix: `asked` is the scenario's `driver.env`, `knobs` the variables
/// the manifest judges as knobs, `seen` the baselines' records (merged).
pub(crate) fn environment(
    asked: &BTreeMap<String, String>,
    knobs: &BTreeSet<String>,
    seen: &[TrainerEnv],
) -> Environment {
    let env = merge(seen);
    let processes: BTreeSet<&String> = env
        .variables
        .values()
        .flat_map(|v| v.processes.keys())
        .collect();
    Environment {
        trainer: env.trainer.clone(),
        processes: processes.into_iter().cloned().collect(),
        variables: passages(asked, knobs, &env),
        note: None,
    }
}

fn passages(
    asked: &BTreeMap<String, String>,
    knobs: &BTreeSet<String>,
    env: &TrainerEnv,
) -> Vec<EnvPassage> {
    let mut out = Vec::new();
    for (name, var) in &env.variables {
        if knobs.contains(name) {
            continue;
        }
        let (source, value, given) = if asked.contains_key(name) {
            (EnvSource::DriverEnv, var.asked.clone(), None)
        } else if let Some(set) = env.launcher.get(name) {
            (EnvSource::Launcher, set.got.clone(), set.given.clone())
        } else {
            continue;
        };
        let processes: BTreeMap<String, BTreeSet<Option<String>>> = var
            .processes
            .iter()
            // The shells and wrappers before the trainer hold what they were given, not what
            // the launcher set.
            .filter(|(label, _)| source == EnvSource::DriverEnv || !is_wrapper(label))
            .map(|(l, v)| (l.clone(), v.clone()))
            .collect();
        let want = BTreeSet::from([value.clone()]);
        let missed_by: Vec<String> = processes
            .iter()
            .filter(|(_, got)| **got != want)
            .map(|(label, got)| {
                let got: Vec<String> = got
                    .iter()
                    .map(|v| v.clone().unwrap_or_else(|| "none".into()))
                    .collect();
                format!("{label}: {}", got.join(" / "))
            })
            .collect();
        let reaches_trainer = env
            .trainer
            .as_ref()
            .and_then(|t| processes.get(t))
            .is_some_and(|got| *got == want);
        out.push(EnvPassage {
            name: name.clone(),
            source,
            value,
            given,
            reaches_trainer,
            flagged: source == EnvSource::DriverEnv && !missed_by.is_empty(),
            processes,
            missed_by,
        });
    }
    // The scenario's own variables first.
    out.sort_by_key(|p| (p.source != EnvSource::DriverEnv, p.name.clone()));
    out
}

/// The baselines' records as one: every value each kind of process got in any of them.
fn merge(seen: &[TrainerEnv]) -> TrainerEnv {
    let mut all = TrainerEnv::default();
    for env in seen {
        for (name, var) in &env.variables {
            let into = all.variables.entry(name.clone()).or_default();
            into.asked = into.asked.take().or_else(|| var.asked.clone());
            for (label, values) in &var.processes {
                into.processes
                    .entry(label.clone())
                    .or_default()
                    .extend(values.iter().cloned());
            }
        }
        for (name, set) in &env.launcher {
            all.launcher
                .entry(name.clone())
                .or_insert_with(|| set.clone());
        }
        all.trainer = all.trainer.take().or_else(|| env.trainer.clone());
    }
    all
}

/// The section of the propagation report, as blocks of its document (none when there is
/// nothing to show).
pub(crate) fn blocks(e: &Environment) -> Vec<Block> {
    if e.variables.is_empty() && e.note.is_none() {
        return Vec::new();
    }
    let mut out = vec![Block::Heading {
        level: 2,
        class: None,
        text: plain(TITLE),
    }];
    out.extend(e.note.iter().map(|n| Block::Paragraph(marked(n))));
    if e.variables.is_empty() {
        return out;
    }
    out.push(Block::Paragraph(marked(&read_line(e))));
    let rows = e
        .variables
        .iter()
        .map(|p| Row {
            class: Some(if p.flagged { "flagged" } else { "ok" }),
            anchor: None,
            cells: vec![
                vec![Inline::Code(p.name.clone())],
                marked(source_text(p.source)),
                if p.flagged {
                    vec![Inline::Strong("FLAGGED".into())]
                } else {
                    Vec::new()
                },
                plain(p.describe()),
            ],
        })
        .collect();
    out.push(Block::Table(Table {
        head: ["variable", "set by", "flagged", "what each process got"]
            .into_iter()
            .map(plain)
            .collect(),
        rows,
        ..Table::default()
    }));
    out
}

/// The section's title.
pub(crate) const TITLE: &str = "Environment variables on their way to the trainer";

/// The section in Markdown (empty when there is nothing to show).
#[cfg(test)]
fn markdown(e: &Environment) -> String {
    crate::report::doc::to_markdown(&crate::report::doc::Document {
        blocks: blocks(e),
        ..Default::default()
    })
}

/// Which processes were read, the trainer's first.
fn read_line(e: &Environment) -> String {
    let kinds: Vec<String> = e.processes.iter().map(|k| format!("`{k}`")).collect();
    format!(
        "Every process of the baselines' trainers was read ({} kinds; the trainer's own: {}): {}.",
        kinds.len(),
        e.trainer
            .as_deref()
            .map_or("not found".to_string(), |t| format!("`{t}`")),
        kinds.join(", ")
    )
}

fn source_text(s: EnvSource) -> &'static str {
    match s {
        EnvSource::DriverEnv => "`driver.env`",
        EnvSource::Launcher => "the launcher",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::driver::command::envwatch::{LauncherSet, WatchedVar};

    fn var(asked: Option<&str>, procs: &[(&str, &[Option<&str>])]) -> WatchedVar {
        WatchedVar {
            asked: asked.map(str::to_string),
            processes: procs
                .iter()
                .map(|(l, vs)| {
                    (
                        l.to_string(),
                        vs.iter().map(|v| v.map(str::to_string)).collect(),
                    )
                })
                .collect(),
        }
    }

    /// A `driver.env` value some process did not get is flagged, naming the process; one every
    /// process got is not; the launcher's own variables are shown, never flagged, without the
    /// shell before the trainer; manifest knobs are left to the knob rows.
    #[test]
    fn a_dropped_scenario_variable_is_flagged_and_the_launchers_are_shown() {
        let env = TrainerEnv {
            variables: BTreeMap::from([
                (
                    "KEPT".to_string(),
                    var(
                        Some("1"),
                        &[("main_ppo", &[Some("1")]), ("http_server", &[Some("1")])],
                    ),
                ),
                (
                    "TOKENIZERS_PARALLELISM".to_string(),
                    var(
                        Some("true"),
                        &[("bash", &[Some("true")]), ("main_ppo", &[Some("false")])],
                    ),
                ),
                (
                    "HF_HOME".to_string(),
                    var(
                        None,
                        &[
                            ("bash", &[None]),
                            ("main_ppo", &[Some("/r/hf")]),
                            ("http_server", &[None]),
                        ],
                    ),
                ),
                (
                    "CUDA_VISIBLE_DEVICES".to_string(),
                    var(None, &[("main_ppo", &[Some("3")])]),
                ),
            ]),
            trainer: Some("main_ppo".into()),
            launcher: BTreeMap::from([
                (
                    "TOKENIZERS_PARALLELISM".to_string(),
                    LauncherSet {
                        given: Some("true".into()),
                        got: Some("false".into()),
                    },
                ),
                (
                    "HF_HOME".to_string(),
                    LauncherSet {
                        given: None,
                        got: Some("/r/hf".into()),
                    },
                ),
            ]),
        };
        let asked = BTreeMap::from([
            ("KEPT".to_string(), "1".to_string()),
            ("TOKENIZERS_PARALLELISM".to_string(), "true".to_string()),
        ]);
        let knobs = BTreeSet::from(["CUDA_VISIBLE_DEVICES".to_string()]);
        let e = environment(&asked, &knobs, &[env]);
        assert_eq!(e.trainer.as_deref(), Some("main_ppo"));
        assert_eq!(e.processes, ["bash", "http_server", "main_ppo"]);
        let p = &e.variables;
        let names: Vec<(&str, EnvSource, bool)> = p
            .iter()
            .map(|p| (p.name.as_str(), p.source, p.flagged))
            .collect();
        assert_eq!(
            names,
            [
                ("KEPT", EnvSource::DriverEnv, false),
                ("TOKENIZERS_PARALLELISM", EnvSource::DriverEnv, true),
                ("HF_HOME", EnvSource::Launcher, false),
            ]
        );
        assert!(p[0].reaches_trainer && p[0].missed_by.is_empty());
        assert!(!p[1].reaches_trainer);
        assert_eq!(p[1].missed_by, ["main_ppo: false"]);
        assert!(
            p[1].describe().contains("did not get it"),
            "{}",
            p[1].describe()
        );
        // The launcher's shell is left out; the server it never reached is named.
        assert!(p[2].reaches_trainer);
        assert_eq!(p[2].missed_by, ["http_server: none"]);
        assert!(!p[2].processes.contains_key("bash"));
        let md = markdown(&e);
        assert!(
            md.contains("| `TOKENIZERS_PARALLELISM` | `driver.env` | **FLAGGED** |"),
            "{md}"
        );
    }

    /// Several baselines (one per condition) merge: a value any of them saw counts.
    #[test]
    fn baselines_merge() {
        let one = |v: &str| TrainerEnv {
            variables: BTreeMap::from([(
                "X".to_string(),
                var(Some("a"), &[("main_ppo", &[Some(v)])]),
            )]),
            trainer: Some("main_ppo".into()),
            launcher: BTreeMap::new(),
        };
        let asked = BTreeMap::from([("X".to_string(), "a".to_string())]);
        let e = environment(&asked, &BTreeSet::new(), &[one("a"), one("b")]);
        assert!(e.variables[0].flagged);
        assert_eq!(e.variables[0].missed_by, ["main_ppo: a / b"]);
        assert!(environment(&asked, &BTreeSet::new(), &[])
            .variables
            .is_empty());
    }
}
