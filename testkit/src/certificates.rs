//! Certificates for the TLS tests, made here: a CA, a server certificate it signs (for
//! `localhost` and 127.0.0.1), a client certificate, and a second CA that signed none of them.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// Writes `ca.pem`, `server.pem` and `server.key` to `server_dir`; `ca.pem` again,
/// `other-ca.pem`, and `client.pem` and `client.key` (common name `client_name`) to
/// `client_dir`. `expired`: the server's certificate was valid only through 2020. Every file
/// is 0600 (PostgreSQL and libpq refuse a key others may read).
pub fn write_certificates(expired: bool, client_name: &str, server_dir: &Path, client_dir: &Path) {
    let ca = authority("tune test CA");
    let other = authority("a CA tune's test server does not know");
    let mut server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "tune test server");
    if expired {
        server.not_before = rcgen::date_time_ymd(2020, 1, 1);
        server.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let server_key = KeyPair::generate().unwrap();
    let server = server.signed_by(&server_key, &ca).unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client
        .distinguished_name
        .push(DnType::CommonName, client_name);
    let client_key = KeyPair::generate().unwrap();
    let client = client.signed_by(&client_key, &ca).unwrap();
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write(server_dir.join("ca.pem"), ca.pem());
    write(server_dir.join("server.pem"), server.pem());
    write(server_dir.join("server.key"), server_key.serialize_pem());
    write(client_dir.join("ca.pem"), ca.pem());
    write(client_dir.join("other-ca.pem"), other.pem());
    write(client_dir.join("client.pem"), client.pem());
    write(client_dir.join("client.key"), client_key.serialize_pem());
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}
