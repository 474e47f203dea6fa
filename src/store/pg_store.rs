//! [`PgStore`]: experiments in a PostgreSQL database, many to a database, each named by its
//! spec's `name`.
//!
//! Writes are buffered and sent at [`TrialStore::sync`] as one transaction (group commit: a
//! round of the coordinator is one round trip of a few statements, whatever it wrote). Records
//! are the same JSON as the sled store's. One connection per store, no pool: a coordinator
//! needs one, and a database shared by many machines must not run out of clients.
//!
//! While a store is open its session holds an advisory lock on the experiment, so a second
//! coordinator is refused; the lock goes with the connection, so a killed process frees it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use postgres::{Client, GenericClient};

use super::pg_tls::TlsConnector;
use tune_search::TrialId;

use super::{
    decode, encode, Meta, StoreError, StorePlace, StoredExperiment, TrialStore, OUTAGE_RIDDEN,
};
use crate::failpoint;
use crate::trial::{Trial, TrialResult};

/// The schema, one migration per format step; `tune_schema` records how many are applied.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE tune_experiments (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    meta text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE tune_trials (
    experiment bigint NOT NULL REFERENCES tune_experiments (id) ON DELETE CASCADE,
    id bigint NOT NULL,
    status text NOT NULL,
    record text NOT NULL,
    PRIMARY KEY (experiment, id)
);
CREATE INDEX tune_trials_by_status ON tune_trials (experiment, status);
CREATE TABLE tune_results (
    experiment bigint NOT NULL REFERENCES tune_experiments (id) ON DELETE CASCADE,
    trial bigint NOT NULL,
    seq bigint NOT NULL,
    record text NOT NULL,
    PRIMARY KEY (experiment, trial, seq)
);
"#,
    r#"
ALTER TABLE tune_experiments ADD COLUMN holder text, ADD COLUMN held_since timestamptz;
"#,
    // Remote workers (`tune worker`): see `crate::remote` for the protocol.
    r#"
ALTER TABLE tune_experiments ADD COLUMN finished boolean NOT NULL DEFAULT false;
CREATE SEQUENCE tune_tokens;
CREATE TABLE tune_workers (
    id text PRIMARY KEY,
    experiment bigint,
    slots integer NOT NULL,
    lease_s double precision NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE tune_attempts (
    experiment bigint NOT NULL REFERENCES tune_experiments (id) ON DELETE CASCADE,
    trial bigint NOT NULL,
    attempt integer NOT NULL,
    job text NOT NULL,
    state text NOT NULL,
    offered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    worker text,
    device text,
    restored boolean NOT NULL DEFAULT false,
    token bigint UNIQUE,
    lease_until timestamptz,
    outcome text,
    PRIMARY KEY (experiment, trial, attempt)
);
CREATE INDEX tune_attempts_offered ON tune_attempts (offered_at) WHERE state = 'offered';
CREATE INDEX tune_attempts_running ON tune_attempts (experiment) WHERE state = 'running';
CREATE TABLE tune_reports (
    id bigserial PRIMARY KEY,
    experiment bigint NOT NULL,
    trial bigint NOT NULL,
    attempt integer NOT NULL,
    token bigint NOT NULL,
    step bigint,
    metrics text NOT NULL,
    heard text
);
CREATE INDEX tune_reports_undecided ON tune_reports (experiment, id) WHERE heard IS NULL;
"#,
    // Offers by experiment: a worker for one experiment found its offers through a bitmap of
    // every attempt of the experiment (the primary key's) while the statistics lagged behind
    // the table's growth.
    r#"
DROP INDEX tune_attempts_offered;
CREATE INDEX tune_attempts_offered ON tune_attempts (experiment, offered_at)
    WHERE state = 'offered';
"#,
    // Each worker's GPUs' use (JSON, NVML's), renewed with its heartbeat: what `tune status`
    // and the dashboard show of the GPUs trials run on elsewhere.
    r#"
ALTER TABLE tune_workers ADD COLUMN gpus text;
"#,
    // Trial folders kept in the database (`[store] checkpoints = "database"`,
    // src/remote/checkpoints.rs): one archive per trial, in chunks, its checksum and the
    // attempt (token) that wrote it.
    r#"
CREATE TABLE tune_checkpoints (
    experiment bigint NOT NULL REFERENCES tune_experiments (id) ON DELETE CASCADE,
    trial bigint NOT NULL,
    token bigint NOT NULL,
    size bigint NOT NULL,
    sha256 text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, trial)
);
CREATE TABLE tune_checkpoint_chunks (
    experiment bigint NOT NULL,
    trial bigint NOT NULL,
    seq integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (experiment, trial, seq),
    FOREIGN KEY (experiment, trial) REFERENCES tune_checkpoints ON DELETE CASCADE
);
"#,
    // Controls for a sweep's coordinator from any machine (`tune serve --store`,
    // `ExperimentReader::ask`): asked, taken by the coordinator's bridge, answered. One asked
    // while no coordinator runs, or not taken in time, is closed unanswered by its asker: a
    // later coordinator never carries it out.
    r#"
