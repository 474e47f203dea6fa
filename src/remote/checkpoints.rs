//! Trial folders kept in the database (`[store] checkpoints = "database"`), so that checkpoints
//! travel between workers without a shared folder: a worker writes a trial's folder there as
//! the trial checkpoints (at each report after the folder changed, and when the attempt ends),
//! fenced by its attempt's token, and fetches it into its own folder before it runs the trial;
//! an exploit's copy (PBT) is made in the database, by the worker that runs the exploit.
//!
//! A folder is one archive (each file: its path's length and path, its size and bytes), in
//! chunks of [`CHUNK`] bytes streamed in and out, with its SHA-256 checked on the way back.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use postgres::Transaction;
use sha2::{Digest, Sha256};
use tune_search::TrialId;

use super::db::Db;

/// The size of a stored chunk.
const CHUNK: usize = 1 << 20;

/// How many chunks a fetch reads per round trip.
const CHUNKS_PER_READ: i64 = 8;

/// What a trial folder holds, as far as telling a new checkpoint from the last one goes: each
/// file's path (relative, `/`-separated), size and modification time, in path order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Manifest(Vec<(String, u64, i128)>);

impl Manifest {
    /// The folder's files as they are now (none where it does not exist).
    pub(crate) fn of(dir: &Path) -> Result<Manifest, CheckpointError> {
        let mut files = Vec::new();
        walk(dir, "", &mut files).map_err(|source| CheckpointError::Folder {
            path: dir.to_path_buf(),
            source,
        })?;
        files.sort();
        Ok(Manifest(files))
    }

    fn bytes(&self) -> u64 {
        self.0.iter().map(|(_, size, _)| size).sum()
    }
}

fn walk(dir: &Path, prefix: &str, files: &mut Vec<(String, u64, i128)>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound && prefix.is_empty() => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_str().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a file name that is not UTF-8: {name:?}"),
            )
        })?;
        let path = format!("{prefix}{name}");
        let meta = entry.metadata()?;
        if meta.is_dir() {
            walk(&entry.path(), &format!("{path}/"), files)?;
        } else if meta.is_file() {
            let modified = meta
                .modified()?
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i128);
            files.push((path, meta.len(), modified));
        }
    }
    Ok(())
}

/// Why a trial folder could not be kept in, or taken from, the database.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    #[error(
        "its checkpoint folder holds {size} bytes, over [store] max_checkpoint_mb ({} MiB)",
        cap >> 20
    )]
    TooLarge { size: u64, cap: u64 },
    #[error("its checkpoint folder {}: {source}", path.display())]
    Folder { path: PathBuf, source: io::Error },
    #[error("its checkpoint in the database is damaged: SHA-256 {found}, written as {expected}")]
    Damaged { expected: String, found: String },
    #[error(transparent)]
    Database(#[from] postgres::Error),
}

impl CheckpointError {
    /// The database failed, not the checkpoint: the write is tried again.
    pub(crate) fn database(self) -> Result<postgres::Error, CheckpointError> {
        match self {
            CheckpointError::Database(e) => Ok(e),
            other => Err(other),
        }
    }
}

/// The trial folder of a running attempt whose checkpoints are kept in the database.
#[derive(Debug, Clone)]
pub(crate) struct KeptFolder {
    pub dir: PathBuf,
    /// The largest folder kept, in bytes.
    pub cap: u64,
    /// The folder as last written to or fetched from the database.
    pub kept: Manifest,
}

impl KeptFolder {
    /// Writes the folder to the database if it changed since it was last kept there, for the
    /// attempt of `token`.
    pub(crate) fn save(
        &mut self,
        db: &mut Db,
        experiment: i64,
        trial: TrialId,
        token: i64,
    ) -> Result<Saved, CheckpointError> {
        // A built-in trainable's checkpoint may still be on its way to disk.
        crate::experiment::settle_written_behind(&self.dir);
        let now = Manifest::of(&self.dir)?;
        if now == self.kept {
            return Ok(Saved::Unchanged);
        }
        if now.bytes() > self.cap {
            return Err(CheckpointError::TooLarge {
                size: now.bytes(),
                cap: self.cap,
            });
        }
        let Some(sha) = upload(db, experiment, trial, token, &self.dir, &now)? else {
            return Ok(Saved::Refused);
        };
        write_marker(&self.dir, &sha);
        let bytes = now.bytes();
        self.kept = now;
        Ok(Saved::Written { bytes })
    }
}

