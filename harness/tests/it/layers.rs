//! The import direction of `harness/src`: every top-level module sits in a layer
//! (`docs/architecture.md`, "Layers"), and a module may use only its own layer and those below.
//! Within a layer, two modules never use each other both ways. A new top-level module must be
//! given a layer here and in the docs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::repo;

/// Lowest first; the same table as `docs/architecture.md`.
const LAYERS: &[&[&str]] = &[
    &["error", "fsx", "wire", "task", "slot", "util"],
    &["metrics", "events"],
    &["checks"],
    &["golden", "rundir"],
    &["compare"],
    &["backend", "proxy", "driver", "capture"],
    &["spec", "plan"],
    &["report"],
    &["runner"],
    &["propagate", "assets"],
    &["app", "cli", "lib", "main"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top-level modules one source text names through `crate::` (`crate::a::b`,
/// `crate::{a, b::c}`), comments included: a path in a doc example is a dependency too.
fn crate_refs(text: &str) -> BTreeSet<String> {
    refs_through(text, "crate::")
}

/// The top-level modules of the harness that one text names through `prefix`.
fn refs_through(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        if rest[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            rest = &rest[i + prefix.len()..];
            continue;
        }
        rest = &rest[i + prefix.len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end].split(',').collect()
        } else {
            vec![rest]
        };
        for n in names {
            let n = n.trim_start();
            let ident: String = n
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !ident.is_empty() {
                out.insert(ident);
            }
        }
    }
    out
}

/// Every edge `module -> used module` of the tree under `src`, with a file that shows it.
fn edges(src: &Path) -> BTreeMap<(String, String), String> {
    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, files);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        for used in crate_refs(&std::fs::read_to_string(&f).unwrap()) {
            if used != module {
                out.entry((module.clone(), used))
                    .or_insert_with(|| rel.display().to_string());
            }
        }
    }
    out
}

/// What breaks the layering, one line per edge.
fn violations(edges: &BTreeMap<(String, String), String>) -> Vec<String> {
    let mut bad = Vec::new();
    for ((from, to), file) in edges {
        match (layer_of(from), layer_of(to)) {
            (None, _) => bad.push(format!("{file}: module `{from}` has no layer")),
            (_, None) => bad.push(format!("{file}: uses `{to}`, which has no layer")),
            (Some(a), Some(b)) if b > a => bad.push(format!(
                "{file}: `{from}` (layer {a}) uses `{to}` (layer {b}), above it"
            )),
            (Some(a), Some(b)) if a == b && edges.contains_key(&(to.clone(), from.clone())) => {
                bad.push(format!("{file}: `{from}` and `{to}` use each other"))
            }
            _ => {}
        }
    }
    bad
}

#[test]
fn no_module_uses_one_above_it() {
    let found = edges(&repo().join("harness/src"));
    assert!(found.len() > 40, "the walk found the tree: {found:?}");
    let bad = violations(&found);
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

#[test]
fn the_check_sees_an_upward_use_a_cycle_and_an_unknown_module() {
    assert_eq!(
        crate_refs("use crate::{metrics::MetricTable, fsx};\nlet x = crate::wire::api::X;"),
        ["fsx", "metrics", "wire"].map(String::from).into()
    );
    let edge = |a: &str, b: &str| ((a.to_string(), b.to_string()), format!("{a}/mod.rs"));
    let bad = violations(&[edge("metrics", "runner")].into());
    assert!(
        bad[0].contains("`metrics` (layer 1) uses `runner` (layer 8)"),
        "{bad:?}"
    );
    let bad = violations(&[edge("backend", "driver"), edge("driver", "backend")].into());
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].contains("use each other"));
    let bad = violations(&[edge("newthing", "fsx")].into());
    assert!(bad[0].contains("has no layer"), "{bad:?}");
    assert!(violations(&[edge("runner", "metrics")].into()).is_empty());
}

/// The torch engine (the `rlharness-torch` library; its executable's `main.rs` is a command and
/// may use any layer) builds on the backend layer and what is below it, never on the spec
/// loader, the runner or the commands.
#[test]
fn the_torch_engine_uses_nothing_above_the_backend_layer() {
    let top = layer_of("backend").unwrap();
    let dir = repo().join("harness/torch/src");
    let mut bad = Vec::new();
    let mut seen = BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rs") || p.ends_with("main.rs") {
            continue;
        }
        for used in refs_through(&std::fs::read_to_string(&p).unwrap(), "rlharness::") {
            match layer_of(&used) {
                Some(l) if l <= top => {
                    seen.insert(used);
                }
                _ => bad.push(format!("{}: uses `{used}`", p.display())),
            }
        }
    }
    assert!(
        seen.contains("backend") && seen.contains("wire"),
        "{seen:?}"
    );
    assert!(
        bad.is_empty(),
        "above the backend layer:\n{}",
        bad.join("\n")
    );
    // The check itself sees such a use, and not a path that merely ends in the prefix.
    assert_eq!(
        refs_through(
            "use rlharness::spec::load; my_rlharness::app::x()",
            "rlharness::"
        ),
        ["spec"].map(String::from).into()
    );
}
