//! Where trials are kept. Nothing outside this module knows which database holds them: the
//! coordinator and [`crate::experiment::Experiment`] see a [`TrialStore`].
//!
//! Three stores: [`SledStore`], the embedded default (one sled database in the experiment
//! folder), [`PgStore`], experiments in a PostgreSQL database that many machines share, and
//! [`MemoryStore`], for tests and throwaway sweeps. Every store passes the same
//! conformance suite (`conformance.rs`).

mod libpq_settings;
mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod pg_store;
#[cfg(feature = "postgres")]
mod pg_tls;
#[cfg(not(feature = "postgres"))]
mod pg_unbuilt;
mod sled_store;

#[cfg(test)]
pub(crate) mod conformance;
#[cfg(test)]
pub(crate) use tune_testkit::pg_server as test_server;

pub use memory::{MemoryDb, MemoryStore};
#[cfg(feature = "postgres")]
pub use pg_store::PgStore;
#[cfg(not(feature = "postgres"))]
pub use pg_unbuilt::PgStore;
pub use sled_store::{Salvaged, SledStore};

use serde::{Deserialize, Serialize};
use tune_search::TrialId;

/// How long a coordinator rides out a database that stopped answering (a restart, a failover)
/// before the sweep ends, resumable: its PostgreSQL store, its link to its workers
/// (`remote::bridge`) alike; a worker's default lease is as long, so that workers keep their
/// trials through what the coordinator rides out.
pub(crate) const OUTAGE_RIDDEN: std::time::Duration = std::time::Duration::from_secs(15);

use crate::spec::ExperimentSpec;
use crate::trial::{Trial, TrialResult};

/// The sled database's folder, in the experiment folder.
pub const DB_DIR: &str = "tune.db";

/// The experiment-wide record: the frozen spec and the current budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Store layout version.
    pub format: u32,
    pub spec: ExperimentSpec,
    /// The budget in force: the spec's `samples`, or what `--samples` raised it to.
    pub samples: u64,
    /// When the experiment was created (Unix ms); 0 for stores made before it was kept. With
    /// the name, it tells this sweep apart from another of the same name (MLflow's runs).
    #[serde(default)]
    pub created_at: u64,
}

/// Everything a store holds: the meta record and every trial with its results, in id order
/// (results in the order they were received, `seq` ascending).
#[derive(Debug, Clone)]
pub struct StoredExperiment {
    pub meta: Meta,
    pub trials: Vec<Trial>,
}

/// The source of a database's own error, kept whole.
pub type DatabaseError = Box<dyn std::error::Error + Send + Sync>;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process has the experiment open: `holder` says which, where the store records
    /// it (host:pid and since when).
    #[error("the experiment is in use by another tune process{}", holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
    InUse { holder: Option<String> },
    /// The database (at `at`) or the file system under it failed: a full disk, a failed sync.
    #[error("{at}: {source}")]
    Database {
        at: StorePlace,
        #[source]
        source: DatabaseError,
    },
    /// The database server at `at` refused this user or database (wrong credentials, a role
    /// or database that does not exist): the URL is at fault, not the server.
    #[error("{at}: the server refused access: {reason}; check the user, the password and the database name in the URL")]
    Refused { at: StorePlace, reason: String },
    /// TLS to the database server at `at` could not be set up or was refused (a certificate
    /// file that cannot be read, a server certificate its checks refuse): the URL's TLS
    /// settings, or the server's certificate, are at fault.
    #[error("{at}: TLS: {problem}")]
    Tls { at: StorePlace, problem: String },
    /// The database URL does not parse: the input is at fault.
    #[error("{at}: not a PostgreSQL URL ({reason}); expected postgresql://USER@HOST:PORT/DATABASE or key=value settings")]
    BadUrl { at: StorePlace, reason: String },
    #[error("stored {what} is unreadable: {source}")]
    Corrupt {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A record that could not be encoded; nothing was written.
    #[error("{what} cannot be stored: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the store holds no experiment record")]
    NoMeta,
    /// The store was written in a layout this build does not read (by a newer tune).
    #[error("{at} was written in store format {found}; this build of tune reads formats {read:?} (a newer tune wrote it?)")]
    Format {
        at: StorePlace,
        found: u32,
        read: &'static [u32],
    },
    /// The database at `at` is damaged: unreadable, or holding less than it once did.
    #[error("{at} is damaged: {problem}")]
    Damaged { at: StorePlace, problem: String },
    /// A PostgreSQL store was asked of a build without one (the `postgres` feature is off).
    #[error("{at}: this build of tune has no PostgreSQL store (it was built without the `postgres` feature)")]
    PostgresNotBuilt { at: StorePlace },
}

/// Where a store keeps its records, as its errors name them.
///
/// ```
/// use tune::store::StorePlace;
/// let folder = StorePlace::Folder("runs/mnist/tune.db".into());
/// assert_eq!(folder.to_string(), "runs/mnist/tune.db");
/// assert_eq!(folder.experiment(), "runs/mnist");
/// let db = tune::store::postgres_location("postgres://tune:pw@db/tune", "mnist");
/// assert_eq!(db.to_string(), "postgres://tune@db/tune (experiment \"mnist\")");
/// assert_eq!(db.experiment(), "mnist");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorePlace {
    /// The default store: the experiment folder, its sled database (`tune.db`) or a file in it.
    Folder(std::path::PathBuf),
    /// A PostgreSQL database: its URL without the password, and the experiment (none for a
    /// worker that serves every sweep in it).
    Postgres { url: String, name: Option<String> },
}

