//! The command line's arguments (clap's derive): every command's, and the types they share.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use tune::experiment::StoreLocation;
use tune::TuneError;

/// Hyperparameter tuning: search, early stopping, durable trials, resume.
#[derive(Parser)]
#[command(name = "tune", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The commands; each has its own module, which takes its arguments.
#[derive(Subcommand)]
pub enum Command {
    /// Start a new sweep described by a TOML file.
    Run(RunArgs),
    /// Continue an interrupted (or finished) sweep: completed trials are kept, unfinished ones re-run.
    Resume(ResumeArgs),
    /// Run trials of sweeps kept in a PostgreSQL database, for their coordinators (which run
    /// anywhere): start one per machine, by hand, in a Slurm job array or a Kubernetes Job.
    Worker(WorkerArgs),
    /// Counts, best trial and a per-trial table.
    Status(StatusArgs),
    /// Whether the stored sweep kept everything: each trial's steps stored once and in order,
    /// none lost between attempts, no decided report of a remote worker left unstored. Exit 1
    /// (with every problem listed) where something was lost.
    Check(CheckArgs),
    /// The dashboard of an experiment: live while its sweep runs (in another process), or as
    /// it ended. Read-only.
    Watch(WatchArgs),
    /// A live web view of every sweep under a folder, with control: prints the URL (with its
    /// token) to open; listens on loopback unless told otherwise.
    Serve(ServeArgs),
    /// Every trial, to stdout (`--format tensorboard`: into the folder OUT).
    Export(ExportArgs),
    /// Charts of a sweep: one self-contained HTML report (history, learning curves with the
    /// scheduler's rungs, parallel coordinates, slices, importances, PBT lineage, every trial),
    /// or PNG/SVG images.
    Plot(PlotArgs),
}

/// `tune run`'s arguments.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The sweep: metric, budget, search, scheduler, resources, objective, space.
    pub spec: PathBuf,
    /// Experiment folder (default: runs/<name>).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Plain progress line instead of the dashboard.
    #[arg(long)]
    pub no_tui: bool,
    /// Overrides the spec's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// An earlier sweep's folder (with --store: its name in that database): its completed
    /// trials are what the algorithm (tpe, gp, nsga2) learns from first, when its metric and
    /// parameters are this sweep's.
    #[arg(long, value_name = "EXPERIMENT")]
    pub warm_start: Option<PathBuf>,
    /// Trials run at once on this machine (default: the spec's [resources]); with --store,
    /// 0 runs the coordinator alone and `tune worker` processes run the trials.
    #[arg(long)]
    pub slots: Option<usize>,
    #[command(flatten)]
    pub store: StoreArg,
    /// Also serve the web view (`tune serve`) of the folder the sweep is in, and print its URL.
    #[arg(long)]
    pub serve: bool,
    /// With --serve: where it listens.
    #[arg(
        long,
        value_name = "ADDR:PORT",
        default_value = "127.0.0.1:0",
        requires = "serve"
    )]
    pub listen: std::net::SocketAddr,
}

/// `tune resume`'s arguments.
#[derive(clap::Args)]
pub struct ResumeArgs {
    /// The experiment folder (with --store: the experiment's name).
    pub experiment: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
    /// With --store: where this machine keeps the trial folders (default: runs/<name>).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Raise the budget to this many samples.
    #[arg(long)]
    pub samples: Option<u64>,
    /// Raise ASHA's or HyperBand's max_t to this step: the trials completed at the old one
    /// go on from their checkpoints where the scheduler keeps them.
    #[arg(long)]
    pub max_t: Option<u64>,
    /// Go on past `[stop]`'s target, time budget and no-improvement limit (for this
    /// resume; trials failing in a row still stop it).
    #[arg(long)]
    pub no_stop: bool,
    /// Plain progress line instead of the dashboard.
    #[arg(long)]
    pub no_tui: bool,
    /// Trials run at once on this machine (0 with --store: only workers run them).
    #[arg(long)]
    pub slots: Option<usize>,
}

