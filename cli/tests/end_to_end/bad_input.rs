//! Bad input of every kind in one table: the spec, the command line, the objective's output
//! and the store. Each case checks the exit code and the first line of what tune says.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::*;

enum Input {
    /// `tune run` of a spec: top-level lines (sections may follow), and `[space]` lines.
    Spec(&'static str, &'static str),
    /// `tune` with these arguments; `DIR` is a finished experiment's folder, `TMP` a scratch
    /// folder, `SPEC` a good spec file.
    Cli(&'static [&'static str]),
    /// A one-trial sweep of the fixture objective with these arguments; the message is the
    /// trial's stored error.
    Output(&'static [&'static str]),
    /// `tune status` of a finished experiment after this damage to it.
    Store(fn(&Path)),
}

use Input::*;

const X: &str = "x = { uniform = [-1.0, 1.0] }";

/// (what, input, exit code, a fragment of the message's first line)
const CASES: &[(&str, Input, i32, &str)] = &[
    // The spec file.
    (
        "misspelt key",
        Spec("samples = 2\nsampels = 3", X),
        2,
        "unknown field `sampels`, expected one of",
    ),
    (
        "bad mode",
        Spec("samples = 2\nmode = \"maximum\"", X),
        2,
        "unknown variant `maximum`, expected `min` or `max`",
    ),
    (
        "unclosed string",
        Spec("samples = \"2", X),
        2,
        "invalid basic string",
    ),
    (
        "a time budget past any clock",
        Spec("samples = 2\n[stop]\ntime_budget_s = 1e300", X),
        2,
        "`time_budget_s`: expected a number of seconds above 0 and at most 1e9 (31 years), found 1e300",
    ),
    (
        "samples zero",
        Spec("samples = 0", X),
        2,
        "`samples`: expected at least 1 trial, found 0",
    ),
    (
        "more GPUs per trial than can be used",
        Spec("samples = 2\n[resources]\ngpus_per_trial = 2", X),
        2,
        "[resources] gpus_per_trial = 2: no GPU can be used",
    ),
    (
        "a trial on several machines without a database",
        Spec("samples = 2\n[resources]\nnodes_per_trial = 2", X),
        2,
        "[resources] nodes_per_trial = 2 runs each trial on that many `tune worker`s at once, which meet through the sweep's PostgreSQL database: run it with --store postgres://",
    ),
    (
        "more CPU slots per trial than there are",
        Spec("samples = 2\n[resources]\ncpu_slots = 2\ncpus_per_trial = 3", X),
        2,
        "[resources] `cpus_per_trial`: a trial takes 3 CPU slots, but there are 2 (cpu_slots)",
    ),
    (
        "samples negative",
        Spec("samples = -3", X),
        2,
        "invalid value: integer `-3`, expected u64",
    ),
    (
        "key given twice",
        Spec("samples = 2\nmetric = \"acc\"", X),
        2,
        "duplicate key",
    ),
    (
        "no slots",
        Spec("samples = 2\n[resources]\ncpu_slots = 0", X),
        2,
        "[resources] `cpu_slots`: expected at least 1 slot, found 0",
    ),
    (
        "no trials per pack",
        Spec("samples = 2\n[resources]\nfuse = 0", X),
        2,
        "invalid value: integer `0`, expected \"auto\" or a number of trials per pack, at least 1",
    ),
    (
        "packs of a command",
        Spec("samples = 2\n[resources]\nfuse = 4", X),
        2,
        "[resources] `fuse`: packs of 4 trials train as one model only with a built-in trainable (builtin = \"mlp\" or \"cnn\"), found a command objective: use fuse = 1 or \"auto\"",
    ),
    (
        "reversed bounds",
        Spec("samples = 2", "x = { uniform = [1.0, -1.0] }"),
        2,
        "expected low < high, found low = 1 and high = -1",
    ),
    (
        "log of zero",
        Spec("samples = 2", "x = { loguniform = [0.0, 1.0] }"),
        2,
        "log-scaled bounds must be positive, found low = 0",
    ),
    (
        "empty choice",
        Spec("samples = 2", "x = { choice = [] }"),
        2,
        "choice: expected at least one value, found an empty list",
    ),
    (
        "unknown domain",
        Spec("samples = 2", "x = { uniformm = [0.0, 1.0] }"),
        2,
        "uniformm",
    ),
    (
        "float too wide",
        Spec("samples = 2", "x = { uniform = [-1e308, 1.7e308] }"),
        2,
        "the range from -1e308 to 1.7e308 is too wide",
    ),
    (
        "when names nothing",
        Spec(
            "samples = 2",
            "x = { choice = [1.0] }\nm = { uniform = [0.0, 1.0], when = { optimiser = \"sgd\" } }",
        ),
        2,
        "parameter `m`: `when` names `optimiser`, which is not a parameter",
    ),
    (
        "when cycle",
        Spec(
            "samples = 2",
            "a = { choice = [1, 2], when = { b = 1 } }\nb = { choice = [1, 2], when = { a = 1 } }",
        ),
        2,
        "parameter `a`: its `when` conditions form a cycle",
    ),
    (
        "when on a float",
        Spec(
            "samples = 2",
            "x = { uniform = [0.0, 1.0] }\ny = { uniform = [0.0, 1.0], when = { x = 1 } }",
        ),
        2,
        "`when` can only depend on a choice or grid parameter",
    ),
    (
        "grid under random",
        Spec("samples = 2", "layers = { grid = [1, 2] }"),
        2,
        "[space] `layers`: a `grid` parameter is enumerated only by",
    ),
    (
        "grid without grids",
        Spec("samples = 2\n[search]\nalgorithm = \"grid\"", X),
        2,
        "grid search needs at least one parameter with a `grid` domain",
    ),
    (
        "unknown algorithm",
        Spec("samples = 2\n[search]\nalgorithm = \"bayes\"", X),
        2,
        "unknown variant `bayes`",
    ),
    (
        "tpe option under random",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"random\"\nn_startup_trials = 3",
            X,
        ),
        2,
        "unknown field `n_startup_trials`",
    ),
    (
        "bad tpe gamma",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"tpe\"\ngamma_fraction = 1.5",
            X,
        ),
        2,
        "`gamma_fraction`",
    ),
    (
        "gp refit_growth negative",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"gp\"\nrefit_growth = -0.5",
            X,
        ),
        2,
        "[search] `refit_growth`: expected a number in [0, 10], found -0.5",
    ),
    (
        "gp noise floor of 0",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"gp\"\nminimum_noise = 0.0",
            X,
        ),
        2,
        "[search] `minimum_noise`: expected a number in (0, 1], found 0",
    ),
    (
        "auto's noise floor above 1",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"auto\"\ngp_minimum_noise = 2.0",
            X,
        ),
        2,
        "[search] `gp_minimum_noise`: expected a number in (0, 1], found 2",
    ),
    (
        "auto given a key it does not take",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"auto\"\nn_startup_trials = 5",
            X,
        ),
        2,
        "unknown field `n_startup_trials`, expected one of `gp_minimum_noise`, `gp_under_rungs`, `gp_exploit_fraction`, `gp_kernel`",
    ),
    (
        "auto's share of trials by the mean above 1",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"auto\"\ngp_exploit_fraction = 2.0",
            X,
        ),
        2,
        "[search] `gp_exploit_fraction`: expected a number in [0, 1], found 2",
    ),
    (
        "auto's kernel not a Matérn it has",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"auto\"\ngp_kernel = \"matern12\"",
            X,
        ),
        2,
        "unknown variant `matern12`, expected `matern52` or `matern32`",
    ),
    (
        "tpe option of the wrong type",
        Spec(
            "samples = 2\n[search]\nalgorithm = \"tpe\"\nconstant_liar = \"yes\"",
            X,
        ),
        2,
        "`constant_liar`: invalid type: string \"yes\", expected a boolean",
    ),
    (
        "scheduler setting of the wrong type",
        Spec("samples = 2\n[scheduler]\nkind = \"asha\"\nmax_t = \"x\"", X),
        2,
        "`max_t`: invalid type: string \"x\", expected u64",
    ),
    (
        "unknown scheduler",
        Spec("samples = 2\n[scheduler]\nkind = \"bohb\"", X),
        2,
        "unknown variant `bohb`",
    ),
    (
        "asha max_t zero",
        Spec("samples = 2\n[scheduler]\nkind = \"asha\"\nmax_t = 0", X),
        2,
        "[scheduler] `max_t`: expected at least 1, found 0",
    ),
    (
        "hyperband eta 1",
        Spec(
            "samples = 2\n[scheduler]\nkind = \"hyperband\"\nreduction_factor = 1",
            X,
        ),
        2,
        "[scheduler] `reduction_factor`",
    ),
    (
        "hyperband grace period past max_t",
        Spec(
            "samples = 2\n[scheduler]\nkind = \"hyperband\"\nmax_t = 9\ngrace_period = 10",
            X,
        ),
        2,
        "[scheduler] `grace_period`: expected 1 <= grace_period <= max_t (9), found 10",
    ),
    (
        "pbt key under asha",
        Spec(
            "samples = 2\n[scheduler]\nkind = \"asha\"\nperturbation_interval = 2",
            X,
        ),
        2,
        "unknown field `perturbation_interval`",
    ),
    (
        "gpus all",
        Spec("samples = 2\n[resources]\ngpus = \"all\"", X),
        2,
        "expected \"auto\" or a list of GPU numbers",
    ),
    (
        "stop budget negative",
        Spec("samples = 2\n[stop]\ntime_budget_s = -1.0", X),
        2,
        "[stop] `time_budget_s`: expected a number of seconds above 0 and at most 1e9 (31 years), found -1",
    ),
    (
        "stop misspelt",
        Spec("samples = 2\n[stop]\ntargt = 1.0", X),
        2,
        "did you mean `target`?",
    ),
    (
        "placeholder of nothing",
        Spec("samples = 2", "y = { uniform = [0.0, 1.0] }"),
        2,
        "placeholder `{x}`",
    ),
    // The command line.
    (
        "no such spec file",
        Cli(&["run", "TMP/nope.toml"]),
        2,
        "nope.toml",
    ),
    (
        "unknown subcommand",
        Cli(&["sweep", "SPEC"]),
        2,
        "unrecognized subcommand 'sweep'",
    ),
    (
        "run without a spec",
        Cli(&["run"]),
        2,
        "the following required arguments were not provided",
    ),
    (
        "bad export format",
        Cli(&["export", "DIR", "--format", "xml"]),
        2,
        "invalid value 'xml' for '--format <FORMAT>'",
    ),
    (
        "resume of a plain folder",
        Cli(&["resume", "TMP"]),
        2,
        "not a tune experiment (it has no tune.db database)",
    ),
    (
        "status of nothing",
        Cli(&["status", "TMP/missing"]),
        2,
        "not a tune experiment (no such folder)",
    ),
    (
        "run into an experiment",
        Cli(&["run", "SPEC", "--dir", "DIR"]),
        2,
        "already holds an experiment; continue it with `tune resume",
    ),
    (
        "resume samples zero",
        Cli(&["resume", "DIR", "--samples", "0"]),
        2,
        "--samples: expected at least 1, found 0",
    ),
    (
        "resume samples shrink",
        Cli(&["resume", "DIR", "--samples", "1"]),
        2,
        "--samples: the budget can only grow",
    ),
    (
        "seed not a number",
        Cli(&["run", "SPEC", "--seed", "x"]),
        2,
        "invalid value 'x' for '--seed <SEED>'",
    ),
    // What the objective prints.
    (
        "metric as a string",
        Output(&["--behaviour", "stringloss"]),
        1,
        "`loss` is the string \"0.5\", expected a number",
    ),
    (
        "negative step",
        Output(&["--behaviour", "negstep"]),
        1,
        "`step` is -1, expected a whole number from 0 to 9e15",
    ),
    (
        "number out of range",
        Output(&["--behaviour", "overflow"]),
        1,
        "a report could not be read (number out of range",
    ),
    (
        "metric missing",
        Output(&["--behaviour", "missing"]),
        1,
        "the report at step 1 has no `loss` (it had: accuracy)",
    ),
    (
        "metric NaN",
        Output(&["--behaviour", "nan"]),
        1,
        "`loss` was NaN at step 1",
    ),
    (
        "a step going back within an attempt",
        Output(&["--behaviour", "backsteps"]),
        1,
        "it reported step 2 after step 3 in the same attempt: steps must increase",
    ),
    (
        "a step repeated within an attempt",
        Output(&["--behaviour", "repeatsteps"]),
        1,
        "it reported step 1 after step 1 in the same attempt: steps must increase",
    ),
    (
        "a metric named as a result's own key",
        Output(&["--behaviour", "reserved"]),
        1,
        "the report at step 1 has a metric named `seq`, a name results keep for their own",
    ),
    (
        "thousands of metrics",
        Output(&["--behaviour", "metrics"]),
        1,
        "5002 metrics, at most 1000",
    ),
    (
        "a 100 MB line",
        Output(&["--behaviour", "longline"]),
        1,
        "a line of its output is longer than 1 MiB",
    ),
    (
        "no report",
        Output(&["--behaviour", "silent"]),
        1,
        "the objective ended without reporting `loss`",
    ),
    (
        "a crash",
        Output(&["--behaviour", "crash"]),
        1,
        "exited with code 3; stderr ends with:",
    ),
    // The store.
    (
        "store truncated",
        Store(|db| truncate(&db.join("db"), 1000)),
        1,
        "is damaged: ",
    ),
    (
        "store zeroed",
        Store(|db| truncate(&db.join("db"), 0)),
        1,
        "is damaged: sled found corrupted data",
    ),
    (
        "store note garbled",
        Store(|db| std::fs::write(db.join("tune.check"), "x").unwrap()),
        1,
        "is damaged: its note of what it holds (tune.check) is unreadable",
    ),
    (
        "a store file that is a link to a device",
        Store(|db| {
            std::fs::remove_file(db.join("db")).unwrap();
            std::os::unix::fs::symlink("/dev/zero", db.join("db")).unwrap();
        }),
        1,
        "db is a character device, not a regular file",
    ),
    (
        "the store a link to a device",
        Store(|db| {
            std::fs::remove_dir_all(db).unwrap();
            std::os::unix::fs::symlink("/dev/zero", db).unwrap();
        }),
        1,
        "tune.db is a character device, not a regular file",
    ),
];

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[test]
fn forty_kinds_of_bad_input_each_get_their_exit_code_and_message() {
    assert!(CASES.len() >= 40, "{} cases", CASES.len());
    let tmp = tempfile::tempdir().unwrap();
    let good_spec = write_spec(tmp.path(), "samples = 2\nseed = 1", &[], X);
    let finished = tmp.path().join("finished");
    run_ok(&mut tune_run(&good_spec, &finished));
    let mut failures = Vec::new();
    for (i, (what, input, code, fragment)) in CASES.iter().enumerate() {
        let case = tmp.path().join(format!("case-{i}"));
        std::fs::create_dir_all(&case).unwrap();
        let (out, message): (Output, String) = match input {
            Spec(top, space) => {
                let top = format!("seed = 1\n{top}");
                let spec = write_spec(&case, &top, &[], space);
                let out = tune_run(&spec, &case.join("x")).output().unwrap();
                let message = first_line(&stderr(&out)).to_string();
                (out, message)
            }
            Cli(args) => {
                let args: Vec<String> = args
                    .iter()
                    .map(|a| {
                        a.replace("DIR", &finished.display().to_string())
                            .replace("TMP", &case.display().to_string())
                            .replace("SPEC", &good_spec.display().to_string())
                    })
                    .collect();
                let out = tune().args(&args).output().unwrap();
                let message = first_line(&stderr(&out)).to_string();
                (out, message)
            }
            Output(args) => {
                let spec = write_spec(
                    &case,
                    "samples = 1\n[resources]\ncpu_slots = 1",
                    args,
                    "x = { uniform = [1.0, 2.0] }",
                );
                let dir = case.join("x");
                let out = tune_run(&spec, &dir).output().unwrap();
                let trials = export_json(&dir);
                let message =
                    first_line(trials[0]["error"].as_str().unwrap_or_default()).to_string();
                (out, message)
            }
            Store(damage) => {
                let dir = case.join("x");
                copy_dir(&finished, &dir);
                damage(&dir.join("tune.db"));
                let out = tune().arg("status").arg(&dir).output().unwrap();
                let message = first_line(&stderr(&out)).to_string();
                (out, message)
            }
        };
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        if out.status.code() != Some(*code)
            || !message.contains(fragment)
            || all.contains("panicked")
        {
            failures.push(format!(
                "{what}: exit {:?} (want {code}), first line {message:?} (want {fragment:?})",
                out.status.code()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

/// Input the table above cannot hold: a name no file system takes, a URL that is none, a
/// folder this user may not read, a database server that never answers.
#[test]
fn bad_names_urls_unreadable_folders_and_silent_servers_get_their_exit_code_and_message() {
    let tmp = tempfile::tempdir().unwrap();
    let check = |out: &Output, code: i32, fragment: &str| {
        let text = stderr(out);
        assert_eq!(out.status.code(), Some(code), "{fragment}: {text}");
        assert!(first_line(&text).contains(fragment), "{fragment}: {text}");
        assert!(!text.contains("panicked"), "{text}");
    };

    // A NUL in the name: input, naming the key.
    let spec = write_spec(tmp.path(), "samples = 1", &[], X);
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(
        &spec,
        text.replace("name = \"t\"", "name = \"ba\\u0000se\""),
    )
    .unwrap();
    let out = tune_run(&spec, &tmp.path().join("nul")).output().unwrap();
    check(
        &out,
        2,
        "`name`: expected a folder name without slashes or control characters",
    );

    // A URL that does not parse: input.
    for args in [
        &["worker", "not-a-url"][..],
        &["status", "t", "--store", "postgresql://a@b:notaport/db"][..],
    ] {
        let out = tune().args(args).output().unwrap();
        check(&out, 2, "not a PostgreSQL URL");
    }

    // A folder under one this user may not enter: permission denied, exit 1 (as root, tune
    // runs as nobody: root reads everything).
    let good = tmp.path().join("spec-good");
    std::fs::create_dir_all(&good).unwrap();
    let spec = write_spec(&good, "samples = 1", &[], X);
    let locked = tmp.path().join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    run_ok(&mut tune_run(&spec, &locked.join("exp")));
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mode = if root { 0o700 } else { 0o000 };
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(mode)).unwrap();
    for command in ["resume", "status"] {
        let mut cmd = tune();
        cmd.arg(command).arg(locked.join("exp"));
        if root {
            std::os::unix::process::CommandExt::uid(&mut cmd, 65534);
            std::os::unix::process::CommandExt::gid(&mut cmd, 65534);
        }
        let out = cmd.output().unwrap();
        check(&out, 1, "Permission denied");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();

    // A server that takes the connection and never says a word: every command gives up
    // within the URL's connect_timeout, naming the server.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming().take(4) {
            held.push(conn);
        }
        std::thread::sleep(std::time::Duration::from_secs(30));
        drop(held);
    });
    let url = format!("postgresql://tune@127.0.0.1:{port}/db?connect_timeout=1");
    let spec = write_spec(tmp.path(), "samples = 1", &[], X);
    let runs: [&[&str]; 4] = [
        &["status", "t", "--store", &url],
        &["export", "t", "--store", &url],
        &["run", spec.to_str().unwrap(), "--store", &url, "--no-tui"],
        &["worker", &url, "--experiment", "t"],
    ];
    for args in runs {
        let out = tune().args(args).output().unwrap();
        check(&out, 1, &format!("the server at 127.0.0.1:{port} accepted the connection but did not answer within 1 s"));
    }
    drop(held);
}
