//! The part of MLflow's tracking REST API (`/api/2.0/mlflow/…`) that tune uses, blocking.

use std::time::Duration;

use serde_json::{json, Value as Json};

use super::target::{self, Credentials, TlsCheck};

/// An HTTP client that checks TLS certificates as `tls` says.
fn agent(tls: &TlsCheck, timeout: Duration) -> ureq::Agent {
    let config = ureq::tls::TlsConfig::builder();
    let config = match tls {
        TlsCheck::Default => config,
        TlsCheck::Bundle { certs, .. } => {
            config.root_certs(ureq::tls::RootCerts::new_with_certs(certs))
        }
        TlsCheck::Insecure => config.disable_verification(true),
    };
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .tls_config(config.build())
        .build()
        .into()
}

/// What went wrong talking to MLflow.
#[derive(Debug, thiserror::Error)]
pub enum MlflowError {
    /// No answer: refused, reset, timed out, name not found. Worth trying again later.
    #[error("MLflow at {url} does not answer: {detail}")]
    Unreachable { url: String, detail: String },
    /// An answer, but not from MLflow's tracking API (a web page, another service).
    #[error("{url} does not answer as an MLflow tracking server: {detail}")]
    NotMlflow { url: String, detail: String },
    /// The server wants credentials, or refused the ones given (HTTP 401 or 403): `sent`
    /// says which were sent, as MLflow's clients take them from the environment, and `remedy`
    /// what to do.
    #[error("MLflow at {url} refused {sent} (HTTP {status} to {what}): {remedy}")]
    Unauthorized {
        url: String,
        what: String,
        status: u16,
        sent: String,
        remedy: &'static str,
    },
    /// The tracking URI, its Databricks profile or the TLS settings cannot be used.
    #[error("MLflow {uri}: {problem}")]
    Settings { uri: String, problem: String },
    /// The server's TLS certificate was not accepted.
    #[error(
        "MLflow at {url}: TLS: {detail} (checked against {checked}); give the CA bundle that \
         signed its certificate in MLFLOW_TRACKING_SERVER_CERT_PATH, or set \
         MLFLOW_TRACKING_INSECURE_TLS=true to skip the check"
    )]
    Tls {
        url: String,
        detail: String,
        checked: String,
    },
    /// MLflow refused a request; `busy` when it may succeed later (HTTP 429 and 5xx).
    #[error("MLflow at {url} answered {what}: {status} {code}: {message}")]
    Refused {
        url: String,
        what: String,
        status: u16,
        code: String,
        message: String,
        busy: bool,
    },
}

impl MlflowError {
    /// Whether trying again later may succeed (the server is down or overloaded).
    pub fn is_transient(&self) -> bool {
        match self {
            MlflowError::Unreachable { .. } => true,
            MlflowError::NotMlflow { .. }
            | MlflowError::Unauthorized { .. }
            | MlflowError::Settings { .. }
            | MlflowError::Tls { .. } => false,
            MlflowError::Refused { busy, .. } => *busy,
        }
    }

    fn code(&self) -> Option<&str> {
        match self {
            MlflowError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// A run as `runs/search` and `runs/get` give it: its id, status and tags.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    pub run_id: String,
    pub status: String,
    pub tags: Vec<(String, String)>,
}

impl RunInfo {
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn from_json(run: &Json) -> Option<RunInfo> {
        let tags = run["data"]["tags"]
            .as_array()
            .map(|tags| {
                tags.iter()
                    .filter_map(|t| Some((t["key"].as_str()?.into(), t["value"].as_str()?.into())))
                    .collect()
            })
            .unwrap_or_default();
        Some(RunInfo {
            run_id: run["info"]["run_id"].as_str()?.to_string(),
            status: run["info"]["status"].as_str().unwrap_or("").to_string(),
            tags,
        })
    }
}

/// One metric point of `runs/log-batch`.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricPoint {
    pub key: String,
    pub value: f64,
    /// Unix milliseconds.
    pub timestamp: u64,
    pub step: u64,
}

/// A tracking server at a base URL, with the credentials and TLS settings MLflow's own clients
/// take from the environment (`src/tracking/mlflow/target.rs`).
#[derive(Debug, Clone)]
pub struct MlflowClient {
    base: String,
    credentials: Credentials,
    tls: TlsCheck,
    agent: ureq::Agent,
}

impl MlflowClient {
    /// A client of the server `uri` names (`http://host:5000`, `https://...`, `databricks`,
    /// `databricks://PROFILE`); every request gives up after `timeout`. A URI, profile or CA
    /// bundle that cannot be used is [`MlflowError::Settings`].
    pub fn new(uri: &str, timeout: Duration) -> Result<MlflowClient, MlflowError> {
        let target = target::resolve(uri).map_err(|problem| MlflowError::Settings {
            uri: uri.to_string(),
            problem,
        })?;
        Ok(MlflowClient {
            agent: agent(&target.tls, timeout),
            base: target.base,
            credentials: target.credentials,
            tls: target.tls,
        })
    }

