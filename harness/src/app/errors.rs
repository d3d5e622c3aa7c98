//! Each error a command can fail with, and its exit status: the one table where an error
//! becomes a `CommandError` (nextest's way). Every lower module fails with its own `thiserror`
//! type; a command adds what it was doing as a variant of `Failure`, never as a string. The
//! message is the error's own text.
//!
//! The rule the table keeps: what a command was given that does not fit (an argument, a
//! scenario, a golden, a stored run, a file of theirs that cannot be read) is invalid input
//! (exit 2); what could not be carried out (a write, a crash, the host, a cluster) is a failed
//! run (exit 3).

use std::fmt::Display;
use std::path::PathBuf;

use crate::judge::audit::AuditError;
use crate::judge::calibrating::CalibrateError;
use crate::judge::{CombinedError, StoredError};
use crate::model::checks::SeedRangeError;
use crate::model::error::{CommandError, ExitStatus};
use crate::model::golden::audit_record::AuditRecordError;
use crate::model::golden::calibration::CalibrationError;
use crate::model::golden::GoldenError;
use crate::model::rundir::{ManifestError, RunDirError, SeedsFileError};
use crate::report::ReportError;
use crate::run::backend::child::ChildError;
use crate::run::backend::replay::InstallError;
use crate::run::plan::PlanError;
use crate::run::proxy::ProxyError;
use crate::run::runner::RunError;
use crate::scenario::{SpecError, SpecErrors};
use crate::tools::assets::AssetsError;
use crate::tools::bisect::BisectError;
use crate::tools::history::HistoryError;
use crate::tools::propagate::PropagateError;
use rlharness_arctic::cassette::CassetteError;
use rlharness_arctic::fsx::FsError;
use rlharness_arctic::task::TaskError;
use rlharness_arctic::torch_spec::decoder::ModelError;

/// The exit status an error stands for.
pub(crate) trait Status: Display {
    fn status(&self) -> ExitStatus;
}

const INVALID: ExitStatus = ExitStatus::InvalidInput;
const FAILED: ExitStatus = ExitStatus::RunFailed;

/// A file that cannot be read is the input's (the command was given it, or the golden store it
/// reads: exit 2); one that cannot be written, the host's (exit 3). (The Arctic crate's own
/// conversion, used where a command only writes, makes every `FsError` exit 3.)
fn fs(e: &FsError) -> ExitStatus {
    if e.action == "read" {
        INVALID
    } else {
        FAILED
    }
}

/// The status table: one arm per lower error kind.
macro_rules! table {
    ($($ty:ty => |$e:ident| $status:expr;)*) => {
        $(
            impl Status for $ty {
                #[allow(unused_variables)]
                fn status(&self) -> ExitStatus {
                    let $e = self;
                    $status
                }
            }
            impl From<$ty> for CommandError {
                fn from(e: $ty) -> Self {
                    CommandError::new(e.status(), e.to_string())
                }
            }
        )*
    };
}