CREATE TABLE tune_controls (
    id bigserial PRIMARY KEY,
    experiment bigint NOT NULL REFERENCES tune_experiments (id) ON DELETE CASCADE,
    control text NOT NULL,
    asked_by text NOT NULL,
    asked_at timestamptz NOT NULL DEFAULT now(),
    taken_at timestamptz,
    ok boolean,
    answer text
);
CREATE INDEX tune_controls_open ON tune_controls (experiment, id) WHERE answer IS NULL;
"#,
    // Gangs (`[resources] nodes_per_trial`, src/remote/worker/gang.rs): the workers that run
    // one attempt together, one row per machine (node rank), each with its own lease and
    // token. Node 0 holds the attempt itself (its token is the attempt's) and publishes where
    // the others meet it (`endpoint`); a member that fails says why (`outcome`).
    r#"
CREATE TABLE tune_gang_members (
    experiment bigint NOT NULL REFERENCES tune_experiments (id) ON DELETE CASCADE,
    trial bigint NOT NULL,
    attempt integer NOT NULL,
    node_rank integer NOT NULL,
    worker text NOT NULL,
    token bigint NOT NULL UNIQUE,
    state text NOT NULL,
    lease_until timestamptz NOT NULL,
    endpoint text,
    outcome text,
    PRIMARY KEY (experiment, trial, attempt, node_rank)
);
CREATE INDEX tune_gang_members_live ON tune_gang_members (experiment, worker)
    WHERE state IN ('assigned', 'running');
"#,
];

/// How long [`PgStore::open`] waits for the experiment's lock. A coordinator killed a moment
/// ago holds it until the server notices its connection is gone.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// The first key of every advisory lock tune takes ("tune" in ASCII), so that its locks do
/// not collide with other applications' on the same database.
const LOCK_SPACE: i32 = 0x7475_6e65;

/// The coordinator that holds experiment `experiment` now (`host:pid since <time>`): its
/// advisory lock is held; `None` when no coordinator runs it.
pub(crate) fn coordinator(
    client: &mut impl postgres::GenericClient,
    experiment: i64,
) -> Result<Option<String>, postgres::Error> {
    // A lock on two int4 keys shows in pg_locks as classid, objid and objsubid = 2; pg_locks
    // lists every database's locks.
    Ok(client
        .query_one(
            "SELECT holder || ' since ' || to_char(held_since AT TIME ZONE 'UTC',
                    'YYYY-MM-DD HH24:MI:SS UTC')
             FROM tune_experiments
             WHERE id = $1 AND EXISTS (
                 SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND classid = $2::int::oid AND objid = id::int::oid AND objsubid = 2)
             UNION ALL SELECT NULL LIMIT 1",
            &[&experiment, &LOCK_SPACE],
        )?
        .get(0))
}

/// One experiment in a PostgreSQL database.
///
/// ```no_run
/// use tune::store::{PgStore, TrialStore};
/// let store = PgStore::open("postgres://tune@db.example/tune", "mnist-lr")?;
/// let stored = store.load()?;
/// println!("{} trials", stored.trials.len());
/// # Ok::<(), tune::StoreError>(())
/// ```
pub struct PgStore {
    /// In a cell: [`TrialStore::load`] reads through `&self`.
    client: RefCell<Client>,
    /// How to connect again.
    settings: PgSettings,
    /// The database and experiment, for messages (without a password).
    location: StorePlace,
    experiment: i64,
    pending: Pending,
    /// The sync's statement, once prepared on this connection.
    apply: Option<postgres::Statement>,
}

