use std::path::Path;
use std::time::Duration;

use super::load::valid_name;
use super::requires::python_modules_available;
use super::timeouts::parse_duration;
use super::*;

#[test]
fn durations_parse_with_units() {
    assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
    assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
    assert!(parse_duration("10 parsecs")
        .unwrap_err()
        .to_string()
        .contains("unknown unit"));
    assert!(parse_duration("soon").is_err());
}

#[test]
fn timeouts_read_numbers_and_strings() {
    let node = yaml::parse(
        "step: 90\nrun: \"10m\"\nrequest: 0.5\n",
        Path::new("t.yaml"),
    )
    .unwrap();
    let t: Timeouts = de::from_node(&node, "timeouts").unwrap();
    assert_eq!(t.step, Some(Duration::from_secs(90)));
    assert_eq!(t.run, Some(Duration::from_secs(600)));
    assert_eq!(t.request, Some(Duration::from_millis(500)));
    let node = yaml::parse("step: -1\n", Path::new("t.yaml")).unwrap();
    let e = de::from_node::<Timeouts>(&node, "timeouts").unwrap_err();
    assert_eq!((e.line, e.key_path.as_str()), (1, "timeouts.step"));
    let node = yaml::parse("stepp: 1\n", Path::new("t.yaml")).unwrap();
    assert!(de::from_node::<Timeouts>(&node, "timeouts").is_err());
}

#[test]
fn requires_reports_missing_things() {
    let r = Requires {
        features: vec!["no_such_feature".into()],
        commands: vec!["definitely-not-a-command-rlh".into(), "sh".into()],
        ..Default::default()
    };
    let unmet = r.unmet();
    assert!(
        unmet.contains(&"needs cargo feature `no_such_feature` (this build lacks it)".to_string()),
        "{unmet:?}"
    );
    assert!(
        unmet.contains(&"needs command `definitely-not-a-command-rlh` on PATH".to_string()),
        "{unmet:?}"
    );
    assert_eq!(unmet.len(), 2, "{unmet:?}");
    assert_eq!(Requires::default().unmet(), Vec::<String>::new());
    assert_eq!(
        r.summary(),
        "feature no_such_feature, command definitely-not-a-command-rlh, command sh"
    );
}

#[test]
fn python_is_asked_only_when_nothing_else_is_missing() {
    let modules = vec!["no_such_module_rlharness".to_string()];
    let blocked = Requires {
        commands: vec!["definitely-not-a-command-rlh".into()],
        python_modules: modules.clone(),
        ..Default::default()
    };
    assert_eq!(
        blocked.unmet(),
        vec!["needs command `definitely-not-a-command-rlh` on PATH".to_string()]
    );
    let alone = Requires {
        python_modules: modules,
        ..Default::default()
    };
    let unmet = alone.unmet();
    assert_eq!(unmet.len(), 1, "{unmet:?}");
    assert!(
        unmet[0].starts_with("needs python module `no_such_module_rlharness`"),
        "{unmet:?}"
    );
}

#[test]
fn gpu_requirement_explains_what_was_found() {
    let r = Requires {
        gpus: 64,
        gpu_name: Some("no-such-gpu-model".into()),
        ..Default::default()
    };
    let unmet = r.unmet();
    match detect_gpus() {
        Err(why) => assert_eq!(unmet, vec![format!("needs 64 GPUs, found 0 ({why})")]),
        Ok(names) => {
            assert_eq!(unmet.len(), 2, "{unmet:?}");
            assert_eq!(unmet[0], format!("needs 64 GPUs, found {}", names.len()));
            assert!(unmet[1].starts_with("needs a GPU named like `no-such-gpu-model`"));
        }
    }
    assert_eq!(r.summary(), "64 GPUs (no-such-gpu-model)");
}

#[test]
fn names_must_be_folder_safe() {
    assert!(valid_name("smoke-mock_1.2"));
    assert!(!valid_name("a/b"));
    assert!(!valid_name(""));
    assert!(!valid_name(".."));
}

#[test]
fn python_modules_are_asked_in_one_start_and_answered_in_order() {
    let names: Vec<String> = [
        "json",
        "no_such_module_rlharness",
        "no_such_pkg_x.sub",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let found = python_modules_available(&names, &[]);
    if found[0].is_err() {
        return; // no python3 on this machine: nothing to check
    }
    assert_eq!(found, vec![Ok(true), Ok(false), Ok(false), Ok(true)]);
}

/// `requires.env`: a variable that is unset is a reason; `requires.python_path`: a module found
/// only there is found.
#[test]
fn an_unset_variable_is_unmet_and_python_path_finds_a_module() {
    let r = Requires {
        env: vec!["RLHARNESS_SURELY_UNSET_VARIABLE".into()],
        ..Default::default()
    };
    assert_eq!(
        r.unmet(),
        vec!["needs environment variable `RLHARNESS_SURELY_UNSET_VARIABLE` set".to_string()]
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rlh_probe_module.py"), "x = 1\n").unwrap();
    let without = Requires {
        python_modules: vec!["rlh_probe_module".into()],
        ..Default::default()
    };
    let unmet = without.unmet();
    if unmet.iter().any(|u| u.contains("python3")) {
        return; // no python3 on this machine: nothing to check
    }
    assert_eq!(
        unmet,
        vec!["needs python module `rlh_probe_module`".to_string()]
    );
    let with = Requires {
        python_path: vec![dir.path().to_path_buf()],
        ..without
    };
    assert_eq!(with.unmet(), Vec::<String>::new());
}

#[test]
fn metrics_tensorboard_is_a_boolean_at_its_line() {
    let node = yaml::parse("watch: [x]\ntensorboard: true\n", Path::new("t.yaml")).unwrap();
    let m: crate::model::metrics::MetricsSpec = de::from_node(&node, "metrics").unwrap();
    assert!(m.tensorboard);
    let node = yaml::parse("watch: [x]\n", Path::new("t.yaml")).unwrap();
    let m: crate::model::metrics::MetricsSpec = de::from_node(&node, "metrics").unwrap();
    assert!(!m.tensorboard);
    let node = yaml::parse("tensorboard: often\n", Path::new("t.yaml")).unwrap();
    let e = de::from_node::<crate::model::metrics::MetricsSpec>(&node, "metrics").unwrap_err();
    assert_eq!((e.line, e.key_path.as_str()), (1, "metrics.tensorboard"));
    assert!(e.to_string().contains("expected a boolean"), "{e}");
}
