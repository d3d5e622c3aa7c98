//! The one JUnit writer: a neutral model of test suites and cases, serialized through
//! quick-junit. A run's `junit.xml` (`run_junit.rs`), the combined index's and `propagate`'s
//! build a [`Junit`] and call [`to_xml`]; no other file knows quick-junit.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use crate::model::util::html_escape as esc;

/// A JUnit document: its name, how long it took, its suites.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Junit {
    pub(crate) name: String,
    pub(crate) time: Option<Duration>,
    pub(crate) suites: Vec<Suite>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Suite {
    pub(crate) name: String,
    pub(crate) cases: Vec<Case>,
}

/// One test case: its name, class name and time, how it ended, and what it printed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) classname: Option<String>,
    pub(crate) time: Option<Duration>,
    pub(crate) status: CaseStatus,
    /// What it printed (its `system-out`).
    pub(crate) out: Option<String>,
}

impl Case {
    /// A case named `name` of class `classname` that ended as `status`.
    pub(crate) fn new(
        name: impl Into<String>,
        classname: impl Into<String>,
        status: CaseStatus,
    ) -> Case {
        Case {
            name: name.into(),
            classname: Some(classname.into()),
            time: None,
            status,
            out: None,
        }
    }
}

/// How a case ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CaseStatus {
    Pass,
    /// A check that failed.
    Fail(Problem),
    /// Something that could not be checked (a run that broke).
    Error(Problem),
    Skip {
        message: Option<String>,
    },
}

/// Why a case failed: a one-line message, its kind, and the whole text.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Problem {
    pub(crate) message: String,
    pub(crate) kind: Option<String>,
    pub(crate) text: Option<String>,
}

impl Problem {
    /// A problem whose message is its whole text.
    pub(crate) fn said(message: impl Into<String>) -> Problem {
        let message = message.into();
        Problem {
            text: Some(message.clone()),
            message,
            kind: None,
        }
    }
}

/// The document as JUnit XML.
pub(crate) fn to_xml(j: &Junit) -> String {
    let mut report = Report::new(j.name.as_str());
    if let Some(t) = j.time {
        report.set_time(t);
    }
    for s in &j.suites {
        let mut suite = TestSuite::new(s.name.as_str());
        for c in &s.cases {
            suite.add_test_case(case(c));
        }
        report.add_test_suite(suite);
    }
    report.to_string().unwrap_or_else(|e| {
        // Serializing to memory only fails on invalid characters; say so in a valid document.
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{0}\" \
             tests=\"1\" failures=\"0\" errors=\"1\"><testsuite name=\"{0}\" tests=\"1\" \
             failures=\"0\" errors=\"1\"><testcase name=\"junit\"><error message=\"{1}\"/>\
             </testcase></testsuite></testsuites>\n",
            esc(&j.name),
            esc(&e.to_string())
        )
    })
}

fn case(c: &Case) -> TestCase {
    let status = match &c.status {
        CaseStatus::Pass => TestCaseStatus::success(),
        CaseStatus::Fail(p) => problem(NonSuccessKind::Failure, p),
        CaseStatus::Error(p) => problem(NonSuccessKind::Error, p),
        CaseStatus::Skip { message } => {
            let mut s = TestCaseStatus::skipped();
            if let Some(m) = message {
                s.set_message(m.as_str());
            }
            s
        }
    };
    let mut t = TestCase::new(c.name.as_str(), status);
    if let Some(n) = &c.classname {
        t.set_classname(n.as_str());
    }
    if let Some(d) = c.time {
        t.set_time(d);
    }
    if let Some(o) = &c.out {
        t.set_system_out(o.as_str());
    }
    t
}

fn problem(kind: NonSuccessKind, p: &Problem) -> TestCaseStatus {
    let mut s = TestCaseStatus::non_success(kind);
    s.set_message(p.message.as_str());
    if let Some(k) = &p.kind {
        s.set_type(k.as_str());
    }
    if let Some(t) = &p.text {
        s.set_description(t.as_str());
    }
    s
}

/// A JUnit document read back into the model, for tests: what CI would see.
#[cfg(test)]
pub(crate) fn parse(xml: &str) -> Junit {
    let text = |s: &Option<quick_junit::XmlString>| s.as_ref().map(|x| x.as_str().to_string());
    let r = Report::deserialize_from_str(xml).unwrap();
    Junit {
        name: text(&r.name).unwrap_or_default(),
        time: r.time,
        suites: r
            .test_suites
            .iter()
            .map(|s| Suite {
                name: s.name.as_str().to_string(),
                cases: s
                    .test_cases
                    .iter()
                    .map(|c| Case {
                        name: c.name.as_str().to_string(),
                        classname: text(&c.classname),
                        time: c.time,
                        out: text(&c.system_out),
                        status: match &c.status {
                            TestCaseStatus::Success { .. } => CaseStatus::Pass,
                            TestCaseStatus::NonSuccess {
                                kind,
                                message,
                                ty,
                                description,
                                ..
                            } => {
                                let p = Problem {
                                    message: text(message).unwrap_or_default(),
                                    kind: text(ty),
                                    text: text(description),
                                };
                                match kind {
                                    NonSuccessKind::Failure => CaseStatus::Fail(p),
                                    NonSuccessKind::Error => CaseStatus::Error(p),
                                }
                            }
                            TestCaseStatus::Skipped { message, .. } => CaseStatus::Skip {
                                message: text(message),
                            },
                        },
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[cfg(test)]
impl Suite {
    /// How many of its cases ended as `f` says.
    pub(crate) fn count(&self, f: impl Fn(&CaseStatus) -> bool) -> usize {
        self.cases.iter().filter(|c| f(&c.status)).count()
    }
    pub(crate) fn failures(&self) -> usize {
        self.count(|s| matches!(s, CaseStatus::Fail(_)))
    }
    pub(crate) fn skipped(&self) -> usize {
        self.count(|s| matches!(s, CaseStatus::Skip { .. }))
    }
}