/// What [`KeptFolder::save`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Saved {
    /// The folder is as the database keeps it: nothing written.
    Unchanged,
    /// Written, its files holding this many bytes.
    Written { bytes: u64 },
    /// The attempt no longer holds the trial: nothing written.
    Refused,
}

/// A trial folder as [`fetch`] left it.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    pub files: Manifest,
    /// The bytes of files read from the database (0: this machine's copy was that one).
    pub bytes_read: u64,
}

/// Where a worker notes which stored checkpoint its copy of a trial folder is: beside the
/// folder, so that it is not part of it.
fn marker(dir: &Path) -> PathBuf {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    dir.with_file_name(format!(".{name}.checkpoint"))
}

fn write_marker(dir: &Path, sha: &str) {
    // Only spares a fetch: without it the next run fetches the folder again.
    let _ = std::fs::write(marker(dir), sha);
}

/// The attempt of `token` is running: its writes are the trial's (taken `FOR SHARE`, so that
/// the attempt is not lost or ended under a write).
fn holds(tx: &mut Transaction, token: i64) -> Result<bool, postgres::Error> {
    Ok(tx
        .query_opt(
            "SELECT 1 FROM tune_attempts WHERE token = $1 AND state = 'running' FOR SHARE",
            &[&token],
        )?
        .is_some())
}

/// Writes `dir` (its files as in `files`) as trial `trial`'s checkpoint, in one transaction;
/// its SHA-256, or `None` where the attempt of `token` no longer holds the trial.
fn upload(
    db: &mut Db,
    experiment: i64,
    trial: TrialId,
    token: i64,
    dir: &Path,
    files: &Manifest,
) -> Result<Option<String>, CheckpointError> {
    let trial = trial as i64;
    let mut tx = db.client().transaction()?;
    if !holds(&mut tx, token)? {
        return Ok(None);
    }
    tx.execute(
        "INSERT INTO tune_checkpoints (experiment, trial, token, size, sha256)
         VALUES ($1, $2, $3, 0, '')
         ON CONFLICT (experiment, trial) DO UPDATE
         SET token = $3, size = 0, sha256 = '', written_at = now()",
        &[&experiment, &trial, &token],
    )?;
    tx.execute(
        "DELETE FROM tune_checkpoint_chunks WHERE experiment = $1 AND trial = $2",
        &[&experiment, &trial],
    )?;
    let insert = tx.prepare(
        "INSERT INTO tune_checkpoint_chunks (experiment, trial, seq, data) VALUES ($1, $2, $3, $4)",
    )?;
    let mut out = ChunkWriter {
        tx: &mut tx,
        insert,
        key: (experiment, trial),
        buf: Vec::with_capacity(CHUNK),
        seq: 0,
        hash: Sha256::new(),
        size: 0,
        failed: None,
    };
    let folder = |source| CheckpointError::Folder {
        path: dir.to_path_buf(),
        source,
    };
    for (path, size, _) in &files.0 {
        let mut file = std::fs::File::open(dir.join(path)).map_err(folder)?;
        write_entry(&mut out, path, *size, &mut file)
            .map_err(|e| out.failed.take().map_or_else(|| folder(e), Into::into))?;
    }
    out.flush()
        .map_err(|e| out.failed.take().map_or_else(|| folder(e), Into::into))?;
    let (size, sha) = (out.size as i64, hex(out.hash.clone().finalize().as_slice()));
    tx.execute(
        "UPDATE tune_checkpoints SET size = $3, sha256 = $4 WHERE experiment = $1 AND trial = $2",
        &[&experiment, &trial, &size, &sha],
    )?;
    tx.commit()?;
    Ok(Some(sha))
}

