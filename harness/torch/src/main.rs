//! `rlharness-torch`: the libtorch engine behind the Arctic API, in a process of its own.
//! `rlharness run` starts it for a `backend: {kind: torch}` scenario (`--child`: one JSON
//! ready line on stdout, exit when stdin closes); `rlharness serve torch` runs it in the
//! foreground. The protocol is described in `rlharness_arctic::child`. This executable reads
//! no scenario: its parent resolves the scenario's torch backend block and passes it as
//! `--backend-json`.

#[cfg(not(feature = "torch"))]
fn main() {
    eprintln!(
        "rlharness-torch: this build has no libtorch (built without the cargo feature `torch`); {}",
        rlharness_arctic::child::BUILD_HINT
    );
    std::process::exit(rlharness_arctic::exit::ExitStatus::InvalidInput.code());
}

#[cfg(feature = "torch")]
fn main() {
    use clap::Parser;
    use rlharness_arctic::exit::ExitStatus;
    use rlharness_arctic::logging;
    keep_freed_memory();
    let args = serve::Args::parse();
    logging::init_tracing(args.verbose, false, logging::stderr_color_default());
    let status = match tokio::runtime::Runtime::new() {
        Ok(rt) => match rt.block_on(serve::serve(args)) {
            Ok(()) => ExitStatus::Passed,
            Err(e) => {
                eprintln!("rlharness-torch: {}", e.message);
                e.status
            }
        },
        Err(e) => {
            eprintln!("rlharness-torch: cannot start the async runtime: {e}");
            ExitStatus::RunFailed
        }
    };
    std::process::exit(status.code());
}

