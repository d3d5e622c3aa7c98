//! One scenario file loaded: read, `--set` applied, the config layered, every block
//! deserialized and validated, every error collected.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::config::{self, Override};
use super::yaml::{self, join_path, Origin, SpannedNode, SpannedValue};
use super::{de, error, Requires, Timeouts};
use super::{PropagateSpec, Scenario, SelfTest, SpecError, SpecErrors};

/// The top-level keys of a scenario file.
pub(crate) const TOP_LEVEL_KEYS: &[&str] = &[
    "name",
    "description",
    "tags",
    "requires",
    "seed",
    "steps",
    "driver",
    "backend",
    "metrics",
    "checks",
    "timeouts",
    "expected_verdict",
    "selftest",
    "propagate",
    "config",
];

/// Apply a `--set` outside `config` to the scenario's spanned tree. Missing mappings on the
/// way are created: the typed blocks' own schemas (`deny_unknown_fields`) judge the keys.
fn apply_top_override(root: &mut SpannedNode, ov: &Override) -> Result<(), SpecError> {
    let pos = ov.pos();
    let mut node = root;
    let mut path = String::new();
    for (i, seg) in ov.segments.iter().enumerate() {
        let last = i + 1 == ov.segments.len();
        if matches!(node.value, SpannedValue::Null) {
            node.value = SpannedValue::Map(Vec::new());
        }
        let here = path.clone();
        path = join_path(&path, seg);
        node = match &mut node.value {
            SpannedValue::Map(entries) => {
                let idx = match entries.iter().position(|(k, _, _)| k == seg) {
                    Some(idx) => idx,
                    None => {
                        let placeholder = SpannedNode {
                            value: SpannedValue::Null,
                            origin: ov.value.origin.clone(),
                            pos: pos.clone(),
                        };
                        entries.push((seg.clone(), pos.clone(), placeholder));
                        entries.len() - 1
                    }
                };
                &mut entries[idx].2
            }
            SpannedValue::Seq(items) => {
                let len = items.len();
                match seg.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                    Some(n) => n,
                    None => {
                        return Err(SpecError::at(
                            &pos,
                            path,
                            format!(
                                "`{here}` is a sequence of {len}; expected an index below {len}"
                            ),
                        ))
                    }
                }
            }
            other => {
                return Err(SpecError::at(
                    &pos,
                    path,
                    format!(
                        "cannot set a key inside `{here}`: it is {}, not a mapping",
                        other.kind()
                    ),
                ))
            }
        };
        if last {
            *node = ov.value.clone();
        }
    }
    Ok(())
}

fn collect_origins(node: &SpannedNode, path: &str, out: &mut BTreeMap<String, Origin>) {
    match &node.value {
        SpannedValue::Map(entries) if !entries.is_empty() => {
            for (k, _, child) in entries {
                collect_origins(child, &join_path(path, k), out);
            }
        }
        _ => {
            out.insert(path.to_string(), node.origin.clone());
        }
    }
}

pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Apply the `--set` overrides outside `config` to the tree now; return the `config.*` ones
/// (with their path below `config`) for the layering.
fn apply_overrides<'a>(
    root: &mut SpannedNode,
    parsed: &'a [Override],
    errors: &mut Vec<SpecError>,
) -> Vec<(&'a Override, Vec<String>)> {
    let mut config_overrides = Vec::new();
    for ov in parsed {
        if ov.segments[0] == "config" {
            config_overrides.push((ov, ov.segments[1..].to_vec()));
        } else if !TOP_LEVEL_KEYS.contains(&ov.segments[0].as_str()) {
            let hint = error::closest(&ov.segments[0], TOP_LEVEL_KEYS.iter().copied())
                .map(|c| format!("; did you mean `{c}`?"))
                .unwrap_or_default();
            errors.push(SpecError::at(
                &ov.pos(),
                ov.key(),
                format!(
                    "unknown top-level key `{}`{hint} (config knobs are set as `config.<path>`)",
                    ov.segments[0]
                ),
            ));
        } else if let Err(e) = apply_top_override(root, ov) {
            errors.push(e);
        }
    }
    config_overrides
}

