//! Which environment the trainer's processes really got: for each watched variable, the values
//! each process of the run (every process carrying the run's token, [`strays::TOKEN_VAR`]) was
//! started with, sampled while the trainer runs and kept in `trainer_env.json`. A variable set
//! in `driver.env` can still be dropped on the way: a launcher script that exports its own
//! value, a process manager (Ray) that starts workers with another environment, a server
//! launcher that copies the environment and overwrites one key. Linux only (`/proc`); what a
//! process sets in its own environment after it started is not seen (`/proc/<pid>/environ`
//! holds the environment it was started with).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::driver::strays;

/// The file in the run directory.
pub(crate) const FILE: &str = "trainer_env.json";

/// `trainer_env.json`: per variable, the value `driver.env` asked for (absent: the run did not
/// set it) and, per kind of process, every value seen (`null`: the process had none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrainerEnv {
    pub(crate) variables: BTreeMap<String, WatchedVar>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct WatchedVar {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asked: Option<String>,
    /// Process label (`ray::TaskRunner`, `main_ppo`, `http_server`) to the values seen.
    pub(crate) processes: BTreeMap<String, BTreeSet<Option<String>>>,
}

impl TrainerEnv {
    /// Read a run's file; `None` when the run watched nothing (or the file is unreadable).
    pub(crate) fn load(run_dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(run_dir.join(FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Samples the run's processes for the watched variables.
pub(crate) struct EnvWatch {
    token: String,
    path: PathBuf,
    names: Vec<String>,
    asked: BTreeMap<String, String>,
    /// Per process: its environment's size when read, its label, each watched variable's value.
    procs: BTreeMap<i32, Reading>,
    dirty: bool,
}

/// One read of a process's starting environment.
struct Reading {
    entries: usize,
    label: String,
    values: Vec<Option<String>>,
}

impl EnvWatch {
    /// `None` when there is nothing to watch or no token to find the processes by.
    pub(crate) fn new(
        names: &[String],
        asked: &BTreeMap<String, String>,
        token: &str,
        run_dir: &Path,
    ) -> Option<Self> {
        if names.is_empty() || token.is_empty() {
            return None;
        }
        Some(Self {
            token: token.to_string(),
            path: run_dir.join(FILE),
            names: names.to_vec(),
            asked: asked.clone(),
            procs: BTreeMap::new(),
            dirty: true,
        })
    }

    /// Read the run's processes; write the file when something changed. A process is read
    /// again while it runs: a fork that has not exec'd yet shows its parent's environment and
    /// command line. A later read replaces an earlier one unless it has fewer entries: a
    /// process that retitles itself (`setproctitle`, as Ray's processes do) may write its new
    /// title over the start of its environment's memory, which `/proc` then shows cut short.
    pub(crate) fn sample(&mut self) {
        let needle = format!("{}={}", strays::TOKEN_VAR, self.token);
        for (pid, environ) in strays::environs() {
            if !environ.iter().any(|kv| kv == &needle) {
                continue;
            }
            if self
                .procs
                .get(&pid)
                .is_some_and(|r| r.entries > environ.len())
            {
                continue;
            }
            let values = self
                .names
                .iter()
                .map(|name| {
                    let prefix = format!("{name}=");
                    environ
                        .iter()
                        .find_map(|kv| kv.strip_prefix(&prefix).map(str::to_string))
                })
                .collect();
            let reading = Reading {
                entries: environ.len(),
                label: label(&strays::argv(pid)),
                values,
            };
            let old = self.procs.insert(pid, reading);
            let new = &self.procs[&pid];
            if old.is_none_or(|o| o.label != new.label || o.values != new.values) {
                self.dirty = true;
            }
        }
        self.write();
    }

    /// What the file holds: per variable, per kind of process, every value seen.
    pub(crate) fn trainer_env(&self) -> TrainerEnv {
        let variables = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut processes: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
                for r in self.procs.values() {
                    processes
                        .entry(r.label.clone())
                        .or_default()
                        .insert(r.values[i].clone());
                }
                let var = WatchedVar {
                    asked: self.asked.get(name).cloned(),
                    processes,
                };
                (name.clone(), var)
            })
            .collect();
        TrainerEnv { variables }
    }

    /// Write the file (atomically: a run that dies keeps the last whole one).
    pub(crate) fn write(&mut self) {
        if !self.dirty {
            return;
        }
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(&self.trainer_env()).unwrap_or_default();
        if std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .is_ok()
        {
            self.dirty = false;
        }
    }
}

/// A short, stable name for a kind of process: Ray's actor title (`ray::TaskRunner`), the
/// module of `python -m a.b.c` (`c`), a script's file name, else the program's file name.
pub(crate) fn label(argv: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let Some(first) = argv.first() else {
        return "?".into();
    };
    if let Some(title) = first.strip_prefix("ray::") {
        // `ray::Class`, `ray::Class.method` while it runs one, `ray::name_1a2b:Class.__init__`
        // for a named actor: the class is the kind of process.
        let title = title.split_whitespace().next().unwrap_or(title);
        let title = title.rsplit(':').next().unwrap_or(title);
        return format!("ray::{}", title.split('.').next().unwrap_or(title));
    }
    let prog = base(first);
    if prog.starts_with("python") {
        if argv.get(1).is_some_and(|a| a == "-c") {
            return format!("{prog} -c");
        }
        if let Some(i) = argv.iter().position(|a| a == "-m") {
            if let Some(m) = argv.get(i + 1) {
                return m.rsplit('.').next().unwrap_or(m).to_string();
            }
        }
        if let Some(script) = argv.iter().skip(1).find(|a| !a.starts_with('-')) {
            return base(script);
        }
    }
    prog
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn processes_get_short_stable_labels() {
        assert_eq!(label(&v(&["ray::TaskRunner"])), "ray::TaskRunner");
        assert_eq!(label(&v(&["ray::IDLE worker"])), "ray::IDLE");
        assert_eq!(
            label(&v(&["ray::WorkerDict.compute_log_prob"])),
            "ray::WorkerDict"
        );
        assert_eq!(
            label(&v(&[
                "ray::agent_loop_worker_0_57ce:AgentLoopWorker.__init__"
            ])),
            "ray::AgentLoopWorker"
        );
        assert_eq!(
            label(&v(&[
                "/venv/bin/python",
                "-m",
                "verl.trainer.main_ppo",
                "a=b"
            ])),
            "main_ppo"
        );
        assert_eq!(
            label(&v(&["python3", "-u", "/x/default_worker.py", "--a"])),
            "default_worker.py"
        );
        assert_eq!(label(&v(&["/usr/bin/raylet", "--x"])), "raylet");
        assert_eq!(
            label(&v(&["/usr/bin/python3", "-c", "import x"])),
            "python3 -c"
        );
        assert_eq!(label(&[]), "?");
    }

    /// A child started with the token and a variable is read; a variable it lacks is `null`;
    /// the file is written as it goes.
    #[test]
    fn the_runs_processes_are_read_and_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let token = strays::new_token("envwatch-test");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(strays::TOKEN_VAR, &token)
            .env("RLH_WATCHED", "yes")
            .env_remove("RLH_MISSING")
            .spawn()
            .unwrap();
        let names = v(&["RLH_WATCHED", "RLH_MISSING"]);
        let asked = BTreeMap::from([("RLH_WATCHED".to_string(), "yes".to_string())]);
        let mut w = EnvWatch::new(&names, &asked, &token, dir.path()).unwrap();
        // Until the child has exec'd, /proc shows the fork's environment: wait for `sleep`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            w.sample();
            let env = TrainerEnv::load(dir.path()).unwrap();
            if env.variables["RLH_WATCHED"].processes.contains_key("sleep") {
                assert_eq!(env.variables["RLH_WATCHED"].asked.as_deref(), Some("yes"));
                assert_eq!(
                    env.variables["RLH_WATCHED"].processes["sleep"],
                    BTreeSet::from([Some("yes".to_string())])
                );
                assert_eq!(
                    env.variables["RLH_MISSING"].processes["sleep"],
                    BTreeSet::from([None])
                );
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{env:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(EnvWatch::new(&[], &asked, &token, dir.path()).is_none());
    }
}
