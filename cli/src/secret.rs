//! What the watch socket and `tune serve` share to keep a sweep to its owner: a random token,
//! and the file that hands it (with the address) to the owner's other processes.

use std::io::Write;
use std::path::Path;

/// 128 random bits from the kernel, in hex.
///
/// ```
/// let token = tune_cli::secret::new_token().unwrap();
/// assert_eq!(token.len(), 32);
/// ```
pub fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `sent` is `token`: compared in full whatever the first difference, so that how
/// long the answer takes does not hint where a guess went wrong.
///
/// ```
/// assert!(tune_cli::secret::is_token("c0ffee", "c0ffee"));
/// assert!(!tune_cli::secret::is_token("c0ffef", "c0ffee"));
/// assert!(!tune_cli::secret::is_token("c0ff", "c0ffee"));
/// ```
pub fn is_token(sent: &str, token: &str) -> bool {
    sent.len() == token.len()
        && sent
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |d, (a, b)| d | (a ^ b))
            == 0
}

/// Writes `text` to `file`, readable by its owner only (mode 0600): whole, then renamed, so
/// that a reader never sees half of it.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("serve.url");
/// tune_cli::secret::write_owner_only(&file, "http://127.0.0.1:1/?token=x\n").unwrap();
/// assert_eq!(std::fs::read_to_string(&file).unwrap(), "http://127.0.0.1:1/?token=x\n");
/// ```
pub fn write_owner_only(file: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?
        .write_all(text.as_bytes())?;
    std::fs::rename(&tmp, file)
}
