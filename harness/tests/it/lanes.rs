//! No test that nothing runs: every `#[ignore]`d test names the lane that runs it, and that
//! lane exists and selects it. The lanes the test command runs (`ci/test.sh`: `ci/ray-tests.sh`,
//! `ci/verl-tests.sh`) fail CI when one of their tests fails; the GPU lane (`ci/gpu-tests.sh`)
//! needs a CUDA device, which CI machines lack (ci/README.md, "Test lanes").

use crate::common::repo;

/// The lanes an ignored test may name, and whether `ci/test.sh` runs them.
const LANES: &[(&str, bool)] = &[
    ("ci/ray-tests.sh", true),
    ("ci/verl-tests.sh", true),
    ("ci/gpu-tests.sh", false),
];

/// Every `#[ignore = "..."]` under `harness/` with the file, the line and the test's name.
fn ignored_tests() -> Vec<(String, usize, String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![repo().join("harness")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("target") && !p.ends_with("fuzz") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                let Some(reason) = l.trim().strip_prefix("#[ignore") else {
                    continue;
                };
                let name = lines[i + 1..]
                    .iter()
                    .find_map(|l| {
                        let l = l.trim();
                        let rest = l.strip_prefix("async fn ").or(l.strip_prefix("fn "))?;
                        Some(rest.split('(').next().unwrap().to_string())
                    })
                    .unwrap_or_default();
                let file = p.strip_prefix(repo()).unwrap_or(&p).display().to_string();
                out.push((file, i + 1, name, reason.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_ignored_test_names_a_lane_that_runs_it() {
    let test_sh = std::fs::read_to_string(repo().join("ci/test.sh")).unwrap();
    for (lane, in_ci) in LANES {
        assert!(repo().join(lane).exists(), "{lane} is missing");
        assert_eq!(
            test_sh.contains(&format!("bash {lane}")),
            *in_ci,
            "ci/test.sh and the lane table disagree on {lane}"
        );
    }
    let ignored = ignored_tests();
    assert!(ignored.len() >= 15, "{ignored:?}");
    let mut problems = Vec::new();
    for (file, line, name, reason) in &ignored {
        let Some((lane, _)) = LANES.iter().find(|(l, _)| reason.contains(l)) else {
            problems.push(format!("{file}:{line}: `{name}` names no lane: {reason}"));
            continue;
        };
        // The lane's cargo filters must select the test: by its module (`ray::`, ...) or name;
        // or the script lists it by its whole path, one a line (the lanes of
        // `ci/verl-tests.sh`, which checks its lists against the test binary's own).
        let script = std::fs::read_to_string(repo().join(lane)).unwrap();
        let listed = script.lines().any(|l| {
            let l = l.trim();
            l.contains("::") && l.rsplit("::").next() == Some(name.as_str())
        });
        let module = std::path::Path::new(file)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let selected = script
            .lines()
            .filter(|l| l.trim_start().starts_with("cargo test") && l.contains("--ignored"))
            .any(|l| {
                l.contains(&format!(" {module}::"))
                    || l.split_whitespace()
                        .skip_while(|w| *w != "--ignored")
                        .skip(1)
                        .any(|f| {
                            !f.starts_with('-') && name.contains(f.rsplit("::").next().unwrap())
                        })
            });
        if !selected && !listed {
            problems.push(format!("{file}:{line}: {lane} does not select `{name}`"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
