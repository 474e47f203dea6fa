//! TLS to PostgreSQL as libpq reads it from the URL: `sslmode` (`disable`, `prefer`, `require`,
//! `verify-ca`, `verify-full`), `sslrootcert` (a PEM file, or `system` for Mozilla's roots),
//! `sslcert` and `sslkey` (a client certificate), with libpq's defaults under
//! `~/.postgresql/` (`root.crt`, `postgresql.crt`, `postgresql.key`) where the URL names none.
//! The PostgreSQL client parses only `disable`, `prefer` and `require`, so these settings are
//! taken out of the URL here and the rest is left to it.
//!
//! What each mode checks, as libpq does:
//!
//! | sslmode | encrypted | server certificate checked |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (the default) | where the server offers TLS | no |
//! | `require` | always | no; against `sslrootcert` where one is found (as `verify-ca`) |
//! | `verify-ca` | always | signed by `sslrootcert`'s CA, in date |
//! | `verify-full` | always | as `verify-ca`, and issued for the host name |

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<SslMode, String> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow (plain first, TLS only if refused) is not supported; \
                            use prefer (TLS first) or disable"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "sslmode must be one of disable, prefer, require, verify-ca, verify-full; \
                     found {other:?}"
                ))
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What the PostgreSQL client itself is told: whether TLS may, or must, be used.
    fn client_mode(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        }
    }
}

/// The TLS settings a URL gives, before any file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: SslMode,
    root_cert: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// `url` without its TLS settings (for the PostgreSQL client to parse), and those settings.
/// Both of libpq's forms: `postgresql://...?sslmode=...&...` and `key=value ...`.
pub(crate) fn split_url(url: &str) -> Result<(String, TlsSettings), String> {
    let mut found: Vec<(String, String)> = Vec::new();
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if TLS_KEYS.contains(&key) {
                        found.push((key.to_string(), percent_decoded(value)?));
                    } else {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for (key, value) in super::libpq_settings::key_values(url)? {
            if TLS_KEYS.contains(&key.as_str()) {
                found.push((key, value));
            } else {
                kept.push(super::libpq_settings::key_value(&key, &value));
            }
        }
        kept.join(" ")
    };
    let mut settings = TlsSettings {
        mode: SslMode::Prefer,
        root_cert: None,
        cert: None,
        key: None,
    };
    for (key, value) in found {
        match key.as_str() {
            "sslmode" => settings.mode = SslMode::parse(&value)?,
            "sslrootcert" => settings.root_cert = Some(value),
            "sslcert" => settings.cert = Some(value.into()),
            _ => settings.key = Some(value.into()),
        }
    }
    Ok((rest, settings))
}