/// What was written since the last sync, newest record per key.
#[derive(Default)]
struct Pending {
    meta: Option<String>,
    trials: BTreeMap<TrialId, (&'static str, String)>,
    results: BTreeMap<(TrialId, u64), String>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.meta.is_none() && self.trials.is_empty() && self.results.is_empty()
    }
}

impl PgStore {
    /// Connects to `url`, brings the schema up to date, and opens experiment `name` (created,
    /// empty, if it does not exist); [`StoreError::InUse`] while another store holds it.
    pub fn open(url: &str, name: &str) -> Result<PgStore, StoreError> {
        PgStore::open_as(url, name, true, LOCK_WAIT)
    }

    /// Opens experiment `name` only if it was created (its experiment record written):
    /// [`StoreError::NoMeta`] otherwise, and nothing is written.
    pub fn open_existing(url: &str, name: &str) -> Result<PgStore, StoreError> {
        PgStore::open_as(url, name, false, LOCK_WAIT)
    }

    /// Everything stored of experiment `name`, read without taking the experiment (its
    /// coordinator may be running): what `tune status` and `tune export` show.
    pub fn read(url: &str, name: &str) -> Result<StoredExperiment, StoreError> {
        let location = super::postgres_location(url, name);
        let mut client = connect(url, &location)?;
        let experiment = existing(&mut client, name, &location)?;
        read(&mut client, experiment, &location)
    }

    fn open_as(url: &str, name: &str, create: bool, wait: Duration) -> Result<PgStore, StoreError> {
        let location = super::postgres_location(url, name);
        let err = |e: postgres::Error| db_error(&location, e);
        let settings = settings(url, &location)?;
        let mut client = connect_with(&settings, &location)?;
        let experiment: i64 = if create {
            client
                .query_one(
                    "INSERT INTO tune_experiments (name) VALUES ($1)
                     ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id",
                    &[&name],
                )
                .map_err(err)?
                .get(0)
        } else {
            existing(&mut client, name, &location)?
        };
        take_experiment(&mut client, experiment, wait, &location)?;
        Ok(PgStore {
            client: RefCell::new(client),
            settings,
            location,
            experiment,
            pending: Pending::default(),
            apply: None,
        })
    }

    /// A new connection in place of one the server closed (a restart, a failover, a network
    /// cut), with the experiment taken again: the lock went with the old session, and
    /// [`StoreError::InUse`] says another coordinator took it meanwhile.
    fn reconnect(&mut self) -> Result<(), StoreError> {
        let mut client = connect_with(&self.settings, &self.location)?;
        take_experiment(&mut client, self.experiment, Duration::ZERO, &self.location)?;
        *self.client.get_mut() = client;
        self.apply = None;
        Ok(())
    }

    /// One try at writing what is pending.
    fn apply_pending(&mut self) -> Result<(), postgres::Error> {
        let client = self.client.get_mut();
        // Prepared once per connection: every sync is then a single round trip.
        let statement = match &self.apply {
            Some(s) => s.clone(),
            None => client.prepare(APPLY)?,
        };
        apply(client, &statement, self.experiment, &self.pending)?;
        self.apply = Some(statement);
        Ok(())
    }
}

/// Whether `e` says the connection, not the statement, failed: the server closed it or
/// went away (SQLSTATE class 08, or 57P01-57P03: shut down, crashed, not accepting yet).
fn connection_lost(e: &postgres::Error, client: &Client) -> bool {
    client.is_closed()
        || e.code().is_some_and(|c| {
            let c = c.code();
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
        })
}

/// Takes experiment `experiment`'s lock for this session, trying for `wait`; names this
/// process as its holder.
fn take_experiment(
    client: &mut Client,
    experiment: i64,
    wait: Duration,
    location: &StorePlace,
) -> Result<(), StoreError> {
    let err = |e: postgres::Error| db_error(location, e);
    let deadline = Instant::now() + wait;
    let held = loop {
        let held: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock($1, $2::int)",
                &[&LOCK_SPACE, &(experiment as i32)],
            )
            .map_err(err)?
            .get(0);
        if held || Instant::now() >= deadline {
            break held;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !held {
        let holder: Option<String> = client
            .query_one(
                "SELECT holder || ' since ' || to_char(held_since AT TIME ZONE 'UTC',
                        'YYYY-MM-DD HH24:MI:SS UTC')
                 FROM tune_experiments WHERE id = $1",
                &[&experiment],
            )
            .map_err(err)?
            .get(0);
        return Err(StoreError::InUse { holder });
    }
    // Who holds it, for the next process refused (the lock itself names no one).
    client
        .execute(
            "UPDATE tune_experiments SET holder = $2, held_since = now() WHERE id = $1",
            &[&experiment, &this_process()],
        )
        .map_err(err)?;
    Ok(())
}