/// One file of an archive: its path's length and path, its size and bytes.
fn write_entry(
    out: &mut impl Write,
    path: &str,
    size: u64,
    file: &mut impl Read,
) -> io::Result<()> {
    out.write_all(&(path.len() as u32).to_le_bytes())?;
    out.write_all(path.as_bytes())?;
    out.write_all(&size.to_le_bytes())?;
    copy_exactly(file, out, size)
}

/// Copies `size` bytes of `from` (a file that may not have changed size since it was listed:
/// one that did fails the write).
fn copy_exactly(from: &mut impl Read, to: &mut impl Write, size: u64) -> io::Result<()> {
    let copied = io::copy(&mut from.take(size), to)?;
    if copied != size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("a file shrank while it was written ({copied} of {size} bytes)"),
        ));
    }
    Ok(())
}

/// An archive written into chunks as it is made.
struct ChunkWriter<'a, 't> {
    tx: &'a mut Transaction<'t>,
    insert: postgres::Statement,
    key: (i64, i64),
    buf: Vec<u8>,
    seq: i32,
    hash: Sha256,
    size: u64,
    /// The database error behind a failed write (io::Write can only say "other").
    failed: Option<postgres::Error>,
}

impl ChunkWriter<'_, '_> {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let (experiment, trial) = self.key;
        let sent = self
            .tx
            .execute(&self.insert, &[&experiment, &trial, &self.seq, &self.buf]);
        if let Err(e) = sent {
            self.failed = Some(e);
            return Err(io::Error::other("the database refused a chunk"));
        }
        self.seq += 1;
        self.buf.clear();
        Ok(())
    }
}

impl Write for ChunkWriter<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = bytes.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&bytes[..n]);
        self.hash.update(&bytes[..n]);
        self.size += n as u64;
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Makes `dir` trial `trial`'s checkpoint as the database keeps it, unless this worker's copy
/// is that one already (its marker says so); returns the folder as it then is. Where the
/// database keeps none, `dir` is left as it is, or emptied where `replace` (an exploit, whose
/// folder is its source's or nothing).
pub(crate) fn fetch(
    db: &mut Db,
    experiment: i64,
    trial: TrialId,
    dir: &Path,
    replace: bool,
) -> Result<Fetched, CheckpointError> {
    let local = |dir: &Path| {
        Manifest::of(dir).map(|files| Fetched {
            files,
            bytes_read: 0,
        })
    };
    let trial_key = trial as i64;
    let mut tx = db
        .client()
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?;
    let stored = tx.query_opt(
        "SELECT sha256 FROM tune_checkpoints WHERE experiment = $1 AND trial = $2",
        &[&experiment, &trial_key],
    )?;
    let folder = |source| CheckpointError::Folder {
        path: dir.to_path_buf(),
        source,
    };
    let Some(row) = stored else {
        if replace {
            let _ = std::fs::remove_file(marker(dir));
            remove_folder(dir).map_err(folder)?;
        }
        return local(dir);
    };
    let sha: String = row.get(0);
    if std::fs::read_to_string(marker(dir)).is_ok_and(|m| m == sha) && dir.is_dir() {
        return local(dir);
    }
    let staging = dir.with_file_name(format!(
        ".fetching-{}",
        dir.file_name().unwrap_or_default().to_string_lossy()
    ));
    remove_folder(&staging).map_err(folder)?;
    let mut archive = ChunkReader {
        tx: &mut tx,
        key: (experiment, trial_key),
        chunk: Vec::new(),
        at: 0,
        next: 0,
        hash: Sha256::new(),
        failed: None,
    };
    let unpacked = unpack(&mut archive, &staging);
    if unpacked.is_err() {
        // Read to its end: a damaged archive is told as damaged, whatever part of it broke.
        let _ = io::copy(&mut archive, &mut io::sink());
    }
    if let Some(e) = archive.failed.take() {
        let _ = remove_folder(&staging);
        return Err(e.into());
    }
    let found = hex(archive.hash.clone().finalize().as_slice());
    drop(archive);
    tx.commit()?;
    let problem = if found != sha {
        Some(CheckpointError::Damaged {
            expected: sha.clone(),
            found,
        })
    } else {
        unpacked.err().map(|source| CheckpointError::Folder {
            path: staging.clone(),
            source,
        })
    };
    if let Some(problem) = problem {
        let _ = remove_folder(&staging);
        return Err(problem);
    }
    remove_folder(dir).map_err(folder)?;
    std::fs::rename(&staging, dir).map_err(folder)?;
    write_marker(dir, &sha);
    let files = Manifest::of(dir)?;
    Ok(Fetched {
        bytes_read: files.bytes(),
        files,
    })
}

