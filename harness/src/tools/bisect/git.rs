//! The repository side of a bisect: revisions, the commits between them, and worktrees of the
//! bisect's own. The user's checkout, index and branches are never touched: each candidate is
//! checked out detached into a folder under the bisect's output (`git worktree add --detach`),
//! and every worktree is removed when the [`Worktrees`] guard is dropped (at the end, on an
//! error, or when Ctrl-C ends the command's future).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{BisectError, Commit};

/// `git -C repo ARGS`: its trimmed stdout, or the error with git's own words.
fn git(repo: &Path, args: &[&str]) -> Result<String, BisectError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .map_err(|e| BisectError::Git(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(BisectError::Git(format!(
            "git {} in {}: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The commit `rev` names, with its subject.
pub(crate) fn resolve(repo: &Path, rev: &str) -> Result<Commit, BisectError> {
    if git(repo, &["rev-parse", "--git-dir"]).is_err() {
        return Err(BisectError::Input(format!(
            "--repo {}: not a git repository",
            repo.display()
        )));
    }
    let spec = format!("{rev}^{{commit}}");
    let sha = git(repo, &["rev-parse", "--verify", "--quiet", &spec]).map_err(|_| {
        BisectError::Input(format!("`{rev}` names no commit of {}", repo.display()))
    })?;
    let subject = git(repo, &["log", "-1", "--format=%s", &sha])?;
    Ok(Commit { sha, subject })
}

/// The commits after `good` up to and including `bad`, oldest first, along the first-parent
/// line of `bad` that descends from `good` (`git rev-list --ancestry-path --first-parent`).
pub(crate) fn range(repo: &Path, good: &Commit, bad: &Commit) -> Result<Vec<Commit>, BisectError> {
    let ancestor = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["merge-base", "--is-ancestor", &good.sha, &bad.sha])
        .status()
        .map_err(|e| BisectError::Git(format!("cannot run git: {e}")))?;
    if !ancestor.success() || good.sha == bad.sha {
        return Err(BisectError::Input(format!(
            "the good commit {} is not an ancestor of the bad commit {}",
            good.short(),
            bad.short()
        )));
    }
    let span = format!("{}..{}", good.sha, bad.sha);
    let text = git(
        repo,
        &[
            "log",
            "--reverse",
            "--first-parent",
            "--ancestry-path",
            "--format=%H%x09%s",
            &span,
        ],
    )?;
    let commits: Vec<Commit> = text
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(sha, subject)| Commit {
            sha: sha.to_string(),
            subject: subject.to_string(),
        })
        .collect();
    if commits.last().map(|c| c.sha.as_str()) != Some(bad.sha.as_str()) {
        return Err(BisectError::Input(format!(
            "no first-parent line leads from {} to {}",
            good.short(),
            bad.short()
        )));
    }
    Ok(commits)
}

/// The bisect's worktrees of one repository, removed on drop.
pub(crate) struct Worktrees {
    repo: PathBuf,
    root: PathBuf,
    made: Vec<PathBuf>,
}

impl Worktrees {
    /// Worktrees go under `root` (created). Stale ones a killed bisect left are pruned first.
    pub(crate) fn new(repo: &Path, root: &Path) -> Result<Worktrees, BisectError> {
        rlharness_arctic::fsx::create_dir_all(root)?;
        let _ = git(repo, &["worktree", "prune"]);
        Ok(Worktrees {
            repo: repo.to_path_buf(),
            root: std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf()),
            made: Vec::new(),
        })
    }

    /// The commit checked out, detached, in a worktree of its own: its folder (absolute).
    pub(crate) fn checkout(&mut self, commit: &Commit) -> Result<PathBuf, BisectError> {
        let dir = self.root.join(commit.short());
        if self.made.contains(&dir) {
            return Ok(dir);
        }
        if dir.exists() {
            let _ = git(
                &self.repo,
                &["worktree", "remove", "--force", &dir.to_string_lossy()],
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
        git(
            &self.repo,
            &[
                "worktree",
                "add",
                "--detach",
                "--quiet",
                &dir.to_string_lossy(),
                &commit.sha,
            ],
        )?;
        self.made.push(dir.clone());
        Ok(dir)
    }

    /// Remove one worktree now (its runs are done).
    pub(crate) fn remove(&mut self, dir: &Path) {
        let _ = git(
            &self.repo,
            &["worktree", "remove", "--force", &dir.to_string_lossy()],
        );
        let _ = std::fs::remove_dir_all(dir);
        self.made.retain(|d| d != dir);
    }
}

impl Drop for Worktrees {
    fn drop(&mut self) {
        for dir in std::mem::take(&mut self.made) {
            let _ = git(
                &self.repo,
                &["worktree", "remove", "--force", &dir.to_string_lossy()],
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
        let _ = git(&self.repo, &["worktree", "prune"]);
        // The folder of worktrees goes when empty.
        let _ = std::fs::remove_dir(&self.root);
    }
}
