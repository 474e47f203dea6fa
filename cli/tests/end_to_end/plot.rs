//! `tune plot` through the real binary: a self-contained report holding every trial, PNG and
//! SVG images, and clear refusals.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value as Json;

fn plot(dir: &Path) -> std::process::Command {
    let mut cmd = tune();
    cmd.arg("plot").arg(dir);
    cmd
}

#[test]
fn the_report_is_self_contained_and_holds_every_trial() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("asha");
    run_ok(&mut tune_run(&asha_spec(tmp.path(), &[], 1), &dir));
    let trials = export_json(&dir);
    let completed = trials.iter().filter(|t| t["status"] == "completed").count();
    let report = tmp.path().join("report.html");
    let out = run_ok(plot(&dir).arg("--out").arg(&report));
    assert!(stderr(&out).contains("wrote"), "{}", stderr(&out));
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    // Nothing is fetched: no script, stylesheet, image or font from anywhere.
    for outside in ["<script", "<link", "src=", "href=", "@import", "url("] {
        assert!(!html.contains(outside), "{outside}");
    }
    let without_namespace = html.replace("http://www.w3.org/2000/svg", "");
    assert!(
        !without_namespace.contains("http"),
        "a reference outside the file"
    );
    // One chart of each kind but the lineage (not a PBT sweep); importances need two
    // completed trials (one slot: the same ASHA decisions every run).
    if completed >= 2 {
        assert!(!html.contains("Not drawn"));
        assert_eq!(html.matches("<svg").count(), 5);
    } else {
        assert!(html.contains(&format!(
            "Not drawn: importances need at least 2 completed trials, found {completed}."
        )));
        assert_eq!(html.matches("<svg").count(), 4);
    }
    for title in [
        "Optimisation history",
        "Learning curves",
        "Parallel coordinates",
        "Slices",
        "Parameter importances",
    ] {
        assert!(html.contains(&format!("<h2>{title}</h2>")), "{title}");
    }
    assert!(!html.contains("PBT lineage"));
    // The scheduler's rungs are marked (grace period 1, reduction factor 3, max_t 9).
    assert!(html.contains("asha rungs: 1, 3, 9"), "no rungs");
    // Every trial, with its status, in the table.
    assert_eq!(html.matches("<tr data-trial=").count(), trials.len());
    for t in &trials {
        let row = format!(
            "<tr data-trial=\"{id}\"><td>{id}</td><td class=\"s {status}\">{status}</td>",
            id = t["id"],
            status = t["status"].as_str().unwrap()
        );
        assert!(html.contains(&row), "{row}");
    }
    let stopped = trials.iter().filter(|t| t["status"] == "stopped").count();
    assert!(stopped > 0);
    assert!(html.contains(&format!("stopped by the scheduler (x) ({stopped})")));
}

/// The PNG's width and height, from its IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn images_come_one_per_chart_and_the_lineage_only_for_pbt() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 6\nseed = 3\n[scheduler]\nkind = \"pbt\"\nperturbation_interval = 3\n[resources]\ncpu_slots = 6",
        &["--y", "{y}", "--steps", "12", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { choice = [-2.0, 0.0, 2.0] }",
    );
    let dir = tmp.path().join("pbt");
    run_ok(&mut tune_run(&spec, &dir));
    let pngs = tmp.path().join("pngs");
    run_ok(plot(&dir).args(["--format", "png", "--out"]).arg(&pngs));
    let mut names: Vec<String> = std::fs::read_dir(&pngs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "curves.png",
            "history.png",
            "importance.png",
            "lineage.png",
            "parallel.png",
            "slice.png"
        ]
    );
    for name in &names {
        let (w, h) = png_size(&std::fs::read(pngs.join(name)).unwrap());
        assert_eq!(w, 960, "{name}");
        assert!(h >= 150, "{name}: {h}");
    }
    let svg = tmp.path().join("lineage.svg");
    run_ok(plot(&dir).args(["--chart", "lineage", "--out"]).arg(&svg));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..40]);
    assert!(text.contains("PBT lineage"));
}

#[test]
fn nothing_to_plot_and_charts_that_do_not_apply_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    // Every trial fails before its first report.
    let spec = write_spec(
        tmp.path(),
        "samples = 2\nseed = 1\n[resources]\ncpu_slots = 1",
        &["--behaviour", "silent"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let empty = tmp.path().join("empty");
    tune_run(&spec, &empty).output().unwrap();
    let out = plot(&empty)
        .arg("--out")
        .arg(tmp.path().join("r.html"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no trial of t has reported `loss` yet: there is nothing to plot"),
        "{}",
        stderr(&out)
    );
    assert!(!tmp.path().join("r.html").exists());

    let dir = tmp.path().join("asha");
    run_ok(&mut tune_run(&asha_spec(tmp.path(), &[], 2), &dir));
    let refused = |args: &[&str], says: &str| {
        let out = plot(&dir).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    };
    let png = tmp.path().join("l.png");
    refused(
        &["--chart", "lineage", "--out", png.to_str().unwrap()],
        "lineage is drawn for population-based training; this sweep's scheduler is asha",
    );
    refused(
        &["--format", "svg", "--out", png.to_str().unwrap()],
        "its extension names another format than --format",
    );
    refused(
        &["--chart", "history", "--out", "r.html"],
        "--chart draws one image",
    );
    refused(
        &["--out", "r.html", "--chart", "pie"],
        "invalid value 'pie'",
    );
}

#[test]
fn a_running_sweep_is_plotted_as_it_stands_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let hold = tmp.path().join("go");
    let spec = write_spec(
        tmp.path(),
        "samples = 2\nseed = 1\n[resources]\ncpu_slots = 1",
        &["--steps", "3", "--hold", hold.to_str().unwrap()],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("run");
    let mut sweep = tune_run(&spec, &dir)
        .arg("--no-tui")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Trial 0 has reported step 1 and waits for the file.
    wait_for_results(&dir, 1);
    let report = tmp.path().join("live.html");
    let out = plot(&dir).arg("--out").arg(&report).output();
    std::fs::write(&hold, "").unwrap();
    let out = out.unwrap();
    assert!(sweep.wait().unwrap().success());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is still running"),
        "{}",
        stderr(&out)
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("The sweep was still running"));
    assert!(html.contains("<tr data-trial=\"0\"><td>0</td><td class=\"s running\">"));
    // Nothing completed yet: the charts that need completed trials say why not.
    assert!(html.contains("Not drawn: no trial has completed yet"));
    let trials: Vec<Json> = export_json(&dir);
    assert!(trials.iter().all(|t| t["status"] == "completed"));
}
