//! Each chart drawn with `plotters` on any backend: SVG for the report and `--format svg`,
//! an RGB buffer encoded as PNG for `--format png`.

use std::sync::Once;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use tune_search::{value_brief, Domain, Status, TrialId, Value};

use super::{param_importances, Chart, PlotError, PlotInput};
use tune::Trial;

/// DejaVu Sans cut down to ASCII and a few symbols (11 KB; cli/assets/fonts/README.md says how),
/// so that PNGs draw the same text on every machine, with or without fonts installed.
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-tune.ttf");
const FAMILY: &str = "sans-serif";

const WIDTH: u32 = 960;
const HEIGHT: u32 = 540;

const COMPLETED: RGBColor = RGBColor(31, 119, 180);
const STOPPED: RGBColor = RGBColor(255, 127, 14);
const FAILED: RGBColor = RGBColor(214, 39, 40);
const RUNNING: RGBColor = RGBColor(44, 160, 44);
const BEST: RGBColor = RGBColor(214, 39, 40);
const GREY: RGBColor = RGBColor(170, 170, 170);
const INK: RGBColor = RGBColor(40, 40, 40);

type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A chart of values over f64 x, on `Y`.
type ValueChart<'a, DB, Y> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>;

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and checked by the tests: it parses.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// The chart's size in pixels: panels and bars add height.
fn size(chart: Chart, input: &PlotInput) -> (u32, u32) {
    match chart {
        Chart::Slice => {
            let rows = slice_params(input).len().div_ceil(SLICE_COLUMNS).max(1) as u32;
            (WIDTH, 50 + 300 * rows)
        }
        Chart::Importance => (WIDTH, 110 + 34 * input.space.params().len().max(1) as u32),
        _ => (WIDTH, HEIGHT),
    }
}

pub(super) fn svg(chart: Chart, input: &PlotInput) -> Result<String, PlotError> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size(chart, input)).into_drawing_area();
        draw(chart, input, &root)?;
        root.present().map_err(|e| failed(chart, e))?;
    }
    Ok(out)
}

pub(super) fn png(chart: Chart, input: &PlotInput) -> Result<Vec<u8>, PlotError> {
    register_font();
    let (w, h) = size(chart, input);
    let mut pixels = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
        draw(chart, input, &root)?;
        root.present().map_err(|e| failed(chart, e))?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Best);
    encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(&pixels))
        .map_err(|e| PlotError::Draw {
            chart: chart.name(),
            message: format!("encoding PNG: {e}"),
        })?;
    Ok(out)
}

fn failed<E: std::error::Error + Send + Sync>(
    chart: Chart,
    e: DrawingAreaErrorKind<E>,
) -> PlotError {
    PlotError::Draw {
        chart: chart.name(),
        message: e.to_string(),
    }
}

fn draw<DB: DrawingBackend>(
    chart: Chart,
    input: &PlotInput,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(|e| failed(chart, e))?;
    match chart {
        Chart::History => history(input, root),
        Chart::Curves => curves(input, root),
        Chart::Parallel => parallel(input, root),
        Chart::Slice => slices(input, root),
        Chart::Importance => importances(input, root),
        Chart::Lineage => lineage(input, root),
        Chart::Pareto => pareto(input, root),
    }
    .map_err(|e| failed(chart, e))
}

/// A tick on an axis of whole numbers (trials, steps): none between them.
fn whole(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        String::new()
    }
}

/// `[lo, hi]` widened by 5 % (or by 1 where it is a single value).
fn padded(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.05
    } else {
        lo.abs().max(1.0) * 0.5
    };
    (lo - pad, hi + pad)
}

/// A colour from dark blue (0) through teal to yellow (1), viridis-like.
fn gradient(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] = [
        (68, 1, 84),
        (59, 82, 139),
        (33, 145, 140),
        (94, 201, 98),
        (253, 231, 37),
    ];
    let x = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn status_colour(status: Status) -> RGBColor {
    match status {
        Status::Completed => COMPLETED,
        Status::Stopped => STOPPED,
        Status::Failed => FAILED,
        Status::Running | Status::Paused | Status::Pending => RUNNING,
    }
}

fn caption(input: &PlotInput, what: &str) -> String {
    format!("{}: {what}", input.name)
}

fn legend_line(colour: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
}

fn legend_dot(colour: RGBColor) -> impl Fn((i32, i32)) -> Circle<(i32, i32), i32> {
    move |(x, y)| Circle::new((x + 9, y), 4, colour.filled())
}

