//! `rlharness proxy`: the recording proxy in the foreground, in front of a backend.

use std::time::Duration;

use crate::app::cli::ProxyArgs;
use crate::app::errors::Failure;
use crate::model::error::{CommandError, ExitStatus};
use crate::run::proxy::{self, ProxyConfig};

pub(crate) async fn proxy(args: ProxyArgs) -> Result<ExitStatus, CommandError> {
    let cfg = ProxyConfig {
        upstream: args.upstream.clone(),
        record_dir: args.record.clone(),
        body_limit: args.body_limit,
        request_timeout: Duration::from_secs(args.timeout_s),
    };
    proxy::run_standalone(&args.listen, cfg)
        .await
        .map_err(Failure::Proxy)?;
    Ok(ExitStatus::Passed)
}
