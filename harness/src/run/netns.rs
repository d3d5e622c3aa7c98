//! A network namespace per run, so that runs whose trainer dials a fixed address (the Arctic
//! adapter's `localhost:7000`) can go side by side on one host.
//!
//! The trainer runs under `unshare --net` (with `--map-root-user` when the harness is not
//! root), through `rlharness netns-exec`: inside the new namespace it brings the loopback up,
//! listens on the fixed address, starts the trainer and carries each connection to a Unix
//! socket. Unix sockets are reached by path, across namespaces: on the host, a [`Bridge`]
//! listening there carries the bytes on to the run's recording proxy, which listens on an
//! ephemeral port of the host's loopback. The backend, the proxy and the harness stay in the
//! host's namespace; only the trainer and what it starts (Ray, verl's workers) are inside.
//! Everything the trainer starts stays in its process group and carries the run's token, so
//! the run's teardown finds it as before (driver/strays.rs).
//!
//! Where the host allows no namespace (no `unshare`, no root and no unprivileged user
//! namespaces, or [`OFF_VAR`] set), [`side_by_side`] says why and the runs go one at a time.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::run::driver::command::TrainerLaunch;

/// Set (non-empty) to never use a namespace: runs on a fixed address go one at a time.
pub(crate) const OFF_VAR: &str = "RLHARNESS_NO_NETNS";

/// How this host gives a run a network namespace: the `unshare` command line to prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netns {
    prefix: Vec<String>,
}

impl Netns {
    /// Find out whether a trainer can run in a namespace of its own here: run the whole chain
    /// once (`unshare`, then `rlharness netns-exec` bringing the loopback up and listening on
    /// the fixed address) with `true` as the trainer. The error says why not.
    pub fn probe(fixed: &str) -> Result<Netns, String> {
        if std::env::var_os(OFF_VAR).is_some_and(|v| !v.is_empty()) {
            return Err(format!("{OFF_VAR} is set"));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let mut prefix = vec!["unshare".to_string(), "--net".to_string()];
        if !root {
            prefix.push("--map-root-user".into());
        }
        let ns = Netns { prefix };
        let dir = tempfile::Builder::new()
            .prefix("rlh-ns.")
            .tempdir()
            .map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let launch = ns.command(fixed, &dir.path().join("s"), "true", &[]);
        let out = std::process::Command::new(&launch[0])
            .args(&launch[1..])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot start `{}`: {e}", launch[0]))?;
        if out.status.success() {
            Ok(ns)
        } else {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            Err(format!(
                "`{}` failed ({}){}",
                ns.prefix.join(" "),
                out.status,
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                }
            ))
        }
    }

    /// The command line that runs `program args` in a namespace of its own, its `fixed`
    /// address carried to the Unix socket `bridge`.
    fn command(&self, fixed: &str, bridge: &Path, program: &str, args: &[String]) -> Vec<String> {
        let mut c = self.prefix.clone();
        c.extend([
            "--".to_string(),
            crate::run::plan::launch::harness_bin(),
            "netns-exec".into(),
            "--listen".into(),
            fixed.into(),
            "--bridge".into(),
            bridge.display().to_string(),
            "--".into(),
            program.into(),
        ]);
        c.extend(args.iter().cloned());
        c
    }

    /// Make a trainer's launch run in a namespace of its own (see [`Netns::command`]).
    pub(crate) fn wrap(&self, launch: &mut TrainerLaunch, fixed: &str, bridge: &Path) {
        let program = launch.program.display().to_string();
        let all = self.command(fixed, bridge, &program, &launch.args);
        launch.program = PathBuf::from(&all[0]);
        launch.args = all[1..].to_vec();
    }

    /// What a run's report says about it.
    pub(crate) fn note(&self, fixed: &str) -> String {
        format!(
            "the trainer ran in a network namespace of its own (`{}`): its {fixed} was carried \
             to the recording proxy on the host, so runs on this fixed address could go side \
             by side",
            self.prefix.join(" ")
        )
    }
}

/// The fixed address a scenario's trainer dials (a command driver's proxy address not on port
/// 0, with a backend behind it), or None.
pub(crate) fn fixed_address(s: &crate::scenario::Scenario) -> Option<String> {
    use crate::run::driver::DriverSpec;
    let addr = match &s.driver {
        DriverSpec::Command(c) => c
            .proxy_listen
            .clone()
            .unwrap_or_else(|| crate::run::driver::command::ARCTIC_CLIENT_ADDR.to_string()),
        DriverSpec::Builtin(_) => return None,
    };
    (!addr.ends_with(":0") && !matches!(s.backend, crate::run::backend::BackendSpec::None))
        .then_some(addr)
}

/// [`side_by_side`] for runs of scenario `s`.
pub(crate) fn for_scenario(
    s: &crate::scenario::Scenario,
    jobs: usize,
    what: &str,
) -> (usize, Option<Netns>) {
    side_by_side(fixed_address(s).as_deref(), jobs, what)
}

