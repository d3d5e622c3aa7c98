//! Which environment the trainer's processes really got: for each watched variable, the values
//! each process of the run (every process carrying the run's token, [`strays::TOKEN_VAR`]) was
//! started with, sampled while the trainer runs and kept in `trainer_env.json`. A variable set
//! in `driver.env` can still be dropped on the way: a launcher script that exports its own
//! value, a process manager (Ray) that starts workers with another environment, a server
//! launcher that copies the environment and overwrites one key. The file also names what the
//! launcher itself set: the variables in which the trainer's own process (the first that is
//! not a shell or a wrapper) differs from the environment the harness gave the command. Linux
//! only (`/proc`); what a process sets in its own environment after it started is not seen
//! (`/proc/<pid>/environ` holds the environment it was started with).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::run::driver::strays;

/// The file in the run directory.
pub(crate) const FILE: &str = "trainer_env.json";

/// Programs that start the trainer rather than being it: the launcher's shell, `env`, the
/// harness's own namespace wrapper (`unshare`, `rlharness netns-exec`).
const WRAPPERS: &[&str] = &[
    "bash",
    "sh",
    "dash",
    "zsh",
    "env",
    "unshare",
    "nice",
    "setsid",
    "timeout",
    "stdbuf",
    "nohup",
    "tini",
    "rlharness",
];

/// Whether a kind of process starts the trainer rather than being it.
pub(crate) fn is_wrapper(label: &str) -> bool {
    WRAPPERS.contains(&label)
}

/// Variables a shell sets for itself: never the launcher's choice.
const SHELL_OWN: &[&str] = &["_", "SHLVL", "PWD", "OLDPWD"];

/// `trainer_env.json`: per variable, the value `driver.env` asked for (absent: the run did not
/// set it) and, per kind of process, every value seen (`null`: the process had none); the
/// trainer's own process and what the launcher set on the way to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrainerEnv {
    pub(crate) variables: BTreeMap<String, WatchedVar>,
    /// The label of the trainer's own process (absent: none was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) trainer: Option<String>,
    /// Each variable whose value in the trainer's own process differs from the one the harness
    /// gave the command: set, changed or removed by the launcher.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) launcher: BTreeMap<String, LauncherSet>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct WatchedVar {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asked: Option<String>,
    /// Process label (`ray::TaskRunner`, `main_ppo`, `http_server`) to the values seen.
    pub(crate) processes: BTreeMap<String, BTreeSet<Option<String>>>,
}

/// A variable the launcher set: the harness's value (`None`: it gave none) and the trainer's
/// (`None`: the launcher removed it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LauncherSet {
    pub(crate) given: Option<String>,
    pub(crate) got: Option<String>,
}