/// The axis of a chart's values: logarithmic where every value is positive and they span
/// two decades or more (a few bad early trials would flatten the rest on a linear one).
enum ValueAxis {
    Linear(f64, f64),
    Log(f64, f64),
}

impl ValueAxis {
    fn of(values: impl IntoIterator<Item = f64>) -> ValueAxis {
        let values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        let (lo, hi) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                (l.min(v), h.max(v))
            });
        if lo > 0.0 && hi / lo >= 100.0 {
            let pad = (hi / lo).powf(0.03);
            ValueAxis::Log(lo / pad, hi * pad)
        } else {
            let (lo, hi) = padded(values);
            ValueAxis::Linear(lo, hi)
        }
    }

    fn label(&self, metric: &str) -> String {
        match self {
            ValueAxis::Linear(..) => metric.to_string(),
            ValueAxis::Log(..) => format!("{metric} (log scale)"),
        }
    }

    fn bounds(&self) -> (f64, f64) {
        match *self {
            ValueAxis::Linear(lo, hi) | ValueAxis::Log(lo, hi) => (lo, hi),
        }
    }
}

/// Calls `$draw` with the y range `$axis` says: a plain range, or a logarithmic one.
macro_rules! on_value_axis {
    ($axis:expr, $draw:expr) => {
        match $axis {
            ValueAxis::Linear(lo, hi) => $draw(lo..hi),
            ValueAxis::Log(lo, hi) => $draw((lo..hi).log_scale()),
        }
    };
}

fn history<DB: DrawingBackend>(input: &PlotInput, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let completed = input.completed();
    let stopped = input.stopped();
    let axis = ValueAxis::of(completed.iter().chain(&stopped).map(|(_, v)| *v));
    on_value_axis!(axis, |y| history_on(input, root, &axis, y))
}

fn history_on<DB: DrawingBackend, Y>(
    input: &PlotInput,
    root: &DrawingArea<DB, Shift>,
    axis: &ValueAxis,
    y: Y,
) -> Drawn<DB>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let completed = input.completed();
    let stopped = input.stopped();
    let last_id = input.trials.iter().map(|t| t.id).max().unwrap_or(0) as f64;
    let x = ("trial", -0.5..last_id + 0.5);
    let sign = if input.mode == tune_search::Mode::Min {
        1.0
    } else {
        -1.0
    };
    let shown_completed = at_most(&completed, MAX_POINTS, |(_, v)| sign * v);
    let shown_stopped = at_most(&stopped, MAX_POINTS, |(_, v)| sign * v);
    let title = shown_of(
        "optimisation history",
        shown_completed.len() + shown_stopped.len(),
        completed.len() + stopped.len(),
    );
    let mut chart = value_chart(input, root, &title, x, axis, y)?;
    if !stopped.is_empty() {
        chart
            .draw_series(
                (shown_stopped.iter())
                    .map(|(t, v)| Circle::new((t.id as f64, *v), 3, STOPPED.mix(0.7).filled())),
            )?
            .label(format!("stopped early, last value ({})", stopped.len()))
            .legend(legend_dot(STOPPED));
    }
    chart
        .draw_series(
            (shown_completed.iter())
                .map(|(t, v)| Circle::new((t.id as f64, *v), 4, COMPLETED.filled())),
        )?
        .label(format!("completed ({})", completed.len()))
        .legend(legend_dot(COMPLETED));
    // The best so far, by trial number, as a step line.
    let mut by_id = completed.clone();
    by_id.sort_by_key(|(t, _)| t.id);
    let mut best: Option<f64> = None;
    let mut steps = Vec::new();
    for (t, v) in by_id {
        let x = t.id as f64;
        if let Some(b) = best {
            steps.push((x, b));
        }
        if best.is_none_or(|b| input.mode.better(v, b)) {
            best = Some(v);
        }
        steps.push((x, best.unwrap_or(v)));
    }
    if let (Some(b), Some(_)) = (best, steps.last()) {
        steps.push((last_id + 0.5, b));
    }
    chart
        .draw_series(LineSeries::new(steps, BEST.stroke_width(2)))?
        .label("best so far")
        .legend(legend_line(BEST));
    draw_legend(&mut chart)
}