/// This process as `tune status` and refusals name it: `host:pid`.
pub(crate) fn this_process() -> String {
    format!("{}:{}", host_name(), std::process::id())
}

/// This machine's host name (`localhost` where it cannot be read).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// A connection with the schema up to date.
pub(crate) fn connect(url: &str, location: &StorePlace) -> Result<Client, StoreError> {
    connect_with(&settings(url, location)?, location)
}

/// The URL's settings for the coordinator and readers: a network that stalls fails a query
/// after [`UNANSWERED`] instead of blocking it for as long as TCP retries (many minutes); the
/// URL's own settings win. The server is asked to watch the session as well
/// ([`SERVER_WATCH`]).
pub(crate) fn settings(url: &str, location: &StorePlace) -> Result<PgSettings, StoreError> {
    let mut settings = parse_url(url, location)?;
    if settings.config.get_tcp_user_timeout().is_none() {
        settings.config.tcp_user_timeout(UNANSWERED);
    }
    let options = match settings.config.get_options() {
        Some(own) if !own.trim().is_empty() => format!("{SERVER_WATCH} {own}"),
        _ => SERVER_WATCH.to_string(),
    };
    settings.config.options(&options);
    Ok(settings)
}

/// The server's side of a session, sent with the connection (libpq's `options`; the URL's own
/// come after, so they win): a peer gone silent (a coordinator partitioned away, its machine
/// lost) has its session ended by the server within about 8 s, and with it the experiment's
/// lock, before that coordinator gives up ([`OUTAGE_RIDDEN`]): a coordinator resumed elsewhere
/// then finds the lock free instead of held for as long as the server's TCP would retry (up to
/// 15 minutes with the kernel's defaults). Keepalives catch an idle session, the user timeout
/// one with unacknowledged data. `tcp_user_timeout` needs PostgreSQL 12 or later.
const SERVER_WATCH: &str = "-c tcp_keepalives_idle=3 -c tcp_keepalives_interval=1 \
     -c tcp_keepalives_count=4 -c tcp_user_timeout=8000";

/// How to reach a database: the client's settings from the URL (hosts, user, timeouts) and
/// the TLS its `sslmode` asks for ([`super::pg_tls`]).
#[derive(Debug, Clone)]
pub(crate) struct PgSettings {
    pub(crate) config: postgres::Config,
    pub(crate) tls: TlsConnector,
}

/// The URL's settings. One that does not parse is input at fault ([`StoreError::BadUrl`]), as
/// are TLS files that cannot be read ([`StoreError::Tls`]).
pub(crate) fn parse_url(url: &str, location: &StorePlace) -> Result<PgSettings, StoreError> {
    let bad = |reason: String| StoreError::BadUrl {
        at: location.clone(),
        reason,
    };
    let (rest, tls) = super::pg_tls::split_url(url).map_err(bad)?;
    let mut config: postgres::Config = rest
        .parse()
        .map_err(|e: postgres::Error| bad(Described(e).to_string()))?;
    tls.apply(&mut config);
    let tls = tls.connector().map_err(|problem| StoreError::Tls {
        at: location.clone(),
        problem,
    })?;
    Ok(PgSettings { config, tls })
}

/// How long a connection of the coordinator or a reader waits on a silent server.
const UNANSWERED: Duration = Duration::from_secs(30);

/// How long a connection may take where the URL sets no `connect_timeout`.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// Connects as `config` says, within its `connect_timeout` (else [`CONNECT_WAIT`]) for the
/// whole of it: the client's own timeout covers only the TCP connect, and a server that
/// accepts the connection and never answers held every command forever. Every connection
/// tune opens goes through here.
pub(crate) fn open(settings: &PgSettings) -> Result<Client, Unanswered> {
    let limit = settings
        .config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_WAIT);
    let mut config = settings.config.clone();
    config.connect_timeout(limit);
    answers_within(&config, limit)?;
    config
        .connect(settings.tls.connector.clone())
        .map_err(Unanswered::Client)
}

