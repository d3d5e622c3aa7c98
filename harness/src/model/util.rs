//! Small helpers every layer may use: a lock that survives a panic elsewhere and hex text of
//! bytes (both from `rlharness_arctic::util`), HTML escaping, a plain-text table, the stop
//! signals, and the terminal settings of this invocation (`-q`, `--color`, GitHub
//! annotations).

use std::io::IsTerminal;
use std::sync::OnceLock;

pub(crate) use rlharness_arctic::util::{hex, lock};

/// `--color`: when the harness's output (logs, verdict lines) gets ANSI colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set to a non-empty value (no-color.org).
    #[default]
    Auto,
    /// Always, on a pipe too, whatever `NO_COLOR` says (an explicit flag wins, as in cargo).
    Always,
    /// Never.
    Never,
}

/// How this invocation talks to its terminal, set once by `app::main` from the command line
/// and the environment; library callers (tests) get the defaults: colour on a terminal only,
/// not quiet, no annotations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ui {
    /// `-q`: no progress, no notes; results, failures and errors only.
    pub quiet: bool,
    pub color: ColorChoice,
    /// `GITHUB_ACTIONS=true`: failures also as `::error` workflow commands.
    pub github: bool,
}

static UI: OnceLock<Ui> = OnceLock::new();

impl Ui {
    /// The settings `-q`, `--color` and the environment (`GITHUB_ACTIONS`) give.
    pub fn from_env(quiet: bool, color: ColorChoice) -> Ui {
        Ui {
            quiet,
            color,
            github: std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true"),
        }
    }

    /// Make these the settings of this process (the first call wins).
    pub fn install(self) {
        let _ = UI.set(self);
    }

    /// The settings of this process.
    pub fn get() -> Ui {
        UI.get().copied().unwrap_or_default()
    }

    /// Colours on a stream that is (`tty`) or is not a terminal.
    pub fn color_on(self, tty: bool) -> bool {
        match self.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }
}

/// Whether stdout gets colours (`--color`, a terminal, `NO_COLOR`).
pub(crate) fn stdout_color() -> bool {
    Ui::get().color_on(std::io::stdout().is_terminal())
}

/// Whether stderr gets colours (`--color`, a terminal, `NO_COLOR`).
pub(crate) fn stderr_color() -> bool {
    Ui::get().color_on(std::io::stderr().is_terminal())
}

static RESULTS_ON_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `run --format json`: stdout carries the one document, so each scenario's result lines go
/// to stderr (set once, before anything runs).
pub(crate) fn put_results_on_stderr() {
    RESULTS_ON_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// One line of a scenario's result: stdout, or stderr under `run --format json`.
pub(crate) fn result_line(text: &str) {
    if RESULTS_ON_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
        errln!("{text}");
    } else {
        outln!("{text}");
    }
}

/// `-q` is in force: progress and notes are not printed.
pub(crate) fn quiet() -> bool {
    Ui::get().quiet
}

/// A note for the person at the terminal (stderr), left out under `-q`.
macro_rules! note {
    ($($arg:tt)*) => {{
        if !$crate::model::util::quiet() {
            errln!($($arg)*);
        }
    }};
}
pub(crate) use note;

/// One GitHub Actions error annotation (`::error file=F,line=L,title=T::MESSAGE`) on stdout,
/// where the runner reads workflow commands, when running under GitHub Actions; nothing
/// elsewhere. `file` is made relative to the working directory (the checkout) when it is
/// inside it, as the annotation's link needs.
pub(crate) fn annotate_error(
    file: Option<&std::path::Path>,
    line: Option<usize>,
    title: &str,
    message: &str,
) {
    if !Ui::get().github {
        return;
    }
    outln!("{}", github_error(file, line, title, message));
}

/// An error message as annotations (one per line): a line that starts with `FILE:LINE[:COL]: ` (a scenario's
/// parse or validation error) points at that file and line.
pub(crate) fn annotate_message(title: &str, message: &str) {
    if !Ui::get().github {
        return;
    }
    // A scenario's errors come one a line: one annotation each, at its own line.
    if message.contains('\n') {
        for line in message.lines().filter(|l| !l.trim().is_empty()) {
            annotate_message(title, line);
        }
        return;
    }
    let mut parts = message.splitn(4, ':');
    let located = (|| {
        let file = parts.next()?;
        let line: usize = parts.next()?.trim().parse().ok()?;
        std::path::Path::new(file).is_file().then_some((file, line))
    })();
    match located {
        Some((file, line)) => {
            annotate_error(Some(std::path::Path::new(file)), Some(line), title, message)
        }
        None => annotate_error(None, None, title, message),
    }
}