/// The first two objectives' values of every completed trial, the Pareto front (within the
/// constraints, as `tune status` finds it) marked and joined.
fn pareto<DB: DrawingBackend>(input: &PlotInput, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let (a, b) = (&input.objectives[0], &input.objectives[1]);
    let completed: Vec<&Trial> = (input.trials.iter())
        .filter(|t| t.status == Status::Completed)
        .collect();
    let point = |t: &Trial| Some((t.value(&a.metric)?, t.value(&b.metric)?));
    let points: Vec<(f64, f64)> = completed.iter().filter_map(|t| point(t)).collect();
    let front_trials: Vec<Trial> = completed.iter().map(|t| (*t).clone()).collect();
    let mut front: Vec<(f64, f64)> =
        tune::pareto_front(&front_trials, input.objectives, input.constraints)
            .iter()
            .filter_map(|t| point(t))
            .collect();
    front.sort_by(|p, q| p.0.total_cmp(&q.0));
    let x = padded(points.iter().map(|p| p.0));
    let y = padded(points.iter().map(|p| p.1));
    let more = if input.objectives.len() > 2 {
        format!(" (first two of {} objectives)", input.objectives.len())
    } else {
        String::new()
    };
    let mut chart = ChartBuilder::on(root)
        .caption(caption(input, &format!("Pareto front{more}")), (FAMILY, 22))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(72)
        .build_cartesian_2d(x.0..x.1, y.0..y.1)?;
    chart
        .configure_mesh()
        .x_desc(format!("{} ({})", a.metric, a.mode.as_str()))
        .y_desc(format!("{} ({})", b.metric, b.mode.as_str()))
        .x_label_formatter(&|v| value_brief(*v))
        .y_label_formatter(&|v| value_brief(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    chart
        .draw_series(
            points
                .iter()
                .map(|&p| Circle::new(p, 3, COMPLETED.mix(0.6).filled())),
        )?
        .label(format!("completed ({})", points.len()))
        .legend(legend_dot(COMPLETED));
    chart.draw_series(LineSeries::new(front.clone(), BEST.stroke_width(1)))?;
    chart
        .draw_series(front.iter().map(|&p| Circle::new(p, 5, BEST.filled())))?
        .label(format!("on the front ({})", front.len()))
        .legend(legend_dot(BEST));
    draw_legend(&mut chart)
}

/// The most lines (curves, parallel coordinates) and points (history) a chart draws: past
/// them a chart of 100,000 trials would be tens of megabytes that show no more.
const MAX_LINES: usize = 2_000;
const MAX_POINTS: usize = 5_000;

/// At most `cap` of `items`, the same ones every time: the `cap / 2` best by `badness` (lower
/// is better), then every k-th of the rest, in their order. With no more than `cap`, all.
fn at_most<T: Copy>(items: &[T], cap: usize, badness: impl Fn(&T) -> f64) -> Vec<T> {
    if items.len() <= cap {
        return items.to_vec();
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| {
        badness(&items[a])
            .total_cmp(&badness(&items[b]))
            .then(a.cmp(&b))
    });
    let best = cap / 2;
    let mut keep = vec![false; items.len()];
    for &i in &order[..best] {
        keep[i] = true;
    }
    let rest: Vec<usize> = (0..items.len()).filter(|&i| !keep[i]).collect();
    let stride = rest.len().div_ceil(cap - best).max(1);
    for &i in rest.iter().step_by(stride) {
        keep[i] = true;
    }
    (0..items.len())
        .filter(|&i| keep[i])
        .map(|i| items[i])
        .collect()
}

/// A chart's title, with how many of how many it shows where it shows fewer.
fn shown_of(title: &str, shown: usize, all: usize) -> String {
    if shown < all {
        format!("{title} ({shown} of {all} trials: the best half, a spread of the rest)")
    } else {
        title.to_string()
    }
}

/// A trial with its curve ([`curve`]).
type Curve<'a> = (&'a Trial, Vec<(f64, f64)>);

/// A trial's reports of the metric, by step.
fn curve(t: &Trial, metric: &str) -> Vec<(f64, f64)> {
    t.results
        .iter()
        .filter_map(|r| Some((r.step as f64, *r.metrics.get(metric)?)))
        .filter(|(_, v)| v.is_finite())
        .collect()
}

fn curves<DB: DrawingBackend>(input: &PlotInput, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let all: Vec<&Trial> = input
        .reported()
        .filter(|t| !curve(t, input.metric).is_empty())
        .collect();
    // Running trials first among equals: they are what a live view follows.
    let sign = if input.mode == tune_search::Mode::Min {
        1.0
    } else {
        -1.0
    };
    let last = |t: &&Trial| match t.value(input.metric) {
        _ if t.status == Status::Running => f64::NEG_INFINITY,
        Some(v) if v.is_finite() => sign * v,
        _ => f64::INFINITY,
    };
    let picked = at_most(&all, MAX_LINES, last);
    let reported: Vec<(&Trial, Vec<(f64, f64)>)> = (picked.iter())
        .map(|t| (*t, curve(t, input.metric)))
        .collect();
    let title = shown_of("learning curves", reported.len(), all.len());
    let axis = ValueAxis::of(reported.iter().flat_map(|(_, c)| c.iter().map(|(_, v)| *v)));
    on_value_axis!(axis, |y| curves_on(
        input,
        root,
        (&reported, &title),
        &axis,
        y
    ))
}

fn curves_on<DB: DrawingBackend, Y>(
    input: &PlotInput,
    root: &DrawingArea<DB, Shift>,
    (reported, title): (&[Curve<'_>], &str),
    axis: &ValueAxis,
    y: Y,
) -> Drawn<DB>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let last_step = reported
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(s, _)| *s))
        .fold(1.0, f64::max);
    let first_step = reported
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(s, _)| *s))
        .fold(last_step, f64::min);
    let (lo, hi) = axis.bounds();
    let x = ("step", first_step.min(0.0)..last_step * 1.02);
    let mut chart = value_chart(input, root, title, x, axis, y)?;
    let rungs: Vec<u64> = input
        .rungs
        .iter()
        .copied()
        .filter(|&r| r as f64 <= last_step)
        .collect();
    if !rungs.is_empty() {
        let shown: Vec<String> = rungs.iter().map(u64::to_string).collect();
        chart
            .draw_series(rungs.iter().map(|&r| {
                DashedPathElement::new(vec![(r as f64, lo), (r as f64, hi)], 6, 4, GREY)
            }))?
            .label(format!("{} rungs: {}", input.scheduler, shown.join(", ")))
            .legend(legend_line(GREY));
    }
    let best =
        tune::best_trial(input.trials, input.metric, input.mode, input.constraints).map(|t| t.id);
    draw_curves(&mut chart, reported, best)?;
    status_legend(&mut chart, reported)?;
    if let Some((t, c)) = reported.iter().find(|(t, _)| Some(t.id) == best) {
        chart
            .draw_series(LineSeries::new(c.iter().copied(), BEST.stroke_width(2)))?
            .label(format!("best: trial {}", t.id))
            .legend(legend_line(BEST));
    }
    draw_legend(&mut chart)
}