/// libtorch's CPU tensors come from glibc's malloc. By default glibc gives each thread's freed
/// tensors back to the kernel (its per-thread arenas and dynamic thresholds), so every step
/// faults the same memory in again: on the CPU flagship about 300 MB of page faults a step,
/// a fifth of the process's CPU time spent in the kernel. One arena that keeps what it frees
/// (up to glibc's largest heap allocation, 32 MiB) cuts the faults about fourfold and leaves
/// the numbers bit for bit the same (libtorch aligns every tensor to 64 bytes whatever the
/// address). Set before any other thread starts; a refused setting only costs that speed.
/// `RLHARNESS_TORCH_MALLOC=glibc` leaves glibc's defaults (to measure against them).
#[cfg(feature = "torch")]
fn keep_freed_memory() {
    if std::env::var("RLHARNESS_TORCH_MALLOC").as_deref() == Ok("glibc") {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (param, value) in [
        (libc::M_ARENA_MAX, 1),
        (libc::M_MMAP_THRESHOLD, 32 << 20),
        (libc::M_TRIM_THRESHOLD, i32::MAX),
        (libc::M_TOP_PAD, 256 << 20),
    ] {
        // SAFETY: mallopt only sets allocator parameters; it is called before any other
        // thread exists, as glibc asks.
        if unsafe { libc::mallopt(param, value) } != 1 {
            eprintln!("rlharness-torch: mallopt({param}, {value}) was refused; going on");
        }
    }
}

#[cfg(feature = "torch")]
mod serve {
    use std::path::PathBuf;

    use rlharness_arctic::child::Ready;
    use rlharness_arctic::engine::{EngineError, Runtime};
    use rlharness_arctic::exit::CommandError;
    use rlharness_arctic::server::{self, ServerOptions};
    use rlharness_arctic::torch_spec::layout::{device_map, LayoutKnobs};
    use rlharness_arctic::torch_spec::{ModelKind, TorchDevice, TorchSpec};
    use rlharness_torch::layout::EngineLayout;
    use rlharness_torch::TorchEngine;

    /// The torch Arctic server: the model of a torch backend block (`--backend-json`), or the
    /// CPU flagship's defaults. It reads no scenario file: `rlharness serve torch --scenario
    /// PATH [--set K=V]` resolves the scenario's torch block and starts this executable with
    /// it, as `rlharness run` does.
    #[derive(Debug, clap::Parser)]
    #[command(name = "rlharness-torch", version)]
    pub struct Args {
        #[arg(long, default_value = "127.0.0.1")]
        pub host: String,
        /// 0: any free port (the ready line says which).
        #[arg(long, default_value_t = 7000)]
        pub port: u16,
        /// No longer read here: refused with a pointer to `rlharness serve torch --scenario`.
        #[arg(long, hide = true)]
        pub scenario: Option<PathBuf>,
        /// The torch backend block as JSON (the fields of a scenario's `backend: {kind: torch}`
        /// block without `kind`), its paths already resolved: what `rlharness run` and
        /// `rlharness serve torch` send.
        #[arg(long)]
        pub backend_json: Option<String>,
        /// The seed (default 1; `rlharness` passes the scenario's).
        #[arg(long)]
        pub seed: Option<u64>,
        #[arg(long)]
        pub training_gpus: Option<u32>,
        #[arg(long)]
        pub sampling_gpus: Option<u32>,
        #[arg(long)]
        pub log_prob_gpus: Option<u32>,
        /// The layout: trainer and sampler on the same device (`true`, the default here) or
        /// each on its own (`false`: the trainer on the first `--training-gpus` devices, the
        /// sampler on the next `--sampling-gpus`). `--colocate` alone means `true`.
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        pub colocate: Option<bool>,
        /// Write what the engine did of the layout (each job's device, each weight sync's bytes
        /// and seconds) to this JSON file, rewritten as it changes.
        #[arg(long)]
        pub layout_record: Option<PathBuf>,
        /// Without `--backend-json`: train a fresh warm start of the default tiny model (600
        /// steps, minutes on a small CPU, cached for the next start) instead of serving the
        /// shipped one.
        #[arg(long, conflicts_with = "backend_json")]
        pub train_warm_start: bool,
        /// Started by `rlharness run`: print one JSON ready line on stdout, and exit when
        /// stdin closes.
        #[arg(long)]
        pub child: bool,
        #[arg(short, long, action = clap::ArgAction::Count)]
        pub verbose: u8,
    }

    fn spec_and_seed(args: &Args) -> Result<(TorchSpec, u64), CommandError> {
        if let Some(path) = &args.scenario {
            return Err(CommandError::invalid(format!(
                "this executable reads no scenario: run `rlharness serve torch --scenario {}` \
                 (with its --set overrides), which resolves the torch backend block and \
                 passes it here as --backend-json",
                path.display()
            )));
        }
        let seed = args.seed.unwrap_or(1);
        if let Some(json) = &args.backend_json {
            let spec: TorchSpec = serde_json::from_str(json)
                .map_err(|e| CommandError::invalid(format!("--backend-json: {e}")))?;
            return Ok((spec, seed));
        }
        Ok((default_spec(args.train_warm_start)?, seed))
    }

    /// The server without a backend block: the default tiny model from the shipped warm start
    /// (the CPU flagship's), or one trained here with `--train-warm-start`.
    fn default_spec(train: bool) -> Result<TorchSpec, CommandError> {
        use rlharness_torch::warm_start;
        let mut spec = TorchSpec {
            cache_dir: rlharness_arctic::torch_spec::user_cache_dir(),
            ..TorchSpec::default()
        };
        if train {
            eprintln!(
                "rlharness-torch: training a warm start of the default tiny model ({} steps; \
                 cached under {} for the next start)",
                spec.warm_start.steps, spec.cache_dir
            );
            return Ok(spec);
        }
        let file = warm_start::shipped_file(std::path::Path::new(&spec.cache_dir))
            .map_err(|e| CommandError::run_failed(format!("the shipped warm start: {e}")))?;
        spec.warm_start.max_operand = warm_start::SHIPPED_MAX_OPERAND;
        spec.warm_start.checkpoint = Some(file.display().to_string());
        Ok(spec)
    }

    /// What the server serves, in a line: the model's shape and the weights it starts from.
    fn serving(spec: &TorchSpec, engine: &TorchEngine) -> String {
        let info = engine.info();
        let from = match (&spec.model.kind, &spec.warm_start.checkpoint) {
            (ModelKind::Tiny, Some(c)) => {
                format!("warm start {c}")
            }
            (ModelKind::Tiny, None) => format!(
                "a warm start trained here ({})",
                if info.warm_start_cached == Some(true) {
                    "from the cache"
                } else {
                    "just now, now cached"
                }
            ),
            _ => "random initialization (seeded)".to_string(),
        };
        format!(
            "serving the {:?} model ({} parameters, {}, {}) from {from}",
            spec.model.kind, info.num_parameters, info.dtype, info.device
        )
    }

    pub async fn serve(args: Args) -> Result<(), CommandError> {
        let (spec, seed) = spec_and_seed(&args)?;
        let defaults = ServerOptions::default();
        let knobs = LayoutKnobs {
            colocate: args.colocate.unwrap_or(true),
            training_gpus: args.training_gpus.unwrap_or(defaults.training_gpus),
            sampling_gpus: args.sampling_gpus.unwrap_or(defaults.sampling_gpus),
        };
        let record = args.layout_record.clone();
        let shown_spec = spec.clone();
        // Building the model (and its warm start) is CPU-heavy: off the async threads.
        let engine = tokio::task::spawn_blocking(move || {
            let engine = TorchEngine::new(&spec, seed)?;
            // Counted once libtorch's CUDA backend is loaded (`TorchEngine::new` loads it).
            let visible = match spec.device {
                TorchDevice::Cuda => usize::try_from(tch::Cuda::device_count()).unwrap_or(0),
                TorchDevice::Cpu => 0,
            };
            let map = device_map(spec.device, knobs, visible).map_err(EngineError::bad_request)?;
            engine.with_layout(EngineLayout::from_map(knobs.colocate, map).with_record(record))
        })
        .await
        .map_err(|e| CommandError::run_failed(format!("torch backend crashed: {e}")))?
        .map_err(|e| CommandError::run_failed(format!("torch backend: {e}")))?;
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .map_err(|e| {
                CommandError::run_failed(format!("failed to bind {}:{}: {e}", args.host, args.port))
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| CommandError::run_failed(e.to_string()))?;
        let runtime = engine.runtime();
        let opts = ServerOptions {
            training_gpus: args.training_gpus.unwrap_or(defaults.training_gpus),
            sampling_gpus: args.sampling_gpus.unwrap_or(defaults.sampling_gpus),
            log_prob_gpus: args.log_prob_gpus.unwrap_or(defaults.log_prob_gpus),
            ..defaults
        };
        let serving = serving(&shown_spec, &engine);
        let (router, _handle) = server::router(std::sync::Arc::new(engine), opts);
        let url = format!("http://{addr}");
        if args.child {
            let ready = Ready { url, runtime };
            let line = serde_json::to_string(&ready)
                .map_err(|e| CommandError::run_failed(format!("ready line: {e}")))?;
            println!("{line}");
        } else {
            println!("{serving}");
            println!("{}", banner(&url, runtime));
        }
        if args.child {
            // The parent is gone (even killed): nothing is left to serve.
            tokio::spawn(async {
                parent_gone().await;
                std::process::exit(0);
            });
        }
        server::serve(listener, router, ctrl_c())
            .await
            .map_err(|e| CommandError::run_failed(format!("torch server: {e}")))
    }

    async fn ctrl_c() {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when stdin reaches its end: the parent closed it or is gone.
    async fn parent_gone() {
        use tokio::io::AsyncReadExt;
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    }

    fn banner(url: &str, runtime: Runtime) -> String {
        let Runtime {
            device,
            threads,
            torch_version,
            numerics,
        } = runtime;
        let threads = threads.unwrap_or_default();
        let version = torch_version.unwrap_or_default();
        let kernels = numerics
            .and_then(|n| {
                n.cpu_kernels
                    .map(|k| format!(", CPU kernels {}, fingerprint {}", k.isa, n.fingerprint))
            })
            .unwrap_or_default();
        format!(
            "torch Arctic server listening on {url} (device {device}, {threads} threads, torch {version}{kernels})"
        )
    }
}