table! {
    // The scenario and what it plans to.
    SpecErrors => |e| INVALID;
    SpecError => |e| INVALID;
    PlanError => |e| INVALID;
    FilterError => |e| INVALID;
    SeedRangeError => |e| INVALID;
    // The assets' folder is the command's argument: one that cannot be made or written
    // (under a file, say) is the input's, as before.
    AssetsError => |e| INVALID;
    // A run that could not be carried out: its input's fault or the host's.
    RunError => |e| match e {
        RunError::Unrunnable(_) | RunError::BackendInput(_) => INVALID,
        RunError::Fs(_)
        | RunError::Manifest(_)
        | RunError::Metrics(_)
        | RunError::Child(_)
        | RunError::Start(_) => FAILED,
    };
    // The torch backend's process could not serve.
    ChildError => |e| FAILED;
    // A stored run: unreadable, it is the input's fault; its files unwritten, the host's.
    RunDirError => |e| INVALID;
    ManifestError => |e| match e {
        ManifestError::Fs(f) => fs(f),
        ManifestError::Json { .. } => INVALID,
    };
    SeedsFileError => |e| match e {
        SeedsFileError::Fs(f) => fs(f),
        SeedsFileError::Json { .. } => INVALID,
        SeedsFileError::Encode(_) => FAILED,
    };
    // The golden store: what its files say that does not fit, or a file that cannot be read,
    // is invalid input; a file that cannot be written, the host's. The same from every
    // command, and wherever a lower error carries it.
    GoldenError => |e| match e {
        GoldenError::Fs(f) => fs(f),
        GoldenError::Calibration(c) => c.status(),
        GoldenError::Audit(a) => a.status(),
        _ => INVALID,
    };
    CalibrationError => |e| match e {
        CalibrationError::Fs(f) => fs(f),
        CalibrationError::Encode(_) => FAILED,
        CalibrationError::Invalid { .. } => INVALID,
    };
    AuditRecordError => |e| match e {
        AuditRecordError::Fs(f) => fs(f),
        AuditRecordError::Json { .. } => INVALID,
    };
    AuditError => |e| INVALID;
    // A calibration's runs: none to calibrate from is the input's; a run that did not
    // complete, failed a rule of its own or gave a value that is not finite, the run's.
    CalibrateError => |e| match e {
        CalibrateError::NoRuns => INVALID,
        _ => FAILED,
    };
    StoredError => |e| match e {
        StoredError::RunDir(r) => r.status(),
        StoredError::Golden(g) => g.status(),
    };
    CombinedError => |e| match e {
        // A multi-seed run's seeds.json, read as its run.json is.
        CombinedError::Seeds(_) => INVALID,
        CombinedError::Stored(s) => s.status(),
        CombinedError::Golden(g) => g.status(),
    };
    // A history that finds no runs, or cannot read a folder.
    HistoryError => |e| match e {
        HistoryError::Golden(g) => g.status(),
        HistoryError::Walk { .. } | HistoryError::NoRuns(_) => INVALID,
    };
    // The reports could not be written.
    ReportError => |e| FAILED;
    // The matrix could not be judged: its input's fault, or a baseline's or the host's.
    PropagateError => |e| match e {
        PropagateError::Input(_) | PropagateError::Condition(_) => INVALID,
        PropagateError::Executor(e) => e.status,
        PropagateError::Baseline(_) | PropagateError::Report(_) | PropagateError::Fs(_) => FAILED,
    };
    // A repository or revision that does not fit, or git failing on this host.
    BisectError => |e| match e {
        BisectError::Input(_) => INVALID,
        BisectError::Git(_) | BisectError::Fs(_) => FAILED,
    };
    // `--rerun-failed`: the last run's combined verdict must read.
    IndexError => |e| INVALID;
    // A Ray token missing or refused is the invocation's input; the rest, the cluster's.
    RayAuthError => |e| INVALID;
    RayError => |e| match e {
        RayError::Auth { .. } => INVALID,
        _ => FAILED,
    };
    BundleError => |e| FAILED;
    Failure => |e| e.status_of();
}

/// What a command could not do, with what it was doing: the context a message adds to a lower
/// error, as a type.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    #[error("{file}: backend: {source}")]
    AssetsModel { file: PathBuf, source: ModelError },
    #[error("{file}: driver.task: {source}")]
    AssetsTask { file: PathBuf, source: TaskError },
    #[error("mock server: {0}")]
    MockServer(std::io::Error),
    #[error("the torch backend block: {0}")]
    TorchBlock(serde_json::Error),
    #[error("cannot start {}: {source}", exe.display())]
    Start {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("proxy: {0}")]
    Proxy(ProxyError),
    #[error("{}: cannot bless: its scenario {}: {source}", run.display(), file.display())]
    BlessScenario {
        run: PathBuf,
        file: PathBuf,
        source: SpecErrors,
    },
    #[error("{}: {source}", dir.display())]
    GoldenFolder {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    ReadVerdict {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("record: {0}")]
    RecordMeta(serde_json::Error),
    #[error("record: {0}")]
    RecordWrite(FsError),
    #[error("record: cannot copy the run's metrics.csv: {0}")]
    RecordCopy(std::io::Error),
    #[error("record: {0}")]
    RecordCassette(CassetteError),
    #[error("record: {0}")]
    RecordInstall(InstallError),
    #[error("{0}")]
    AuditJson(serde_json::Error),
    #[error("the combined verdict: {0}")]
    CombinedVerdict(FsError),
    #[error("cannot make the run's folder: {0}")]
    JobFolder(std::io::Error),
    #[error("packing the run directory: {0}")]
    JobPack(BundleError),
    #[error("printing the run directory: {0}")]
    JobPrint(std::io::Error),
    /// A run brought back from a Ray job that cannot be judged here.
    #[error("{}: {source}", dir.display())]
    BroughtBack { dir: PathBuf, source: StoredError },
    /// `--from-runs`: a stored run that cannot be judged.
    #[error("{}: {source}", dir.display())]
    FromRuns { dir: PathBuf, source: StoredError },
    #[error("the scenario's task crashed: {0}")]
    TaskCrashed(tokio::task::JoinError),
    #[error("collecting crashed: {0}")]
    CollectCrashed(tokio::task::JoinError),
    #[error("watching the job crashed: {0}")]
    WatchCrashed(tokio::task::JoinError),
    #[error("packing crashed: {0}")]
    PackCrashed(tokio::task::JoinError),
    #[error("the job was not submitted: {0}")]
    NotSubmitted(RayError),
    #[error("the job package: {0}")]
    Package(BundleError),
    #[error("cannot find this executable to ship it: {0}")]
    NoExecutable(std::io::Error),
    #[error("HTTP client: {0}")]
    HttpClient(reqwest::Error),
}

