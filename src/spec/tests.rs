//! Spec parsing, validation and where errors point.

use super::*;
use tune_search::Value;

const GOOD: &str = r#"name = "q"
metric = "loss"
samples = 5

[objective]
command = ["python3", "obj.py", "--x", "{x}"]

[space]
x = { uniform = [-5.0, 10.0] }
"#;

fn err(text: &str) -> String {
    ExperimentSpec::from_toml(text, Path::new("space.toml"))
        .unwrap_err()
        .to_string()
}

#[test]
fn good_spec_has_defaults() {
    let spec = ExperimentSpec::from_toml(GOOD, Path::new("space.toml")).unwrap();
    assert_eq!(spec.mode, Mode::Min);
    assert_eq!(spec.search.algorithm, SearchSpec::Auto(Default::default()));
    assert_eq!(spec.scheduler, SchedulerSpec::Fifo {});
    assert!(spec.resources.cpu_slots >= 1);
    assert_eq!(spec.resources.gpus, Gpus::Auto);
}

#[test]
fn malformed_toml_gives_line_and_column() {
    let e = err("name = \"q\"\nmetric = = \"loss\"\n");
    assert!(e.starts_with("space.toml:2:"), "{e}");
    assert!(e.contains(" 2 | metric = = \"loss\""), "{e}");
}

#[test]
fn unknown_keys_suggest_the_right_one() {
    let e = err(&GOOD.replace("samples", "sampels"));
    assert!(
        e.starts_with("space.toml:3:1: unknown field `sampels`"),
        "{e}"
    );
    assert!(e.contains("(did you mean `samples`?)"), "{e}");
    let e = err(&GOOD.replace("metric = \"loss\"", "metric = \"loss\"\nmode = \"mim\""));
    assert!(
        e.contains("unknown variant `mim`") && e.contains("did you mean `min`?"),
        "{e}"
    );
    let e = err(&format!("{GOOD}\n[resources]\ncpu_slot = 2\n"));
    assert!(e.contains("did you mean `cpu_slots`?"), "{e}");
}

#[test]
fn semantic_errors_name_section_and_key() {
    let e = err(&GOOD.replace("samples = 5", "samples = 0"));
    assert_eq!(
        e.lines().next().unwrap(),
        "space.toml:3:1: `samples`: expected at least 1 trial, found 0"
    );
    let e = err(&GOOD.replace("{x}", "{y}"));
    assert!(
        e.contains("[objective] `command`: placeholder `{y}`"),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[search]\nalgorithm = \"random\"\nn_ei_candidates = 48\n"
    ));
    assert!(
        e.starts_with("space.toml:13:1: unknown field `n_ei_candidates` (this algorithm or scheduler kind takes no settings)"),
        "{e}"
    );
    let e = err(&format!("{GOOD}\n[search]\nn_ei_candidates = 48\n"));
    assert!(
        e.starts_with("space.toml:11:1: missing field `algorithm`"),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[search]\nalgorithm = \"tpe\"\ngamma_fraction = 1.5\n"
    ));
    assert!(
        e.contains(
            "space.toml:13:1: [search] `gamma_fraction`: expected a number in (0, 1], found 1.5"
        ),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[search]\nalgorithm = \"tpe\"\nstopped_min_depth = 2.0\n"
    ));
    assert!(
        e.contains("[search] `stopped_min_depth`: expected a number in [0, 1], found 2"),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[search]\nalgorithm = \"tpe\"\nmin_bandwidth_factor = -0.1\n"
    ));
    assert!(
        e.contains("[search] `min_bandwidth_factor`: expected a number in [0, 1], found -0.1"),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[search]\nalgorithm = \"tpe\"\ndiscrete_min_bandwidth = nan\n"
    ));
    assert!(
        e.contains("[search] `discrete_min_bandwidth`: expected a number >= 0, found NaN"),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[search]\nalgorithm = \"tpe\"\nn_startup = 5\n"
    ));
    assert!(
        e.starts_with("space.toml:13:1: unknown field `n_startup`"),
        "{e}"
    );
    assert!(e.contains("did you mean `n_startup_trials`?"), "{e}");
}

