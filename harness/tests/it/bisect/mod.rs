//! `rlharness bisect`: a throwaway git repository of a trainer's sources, one commit of which
//! plants a regression, and the bisect that finds it.
//!
//! - here: the convergence case, a fast stand-in trainer
//!   (`harness/tests/fixtures/bisect/standin/trainer.py`) whose planted commit lowers its
//!   learning rate, judged by the sequential test against a calibration made in the test;
//! - `real_verl.rs`: the knob case, the real Arctic adapter with the seed's logits bug planted,
//!   judged by `propagate` (ignored in a plain `cargo test`; `ci/verl-tests.sh` runs it, its
//!   path matching the `real_verl::` filter).

mod real_verl;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use crate::common::{repo, says, text};

/// `git ARGS` in `dir`, with an identity of its own; must succeed; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=bisect test",
            "-c",
            "user.email=bisect@example.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A throwaway repository in `dir` of a copy of `tree`: commit 0 is the tree as it is, then
/// commits 1 to `n`, each a harmless line in `CHANGELOG.bisect`, except commit `planted`,
/// where `plant` changes the tree (its subject `subject`). The commits' hashes, 0 to `n`.
pub(super) fn throwaway_repo(
    dir: &Path,
    tree: &Path,
    n: usize,
    planted: usize,
    subject: &str,
    plant: impl Fn(&Path),
) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let cp = Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", tree.display()))
        .arg(dir)
        .status()
        .unwrap();
    assert!(cp.success());
    git(dir, &["init", "--quiet"]);
    git(dir, &["add", "--all", "--force", "."]);
    git(
        dir,
        &["commit", "--quiet", "-m", "the trainer as extracted"],
    );
    let mut commits = vec![git(dir, &["rev-parse", "HEAD"])];
    for i in 1..=n {
        let message = if i == planted {
            plant(dir);
            subject.to_string()
        } else {
            let log = dir.join("CHANGELOG.bisect");
            let mut text = std::fs::read_to_string(&log).unwrap_or_default();
            text.push_str(&format!("- harmless change {i}\n"));
            std::fs::write(&log, text).unwrap();
            format!("harmless change {i}")
        };
        git(dir, &["add", "--all", "--force", "."]);
        git(dir, &["commit", "--quiet", "-m", &message]);
        commits.push(git(dir, &["rev-parse", "HEAD"]));
    }
    commits
}

/// `bisect.json` of a bisect's out folder.
pub(super) fn bisect_json(out: &Path) -> serde_json::Value {
    let path = out.join("bisect.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e}", path.display());
    }))
    .unwrap()
}

/// The runs each tested commit needed, one line, and their total (run now and cached).
pub(super) fn runs_line(json: &serde_json::Value) -> String {
    let per: Vec<String> = json["tested"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let runs: u64 = t["trials"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["runs"].as_u64().unwrap())
                .sum();
            format!(
                "{} {} {runs}",
                &t["commit"]["sha"].as_str().unwrap()[..9],
                t["verdict"].as_str().unwrap()
            )
        })
        .collect();
    format!(
        "{} commits tested: {}; {} scenario runs run now, {} from the cache",
        per.len(),
        per.join(", "),
        json["runs"],
        json["cached_runs"]
    )
}

