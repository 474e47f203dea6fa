//! Private PostgreSQL servers with `ssl = on`, for the TLS tests: a CA, a server certificate
//! it signs (for `localhost` and 127.0.0.1), a client certificate for the role `tune_cert`,
//! and a second CA that signed none of them, all made here. The server takes only TLS over
//! TCP: `tune_cert` logs in by its certificate, `tune` by password; the maintenance connection
//! goes through the Unix socket.
//!
//! One server per [`ServerCert`] and test process, stopped when the process ends.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::pg_server::Cluster;

/// The password of the role `tune` on a TLS server.
pub const PASSWORD: &str = "tls-test-secret-3f9a";

/// The certificate the server presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCert {
    /// Signed by the CA, valid from 1975 to 4096.
    Valid,
    /// Signed by the CA, valid only through 2020.
    Expired,
}

/// A database of its own on a TLS server, with the files a client needs.
#[derive(Debug, Clone)]
pub struct TlsDatabase {
    /// The database's name.
    pub name: String,
    /// The server's port on 127.0.0.1.
    pub port: u16,
    /// `ca.pem` (the CA that signed the server and client certificates), `other-ca.pem` (one
    /// that signed neither), `client.pem` and `client.key` (the role `tune_cert`'s).
    pub files: PathBuf,
}

impl TlsDatabase {
    /// A URL of the role `tune` (by password) on `host`, with `settings` as its query.
    pub fn password_url(&self, host: &str, settings: &str) -> String {
        format!(
            "postgres://tune:{PASSWORD}@{host}:{}/{}?{settings}",
            self.port, self.name
        )
    }

    /// A URL of the role `tune_cert` (by its client certificate) on `host`, with `settings`.
    pub fn cert_url(&self, host: &str, settings: &str) -> String {
        format!(
            "postgres://tune_cert@{host}:{}/{}?{settings}",
            self.port, self.name
        )
    }

    /// One of the files (`ca.pem`, `other-ca.pem`, `client.pem`, `client.key`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.files.join(name)
    }
}

struct Server {
    port: u16,
    socket_dir: PathBuf,
    files: PathBuf,
    _watchdog: Mutex<Child>,
}

/// A new, empty database on the TLS server presenting `cert`, for one test.
pub fn fresh_tls_database(cert: ServerCert) -> TlsDatabase {
    static VALID: OnceLock<Server> = OnceLock::new();
    static EXPIRED: OnceLock<Server> = OnceLock::new();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let server = match cert {
        ServerCert::Valid => VALID.get_or_init(|| start(cert)),
        ServerCert::Expired => EXPIRED.get_or_init(|| start(cert)),
    };
    let name = format!(
        "tune_tls_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = maintenance(&server.socket_dir, server.port)
        .unwrap_or_else(|e| panic!("the TLS test PostgreSQL: {e}"));
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    TlsDatabase {
        name,
        port: server.port,
        files: server.files.clone(),
    }
}

fn maintenance(socket_dir: &Path, port: u16) -> Result<postgres::Client, postgres::Error> {
    postgres::Config::new()
        .host_path(socket_dir)
        .port(port)
        .user("tune")
        .dbname("postgres")
        .connect(postgres::NoTls)
}

fn start(cert: ServerCert) -> Server {
    let cluster = Cluster::init("tune-pg-tls-", |c| {
        let (tls, client) = (c.root.join("tls"), c.root.join("client"));
        std::fs::create_dir_all(&tls).unwrap();
        std::fs::create_dir_all(&client).unwrap();
        // PostgreSQL's `cert` method takes the role from the certificate's common name.
        let expired = cert == ServerCert::Expired;
        crate::certificates::write_certificates(expired, "tune_cert", &tls, &client);
        std::fs::write(
            c.data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all tune_cert 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 scram-sha-256\n\
             host all all 127.0.0.1/32 reject\n",
        )
        .unwrap();
    });
    let tls = cluster.root.join("tls");
    let files = cluster.root.join("client");
    let settings = format!(
        "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={} \
         -c password_encryption=scram-sha-256",
        tls.join("server.pem").display(),
        tls.join("server.key").display(),
        tls.join("ca.pem").display(),
    );
    let (socket_dir, port) = (cluster.root.clone(), cluster.port);
    let watchdog = cluster.launch(&settings, || maintenance(&socket_dir, port));
    let mut admin = maintenance(&socket_dir, port).expect("the TLS server's socket");
    admin
        .batch_execute(&format!(
            "ALTER ROLE tune PASSWORD '{PASSWORD}'; CREATE ROLE tune_cert LOGIN SUPERUSER;"
        ))
        .expect("the TLS server's roles");
    Server {
        port,
        socket_dir,
        files,
        _watchdog: Mutex::new(watchdog),
    }
}
