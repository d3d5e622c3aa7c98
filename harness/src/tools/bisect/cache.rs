//! Each commit's trials, kept in `<cache>/<commit>-<key>.json`: the key digests what decides a
//! trial's outcome besides the commit (the scenario's files, the `--set` overrides, the mode
//! and what it judges), so a rerun of the same bisect, or of one whose range overlaps, runs
//! only what it has not run yet. A scenario commit's seeds are kept one by one: a rerun with
//! other error rates reuses them and adds seeds only where its test needs more. Trials that
//! could not run are not kept (the next bisect tries them again).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{BisectError, Trial};
use rlharness_arctic::fsx;

const FORMAT: &str = "rlharness-bisect-cache/1";

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    format: String,
    commit: String,
    key: String,
    trials: Vec<Trial>,
}

/// The cache of one bisect's key.
#[derive(Debug, Clone)]
pub(crate) struct Cache {
    pub(crate) dir: PathBuf,
    pub(crate) key: String,
}

impl Cache {
    /// The key of these parts (each digested in order, with its length).
    pub(crate) fn new(dir: &Path, parts: &[&[u8]]) -> Cache {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        let key = crate::model::util::hex(&h.finalize())[..16].to_string();
        Cache {
            dir: dir.to_path_buf(),
            key,
        }
    }

    /// The cache of a bisect: keyed by the scenario's files (`sources`, unreadable ones as
    /// empty), its `--set` overrides, the source setting and what the judge judges.
    pub(crate) fn of_bisect(
        dir: &Path,
        sources: &[PathBuf],
        set: &[String],
        var: &str,
        judge_key: &str,
    ) -> Cache {
        let mut parts: Vec<Vec<u8>> = sources
            .iter()
            .map(|p| std::fs::read(p).unwrap_or_default())
            .collect();
        parts.push(set.join("\n").into_bytes());
        parts.push(var.as_bytes().to_vec());
        parts.push(judge_key.as_bytes().to_vec());
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        Cache::new(dir, &refs)
    }

    fn path(&self, sha: &str) -> PathBuf {
        self.dir.join(format!("{sha}-{}.json", self.key))
    }

    /// The trials kept for `sha` (none when absent or unreadable).
    pub(crate) fn load(&self, sha: &str) -> Vec<Trial> {
        std::fs::read_to_string(self.path(sha))
            .ok()
            .and_then(|t| serde_json::from_str::<Entry>(&t).ok())
            .filter(|e| e.format == FORMAT && e.commit == sha && e.key == self.key)
            .map(|e| e.trials)
            .unwrap_or_default()
    }

    /// Keep `trials` of `sha` (those that ran), replacing what was kept.
    pub(crate) fn store(&self, sha: &str, trials: &[Trial]) -> Result<(), BisectError> {
        let entry = Entry {
            format: FORMAT.into(),
            commit: sha.into(),
            key: self.key.clone(),
            trials: trials.iter().filter(|t| !t.failed).cloned().collect(),
        };
        fsx::create_dir_all(&self.dir)?;
        let mut text = serde_json::to_string_pretty(&entry)
            .map_err(|e| BisectError::Git(format!("the cache entry: {e}")))?;
        text.push('\n');
        fsx::write_atomic(&self.path(sha), text.as_bytes())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_come_back_under_their_key_only() {
        let tmp = tempfile::tempdir().unwrap();
        let a = Cache::new(tmp.path(), &[b"scenario", b"mode"]);
        let b = Cache::new(tmp.path(), &[b"scenario", b"other mode"]);
        let t = Trial {
            seed: Some(3),
            value: Some(0.5),
            runs: 1,
            note: "pass".into(),
            failed: false,
        };
        let failed = Trial {
            failed: true,
            ..t.clone()
        };
        a.store("abc", &[t.clone(), failed]).unwrap();
        assert_eq!(a.load("abc"), [t]);
        assert!(b.load("abc").is_empty());
        assert!(a.load("abd").is_empty());
    }
}