/// The worktrees are gone and the user's checkout is as it was: HEAD at `head`, nothing
/// changed.
pub(super) fn checkout_untouched(dir: &Path, head: &str) {
    assert_eq!(git(dir, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
    assert_eq!(git(dir, &["worktree", "list"]).lines().count(), 1);
}

pub(super) const STANDIN: &str = "harness/tests/fixtures/bisect/standin.yaml";

/// `rlharness ARGS` from the repository root; `ci`: with `CI=true` (the golden store is then
/// read only), else without it (to bless and calibrate in the test's own store).
pub(super) fn rlharness(args: &[&str], ci: bool) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlharness"));
    c.current_dir(repo()).args(args).env("RUST_LOG", "error");
    if ci {
        c.env("CI", "true");
    } else {
        c.env_remove("CI");
    }
    c.output().unwrap()
}

/// The stand-in's golden and calibration in a store of the test's own under `tmp` (from the
/// trainer as it was, 8 seeds; the runs go to `tmp/runs`), and a throwaway repository of it in
/// `tmp/trainer`: eight commits after it, the fifth halving the learning rate. The store, the
/// repository and its commits (0 to 8).
pub(super) fn standin_and_its_regression(tmp: &Path) -> (String, PathBuf, Vec<String>) {
    let golden = tmp.join("golden").to_str().unwrap().to_string();
    let out = tmp.join("runs").to_str().unwrap().to_string();
    let good_tree = repo().join("harness/tests/fixtures/bisect/standin");
    let good_src = format!("driver.env.STANDIN_SRC={}", good_tree.display());
    let o = rlharness(
        &[
            "run",
            STANDIN,
            "--golden",
            &golden,
            "--out",
            &out,
            "--no-progress",
            "--set",
            &good_src,
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let o = rlharness(
        &["golden", "--golden", &golden, "accept", "bisect-standin"],
        false,
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = rlharness(
        &[
            "golden",
            "--golden",
            &golden,
            "calibrate",
            STANDIN,
            "--seeds",
            "1..8",
            "--jobs",
            "2",
            "--allow-dirty",
            "--out",
            &out,
            "--set",
            &good_src,
        ],
        false,
    );
    assert!(o.status.success(), "{}", text(&o));
    let trainer = tmp.join("trainer");
    let commits = throwaway_repo(&trainer, &good_tree, 8, 5, "a smaller learning rate", |d| {
        let path = d.join("trainer.py");
        let src = std::fs::read_to_string(&path).unwrap();
        assert!(src.contains("\nLR = 0.3\n"));
        std::fs::write(&path, src.replace("\nLR = 0.3\n", "\nLR = 0.15\n")).unwrap();
    });
    (golden, trainer, commits)
}

#[test]
fn bisect_finds_the_commit_that_lowered_the_learning_rate() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let (golden, trainer, commits) = standin_and_its_regression(tmp.path());
    let golden = golden.as_str();
    let cache = tmp.path().join("cache");
    let bisect = |name: &str, good: &str, bad: &str, extra: &[&str]| {
        let dir = tmp.path().join("bisect").join(name);
        let mut args = vec![
            "bisect",
            STANDIN,
            "--repo",
            trainer.to_str().unwrap(),
            "--good",
            good,
            "--bad",
            bad,
            "--golden",
            golden,
            "--out",
            dir.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
        ];
        args.extend(extra);
        (rlharness(&args, true), dir)
    };
    let (o, dir) = bisect("first", &commits[0], &commits[8], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let json = bisect_json(&dir);
    assert_eq!(
        json["first_bad"]["sha"],
        commits[5].as_str(),
        "{}",
        text(&o)
    );
    says(
        &text(&o),
        &[
            &format!(
                "first bad commit: {} a smaller learning rate",
                &commits[5][..9]
            ),
            "Wald's SPRT on critic/rewards/mean",
            "α = 0.05, β = 0.05",
        ],
    );
    let runs = json["runs"].as_u64().unwrap();
    println!(
        "bisect (stand-in trainer, scenario mode): {}; {:.1} s",
        runs_line(&json),
        started.elapsed().as_secs_f64()
    );
    // The ends and the three steps of the search: at least one seed each.
    assert!((5..=5 * 8).contains(&runs), "{}", runs_line(&json));
    checkout_untouched(&trainer, &commits[8]);
    let md = std::fs::read_to_string(dir.join("bisect.md")).unwrap();
    says(
        &md,
        &[
            "first bad commit",
            "a smaller learning rate",
            "Commits tested",
        ],
    );

    // A rerun takes every commit's seeds from the cache.
    let (o, dir) = bisect("again", &commits[0], &commits[8], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let again = bisect_json(&dir);
    assert_eq!(again["first_bad"], json["first_bad"]);
    assert_eq!(again["runs"], 0, "{}", text(&o));
    assert_eq!(again["cached_runs"].as_u64(), Some(runs));

    // A smaller effect (about the calibration's σ): the cached seeds are kept, and the good
    // commits, whose values now lie near the middle of the two hypotheses, get more seeds;
    // the bad ones, far past it, still take one.
    let (o, dir) = bisect(
        "small-effect",
        &commits[0],
        &commits[8],
        &["--effect", "0.01"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let small = bisect_json(&dir);
    println!("bisect with --effect 0.01: {}", runs_line(&small));
    assert_eq!(small["first_bad"], json["first_bad"]);
    assert_eq!(small["cached_runs"].as_u64(), Some(runs));
    let seeds = |verdict: &str| -> Vec<usize> {
        small["tested"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["verdict"] == verdict)
            .map(|t| t["trials"].as_array().unwrap().len())
            .collect()
    };
    assert!(
        seeds("good").iter().all(|n| *n > 1),
        "{}",
        runs_line(&small)
    );
    assert!(
        seeds("bad").iter().all(|n| *n == 1),
        "{}",
        runs_line(&small)
    );

    // A "good" commit after the plant is not good: exit 1, named.
    let (o, _) = bisect("wrong-end", &commits[6], &commits[8], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    says(
        &text(&o),
        &[&format!("the good commit {} is not good", &commits[6][..9])],
    );
    // A revision the repository lacks is invalid input.
    let (o, _) = bisect("no-such", "no-such-rev", &commits[8], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    checkout_untouched(&trainer, &commits[8]);
}
