//! Several objectives through the real binary: a two-objective sweep of the built-in MLP on
//! digits (validation loss against size) whose exported front is non-dominated and complete;
//! a resumed NSGA-II and TPE sweep that decides what the uninterrupted one does; `tune status`
//! and the CSV export showing the front; and the specs refused before anything runs.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value as Json;

/// Whether `a` dominates `b`, every objective minimised.
fn dominates(a: &[f64], b: &[f64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x <= y) && a.iter().zip(b).any(|(x, y)| x < y)
}

/// A completed trial as the export scores it.
struct Scored {
    id: u64,
    values: Vec<f64>,
    on_front: bool,
    /// Within its `[constraints]` (true without any).
    feasible: bool,
}

/// The completed trials from an export.
fn scored(trials: &[Json], metrics: &[&str]) -> Vec<Scored> {
    trials
        .iter()
        .filter(|t| t["status"] == "completed")
        .map(|t| Scored {
            id: t["id"].as_u64().unwrap(),
            values: metrics
                .iter()
                .map(|m| t["values"][m].as_f64().expect("a value per objective"))
                .collect(),
            on_front: t["pareto_optimal"].as_bool().expect("pareto_optimal"),
            feasible: t["feasible"].as_bool().unwrap_or(true),
        })
        .collect()
}

/// The front marked in the export is exactly the feasible completed trials no feasible one
/// dominates.
fn assert_front_is_the_non_dominated_set(scored: &[Scored]) {
    for s in scored {
        let dominated = scored
            .iter()
            .any(|o| o.feasible && dominates(&o.values, &s.values));
        assert_eq!(
            s.on_front,
            s.feasible && !dominated,
            "trial {} {:?}: on the front {}, feasible {}, dominated {dominated}",
            s.id,
            s.values,
            s.on_front,
            s.feasible
        );
    }
}

#[test]
fn the_mlp_digits_front_example_exports_a_non_dominated_front() {
    // examples/mlp-digits/front.toml, shortened: 12 trials of 2 epochs, generations of 4.
    let tmp = tempfile::tempdir().unwrap();
    let example = tune_testkit::workspace_root().join("examples/mlp-digits/front.toml");
    let text = std::fs::read_to_string(example).unwrap();
    let (mut shortened, mut replaced) = (String::new(), 0);
    for line in text.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        let new = match key {
            "samples" => "samples = 12",
            "epochs" => "epochs = 2",
            "population_size" => "population_size = 4",
            _ => line,
        };
        replaced += usize::from(new != line);
        shortened += new;
        shortened.push('\n');
    }
    assert_eq!(replaced, 3, "{shortened}");
    let spec = tmp.path().join("front.toml");
    std::fs::write(&spec, shortened).unwrap();
    let dir = tmp.path().join("run");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 12);
    // n_params is the model's size: 64 inputs, `depth` hidden layers of `width`, 10 classes.
    for t in &trials {
        let (w, d) = (
            t["params"]["width"].as_f64().unwrap(),
            t["params"]["depth"].as_f64().unwrap(),
        );
        let expected = 64.0 * w + w + (d - 1.0) * (w * w + w) + 10.0 * w + 10.0;
        assert_eq!(t["values"]["n_params"].as_f64(), Some(expected), "{t}");
        assert_eq!(t["value"], t["values"]["val_loss"]);
    }
    let scored = scored(&trials, &["val_loss", "n_params"]);
    assert_eq!(scored.len(), 12);
    assert_front_is_the_non_dominated_set(&scored);
    let front: Vec<u64> = scored.iter().filter(|s| s.on_front).map(|s| s.id).collect();
    assert!(!front.is_empty());
    // The constraint (val_accuracy >= 0.9) is what export says it is.
    for t in &trials {
        let accuracy = t["results"].as_array().unwrap().last().unwrap()["val_accuracy"]
            .as_f64()
            .unwrap();
        assert_eq!(t["feasible"], accuracy >= 0.9, "{t}");
    }
    let status = run_ok(tune().arg("status").arg(&dir));
    let text = String::from_utf8_lossy(&status.stdout);
    let ids: Vec<String> = front.iter().map(|id| id.to_string()).collect();
    assert!(
        text.contains(&format!(
            "pareto front of val_loss (min), n_params (min): {} trial",
            front.len()
        )) && text.contains(&ids.join(", ")),
        "{text}"
    );
}