fn percent_decoded(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("a bad percent-escape in {text:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
}

/// What connecting needs beside the client's settings: the connector that makes TLS sessions
/// as `sslmode` says, and the mode for the client.
#[derive(Clone)]
pub(crate) struct TlsConnector {
    pub(crate) settings: TlsSettings,
    pub(crate) connector: MakeRustlsConnect,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TlsSettings {
    /// Tells `config` whether TLS may or must be used.
    pub(crate) fn apply(&self, config: &mut postgres::Config) {
        config.ssl_mode(self.mode.client_mode());
    }

    /// Reads the certificate files and builds the connector; a file that is missing or
    /// unreadable, or a mode that needs a CA and has none, is the URL's fault (the message
    /// names the setting and the file).
    pub(crate) fn connector(&self) -> Result<TlsConnector, String> {
        self.connector_with_home(home().as_deref())
    }

    fn connector_with_home(&self, home: Option<&Path>) -> Result<TlsConnector, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let default_file = |name: &str| {
            home.map(|h| h.join(".postgresql").join(name))
                .filter(|p| p.is_file())
        };
        let roots = match self.root_cert.as_deref() {
            Some("system") => Some(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            }),
            Some(file) => Some(read_roots(Path::new(file), "sslrootcert")?),
            None => match default_file("root.crt") {
                Some(file) => Some(read_roots(&file, "sslrootcert (libpq's default)")?),
                None => None,
            },
        };
        let checks = match (self.mode, roots) {
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                return Err(format!(
                    "sslmode={} checks the server's certificate against a CA, and the URL names \
                     none: set sslrootcert to the CA's PEM file (or sslrootcert=system for the \
                     public roots), put it at ~/.postgresql/root.crt, or use sslmode=require to \
                     encrypt without checking",
                    self.mode.as_str()
                ))
            }
            (SslMode::VerifyFull, Some(roots)) => Checks::ChainAndName(roots),
            // libpq: `require` with a CA at hand checks as `verify-ca` does.
            (SslMode::VerifyCa | SslMode::Require, Some(roots)) => Checks::Chain(roots),
            (SslMode::Disable | SslMode::Prefer | SslMode::Require, _) => Checks::Nothing,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match checks {
            Checks::Nothing => Arc::new(EncryptOnly(provider.clone())),
            Checks::Chain(roots) | Checks::ChainAndName(roots) => {
                let full = matches!(self.mode, SslMode::VerifyFull);
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("sslrootcert: {e}"))?;
                if full {
                    webpki
                } else {
                    Arc::new(AnyName(webpki))
                }
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let cert = match &self.cert {
            Some(file) => Some((file.clone(), "sslcert")),
            None => default_file("postgresql.crt").map(|f| (f, "sslcert (libpq's default)")),
        };
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some((cert_file, cert_key)) => {
                let certs = CertificateDer::pem_file_iter(&cert_file)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("{cert_key} {}: {e}", cert_file.display()))?;
                if certs.is_empty() {
                    return Err(format!(
                        "{cert_key} {}: no PEM certificate in it",
                        cert_file.display()
                    ));
                }
                let (key_file, key_name) = match (&self.key, home) {
                    (Some(k), _) => (k.clone(), "sslkey"),
                    (None, Some(h)) => (
                        h.join(".postgresql").join("postgresql.key"),
                        "sslkey (unset, so libpq's default)",
                    ),
                    (None, None) => {
                        return Err(format!(
                            "{cert_key} {} is set and sslkey is not: the client certificate \
                             needs its key",
                            cert_file.display()
                        ))
                    }
                };
                let key = PrivateKeyDer::from_pem_file(&key_file)
                    .map_err(|e| format!("{key_name} {}: {e}", key_file.display()))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| format!("sslcert/sslkey: {e}"))?
            }
        };
        Ok(TlsConnector {
            settings: self.clone(),
            connector: MakeRustlsConnect::new(config),
        })
    }
}

enum Checks {
    Nothing,
    Chain(RootCertStore),
    ChainAndName(RootCertStore),
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn read_roots(file: &Path, key: &str) -> Result<RootCertStore, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{key} {}: {e}", file.display()))?;
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "{key} {}: no CA certificate in it (expected PEM)",
            file.display()
        ));
    }
    Ok(roots)
}

/// `sslmode=prefer`/`require` without a CA: the session is encrypted and its handshake
/// signatures checked, the certificate's issuer not (libpq's behaviour, and why `verify-*`
/// exist).
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain and dates as `verify-full` checks them, any host name.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// What a failed TLS handshake says to the user, where `error`'s causes hold one: the
/// certificate check that failed, in the words of the setting that made it; `None` where the
/// failure was not TLS's.
pub(crate) fn tls_failure(
    error: &(dyn std::error::Error + 'static),
    settings: &TlsSettings,
) -> Option<String> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return Some(describe(tls, settings));
        }
        if e.to_string() == "server does not support TLS" {
            return Some(format!(
                "the server does not offer TLS, and sslmode={} requires it",
                settings.mode.as_str()
            ));
        }
        cause = e.source();
    }
    None
}

