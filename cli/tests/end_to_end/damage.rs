//! Damaged stores: truncated, zeroed or garbled files under `tune.db/`, and a store from a newer
//! format. Every command says what is wrong and where, exits 1 and never panics; `tune export
//! --salvage` writes out what can still be read.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value as Json;

/// A finished sweep of 20 trials of 3 steps.
fn finished_sweep(tmp: &Path) -> std::path::PathBuf {
    let spec = write_spec(
        tmp,
        // One slot: the same writes in the same order on every run.
        "samples = 20\nseed = 1\n[resources]\ncpu_slots = 1",
        &["--steps", "3"],
        "x = { uniform = [0.0, 3.0] }",
    );
    let dir = tmp.join("good");
    run_ok(&mut tune_run(&spec, &dir));
    dir
}

fn overwrite(file: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

#[test]
fn every_command_refuses_a_damaged_store_naming_it_and_salvage_reads_what_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let good = finished_sweep(tmp.path());
    let original = by_id(export_json(&good));
    type Damage = fn(&Path);
    // sled notices some damage itself; the rest, it rolls back over, and the note tells.
    const LOST: &[&str] = &["what was written last is lost", "sled found corrupted data"];
    let cases: [(&str, Damage, &[&str]); 5] = [
        (
            "db truncated to 1,000 bytes",
            |db| truncate(&db.join("db"), 1000),
            LOST,
        ),
        (
            "100 bytes garbled at 2,000",
            |db| overwrite(&db.join("db"), 2000, &[b'0'; 100]),
            LOST,
        ),
        (
            "db zeroed",
            |db| truncate(&db.join("db"), 0),
            &["sled found corrupted data"],
        ),
        (
            "its note truncated",
            |db| truncate(&db.join("tune.check"), 5),
            &["(tune.check) is unreadable"],
        ),
        (
            "100 bytes garbled near the end",
            |db| {
                // The log's last writes: just before its last non-zero byte.
                let bytes = std::fs::read(db.join("db")).unwrap();
                let end = bytes.iter().rposition(|&b| b != 0).unwrap() as u64;
                overwrite(&db.join("db"), end.saturating_sub(150), &[0xff; 100]);
            },
            LOST,
        ),
    ];
    for (what, damage, problem) in cases {
        let dir = tmp.path().join(what.replace([' ', ','], "-"));
        copy_dir(&good, &dir);
        let db = dir.join("tune.db");
        damage(&db);
        let spec = tmp.path().join("space.toml");
        for args in [vec!["status"], vec!["export"], vec!["resume"]] {
            let out = tune().args(&args).arg(&dir).output().unwrap();
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{what}, {args:?}: {err}");
            assert!(
                err.starts_with(&format!("error: {} is damaged: ", db.display()))
                    && problem.iter().any(|p| err.contains(p)),
                "{what}, {args:?}: {err}"
            );
            assert!(
                err.contains(&format!("`tune export {} --salvage`", dir.display())),
                "{err}"
            );
            assert!(!err.contains("panicked"), "{what}: {err}");
        }
        // `run` into it refuses as ever: the folder holds an experiment.
        let out = tune_run(&spec, &dir).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));

        let out = tune()
            .arg("export")
            .arg(&dir)
            .arg("--salvage")
            .output()
            .unwrap();
        if !out.status.success() {
            // Not even sled's recovery gets anything out of it.
            assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
            assert!(
                stderr(&out).contains("nothing could be salvaged"),
                "{}",
                stderr(&out)
            );
            continue;
        }
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert!(stderr(&out).contains("tune: salvaged "), "{}", stderr(&out));
        let salvaged: Vec<Json> = serde_json::from_slice(&out.stdout).unwrap();
        // What is read back is what was stored then: same params, results a prefix.
        for t in &salvaged {
            let before = &original[&t["id"].as_u64().unwrap()];
            assert_eq!(t["params"], before["params"], "{what}");
            let (now, then) = (
                t["results"].as_array().unwrap(),
                before["results"].as_array().unwrap(),
            );
            assert_eq!(now[..], then[..now.len()], "{what}: trial {}", t["id"]);
        }
    }
}

#[test]
fn the_undamaged_store_and_its_salvage_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let good = finished_sweep(tmp.path());
    let out = run_ok(tune().arg("export").arg(&good).arg("--salvage"));
    let salvaged: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(salvaged, Json::Array(export_json(&good)));
    assert!(
        stderr(&out).contains("salvaged 20 trials and 60 results"),
        "{}",
        stderr(&out)
    );
    // Salvage reads a copy: the store is untouched and still opens.
    run_ok(tune().arg("status").arg(&good));
}

#[test]
fn a_store_from_a_newer_format_is_refused_by_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = finished_sweep(tmp.path());
    {
        use tune::store::{SledStore, TrialStore};
        let mut store = SledStore::open(&dir.join("tune.db")).unwrap();
        let mut stored = store.load().unwrap();
        stored.meta.format = 99;
        store.put_meta(&stored.meta).unwrap();
        store.sync().unwrap();
    }
    for verb in ["status", "export", "resume"] {
        let out = tune().arg(verb).arg(&dir).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{verb}: {}", stderr(&out));
        assert!(
            stderr(&out).starts_with(&format!(
                "error: {} was written in store format 99; this build of tune reads formats {:?}",
                dir.join("tune.db").display(),
                tune::experiment::FORMATS_READ
            )),
            "{verb}: {}",
            stderr(&out)
        );
    }
}