/// The text of one `::error` workflow command, its properties and message escaped as the
/// Actions toolkit escapes them (`%`, CR, LF everywhere; `:` and `,` in properties too).
pub(crate) fn github_error(
    file: Option<&std::path::Path>,
    line: Option<usize>,
    title: &str,
    message: &str,
) -> String {
    fn data(s: &str) -> String {
        s.replace('%', "%25")
            .replace('\r', "%0D")
            .replace('\n', "%0A")
    }
    fn prop(s: &str) -> String {
        data(s).replace(':', "%3A").replace(',', "%2C")
    }
    let mut props = Vec::new();
    if let Some(f) = file {
        let rel = std::env::current_dir()
            .ok()
            .and_then(|cwd| f.strip_prefix(&cwd).ok().map(std::path::Path::to_path_buf))
            .unwrap_or_else(|| f.to_path_buf());
        props.push(format!("file={}", prop(&rel.display().to_string())));
        if let Some(l) = line {
            props.push(format!("line={l}"));
        }
    }
    props.push(format!("title={}", prop(title)));
    format!("::error {}::{}", props.join(","), data(message))
}

/// A plain-text table for a terminal: columns padded to their widest cell, two spaces
/// apart, the columns flagged in `right` aligned right (numbers); no trailing spaces.
pub(crate) fn plain_table(header: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let cols = header.len();
    let width = |c: usize| {
        rows.iter()
            .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
            .chain([header[c].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..cols).map(width).collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (c, cell) in cells.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if c > 0 {
                s.push_str("  ");
            }
            if right.get(c).copied().unwrap_or(false) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

/// Text made safe inside HTML elements and attribute values.
pub(crate) fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// Completes when the process is asked to stop: Ctrl-C (SIGINT) or, on Unix, SIGTERM (what
/// `timeout`, CI runners and Kubernetes send) or SIGHUP (the terminal or the SSH session that
/// started the run went away). Returns the signal's name. The handlers are installed at the
/// first poll and stay installed, so a second signal is not fatal either: the caller finishes
/// its reports and exits with its own status.
pub(crate) async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            return tokio::select! {
                Ok(()) = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
                _ = hup.recv() => "SIGHUP",
            };
        }
    }
    match tokio::signal::ctrl_c().await {
        Ok(()) => "SIGINT",
        Err(_) => std::future::pending().await,
    }
}

/// An error message that names the node it is about, relative to the node being deserialized
/// (`` at `env.FOO`: message ``): the scenario loader (`scenario::de`) points the error there.
/// Inside a tagged enum, which serde buffers, errors have no position, and a message alone can
/// name the wrong node.
pub(crate) fn at_key(rel: &str, message: impl std::fmt::Display) -> String {
    format!("at `{rel}`: {message}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn plain_tables_pad_columns_and_align_numbers_right() {
        let t = super::plain_table(
            &["rule", "n"],
            &[
                vec!["critic/rewards/mean".into(), "4".into()],
                vec!["ppo_kl".into(), "12".into()],
            ],
            &[false, true],
        );
        assert_eq!(
            t,
            "rule                  n\ncritic/rewards/mean   4\nppo_kl               12"
        );
    }

    use super::*;

    #[test]
    fn github_annotations_escape_their_properties_and_message() {
        let line = github_error(
            Some(std::path::Path::new("scenarios/a,b.yaml")),
            Some(12),
            "golden:reward: regressed",
            "50% lower\nat step 3",
        );
        assert_eq!(
            line,
            "::error file=scenarios/a%2Cb.yaml,line=12,title=golden%3Areward%3A regressed::50%25 \
             lower%0Aat step 3"
        );
        assert_eq!(github_error(None, Some(3), "t", "m"), "::error title=t::m");
    }

    #[test]
    fn color_follows_the_flag_before_the_terminal() {
        let ui = |color| Ui {
            color,
            ..Ui::default()
        };
        assert!(ui(ColorChoice::Always).color_on(false));
        assert!(!ui(ColorChoice::Never).color_on(true));
        assert!(!ui(ColorChoice::Auto).color_on(false));
    }

    #[test]
    fn helpers() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(
            html_escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        let m = std::sync::Arc::new(std::sync::Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