impl TrainerEnv {
    /// Read a run's file; `None` when the run watched nothing (or the file is unreadable).
    pub(crate) fn load(run_dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(run_dir.join(FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Whether a variable's value must not be written down (a token, a key, a password).
pub(crate) fn is_secret(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "CREDENTIALS",
        "PAT",
        "KEY",
        "APIKEY",
        "PRIVATE",
    ];
    let n = name.to_ascii_uppercase();
    n.split('_').any(|w| WORDS.contains(&w))
}

/// A value as the file keeps it: a secret's only as a digest, which still tells two values
/// apart.
pub(crate) fn shown(name: &str, value: &str) -> String {
    if !is_secret(name) {
        return value.to_string();
    }
    let digest = Sha256::digest(value.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("<hidden, sha256 {hex}>")
}

/// Samples the run's processes for the watched variables.
pub(crate) struct EnvWatch {
    token: String,
    path: PathBuf,
    names: Vec<String>,
    asked: BTreeMap<String, String>,
    /// The environment the harness gave the command.
    given: BTreeMap<String, String>,
    /// Per process: its parent, label and starting environment.
    procs: BTreeMap<i32, Reading>,
    dirty: bool,
}

/// One read of a process's starting environment.
#[derive(PartialEq)]
struct Reading {
    ppid: Option<i32>,
    label: String,
    environ: BTreeMap<String, String>,
}

impl EnvWatch {
    /// `None` when there is no token to find the processes by. `given` is the environment the
    /// command was started with, what the launcher's own settings are told apart from.
    pub(crate) fn new(
        names: &[String],
        asked: &BTreeMap<String, String>,
        given: BTreeMap<String, String>,
        token: &str,
        run_dir: &Path,
    ) -> Option<Self> {
        if token.is_empty() {
            return None;
        }
        Some(Self {
            token: token.to_string(),
            path: run_dir.join(FILE),
            names: names.to_vec(),
            asked: asked.clone(),
            given,
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
            // A command line read empty (a process between fork and exec, or retitling
            // itself) names nothing: the label read before stands.
            let mut label = label(&strays::argv(pid));
            // The environment is read again after the command line: a process that exec'd
            // between the two reads would pair its old environment with its new name (a
            // launcher's settings read as none), so it waits for the next sample.
            if strays::environ(pid).as_ref() != Some(&environ) {
                continue;
            }
            if let Some(r) = self.procs.get_mut(&pid) {
                if label == UNREADABLE {
                    label = r.label.clone();
                }
                if r.environ.len() > environ.len() {
                    // The environment read before was whole; the name may be new.
                    if r.label != label {
                        r.label = label;
                        self.dirty = true;
                    }
                    continue;
                }
            }
            let reading = Reading {
                ppid: strays::ppid(pid),
                label,
                environ: environ
                    .iter()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            if self.procs.get(&pid) != Some(&reading) {
                self.procs.insert(pid, reading);
                self.dirty = true;
            }
        }
        self.write();
    }

    /// The trainer's own process: of the processes that are not a shell or a wrapper, the one
    /// fewest steps below the command (the lowest pid among equals).
    fn trainer_pid(&self) -> Option<i32> {
        let depth = |mut pid: i32| {
            let mut d = 0;
            while let Some(p) = self.procs.get(&pid).and_then(|r| r.ppid) {
                if !self.procs.contains_key(&p) || d > self.procs.len() {
                    break;
                }
                pid = p;
                d += 1;
            }
            d
        };
        self.procs
            .iter()
            .filter(|(_, r)| !is_wrapper(&r.label) && r.label != UNREADABLE)
            .map(|(&pid, _)| (depth(pid), pid))
            .min()
            .map(|(_, pid)| pid)
    }

    /// What the file holds: per variable (the watched ones and the launcher's), per kind of
    /// process, every value seen; the trainer's process and the launcher's settings.
    pub(crate) fn trainer_env(&self) -> TrainerEnv {
        let trainer = self.trainer_pid().map(|pid| &self.procs[&pid]);
        let mut launcher = BTreeMap::new();
        if let Some(t) = trainer {
            let names: BTreeSet<&String> = self.given.keys().chain(t.environ.keys()).collect();
            for name in names {
                let (given, got) = (self.given.get(name), t.environ.get(name));
                if given != got && !SHELL_OWN.contains(&name.as_str()) {
                    let set = LauncherSet {
                        given: given.map(|v| shown(name, v)),
                        got: got.map(|v| shown(name, v)),
                    };
                    launcher.insert(name.clone(), set);
                }
            }
        }
        let names: BTreeSet<&String> = self.names.iter().chain(launcher.keys()).collect();
        let variables = names
            .into_iter()
            .map(|name| {
                let mut processes: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
                for r in self.procs.values() {
                    processes
                        .entry(r.label.clone())
                        .or_default()
                        .insert(r.environ.get(name).map(|v| shown(name, v)));
                }
                let var = WatchedVar {
                    asked: self.asked.get(name).map(|v| shown(name, v)),
                    processes,
                };
                (name.clone(), var)
            })
            .collect();
        TrainerEnv {
            variables,
            trainer: trainer.map(|t| t.label.clone()),
            launcher,
        }
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

/// The label of a process whose command line reads empty.
const UNREADABLE: &str = "?";

/// A short, stable name for a kind of process: Ray's actor title (`ray::TaskRunner`), the
/// module of `python -m a.b.c` (`c`), a script's file name, else the program's file name.
pub(crate) fn label(argv: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let Some(first) = argv.first() else {
        return UNREADABLE.into();
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
        let mut w = EnvWatch::new(&names, &asked, BTreeMap::new(), &token, dir.path()).unwrap();
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
        assert!(EnvWatch::new(&names, &asked, BTreeMap::new(), "", dir.path()).is_none());
    }

    /// What the launcher sets on the way is told apart from what the harness gave: the
    /// trainer's process is the first that is not a shell, each variable it differs in is the
    /// launcher's, and a secret's value is kept only as a digest.
    #[test]
    fn what_the_launcher_sets_is_told_apart_from_what_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let token = strays::new_token("envwatch-launcher-test");
        let given: BTreeMap<String, String> = [
            ("PATH", std::env::var("PATH").unwrap_or_default().as_str()),
            ("RLH_KEPT", "k"),
            ("RLH_OVER", "user"),
            ("RLH_GONE", "x"),
            (strays::TOKEN_VAR, token.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let launcher = "export RLH_OVER=launcher RLH_NEW=1 MY_API_KEY=s3cret; unset RLH_GONE; \
                        exec sleep 30";
        let mut child = std::process::Command::new("sh")
            .args(["-c", launcher])
            .env_clear()
            .envs(&given)
            .spawn()
            .unwrap();
        let names = v(&["RLH_KEPT"]);
        let mut w = EnvWatch::new(&names, &BTreeMap::new(), given, &token, dir.path()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let env = loop {
            w.sample();
            let env = TrainerEnv::load(dir.path()).unwrap();
            if env.trainer.as_deref() == Some("sleep") {
                break env;
            }
            assert!(std::time::Instant::now() < deadline, "{env:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        child.kill().unwrap();
        child.wait().unwrap();
        let set = |given: Option<&str>, got: Option<&str>| LauncherSet {
            given: given.map(str::to_string),
            got: got.map(str::to_string),
        };
        for (name, secret) in [
            ("RAY_AUTH_TOKEN", true),
            ("CORTEX_PAT", true),
            ("AWS_SECRET_ACCESS_KEY", true),
            ("TOKENIZERS_PARALLELISM", false),
            ("KEYBOARD", false),
        ] {
            assert_eq!(is_secret(name), secret, "{name}");
        }
        let hidden = shown("MY_API_KEY", "s3cret");
        assert!(hidden.starts_with("<hidden, sha256 "), "{hidden}");
        assert_eq!(
            env.launcher,
            BTreeMap::from([
                ("MY_API_KEY".to_string(), set(None, Some(&hidden))),
                ("RLH_GONE".to_string(), set(Some("x"), None)),
                ("RLH_NEW".to_string(), set(None, Some("1"))),
                ("RLH_OVER".to_string(), set(Some("user"), Some("launcher"))),
            ])
        );
        // The launcher's variables are watched in every process, beside the named ones.
        assert_eq!(
            env.variables["RLH_OVER"].processes["sleep"],
            BTreeSet::from([Some("launcher".to_string())])
        );
        assert_eq!(
            env.variables["RLH_KEPT"].processes["sleep"],
            BTreeSet::from([Some("k".to_string())])
        );
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
    }

    /// A process whose command line read empty is never the trainer, even nearest the command.
    #[test]
    fn an_unreadable_process_is_never_the_trainer() {
        let mut w = EnvWatch::new(
            &[],
            &BTreeMap::new(),
            BTreeMap::new(),
            "t",
            Path::new("/nonexistent"),
        )
        .unwrap();
        let reading = |ppid, label: &str| Reading {
            ppid: Some(ppid),
            label: label.into(),
            environ: BTreeMap::new(),
        };
        w.procs.insert(10, reading(1, UNREADABLE));
        w.procs.insert(11, reading(10, "main_ppo"));
        assert_eq!(w.trainer_env().trainer.as_deref(), Some("main_ppo"));
    }
}
