//! Experiments written by earlier builds still open: `cli/tests/fixtures/format1` was written by
//! the build that stored format 1 (a TPE + ASHA sweep, options stored only where set).

use crate::common;

use std::io::Read;
use std::path::Path;

use common::*;
use serde_json::Value as Json;
use tune::{AshaConfig, Matern, SchedulerSpec, SearchSpec, TpeOptions};

/// The fixture, unpacked into `dir` (sled's data file is kept gzipped).
fn unpack_format1(dir: &Path) {
    let src = fixture("format1");
    std::fs::create_dir_all(dir.join("tune.db/blobs")).unwrap();
    std::fs::create_dir_all(dir.join("trials")).unwrap();
    std::fs::copy(src.join("spec.toml"), dir.join("spec.toml")).unwrap();
    for entry in std::fs::read_dir(src.join("tune.db")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name == "db.gz" {
            let mut bytes = Vec::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
                .read_to_end(&mut bytes)
                .unwrap();
            std::fs::write(dir.join("tune.db/db"), bytes).unwrap();
        } else {
            std::fs::copy(&path, dir.join("tune.db").join(name)).unwrap();
        }
    }
}

#[test]
fn an_experiment_stored_in_format_1_opens_with_the_same_spec_and_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("format1");
    unpack_format1(&dir);

    let exp = tune::experiment::Experiment::open(&dir).unwrap();
    assert_eq!(exp.stored.meta.format, 1);
    let spec = &exp.stored.meta.spec;
    // Only the options set were stored; the rest read as their defaults, except those added
    // since, which read as that build ran: its TPE weighed several objectives' good trials
    // equally, its startup counted only the trials it modelled, and its constant liar was on.
    let tpe = TpeOptions {
        n_startup_trials: 3,
        n_ei_candidates: 8,
        hypervolume_weights: false,
        startup_counts_unmodelled: false,
        constant_liar: Some(true),
        ..TpeOptions::default()
    };
    assert_eq!(spec.search.algorithm, SearchSpec::Tpe(tpe));
    let asha = AshaConfig {
        max_t: 4,
        grace_period: Some(1),
        reduction_factor: 2,
        ..AshaConfig::default()
    };
    assert_eq!(spec.scheduler, SchedulerSpec::Asha(asha));
    // Under ASHA, TPE leaves shallow stopped trials out, as it did when this was written.
    assert_eq!(spec.tpe_options().unwrap().stopped_min_depth(), 0.1);
    drop(exp);

    // Exported as the build that wrote it exported it.
    let expected: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture("format1/export.json")).unwrap())
            .unwrap();
    // Since then each result also carries the sweep's steps trained when it arrived: here
    // every report advanced its trial by one step, so they count 1, 2, .. in report order.
    let mut exported = export_json(&dir);
    let mut counted: Vec<(u64, u64)> = Vec::new();
    for t in &mut exported {
        for r in t["results"].as_array_mut().unwrap() {
            let steps = r.as_object_mut().unwrap().remove("sweep_steps").unwrap();
            counted.push((r["seq"].as_u64().unwrap(), steps.as_u64().unwrap()));
        }
    }
    counted.sort_unstable();
    assert!(
        counted
            .iter()
            .enumerate()
            .all(|(i, &(_, n))| n == i as u64 + 1),
        "{counted:?}"
    );
    assert_eq!(Json::Array(exported), expected);
    let status = run_ok(tune().arg("status").arg(&dir));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("trials: 6 of 6 created | 1 completed, 5 stopped, 0 failed, 0 unfinished"),
        "{status}"
    );
    assert!(
        status.contains("best: trial 0 with loss = 4.302750439998484"),
        "{status}"
    );
}