impl Failure {
    fn status_of(&self) -> ExitStatus {
        use Failure::*;
        match self {
            AssetsModel { .. } | AssetsTask { .. } | TorchBlock(_) | BlessScenario { .. } => {
                INVALID
            }
            GoldenFolder { .. } | FromRuns { .. } | AuditJson(_) => INVALID,
            NotSubmitted(e) => e.status(),
            MockServer(_) | Start { .. } | Proxy(_) | ReadVerdict { .. } => FAILED,
            RecordMeta(_) | RecordWrite(_) | RecordCopy(_) | RecordCassette(_)
            | RecordInstall(_) => FAILED,
            CombinedVerdict(_) | JobFolder(_) | JobPack(_) | JobPrint(_) => FAILED,
            BroughtBack { .. } => FAILED,
            TaskCrashed(_) | CollectCrashed(_) | WatchCrashed(_) | PackCrashed(_) => FAILED,
            Package(_) | NoExecutable(_) | HttpClient(_) => FAILED,
        }
    }
}

// The errors of the command layer's own modules, here so that they use this table and the
// table uses none of them.

/// Why `-E`'s text is not a filter.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FilterError {
    #[error(
        "-E `{text}`: not a filter expression at column {col} (name(TEXT), tag(TAG), \
         requires(TEXT), path(TEXT), all(), with and, or, not and parentheses)"
    )]
    Syntax { text: String, col: usize },
    #[error("-E `{0}`: empty")]
    Empty(String),
}

/// Why `run --rerun-failed` cannot tell which scenarios failed last time.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IndexError {
    #[error("cannot read {} (the last run's combined verdict): {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a combined verdict: {source}", path.display())]
    NotAnIndex {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: no `scenarios` list", path.display())]
    NoScenarios { path: PathBuf },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BundleError {
    #[error("the job's log holds no run-directory frame (the job ended before it printed one)")]
    NoFrame,
    #[error("the run-directory frame is cut short (no end line after its header)")]
    Truncated,
    #[error("the run-directory frame's header is malformed: `{0}`")]
    Header(String),
    #[error("the run-directory frame is not valid base64: {0}")]
    Base64(String),
    #[error("the run-directory frame holds {got} bytes, its header says {want}")]
    Length { want: usize, got: usize },
    #[error(
        "the run-directory frame's checksum does not match (sha256 {got}, header says {want})"
    )]
    Checksum { want: String, got: String },
    #[error("zip: {0}")]
    Zip(#[from] zip::result::ZipError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RayError {
    #[error("the Ray jobs API at {url}: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the Ray jobs API at {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("the Ray jobs API at {url} answered something unexpected: {what}")]
    Unexpected { url: String, what: String },
    /// 401 or 403: the cluster has token authentication on. Names where the token came from,
    /// never the token (nor the answer's body).
    #[error("the Ray jobs API at {url} {why}")]
    Auth {
        url: String,
        status: u16,
        why: String,
    },
}

/// A token that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RayAuthError {
    #[error("the Ray token file {path} ({from}): {source}")]
    Unreadable {
        path: PathBuf,
        from: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the Ray token file {path} ({from}) is empty")]
    Empty { path: PathBuf, from: &'static str },
    #[error("the Ray token ({from}) is not a valid HTTP header value")]
    NotAHeader { from: &'static str },
}