/// Every unknown top-level key, with the closest known one.
fn unknown_top_level_keys(root: &SpannedNode, errors: &mut Vec<SpecError>) {
    if let SpannedValue::Map(entries) = &root.value {
        for (k, kpos, _) in entries {
            if !TOP_LEVEL_KEYS.contains(&k.as_str()) {
                let hint = match error::closest(k, TOP_LEVEL_KEYS.iter().copied()) {
                    Some(c) => format!("did you mean `{c}`?"),
                    None => format!("expected one of: {}", TOP_LEVEL_KEYS.join(", ")),
                };
                errors.push(SpecError::at(
                    kpos,
                    k.clone(),
                    format!("unknown key `{k}`; {hint}"),
                ));
            }
        }
    }
}

/// One typed block of the scenario, its error recorded (so one file shows all its errors).
fn field<'a, T: Deserialize<'a>>(
    root: &'a SpannedNode,
    key: &str,
    errors: &mut Vec<SpecError>,
) -> Option<T> {
    let node = root.get(key)?;
    match de::from_node::<T>(node, key) {
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

/// A block the scenario must have; `what` says what it is for.
fn required<'a, T: Deserialize<'a>>(
    root: &'a SpannedNode,
    key: &str,
    what: &str,
    errors: &mut Vec<SpecError>,
) -> Option<T> {
    if root.get(key).is_none() {
        errors.push(SpecError::at(
            &root.pos,
            key,
            format!("missing required key `{key}` ({what})"),
        ));
        return None;
    }
    field(root, key, errors)
}

/// A self-test plants `key=value` changes, declares the verdict it expects, and (multi-seed)
/// names at least 2 seeds.
fn check_selftest(
    st: &SelfTest,
    node: &SpannedNode,
    declares_verdict: bool,
    errors: &mut Vec<SpecError>,
) {
    if st.plant.is_empty() {
        errors.push(SpecError::at(
            &node.pos,
            "selftest.plant",
            "a self-test plants at least one change (`key=value`, as `--set` takes it)",
        ));
    }
    if let Some(bad) = st.plant.iter().find(|p| !p.contains('=')) {
        errors.push(SpecError::at(
            &node.pos,
            "selftest.plant",
            format!("`{bad}` is not a `key=value` override"),
        ));
    }
    if let Some(seeds) = &st.seeds {
        match crate::model::checks::parse_seed_range(seeds) {
            Ok(list) if list.len() < 2 => errors.push(SpecError::at(
                &node.pos,
                "selftest.seeds",
                format!("`{seeds}`: a multi-seed self-test needs at least 2 seeds"),
            )),
            Ok(_) => {}
            Err(why) => errors.push(SpecError::at(&node.pos, "selftest.seeds", why.to_string())),
        }
    }
    if st.golden.is_some() && st.seeds.is_none() {
        errors.push(SpecError::at(
            &node.pos,
            "selftest.golden",
            "`golden` names the scenario whose golden a multi-seed self-test is judged \
             against: it needs `seeds` (a single-run self-test is judged against its own \
             reference run)",
        ));
    }
    if !declares_verdict {
        errors.push(SpecError::at(
            &node.pos,
            "selftest",
            "a self-test must declare the verdict it expects (`expected_verdict`)",
        ));
    }
}

/// The driver block, and the backend block (a command driver's trainer may bring its own:
/// no block means `none`; the builtin driver needs one).
fn driver_and_backend(
    root: &SpannedNode,
    errors: &mut Vec<SpecError>,
) -> (Option<super::DriverSpec>, Option<super::BackendSpec>) {
    let driver: Option<super::DriverSpec> =
        required(root, "driver", "e.g. `{kind: builtin}`", errors);
    // A trainer that brings its own backend (the command driver) needs no `backend` block.
    let backend: Option<super::BackendSpec> = if root.get("backend").is_none()
        && !matches!(driver, Some(super::DriverSpec::Builtin(_)))
    {
        Some(super::BackendSpec::None)
    } else {
        required(root, "backend", "e.g. `{kind: mock}`", errors)
    };
    if let (Some(super::DriverSpec::Builtin(_)), Some(super::BackendSpec::None)) =
        (&driver, &backend)
    {
        let pos = root.get("backend").map_or(&root.pos, |n| &n.pos);
        errors.push(SpecError::at(
            pos,
            "backend",
            "the builtin driver needs a backend to drive (`mock`, `torch`, `remote` or `replay`); \
         `none` is for a command driver whose trainer brings its own",
        ));
    }
    (driver, backend)
}

/// A name that can name folders, and at least one step.
fn check_name_and_steps(
    root: &SpannedNode,
    name: Option<&str>,
    steps: Option<u64>,
    errors: &mut Vec<SpecError>,
) {
    if let (Some(n), Some(node)) = (name, root.get("name")) {
        if !valid_name(n) {
            errors.push(SpecError::at(
            &node.pos,
            "name",
            format!("invalid name {n:?}: expected letters, digits, `-`, `_` or `.` (it names folders)"),
        ));
        }
    }
    if let (Some(0), Some(node)) = (steps, root.get("steps")) {
        errors.push(SpecError::at(
            &node.pos,
            "steps",
            "expected at least 1 step, found 0",
        ));
    }
}

/// Where each value outside `config` was written.
fn top_level_origins(root: &SpannedNode) -> BTreeMap<String, Origin> {
    let mut origins = BTreeMap::new();
    if let SpannedValue::Map(entries) = &root.value {
        for (k, _, child) in entries {
            if k != "config" {
                collect_origins(child, k, &mut origins);
            }
        }
    }
    origins
}

/// The scenario file's top level must be a mapping.
fn expect_mapping(root: &SpannedNode) -> Result<(), SpecErrors> {
    if !root.is_map() {
        return Err(SpecError::at(
            &root.pos,
            "",
            format!(
                "expected a mapping with the scenario's keys ({}), found {}",
                TOP_LEVEL_KEYS.join(", "),
                root.value.kind()
            ),
        )
        .into());
    }
    Ok(())
}

/// The scenario file's YAML tree, which must be a mapping.
fn read_tree(path: &Path) -> Result<SpannedNode, SpecErrors> {
    let text = rlharness_arctic::fsx::read_to_string(path)
        .map_err(|e| SpecError::file(path, e.to_string()))?;
    let root = yaml::parse(&text, path)?;
    expect_mapping(&root)?;
    Ok(root)
}

/// The `selftest` block, checked against the rest of the scenario (`declares_verdict`:
/// whether it declares an `expected_verdict`).
fn selftest_field(
    root: &SpannedNode,
    declares_verdict: bool,
    errors: &mut Vec<SpecError>,
) -> Option<SelfTest> {
    let selftest: Option<SelfTest> = field(root, "selftest", errors);
    if let (Some(st), Some(node)) = (&selftest, root.get("selftest")) {
        check_selftest(st, node, declares_verdict, errors);
    }
    selftest
}

/// Load, layer, override, interpolate and validate one scenario file. `overrides` are
/// `--set KEY=VALUE` arguments; KEY is a dotted path from the scenario root. Every error found
/// is returned, not only the first.
pub fn load_scenario(path: &Path, overrides: &[String]) -> Result<Scenario, SpecErrors> {
    let mut root = read_tree(path)?;
    let mut errors = Vec::new();

    // Overrides: config ones go to the layering, the rest edit the tree now.
    let parsed: Vec<Override> = overrides
        .iter()
        .filter_map(|arg| Override::parse(arg).map_err(|e| errors.push(e)).ok())
        .collect();
    let config_overrides = apply_overrides(&mut root, &parsed, &mut errors);

    unknown_top_level_keys(&root, &mut errors);

    let root_dir = config::scenarios_root(path);
    let config_node = root.get("config").cloned();
    let layered = config::layer_config(&root_dir, config_node, &config_overrides, &mut errors);

    // Typed blocks, each on its own so one file shows all its errors.
    let name: Option<String> = required(
        &root,
        "name",
        "the scenario's name, used for its report and golden folders",
        &mut errors,
    );
    let description: Option<String> = required(
        &root,
        "description",
        "one sentence on what the scenario proves",
        &mut errors,
    );
    let tags: Option<Vec<String>> = field(&root, "tags", &mut errors);
    let mut requires: Option<Requires> = field(&root, "requires", &mut errors);
    if let Some(r) = &mut requires {
        r.resolve_paths(path.parent().unwrap_or(Path::new("")));
    }
    let seed: Option<u64> = required(&root, "seed", "the run's random seed", &mut errors);
    let steps: Option<u64> = required(&root, "steps", "the number of training steps", &mut errors);
    let (driver, backend) = driver_and_backend(&root, &mut errors);
    let metrics: Option<crate::model::metrics::MetricsSpec> = field(&root, "metrics", &mut errors);
    // An unknown preset would leave MFU out of every run without a word.
    if let Some(crate::model::metrics::ModelSpec::Preset(name)) =
        metrics.as_ref().and_then(|m| m.model.as_ref())
    {
        if crate::model::metrics::ModelShape::preset(name).is_none() {
            let node = root.get("metrics").and_then(|m| m.get("model"));
            errors.push(SpecError::at(
                node.map_or(&root.pos, |n| &n.pos),
                "metrics.model",
                format!(
                    "unknown model preset `{name}` (known: {}); or give the shape: {{hidden_size, \
                     intermediate_size, num_layers, num_heads, num_kv_heads, head_dim, vocab_size}}",
                    crate::model::metrics::ModelShape::PRESETS.join(", ")
                ),
            ));
        }
    }
    let checks: Option<crate::model::checks::ChecksSpec> = field(&root, "checks", &mut errors);
    let timeouts: Option<Timeouts> = field(&root, "timeouts", &mut errors);
    let expected_verdict: Option<Option<crate::model::checks::ExpectedVerdict>> =
        field(&root, "expected_verdict", &mut errors);
    // An `expected_verdict` that does not parse is declared (its own error says what is wrong).
    let declares_verdict =
        root.get("expected_verdict").is_some() && !matches!(expected_verdict, Some(None));
    let selftest = selftest_field(&root, declares_verdict, &mut errors);

    let propagate: Option<PropagateSpec> = field(&root, "propagate", &mut errors);
    check_name_and_steps(&root, name.as_deref(), steps, &mut errors);

    if !errors.is_empty() {
        return Err(SpecErrors(errors));
    }
    let (
        Some(name),
        Some(description),
        Some(seed),
        Some(steps),
        Some(driver),
        Some(backend),
        Some(layered),
    ) = (name, description, seed, steps, driver, backend, layered)
    else {
        return Err(SpecError::at(
            &root.pos,
            "",
            "internal: scenario incomplete without an error",
        )
        .into());
    };

    let origins = top_level_origins(&root);
    let mut sources = vec![path.to_path_buf()];
    sources.extend(layered.sources);
    let tags = tags.unwrap_or_default();
    let mut checks = checks.unwrap_or_default();
    checks.stability = Some(crate::model::checks::stability_enabled_for(
        checks.stability,
        &tags,
    ));
    Ok(Scenario {
        path: path.to_path_buf(),
        pos: root.pos.clone(),
        name,
        description,
        tags,
        requires: requires.unwrap_or_default(),
        seed,
        steps,
        driver,
        backend,
        metrics: metrics.unwrap_or_default(),
        checks,
        timeouts: timeouts.unwrap_or_default(),
        expected_verdict: expected_verdict.flatten(),
        selftest,
        propagate: propagate.unwrap_or_default(),
        config: layered.tree,
        origins,
        sources,
        overrides: overrides.to_vec(),
    })
}
