//! Where an MLflow tracking URI leads and how to get in, resolved as MLflow's own client does:
//! `http(s)://host` with the credentials and TLS settings of the `MLFLOW_TRACKING_*`
//! environment variables, or `databricks` / `databricks://PROFILE` with the host and token of
//! a profile in `~/.databrickscfg` (`DATABRICKS_CONFIG_FILE` names another file;
//! `DATABRICKS_HOST` and `DATABRICKS_TOKEN` stand in for the default profile).

use std::path::{Path, PathBuf};

/// A tracking server: its base URL, what a request sends in `Authorization`, and how its TLS
/// certificate is checked.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub base: String,
    pub credentials: Credentials,
    pub tls: TlsCheck,
}

/// What a client sends in its `Authorization` header.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Credentials {
    None,
    /// A token, and where it came from (for messages: never the token).
    Bearer {
        token: String,
        from: String,
    },
    /// `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`.
    Basic {
        user: String,
        password: String,
    },
}

impl Credentials {
    pub fn header(&self) -> Option<String> {
        use base64::Engine;
        match self {
            Credentials::None => None,
            Credentials::Bearer { token, .. } => Some(format!("Bearer {token}")),
            Credentials::Basic { user, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
        }
    }

    /// The credentials for an error message (never their secret).
    pub fn describe(&self) -> String {
        match self {
            Credentials::None => "a request without credentials".into(),
            Credentials::Bearer { from, .. } => format!("the token in {from}"),
            Credentials::Basic { .. } => {
                "the user and password in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
                    .into()
            }
        }
    }

    /// What to do when the server refuses them.
    pub fn remedy(&self) -> &'static str {
        match self {
            Credentials::Bearer { from, .. } if from.contains("profile") => {
                "give the profile a token the workspace accepts"
            }
            _ => {
                "set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and \
                 MLFLOW_TRACKING_PASSWORD, to credentials it accepts"
            }
        }
    }
}

/// How the server's TLS certificate is checked.
#[derive(Debug, Clone)]
pub(crate) enum TlsCheck {
    /// Against Mozilla's roots.
    Default,
    /// Against the certificates of the CA bundle `MLFLOW_TRACKING_SERVER_CERT_PATH` names.
    Bundle {
        path: PathBuf,
        certs: Vec<ureq::tls::Certificate<'static>>,
    },
    /// Not at all (`MLFLOW_TRACKING_INSECURE_TLS=true`).
    Insecure,
}

impl TlsCheck {
    /// What a certificate is checked against, for messages.
    pub fn describe(&self) -> String {
        match self {
            TlsCheck::Default => "Mozilla's root certificates".into(),
            TlsCheck::Bundle { path, .. } => format!("the CA bundle {}", path.display()),
            TlsCheck::Insecure => "nothing".into(),
        }
    }
}

/// Resolves `uri` with the process's environment.
pub(crate) fn resolve(uri: &str) -> Result<Target, String> {
    resolve_with(uri, &|name| {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    })
}

