//! The token of a Ray cluster with token authentication on (Ray 2.60: `RAY_AUTH_MODE=token`).
//! The dashboard, and so the jobs API, then wants `Authorization: Bearer <token>` on every
//! request but a few public ones (401 without it, 403 with a wrong one).
//!
//! Where the submitter's token comes from, first found wins:
//! 1. `--ray-token-file PATH`;
//! 2. `RAY_AUTH_TOKEN` (the variable Ray itself reads first);
//! 3. the file `RAY_AUTH_TOKEN_PATH` names (Ray's second);
//! 4. `~/.ray/auth_token` (Ray's default file), only with `RAY_AUTH_MODE=token`: Ray's own job
//!    client sends that file's token only then, and neither does the harness send a token
//!    nobody asked it to send to an address.
//!
//! Surrounding whitespace is dropped, as Ray does. The token is never shown: its `Debug` is
//! redacted, errors name where it came from, never what it is, and the header is marked
//! sensitive.

use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::app::errors::RayAuthError;
use reqwest::header::HeaderValue;

/// A Ray cluster's authentication token, with where it came from. Shown as `<redacted>`.
#[derive(Clone)]
pub struct RayToken {
    secret: String,
    from: &'static str,
}

impl fmt::Debug for RayToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RayToken")
            .field("secret", &"<redacted>")
            .field("from", &self.from)
            .finish()
    }
}

impl RayToken {
    /// A token given as text (`from` says where, e.g. "RAY_AUTH_TOKEN").
    pub fn new(secret: &str, from: &'static str) -> Result<Option<RayToken>, RayAuthError> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Ok(None);
        }
        HeaderValue::from_str(&format!("Bearer {secret}"))
            .map_err(|_| RayAuthError::NotAHeader { from })?;
        Ok(Some(RayToken {
            secret: secret.to_string(),
            from,
        }))
    }

    /// The token in a file (an empty file is an error).
    pub fn from_file(path: &Path, from: &'static str) -> Result<RayToken, RayAuthError> {
        let text = std::fs::read_to_string(path).map_err(|source| RayAuthError::Unreadable {
            path: path.to_path_buf(),
            from,
            source,
        })?;
        RayToken::new(&text, from)?.ok_or_else(|| RayAuthError::Empty {
            path: path.to_path_buf(),
            from,
        })
    }

    /// Where the token came from ("--ray-token-file", "RAY_AUTH_TOKEN", ...).
    pub fn origin(&self) -> &'static str {
        self.from
    }

    /// The `Authorization` header's value, marked sensitive (left out of reqwest's debug output).
    pub(crate) fn header(&self) -> HeaderValue {
        // Checked in `new`.
        let mut v = HeaderValue::from_str(&format!("Bearer {}", self.secret))
            .unwrap_or_else(|_| HeaderValue::from_static(""));
        v.set_sensitive(true);
        v
    }

    /// The submitter's token: `--ray-token-file`, else the environment as Ray reads it (see
    /// the module's doc). `env` reads a variable, `home` is the user's home directory.
    pub fn find(
        flag: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        home: Option<PathBuf>,
    ) -> Result<Option<RayToken>, RayAuthError> {
        if let Some(path) = flag {
            return RayToken::from_file(path, "--ray-token-file").map(Some);
        }
        if let Some(t) = env("RAY_AUTH_TOKEN") {
            if let Some(t) = RayToken::new(&t, "RAY_AUTH_TOKEN")? {
                return Ok(Some(t));
            }
        }
        if let Some(p) = env("RAY_AUTH_TOKEN_PATH").filter(|p| !p.is_empty()) {
            return RayToken::from_file(Path::new(&p), "RAY_AUTH_TOKEN_PATH").map(Some);
        }
        let token_mode = env("RAY_AUTH_MODE").is_some_and(|m| m.eq_ignore_ascii_case("token"));
        match home.map(|h| h.join(".ray").join("auth_token")) {
            Some(file) if token_mode && file.is_file() => {
                RayToken::from_file(&file, "~/.ray/auth_token with RAY_AUTH_MODE=token").map(Some)
            }
            _ => Ok(None),
        }
    }

    /// [`RayToken::find`] with this process's environment and `HOME`.
    pub fn from_environment(flag: Option<&Path>) -> Result<Option<RayToken>, RayAuthError> {
        RayToken::find(
            flag,
            |k| std::env::var(k).ok(),
            std::env::var_os("HOME").map(PathBuf::from),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn find_with(
        flag: Option<&Path>,
        vars: &[(&str, &str)],
        home: &Path,
    ) -> Result<Option<RayToken>, RayAuthError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RayToken::find(flag, |k| vars.get(k).cloned(), Some(home.to_path_buf()))
    }

    #[test]
    fn the_token_is_looked_up_in_rays_order_and_never_shown() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".ray")).unwrap();
        std::fs::write(tmp.path().join(".ray/auth_token"), "home-secret\n").unwrap();
        let path = tmp.path().join("path-token");
        std::fs::write(&path, "  path-secret \n").unwrap();
        let flag = tmp.path().join("flag-token");
        std::fs::write(&flag, "flag-secret").unwrap();
        let p = path.to_str().unwrap();
        let all = [
            ("RAY_AUTH_TOKEN", "env-secret"),
            ("RAY_AUTH_TOKEN_PATH", p),
            ("RAY_AUTH_MODE", "token"),
        ];
        let secret = |t: Option<RayToken>| t.map(|t| t.secret);
        let home = tmp.path();
        assert_eq!(
            secret(find_with(Some(&flag), &all, home).unwrap()).as_deref(),
            Some("flag-secret")
        );
        assert_eq!(
            secret(find_with(None, &all, home).unwrap()).as_deref(),
            Some("env-secret")
        );
        assert_eq!(
            secret(find_with(None, &all[1..], home).unwrap()).as_deref(),
            Some("path-secret")
        );
        assert_eq!(
            secret(find_with(None, &all[2..], home).unwrap()).as_deref(),
            Some("home-secret")
        );
        // Without RAY_AUTH_MODE=token the user's default file is not sent anywhere.
        assert!(find_with(None, &[], home).unwrap().is_none());
        assert!(find_with(None, &[("RAY_AUTH_TOKEN", " ")], home)
            .unwrap()
            .is_none());
        let t = find_with(None, &all, home).unwrap().unwrap();
        let shown = format!("{t:?} {:?}", t.header());
        assert!(!shown.contains("env-secret"), "{shown}");
        assert!(t.header().is_sensitive());
    }

    #[test]
    fn a_token_file_that_cannot_be_read_says_which_without_its_content() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope");
        let e = find_with(Some(&missing), &[], tmp.path()).unwrap_err();
        assert!(e.to_string().contains("--ray-token-file"), "{e}");
        let empty = tmp.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let e = find_with(
            None,
            &[("RAY_AUTH_TOKEN_PATH", empty.to_str().unwrap())],
            tmp.path(),
        )
        .unwrap_err();
        assert!(matches!(e, RayAuthError::Empty { .. }), "{e}");
        let e = RayToken::new("bad\nsecret", "RAY_AUTH_TOKEN").unwrap_err();
        assert!(!e.to_string().contains("bad"), "{e}");
    }
}