#[test]
fn a_format_1_experiment_given_more_samples_is_rewritten_in_this_builds_format() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("format1");
    unpack_format1(&dir);
    let mut exp = tune::experiment::Experiment::open(&dir).unwrap();
    let spec = exp.stored.meta.spec.clone();
    exp.set_samples(8).unwrap();
    drop(exp);
    let exp = tune::experiment::Experiment::open(&dir).unwrap();
    assert_eq!(exp.stored.meta.format, tune::experiment::FORMAT);
    assert_eq!(exp.stored.meta.spec, spec);
    assert_eq!(exp.stored.meta.samples, 8);
}

/// `exp`'s record rewritten as format `format` wrote it (the same settings, read back as that
/// build's defaults where it lacked them), and the experiment opened again.
fn reopened_as_format(
    mut exp: tune::experiment::Experiment,
    dir: &Path,
    format: u32,
) -> tune::experiment::Experiment {
    let mut meta = exp.stored.meta.clone();
    meta.format = format;
    exp.store.put_meta(&meta).unwrap();
    exp.store.sync().unwrap();
    drop(exp);
    tune::experiment::Experiment::open(dir).unwrap()
}

#[test]
fn a_tpe_sweep_stored_by_an_earlier_format_keeps_that_builds_weights_and_startup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("two");
    let text = "name = \"two\"\nmetric = [\"a\", \"b\"]\nmode = [\"min\", \"min\"]\nsamples = 4\n\
                [search]\nalgorithm = \"tpe\"\n[objective]\ncommand = [\"true\"]\n\
                [space]\nx = { uniform = [0.0, 1.0] }\n";
    let spec = tune::ExperimentSpec::from_toml(text, Path::new("space.toml")).unwrap();
    // (hypervolume_weights, startup_counts_unmodelled, constant_liar)
    let settings = |exp: &tune::experiment::Experiment| match &exp.stored.meta.spec.search.algorithm
    {
        SearchSpec::Tpe(o) => (
            o.hypervolume_weights,
            o.startup_counts_unmodelled,
            o.constant_liar,
        ),
        other => panic!("not TPE: {other:?}"),
    };
    // Written now: the defaults (the liar unset: off under the rung model), read back so.
    let mut exp = tune::experiment::Experiment::create(&dir, &spec, Some(text)).unwrap();
    assert_eq!(settings(&exp), (true, true, None));
    drop(exp);
    exp = tune::experiment::Experiment::open(&dir).unwrap();
    assert_eq!(settings(&exp), (true, true, None));
    // The same record as format 4 wrote it resumes as that build ran it: the startup counted
    // modelled trials only and the liar was on; as format 2 wrote it, good trials weighed
    // equally too.
    let exp = reopened_as_format(exp, &dir, 4);
    assert_eq!(settings(&exp), (true, false, Some(true)));
    let exp = reopened_as_format(exp, &dir, 2);
    assert_eq!(settings(&exp), (false, false, Some(true)));
}

#[test]
fn a_gp_sweep_stored_before_format_4_keeps_standardised_values_and_repeats() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gp");
    let text = "name = \"gp\"\nmetric = \"loss\"\nsamples = 4\n\
                [search]\nalgorithm = \"gp\"\n[objective]\ncommand = [\"true\"]\n\
                [space]\nx = { uniform = [0.0, 1.0] }\n";
    let spec = tune::ExperimentSpec::from_toml(text, Path::new("space.toml")).unwrap();
    let settings = |exp: &tune::experiment::Experiment| match &exp.stored.meta.spec.search.algorithm
    {
        SearchSpec::Gp(o) => (o.power_transform, o.avoid_repeats, o.minimum_noise),
        other => panic!("not GP: {other:?}"),
    };
    let (floor, optunas) = (
        tune::GpOptions::default().minimum_noise,
        tune::GpOptions::OPTUNA_MINIMUM_NOISE,
    );
    // Written now: the warping, no repeats and the low noise floor, the defaults, and read
    // back so.
    let mut exp = tune::experiment::Experiment::create(&dir, &spec, Some(text)).unwrap();
    assert_eq!(settings(&exp), (true, true, floor));
    drop(exp);
    exp = tune::experiment::Experiment::open(&dir).unwrap();
    assert_eq!(settings(&exp), (true, true, floor));
    // The same record as format 7 wrote it resumes with Optuna's floor; as format 3 wrote
    // it, Optuna's way throughout.
    let exp = reopened_as_format(exp, &dir, 7);
    assert_eq!(settings(&exp), (true, true, optunas));
    let exp = reopened_as_format(exp, &dir, 3);
    assert_eq!(settings(&exp), (false, false, optunas));
}