/// A chart of the metric's values (`y`, on `axis`) over whole numbers `x` (its name and
/// range), as the history and the curves draw it.
fn value_chart<'a, DB: DrawingBackend, Y>(
    input: &PlotInput,
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    (x_desc, x): (&str, std::ops::Range<f64>),
    axis: &ValueAxis,
    y: Y,
) -> Result<ValueChart<'a, DB, Y::CoordDescType>, DrawingAreaErrorKind<DB::ErrorType>>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(caption(input, title), (FAMILY, 22))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(axis.label(input.metric))
        .x_label_formatter(&whole)
        .y_label_formatter(&|v| value_brief(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    Ok(chart)
}

/// The series' labels, top right.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Drawn<DB> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(GREY)
        .label_font((FAMILY, 13))
        .draw()
}

/// Every reported trial's curve but the `best` one's, coloured by status; a cross where the
/// scheduler stopped one.
fn draw_curves<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut ValueChart<'a, DB, Y>,
    reported: &[(&Trial, Vec<(f64, f64)>)],
    best: Option<TrialId>,
) -> Drawn<DB> {
    // Stopped trials first and completed over them, so that what ran to the end shows.
    let mut order: Vec<&(&Trial, Vec<(f64, f64)>)> = reported.iter().collect();
    order.sort_by_key(|(t, _)| match t.status {
        Status::Stopped | Status::Failed => 0,
        Status::Completed => 1,
        _ => 2,
    });
    for (t, c) in &order {
        if Some(t.id) == best {
            continue;
        }
        let colour = status_colour(t.status);
        chart.draw_series(LineSeries::new(
            c.iter().copied(),
            colour.mix(0.45).stroke_width(1),
        ))?;
        if t.status == Status::Stopped {
            if let Some(&end) = c.last() {
                chart.draw_series(std::iter::once(Cross::new(end, 3, STOPPED.stroke_width(1))))?;
            }
        }
    }
    Ok(())
}

/// A legend line per status that some reported trial has, with their count.
fn status_legend<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut ValueChart<'a, DB, Y>,
    reported: &[(&Trial, Vec<(f64, f64)>)],
) -> Drawn<DB> {
    let count = |status: Status| reported.iter().filter(|(t, _)| t.status == status).count();
    let legend = [
        (Status::Completed, "completed", count(Status::Completed)),
        (
            Status::Stopped,
            "stopped by the scheduler (x)",
            count(Status::Stopped),
        ),
        (Status::Failed, "failed", count(Status::Failed)),
        (
            Status::Running,
            "running",
            count(Status::Running) + count(Status::Paused),
        ),
    ];
    for (status, what, n) in legend {
        if n > 0 {
            chart
                .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())?
                .label(format!("{what} ({n})"))
                .legend(legend_line(status_colour(status)));
        }
    }
    Ok(())
}