/// Why [`open`] got no connection.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The server took the connection and said nothing for this long.
    Silent {
        server: String,
        limit: Duration,
    },
    Client(postgres::Error),
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unanswered::Silent { server, limit } => write!(
                f,
                "the server at {server} accepted the connection but did not answer within {} s \
                 (the URL's connect_timeout sets how long to wait)",
                limit.as_secs_f64()
            ),
            Unanswered::Client(e) => Described::fmt_error(e, f),
        }
    }
}

impl std::error::Error for Unanswered {}

/// Asks each of the URL's servers the first question of the protocol (an SSL request, which
/// every server answers with one byte and which leaves nothing in its log when the client then
/// hangs up), each within `limit`; `Err` when every server that took the connection stayed
/// silent. Refused and unreachable servers are left for the client to report as it does.
fn answers_within(config: &postgres::Config, limit: Duration) -> Result<(), Unanswered> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    fn ask(mut stream: impl Read + Write) -> std::io::Result<()> {
        stream.write_all(&SSL_REQUEST)?;
        stream.read_exact(&mut [0u8; 1])
    }
    let silent = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    };
    let ports = config.get_ports();
    let mut quiet = None;
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let (server, asked) = match host {
            postgres::config::Host::Tcp(name) => {
                let server = format!("{name}:{port}");
                let Some(addr) = (name.as_str(), port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                else {
                    return Ok(());
                };
                let asked = std::net::TcpStream::connect_timeout(&addr, limit).and_then(|s| {
                    s.set_read_timeout(Some(limit))?;
                    s.set_write_timeout(Some(limit))?;
                    ask(s)
                });
                (server, asked)
            }
            postgres::config::Host::Unix(dir) => {
                let socket = dir.join(format!(".s.PGSQL.{port}"));
                let asked = std::os::unix::net::UnixStream::connect(&socket).and_then(|s| {
                    s.set_read_timeout(Some(limit))?;
                    s.set_write_timeout(Some(limit))?;
                    ask(s)
                });
                (socket.display().to_string(), asked)
            }
        };
        match asked {
            Err(e) if silent(&e) => quiet = Some(server),
            // It answered, or it refused (the client says so in its own words).
            _ => return Ok(()),
        }
    }
    match quiet {
        Some(server) => Err(Unanswered::Silent { server, limit }),
        None => Ok(()),
    }
}

/// [`connect`] with connection settings of the caller's (timeouts).
pub(crate) fn connect_with(
    settings: &PgSettings,
    location: &StorePlace,
) -> Result<Client, StoreError> {
    let mut client = open(settings).map_err(|e| {
        let e = match e {
            Unanswered::Client(e) => e,
            silent => {
                return StoreError::Database {
                    at: location.clone(),
                    source: Box::new(silent),
                }
            }
        };
        if let Some(problem) = super::pg_tls::tls_failure(&e, &settings.tls.settings) {
            return StoreError::Tls {
                at: location.clone(),
                problem,
            };
        }
        use postgres::error::SqlState;
        // Class 28 (authorization) and an unknown database: the URL is wrong, not the server.
        match e.as_db_error() {
            Some(db)
                if db.code().code().starts_with("28")
                    || *db.code() == SqlState::INVALID_CATALOG_NAME =>
            {
                StoreError::Refused {
                    at: location.clone(),
                    reason: db.message().to_string(),
                }
            }
            _ => db_error(location, e),
        }
    })?;
    migrate(&mut client, location)?;
    Ok(client)
}

/// The id of experiment `name`, if it was created; [`StoreError::NoMeta`] if not.
pub(crate) fn existing(
    client: &mut Client,
    name: &str,
    location: &StorePlace,
) -> Result<i64, StoreError> {
    let row = client
        .query_opt(
            "SELECT id FROM tune_experiments WHERE name = $1 AND meta IS NOT NULL",
            &[&name],
        )
        .map_err(|e| db_error(location, e))?;
    row.map(|r| r.get(0)).ok_or(StoreError::NoMeta)
}