#[test]
fn scheduler_keys_belong_to_their_kind() {
    let e = err(&format!(
        "{GOOD}\n[scheduler]\nkind = \"asha\"\nperturbation_interval = 4\n"
    ));
    assert!(
        e.starts_with(
            "space.toml:13:1: unknown field `perturbation_interval`, expected one of `max_t`"
        ),
        "{e}"
    );
    assert!(e.contains(" 13 | perturbation_interval = 4"), "{e}");
    let e = err(&format!(
        "{GOOD}\n[scheduler]\nkind = \"asha\"\nvariant = \"promo\"\n"
    ));
    assert!(
        e.starts_with("space.toml:13:11: unknown variant `promo`"),
        "{e}"
    );
    assert!(e.contains("(did you mean `promotion`?)"), "{e}");
    let e = err(&format!(
        "{GOOD}\n[scheduler]\nkind = \"asha\"\nmax_t = -4\n"
    ));
    assert!(
        e.starts_with("space.toml:13:9: `max_t`: invalid value: integer `-4`"),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[scheduler]\nkind = \"asha\"\nreduction_factor = 1\n"
    ));
    assert!(
        e.starts_with(
            "space.toml:13:1: [scheduler] `reduction_factor`: expected at least 2, found 1"
        ),
        "{e}"
    );
    let e = err(&format!(
        "{GOOD}\n[scheduler]\nkind = \"pbt\"\nquantile_fraction = 0.9\n"
    ));
    assert!(
        e.contains("[scheduler] `quantile_fraction`: expected a number in (0, 0.5], found 0.9"),
        "{e}"
    );
}

#[test]
fn space_errors_point_at_the_parameter() {
    let e = err(&GOOD.replace("[-5.0, 10.0]", "[10.0, -5.0]"));
    assert!(e.starts_with("space.toml:9:"), "{e}");
    assert!(
        e.contains("expected low < high, found low = 10 and high = -5"),
        "{e}"
    );
}

#[test]
fn checks_across_parameters_point_at_the_parameter() {
    let cycle =
        "a = { choice = [1, 2], when = { b = 1 } }\nb = { choice = [1, 2], when = { a = 1 } }";
    let e = err(&GOOD.replace("x = { uniform", &format!("{cycle}\nx = {{ uniform")));
    assert!(
        e.starts_with("space.toml:9:1: parameter `a`: its `when` conditions form a cycle"),
        "{e}"
    );
    let unknown = "m = { uniform = [0.0, 1.0], when = { optimiser = \"sgd\" } }";
    let e = err(&format!("{GOOD}{unknown}\n"));
    assert!(
        e.starts_with("space.toml:10:1: parameter `m`: `when` names `optimiser`"),
        "{e}"
    );
}

#[test]
fn a_grid_parameter_is_refused_where_it_would_be_drawn_like_a_choice() {
    let with_grid = GOOD.replace(
        "x = { uniform = [-5.0, 10.0] }",
        "x = { uniform = [-5.0, 10.0] }\nlayers = { grid = [1, 2] }",
    );
    for search in ["", "[search]\nalgorithm = \"tpe\"\n"] {
        let e = err(&format!("{with_grid}{search}"));
        assert!(e.starts_with("space.toml:10:1: [space] `layers`: a `grid` parameter is enumerated only by `[search] algorithm = \"grid\"`"), "{e}");
    }
    let grid = format!("{with_grid}[search]\nalgorithm = \"grid\"\n");
    assert!(ExperimentSpec::from_toml(&grid, Path::new("space.toml")).is_ok());
}