/// `tune worker`'s arguments.
#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The database (postgres://user:password@host/db); default: TUNE_STORE.
    #[arg(env = "TUNE_STORE", hide_env_values = true)]
    pub url: String,
    /// Serve only this experiment (the spec's `name`), and exit once its sweep is finished;
    /// default: every experiment in the database, until stopped. Only a worker serving
    /// one sweep fuses its built-in trials (`[resources] fuse`): each slot then holds
    /// that many, trained as one model.
    #[arg(long)]
    pub experiment: Option<String>,
    /// Trials run at once on CPU (default: one per core).
    #[arg(long)]
    pub slots: Option<usize>,
    /// GPUs to use (`cuda` build): `auto` or a list such as `0,1`.
    #[arg(long)]
    pub gpus: Option<String>,
    /// Trials sharing each GPU.
    #[arg(long, default_value_t = 1)]
    pub trials_per_gpu: u32,
    /// Where trial folders go: DIR/<experiment>/trials/<id>.
    #[arg(long, default_value = "runs")]
    pub dir: PathBuf,
    /// Seconds a claimed trial stays this worker's without a heartbeat; a worker cut off
    /// from the database for longer stops its trials (they run again elsewhere).
    #[arg(long, default_value_t = 15.0)]
    pub lease: f64,
    /// With --experiment: seconds to wait for the experiment to be created (workers
    /// started before their coordinator, as one batch job may); 0 fails at once.
    #[arg(long, default_value_t = 0.0)]
    pub wait: f64,
    /// The address other machines reach this one at, where it runs node 0 of a trial on
    /// several machines (`[resources] nodes_per_trial`): the others' processes meet its
    /// processes there (MASTER_ADDR). Default: this machine's host name.
    #[arg(long)]
    pub address: Option<String>,
}

/// `tune status`'s arguments.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The experiment folder (with --store: the experiment's name).
    pub experiment: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
}

/// `tune check`'s arguments.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The experiment folder (with --store: the experiment's name).
    pub experiment: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
}

/// `tune watch`'s arguments.
#[derive(clap::Args)]
pub struct WatchArgs {
    /// The experiment folder (with --store: the experiment's name).
    pub experiment: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
}

/// `tune serve`'s arguments.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A folder of experiment folders (`runs`), or one experiment folder.
    #[arg(default_value = "runs")]
    pub dir: PathBuf,
    /// Where to listen (port 0: any free one). Anything but loopback is reachable from other
    /// machines: the token is still required, and a warning says so.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8686")]
    pub listen: std::net::SocketAddr,
    /// Serve every experiment in this PostgreSQL database instead (controls reach their
    /// coordinators wherever they run); the URL file goes in DIR if it is a folder.
    #[command(flatten)]
    pub store: StoreArg,
}

/// `tune export`'s arguments.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// The experiment folder (with --store: the experiment's name).
    pub experiment: PathBuf,
    /// With `--format tensorboard`: the folder to write (`tensorboard --logdir OUT`).
    #[arg(value_name = "OUT")]
    pub folder: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArg,
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    /// Export whatever a damaged store still holds (and say on stderr what is missing).
    #[arg(long)]
    pub salvage: bool,
    /// Send the sweep to this MLflow tracking server instead (what it lacks of it: a
    /// sweep logged live, or half logged, gets nothing twice).
    #[arg(long, value_name = "URL", conflicts_with_all = ["format", "folder"])]
    pub to_mlflow: Option<String>,
}

/// `tune plot`'s arguments.
#[derive(clap::Args)]
pub struct PlotArgs {
    /// The experiment folder (with --store: the experiment's name).
    pub experiment: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
    /// Where to write: report.html; with --format png|svg, the image (with --chart) or a
    /// folder that gets one image per chart.
    #[arg(long)]
    pub out: PathBuf,
    /// html, png or svg (default: from --out's extension, else html).
    #[arg(long, value_enum)]
    pub format: Option<PlotFormat>,
    /// One chart only (png and svg).
    #[arg(long, value_enum)]
    pub chart: Option<tune_cli::plot::Chart>,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
pub enum PlotFormat {
    Html,
    Png,
    Svg,
}

/// Where the experiment's records are: `--store`, else `TUNE_STORE`, else the folder.
#[derive(clap::Args)]
pub struct StoreArg {
    /// A PostgreSQL database holding the experiment (postgres://user:password@host/db),
    /// shared by many experiments and machines; default: `tune.db/` in the experiment folder.
    #[arg(
        long = "store",
        env = "TUNE_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub url: Option<String>,
}

impl StoreArg {
    pub fn location(&self) -> Result<StoreLocation, TuneError> {
        StoreLocation::parse(self.url.as_deref())
    }
}

/// An experiment as the command line names it: a folder, or a name in a database.
#[derive(Clone)]
pub enum Named {
    Folder(PathBuf),
    InDatabase { url: String, name: String },
}

impl Named {
    pub fn new(experiment: PathBuf, store: &StoreArg) -> Result<Named, TuneError> {
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
pub enum Format {
    Json,
    Csv,
    /// Optuna's JournalStorage log: `optuna-dashboard sweep.log`, `optuna.load_study`.
    OptunaJournal,
    /// TensorBoard event files, a run per trial, with the HParams tab's summaries, into OUT.
    Tensorboard,
}
