//! `junit.xml` through quick-junit: one test suite per scenario, one test case per rule.
//! Failures carry the evidence; skipped scenarios are skipped test cases.

use quick_junit::{NonSuccessKind, Report as JunitReport, TestCase, TestCaseStatus, TestSuite};

use super::{band_text, opt_num, status_text, Headline, Report};
use crate::compare::{RuleStatus, RuleVerdict};

fn evidence_text(x: &RuleVerdict) -> String {
    let e = &x.evidence;
    let mut parts = vec![format!("{}: {}", status_text(x.status), e.message)];
    if let Some(at) = &e.step_or_window {
        parts.push(format!("at {at}"));
    }
    if e.value.is_some() {
        parts.push(format!("value {}", opt_num(e.value)));
    }
    if e.golden.is_some() {
        parts.push(format!("golden {}", opt_num(e.golden)));
    }
    if let Some(b) = &e.band {
        parts.push(format!("band {}", band_text(b)));
    }
    if e.margin.is_some() {
        parts.push(format!("margin {}", opt_num(e.margin)));
    }
    parts.join("; ")
}

fn failure(kind: NonSuccessKind, message: &str, description: &str) -> TestCaseStatus {
    let mut s = TestCaseStatus::non_success(kind);
    s.set_message(message);
    s.set_description(description);
    s
}

fn suite(r: &Report) -> TestSuite {
    let mut suite = TestSuite::new(r.scenario.as_str());
    let case = |name: &str, status: TestCaseStatus| {
        let mut c = TestCase::new(name, status);
        c.set_classname(r.scenario.as_str());
        c
    };
    if let Some(reason) = &r.skipped {
        let mut s = TestCaseStatus::skipped();
        s.set_message(reason.as_str());
        suite.add_test_case(case("scenario", s));
        return suite;
    }
    let expected = r.expected_match();
    let expected_ok = matches!(expected, Some(Ok(())));
    let headline = r.headline();

    // The run itself.
    let run_status = match headline {
        Headline::RunFailed => failure(NonSuccessKind::Error, &r.summary(), &r.summary()),
        _ => TestCaseStatus::success(),
    };
    let mut run_case = case("run", run_status);
    let mut out = String::new();
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    if let Some(tail) = &r.trainer_tail {
        out.push_str(tail);
    }
    if !out.is_empty() {
        run_case.set_system_out(out);
    }
    suite.add_test_case(run_case);

    if let Some(v) = &r.verdict {
        for x in &v.rules {
            // A declared, matched failure is the scenario working as intended.
            let status = if x.status == RuleStatus::Pass || expected_ok {
                TestCaseStatus::success()
            } else {
                let text = evidence_text(x);
                failure(NonSuccessKind::Failure, &text, &text)
            };
            let mut c = case(&x.rule, status);
            if expected_ok && x.status != RuleStatus::Pass {
                c.set_system_out(format!("expected failure: {}", evidence_text(x)));
            }
            suite.add_test_case(c);
        }
        if let Some(g) = &v.grid_mismatch {
            let status = if expected_ok {
                TestCaseStatus::success()
            } else {
                failure(NonSuccessKind::Failure, g, g)
            };
            suite.add_test_case(case("step grid", status));
        }
    }
    if headline == Headline::NoGolden {
        let msg = r.summary();
        suite.add_test_case(case("golden", failure(NonSuccessKind::Failure, &msg, &msg)));
    }
    if let Some(m) = expected {
        let status = match m {
            Ok(()) => TestCaseStatus::success(),
            Err(why) => failure(NonSuccessKind::Failure, &why.0, &why.0),
        };
        suite.add_test_case(case("expected verdict", status));
    }
    suite
}

/// All scenarios of one invocation in one JUnit document.
pub(crate) fn render_junit(reports: &[Report]) -> String {
    let mut report = JunitReport::new("rlharness");
    for r in reports {
        report.add_test_suite(suite(r));
    }
    report.to_string().unwrap_or_else(|e| {
        // Serializing to memory only fails on invalid characters; say so in a valid document.
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"rlharness\" \
             tests=\"1\" failures=\"0\" errors=\"1\"><testsuite name=\"rlharness\" tests=\"1\" \
             failures=\"0\" errors=\"1\"><testcase name=\"junit\"><error message=\"{}\"/>\
             </testcase></testsuite></testsuites>\n",
            super::markdown::html_escape(&e.to_string())
        )
    })
}
