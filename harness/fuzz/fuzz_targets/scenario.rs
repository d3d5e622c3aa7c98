//! The scenario loader on arbitrary text: YAML with spans, layering over the defaults and the
//! included backend file, `--set` overrides, `${a.b}` interpolation, the checks' expressions.
//! Lines `#set KEY=VALUE` of the input are passed as `--set` overrides too, so the fuzzer can
//! reach the override parser. Every input must end in a scenario or in errors, never a panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rlharness::judge::expr::parse_expr;
use rlharness::scenario::load_scenario;

/// A scenarios root with the project's defaults and backend layers, made once a process.
fn root() -> &'static (tempfile::TempDir, PathBuf) {
    static ROOT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temp folder for the scenarios root");
        let scenarios = dir.path().join("scenarios");
        for (rel, text) in [
            (
                "defaults/verl.yaml",
                include_str!("../../../scenarios/defaults/verl.yaml"),
            ),
            (
                "backends/arctic.yaml",
                include_str!("../../../scenarios/backends/arctic.yaml"),
            ),
            (
                "backends/arctic.knobs.yaml",
                include_str!("../../../scenarios/backends/arctic.knobs.yaml"),
            ),
        ] {
            let path = scenarios.join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent folder"))
                .expect("create the scenarios root");
            std::fs::write(&path, text).expect("write a layer file");
        }
        let file = scenarios.join("fuzz.yaml");
        (dir, file)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let overrides: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("#set "))
        .map(str::to_string)
        .collect();
    for line in text.lines().filter_map(|l| l.strip_prefix("#expr ")) {
        let _ = parse_expr(line);
    }
    let (_, file) = root();
    std::fs::write(file, text).expect("write the scenario");
    let _ = load_scenario(file, &overrides);
});