/// A command printing two objectives of x and y: a ZDT1-like pair (both minimised) and a
/// third key that is not an objective.
fn two_objective_spec(dir: &Path, top: &str, samples: u64) -> PathBuf {
    let script = dir.join("zdt.py");
    std::fs::write(
        &script,
        "import json, math, sys\n\
         x, y = float(sys.argv[1]), float(sys.argv[2])\n\
         g = 1 + 9 * y\n\
         print(json.dumps({'step': 1, 'f1': x, 'f2': g * (1 - math.sqrt(x / g)), 'other': 0}))\n",
    )
    .unwrap();
    let text = format!(
        "name = \"zdt\"\nmetric = [\"f1\", \"f2\"]\nmode = [\"min\", \"min\"]\nsamples = {samples}\nseed = 11\n{top}\n\
         [resources]\ncpu_slots = 1\n\n[objective]\ncommand = [\"python3\", {:?}, \"{{x}}\", \"{{y}}\"]\n\n\
         [space]\nx = {{ uniform = [0.0, 1.0] }}\ny = {{ uniform = [0.0, 1.0] }}\n",
        script.display().to_string()
    );
    let path = dir.join(format!("space-{samples}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn params_in_order(trials: &[Json]) -> Vec<Json> {
    trials.iter().map(|t| t["params"].clone()).collect()
}

#[test]
fn a_resumed_sweep_proposes_what_the_uninterrupted_one_does() {
    for search in [
        "[search]\nalgorithm = \"nsga2\"\npopulation_size = 4",
        "[search]\nalgorithm = \"tpe\"\nn_startup_trials = 4",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let whole = tmp.path().join("whole");
        run_ok(&mut tune_run(
            &two_objective_spec(tmp.path(), search, 14),
            &whole,
        ));
        let halves = tmp.path().join("halves");
        run_ok(&mut tune_run(
            &two_objective_spec(tmp.path(), search, 7),
            &halves,
        ));
        run_ok(
            tune()
                .arg("resume")
                .arg(&halves)
                .args(["--samples", "14", "--no-tui"]),
        );
        let (a, b) = (export_json(&whole), export_json(&halves));
        assert_eq!(a.len(), 14);
        assert_eq!(params_in_order(&a), params_in_order(&b), "{search}");
        assert_front_is_the_non_dominated_set(&scored(&a, &["f1", "f2"]));
        // Past the random start, the model's trials: their points differ from the first four
        // (a searcher that ignored the history would still draw at random, so only check
        // that the front has more than one point, as two conflicting objectives give).
        let front = scored(&a, &["f1", "f2"])
            .iter()
            .filter(|s| s.on_front)
            .count();
        assert!(front >= 2, "{search}: front of {front}");
    }
}

#[test]
fn the_csv_export_has_a_column_per_objective_and_the_front() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    run_ok(&mut tune_run(
        &two_objective_spec(tmp.path(), "[search]\nalgorithm = \"random\"", 6),
        &dir,
    ));
    let out = run_ok(tune().arg("export").arg(&dir).args(["--format", "csv"]));
    let text = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    for column in [
        "value",
        "values.f1",
        "values.f2",
        "pareto_optimal",
        "params.x",
    ] {
        assert!(header.contains(&column), "{header:?}");
    }
    let front = header.iter().position(|c| *c == "pareto_optimal").unwrap();
    let on_front = text
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(front) == Some("true"))
        .count();
    let trials = export_json(&dir);
    let expected = scored(&trials, &["f1", "f2"])
        .iter()
        .filter(|s| s.on_front)
        .count();
    assert_eq!(on_front, expected);
}

/// Runs `tune run` on a spec with `top` and the two-objective command, expecting exit 2 and
/// `needles` in stderr, and no experiment folder.
fn refused(top: &str, metrics: &str, needles: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("space.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"bad\"\n{metrics}\nsamples = 4\n{top}\n[objective]\ncommand = [\"true\"]\n[space]\nx = {{ uniform = [0.0, 1.0] }}\n"
        ),
    )
    .unwrap();
    let dir = tmp.path().join("run");
    let out = tune_run(&spec, &dir).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} not in: {err}");
    }
    assert!(!dir.exists());
}

#[test]
fn specs_that_cannot_take_several_objectives_are_refused_before_anything_runs() {
    let two = "metric = [\"loss\", \"latency_ms\"]\nmode = [\"min\", \"min\"]";
    refused(
        "",
        "metric = [\"loss\", \"latency_ms\"]\nmode = [\"min\"]",
        &[
            "space.toml:3:",
            "`mode`: expected 2 directions, one per metric (loss, latency_ms), found 1",
        ],
    );
    refused(
        "",
        "metric = [\"loss\", \"latency_ms\"]\nmode = \"max\"",
        &["`mode`: expected a list of 2 directions"],
    );
    refused(
        "",
        "metric = \"loss\"\nmode = [\"min\", \"max\"]",
        &["`mode`: a list of directions is for several objectives"],
    );
    refused(
        "",
        "metric = [\"loss\", \"loss\"]",
        &["`metric`: `loss` is listed twice"],
    );
    refused(
        "sampels = 3",
        two,
        &[
            "space.toml:5:1: unknown field `sampels`",
            "(did you mean `samples`?)",
        ],
    );
    refused(
        "[scheduler]\nkind = \"asha\"\nmax_t = 9",
        two,
        &[
            "[scheduler] `kind`: asha compares trials by one value",
            "2 objectives (loss, latency_ms)",
        ],
    );
    refused(
        "[search]\nalgorithm = \"gp\"",
        two,
        &["[search] `algorithm`: gp models one objective"],
    );
    refused(
        "[stop]\ntarget = 0.1",
        two,
        &["[stop] `target`: needs one value to compare"],
    );
    refused(
        "[search]\nalgorithm = \"nsga2\"\npopulation_size = 1",
        two,
        &["`population_size`: expected at least 2, found 1"],
    );
}
