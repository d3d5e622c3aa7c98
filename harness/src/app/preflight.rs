//! What `check` and `run` both refuse in a scenario that loads, from one function so that they
//! agree: goldens that do not read, rules and expectations on metrics the golden does not
//! hold (with a did-you-mean), and a trainer program that cannot be started here. `run` calls
//! it before anything starts, so a bad input costs no run. `check` also refuses rules that
//! cannot fail (`lints`): a run with one is judged, and `golden audit` names the rule.

use std::path::Path;

use crate::judge::lint as rules_lint;
use crate::scenario::located::error_at;
use crate::scenario::shape_lint;
use crate::scenario::{DriverSpec, Problems, Scenario};

/// The problems of scenario `s`, loaded from `file`, judged against the goldens under
/// `golden_root`.
pub(crate) fn problems(file: &Path, s: &Scenario, golden_root: &Path) -> Problems {
    let mut errors = rules_lint::lint_golden_files(file, &s.name, golden_root);
    errors.extend(rules_lint::lint_metric_names(
        file,
        &s.name,
        &s.checks,
        golden_root,
    ));
    if let DriverSpec::Command(c) = &s.driver {
        if let Err(why) = c.resolve_program(file) {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let line = text
                .lines()
                .position(|l| l.trim_start().starts_with("command:"))
                .map_or(1, |i| i + 1);
            errors.push(error_at(
                file,
                line,
                "driver.command".into(),
                why.to_string(),
            ));
        }
    }
    let mut lints = rules_lint::lint_rules(file, &s.name, &s.checks, golden_root);
    lints.extend(shape_lint::lint_shapes(file, &s.checks, s.steps));
    Problems {
        errors,
        lints,
        warnings: rules_lint::lint_calibration(file, &s.name, &s.checks, golden_root),
    }
}