impl StorePlace {
    /// What `tune resume` takes for the experiment kept here: the experiment folder, or the
    /// experiment's name (`NAME` where none is known).
    pub fn experiment(&self) -> String {
        match self {
            StorePlace::Folder(path) => {
                let db = path
                    .ancestors()
                    .find(|p| p.file_name().is_some_and(|n| n == DB_DIR));
                let folder = db.and_then(|db| db.parent()).unwrap_or(path);
                folder.display().to_string()
            }
            StorePlace::Postgres { name, .. } => name.clone().unwrap_or_else(|| "NAME".into()),
        }
    }
}

impl std::fmt::Display for StorePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorePlace::Folder(path) => write!(f, "{}", path.display()),
            StorePlace::Postgres {
                url,
                name: Some(name),
            } => write!(f, "{url} (experiment {name:?})"),
            StorePlace::Postgres { url, name: None } => write!(f, "{url}"),
        }
    }
}

/// How messages name experiment `name` at `url`: the URL without its password.
///
/// ```
/// let at = tune::store::postgres_location("postgres://tune:pw@db/tune", "mnist");
/// assert_eq!(at.to_string(), "postgres://tune@db/tune (experiment \"mnist\")");
/// ```
pub fn postgres_location(url: &str, name: &str) -> StorePlace {
    StorePlace::Postgres {
        url: redact_url(url),
        name: Some(name.to_string()),
    }
}

/// `url` without its password: neither the one after the user name nor a `password` setting
/// (in the query, or in libpq's `key=value` form).
///
/// ```
/// assert_eq!(tune::store::redact_url("postgres://tune:pw@db/tune"), "postgres://tune@db/tune");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return match libpq_settings::key_values(url) {
            Ok(pairs) if pairs.iter().any(|(k, _)| k == "password") => pairs
                .iter()
                .filter(|(k, _)| k != "password")
                .map(|(k, v)| libpq_settings::key_value(k, v))
                .collect::<Vec<_>>()
                .join(" "),
            Ok(_) => url.to_string(),
            // Unreadable settings may hold a password anywhere: show none of them.
            Err(_) => "(connection settings that do not parse)".to_string(),
        };
    };
    let (url, query) = url
        .split_once('?')
        .map_or((url, None), |(u, q)| (u, Some(q)));
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let mut out = match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            format!("{}{user}@{}", &url[..scheme_end], &rest[at + 1..])
        }
        None => url.to_string(),
    };
    if let Some(query) = query {
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| pair.split('=').next() != Some("password"))
            .collect();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
    }
    out
}

/// Durable storage of one experiment.
///
/// Writes may be buffered; [`TrialStore::sync`] returns only when everything written before
/// it survives a crash (group commit: the coordinator writes a round's changes, then syncs
/// once). The coordinator syncs before it acts on (or acknowledges) a change.
///
/// ```
/// use tune::store::{MemoryDb, TrialStore};
/// let db = MemoryDb::new();
/// let store = db.open().unwrap();
/// assert!(store.load().is_err()); // nothing written yet
/// ```
pub trait TrialStore: Send {
    /// Everything stored; [`StoreError::NoMeta`] when no experiment was written.
    fn load(&self) -> Result<StoredExperiment, StoreError>;
    fn put_meta(&mut self, meta: &Meta) -> Result<(), StoreError>;
    /// Writes the trial's record (not its results).
    fn put_trial(&mut self, trial: &Trial) -> Result<(), StoreError>;
    /// Adds one result of trial `id`; results load in `seq` order.
    fn add_result(&mut self, id: TrialId, result: &TrialResult) -> Result<(), StoreError>;
    fn sync(&mut self) -> Result<(), StoreError>;
}

/// A record as stored: JSON, or an error naming it (never an empty record).
fn encode<T: Serialize>(value: &T, what: impl FnOnce() -> String) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|source| StoreError::Encode {
        what: what(),
        source,
    })
}

/// A stored record read back, or an error naming it.
fn decode<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: impl FnOnce() -> String,
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Corrupt {
        what: what(),
        source,
    })
}

/// Every record decoder the store has, on `bytes` (for the fuzz targets).
#[cfg(feature = "fuzzing")]
pub(crate) fn decode_any(bytes: &[u8]) {
    let _ = decode::<Meta>(bytes, String::new);
    let _ = decode::<Trial>(bytes, String::new);
    let _ = decode::<TrialResult>(bytes, String::new);
    sled_store::parse_note(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_shows_in_messages() {
        assert_eq!(
            redact_url("postgres://tune:s3cret@db:5432/tune?sslmode=disable"),
            "postgres://tune@db:5432/tune?sslmode=disable"
        );
        assert_eq!(redact_url("postgres://db/tune"), "postgres://db/tune");
        assert_eq!(redact_url("host=db user=tune"), "host=db user=tune");
        assert_eq!(
            redact_url("postgres://db/tune?password=s3cret&sslmode=require"),
            "postgres://db/tune?sslmode=require"
        );
        assert_eq!(
            redact_url("host=db password='s3 cret' sslrootcert='/a b/ca.pem'"),
            "host=db sslrootcert='/a b/ca.pem'"
        );
        assert!(!redact_url("host=db password='s3cret").contains("s3cret"));
    }

    #[test]
    fn a_record_that_cannot_be_encoded_is_an_error_not_an_empty_record() {
        // JSON object keys must be strings: serde_json refuses this map.
        let bad = std::collections::BTreeMap::from([((1u8, 2u8), 3u8)]);
        let e = encode(&bad, || "the test record".into()).unwrap_err();
        assert!(matches!(e, StoreError::Encode { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("the test record cannot be stored: "),
            "{e}"
        );
    }
}