/// How a parameter's values map onto [0, 1]: a (log) range, or the listed choices.
enum Scale {
    Range { lo: f64, hi: f64, log: bool },
    Choices(Vec<Value>),
}

impl Scale {
    /// The scale of parameter `p` over the values the plotted trials have.
    fn of(domain: &Domain, values: &[f64]) -> Scale {
        match domain {
            Domain::Choice(choices) | Domain::Grid(choices) => Scale::Choices(choices.clone()),
            _ => {
                let log = matches!(
                    domain,
                    Domain::LogUniform { .. }
                        | Domain::QLogUniform { .. }
                        | Domain::Int { log: true, .. }
                );
                Scale::range(values, log)
            }
        }
    }

    /// The range the values span.
    fn range(values: &[f64], log: bool) -> Scale {
        let (lo, hi) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                (l.min(v), h.max(v))
            });
        Scale::Range { lo, hi, log }
    }

    fn position(&self, v: &Value) -> Option<f64> {
        match self {
            Scale::Choices(choices) => {
                let i = choices.iter().position(|c| c == v)?;
                Some(if choices.len() > 1 {
                    i as f64 / (choices.len() - 1) as f64
                } else {
                    0.5
                })
            }
            Scale::Range { lo, hi, log } => {
                let x = v.as_f64()?;
                let f = |x: f64| if *log { x.ln() } else { x };
                Some(if hi > lo {
                    (f(x) - f(*lo)) / (f(*hi) - f(*lo))
                } else {
                    0.5
                })
            }
        }
    }

    /// Labels along the axis: (position, text).
    fn ticks(&self) -> Vec<(f64, String)> {
        match self {
            Scale::Choices(choices) => choices
                .iter()
                .filter_map(|c| Some((self.position(c)?, c.to_string())))
                .collect(),
            Scale::Range { lo, hi, .. } if hi > lo => {
                vec![(0.0, value_brief(*lo)), (1.0, value_brief(*hi))]
            }
            Scale::Range { lo, .. } => vec![(0.5, value_brief(*lo))],
        }
    }
}

/// Parameters that some completed trial has, with their scales.
fn active_params<'a>(input: &'a PlotInput, trials: &[(&Trial, f64)]) -> Vec<(&'a str, Scale)> {
    input
        .space
        .params()
        .iter()
        .filter_map(|p| {
            let values: Vec<f64> = trials
                .iter()
                .filter_map(|(t, _)| t.params.get(&p.name)?.as_f64())
                .collect();
            let any = trials.iter().any(|(t, _)| t.params.get(&p.name).is_some());
            any.then(|| (p.name.as_str(), Scale::of(&p.domain, &values)))
        })
        .collect()
}

/// 0 for the best of `values`, 1 for the worst, by rank: a few outliers do not wash the
/// others into one colour.
fn badness(input: &PlotInput, values: &[f64]) -> impl Fn(f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mode = input.mode;
    move |v| {
        if sorted.len() < 2 {
            return 0.5;
        }
        let below = sorted.partition_point(|&x| x < v) as f64;
        let t = below / (sorted.len() - 1) as f64;
        match mode {
            tune_search::Mode::Min => t.min(1.0),
            tune_search::Mode::Max => 1.0 - t.min(1.0),
        }
    }
}

