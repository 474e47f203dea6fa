//! `tune plot`: a sweep's charts as one self-contained HTML report, or one chart as PNG/SVG.
//!
//! The charts are Optuna's visualisations (`optuna.visualization`) plus what a scheduler adds:
//! the optimisation history with the best so far, every trial's learning curve with the
//! scheduler's rungs marked, parallel coordinates, a slice per parameter, parameter
//! importances (PED-ANOVA, as optuna-dashboard computes them: [`param_importances`]) and, for
//! population-based training, the lineage of exploits. Drawing is `plotters`: SVG inlined into
//! the HTML (it opens offline: no script, stylesheet or font is fetched), PNG rendered with a
//! font compiled into the binary, so nothing depends on the machine's fonts.

mod charts;
mod html;
mod importance;

use std::path::{Path, PathBuf};

use tune_search::{Mode, Space, Status};

use tune::Trial;

pub use html::write_html;
pub use importance::param_importances;

/// What the charts are drawn from: a sweep as its store holds it.
///
/// ```
/// let space = tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let input = tune_cli::plot::PlotInput {
///     name: "demo",
///     metric: "loss",
///     mode: tune::Mode::Min,
///     constraints: &Default::default(),
///     space: &space,
///     trials: &[],
///     scheduler: "fifo",
///     rungs: vec![],
///     running: false,
///     objectives: &[],
/// };
/// // Nothing reported yet: a clear error, not an empty picture.
/// let err = tune_cli::plot::render(tune_cli::plot::Chart::History, &input, tune_cli::plot::ImageFormat::Svg)
///     .unwrap_err();
/// assert_eq!(err.to_string(), "no trial of demo has reported `loss` yet: there is nothing to plot");
/// ```
#[derive(Debug, Clone)]
pub struct PlotInput<'a> {
    /// The sweep's name, for titles.
    pub name: &'a str,
    pub metric: &'a str,
    pub mode: Mode,
    /// `[constraints]`: the best trial is the best within them.
    pub constraints: &'a tune::Constraints,
    pub space: &'a Space,
    pub trials: &'a [Trial],
    /// The scheduler's `kind` (`asha`, `pbt`, ...).
    pub scheduler: &'a str,
    /// The steps at which the scheduler compares trials
    /// ([`tune_schedulers::Scheduler::rungs`]), marked on the learning curves.
    pub rungs: Vec<u64>,
    /// The sweep was still running when it was read: the report says so.
    pub running: bool,
    /// With several objectives, every one (`metric` and `mode` are the first's); else empty.
    pub objectives: &'a [tune::Goal],
}

impl PlotInput<'_> {
    /// Trials with at least one report of the metric.
    fn reported(&self) -> impl Iterator<Item = &Trial> {
        self.trials.iter().filter(|t| {
            t.results
                .iter()
                .any(|r| r.metrics.contains_key(self.metric))
        })
    }

    /// Completed trials with their (last reported) value: what history, slices, parallel
    /// coordinates and importances rank, as Optuna ranks COMPLETE trials.
    fn completed(&self) -> Vec<(&Trial, f64)> {
        self.trials
            .iter()
            .filter(|t| t.status == Status::Completed)
            .filter_map(|t| Some((t, t.value(self.metric).filter(|v| v.is_finite())?)))
            .collect()
    }

    /// Trials the scheduler stopped, at their last value (a lower fidelity).
    fn stopped(&self) -> Vec<(&Trial, f64)> {
        self.trials
            .iter()
            .filter(|t| t.status == Status::Stopped)
            .filter_map(|t| Some((t, t.value(self.metric).filter(|v| v.is_finite())?)))
            .collect()
    }

    fn is_pbt(&self) -> bool {
        self.scheduler == "pbt"
    }

    fn nothing_reported(&self) -> PlotError {
        PlotError::NothingReported {
            name: self.name.to_string(),
            metric: self.metric.to_string(),
        }
    }
}

/// One chart of the report (`tune plot --chart`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Chart {
    /// Each completed trial's value by trial number, with the best so far.
    History,
    /// Every trial's metric by step, with the scheduler's rungs.
    Curves,
    /// One axis per parameter and one for the value, a line per completed trial.
    Parallel,
    /// Value against each parameter, one panel each.
    Slice,
    /// PED-ANOVA importance of each parameter.
    Importance,
    /// Population-based training: which trial copied which, at which step.
    Lineage,
    /// Several objectives: the first two's values, the Pareto front marked.
    Pareto,
}

impl Chart {
    /// Every chart, in the report's order.
    pub const ALL: [Chart; 7] = [
        Chart::History,
        Chart::Curves,
        Chart::Pareto,
        Chart::Parallel,
        Chart::Slice,
        Chart::Importance,
        Chart::Lineage,
    ];

