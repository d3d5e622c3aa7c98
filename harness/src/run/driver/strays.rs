//! Processes an external trainer leaves behind outside its process group, and who holds a port.
//!
//! A trainer's process group is not the whole of what it starts: Ray's head processes and
//! workers, and servers they spawn (the Arctic adapter's `launch_local_server`, which runs
//! `python -m arctic_platform.rl.http_server` from a Ray worker), may run in sessions or groups
//! of their own. Every process the trainer starts inherits its environment, so the harness marks
//! the trainer's environment with a token of the run ([`TOKEN_VAR`]) and, once the trainer's
//! group is stopped, stops every process whose environment still carries that token. Linux
//! only (`/proc`); elsewhere the sweep finds nothing.

use std::path::Path;
use std::time::Duration;

pub use crate::model::rundir::Stray;

/// The environment variable that marks every process of one run.
pub const TOKEN_VAR: &str = "RLHARNESS_RUN_TOKEN";

/// How much of a command line a note keeps.
const CMDLINE_CHARS: usize = 160;

/// A token unique to this run on this host: the harness's pid, the time, and the run's name.
pub(crate) fn new_token(run_id: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos:x}-{run_id}", std::process::id())
}

/// Every live process (zombies excluded) whose environment holds `TOKEN_VAR=token`, except
/// this process.
pub fn marked(token: &str) -> Vec<Stray> {
    let needle = format!("{TOKEN_VAR}={token}");
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<Stray> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && alive(pid))
        .filter(|&pid| environ_has(pid, &needle))
        .map(|pid| Stray {
            pid,
            cmdline: cmdline(pid),
        })
        .collect();
    found.sort_by_key(|s| s.pid);
    found
}

/// Stop every process marked with `token`: TERM, up to `grace` for them to go, then KILL.
/// Returns what was found running (empty when the trainer left nothing behind).
pub(crate) async fn stop_marked(token: &str, grace: Duration) -> Vec<Stray> {
    let found = marked(token);
    if found.is_empty() {
        return found;
    }
    for s in &found {
        signal(s.pid, libc::SIGTERM);
    }
    let step = Duration::from_millis(50);
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline && !marked(token).is_empty() {
        tokio::time::sleep(step).await;
    }
    // Also whatever a TERM handler started meanwhile.
    for s in marked(token) {
        signal(s.pid, libc::SIGKILL);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < deadline && !marked(token).is_empty() {
        tokio::time::sleep(step).await;
    }
    found
}

/// The report's note for processes the sweep had to stop.
pub fn note(strays: &[Stray]) -> Option<String> {
    if strays.is_empty() {
        return None;
    }
    let list = strays
        .iter()
        .map(|s| format!("pid {} `{}`", s.pid, s.cmdline))
        .collect::<Vec<_>>()
        .join("; ");
    Some(format!(
        "the harness stopped {} process(es) the trainer left running outside its process group: {list}",
        strays.len()
    ))
}

fn signal(pid: i32, sig: libc::c_int) {
    if pid > 0 {
        // SAFETY: a plain syscall on a pid the sweep just found marked with this run's token;
        // ESRCH (already gone) is an expected outcome.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = &s[s.rfind(')')? + 1..];
            after.split_whitespace().next()?.chars().next()
        })
        .is_some_and(|state| state != 'Z' && state != 'X')
}

fn environ_has(pid: i32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
}

/// Every live process's environment, as `KEY=VALUE` strings (those this user may read).
pub(crate) fn environs() -> Vec<(i32, Vec<String>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && alive(pid))
        .filter_map(|pid| Some((pid, environ(pid)?)))
        .collect()
}

/// A process's environment, as `KEY=VALUE` strings (`None` when it is gone or unreadable).
pub(crate) fn environ(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|kv| !kv.is_empty())
            .map(|kv| String::from_utf8_lossy(kv).into_owned())
            .collect(),
    )
}

/// A process's parent (`None` when it is gone).
pub(crate) fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: state, then the parent's pid.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A process's arguments (empty when it is gone).
pub(crate) fn argv(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn cmdline(pid: i32) -> String {
    let mut s = argv(pid).join(" ");
    if s.chars().count() > CMDLINE_CHARS {
        s = s.chars().take(CMDLINE_CHARS).collect::<String>() + "…";
    }
    s
}

/// Who listens on TCP `port` (any local address, IPv4 or IPv6): `pid \`cmdline\``, or a
/// description of what could be found (the socket's owner may be another user's process).
pub(crate) fn port_holder(port: u16) -> Option<String> {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|table| listening_inodes(&table, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let owner = std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        owns_socket(pid, &inodes).then_some(pid)
    });
    Some(match owner {
        Some(pid) => format!("pid {pid} `{}`", cmdline(pid)),
        None => "a process this user cannot see (another user's, or another namespace's)".into(),
    })
}

/// The socket inodes of `/proc/net/tcp{,6}` rows that listen (state `0A`) on `port`.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|row| {
            let f: Vec<&str> = row.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            (local_port == port && *f.get(3)? == "0A").then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

fn owns_socket(pid: i32, inodes: &[u64]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| socket_inode(&l).is_some_and(|i| inodes.contains(&i)))
    })
}

fn socket_inode(link: &Path) -> Option<u64> {
    let s = link.to_str()?;
    s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_rows_are_found_by_port_and_state() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1B58 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:1B58 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 100 0 0 10 0\n   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(listening_inodes(table, 7000), vec![4242]);
        assert_eq!(listening_inodes(table, 8080), vec![4444]);
        assert!(listening_inodes(table, 9).is_empty());
        assert!(listening_inodes("garbage\nnot a row", 7000).is_empty());
    }

    #[test]
    fn socket_links_parse() {
        assert_eq!(socket_inode(Path::new("socket:[123]")), Some(123));
        assert_eq!(socket_inode(Path::new("pipe:[123]")), None);
        assert_eq!(socket_inode(Path::new("/dev/null")), None);
    }

    #[test]
    fn a_listener_of_this_process_is_named() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let holder = port_holder(port).expect("the listener is found");
        assert!(
            holder.starts_with(&format!("pid {} ", std::process::id())),
            "{holder}"
        );
        drop(l);
        assert_eq!(port_holder(port), None);
    }

    #[tokio::test]
    async fn marked_processes_are_found_and_stopped() {
        let token = new_token("unit-test");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(TOKEN_VAR, &token)
            .spawn()
            .unwrap();
        // Until the child has exec'd, /proc shows the fork's environment and command line
        // (this test binary's): wait for `sleep` itself.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = marked(&token);
            if found.iter().any(|p| p.cmdline.starts_with("sleep")) {
                break found;
            }
            assert!(std::time::Instant::now() < deadline, "{found:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, child.id() as i32);
        assert!(found[0].cmdline.starts_with("sleep 30"), "{found:?}");
        // A process without the token is never touched.
        assert!(marked("another-token").is_empty());
        let stopped = stop_marked(&token, Duration::from_secs(2)).await;
        assert_eq!(stopped, found);
        assert!(!child.wait().unwrap().success());
        assert!(marked(&token).is_empty());
        assert!(note(&stopped).unwrap().contains("stopped 1 process"));
        assert_eq!(note(&[]), None);
    }
}