fn parallel<DB: DrawingBackend>(input: &PlotInput, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let sign = if input.mode == tune_search::Mode::Min {
        1.0
    } else {
        -1.0
    };
    let all = input.completed().len() + input.stopped().len();
    let completed = at_most(&input.completed(), MAX_LINES, |(_, v)| sign * v);
    let stopped = at_most(&input.stopped(), MAX_LINES / 2, |(_, v)| sign * v);
    let both: Vec<(&Trial, f64)> = completed.iter().chain(&stopped).copied().collect();
    let mut axes = active_params(input, &both);
    // The value axis spans the completed trials: stopped ones, at a lower fidelity, would
    // squeeze them together. Their lines end at the last parameter.
    let values: Vec<f64> = completed.iter().map(|(_, v)| *v).collect();
    axes.push((input.metric, Scale::range(&values, false)));
    let n = axes.len() as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            caption(
                input,
                &shown_of(
                    "parallel coordinates (colour: value, dark is best; grey: stopped early)",
                    completed.len() + stopped.len(),
                    all,
                ),
            ),
            (FAMILY, 20),
        )
        .margin(24)
        .build_cartesian_2d(-0.35..n - 0.65, -0.16..1.1)?;
    // A parameter a trial does not have (a condition left it out) sits below its axis.
    let line = |t: &Trial, v: f64| -> Vec<(f64, f64)> {
        axes.iter()
            .enumerate()
            .filter_map(|(i, (name, scale))| {
                let y = if i + 1 == axes.len() {
                    scale.position(&Value::Float(v))
                } else {
                    match t.params.get(name) {
                        Some(value) => scale.position(value),
                        None => Some(INACTIVE),
                    }
                };
                Some((i as f64, y?))
            })
            .collect()
    };
    chart.draw_series(stopped.iter().map(|(t, v)| {
        let mut params_only = line(t, *v);
        params_only.retain(|&(axis, _)| axis + 1.0 < n);
        PathElement::new(params_only, GREY.mix(0.35).stroke_width(1))
    }))?;
    let bad = badness(
        input,
        &completed.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
    );
    // Worst first, so that the best lie on top.
    let mut ranked = completed.clone();
    ranked.sort_by(|a, b| bad(b.1).total_cmp(&bad(a.1)));
    chart.draw_series(ranked.iter().map(|(t, v)| {
        PathElement::new(
            line(t, *v),
            gradient(bad(*v) * 0.9).mix(0.8).stroke_width(2),
        )
    }))?;
    draw_axes(&mut chart, &axes, &both)
}

/// Parallel coordinates' axes: each one's line, name and ticks, and where a parameter some
/// trial of `both` lacks sits.
fn draw_axes<'a, DB: DrawingBackend + 'a>(
    chart: &mut ValueChart<'a, DB, RangedCoordf64>,
    axes: &[(&str, Scale)],
    both: &[(&Trial, f64)],
) -> Drawn<DB> {
    let label = |anchor: HPos, vpos: VPos| {
        (FAMILY, 13)
            .into_font()
            .color(&INK)
            .pos(Pos::new(anchor, vpos))
    };
    for (i, (name, scale)) in axes.iter().enumerate() {
        let x = i as f64;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, 1.0)],
            INK.stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            name.to_string(),
            (x, 1.08),
            label(HPos::Center, VPos::Center),
        )))?;
        chart.draw_series(scale.ticks().into_iter().map(|(y, text)| {
            Text::new(format!(" {text}"), (x, y), label(HPos::Left, VPos::Center))
        }))?;
        let conditional = both.iter().any(|(t, _)| t.params.get(name).is_none());
        if i + 1 < axes.len() && conditional {
            chart.draw_series(std::iter::once(Text::new(
                " (inactive)",
                (x, INACTIVE),
                label(HPos::Left, VPos::Center),
            )))?;
        }
    }
    Ok(())
}

/// Where parallel coordinates put a parameter a trial does not have, below the axis's 0.
const INACTIVE: f64 = -0.1;

const SLICE_COLUMNS: usize = 3;

/// The parameters a slice panel is drawn for.
fn slice_params<'a>(input: &'a PlotInput) -> Vec<(&'a str, Scale)> {
    let both: Vec<(&Trial, f64)> = input
        .completed()
        .into_iter()
        .chain(input.stopped())
        .collect();
    active_params(input, &both)
}

fn slices<DB: DrawingBackend>(input: &PlotInput, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let completed = input.completed();
    let stopped = input.stopped();
    let params = slice_params(input);
    let area = root.titled(
        &caption(
            input,
            "slices (colour: trial number, dark is early; grey: stopped early)",
        ),
        (FAMILY, 20),
    )?;
    let rows = params.len().div_ceil(SLICE_COLUMNS).max(1);
    let panels = area.split_evenly((rows, SLICE_COLUMNS));
    let (lo, hi) = padded(completed.iter().chain(&stopped).map(|(_, v)| *v));
    let last_id = input.trials.iter().map(|t| t.id).max().unwrap_or(0).max(1) as f64;
    for ((name, scale), panel_area) in params.iter().zip(&panels) {
        let x_of = |v: &Value| -> Option<f64> {
            match scale {
                Scale::Choices(choices) => Some(choices.iter().position(|c| c == v)? as f64),
                Scale::Range { .. } => v.as_f64(),
            }
        };
        let points = |trials: &[(&Trial, f64)]| -> Vec<(f64, f64, TrialId)> {
            trials
                .iter()
                .filter_map(|(t, v)| Some((x_of(t.params.get(name)?)?, *v, t.id)))
                .collect()
        };
        let panel = SlicePanel {
            name,
            metric: input.metric,
            y: lo..hi,
            stopped: points(&stopped),
            completed: points(&completed),
            last_id,
        };
        match scale {
            Scale::Choices(choices) => {
                let label = |x: &f64| {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < choices.len() {
                        choices[i as usize].to_string()
                    } else {
                        String::new()
                    }
                };
                let x = -0.5..choices.len() as f64 - 0.5;
                panel.draw(panel_area, x, &label, choices.len() * 2 + 1)?
            }
            Scale::Range { lo, hi, log: true } => {
                // Widened by a tenth of the range on each side, in log space.
                let pad = (hi / lo).powf(0.05).max(1.05);
                panel.draw(
                    panel_area,
                    (lo / pad..hi * pad).log_scale(),
                    &|x| value_brief(*x),
                    5,
                )?
            }
            Scale::Range { lo, hi, log: false } => {
                let (a, b) = padded([*lo, *hi]);
                panel.draw(panel_area, a..b, &|x| value_brief(*x), 5)?
            }
        }
    }
    Ok(())
}