fn describe(error: &rustls::Error, settings: &TlsSettings) -> String {
    let ca = || {
        settings
            .root_cert
            .clone()
            .unwrap_or_else(|| "~/.postgresql/root.crt".into())
    };
    let what = match error {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => format!(
                "the server's certificate is not signed by the CA in sslrootcert ({})",
                ca()
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "the server's certificate is not issued for the host the URL names \
                 (sslmode=verify-full checks the name; verify-ca does not)"
                    .to_string()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired".to_string()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet (is this machine's clock right?)"
                    .to_string()
            }
            _ => "the server's certificate was refused".to_string(),
        },
        rustls::Error::AlertReceived(_) => {
            "the server ended the TLS handshake (a client certificate it does not accept?)"
                .to_string()
        }
        _ => "the TLS handshake failed".to_string(),
    };
    format!("{what} ({error}; sslmode={})", settings.mode.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_come_out_of_either_form_of_url_and_the_rest_stays() {
        let (rest, tls) = split_url(
            "postgres://u:p@db:5432/tune?connect_timeout=5&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca%20x.pem&sslcert=/c.pem&sslkey=/k.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@db:5432/tune?connect_timeout=5");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/tmp/ca x.pem"));
        assert_eq!(tls.cert.as_deref(), Some(Path::new("/c.pem")));
        assert_eq!(tls.key.as_deref(), Some(Path::new("/k.pem")));

        let (rest, tls) = split_url(
            r"host=db user=u password='it\'s' sslmode = verify-ca sslrootcert='/a b/ca.pem'",
        )
        .unwrap();
        assert_eq!(rest, r"host=db user=u password='it\'s'");
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(tls.root_cert.as_deref(), Some("/a b/ca.pem"));
        let parsed: postgres::Config = rest.parse().unwrap();
        assert_eq!(parsed.get_password(), Some(&b"it's"[..]));

        let (rest, tls) = split_url("postgresql://db/tune").unwrap();
        assert_eq!(rest, "postgresql://db/tune");
        assert_eq!(tls.mode, SslMode::Prefer, "libpq's default");
    }

    #[test]
    fn a_mode_libpq_does_not_know_or_tune_does_not_do_is_refused_by_name() {
        let e = split_url("postgres://db/tune?sslmode=verify_full").unwrap_err();
        assert!(e.contains("found \"verify_full\""), "{e}");
        let e = split_url("postgres://db/tune?sslmode=allow").unwrap_err();
        assert!(e.contains("allow"), "{e}");
    }

    #[test]
    fn verifying_without_a_ca_says_where_one_goes() {
        let home = tempfile::tempdir().unwrap();
        let (_, tls) = split_url("postgres://db/tune?sslmode=verify-full").unwrap();
        let e = tls.connector_with_home(Some(home.path())).unwrap_err();
        assert!(
            e.contains("sslrootcert") && e.contains("sslmode=require"),
            "{e}"
        );
        let (_, tls) = split_url("postgres://db/tune?sslmode=require").unwrap();
        assert!(tls.connector_with_home(Some(home.path())).is_ok());
        let (_, tls) =
            split_url("postgres://db/tune?sslmode=verify-ca&sslrootcert=/no/such/ca.pem").unwrap();
        let e = tls.connector_with_home(Some(home.path())).unwrap_err();
        assert!(e.starts_with("sslrootcert /no/such/ca.pem:"), "{e}");
    }

    mod against_a_server {
        use super::super::*;
        use crate::store::pg_store::{connect_with, PgSettings};
        use crate::store::{postgres_location, StoreError};
        use tune_testkit::pg_tls_server::{fresh_tls_database, ServerCert, TlsDatabase, PASSWORD};

        /// `url`'s settings as a machine without `~/.postgresql/` reads them.
        fn settings(url: &str) -> Result<PgSettings, StoreError> {
            let at = postgres_location(url, "x");
            let (rest, tls) = split_url(url).unwrap();
            let mut config: postgres::Config = rest.parse().unwrap();
            tls.apply(&mut config);
            let home = tempfile::tempdir().unwrap();
            let tls = tls
                .connector_with_home(Some(home.path()))
                .map_err(|problem| StoreError::Tls { at, problem })?;
            Ok(PgSettings { config, tls })
        }

        /// Whether a connection as `url` says is encrypted, or why there is none.
        fn encrypted(url: &str) -> Result<bool, StoreError> {
            let mut client = connect_with(&settings(url)?, &postgres_location(url, "x"))?;
            Ok(client
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .unwrap()
                .get(0))
        }

        fn refused(url: &str) -> String {
            let e = encrypted(url).expect_err(url);
            let text = e.to_string();
            assert!(!text.contains(PASSWORD), "{text}");
            assert!(
                crate::TuneError::Store(e).is_input(),
                "a URL's TLS that fails is the input's fault: {text}"
            );
            text
        }

        fn ca(db: &TlsDatabase, file: &str) -> String {
            format!("sslrootcert={}", db.file(file).display())
        }

        #[test]
        fn each_sslmode_connects_or_is_refused_as_libpq_would() {
            let db = fresh_tls_database(ServerCert::Valid);
            let good = ca(&db, "ca.pem");
            for (host, mode) in [
                ("localhost", "verify-full"),
                ("127.0.0.1", "verify-full"),
                ("localhost", "verify-ca"),
                ("localhost", "require"),
            ] {
                let url = db.password_url(host, &format!("sslmode={mode}&{good}"));
                assert!(encrypted(&url).unwrap(), "{url}");
            }
            // No CA: encrypted, unchecked.
            for mode in ["require", "prefer"] {
                let url = db.password_url("localhost", &format!("sslmode={mode}"));
                assert!(encrypted(&url).unwrap(), "{url}");
            }
            // This server takes no connection without TLS.
            let e = refused(&db.password_url("localhost", "sslmode=disable"));
            assert!(e.contains("no encryption"), "{e}");
        }

        #[test]
        fn a_certificate_its_checks_refuse_says_which_check() {
            let db = fresh_tls_database(ServerCert::Valid);
            let e = refused(&db.password_url(
                "localhost",
                &format!("sslmode=verify-full&{}", ca(&db, "other-ca.pem")),
            ));
            assert!(e.contains("not signed by the CA in sslrootcert"), "{e}");
            // require with a CA at hand checks the chain, as libpq does.
            let e = refused(&db.password_url(
                "localhost",
                &format!("sslmode=require&{}", ca(&db, "other-ca.pem")),
            ));
            assert!(e.contains("not signed by the CA"), "{e}");
            // The name is checked by verify-full only.
            let wrong_host = format!("hostaddr=127.0.0.1&{}", ca(&db, "ca.pem"));
            let e = refused(&db.password_url(
                "not-the-server",
                &format!("sslmode=verify-full&{wrong_host}"),
            ));
            assert!(e.contains("not issued for the host"), "{e}");
            let url = db.password_url("not-the-server", &format!("sslmode=verify-ca&{wrong_host}"));
            assert!(encrypted(&url).unwrap());

            let expired = fresh_tls_database(ServerCert::Expired);
            let e = refused(&expired.password_url(
                "localhost",
                &format!("sslmode=verify-full&{}", ca(&expired, "ca.pem")),
            ));
            assert!(e.contains("has expired"), "{e}");
            // Unchecked, an expired certificate still encrypts.
            let url = expired.password_url("localhost", "sslmode=require");
            assert!(encrypted(&url).unwrap());
        }

        #[test]
        fn a_client_certificate_logs_in_and_its_absence_is_refused() {
            let db = fresh_tls_database(ServerCert::Valid);
            let files = format!(
                "sslmode=verify-full&{}&sslcert={}&sslkey={}",
                ca(&db, "ca.pem"),
                db.file("client.pem").display(),
                db.file("client.key").display()
            );
            assert!(encrypted(&db.cert_url("localhost", &files)).unwrap());
            let e = refused(&db.cert_url(
                "localhost",
                &format!("sslmode=verify-full&{}", ca(&db, "ca.pem")),
            ));
            assert!(e.contains("certificate"), "{e}");
            let e = refused(&db.cert_url(
                "localhost",
                &format!(
                    "sslmode=require&sslcert={}",
                    db.file("client.pem").display()
                ),
            ));
            assert!(e.contains("sslkey"), "{e}");
        }

        #[test]
        fn a_server_without_tls_is_used_plain_by_prefer_and_refused_by_require() {
            let url = crate::store::test_server::fresh_database();
            let join = if url.contains('?') { '&' } else { '?' };
            assert!(!encrypted(&format!("{url}{join}sslmode=prefer")).unwrap());
            assert!(!encrypted(&url).unwrap(), "prefer is the default");
            let e = refused(&format!("{url}{join}sslmode=require"));
            assert!(e.contains("does not offer TLS"), "{e}");
        }
    }
}