/// Applies the migrations the database lacks, under a lock so that processes starting at once
/// do not race; a database migrated by a newer tune is refused.
fn migrate(client: &mut Client, location: &StorePlace) -> Result<(), StoreError> {
    let err = |e: postgres::Error| db_error(location, e);
    let mut tx = client.transaction().map_err(err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_SPACE])
        .map_err(err)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS tune_schema (version integer NOT NULL)")
        .map_err(err)?;
    let applied: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM tune_schema", &[])
        .map_err(err)?
        .get(0);
    let known = MIGRATIONS.len() as i32;
    if applied > known {
        return Err(StoreError::Format {
            at: location.clone(),
            found: applied as u32,
            read: &[SCHEMA_VERSION],
        });
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(applied as usize) {
        tx.batch_execute(sql).map_err(err)?;
        tx.execute(
            "INSERT INTO tune_schema (version) VALUES ($1)",
            &[&(version as i32 + 1)],
        )
        .map_err(err)?;
    }
    tx.commit().map_err(err)
}

/// The schema version this build writes.
const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

pub(crate) fn db_error(location: &StorePlace, e: postgres::Error) -> StoreError {
    StoreError::Database {
        at: location.clone(),
        source: Box::new(Described(e)),
    }
}

/// A PostgreSQL error with what the server said (the client's own text is only "db error").
#[derive(Debug)]
pub(crate) struct Described(pub(crate) postgres::Error);

impl std::fmt::Display for Described {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Described::fmt_error(&self.0, f)
    }
}

impl Described {
    fn fmt_error(e: &postgres::Error, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match e.as_db_error() {
            Some(db) => {
                write!(f, "{}: {}", db.severity(), db.message())?;
                if let Some(detail) = db.detail() {
                    write!(f, " ({detail})")?;
                }
                Ok(())
            }
            None => match std::error::Error::source(e) {
                Some(cause) => write!(f, "{e}: {cause}"),
                None => write!(f, "{e}"),
            },
        }
    }
}