#[test]
fn gpus_other_than_auto_or_a_list_are_explained() {
    let e = err(&GOOD.replace("[space]", "[resources]\ngpus = \"all\"\n\n[space]"));
    assert!(e.contains(r#"invalid value: string "all", expected "auto" or a list of GPU numbers such as [0, 1]"#), "{e}");
}

#[test]
fn the_spec_reference_is_valid() {
    let readme = include_str!("../../docs/guide/spec.md");
    let start = readme.find("```toml\n").unwrap() + 8;
    let end = start + readme[start..].find("```").unwrap();
    let spec =
        ExperimentSpec::from_toml(&readme[start..end], Path::new("docs/guide/spec.md")).unwrap();
    assert_eq!(spec.space.len(), 9);
    assert_eq!(spec.objective.unwrap().env["OMP_NUM_THREADS"], "1");
}

#[test]
fn spec_round_trips_through_json() {
    let spec = ExperimentSpec::from_toml(GOOD, Path::new("space.toml")).unwrap();
    let back: ExperimentSpec =
        serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(spec, back);
}

#[test]
fn initial_points_and_unset_options_round_trip_through_json() {
    // TPE's unset options are stored as nulls; the points sit beside the options.
    let text = GOOD.replace(
        "[objective]",
        "[search]\nalgorithm = \"tpe\"\nn_startup_trials = 4\n\n[[search.initial]]\nx = 1\n\n[[search.initial]]\nx = -2.5\n\n[objective]",
    );
    let spec = ExperimentSpec::from_toml(&text, Path::new("space.toml")).unwrap();
    assert_eq!(spec.search.initial.len(), 2);
    // As written (an integer); the searcher takes it as the float domain's number.
    assert_eq!(spec.search.initial[0].get("x"), Some(&Value::Int(1)));
    let json = serde_json::to_string(&spec).unwrap();
    assert!(json.contains("null"), "{json}");
    let back: ExperimentSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(spec, back);
    let mut searcher = back.make_searcher().unwrap();
    let first = searcher
        .suggest(0, &tune_search::History::new(Mode::Min))
        .unwrap();
    assert_eq!(first.get("x"), Some(&Value::Float(1.0)));
}

#[test]
fn initial_points_that_are_not_tables_are_explained() {
    let e = err(&GOOD.replace(
        "[objective]",
        "[search]\nalgorithm = \"tpe\"\ninitial = [1, 2]\n\n[objective]",
    ));
    assert!(
        e.contains("`initial`: expected tables of parameter values ([[search.initial]])"),
        "{e}"
    );
}

#[test]
fn store_checkpoints_is_a_folder_relative_to_the_spec_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("space.toml");
    let with = |value: &str| {
        GOOD.replace(
            "[space]",
            &format!("[store]\ncheckpoints = {value}\n\n[space]"),
        )
    };
    std::fs::write(&file, with("\"shared\"")).unwrap();
    let (spec, _) = ExperimentSpec::read(&file).unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        spec.store.checkpoints,
        Some(CheckpointPlace::Folder(base.join("shared")))
    );
    assert_eq!(
        spec.trials_folder(Path::new("runs/x")),
        base.join("shared").join(&spec.name)
    );
    // Without it, trial folders stay in the experiment folder.
    let plain = ExperimentSpec::from_toml(GOOD, Path::new("space.toml")).unwrap();
    assert_eq!(
        plain.trials_folder(Path::new("runs/x")),
        Path::new("runs/x")
    );
    let e = err(&with("\"\""));
    assert!(
        e.contains("[store] `checkpoints`: expected a folder, found an empty string"),
        "{e}"
    );
    let e = err(&GOOD.replace("[space]", "[store]\ncheckpoint = \"/s\"\n\n[space]"));
    assert!(e.contains("checkpoint"), "{e}");
}