fn remove_folder(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes the files of an archive under `dir`.
fn unpack(archive: &mut impl Read, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    loop {
        let mut len = [0u8; 4];
        match archive.read(&mut len[..1])? {
            0 => return Ok(()),
            _ => archive.read_exact(&mut len[1..])?,
        }
        let mut path = vec![0u8; u32::from_le_bytes(len) as usize];
        archive.read_exact(&mut path)?;
        let path = String::from_utf8(path).map_err(|_| bad("a path that is not UTF-8".into()))?;
        // Only plain relative paths: a stored archive names nothing outside its folder.
        if path.is_empty()
            || path.starts_with('/')
            || path
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(bad(format!("a path outside its folder: {path:?}")));
        }
        let mut size = [0u8; 8];
        archive.read_exact(&mut size)?;
        let size = u64::from_le_bytes(size);
        let to = dir.join(&path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut file = std::fs::File::create(&to)?;
        copy_exactly(archive, &mut file, size)?;
    }
}

/// An archive read from its chunks as it is unpacked, in the transaction that read its
/// checksum.
struct ChunkReader<'a, 't> {
    tx: &'a mut Transaction<'t>,
    key: (i64, i64),
    chunk: Vec<u8>,
    at: usize,
    /// The next chunk's number.
    next: i32,
    hash: Sha256,
    failed: Option<postgres::Error>,
}

impl Read for ChunkReader<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.chunk.len() {
            let (experiment, trial) = self.key;
            let rows = self.tx.query(
                "SELECT data FROM tune_checkpoint_chunks
                 WHERE experiment = $1 AND trial = $2 AND seq >= $3 ORDER BY seq LIMIT $4",
                &[&experiment, &trial, &self.next, &CHUNKS_PER_READ],
            );
            let rows = match rows {
                Ok(rows) => rows,
                Err(e) => {
                    self.failed = Some(e);
                    return Err(io::Error::other("the database failed a read"));
                }
            };
            if rows.is_empty() {
                return Ok(0);
            }
            self.chunk.clear();
            for row in &rows {
                self.chunk.extend_from_slice(row.get::<_, &[u8]>(0));
            }
            self.next += rows.len() as i32;
            self.at = 0;
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.hash.update(&out[..n]);
        self.at += n;
        Ok(n)
    }
}

