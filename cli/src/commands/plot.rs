//! `tune plot`: the HTML report, one image, or a folder of images.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use tune::TuneError;

use crate::args::{Named, PlotArgs, PlotFormat};
use crate::commands::state::SweepState;
use tune_cli::plot::{Chart, ImageFormat, PlotError, PlotInput};

pub fn plot(args: PlotArgs) -> Result<ExitCode, TuneError> {
    let named = Named::new(args.experiment, &args.store)?;
    draw(&named, &args.out, args.format, args.chart)
}

/// The report, one image, or a folder of images of `named`.
fn draw(
    named: &Named,
    out: &Path,
    format: Option<PlotFormat>,
    chart: Option<Chart>,
) -> Result<ExitCode, TuneError> {
    let image = image_format(out, format, chart)?;
    let sweep = SweepState::load(named)?;
    let rungs = sweep.spec.make_scheduler().rungs();
    let input = tune_cli::plot::PlotInput {
        name: &sweep.spec.name,
        metric: &sweep.spec.metric,
        mode: sweep.spec.mode,
        constraints: &sweep.spec.constraints,
        space: &sweep.spec.space,
        trials: &sweep.trials,
        scheduler: sweep.spec.scheduler.name(),
        rungs,
        running: sweep.live,
        objectives: &sweep.spec.objectives,
    };
    if sweep.live {
        eprintln!(
            "tune: {} is still running: plotting the {} trials it has now",
            sweep.place,
            sweep.trials.len()
        );
    }
    let plotted = |e: PlotError| match e {
        PlotError::NothingReported { .. } | PlotError::NotApplicable { .. } => {
            TuneError::Invalid(format!("{}: {e}", sweep.place))
        }
        PlotError::Io { path, source } => {
            TuneError::io(format!("writing {}", path.display()), source)
        }
        PlotError::Draw { .. } => TuneError::io(
            format!("plotting {}", sweep.place),
            std::io::Error::other(e.to_string()),
        ),
    };
    match (image, chart) {
        (None, _) => {
            let show = std::io::stderr().is_terminal();
            tune_cli::plot::write_html(&input, out, &mut |done, total, what| {
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
            tune_cli::plot::write_image(chart, &input, format, out).map_err(plotted)?;
            eprintln!("tune: wrote {}", out.display());
        }
        (Some(format), None) => write_folder(&input, format, out, plotted)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The image format `--out` and `--format` ask for (`None`: the HTML report), or why they
/// cannot be drawn.
fn image_format(
    out: &Path,
    format: Option<PlotFormat>,
    chart: Option<Chart>,
) -> Result<Option<ImageFormat>, TuneError> {
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
    Ok(match format {
        PlotFormat::Html if chart.is_some() => {
            return Err(TuneError::Invalid(
                "--chart draws one image: add --format png or svg (the HTML report holds every \
                 chart)"
                    .into(),
            ))
        }
        PlotFormat::Html => None,
        PlotFormat::Png => Some(ImageFormat::Png),
        PlotFormat::Svg => Some(ImageFormat::Svg),
    })
}

/// Every chart that applies to `input`, one image each in folder `out`; what does not apply
/// is said, not an error.
fn write_folder(
    input: &PlotInput,
    format: ImageFormat,
    out: &Path,
    plotted: impl Fn(PlotError) -> TuneError,
) -> Result<(), TuneError> {
    std::fs::create_dir_all(out)
        .map_err(|e| TuneError::io(format!("creating {}", out.display()), e))?;
    let mut written = 0;
    for chart in Chart::ALL {
        if let Some(reason) = chart.not_applicable(input) {
            if !chart.only_where_it_applies(input) {
                eprintln!("tune: no {} chart: {reason}", chart.name());
            }
            continue;
        }
        let path = out.join(format!("{}.{}", chart.name(), format.extension()));
        tune_cli::plot::write_image(chart, input, format, &path).map_err(&plotted)?;
        written += 1;
    }
    eprintln!("tune: wrote {written} charts into {}", out.display());
    Ok(())
}
