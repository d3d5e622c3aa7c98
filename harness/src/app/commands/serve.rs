//! `rlharness serve mock|torch`: a backend server in the foreground.

use std::path::Path;

use crate::app::cli::{ServeArgs, ServeKind};
use crate::app::errors::Failure;
use crate::model::error::{CommandError, ExitStatus};
use crate::run::backend::{child, BackendSpec};
use crate::scenario::Scenario;
use rlharness_arctic::mock::{self, MockScript};

/// The scenario a `serve` or `proxy` command takes its settings from, if one is named.
fn load_optional_scenario(
    path: Option<&Path>,
    set: &[String],
) -> Result<Option<Scenario>, CommandError> {
    match path {
        None => Ok(None),
        Some(p) => crate::run::plan::load_checked(p, set)
            .map(Some)
            .map_err(CommandError::from),
    }
}

pub(crate) async fn serve(args: ServeArgs) -> Result<ExitStatus, CommandError> {
    let scenario = load_optional_scenario(args.scenario.as_deref(), &args.set)?;
    let seed = scenario.as_ref().map_or(1, |s| s.seed);
    match args.kind {
        ServeKind::Mock if args.train_warm_start => Err(CommandError::invalid(
            "--train-warm-start is an option of `serve torch`: the mock has no weights",
        )),
        ServeKind::Mock => {
            let script = match scenario.map(|s| s.backend) {
                None => MockScript::default(),
                Some(BackendSpec::Mock(script)) => script,
                Some(other) => {
                    return Err(CommandError::invalid(format!(
                        "`serve mock` needs a scenario with a mock backend, not {other:?}"
                    )))
                }
            };
            mock::serve_mock_standalone(&args.host, args.port, script, seed)
                .await
                .map_err(Failure::MockServer)?;
            Ok(ExitStatus::Passed)
        }
        ServeKind::Torch => serve_torch(args, scenario),
    }
}

/// `serve torch`: the `rlharness-torch` executable in the foreground (it alone links
/// libtorch), with the same options. The executable reads no scenario: the scenario's torch
/// block, its paths resolved beside the scenario, goes to it as `--backend-json`, with the
/// scenario's seed, as `rlharness run` hands it to its child.
fn serve_torch(args: ServeArgs, scenario: Option<Scenario>) -> Result<ExitStatus, CommandError> {
    let torch = match scenario {
        None => None,
        Some(s) => match s.backend {
            BackendSpec::Torch(spec) => {
                let mut spec = spec.beside(&s.path);
                // A server on its own caches under the user's cache folder, not the working
                // directory, unless the scenario names a folder.
                if spec.cache_dir == rlharness_arctic::torch_spec::DEFAULT_CACHE_DIR {
                    spec.cache_dir = rlharness_arctic::torch_spec::user_cache_dir();
                }
                Some((spec, s.seed))
            }
            other => {
                return Err(CommandError::invalid(format!(
                    "{}: `serve torch` needs a scenario with a torch backend, not {other:?}",
                    s.path.display()
                )))
            }
        },
    };
    let exe = child::locate()?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["--host", &args.host, "--port", &args.port.to_string()]);
    if let Some((spec, seed)) = torch {
        let json = serde_json::to_string(&spec).map_err(Failure::TorchBlock)?;
        cmd.args(["--backend-json", &json, "--seed", &seed.to_string()]);
    }
    if args.train_warm_start {
        cmd.arg("--train-warm-start");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let source = cmd.exec();
        Err(Failure::Start { exe, source }.into())
    }
    #[cfg(not(unix))]
    {
        let status = cmd
            .status()
            .map_err(|source| Failure::Start { exe, source })?;
        Ok(if status.success() {
            ExitStatus::Passed
        } else {
            ExitStatus::RunFailed
        })
    }
}