impl std::error::Error for Described {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// A count or id as PostgreSQL's bigint.
pub(crate) fn bigint(n: u64) -> i64 {
    // Ids and result positions are dense counts: they never come near 2^63.
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What [`apply`] runs.
const APPLY: &str = "WITH m AS (
            UPDATE tune_experiments SET meta = $2 WHERE id = $1 AND $2::text IS NOT NULL
            RETURNING 1),
         t AS (
            INSERT INTO tune_trials (experiment, id, status, record)
            SELECT $1, * FROM unnest($3::bigint[], $4::text[], $5::text[])
            ON CONFLICT (experiment, id)
            DO UPDATE SET status = excluded.status, record = excluded.record
            RETURNING 1),
         r AS (
            INSERT INTO tune_results (experiment, trial, seq, record)
            SELECT $1, * FROM unnest($6::bigint[], $7::bigint[], $8::text[])
            ON CONFLICT (experiment, trial, seq) DO UPDATE SET record = excluded.record
            RETURNING 1)
         SELECT (SELECT count(*) FROM m), (SELECT count(*) FROM t), (SELECT count(*) FROM r)";

/// Sends `pending` through `client` as one statement (atomic by itself: a sync is one round
/// trip, with no transaction around it).
fn apply(
    client: &mut impl GenericClient,
    statement: &(impl postgres::ToStatement + ?Sized),
    experiment: i64,
    pending: &Pending,
) -> Result<(), postgres::Error> {
    let ids: Vec<i64> = pending.trials.keys().map(|&id| bigint(id)).collect();
    let statuses: Vec<&str> = pending.trials.values().map(|(s, _)| *s).collect();
    let records: Vec<&str> = pending.trials.values().map(|(_, r)| r.as_str()).collect();
    let result_trials: Vec<i64> = pending.results.keys().map(|&(t, _)| bigint(t)).collect();
    let seqs: Vec<i64> = pending.results.keys().map(|&(_, s)| bigint(s)).collect();
    let results: Vec<&str> = pending.results.values().map(String::as_str).collect();
    client.execute(
        statement,
        &[
            &experiment,
            &pending.meta,
            &ids,
            &statuses,
            &records,
            &result_trials,
            &seqs,
            &results,
        ],
    )?;
    Ok(())
}

/// Everything stored for `experiment`, as the client sees it.
pub(crate) fn read(
    client: &mut impl GenericClient,
    experiment: i64,
    location: &StorePlace,
) -> Result<StoredExperiment, StoreError> {
    let err = |e: postgres::Error| db_error(location, e);
    let meta: Option<String> = client
        .query_one(
            "SELECT meta FROM tune_experiments WHERE id = $1",
            &[&experiment],
        )
        .map_err(err)?
        .get(0);
    let meta: Meta = decode(meta.ok_or(StoreError::NoMeta)?.as_bytes(), || {
        "the experiment record".into()
    })?;
    let mut trials: Vec<Trial> = Vec::new();
    for row in client
        .query(
            "SELECT id, record FROM tune_trials WHERE experiment = $1 ORDER BY id",
            &[&experiment],
        )
        .map_err(err)?
    {
        let id: i64 = row.get(0);
        let record: &str = row.get(1);
        trials.push(decode(record.as_bytes(), || format!("trial {id}"))?);
    }
    let index: BTreeMap<TrialId, usize> =
        trials.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    for row in client
        .query(
            "SELECT trial, seq, record FROM tune_results WHERE experiment = $1
             ORDER BY trial, seq",
            &[&experiment],
        )
        .map_err(err)?
    {
        let (trial, seq): (i64, i64) = (row.get(0), row.get(1));
        let record: &str = row.get(2);
        let result: TrialResult = decode(record.as_bytes(), || {
            format!("result {seq} of trial {trial}")
        })?;
        if let Some(&i) = index.get(&(trial as u64)) {
            trials[i].results.push(result);
        }
    }
    Ok(StoredExperiment { meta, trials })
}

impl Drop for PgStore {
    /// Frees the experiment at once (the server would, once it saw the connection close).
    fn drop(&mut self) {
        let _ = self.client.get_mut().execute(
            "SELECT pg_advisory_unlock($1, $2::int)",
            &[&LOCK_SPACE, &(self.experiment as i32)],
        );
    }
}

impl TrialStore for PgStore {
    fn load(&self) -> Result<StoredExperiment, StoreError> {
        let mut client = self.client.borrow_mut();
        if self.pending.is_empty() {
            return read(&mut *client, self.experiment, &self.location);
        }
        // What this store wrote and has not synced is read too, in a transaction rolled back.
        let err = |e: postgres::Error| db_error(&self.location, e);
        let mut tx = client.transaction().map_err(err)?;
        apply(&mut tx, APPLY, self.experiment, &self.pending).map_err(err)?;
        let stored = read(&mut tx, self.experiment, &self.location);
        tx.rollback().map_err(err)?;
        stored
    }

    fn put_meta(&mut self, meta: &Meta) -> Result<(), StoreError> {
        let bytes = encode(meta, || "the experiment record".into())?;
        failpoint::hit("store.write").map_err(|e| io_error(&self.location, e))?;
        self.pending.meta = Some(text(bytes));
        Ok(())
    }

    fn put_trial(&mut self, trial: &Trial) -> Result<(), StoreError> {
        let bytes = encode(trial, || format!("trial {}", trial.id))?;
        failpoint::hit("store.write").map_err(|e| io_error(&self.location, e))?;
        self.pending
            .trials
            .insert(trial.id, (trial.status.as_str(), text(bytes)));
        Ok(())
    }