/// Resolves `uri` with the variables `env` gives; `Err`: what is wrong, for the user.
pub(crate) fn resolve_with(
    uri: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Target, String> {
    let tls = tls_check(env)?;
    if let Some(profile) = databricks_profile(uri) {
        let (base, credentials) = databricks(profile, env)?;
        return Ok(Target {
            base,
            credentials,
            tls,
        });
    }
    check_uri(uri)?;
    let credentials = match (
        env("MLFLOW_TRACKING_TOKEN"),
        env("MLFLOW_TRACKING_USERNAME"),
    ) {
        (Some(token), _) => Credentials::Bearer {
            token,
            from: "MLFLOW_TRACKING_TOKEN".into(),
        },
        (None, Some(user)) => Credentials::Basic {
            user,
            password: env("MLFLOW_TRACKING_PASSWORD").unwrap_or_default(),
        },
        (None, None) => Credentials::None,
    };
    Ok(Target {
        base: uri.trim_end_matches('/').to_string(),
        credentials,
        tls,
    })
}

/// A tracking URI tune can talk to: `http://` or `https://` and a host, `databricks`, or
/// `databricks://PROFILE`. Checks its form only (a profile is read when the sweep starts).
pub(crate) fn check_uri(uri: &str) -> Result<(), String> {
    if databricks_profile(uri).is_some_and(|p| !p.is_empty() && !p.contains('/')) {
        return Ok(());
    }
    let rest = uri
        .strip_prefix("http://")
        .or_else(|| uri.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(()),
        _ => Err(format!(
            "expected an http:// or https:// URL of an MLflow tracking server, `databricks` or \
             `databricks://PROFILE`, found {uri:?} (file: URIs are not supported)"
        )),
    }
}

/// The profile a `databricks` URI names (`DEFAULT` for a bare `databricks`).
fn databricks_profile(uri: &str) -> Option<&str> {
    match uri {
        "databricks" => Some("DEFAULT"),
        _ => uri.strip_prefix("databricks://"),
    }
}

/// The workspace and token of `profile`.
fn databricks(
    profile: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Credentials), String> {
    if profile == "DEFAULT" {
        if let (Some(host), Some(token)) = (env("DATABRICKS_HOST"), env("DATABRICKS_TOKEN")) {
            let from = "DATABRICKS_TOKEN".to_string();
            return Ok((workspace(&host), Credentials::Bearer { token, from }));
        }
    }
    let file = match env("DATABRICKS_CONFIG_FILE") {
        Some(f) => PathBuf::from(f),
        None => match env("HOME") {
            Some(home) => Path::new(&home).join(".databrickscfg"),
            None => return Err("databricks: HOME is not set, so ~/.databrickscfg cannot be found (or set DATABRICKS_CONFIG_FILE)".into()),
        },
    };
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "databricks://{profile}: cannot read {} ({e}): write the profile there \
             (`databricks configure`), or set DATABRICKS_HOST and DATABRICKS_TOKEN",
            file.display()
        )
    })?;
    let sections = ini(&text);
    let Some((_, keys)) = sections.iter().find(|(name, _)| name == profile) else {
        let names: Vec<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
        return Err(format!(
            "databricks://{profile}: {} has no profile [{profile}] (it has: {})",
            file.display(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    let key = |k: &str| {
        keys.iter()
            .find(|(name, value)| name == k && !value.is_empty())
            .map(|(_, v)| v.clone())
    };
    let missing = |k: &str| {
        format!(
            "databricks://{profile}: profile [{profile}] of {} has no `{k}` (tune signs in to \
             Databricks with a workspace host and a personal access token)",
            file.display()
        )
    };
    let host = key("host").ok_or_else(|| missing("host"))?;
    let token = key("token").ok_or_else(|| missing("token"))?;
    let from = format!("profile [{profile}] of {}", file.display());
    Ok((workspace(&host), Credentials::Bearer { token, from }))
}

/// A workspace host as a base URL: `https://` where it names no scheme, no trailing `/`.
fn workspace(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    if host.starts_with("http://") || host.starts_with("https://") {
        host.to_string()
    } else {
        format!("https://{host}")
    }
}

/// The sections of an INI file, each with its `key = value` lines, in order.
fn ini(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name.trim().to_string(), Vec::new()));
        } else if let (Some((key, value)), Some(section)) =
            (line.split_once('='), sections.last_mut())
        {
            section
                .1
                .push((key.trim().to_string(), value.trim().to_string()));
        }
    }
    sections
}