/// One panel of the slice chart: the value against one parameter.
struct SlicePanel<'a> {
    name: &'a str,
    metric: &'a str,
    y: std::ops::Range<f64>,
    /// (x, value, trial) of trials stopped early and of completed ones.
    stopped: Vec<(f64, f64, TrialId)>,
    completed: Vec<(f64, f64, TrialId)>,
    last_id: f64,
}

impl SlicePanel<'_> {
    /// Draws on `area` with the x axis `x` (linear, logarithmic, or choices by index).
    fn draw<DB: DrawingBackend, X>(
        &self,
        area: &DrawingArea<DB, Shift>,
        x: X,
        x_label: &dyn Fn(&f64) -> String,
        x_labels: usize,
    ) -> Drawn<DB>
    where
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(56)
            .build_cartesian_2d(x, self.y.clone())?;
        chart
            .configure_mesh()
            .x_desc(self.name)
            .y_desc(self.metric)
            .x_label_formatter(x_label)
            .y_label_formatter(&|v| value_brief(*v))
            .x_labels(x_labels)
            .y_labels(5)
            .light_line_style(RGBColor(242, 242, 242))
            .label_style((FAMILY, 11))
            .draw()?;
        chart.draw_series(
            self.stopped
                .iter()
                .map(|&(x, v, _)| Circle::new((x, v), 2, GREY.mix(0.6).filled())),
        )?;
        chart.draw_series(self.completed.iter().map(|&(x, v, id)| {
            let colour = gradient(id as f64 / self.last_id * 0.9);
            Circle::new((x, v), 4, colour.mix(0.85).filled())
        }))?;
        Ok(())
    }
}

fn importances<DB: DrawingBackend>(input: &PlotInput, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let ranked = param_importances(input.trials, input.space, input.metric, input.mode);
    let n = ranked.len().max(1) as f64;
    // Room right of the longest bar for its label.
    let x_max = (ranked.first().map_or(1.0, |(_, s)| *s) * 1.4).clamp(0.1, 1.3);
    let mut chart = ChartBuilder::on(root)
        .caption(
            caption(
                input,
                &format!(
                    "parameter importances (PED-ANOVA, top 10 % of {} completed trials)",
                    input.completed().len()
                ),
            ),
            (FAMILY, 20),
        )
        .margin(16)
        .x_label_area_size(36)
        .build_cartesian_2d(0.0..x_max, 0.0..n)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("share of importance")
        .x_label_formatter(&|v| value_brief(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    for (i, (name, share)) in ranked.iter().enumerate() {
        let y = n - i as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y - 0.8), (*share, y - 0.2)],
            COMPLETED.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("  {name}  {}", value_brief(*share)),
            (*share, y - 0.5),
            (FAMILY, 14)
                .into_font()
                .color(&INK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        )))?;
    }
    Ok(())
}