    fn add_result(&mut self, id: TrialId, result: &TrialResult) -> Result<(), StoreError> {
        let bytes = encode(result, || format!("result {} of trial {id}", result.seq))?;
        failpoint::hit("store.write").map_err(|e| io_error(&self.location, e))?;
        self.pending.results.insert((id, result.seq), text(bytes));
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        failpoint::hit("store.sync.before").map_err(|e| io_error(&self.location, e))?;
        if !self.pending.is_empty() {
            // Writing twice is harmless (every record is an upsert of the same text), so a
            // write the server may or may not have taken before it went away is sent again.
            let deadline = Instant::now() + OUTAGE_RIDDEN;
            loop {
                let e = match self.apply_pending() {
                    Ok(()) => break,
                    Err(e) => e,
                };
                if !connection_lost(&e, self.client.get_mut()) || Instant::now() >= deadline {
                    return Err(db_error(&self.location, e));
                }
                loop {
                    std::thread::sleep(RETRY_PAUSE);
                    match self.reconnect() {
                        Ok(()) => break,
                        Err(e @ StoreError::InUse { .. }) => return Err(e),
                        Err(e) if Instant::now() >= deadline => return Err(e),
                        Err(_) => {}
                    }
                }
            }
            self.pending = Pending::default();
        }
        failpoint::hit("store.sync.after").map_err(|e| io_error(&self.location, e))?;
        Ok(())
    }
}

/// How long a store waits before it connects again to a server that went away.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// An encoded record as text (serde_json writes UTF-8, so nothing is replaced).
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

fn io_error(location: &StorePlace, e: std::io::Error) -> StoreError {
    StoreError::Database {
        at: location.clone(),
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_server as server;

    /// One experiment name per harness, in one database per harness.
    pub(crate) struct PgHarness {
        url: String,
    }

    impl PgHarness {
        pub(crate) fn new() -> PgHarness {
            PgHarness {
                url: server::fresh_database(),
            }
        }
    }

    impl crate::store::conformance::Harness for PgHarness {
        type Store = PgStore;
        fn open(&self) -> Result<PgStore, StoreError> {
            // No wait for a held lock: the suite's refusal test needs the answer now.
            PgStore::open_as(&self.url, "c", true, Duration::ZERO)
        }
    }

    crate::store::conformance::conformance_suite!(PgHarness::new());

    #[test]
    fn experiments_share_a_database_without_seeing_each_other() {
        let url = server::fresh_database();
        let mut a = PgStore::open(&url, "a").unwrap();
        let mut b = PgStore::open(&url, "b").unwrap();
        a.put_meta(&crate::store::conformance::meta(1)).unwrap();
        b.put_meta(&crate::store::conformance::meta(2)).unwrap();
        a.put_trial(&crate::store::conformance::trial(0)).unwrap();
        a.sync().unwrap();
        b.sync().unwrap();
        assert_eq!(a.load().unwrap().trials.len(), 1);
        assert_eq!(b.load().unwrap().trials.len(), 0);
        assert_eq!(b.load().unwrap().meta.samples, 2);
    }

    #[test]
    fn unsynced_writes_are_lost_with_the_store() {
        let url = server::fresh_database();
        let mut store = PgStore::open(&url, "x").unwrap();
        store.put_meta(&crate::store::conformance::meta(1)).unwrap();
        store.sync().unwrap();
        store
            .put_trial(&crate::store::conformance::trial(0))
            .unwrap();
        assert_eq!(store.load().unwrap().trials.len(), 1);
        drop(store); // as a crash before the sync
        let store = PgStore::open(&url, "x").unwrap();
        assert!(store.load().unwrap().trials.is_empty());
    }

    #[test]
    fn a_second_coordinator_is_told_which_process_holds_the_experiment() {
        let url = server::fresh_database();
        let _held = PgStore::open(&url, "x").unwrap();
        let e = PgStore::open_as(&url, "x", true, Duration::ZERO)
            .err()
            .unwrap();
        let message = e.to_string();
        assert!(
            message.contains(&format!(":{} since ", std::process::id())),
            "{message}"
        );
        assert!(message.ends_with(" UTC)"), "{message}");
    }

    #[test]
    fn a_database_of_a_newer_schema_is_refused_with_its_version() {
        let url = server::fresh_database();
        drop(PgStore::open(&url, "x").unwrap());
        let mut admin = Client::connect(&url, postgres::NoTls).unwrap();
        admin
            .execute("INSERT INTO tune_schema (version) VALUES (99)", &[])
            .unwrap();
        let e = PgStore::open(&url, "x").err().unwrap();
        assert!(matches!(e, StoreError::Format { found: 99, .. }), "{e}");
    }

    #[test]
    fn an_unreachable_server_is_a_database_error_naming_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("postgres://tune:pw@127.0.0.1:{port}/tune");
        let e = PgStore::open(&url, "x").err().unwrap();
        assert!(matches!(e, StoreError::Database { .. }), "{e}");
        let message = e.to_string();
        assert!(
            message.contains(&format!("postgres://tune@127.0.0.1:{port}/tune")),
            "{message}"
        );
        assert!(!message.contains("pw"), "{message}");
    }
}
