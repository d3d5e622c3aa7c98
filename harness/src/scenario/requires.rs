//! The `requires` block: what a scenario needs from the machine, and which of it is unmet here.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::detect_gpus;

/// What a scenario needs from the machine; a scenario whose needs are unmet is skipped with
/// the reasons from [`Requires::unmet`], never failed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requires {
    /// Cargo features of this build (`torch`).
    #[serde(default)]
    pub features: Vec<String>,
    /// Number of GPUs visible to `nvidia-smi`.
    #[serde(default)]
    pub gpus: u32,
    /// A substring of a GPU's name (case-insensitive), e.g. `H200`.
    #[serde(default)]
    pub gpu_name: Option<String>,
    /// Executables that must be on PATH.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Python modules that `python3` must find.
    #[serde(default)]
    pub python_modules: Vec<String>,
    /// Folders, relative to the scenario file, where the trainer finds its Python modules
    /// besides python3's own (a project-local `.pydeps`); `python_modules` is asked with them
    /// on `PYTHONPATH`.
    #[serde(default)]
    pub python_path: Vec<std::path::PathBuf>,
    /// Environment variables that must be set, not empty (the checkouts a command trainer runs:
    /// `VERL_SRC`).
    #[serde(default)]
    pub env: Vec<String>,
}

/// Cargo features this build was compiled with, by name.
fn feature_enabled(name: &str) -> bool {
    // The only optional feature; a name this build does not know is never enabled.
    name == "torch" && cfg!(feature = "torch")
}

/// Whether an executable is on PATH (or, for a name with a `/`, exists as given).
pub fn command_available(name: &str) -> bool {
    if name.contains('/') {
        return Path::new(name).is_file();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
        .unwrap_or(false)
}

/// Which Python modules `python3` finds, asked once per process (the scenarios of one `list`
/// or `run` ask for the same ones) and in one interpreter start for all of `names` not asked
/// yet: starting Python (through a version manager's shim) costs more than the rest of `list`.
pub(super) fn python_modules_available(
    names: &[String],
    python_path: &[std::path::PathBuf],
) -> Vec<Result<bool, String>> {
    static KNOWN: std::sync::Mutex<BTreeMap<String, Result<bool, String>>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut known = crate::model::util::lock(&KNOWN);
    // Asked with `python_path` first on PYTHONPATH: the answers are kept by both.
    let extra = std::env::join_paths(
        python_path
            .iter()
            .cloned()
            .chain(std::env::var_os("PYTHONPATH").map(std::path::PathBuf::from)),
    )
    .unwrap_or_default();
    let key = |m: &String| format!("{}\0{m}", extra.to_string_lossy());
    let mut ask: Vec<&String> = names
        .iter()
        .filter(|n| !known.contains_key(&key(n)))
        .collect();
    ask.dedup();
    if !ask.is_empty() {
        // One line per module, `1` when found; a module whose parent package is missing
        // (find_spec raises) is not found.
        let script = "import importlib.util,sys\n\
                      for m in sys.argv[1:]:\n\
                      \x20 try: ok = importlib.util.find_spec(m) is not None\n\
                      \x20 except Exception: ok = False\n\
                      \x20 print(int(ok))";
        let out = std::process::Command::new("python3")
            .env("PYTHONPATH", &extra)
            .arg("-c")
            .arg(script)
            .args(&ask)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output();
        let answers: Vec<Result<bool, String>> = match out {
            Err(e) => {
                let why = match e.kind() {
                    std::io::ErrorKind::NotFound => "python3 not found".to_string(),
                    _ => format!("python3 failed to start: {e}"),
                };
                vec![Err(why); ask.len()]
            }
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout);
                let lines: Vec<&str> = text.lines().collect();
                (0..ask.len())
                    .map(|i| Ok(o.status.success() && lines.get(i) == Some(&"1")))
                    .collect()
            }
        };
        for (name, answer) in ask.into_iter().zip(answers) {
            known.insert(key(name), answer);
        }
    }
    names
        .iter()
        .map(|n| known.get(&key(n)).cloned().unwrap_or(Ok(false)))
        .collect()
}

impl Requires {
    /// `python_path` made relative to the folder of the scenario file (`base`).
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        for p in &mut self.python_path {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// Why this machine cannot run the scenario, in words; empty when it can.
    pub fn unmet(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        for f in &self.features {
            if !feature_enabled(f) {
                reasons.push(format!("needs cargo feature `{f}` (this build lacks it)"));
            }
        }
        if self.gpus > 0 || self.gpu_name.is_some() {
            match detect_gpus() {
                Err(why) => reasons.push(format!(
                    "needs {} GPU{}, found 0 ({why})",
                    self.gpus.max(1),
                    if self.gpus.max(1) == 1 { "" } else { "s" }
                )),
                Ok(names) => {
                    if (names.len() as u64) < u64::from(self.gpus) {
                        reasons.push(format!(
                            "needs {} GPU{}, found {}",
                            self.gpus,
                            if self.gpus == 1 { "" } else { "s" },
                            names.len()
                        ));
                    }
                    if let Some(want) = &self.gpu_name {
                        let w = want.to_lowercase();
                        if !names.iter().any(|n| n.to_lowercase().contains(&w)) {
                            let found = if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            };
                            reasons
                                .push(format!("needs a GPU named like `{want}`, found: {found}"));
                        }
                    }
                }
            }
        }
        for c in &self.commands {
            if !command_available(c) {
                reasons.push(format!("needs command `{c}` on PATH"));
            }
        }
        for v in &self.env {
            if std::env::var_os(v).is_none_or(|x| x.is_empty()) {
                reasons.push(format!("needs environment variable `{v}` set"));
            }
        }
        // Python is asked last and only when nothing else is missing: its start costs more
        // than the rest of `list` (130 ms through a version manager's shim), and its answer
        // cannot make runnable a scenario that needs a GPU this machine lacks.
        if !reasons.is_empty() {
            return reasons;
        }
        let found = python_modules_available(&self.python_modules, &self.python_path);
        for (m, found) in self.python_modules.iter().zip(found) {
            match found {
                Ok(true) => {}
                Ok(false) => reasons.push(format!("needs python module `{m}`")),
                Err(why) => reasons.push(format!("needs python module `{m}` ({why})")),
            }
        }
        reasons
    }

    /// A one-line summary for `list` ("1 GPU (H200), feature torch, python verl"); `-` if none.
    pub(crate) fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.gpus > 0 || self.gpu_name.is_some() {
            let n = self.gpus.max(1);
            let mut s = format!("{n} GPU{}", if n == 1 { "" } else { "s" });
            if let Some(name) = &self.gpu_name {
                s.push_str(&format!(" ({name})"));
            }
            parts.push(s);
        }
        parts.extend(self.features.iter().map(|f| format!("feature {f}")));
        parts.extend(self.commands.iter().map(|c| format!("command {c}")));
        parts.extend(self.python_modules.iter().map(|m| format!("python {m}")));
        parts.extend(self.env.iter().map(|v| format!("env {v}")));
        if parts.is_empty() {
            "-".to_string()
        } else {
            parts.join(", ")
        }
    }
}
