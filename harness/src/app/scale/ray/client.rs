//! The Ray Jobs REST API of one cluster ([`RayClient`]): submit, status, logs, stop, packages;
//! its errors ([`RayError`]) and a job's state ([`JobInfo`]).

use std::time::Duration;

use serde_json::Value;

use crate::app::errors::Failure;
pub use crate::app::errors::RayError;
use crate::app::scale::ray_auth::RayToken;
use crate::model::error::CommandError;

impl RayError {
    fn auth(url: &str, status: u16, token: Option<&RayToken>) -> RayError {
        let why = match (status, token) {
            (401, None) => "answered 401 Unauthorized: the cluster has token authentication on \
                            and no token was sent; give it with --ray-token-file PATH or \
                            RAY_AUTH_TOKEN (docs/scale-out.md)"
                .to_string(),
            (401, Some(t)) => format!(
                "answered 401 Unauthorized to the token from {} (docs/scale-out.md)",
                t.origin()
            ),
            (_, Some(t)) => format!(
                "refused the token from {} ({status} Forbidden): it is not this cluster's token",
                t.origin()
            ),
            (_, None) => format!(
                "answered {status} Forbidden and no token was sent; give it with \
                 --ray-token-file PATH or RAY_AUTH_TOKEN (docs/scale-out.md)"
            ),
        };
        RayError::Auth {
            url: url.into(),
            status,
            why,
        }
    }
}

/// A job's state as the API reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobInfo {
    /// PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED.
    pub(crate) status: String,
    pub(crate) message: Option<String>,
}

impl JobInfo {
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "STOPPED" | "SUCCEEDED" | "FAILED")
    }
}

/// The Ray Jobs REST API of one cluster. Its `Debug` shows the token as `<redacted>`.
#[derive(Clone, Debug)]
pub struct RayClient {
    base: String,
    http: reqwest::Client,
    /// Sent as `Authorization: Bearer ...` with every request (token authentication).
    token: Option<RayToken>,
}

impl RayClient {
    pub fn new(address: &str) -> Result<RayClient, CommandError> {
        let base = address.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(CommandError::invalid(format!(
                "--address {address}: the Ray dashboard's address, e.g. http://HEAD:8265 \
                 (plain http; this build speaks no TLS)"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .build()
            .map_err(Failure::HttpClient)?;
        Ok(RayClient {
            base,
            http,
            token: None,
        })
    }

    /// The same client, sending `token` with every request.
    pub fn with_token(mut self, token: Option<RayToken>) -> RayClient {
        self.token = token;
        self
    }

    /// A request to the API, with the token's `Authorization` header when there is one.
    pub(super) fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        match &self.token {
            Some(t) => req.header(reqwest::header::AUTHORIZATION, t.header()),
            None => req,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder, url: &str) -> Result<String, RayError> {
        let resp = req.send().await.map_err(|source| RayError::Http {
            url: url.into(),
            source,
        })?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(RayError::auth(url, status, self.token.as_ref()));
        }
        let body = resp.text().await.map_err(|source| RayError::Http {
            url: url.into(),
            source,
        })?;
        if !(200..300).contains(&status) {
            let body: String = body.chars().take(2000).collect();
            return Err(RayError::Status {
                url: url.into(),
                status,
                body,
            });
        }
        Ok(body)
    }

    fn json(url: &str, body: &str) -> Result<Value, RayError> {
        serde_json::from_str(body).map_err(|e| RayError::Unexpected {
            url: url.into(),
            what: format!(
                "not JSON ({e}): {}",
                body.chars().take(200).collect::<String>()
            ),
        })
    }

    /// Upload a `working_dir` package unless the cluster has it; returns its `gcs://` URI.
    pub(crate) async fn ensure_package(
        &self,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<String, RayError> {
        let url = format!("{}/api/packages/gcs/{name}", self.base);
        match self
            .send(self.request(reqwest::Method::GET, &url), &url)
            .await
        {
            Ok(_) => {}
            Err(RayError::Status { status: 404, .. }) => {
                self.send(self.request(reqwest::Method::PUT, &url).body(bytes), &url)
                    .await?;
            }
            Err(e) => return Err(e),
        }
        Ok(format!("gcs://{name}"))
    }

    /// Submit a job (`POST /api/jobs/`); returns its submission id.
    pub(crate) async fn submit(&self, body: &Value) -> Result<String, RayError> {
        let url = format!("{}/api/jobs/", self.base);
        let text = self
            .send(self.request(reqwest::Method::POST, &url).json(body), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        v.get("submission_id")
            .or_else(|| v.get("job_id"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| RayError::Unexpected {
                url,
                what: format!("no submission_id in {text}"),
            })
    }

    pub(crate) async fn status(&self, id: &str) -> Result<JobInfo, RayError> {
        let url = format!("{}/api/jobs/{id}", self.base);
        let text = self
            .send(self.request(reqwest::Method::GET, &url), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        let status = v
            .get("status")
            .and_then(Value::as_str)
            .ok_or_else(|| RayError::Unexpected {
                url: url.clone(),
                what: format!(
                    "no status in {}",
                    text.chars().take(300).collect::<String>()
                ),
            })?
            .to_string();
        Ok(JobInfo {
            status,
            message: v.get("message").and_then(Value::as_str).map(str::to_string),
        })
    }

    pub(crate) async fn logs(&self, id: &str) -> Result<String, RayError> {
        let url = format!("{}/api/jobs/{id}/logs", self.base);
        let text = self
            .send(self.request(reqwest::Method::GET, &url), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        Ok(v.get("logs")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string())
    }

    /// The command that stops a job by hand (Ray's CLI sends a token only with
    /// `RAY_AUTH_MODE=token`).
    pub(super) fn stop_command(&self, id: &str) -> String {
        let mut c = format!("`ray job stop {id} --address {}`", self.base);
        if self.token.is_some() {
            c.push_str(" with RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN");
        }
        c
    }

    /// `POST /api/jobs/{id}/stop`: whether a running job was told to stop.
    pub async fn stop(&self, id: &str) -> Result<bool, RayError> {
        let url = format!("{}/api/jobs/{id}/stop", self.base);
        let text = self
            .send(self.request(reqwest::Method::POST, &url), &url)
            .await?;
        let v = Self::json(&url, &text)?;
        Ok(v.get("stopped").and_then(Value::as_bool).unwrap_or(false))
    }
}
