//! The `tune` command line: run, resume, inspect and export sweeps.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use tune::dashboard::{App, Board, Hub, Update};
use tune::experiment::{Experiment, StoreLocation};
use tune::{
    best_trial, now_ms, value_short, value_text, ExperimentSpec, Status, StoreError, TuneError,
    Tuner,
};

/// Hyperparameter tuning: search, early stopping, durable trials, resume.
#[derive(Parser)]
#[command(name = "tune", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a new sweep described by a TOML file.
    Run {
        /// The sweep: metric, budget, search, scheduler, resources, objective, space.
        spec: PathBuf,
        /// Experiment folder (default: runs/<name>).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Plain progress line instead of the dashboard.
        #[arg(long)]
        no_tui: bool,
        /// Overrides the spec's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// An earlier sweep's folder (with --store: its name in that database): its completed
        /// trials are what the algorithm (tpe, gp, nsga2) learns from first, when its metric and
        /// parameters are this sweep's.
        #[arg(long, value_name = "EXPERIMENT")]
        warm_start: Option<PathBuf>,
        /// Trials run at once on this machine (default: the spec's [resources]); with --store,
        /// 0 runs the coordinator alone and `tune worker` processes run the trials.
        #[arg(long)]
        slots: Option<usize>,
        #[command(flatten)]
        store: StoreArg,
    },
    /// Continue an interrupted (or finished) sweep: completed trials are kept, unfinished ones re-run.
    Resume {
        /// The experiment folder (with --store: the experiment's name).
        experiment: PathBuf,
        #[command(flatten)]
        store: StoreArg,
        /// With --store: where this machine keeps the trial folders (default: runs/<name>).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Raise the budget to this many samples.
        #[arg(long)]
        samples: Option<u64>,
        /// Go on past `[stop]`'s target, time budget and no-improvement limit (for this
        /// resume; trials failing in a row still stop it).
        #[arg(long)]
        no_stop: bool,
        /// Plain progress line instead of the dashboard.
        #[arg(long)]
        no_tui: bool,
        /// Trials run at once on this machine (0 with --store: only workers run them).
        #[arg(long)]
        slots: Option<usize>,
    },
    /// Run trials of sweeps kept in a PostgreSQL database, for their coordinators (which run
    /// anywhere): start one per machine, by hand, in a Slurm job array or a Kubernetes Job.
    Worker {
        /// The database (postgres://user:password@host/db); default: TUNE_STORE.
        #[arg(env = "TUNE_STORE", hide_env_values = true)]
        url: String,
        /// Serve only this experiment (the spec's `name`), and exit once its sweep is finished;
        /// default: every experiment in the database, until stopped. Only a worker serving
        /// one sweep fuses its built-in trials (`[resources] fuse`): each slot then holds
        /// that many, trained as one model.
        #[arg(long)]
        experiment: Option<String>,
        /// Trials run at once on CPU (default: one per core).
        #[arg(long)]
        slots: Option<usize>,
        /// GPUs to use (`cuda` build): `auto` or a list such as `0,1`.
        #[arg(long)]
        gpus: Option<String>,
        /// Trials sharing each GPU.
        #[arg(long, default_value_t = 1)]
        trials_per_gpu: u32,
        /// Where trial folders go: DIR/<experiment>/trials/<id>.
        #[arg(long, default_value = "runs")]
        dir: PathBuf,
        /// Seconds a claimed trial stays this worker's without a heartbeat; a worker cut off
        /// from the database for longer stops its trials (they run again elsewhere).
        #[arg(long, default_value_t = 15.0)]
        lease: f64,
        /// With --experiment: seconds to wait for the experiment to be created (workers
        /// started before their coordinator, as one batch job may); 0 fails at once.
        #[arg(long, default_value_t = 0.0)]
        wait: f64,
    },
    /// Counts, best trial and a per-trial table.
    Status {
        /// The experiment folder (with --store: the experiment's name).
        experiment: PathBuf,
        #[command(flatten)]
        store: StoreArg,
    },
    /// Whether the stored sweep kept everything: each trial's steps stored once and in order,
    /// none lost between attempts, no decided report of a remote worker left unstored. Exit 1
    /// (with every problem listed) where something was lost.
    Check {
        /// The experiment folder (with --store: the experiment's name).
        experiment: PathBuf,
        #[command(flatten)]
        store: StoreArg,
    },
    /// The dashboard of an experiment: live while its sweep runs (in another process), or as
    /// it ended. Read-only.
    Watch {
        /// The experiment folder (with --store: the experiment's name).
        experiment: PathBuf,
        #[command(flatten)]
        store: StoreArg,
    },
    /// Every trial, to stdout (`--format tensorboard`: into the folder OUT).
    Export {
        /// The experiment folder (with --store: the experiment's name).
        experiment: PathBuf,
        /// With `--format tensorboard`: the folder to write (`tensorboard --logdir OUT`).
        #[arg(value_name = "OUT")]
        folder: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArg,
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
        /// Export whatever a damaged store still holds (and say on stderr what is missing).
        #[arg(long)]
        salvage: bool,
        /// Send the sweep to this MLflow tracking server instead (what it lacks of it: a
        /// sweep logged live, or half logged, gets nothing twice).
        #[arg(long, value_name = "URL", conflicts_with_all = ["format", "folder"])]
        to_mlflow: Option<String>,
    },
    /// Charts of a sweep: one self-contained HTML report (history, learning curves with the
    /// scheduler's rungs, parallel coordinates, slices, importances, PBT lineage, every trial),
    /// or PNG/SVG images.
    Plot {
        /// The experiment folder (with --store: the experiment's name).
        experiment: PathBuf,
        #[command(flatten)]
        store: StoreArg,
        /// Where to write: report.html; with --format png|svg, the image (with --chart) or a
        /// folder that gets one image per chart.
        #[arg(long)]
        out: PathBuf,
        /// html, png or svg (default: from --out's extension, else html).
        #[arg(long, value_enum)]
        format: Option<PlotFormat>,
        /// One chart only (png and svg).
        #[arg(long, value_enum)]
        chart: Option<PlotChart>,
    },
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum PlotFormat {
    Html,
    Png,
    Svg,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum PlotChart {
    History,
    Curves,
    Parallel,
    Slice,
    Importance,
    Lineage,
}

impl PlotChart {
    fn chart(self) -> tune::plot::Chart {
        use tune::plot::Chart;
        match self {
            PlotChart::History => Chart::History,
            PlotChart::Curves => Chart::Curves,
            PlotChart::Parallel => Chart::Parallel,
            PlotChart::Slice => Chart::Slice,
            PlotChart::Importance => Chart::Importance,
            PlotChart::Lineage => Chart::Lineage,
        }
    }
}

/// Where the experiment's records are: `--store`, else `TUNE_STORE`, else the folder.
#[derive(clap::Args)]
struct StoreArg {
    /// A PostgreSQL database holding the experiment (postgres://user:password@host/db),
    /// shared by many experiments and machines; default: `tune.db/` in the experiment folder.
    #[arg(
        long = "store",
        env = "TUNE_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    url: Option<String>,
}

impl StoreArg {
    fn location(&self) -> Result<StoreLocation, TuneError> {
        StoreLocation::parse(self.url.as_deref())
    }
}

/// An experiment as the command line names it: a folder, or a name in a database.
#[derive(Clone)]
enum Named {
    Folder(PathBuf),
    InDatabase { url: String, name: String },
}

impl Named {
    fn new(experiment: PathBuf, store: &StoreArg) -> Result<Named, TuneError> {
        Ok(match store.location()? {
            StoreLocation::Folder => Named::Folder(experiment),
            StoreLocation::Postgres(url) => Named::InDatabase {
                url,
                name: experiment.to_string_lossy().into_owned(),
            },
        })
    }
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Format {
    Json,
    Csv,
    /// Optuna's JournalStorage log: `optuna-dashboard sweep.log`, `optuna.load_study`.
    OptunaJournal,
    /// TensorBoard event files, a run per trial, with the HParams tab's summaries, into OUT.
    Tensorboard,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let worker = matches!(cli.command, Command::Worker { .. });
    match run(cli.command) {
        Ok(code) => code,
        Err(TuneError::Store(e @ StoreError::Database { .. })) if worker => {
            // A worker has no sweep to resume: what it ran goes on elsewhere.
            eprintln!(
                "error: {e}\n  check the server, the URL and the credentials (the URL argument or \
                 TUNE_STORE); trials this worker held run again on other workers once their \
                 leases run out"
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {}", cli_message(&e));
            ExitCode::from(if e.is_input() { 2 } else { 1 })
        }
    }
}

/// The error as the command line words it: with the command that goes on from it.
fn cli_message(e: &TuneError) -> String {
    match e {
        TuneError::ExperimentExists(dir) => format!(
            "{} already holds an experiment; continue it with `tune resume {}`, or pass --dir for a new one",
            dir.display(),
            dir.display()
        ),
        TuneError::Failing { dir, reason } => format!(
            "{reason}\n  the sweep stopped; fix the objective, then `tune resume {}` goes on (failed trials stay failed)",
            dir.display()
        ),
        TuneError::Interrupted(dir) => format!(
            "interrupted; continue the sweep with `tune resume {}`",
            dir.display()
        ),
        TuneError::Invalid(message) if message.starts_with("`samples`") => {
            message.replacen("`samples`", "--samples", 1)
        }
        TuneError::Store(StoreError::Damaged { path, .. }) => {
            let experiment = path.parent().unwrap_or(path);
            format!(
                "{e}\n  `tune export {} --salvage` writes out every trial it can still read",
                experiment.display()
            )
        }
        TuneError::Store(StoreError::Database { path, .. })
            if path.to_string_lossy().starts_with("postgres") =>
        {
            // A database's URL, not a folder: the experiment is resumed by its name.
            let name = path
                .to_string_lossy()
                .rsplit_once(" (experiment ")
                .map(|(_, n)| n.trim_end_matches(')').trim_matches('"').to_string())
                .unwrap_or_else(|| "NAME".into());
            format!(
                "{e}\n  check the server, the URL and the credentials (--store or TUNE_STORE); a sweep stopped by this goes on from its last acknowledged result with `tune resume {name} --store URL`"
            )
        }
        TuneError::Store(StoreError::Database { path, .. }) => {
            // The sweep stopped at its last sync: what was acknowledged is kept.
            let experiment = path.parent().unwrap_or(path);
            format!(
                "{e}\n  once that is fixed (a full disk freed), `tune resume {}` continues the sweep from its last acknowledged result",
                experiment.display()
            )
        }
        other => other.to_string(),
    }
}

fn run(command: Command) -> Result<ExitCode, TuneError> {
    match command {
        Command::Run {
            spec,
            dir,
            no_tui,
            seed,
            warm_start,
            slots,
            store,
        } => {
            let at = store.location()?;
            let (mut parsed, text) = ExperimentSpec::read(&spec)?;
            if parsed.objective.is_none() {
                return Err(TuneError::Invalid(format!(
                    "{}: expected an [objective] table with `command = [...]` or `builtin = \"mlp\"`, found none",
                    spec.display()
                )));
            }
            if let Some(seed) = seed {
                parsed.seed = seed;
            }
            if let Some(from) = warm_start {
                let read = match &at {
                    StoreLocation::Folder => tune::read_warm_start(&from, &parsed)?,
                    StoreLocation::Postgres(url) => {
                        tune::read_warm_start_stored(url, &from.to_string_lossy(), &parsed)?
                    }
                };
                println!(
                    "tune: warm start from {}: {} completed trials{}",
                    from.display(),
                    read.warm_start.trials.len(),
                    match read.left_out {
                        0 => String::new(),
                        n => format!(" ({n} outside this space's ranges left out)"),
                    }
                );
                parsed.search.warm_start = Some(read.warm_start);
                parsed
                    .validate()
                    .map_err(|e| TuneError::Invalid(format!("{}: {e}", spec.display())))?;
            }
            // SAFETY: tune has started no thread yet.
            unsafe { tune::share_cores_among_trials(&parsed, slots) };
            let dir = dir.unwrap_or_else(|| Path::new("runs").join(&parsed.name));
            match &at {
                StoreLocation::Folder => {
                    println!("tune: sweep `{}` in {}", parsed.name, dir.display())
                }
                StoreLocation::Postgres(_) => println!(
                    "tune: sweep `{}` in {at} (trial folders in {})",
                    parsed.name,
                    dir.display()
                ),
            }
            let mut tuner = Tuner::from_spec(parsed).dir(dir).spec_text(text).store(at);
            if let Some(n) = slots {
                tuner = tuner.local_slots(n);
            }
            let result = sweep(tuner, !no_tui).map_err(|e| match e {
                TuneError::Invalid(msg) => TuneError::Invalid(format!("{}: {msg}", spec.display())),
                other => other,
            })?;
            Ok(finish(&result))
        }
        Command::Resume {
            experiment,
            store,
            dir,
            samples,
            no_stop,
            no_tui,
            slots,
        } => {
            let (mut tuner, dir) = match Named::new(experiment, &store)? {
                Named::Folder(folder) => {
                    if dir.is_some() {
                        return Err(TuneError::Invalid(format!(
                            "--dir is for an experiment in a database (--store); {} is the experiment's folder",
                            folder.display()
                        )));
                    }
                    (Tuner::resume(&folder), folder)
                }
                Named::InDatabase { url, name } => {
                    let folder = dir.unwrap_or_else(|| Path::new("runs").join(&name));
                    let at = StoreLocation::Postgres(url);
                    (Tuner::resume_in(at, name).dir(&folder), folder)
                }
            };
            // The frozen copy holds the resources the sweep runs with; a folder without one is
            // reported by the resume itself.
            let frozen = dir.join(tune::experiment::SPEC_FILE);
            if let Ok(text) = std::fs::read_to_string(&frozen) {
                if let Ok(spec) = ExperimentSpec::from_toml(&text, &frozen) {
                    // SAFETY: tune has started no thread yet.
                    unsafe { tune::share_cores_among_trials(&spec, slots) };
                }
            }
            if let Some(n) = samples {
                tuner = tuner.samples(n);
            }
            if no_stop {
                tuner = tuner.stop_when(tune::StopConditions::default());
            }
            if let Some(n) = slots {
                tuner = tuner.local_slots(n);
            }
            println!("tune: resuming {}", dir.display());
            let result = sweep(tuner, !no_tui)?;
            Ok(finish(&result))
        }
        Command::Worker {
            url,
            experiment,
            slots,
            gpus,
            trials_per_gpu,
            dir,
            lease,
            wait,
        } => {
            let flag = |e: tune_search::FieldError| {
                TuneError::Invalid(format!("{}: {}", e.key, e.message))
            };
            let lease = tune::seconds::checked("--lease", lease, false).map_err(flag)?;
            let wait = tune::seconds::checked("--wait", wait, true).map_err(flag)?;
            // SAFETY: tune has started no thread yet.
            unsafe {
                tune::share_cores_among_worker_slots(
                    slots.unwrap_or_else(|| tune::Resources::default().cpu_slots),
                )
            };
            let mut worker = tune::remote::Worker::new(url)
                .dir(dir)
                .lease(lease)
                .wait_for_experiment(wait)
                .handle_signals(true);
            if let Some(name) = experiment {
                worker = worker.experiment(name);
            }
            if let Some(n) = slots {
                if n == 0 {
                    return Err(TuneError::Invalid(
                        "--slots: expected at least 1 slot, found 0".into(),
                    ));
                }
                worker = worker.slots(n);
            }
            if let Some(list) = gpus {
                worker = worker.gpus(parse_gpus(&list)?, trials_per_gpu);
            }
            let done = worker.run_spec()?;
            eprintln!(
                "tune worker: ran {} attempt{}{}",
                done.attempts,
                if done.attempts == 1 { "" } else { "s" },
                if done.lost > 0 {
                    format!(" ({} lost: their leases ran out)", done.lost)
                } else {
                    String::new()
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Watch { experiment, store } => watch(&Named::new(experiment, &store)?),
        Command::Plot {
            experiment,
            store,
            out,
            format,
            chart,
        } => plot(&Named::new(experiment, &store)?, &out, format, chart),
        Command::Check { experiment, store } => check(&Named::new(experiment, &store)?),
        Command::Status { experiment, store } => {
            let sweep = SweepState::load(&Named::new(experiment, &store)?)?;
            let gpus = tune_trials::gpu_use().unwrap_or_default();
            quiet_on_broken_pipe(print_status(&mut std::io::stdout().lock(), &sweep, &gpus))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            experiment,
            folder,
            store,
            format,
            salvage,
            to_mlflow,
        } => {
            if let Some(url) = to_mlflow {
                return export_to_mlflow(&Named::new(experiment, &store)?, salvage, &url);
            }
            match (format, &folder) {
                (Format::Tensorboard, None) => {
                    return Err(TuneError::Invalid(
                        "--format tensorboard writes a folder: name it after the experiment \
                         (tune export NAME --format tensorboard OUT)"
                            .into(),
                    ))
                }
                (Format::Json | Format::Csv | Format::OptunaJournal, Some(folder)) => {
                    return Err(TuneError::Invalid(format!(
                        "unexpected argument {}: only --format tensorboard writes to a folder; \
                         the other formats go to stdout",
                        folder.display()
                    )))
                }
                _ => {}
            }
            let named = Named::new(experiment, &store)?;
            let sweep = match (named.clone(), salvage) {
                (Named::Folder(dir), true) => SweepState::salvage(&dir)?,
                (Named::InDatabase { .. }, true) => {
                    return Err(TuneError::Invalid(
                        "--salvage reads a damaged sled store (tune.db/); a PostgreSQL store is read as it is".into(),
                    ))
                }
                (named, false) => SweepState::load(&named)?,
            };
            let spec = &sweep.spec;
            let workers = match &named {
                Named::InDatabase { url, name } if format == Format::Json => {
                    tune::remote::attempt_workers(url, name)?
                }
                _ => Default::default(),
            };
            let mut out = std::io::stdout().lock();
            let written = match format {
                Format::Json => serde_json::to_writer_pretty(
                    &mut out,
                    &tune::export::to_json(
                        &sweep.trials,
                        &spec.objectives(),
                        &spec.constraints,
                        &workers,
                    ),
                )
                .map_err(std::io::Error::from)
                .and_then(|_| writeln!(out)),
                Format::Csv => tune::export::write_csv(
                    &mut out,
                    &sweep.trials,
                    &spec.space,
                    &spec.objectives(),
                    &spec.constraints,
                ),
                Format::OptunaJournal => tune::export::write_optuna_journal(
                    &mut out,
                    &spec.name,
                    &sweep.trials,
                    &spec.space,
                    &spec.objectives(),
                    &spec.constraints,
                ),
                Format::Tensorboard => {
                    let folder = folder.expect("checked above");
                    tune::tracking::tensorboard::write_sweep(&folder, &sweep.trials).map_err(
                        |e| {
                            TuneError::Invalid(format!(
                                "cannot write TensorBoard's folder {}: {e}",
                                folder.display()
                            ))
                        },
                    )?;
                    Ok(())
                }
            };
            quiet_on_broken_pipe(written)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `tune export NAME --to-mlflow URL`.
fn export_to_mlflow(named: &Named, salvage: bool, url: &str) -> Result<ExitCode, TuneError> {
    tune::check_mlflow_url(url).map_err(|e| TuneError::Invalid(format!("--to-mlflow: {e}")))?;
    let sweep = match (named, salvage) {
        (Named::Folder(dir), true) => SweepState::salvage(dir)?,
        (_, _) => SweepState::load(named)?,
    };
    if sweep.live {
        return Err(TuneError::Invalid(format!(
            "{} is running: its own `[tracking] mlflow` logs it live; send it with --to-mlflow \
             once it has ended",
            sweep.dir.display()
        )));
    }
    let complete = sweep.trials.len() as u64 >= sweep.samples
        && sweep.trials.iter().all(|t| t.status.is_finished());
    let record = tune::tracking::mlflow::SweepRecord::new(&sweep.spec, sweep.created_at);
    let started = sweep
        .trials
        .iter()
        .filter(|t| t.started_at.is_some())
        .count();
    tune::tracking::mlflow::sync_sweep(url, record.clone(), &sweep.trials, complete).map_err(
        |e| {
            let message = format!("sending {} to MLflow: {e}", sweep.dir.display());
            if e.is_transient() {
                TuneError::Io {
                    context: message,
                    source: std::io::Error::other(
                        "MLflow did not answer; nothing sent is lost, run it again",
                    ),
                }
            } else {
                TuneError::Invalid(message)
            }
        },
    )?;
    eprintln!(
        "tune: {started} trials of {} in MLflow at {url}, experiment {:?}{}",
        record.name,
        record.experiment,
        if complete {
            ""
        } else {
            " (the sweep has not ended: its run stays RUNNING)"
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `tune plot`: the report, one image, or a folder of images.
fn plot(
    named: &Named,
    out: &Path,
    format: Option<PlotFormat>,
    chart: Option<PlotChart>,
) -> Result<ExitCode, TuneError> {
    use tune::plot::{Chart, ImageFormat, PlotError};
    let by_extension = match out.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => Some(PlotFormat::Html),
        Some("png") => Some(PlotFormat::Png),
        Some("svg") => Some(PlotFormat::Svg),
        _ => None,
    };
    let format = match (format, by_extension) {
        (Some(f), Some(e)) if f != e => {
            return Err(TuneError::Invalid(format!(
                "--out {}: its extension names another format than --format",
                out.display()
            )))
        }
        (Some(f), _) => f,
        (None, Some(e)) => e,
        (None, None) => PlotFormat::Html,
    };
    let image =
        match format {
            PlotFormat::Html if chart.is_some() => return Err(TuneError::Invalid(
                "--chart draws one image: add --format png or svg (the HTML report holds every \
                 chart)"
                    .into(),
            )),
            PlotFormat::Html => None,
            PlotFormat::Png => Some(ImageFormat::Png),
            PlotFormat::Svg => Some(ImageFormat::Svg),
        };
    let sweep = SweepState::load(named)?;
    let rungs = sweep.spec.make_scheduler().rungs();
    let input = tune::plot::PlotInput {
        name: &sweep.spec.name,
        metric: &sweep.spec.metric,
        mode: sweep.spec.mode,
        constraints: &sweep.spec.constraints,
        space: &sweep.spec.space,
        trials: &sweep.trials,
        scheduler: sweep.spec.scheduler.name(),
        rungs,
        running: sweep.live,
    };
    if sweep.live {
        eprintln!(
            "tune: {} is still running: plotting the {} trials it has now",
            sweep.dir.display(),
            sweep.trials.len()
        );
    }
    let plotted = |e: PlotError| match e {
        PlotError::NothingReported { .. } | PlotError::NotApplicable { .. } => {
            TuneError::Invalid(format!("{}: {e}", sweep.dir.display()))
        }
        PlotError::Io { path, source } => {
            TuneError::io(format!("writing {}", path.display()), source)
        }
        PlotError::Draw { .. } => TuneError::io(
            format!("plotting {}", sweep.dir.display()),
            std::io::Error::other(e.to_string()),
        ),
    };
    match (image, chart) {
        (None, _) => {
            let show = std::io::stderr().is_terminal();
            tune::plot::write_html(&input, out, &mut |done, total, what| {
                if show {
                    eprint!("\rtune: plotting {what} ({}/{total})\x1b[K", done + 1);
                }
            })
            .map_err(plotted)?;
            if show {
                eprint!("\r\x1b[K");
            }
            eprintln!("tune: wrote {}", out.display());
        }
        (Some(format), Some(chart)) => {
            tune::plot::write_image(chart.chart(), &input, format, out).map_err(plotted)?;
            eprintln!("tune: wrote {}", out.display());
        }
        (Some(format), None) => {
            std::fs::create_dir_all(out)
                .map_err(|e| TuneError::io(format!("creating {}", out.display()), e))?;
            // Every chart that applies; what does not is said, not an error.
            let mut written = 0;
            for chart in Chart::ALL {
                if let Some(reason) = chart.not_applicable(&input) {
                    if chart != Chart::Lineage || input.scheduler == "pbt" {
                        eprintln!("tune: no {} chart: {reason}", chart.name());
                    }
                    continue;
                }
                let path = out.join(format!("{}.{}", chart.name(), format.extension()));
                tune::plot::write_image(chart, &input, format, &path).map_err(plotted)?;
                written += 1;
            }
            eprintln!("tune: wrote {written} charts into {}", out.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--gpus`: `auto`, or GPU ordinals separated by commas.
fn parse_gpus(list: &str) -> Result<tune::Gpus, TuneError> {
    if list == "auto" {
        return Ok(tune::Gpus::Auto);
    }
    list.split(',')
        .map(|n| n.trim().parse::<u32>())
        .collect::<Result<Vec<_>, _>>()
        .map(tune::Gpus::List)
        .map_err(|_| {
            TuneError::Invalid(format!(
                "--gpus: expected `auto` or GPU numbers such as `0,1`, found {list:?}"
            ))
        })
}

/// Runs a sweep: under the dashboard when asked for and stdout and stdin are a terminal,
/// with the progress line otherwise. Either way `tune watch` can look in while it runs.
fn sweep(tuner: Tuner, tui: bool) -> Result<tune::TuneResult, TuneError> {
    let hub = Hub::default();
    let tuner = tuner.handle_signals(true).observer(hub.serving_observer());
    if !(tui && std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        return tuner.progress(true).fit_spec();
    }
    let updates = hub.subscribe();
    let stop = tuner.stop_handle();
    let coordinator = std::thread::Builder::new()
        .name("tune-coordinator".into())
        .spawn(move || {
            let result = tuner.fit_spec();
            if let Err(e) = &result {
                // The dashboard hears why the sweep ended, then is left to the user.
                hub.publish(Update::Log {
                    at: now_ms(),
                    text: format!("error: {e}"),
                });
                hub.publish(Update::Ended {
                    at: now_ms(),
                    interrupted: true,
                });
            }
            drop(hub);
            result
        })
        .map_err(|e| TuneError::io("starting the coordinator", e))?;
    let shown = tune::dashboard::run(updates, Some(stop.clone()));
    if stop.is_stopped() {
        println!("tune: stopping: running trials are ended and left for `tune resume`");
    }
    if let Err(e) = shown {
        // Without a dashboard the sweep goes on; say why and wait for it.
        eprintln!("tune: the dashboard failed ({e}); the sweep goes on without it");
    }
    coordinator.join().unwrap_or_else(|_| {
        Err(TuneError::Io {
            context: "the coordinator".into(),
            source: std::io::Error::other("it panicked"),
        })
    })
}

/// `tune watch`: the running sweep's own board over its socket, else the stored one; for an
/// experiment in a database, the stored one read again every second, or four times as long
/// as a read takes (its coordinator and workers may be anywhere).
fn watch(named: &Named) -> Result<ExitCode, TuneError> {
    if let Named::Folder(dir) = named {
        if let Some(rx) = live_updates(dir) {
            return show_board(rx);
        }
    }
    let first = stored_board(named)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let _ = tx.send(Update::Board(Box::new(first)));
    if let Named::InDatabase { .. } = named {
        let named = named.clone();
        std::thread::spawn(move || {
            let mut failing = false;
            let mut pause = Duration::from_secs(1);
            loop {
                std::thread::sleep(pause);
                let read_at = Instant::now();
                let read = stored_board(&named);
                // A big sweep takes a while to read: the database is not kept busy with it.
                pause = (read_at.elapsed() * 4).max(Duration::from_secs(1));
                let update = match read {
                    Ok(board) => {
                        failing = false;
                        Update::Board(Box::new(board))
                    }
                    Err(_) if failing => continue,
                    Err(e) => {
                        failing = true;
                        Update::Log {
                            at: now_ms(),
                            text: format!("cannot read the sweep now: {e}"),
                        }
                    }
                };
                if tx.send(update).is_err() {
                    return; // the watcher left
                }
            }
        });
    }
    show_board(rx)
}

/// The board of the experiment as stored now, with who serves it (a sweep in a database).
fn stored_board(named: &Named) -> Result<Board, TuneError> {
    let (place, stored) = stored_of(named)?;
    let serving = match named {
        Named::InDatabase { url, name } => tune::remote::serving(url, name)?,
        Named::Folder(_) => Default::default(),
    };
    Ok(tune::dashboard::board_of_stored(&place, &stored, &serving))
}

/// `tune check`: the findings on stdout, one a line; exit 1 where there are any.
fn check(named: &Named) -> Result<ExitCode, TuneError> {
    let (place, stored) = stored_of(named)?;
    let decided = match named {
        Named::InDatabase { url, name } => tune::remote::decided_reports(url, name)?,
        Named::Folder(_) => Vec::new(),
    };
    let found = tune::check::check(&stored.trials, &decided);
    let results: usize = stored.trials.iter().map(|t| t.results.len()).sum();
    let mut out = std::io::stdout().lock();
    let mut say = |line: String| quiet_on_broken_pipe(writeln!(out, "{line}"));
    for finding in &found {
        say(finding.to_string())?;
    }
    let held = format!(
        "{}: {} trials, {results} results",
        place.display(),
        stored.trials.len()
    );
    if found.is_empty() {
        let remote = if decided.is_empty() {
            ""
        } else {
            ", every report answered with a decision stored"
        };
        say(format!(
            "{held}: every step stored once and in order, none lost between attempts{remote}"
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let trials: std::collections::BTreeSet<_> = found.iter().map(|f| f.trial).collect();
    say(format!(
        "{held}: {} problems in {} trials: results were lost (docs/durability.md says what \
         tune keeps)",
        found.len(),
        trials.len()
    ))?;
    Ok(ExitCode::from(1))
}

/// What is stored of the experiment, with how to name where it is kept.
fn stored_of(named: &Named) -> Result<(PathBuf, tune::store::StoredExperiment), TuneError> {
    match named {
        Named::Folder(dir) => Ok((dir.clone(), Experiment::open(dir)?.stored)),
        Named::InDatabase { url, name } => Ok((
            tune::store::postgres_location(url, name),
            Experiment::read_postgres(url, name)?,
        )),
    }
}

/// The live board of a sweep running from folder `dir`, if one answers.
fn live_updates(dir: &Path) -> Option<std::sync::mpsc::Receiver<Update>> {
    tune::dashboard::connect(dir).and_then(|rx| {
        // A stale address (a sweep killed with -9) answers nothing or refuses.
        let first = rx.recv_timeout(Duration::from_secs(3)).ok()?;
        let (tx, chained) = std::sync::mpsc::channel();
        let _ = tx.send(first);
        std::thread::spawn(move || {
            for u in rx {
                if tx.send(u).is_err() {
                    return;
                }
            }
        });
        Some(chained)
    })
}

/// Shows the board `updates` feed: the dashboard, or one frame when stdout is not a terminal.
fn show_board(updates: std::sync::mpsc::Receiver<Update>) -> Result<ExitCode, TuneError> {
    if !std::io::stdout().is_terminal() {
        // Not a terminal: print one frame of what the dashboard shows now.
        let mut board = Board::default();
        while let Ok(u) = updates.recv_timeout(Duration::from_millis(200)) {
            board.apply(u);
        }
        let mut app = App::new(board, false);
        let frame = tune::dashboard::render_to_string(&mut app, 120, 40, now_ms());
        quiet_on_broken_pipe(std::io::stdout().lock().write_all(frame.as_bytes()))?;
        return Ok(ExitCode::SUCCESS);
    }
    tune::dashboard::run(updates, None).map_err(|e| TuneError::io("the dashboard", e))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the best trial; exit 1 when no trial completed.
fn finish(result: &tune::TuneResult) -> ExitCode {
    let (metric, dir) = (result.metric(), result.dir());
    if let Some(reason) = result.stopped() {
        // A resume would meet a target or a no-improvement limit again at once.
        let flag = match reason {
            tune::StopReason::TimeBudget { .. } => "",
            _ => " --no-stop",
        };
        println!(
            "stopped early: {reason}; `tune resume {}{flag}` goes on from here",
            dir.display()
        );
    }
    if let Some(t) = result.first_failure() {
        println!(
            "{} trial(s) failed; trial {}: {}",
            result.failed(),
            t.id,
            t.error.as_deref().unwrap_or("?")
        );
    }
    match result.best() {
        Some(best) => {
            let params: Vec<String> = best
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!(
                "best trial {}: {metric} = {} ({})",
                best.id,
                value_text(best.value(metric).unwrap_or(f64::NAN)),
                params.join(", ")
            );
            let named = match result.store() {
                StoreLocation::Folder => dir.display().to_string(),
                // The URL itself comes from --store or TUNE_STORE again (it may hold a password).
                StoreLocation::Postgres(_) => format!("{} --store URL", result.name()),
            };
            println!("results: tune status {named} | tune export {named} --format json");
            ExitCode::SUCCESS
        }
        // Stopped early (as asked) before any trial completed: nothing went wrong.
        None if result.stopped().is_some() => {
            println!(
                "no trial completed yet; see `tune status {}`",
                dir.display()
            );
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "error: no trial completed; see `tune status {}`",
                dir.display()
            );
            ExitCode::from(1)
        }
    }
}

/// A reader that stopped reading (`tune status | head`) is not an error.
fn quiet_on_broken_pipe(written: std::io::Result<()>) -> Result<(), TuneError> {
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(TuneError::Io {
            context: "writing to stdout".into(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// What `status` and `export` read: the experiment's store, or, while a sweep runs there and
/// holds the store, what that sweep's coordinator holds (as `tune watch` sees it).
struct SweepState {
    dir: PathBuf,
    spec: ExperimentSpec,
    /// The budget in force.
    samples: u64,
    /// When the experiment was created (Unix ms; 0 where unknown: a running folder sweep).
    created_at: u64,
    trials: Vec<tune::Trial>,
    live: bool,
    /// Its coordinator and remote workers (a sweep in a database).
    serving: tune::remote::Serving,
}

impl SweepState {
    fn load(named: &Named) -> Result<SweepState, TuneError> {
        let Named::Folder(dir) = named else {
            // A database is read as it is, running sweep or not.
            let (place, stored) = stored_of(named)?;
            let serving = match named {
                Named::InDatabase { url, name } => tune::remote::serving(url, name)?,
                Named::Folder(_) => Default::default(),
            };
            return Ok(SweepState {
                dir: place,
                spec: stored.meta.spec,
                samples: stored.meta.samples,
                created_at: stored.meta.created_at,
                trials: stored.trials,
                live: serving.coordinator.is_some(),
                serving,
            });
        };
        // A running sweep is asked first: its store stays locked while it runs.
        if let Some(board) = tune::dashboard::live_board(dir) {
            let file = dir.join(tune::experiment::SPEC_FILE);
            let text = std::fs::read_to_string(&file)
                .map_err(|e| TuneError::io(format!("reading {}", file.display()), e))?;
            return Ok(SweepState {
                dir: dir.to_path_buf(),
                spec: ExperimentSpec::from_toml(&text, &file)?,
                samples: board.header.total,
                created_at: 0,
                trials: board.trials.iter().map(|v| v.to_trial()).collect(),
                live: true,
                serving: Default::default(),
            });
        }
        let exp = Experiment::open(dir)?;
        Ok(SweepState {
            dir: exp.dir,
            spec: exp.stored.meta.spec,
            samples: exp.stored.meta.samples,
            created_at: exp.stored.meta.created_at,
            trials: exp.stored.trials,
            live: false,
            serving: Default::default(),
        })
    }

    /// What a damaged store still holds, with a word on stderr about what it lost.
    fn salvage(dir: &Path) -> Result<SweepState, TuneError> {
        let (stored, held) = Experiment::salvage(dir)?;
        let results: usize = stored.trials.iter().map(|t| t.results.len()).sum();
        eprintln!(
            "tune: salvaged {} trials and {results} results from {}{}",
            stored.trials.len(),
            dir.join(tune::experiment::DB_DIR).display(),
            held.map(|h| format!("; at its last sync it held {h}"))
                .unwrap_or_default()
        );
        Ok(SweepState {
            dir: dir.to_path_buf(),
            spec: stored.meta.spec,
            samples: stored.meta.samples,
            created_at: stored.meta.created_at,
            trials: stored.trials,
            live: false,
            serving: Default::default(),
        })
    }
}

/// The sweep's state; `gpus`: this machine's, shown when it has any (NVML).
fn print_status(
    out: &mut impl Write,
    sweep: &SweepState,
    gpus: &[tune_trials::GpuUse],
) -> std::io::Result<()> {
    let spec = &sweep.spec;
    let trials = &sweep.trials;
    let count = |s: Status| trials.iter().filter(|t| t.status == s).count();
    let running = if sweep.live { ", running now" } else { "" };
    writeln!(
        out,
        "experiment: {} ({}{running})",
        spec.name,
        sweep.dir.display()
    )?;
    writeln!(
        out,
        "trials: {} of {} created | {} completed, {} stopped, {} failed, {} unfinished",
        trials.len(),
        sweep.samples,
        count(Status::Completed),
        count(Status::Stopped),
        count(Status::Failed),
        trials.iter().filter(|t| !t.status.is_finished()).count(),
    )?;
    writeln!(
        out,
        "steps trained: {} (each report's advance over its trial's previous one, summed)",
        tune::steps_trained(trials)
    )?;
    let objectives = spec.objectives();
    let front: Option<Vec<u64>> = (objectives.len() > 1).then(|| {
        tune::pareto_front(trials, &objectives, &spec.constraints)
            .iter()
            .map(|t| t.id)
            .collect()
    });
    match &front {
        Some(ids) if ids.is_empty() => writeln!(out, "pareto front: none yet"),
        Some(ids) => {
            let goals: Vec<String> = objectives
                .iter()
                .map(|o| format!("{} ({})", o.metric, o.mode.as_str()))
                .collect();
            let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            writeln!(
                out,
                "pareto front of {}: {} trial{} ({}; marked * below)",
                goals.join(", "),
                ids.len(),
                if ids.len() == 1 { "" } else { "s" },
                ids.join(", ")
            )
        }
        None => match best_trial(trials, &spec.metric, spec.mode, &spec.constraints) {
            Some(b) => writeln!(
                out,
                "best: trial {} with {} = {}",
                b.id,
                spec.metric,
                value_text(b.value(&spec.metric).unwrap_or(f64::NAN))
            ),
            None if !spec.constraints.is_empty() && count(Status::Completed) > 0 => writeln!(
                out,
                "best: none within [constraints] yet ({} completed outside them)",
                count(Status::Completed)
            ),
            None => writeln!(out, "best: none yet"),
        },
    }?;
    if let Some(coordinator) = &sweep.serving.coordinator {
        writeln!(out, "coordinator: {coordinator}")?;
    }
    if !gpus.is_empty() {
        writeln!(out, "gpus of this machine:")?;
    }
    for g in gpus {
        writeln!(out, "  {}", g.line())?;
    }
    if !sweep.serving.workers.is_empty() {
        writeln!(out, "workers:")?;
    }
    for w in &sweep.serving.workers {
        let running: Vec<String> = w.running.iter().map(|t| t.to_string()).collect();
        writeln!(
            out,
            // A fused worker's slot holds a pack: what it tells the coordinator is its trials.
            "  {} {} trial{} at once, serving {}, last heartbeat {:.1} s ago{}, running trials: {}",
            w.id,
            w.slots,
            if w.slots == 1 { "" } else { "s" },
            w.serving.as_deref().unwrap_or("every sweep"),
            now_ms().saturating_sub(w.heartbeat_at) as f64 / 1000.0,
            if w.live {
                ""
            } else {
                " (lease run out: gone?)"
            },
            if running.is_empty() {
                "none".into()
            } else {
                running.join(", ")
            }
        )?;
        for g in &w.gpus {
            writeln!(out, "    {}", g.line())?;
        }
    }
    let columns: String = objectives
        .iter()
        .map(|o| format!(" {:>14}", o.metric))
        .collect();
    writeln!(
        out,
        "{:>5}  {:<10}{columns} {:>6}  params",
        "id", "status", "step"
    )?;
    for t in trials {
        let value: String = objectives
            .iter()
            .map(|o| {
                let v = t.value(&o.metric).map(value_short);
                format!(" {:>14}", v.unwrap_or_else(|| "-".into()))
            })
            .collect();
        let on_front = front.as_ref().is_some_and(|f| f.contains(&t.id));
        let step = t
            .last_step()
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into());
        // Six significant digits, as a person reads them; the export keeps every digit.
        let params: Vec<String> = t
            .params
            .iter()
            .map(|(k, v)| match v {
                tune::Value::Float(x) => format!("{k}={}", value_short(*x)),
                other => format!("{k}={other}"),
            })
            .collect();
        let mut line = format!(
            "{:>5}{} {:<10}{value} {:>6}  {}",
            t.id,
            if on_front { "*" } else { " " },
            t.status.as_str(),
            step,
            params.join(" ")
        );
        if let Some(e) = &t.error {
            line += &format!("  [{}]", e.lines().next().unwrap_or(""));
        }
        if !t.results.is_empty() && !spec.constraints.feasible(t) {
            line += &format!(
                "  [outside constraints by {}]",
                value_short(spec.constraints.violation(t))
            );
        }
        if let Some(at) = t.device.as_deref().filter(|_| !t.status.is_finished()) {
            line += &format!("  @{at}");
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}