#[test]
fn what_a_trial_takes_is_checked_against_what_can_be_placed_and_used() {
    let with =
        |resources: &str| GOOD.replace("[space]", &format!("[resources]\n{resources}\n\n[space]"));
    let cases = [
        (
            "cpus_per_trial = 0",
            "[resources] `cpus_per_trial`: expected at least 1, found 0",
        ),
        (
            "gpus_per_trial = 0",
            "[resources] `gpus_per_trial`: expected at least 1, found 0",
        ),
        (
            "cpu_slots = 3\ncpus_per_trial = 4",
            "[resources] `cpus_per_trial`: a trial takes 4 CPU slots, but there are 3 (cpu_slots)",
        ),
        (
            "cpu_slots = 2\nprocesses_per_node = 3",
            "a trial takes 3 CPU slots (one per process: processes_per_node), but there are 2",
        ),
        (
            "gpus_per_trial = 2\ntrials_per_gpu = 2",
            "[resources] `gpus_per_trial`: a trial that takes 2 GPUs has them to itself",
        ),
    ];
    for (resources, expected) in cases {
        let e = err(&with(resources));
        assert!(e.contains(expected), "{resources}: {e}");
    }
    // Launch placeholders have values only in distributed trials, and are no parameter's name.
    let torchrun = GOOD.replace(
        "\"--x\"",
        "\"--nproc_per_node={nproc_per_node}\", \"--port={master_port}\", \"--x\"",
    );
    let e = err(&torchrun);
    assert!(e.contains("[objective] `command`: placeholder `{nproc_per_node}` in \"--nproc_per_node={nproc_per_node}\" has a value only for distributed trials"), "{e}");
    let spec = ExperimentSpec::from_toml(
        &with("processes_per_node = 2")
            .replace("[objective]", "[objective]\nlauncher = \"tune\"")
            .replace("{x}", "{x} {world_size} {rdzv_endpoint}"),
        Path::new("s.toml"),
    )
    .unwrap();
    assert_eq!(spec.resources.cpus_per_trial(), 2);
    let e = err(&with("processes_per_node = 2")
        .replace("x = {", "world_size = { uniform = [0.0, 1.0] }\nx = {"));
    assert!(
        e.contains("[space] `world_size`: `world_size` is a placeholder of distributed trials"),
        "{e}"
    );
    let e = err(&GOOD.replace("[objective]", "[objective]\nlauncher = \"mpirun\""));
    assert!(
        e.contains("[objective] `launcher`: expected \"tune\""),
        "{e}"
    );
}

#[test]
fn several_processes_or_gpus_need_a_command() {
    let builtin = "name = \"b\"\nmetric = \"val_loss\"\nsamples = 4\n\n[objective]\nbuiltin = \"mlp\"\ndataset = \"digits\"\n\n[resources]\ngpus_per_trial = 2\n\n[space]\nlr = { loguniform = [1e-4, 1e-1] }\n";
    let e = err(builtin);
    assert!(
        e.contains("[resources] `gpus_per_trial`: a built-in trainable trains on one device"),
        "{e}"
    );
    let mut spec = ExperimentSpec::from_toml(GOOD, Path::new("s.toml")).unwrap();
    spec.objective = None;
    spec.resources.processes_per_node = Some(2);
    let e = spec.validate().unwrap_err().to_string();
    assert!(e.contains("[resources] `processes_per_node`: an objective of code (Tuner::fit) runs in this process"), "{e}");
    spec.resources.nodes_per_trial = Some(2);
    let e = spec.validate().unwrap_err().to_string();
    assert!(
        e.contains("[resources] `nodes_per_trial`: an objective of code"),
        "{e}"
    );
    let e = err(&builtin.replace("gpus_per_trial = 2", "nodes_per_trial = 2"));
    assert!(
        e.contains("[resources] `nodes_per_trial`: a built-in trainable trains on one device"),
        "{e}"
    );
    // A command's gang is a valid spec (where it runs is the coordinator's to check).
    let gang = GOOD.replace("[space]", "[resources]\nnodes_per_trial = 2\n\n[space]");
    let spec = ExperimentSpec::from_toml(&gang, Path::new("s.toml")).unwrap();
    assert_eq!(spec.resources.nodes_per_trial(), 2);
    assert_eq!(
        spec.trial_shape().as_deref(),
        Some("1 process per machine (started by its command), 1 CPU slot on each of 2 machines (a gang of `tune worker`s)")
    );
}