    /// Whether the report (and `tune plot --format` into a folder) leaves the chart out
    /// without a word where it does not apply: lineage without PBT, the front with one
    /// objective.
    pub fn only_where_it_applies(self, input: &PlotInput) -> bool {
        match self {
            Chart::Lineage => !input.is_pbt(),
            Chart::Pareto => input.objectives.len() < 2,
            _ => false,
        }
    }

    /// Its name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Chart::History => "history",
            Chart::Curves => "curves",
            Chart::Parallel => "parallel",
            Chart::Slice => "slice",
            Chart::Importance => "importance",
            Chart::Lineage => "lineage",
            Chart::Pareto => "pareto",
        }
    }

    /// Its heading in the report.
    pub fn title(self) -> &'static str {
        match self {
            Chart::History => "Optimisation history",
            Chart::Curves => "Learning curves",
            Chart::Parallel => "Parallel coordinates",
            Chart::Slice => "Slices",
            Chart::Importance => "Parameter importances",
            Chart::Lineage => "PBT lineage",
            Chart::Pareto => "Pareto front",
        }
    }

    /// Why this chart cannot be drawn for `input`, if it cannot.
    pub fn not_applicable(self, input: &PlotInput) -> Option<String> {
        let completed = input.completed().len();
        match self {
            Chart::History | Chart::Curves => None,
            Chart::Parallel | Chart::Slice if completed == 0 => Some(format!(
                "no trial has completed yet ({} stopped early, at lower fidelity)",
                input.stopped().len()
            )),
            Chart::Parallel | Chart::Slice => None,
            Chart::Importance if completed < 2 => Some(format!(
                "importances need at least 2 completed trials, found {completed}"
            )),
            Chart::Importance => None,
            Chart::Lineage if !input.is_pbt() => Some(format!(
                "lineage is drawn for population-based training; this sweep's scheduler is {}",
                input.scheduler
            )),
            Chart::Lineage => None,
            Chart::Pareto if input.objectives.len() < 2 => {
                Some("the Pareto front is drawn for several objectives; this sweep has one".into())
            }
            Chart::Pareto if completed == 0 => Some("no trial has completed yet".into()),
            Chart::Pareto => None,
        }
    }
}

/// An image format for one chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Svg,
}

impl ImageFormat {
    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Svg => "svg",
        }
    }
}

/// Why a chart or report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("no trial of {name} has reported `{metric}` yet: there is nothing to plot")]
    NothingReported { name: String, metric: String },
    #[error("the {chart} chart does not apply: {reason}")]
    NotApplicable { chart: &'static str, reason: String },
    #[error("drawing the {chart} chart: {message}")]
    Draw {
        chart: &'static str,
        message: String,
    },
    #[error("writing {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One chart, encoded: SVG text or PNG bytes.
///
/// ```
/// use tune::{Params, Status, Trial, TrialResult, Value};
/// let space = tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let mut t = Trial::new(0, Params::default());
/// t.params.insert("x", Value::Float(0.25));
/// t.status = Status::Completed;
/// t.results.push(TrialResult { step: 1, seq: 0, attempt: 1, metrics: [("loss".into(), 0.5)].into() });
/// let input = tune_cli::plot::PlotInput {
///     name: "demo", metric: "loss", mode: tune::Mode::Min, constraints: &Default::default(), space: &space,
///     trials: &[t], scheduler: "fifo", rungs: vec![], running: false, objectives: &[],
/// };
/// let svg = tune_cli::plot::render(tune_cli::plot::Chart::History, &input, tune_cli::plot::ImageFormat::Svg)
///     .unwrap();
/// assert!(String::from_utf8(svg).unwrap().starts_with("<svg"));
/// ```
pub fn render(chart: Chart, input: &PlotInput, format: ImageFormat) -> Result<Vec<u8>, PlotError> {
    if input.reported().next().is_none() {
        return Err(input.nothing_reported());
    }
    if let Some(reason) = chart.not_applicable(input) {
        return Err(PlotError::NotApplicable {
            chart: chart.name(),
            reason,
        });
    }
    match format {
        ImageFormat::Svg => charts::svg(chart, input).map(String::into_bytes),
        ImageFormat::Png => charts::png(chart, input),
    }
}

/// Writes one chart to `path`.
pub fn write_image(
    chart: Chart,
    input: &PlotInput,
    format: ImageFormat,
    path: &Path,
) -> Result<(), PlotError> {
    let bytes = render(chart, input, format)?;
    std::fs::write(path, bytes).map_err(|source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    })
}
