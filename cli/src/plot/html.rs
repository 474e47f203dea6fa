//! The report: every chart inlined as SVG, then a table of every trial, in one HTML file that
//! references nothing outside itself.

use std::fmt::Write as _;
use std::path::Path;

use tune_search::{value_brief, Status};

use super::charts;
use super::{Chart, PlotError, PlotInput};
use tune::rfc3339;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;\
color:#222}h1{margin-bottom:.2em}.summary{color:#555}.note{background:#fff6e0;\
border-left:4px solid #f0a020;padding:.5em 1em}svg{max-width:100%;height:auto}\
table{border-collapse:collapse;font-size:13px;width:100%}th,td{border-bottom:1px solid #ddd;\
padding:3px 8px;text-align:right}th{background:#f4f4f4;position:sticky;top:0}\
td.s{text-align:left}.completed{color:#1f77b4}.stopped{color:#e0700e}.failed{color:#d62728}";

/// Writes the report to `path` (through a temporary file beside it, so that a failure never
/// leaves half a report). `progress(done, total, what)` is called before each part.
///
/// ```no_run
/// # fn input() -> tune_cli::plot::PlotInput<'static> { unimplemented!() }
/// let input = input();
/// tune_cli::plot::write_html(&input, std::path::Path::new("report.html"), &mut |done, total, what| {
///     eprintln!("{done}/{total} {what}");
/// })?;
/// # Ok::<(), tune_cli::plot::PlotError>(())
/// ```
pub fn write_html(
    input: &PlotInput,
    path: &Path,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<(), PlotError> {
    let html = report(input, progress)?;
    let io = |source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, html).map_err(io)?;
    std::fs::rename(&partial, path).map_err(io)
}

fn report(
    input: &PlotInput,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<String, PlotError> {
    if input.reported().next().is_none() {
        return Err(input.nothing_reported());
    }
    let charts: Vec<Chart> = Chart::ALL
        .into_iter()
        .filter(|c| !c.only_where_it_applies(input))
        .collect();
    let total = charts.len() + 1;
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tune: {name}</title><style>{STYLE}</style></head><body>\n<h1>{name}</h1>\n\
         <p class=\"summary\">{summary}</p>\n",
        name = escape(input.name),
        summary = escape(&summary(input)),
    );
    if input.running {
        let _ = writeln!(
            html,
            "<p class=\"note\">The sweep was still running when this report was made: it shows \
             the {} trials it had then.</p>",
            input.trials.len()
        );
    }
    for (i, chart) in charts.iter().enumerate() {
        progress(i, total, chart.title());
        let _ = writeln!(html, "<h2>{}</h2>", chart.title());
        if *chart == Chart::Importance {
            html.push_str(
                "<p class=\"summary\">PED-ANOVA (Watanabe et al., IJCAI 2023) as Optuna's \
                 <code>PedAnovaImportanceEvaluator</code> and optuna-dashboard compute it: how \
                 differently each parameter is spread among the top 10 % of completed trials \
                 than among all of them. Stopped and failed trials are left out.</p>\n",
            );
        }
        match chart.not_applicable(input) {
            Some(reason) => {
                let _ = writeln!(
                    html,
                    "<p class=\"note\">Not drawn: {}.</p>",
                    escape(&reason)
                );
            }
            None => {
                html.push_str(&charts::svg(*chart, input)?);
                html.push('\n');
            }
        }
    }
    progress(charts.len(), total, "trial table");
    trial_table(&mut html, input);
    html.push_str("</body></html>\n");
    Ok(html)
}

/// One line: the metric, the counts by status, the best trial, the scheduler.
fn summary(input: &PlotInput) -> String {
    let count = |s: Status| input.trials.iter().filter(|t| t.status == s).count();
    let mode = match input.mode {
        tune_search::Mode::Min => "minimised",
        tune_search::Mode::Max => "maximised",
    };
    let best = tune::best_trial(input.trials, input.metric, input.mode, input.constraints)
        .and_then(|t| Some((t.id, t.value(input.metric)?)))
        .map(|(id, v)| format!("; best: trial {id}, {} = {}", input.metric, value_brief(v)))
        .unwrap_or_default();
    format!(
        "{} {mode}; {} trials: {} completed, {} stopped early, {} failed, {} not finished; \
         scheduler {}{best}",
        input.metric,
        input.trials.len(),
        count(Status::Completed),
        count(Status::Stopped),
        count(Status::Failed),
        count(Status::Pending) + count(Status::Running) + count(Status::Paused),
        input.scheduler,
    )
}

fn trial_table(html: &mut String, input: &PlotInput) {
    let names: Vec<&str> = input
        .space
        .params()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    html.push_str("<h2>Trials</h2>\n<table id=\"trials\"><thead><tr><th>trial</th>");
    let _ = write!(
        html,
        "<th>status</th><th>{}</th><th>last step</th><th>attempts</th>",
        escape(input.metric)
    );
    for n in &names {
        let _ = write!(html, "<th>{}</th>", escape(n));
    }
    html.push_str("<th>finished</th></tr></thead><tbody>\n");
    for t in input.trials {
        let _ = write!(
            html,
            "<tr data-trial=\"{id}\"><td>{id}</td><td class=\"s {status}\">{status}</td>\
             <td>{value}</td><td>{step}</td><td>{attempts}</td>",
            id = t.id,
            status = t.status.as_str(),
            value = t.value(input.metric).map(value_brief).unwrap_or_default(),
            step = t.last_step().map(|s| s.to_string()).unwrap_or_default(),
            attempts = t.attempts,
        );
        for n in &names {
            let v = t.params.get(n).map(|v| v.to_string()).unwrap_or_default();
            let _ = write!(html, "<td>{}</td>", escape(&v));
        }
        let finished = t.finished_at.map(rfc3339).unwrap_or_default();
        let _ = writeln!(html, "<td class=\"s\">{finished}</td></tr>");
    }
    html.push_str("</tbody></table>\n");
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