fn lineage<DB: DrawingBackend>(input: &PlotInput, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let runs: Vec<(&Trial, Vec<(f64, f64)>)> = input
        .reported()
        .map(|t| (t, curve(t, input.metric)))
        .collect();
    let last_step = runs
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(s, _)| *s))
        .fold(1.0, f64::max);
    let last_id = input.trials.iter().map(|t| t.id).max().unwrap_or(0) as f64;
    let finals: Vec<f64> = runs.iter().filter_map(|(_, c)| Some(c.last()?.1)).collect();
    let bad = badness(input, &finals);
    let mut chart = ChartBuilder::on(root)
        .caption(
            caption(
                input,
                "PBT lineage (a link ends in a dot at the trial that copied the other one there)",
            ),
            (FAMILY, 20),
        )
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..last_step * 1.02, -0.8..last_id + 0.8)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("trial")
        .x_label_formatter(&whole)
        .y_label_formatter(&whole)
        .light_line_style(RGBColor(242, 242, 242))
        .draw()?;
    for (t, c) in &runs {
        let (Some(first), Some(last)) = (c.first(), c.last()) else {
            continue;
        };
        let y = t.id as f64;
        let colour = gradient(bad(last.1) * 0.9);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(first.0, y), (last.0, y)],
            colour.stroke_width(4),
        )))?;
        // The exploits after the first entry: the first holds the params it was created with.
        for l in &t.lineage {
            let at = l.step as f64;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(at, l.from as f64), (at, y)],
                INK.mix(0.6).stroke_width(1),
            )))?;
            chart.draw_series(std::iter::once(Circle::new((at, y), 3, INK.filled())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_font_parses() {
        assert!(plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    }

    #[test]
    fn values_spanning_two_decades_get_a_log_axis_and_others_a_linear_one() {
        assert!(matches!(ValueAxis::of([0.5, 67.0]), ValueAxis::Log(..)));
        assert!(matches!(ValueAxis::of([0.5, 40.0]), ValueAxis::Linear(..)));
        // Not every value positive: log cannot show them.
        assert!(matches!(
            ValueAxis::of([-1.0, 500.0]),
            ValueAxis::Linear(..)
        ));
        assert!(matches!(ValueAxis::of([0.0, 500.0]), ValueAxis::Linear(..)));
        assert_eq!(
            ValueAxis::of([0.01, 10.0]).label("loss"),
            "loss (log scale)"
        );
    }

    #[test]
    fn the_gradient_runs_from_dark_to_light() {
        assert_eq!(gradient(0.0), RGBColor(68, 1, 84));
        assert_eq!(gradient(1.0), RGBColor(253, 231, 37));
        assert_eq!(gradient(0.5), RGBColor(33, 145, 140));
    }

    #[test]
    fn the_pareto_chart_marks_the_front_of_two_objectives() {
        let space = tune_search::Space::builder()
            .uniform("x", 0.0, 1.0)
            .build()
            .unwrap();
        let goals = [
            tune::Goal {
                metric: "loss".into(),
                mode: tune::Mode::Min,
            },
            tune::Goal {
                metric: "ms".into(),
                mode: tune::Mode::Min,
            },
        ];
        // (2, 3) and (3, 3) are dominated by (2, 2); the other three are the front.
        let values = [(1.0, 4.0), (2.0, 2.0), (3.0, 3.0), (4.0, 1.0), (2.0, 3.0)];
        let trials: Vec<Trial> = (values.iter().enumerate())
            .map(|(i, &(loss, ms))| {
                let mut t = Trial::new(i as u64, Default::default());
                t.status = Status::Completed;
                t.results.push(tune::TrialResult {
                    step: 1,
                    seq: i as u64,
                    attempt: 1,
                    metrics: [("loss".to_string(), loss), ("ms".to_string(), ms)].into(),
                });
                t
            })
            .collect();
        let mut input = PlotInput {
            name: "mo",
            metric: "loss",
            mode: tune::Mode::Min,
            constraints: &Default::default(),
            space: &space,
            trials: &trials,
            scheduler: "fifo",
            rungs: vec![],
            running: false,
            objectives: &goals,
        };
        assert_eq!(Chart::Pareto.not_applicable(&input), None);
        let svg = svg(Chart::Pareto, &input).unwrap();
        assert!(svg.contains("on the front (3)"), "{svg}");
        assert!(svg.contains("completed (5)"));
        input.objectives = &goals[..1];
        assert!(Chart::Pareto.not_applicable(&input).is_some());
        assert!(Chart::Pareto.only_where_it_applies(&input));
    }

    #[test]
    fn a_large_sweep_is_drawn_from_its_best_half_and_a_spread_of_the_rest() {
        let values: Vec<f64> = (0..10).map(|i| ((i * 7) % 10) as f64).collect();
        // Under the cap: all, in order.
        assert_eq!(at_most(&values, 10, |v| *v), values);
        // Cap 4: the best 2 (0 and 1), then every 4th of the other 8 (7 and 2), in order.
        let picked = at_most(&values, 4, |v| *v);
        assert_eq!(picked, [0.0, 7.0, 1.0, 2.0]);
        assert_eq!(
            shown_of("learning curves", 2000, 100000),
            "learning curves (2000 of 100000 trials: the best half, a spread of the rest)"
        );
    }
}