    /// This client, its requests giving up after `timeout`.
    pub fn with_timeout(&self, timeout: Duration) -> MlflowClient {
        MlflowClient {
            agent: agent(&self.tls, timeout),
            ..self.clone()
        }
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// `endpoint` (`runs/create`) with `body` as JSON, or a GET with `query` when `body` is
    /// `None`; the answer's JSON.
    fn call(
        &self,
        endpoint: &str,
        query: &[(&str, &str)],
        body: Option<&Json>,
    ) -> Result<Json, MlflowError> {
        let url = format!("{}/api/2.0/mlflow/{endpoint}", self.base);
        let unreachable = |e: ureq::Error| {
            // The certificate refused: ureq passes rustls' error up inside an io::Error.
            let tls = match &e {
                ureq::Error::Rustls(_) | ureq::Error::Tls(_) => true,
                ureq::Error::Io(io) => io
                    .get_ref()
                    .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
                _ => false,
            };
            match tls {
                true => MlflowError::Tls {
                    url: self.base.clone(),
                    detail: e.to_string(),
                    checked: self.tls.describe(),
                },
                false => MlflowError::Unreachable {
                    url: self.base.clone(),
                    detail: e.to_string(),
                },
            }
        };
        let answer = match body {
            Some(body) => {
                let mut req = self
                    .agent
                    .post(&url)
                    .header("Content-Type", "application/json");
                if let Some(a) = self.credentials.header() {
                    req = req.header("Authorization", a);
                }
                req.send(body.to_string().as_bytes())
            }
            None => {
                let mut req = self.agent.get(&url);
                for (k, v) in query {
                    req = req.query(*k, *v);
                }
                if let Some(a) = self.credentials.header() {
                    req = req.header("Authorization", a);
                }
                req.call()
            }
        };
        let mut answer = answer.map_err(unreachable)?;
        let status = answer.status().as_u16();
        let text = answer
            .body_mut()
            .read_to_string()
            .map_err(|e| MlflowError::Unreachable {
                url: self.base.clone(),
                detail: format!("reading the answer to {endpoint}: {e}"),
            })?;
        if status == 401 || status == 403 {
            return Err(MlflowError::Unauthorized {
                url: self.base.clone(),
                what: endpoint.to_string(),
                status,
                sent: self.credentials.describe(),
                remedy: self.credentials.remedy(),
            });
        }
        let parsed: Option<Json> = serde_json::from_str(&text).ok().filter(Json::is_object);
        match parsed {
            Some(json) if (200..300).contains(&status) => Ok(json),
            Some(json) if json["error_code"].is_string() || status >= 500 || status == 429 => {
                Err(MlflowError::Refused {
                    url: self.base.clone(),
                    what: endpoint.to_string(),
                    status,
                    code: json["error_code"].as_str().unwrap_or("").to_string(),
                    message: json["message"].as_str().unwrap_or(&text).to_string(),
                    busy: status >= 500 || status == 429,
                })
            }
            None if status >= 500 || status == 429 => Err(MlflowError::Refused {
                url: self.base.clone(),
                what: endpoint.to_string(),
                status,
                code: String::new(),
                message: shorten(&text),
                busy: true,
            }),
            _ => Err(MlflowError::NotMlflow {
                url: self.base.clone(),
                detail: format!(
                    "{} /api/2.0/mlflow/{endpoint} answered HTTP {status} with {}",
                    if body.is_some() { "POST" } else { "GET" },
                    if text.trim().is_empty() {
                        "nothing".to_string()
                    } else {
                        format!("{:?}", shorten(&text))
                    }
                ),
            }),
        }
    }

    /// The id of the experiment called `name`, made if there is none. A deleted one is an
    /// error: MLflow keeps its name until it is purged.
    pub fn experiment_id(&self, name: &str) -> Result<String, MlflowError> {
        match self.call(
            "experiments/get-by-name",
            &[("experiment_name", name)],
            None,
        ) {
            Ok(found) => {
                let e = &found["experiment"];
                if e["lifecycle_stage"] == "deleted" {
                    return Err(MlflowError::Refused {
                        url: self.base.clone(),
                        what: "experiments/get-by-name".into(),
                        status: 200,
                        code: "DELETED".into(),
                        message: format!(
                            "the experiment {name:?} is deleted: restore it, or name another \
                             with [tracking] mlflow_experiment"
                        ),
                        busy: false,
                    });
                }
                self.id_in(&found, &["experiment", "experiment_id"])
            }
            Err(e) if e.code() == Some("RESOURCE_DOES_NOT_EXIST") => {
                match self.call("experiments/create", &[], Some(&json!({ "name": name }))) {
                    Ok(made) => self.id_in(&made, &["experiment_id"]),
                    // Made by another process a moment ago.
                    Err(e) if e.code() == Some("RESOURCE_ALREADY_EXISTS") => {
                        let found = self.call(
                            "experiments/get-by-name",
                            &[("experiment_name", name)],
                            None,
                        )?;
                        self.id_in(&found, &["experiment", "experiment_id"])
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn id_in(&self, json: &Json, path: &[&str]) -> Result<String, MlflowError> {
        path.iter()
            .fold(json, |j, k| &j[*k])
            .as_str()
            .map(String::from)
            .ok_or_else(|| MlflowError::NotMlflow {
                url: self.base.clone(),
                detail: format!("no {} in {}", path.join("."), shorten(&json.to_string())),
            })
    }

    /// Every run of `experiment_id` that `filter` (MLflow's search syntax) selects, page by
    /// page.
    pub fn search_runs(
        &self,
        experiment_id: &str,
        filter: &str,
    ) -> Result<Vec<RunInfo>, MlflowError> {
        let mut runs = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let mut body = json!({
                "experiment_ids": [experiment_id],
                "filter": filter,
                "max_results": 1000,
                "run_view_type": "ACTIVE_ONLY",
            });
            if let Some(t) = &page_token {
                body["page_token"] = json!(t);
            }
            let page = self.call("runs/search", &[], Some(&body))?;
            runs.extend(
                page["runs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(RunInfo::from_json),
            );
            match page["next_page_token"].as_str() {
                Some(t) if !t.is_empty() => page_token = Some(t.to_string()),
                _ => return Ok(runs),
            }
        }
    }

    /// The run `run_id`, with its current tags.
    pub fn get_run(&self, run_id: &str) -> Result<RunInfo, MlflowError> {
        let got = self.call("runs/get", &[("run_id", run_id)], None)?;
        RunInfo::from_json(&got["run"]).ok_or_else(|| MlflowError::NotMlflow {
            url: self.base.clone(),
            detail: format!("runs/get answered {}", shorten(&got.to_string())),
        })
    }

    /// A new run; its id.
    pub fn create_run(
        &self,
        experiment_id: &str,
        name: &str,
        start_time: u64,
        tags: &[(String, String)],
    ) -> Result<String, MlflowError> {
        let made = self.call(
            "runs/create",
            &[],
            Some(&json!({
                "experiment_id": experiment_id,
                "run_name": name,
                "start_time": start_time,
                "tags": key_values(tags),
            })),
        )?;
        self.id_in(&made, &["run", "info", "run_id"])
    }

    /// One `runs/log-batch` request: the caller keeps within MLflow's limits ([`Batch`]).
    pub fn log_batch(&self, run_id: &str, batch: &Batch) -> Result<(), MlflowError> {
        let metrics: Vec<Json> = batch
            .metrics
            .iter()
            .map(|m| {
                json!({
                    "key": m.key,
                    "value": finite_or_text(m.value),
                    "timestamp": m.timestamp,
                    "step": m.step,
                })
            })
            .collect();
        self.call(
            "runs/log-batch",
            &[],
            Some(&json!({
                "run_id": run_id,
                "metrics": metrics,
                "params": key_values(&batch.params),
                "tags": key_values(&batch.tags),
            })),
        )
        .map(drop)
    }

    /// Sets the run's status (`RUNNING`, `FINISHED`, `FAILED`, `KILLED`) and, unless running,
    /// its end time.
    pub fn update_run(&self, run_id: &str, status: &str, end_time: u64) -> Result<(), MlflowError> {
        let mut body = json!({ "run_id": run_id, "status": status });
        if status != "RUNNING" {
            body["end_time"] = json!(end_time);
        }
        self.call("runs/update", &[], Some(&body)).map(drop)
    }
}

/// What one `runs/log-batch` request carries.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Batch {
    pub metrics: Vec<MetricPoint>,
    pub params: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
}

impl Batch {
    /// MLflow's limits on one request: 1,000 metrics, 100 params, 100 tags, 1,000 in all.
    pub const MAX_METRICS: usize = 1000;
    pub const MAX_PARAMS: usize = 100;
    pub const MAX_TAGS: usize = 100;
    /// MLflow refuses requests over 1 MB; this leaves room for the JSON around the values.
    pub const MAX_BYTES: usize = 900_000;

    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty() && self.params.is_empty() && self.tags.is_empty()
    }

    /// A rough size of the request's JSON.
    pub fn bytes(&self) -> usize {
        let kv = |v: &[(String, String)]| -> usize {
            v.iter().map(|(k, v)| k.len() + v.len() + 32).sum()
        };
        self.metrics.iter().map(|m| m.key.len() + 80).sum::<usize>()
            + kv(&self.params)
            + kv(&self.tags)
    }

    /// Whether `params` params, `metrics` metrics and `tags` tags of `bytes` bytes of keys and
    /// values fit beside what is here, leaving room for two more tags (the cursors a sync
    /// adds to each request).
    pub fn has_room(&self, params: usize, metrics: usize, tags: usize, bytes: usize) -> bool {
        let entities = self.metrics.len() + self.params.len() + self.tags.len();
        self.params.len() + params <= Self::MAX_PARAMS
            && self.metrics.len() + metrics <= Self::MAX_METRICS
            && self.tags.len() + tags + 2 <= Self::MAX_TAGS
            && entities + params + metrics + tags + 2 <= 1000
            && self.bytes() + bytes + 80 * (params + metrics + tags) <= Self::MAX_BYTES
    }
}

fn key_values(pairs: &[(String, String)]) -> Vec<Json> {
    pairs
        .iter()
        .map(|(k, v)| json!({ "key": k, "value": v }))
        .collect()
}

/// JSON has no NaN or infinity; MLflow's parser takes them as these strings.
fn finite_or_text(v: f64) -> Json {
    if v.is_finite() {
        json!(v)
    } else if v.is_nan() {
        json!("NaN")
    } else if v > 0.0 {
        json!("Infinity")
    } else {
        json!("-Infinity")
    }
}

fn shorten(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_stops_at_mlflows_limits() {
        let mut b = Batch::default();
        for i in 0..Batch::MAX_METRICS - 2 {
            assert!(b.has_room(0, 1, 0, 4), "metric {i}");
            b.metrics.push(MetricPoint {
                key: "loss".into(),
                value: 1.0,
                timestamp: 0,
                step: i as u64,
            });
        }
        // 998 metrics and the two cursor tags make MLflow's 1,000.
        assert!(!b.has_room(0, 1, 0, 4));
        let mut b = Batch::default();
        b.tags.push(("t".into(), "x".repeat(Batch::MAX_BYTES)));
        assert!(!b.has_room(0, 1, 0, 4));
        let b = Batch {
            params: vec![("p".into(), "1".into()); Batch::MAX_PARAMS],
            ..Batch::default()
        };
        assert!(!b.has_room(1, 0, 0, 2));
        assert!(b.has_room(0, 1, 0, 2));
    }

    #[test]
    fn non_finite_values_are_sent_as_mlflow_reads_them() {
        assert_eq!(finite_or_text(1.5), json!(1.5));
        assert_eq!(finite_or_text(f64::NAN), json!("NaN"));
        assert_eq!(finite_or_text(f64::NEG_INFINITY), json!("-Infinity"));
    }
}