#[test]
fn an_auto_sweep_stored_before_format_8_or_11_keeps_its_gps_noise_floor_and_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("auto");
    let text =
        "name = \"auto\"\nmetric = \"loss\"\nsamples = 4\n[objective]\ncommand = [\"true\"]\n\
                [space]\nx = { uniform = [0.0, 1.0] }\n";
    let spec = tune::ExperimentSpec::from_toml(text, Path::new("space.toml")).unwrap();
    let gp = |exp: &tune::experiment::Experiment| match &exp.stored.meta.spec.search.algorithm {
        SearchSpec::Auto(o) => (o.gp_minimum_noise, o.gp_kernel),
        other => panic!("not auto: {other:?}"),
    };
    let floor = tune::GpOptions::default().minimum_noise;
    let exp = tune::experiment::Experiment::create(&dir, &spec, Some(text)).unwrap();
    // Unset: the space picks it (Matérn 3/2 here, without choices).
    assert_eq!(gp(&exp), (floor, None));
    let exp = reopened_as_format(exp, &dir, 10);
    assert_eq!(gp(&exp), (floor, Some(Matern::FiveHalves)));
    let exp = reopened_as_format(exp, &dir, 7);
    assert_eq!(
        gp(&exp),
        (
            tune::GpOptions::OPTUNA_MINIMUM_NOISE,
            Some(Matern::FiveHalves)
        )
    );
}

/// The experiment record in the sled store under `dir`, as the bytes stored hold it.
fn stored_meta_json(dir: &Path) -> Json {
    let db = sled::open(dir.join("tune.db")).unwrap();
    let bytes = db.open_tree("meta").unwrap().get("meta").unwrap().unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn every_stored_record_names_its_algorithm_so_a_new_default_changes_no_stored_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    // The oldest layout named it too.
    let old = tmp.path().join("format1");
    unpack_format1(&old);
    assert_eq!(stored_meta_json(&old)["spec"]["search"]["algorithm"], "tpe");

    // A spec that leaves `[search]` out is stored naming the default, `auto`.
    let spec = write_spec(
        tmp.path(),
        "samples = 4\nseed = 3\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "1"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("t");
    run_ok(&mut tune_run(&spec, &dir));
    assert_eq!(
        stored_meta_json(&dir)["spec"]["search"]["algorithm"],
        "auto"
    );

    // The same sweep as the build before `auto` was the default stored it (`random`, format
    // 5) resumes drawing at random: no trial it adds is suggested by auto.
    let mut exp = tune::experiment::Experiment::open(&dir).unwrap();
    let mut meta = exp.stored.meta.clone();
    meta.spec.search.algorithm = SearchSpec::Random {};
    meta.format = 5;
    exp.store.put_meta(&meta).unwrap();
    exp.store.sync().unwrap();
    drop(exp);
    run_ok(tune().arg("resume").arg(&dir).args(["--samples", "8"]));
    let exp = tune::experiment::Experiment::open(&dir).unwrap();
    assert_eq!(exp.stored.meta.spec.search.algorithm, SearchSpec::Random {});
    drop(exp);
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 8);
    let by_auto: Vec<u64> = (trials.iter())
        .filter(|t| !t["suggested_by"].is_null())
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    assert_eq!(by_auto, [0, 1, 2, 3], "only the trials run under auto");
}