/// `MLFLOW_TRACKING_INSECURE_TLS` and `MLFLOW_TRACKING_SERVER_CERT_PATH`, as MLflow reads them
/// (both at once is refused, as MLflow refuses it).
fn tls_check(env: &dyn Fn(&str) -> Option<String>) -> Result<TlsCheck, String> {
    let insecure =
        env("MLFLOW_TRACKING_INSECURE_TLS").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    match (insecure, env("MLFLOW_TRACKING_SERVER_CERT_PATH")) {
        (true, Some(_)) => Err(
            "MLFLOW_TRACKING_INSECURE_TLS and MLFLOW_TRACKING_SERVER_CERT_PATH cannot both be set"
                .into(),
        ),
        (true, None) => Ok(TlsCheck::Insecure),
        (false, Some(path)) => {
            let path = PathBuf::from(path);
            let bad =
                |why: String| format!("MLFLOW_TRACKING_SERVER_CERT_PATH={}: {why}", path.display());
            let pem = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<_, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad(
                    "expected PEM certificates (a CA bundle), found none".into()
                ));
            }
            Ok(TlsCheck::Bundle { path, certs })
        }
        (false, None) => Ok(TlsCheck::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    const CFG: &str = "[DEFAULT]\nhost = https://dbc-1.cloud.databricks.com/\ntoken = dapi-default\n\n\
                       ; a comment\n[staging]\nhost = adb-2.azuredatabricks.net\ntoken=dapi-staging\n\
                       [no-token]\nhost = x\n";

    fn with_cfg(extra: &[(&str, &str)]) -> (tempfile::TempDir, Vec<(String, String)>) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(".databrickscfg"), CFG).unwrap();
        let mut vars = vec![("HOME".to_string(), tmp.path().display().to_string())];
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        (tmp, vars)
    }

    fn resolve_in(uri: &str, vars: &[(String, String)]) -> Result<Target, String> {
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        resolve_with(uri, &env_of(&pairs))
    }

    #[test]
    fn databricks_uris_take_the_host_and_token_of_their_profile() {
        let (_tmp, vars) = with_cfg(&[]);
        let t = resolve_in("databricks", &vars).unwrap();
        assert_eq!(t.base, "https://dbc-1.cloud.databricks.com");
        assert_eq!(t.credentials.header().unwrap(), "Bearer dapi-default");
        let t = resolve_in("databricks://staging", &vars).unwrap();
        assert_eq!(t.base, "https://adb-2.azuredatabricks.net");
        assert_eq!(t.credentials.header().unwrap(), "Bearer dapi-staging");
        assert!(t.credentials.describe().contains("profile [staging] of "));
    }

    #[test]
    fn databricks_host_and_token_in_the_environment_stand_in_for_the_default_profile() {
        let (_tmp, vars) = with_cfg(&[
            ("DATABRICKS_HOST", "dbc-9.cloud.databricks.com"),
            ("DATABRICKS_TOKEN", "dapi-env"),
        ]);
        let t = resolve_in("databricks", &vars).unwrap();
        assert_eq!(t.base, "https://dbc-9.cloud.databricks.com");
        assert_eq!(t.credentials.header().unwrap(), "Bearer dapi-env");
        // A named profile is the file's.
        let t = resolve_in("databricks://staging", &vars).unwrap();
        assert_eq!(t.credentials.header().unwrap(), "Bearer dapi-staging");
    }

    #[test]
    fn a_missing_profile_file_or_token_is_said() {
        let (_tmp, vars) = with_cfg(&[]);
        let e = resolve_in("databricks://prod", &vars).unwrap_err();
        assert!(
            e.contains("has no profile [prod] (it has: DEFAULT, staging, no-token)"),
            "{e}"
        );
        let e = resolve_in("databricks://no-token", &vars).unwrap_err();
        assert!(e.contains("has no `token`"), "{e}");
        let e = resolve_in("databricks", &[("HOME".into(), "/nonexistent".into())]).unwrap_err();
        assert!(e.contains("cannot read /nonexistent/.databrickscfg"), "{e}");
    }

    #[test]
    fn tls_settings_are_read_as_mlflow_reads_them() {
        let t = resolve_in(
            "https://mlflow.example",
            &[("MLFLOW_TRACKING_INSECURE_TLS".into(), "True".into())],
        )
        .unwrap();
        assert!(matches!(t.tls, TlsCheck::Insecure));
        let e = resolve_in(
            "https://mlflow.example",
            &[
                ("MLFLOW_TRACKING_INSECURE_TLS".into(), "true".into()),
                ("MLFLOW_TRACKING_SERVER_CERT_PATH".into(), "/x.pem".into()),
            ],
        )
        .unwrap_err();
        assert!(e.contains("cannot both be set"), "{e}");
        let tmp = tempfile::tempdir().unwrap();
        let not_pem = tmp.path().join("ca.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let e = resolve_in(
            "https://mlflow.example",
            &[(
                "MLFLOW_TRACKING_SERVER_CERT_PATH".into(),
                not_pem.display().to_string(),
            )],
        )
        .unwrap_err();
        assert!(e.contains("found none"), "{e}");
    }

    #[test]
    fn uris_of_other_kinds_are_refused_naming_what_is_taken() {
        for uri in [
            "file:///tmp/mlruns",
            "databricks://",
            "databricks://a/b",
            "mlflow:5000",
        ] {
            let e = check_uri(uri).unwrap_err();
            assert!(e.contains("`databricks://PROFILE`"), "{uri}: {e}");
        }
        for uri in ["http://h:5000", "https://h", "databricks", "databricks://p"] {
            check_uri(uri).unwrap();
        }
    }
}