/// How many runs of a scenario whose trainer dials `fixed` (None: an ephemeral address) may go
/// side by side, and the namespace each then needs. `what` names the runs in the note that
/// says why they go one at a time, or how they go side by side.
pub(crate) fn side_by_side(fixed: Option<&str>, jobs: usize, what: &str) -> (usize, Option<Netns>) {
    let jobs = jobs.max(1);
    let Some(fixed) = fixed else {
        return (jobs, None);
    };
    if jobs == 1 {
        return (1, None);
    }
    match Netns::probe(fixed) {
        Ok(ns) => {
            crate::model::util::note!(
                "{what}: the trainer dials the fixed address {fixed}; each run gets a network \
                 namespace of its own (`{}`), {jobs} side by side",
                ns.prefix.join(" ")
            );
            (jobs, Some(ns))
        }
        Err(why) => {
            crate::model::util::note!(
                "{what}: the trainer dials the fixed address {fixed}, and this host gives a run \
                 no network namespace of its own ({why}): one run at a time"
            );
            (1, None)
        }
    }
}

/// Where a command trainer's proxy listens (`listen`, its `proxy_listen`), and the fixed address
/// its trainer dials in a namespace of its own, if it runs in one: there the trainer's address
/// is its own, so the proxy takes a free port on the host and a [`Bridge`] carries the
/// trainer's connections to it.
pub(crate) fn proxy_listen(netns: Option<&Netns>, listen: String) -> (String, Option<String>) {
    match netns {
        Some(_) if !listen.ends_with(":0") => ("127.0.0.1:0".to_string(), Some(listen)),
        _ => (listen, None),
    }
}

/// The host's end: a Unix socket in a temp dir of its own, each connection carried on to
/// `to` (the run's recording proxy). Stops when dropped.
pub(crate) struct Bridge {
    pub(crate) path: PathBuf,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Bridge {
    pub(crate) fn start(to: SocketAddr) -> std::io::Result<Bridge> {
        // A short path: a Unix socket's path has at most 107 bytes.
        let dir = tempfile::Builder::new().prefix("rlh-ns.").tempdir()?;
        let path = dir.path().join("s");
        let listener = tokio::net::UnixListener::bind(&path)?;
        let task = tokio::spawn(async move {
            while let Ok((mut inside, _)) = listener.accept().await {
                tokio::spawn(async move {
                    match tokio::net::TcpStream::connect(to).await {
                        Ok(mut proxy) => {
                            let _ = tokio::io::copy_bidirectional(&mut inside, &mut proxy).await;
                        }
                        Err(e) => {
                            tracing::warn!("netns bridge: cannot reach the proxy at {to}: {e}")
                        }
                    }
                });
            }
        });
        Ok(Bridge {
            path,
            task,
            _dir: dir,
        })
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `rlharness netns-exec`: inside the new namespace, bring the loopback up; with `carry`
/// (listen, bridge), listen on that address and carry each connection to the Unix socket
/// `bridge`; start `command` and wait for it; then end as it ended (its exit code, or its signal
/// raised again).
pub fn exec_inside(
    carry: Option<(&str, &Path)>,
    command: &[String],
) -> Result<i32, NetnsExecError> {
    let io = |what: String| move |source| NetnsExecError::Io { what, source };
    let Some((program, args)) = command.split_first() else {
        return Err(NetnsExecError::NoCommand);
    };
    loopback_up()?;
    let listener = match carry {
        Some((listen, bridge)) => Some((
            TcpListener::bind(listen).map_err(io(format!("cannot bind {listen}")))?,
            bridge.to_path_buf(),
        )),
        None => None,
    };
    let mut child = std::process::Command::new(program)
        .args(args)
        .spawn()
        .map_err(io(format!("cannot start `{program}`")))?;
    if let Some((listener, bridge)) = listener {
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let bridge = bridge.clone();
                std::thread::spawn(move || carry_one(conn, &bridge));
            }
        });
    }
    let status = child
        .wait()
        .map_err(io(format!("waiting for `{program}`")))?;
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        // End as the trainer ended, so the harness reads the same signal.
        // SAFETY: resetting a signal to its default action and raising it on ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return Ok(128 + sig);
    }
    Ok(status.code().unwrap_or(1))
}

/// One connection: both directions copied until each side ends.
fn carry_one(tcp: TcpStream, bridge: &Path) {
    let Ok(unix) = UnixStream::connect(bridge) else {
        return;
    };
    let (Ok(tcp_w), Ok(unix_r)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || pump(tcp, unix, |u| u.shutdown(Shutdown::Write)));
    pump(unix_r, tcp_w, |t| t.shutdown(Shutdown::Write));
    let _ = up.join();
}

fn pump<R: Read, W: Write>(mut from: R, mut to: W, close: impl FnOnce(&W) -> std::io::Result<()>) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = close(&to);
}

/// Why `netns-exec` could not run its command.
#[derive(Debug, thiserror::Error)]
pub enum NetnsExecError {
    #[error("netns-exec: no command to run")]
    NoCommand,
    #[error("netns-exec: {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// Bring the namespace's loopback up (a new network namespace starts with `lo` down).
fn loopback_up() -> Result<(), NetnsExecError> {
    let failed = |what: &str| NetnsExecError::Io {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: a plain socket for the interface ioctls, closed below; `ifreq` is zeroed and
    // holds the NUL-terminated name "lo".
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            return Err(failed("socket"));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut result = Ok(());
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) < 0 {
            result = Err(failed("reading lo's flags"));
        } else {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) < 0 {
                result = Err(failed("bringing lo up"));
            }
        }
        libc::close(fd);
        result
    }
}