/// Makes trial `from`'s stored checkpoint trial `to`'s as well (an exploit), in the database,
/// for the attempt of `token`; `false`: the attempt no longer holds `to` (nothing copied).
pub(crate) fn copy(
    db: &mut Db,
    experiment: i64,
    from: TrialId,
    to: TrialId,
    token: i64,
) -> Result<bool, postgres::Error> {
    let (from, to) = (from as i64, to as i64);
    // One snapshot for the header and the chunks: at read committed each statement took its
    // own, and a source that wrote a new checkpoint between them left a copy whose chunks
    // were not its header's ("damaged", seen once in a full test run).
    let mut tx = db
        .client()
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .start()?;
    if !holds(&mut tx, token)? {
        return Ok(false);
    }
    tx.execute(
        "DELETE FROM tune_checkpoints WHERE experiment = $1 AND trial = $2",
        &[&experiment, &to],
    )?;
    tx.execute(
        "INSERT INTO tune_checkpoints (experiment, trial, token, size, sha256)
         SELECT experiment, $3, $4, size, sha256 FROM tune_checkpoints
         WHERE experiment = $1 AND trial = $2",
        &[&experiment, &from, &to, &token],
    )?;
    tx.execute(
        "INSERT INTO tune_checkpoint_chunks (experiment, trial, seq, data)
         SELECT experiment, $3, seq, data FROM tune_checkpoint_chunks
         WHERE experiment = $1 AND trial = $2",
        &[&experiment, &from, &to],
    )?;
    tx.commit()?;
    Ok(true)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::pg_store::{connect, settings};
    use crate::store::test_server as server;

    /// A database with experiment `t` (its id) and trial 0 and 1 attempts running under tokens
    /// 10 and 11.
    fn database() -> (Db, i64) {
        let url = server::fresh_database();
        let place = crate::store::postgres_location(&url, "t");
        let mut client = connect(&url, &place).unwrap();
        let experiment: i64 = client
            .query_one(
                "INSERT INTO tune_experiments (name) VALUES ('t') RETURNING id",
                &[],
            )
            .unwrap()
            .get(0);
        for (trial, token) in [(0i64, 10i64), (1, 11)] {
            client
                .execute(
                    "INSERT INTO tune_attempts (experiment, trial, attempt, job, state, token)
                     VALUES ($1, $2, 1, '{}', 'running', $3)",
                    &[&experiment, &trial, &token],
                )
                .unwrap();
        }
        (Db::new(client, settings(&url, &place).unwrap()), experiment)
    }

    fn folder(dir: &Path, weights: &[u8]) -> KeptFolder {
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("state"), b"3").unwrap();
        std::fs::write(dir.join("sub/weights"), weights).unwrap();
        KeptFolder {
            dir: dir.to_path_buf(),
            cap: 16 << 20,
            kept: Manifest::default(),
        }
    }

    #[test]
    fn a_folder_kept_by_one_worker_is_fetched_whole_by_another_and_copied_for_an_exploit() {
        let (mut db, e) = database();
        let tmp = tempfile::tempdir().unwrap();
        let weights: Vec<u8> = (0..(2 * CHUNK + 17)).map(|i| (i % 251) as u8).collect();
        let mut kept = folder(&tmp.path().join("a/trials/0"), &weights);
        let written = kept.save(&mut db, e, 0, 10).unwrap();
        let bytes = weights.len() as u64 + 1;
        assert_eq!(written, Saved::Written { bytes });
        assert_eq!(kept.save(&mut db, e, 0, 10).unwrap(), Saved::Unchanged);
        // Another machine: nothing there yet.
        let there = tmp.path().join("b/trials/0");
        let fetched = fetch(&mut db, e, 0, &there, false).unwrap();
        assert_eq!((fetched.files.0.len(), fetched.bytes_read), (2, bytes));
        // Its copy is that one now: not read again.
        assert_eq!(fetch(&mut db, e, 0, &there, false).unwrap().bytes_read, 0);
        assert_eq!(std::fs::read(there.join("sub/weights")).unwrap(), weights);
        assert_eq!(std::fs::read(there.join("state")).unwrap(), b"3");
        // Trial 1 exploits trial 0: its stale folder is replaced by trial 0's.
        let mine = tmp.path().join("b/trials/1");
        folder(&mine, b"trial 1's own");
        assert!(copy(&mut db, e, 0, 1, 11).unwrap());
        fetch(&mut db, e, 1, &mine, true).unwrap();
        assert_eq!(std::fs::read(mine.join("sub/weights")).unwrap(), weights);
    }

    #[test]
    fn an_attempt_that_no_longer_holds_its_trial_writes_nothing() {
        let (mut db, e) = database();
        let tmp = tempfile::tempdir().unwrap();
        let mut kept = folder(&tmp.path().join("trials/0"), b"w");
        db.execute(
            "UPDATE tune_attempts SET state = 'lost' WHERE token = 10",
            &[],
        )
        .unwrap();
        assert_eq!(kept.save(&mut db, e, 0, 10).unwrap(), Saved::Refused);
        assert!(!copy(&mut db, e, 1, 0, 10).unwrap());
        let stored: i64 = db
            .query_one("SELECT count(*) FROM tune_checkpoints", &[])
            .unwrap()
            .get(0);
        assert_eq!(stored, 0);
    }

    #[test]
    fn a_damaged_chunk_is_refused_and_the_folder_left_as_it_was() {
        let (mut db, e) = database();
        let tmp = tempfile::tempdir().unwrap();
        let mut kept = folder(&tmp.path().join("a/trials/0"), b"weights");
        kept.save(&mut db, e, 0, 10).unwrap();
        db.execute(
            "UPDATE tune_checkpoint_chunks SET data = overlay(data placing '\\x58' from 20)",
            &[],
        )
        .unwrap();
        let there = tmp.path().join("b/trials/0");
        folder(&there, b"what was there");
        let e = fetch(&mut db, e, 0, &there, false).unwrap_err();
        assert!(matches!(e, CheckpointError::Damaged { .. }), "{e}");
        assert!(e.to_string().contains("damaged"), "{e}");
        assert_eq!(
            std::fs::read(there.join("sub/weights")).unwrap(),
            b"what was there"
        );
    }

    #[test]
    fn a_folder_over_the_cap_is_refused_saying_so() {
        let (mut db, e) = database();
        let tmp = tempfile::tempdir().unwrap();
        let mut kept = folder(&tmp.path().join("trials/0"), &vec![0u8; 2 << 20]);
        kept.cap = 1 << 20;
        let e = kept.save(&mut db, e, 0, 10).unwrap_err();
        assert!(
            e.to_string()
                .contains("over [store] max_checkpoint_mb (1 MiB)"),
            "{e}"
        );
    }

    #[test]
    fn an_archive_unpacks_to_the_folder_it_was_made_of() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
        std::fs::write(src.join("state"), b"41").unwrap();
        std::fs::write(src.join("sub/deeper/w.bin"), vec![7u8; 3 * CHUNK + 5]).unwrap();
        std::fs::write(src.join("empty"), b"").unwrap();
        let files = Manifest::of(&src).unwrap();
        let names: Vec<&str> = files.0.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(names, ["empty", "state", "sub/deeper/w.bin"]);
        let mut archive = Vec::new();
        for (path, size, _) in &files.0 {
            let mut file = std::fs::File::open(src.join(path)).unwrap();
            write_entry(&mut archive, path, *size, &mut file).unwrap();
        }
        let dst = tmp.path().join("dst");
        unpack(&mut archive.as_slice(), &dst).unwrap();
        assert_eq!(std::fs::read(dst.join("state")).unwrap(), b"41");
        assert_eq!(
            std::fs::read(dst.join("sub/deeper/w.bin")).unwrap(),
            vec![7u8; 3 * CHUNK + 5]
        );
        assert_eq!(std::fs::read(dst.join("empty")).unwrap(), b"");
    }

    #[test]
    fn an_archive_naming_a_path_outside_its_folder_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for path in ["../escape", "/etc/x", "a//b", "a/./b"] {
            let mut archive = Vec::new();
            archive.extend_from_slice(&(path.len() as u32).to_le_bytes());
            archive.extend_from_slice(path.as_bytes());
            archive.extend_from_slice(&1u64.to_le_bytes());
            archive.push(b'x');
            let e = unpack(&mut archive.as_slice(), &tmp.path().join("d")).unwrap_err();
            assert!(e.to_string().contains("outside its folder"), "{path}: {e}");
        }
        assert!(!tmp.path().join("escape").exists());
    }

    #[test]
    fn a_truncated_archive_is_an_error_not_a_short_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut archive = Vec::new();
        archive.extend_from_slice(&5u32.to_le_bytes());
        archive.extend_from_slice(b"state");
        archive.extend_from_slice(&10u64.to_le_bytes());
        archive.extend_from_slice(b"12345");
        assert!(unpack(&mut archive.as_slice(), &tmp.path().join("d")).is_err());
    }
}
