//! `tune status`: counts, the best trial and a table of every trial.

use std::io::Write;
use std::process::ExitCode;

use tune::{best_trial, now_ms, value_short, value_text, Status, TuneError};

use crate::args::{Named, StatusArgs};
use crate::commands::state::{quiet_on_broken_pipe, SweepState};

pub fn status(args: StatusArgs) -> Result<ExitCode, TuneError> {
    let StatusArgs { experiment, store } = args;
    let sweep = SweepState::load(&Named::new(experiment, &store)?)?;
    let gpus = tune_trials::gpu_use().unwrap_or_default();
    quiet_on_broken_pipe(print_status(&mut std::io::stdout().lock(), &sweep, &gpus))?;
    Ok(ExitCode::SUCCESS)
}

/// The sweep's state; `gpus`: this machine's, shown when it has any (NVML).
fn print_status(
    out: &mut impl Write,
    sweep: &SweepState,
    gpus: &[tune_trials::GpuUse],
) -> std::io::Result<()> {
    let (spec, trials) = (&sweep.spec, &sweep.trials);
    let count = |s: Status| trials.iter().filter(|t| t.status == s).count();
    let running = if sweep.live { ", running now" } else { "" };
    writeln!(out, "experiment: {} ({}{running})", spec.name, sweep.place)?;
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
    if let Some(shape) = spec.trial_shape() {
        writeln!(out, "each trial: {shape}")?;
    }
    if spec.search.algorithm.algorithm() == tune::Algorithm::Auto {
        writeln!(out, "search: auto: {}", auto_runs(trials))?;
    }
    let front = print_best(out, sweep)?;
    print_serving(out, sweep, gpus)?;
    print_trials(out, sweep, front.as_deref())
}

/// What `auto` handed each run of trials to, in id order: "trials 0-249 by gp (why), ..".
/// Trials it did not suggest (initial points) are "given".
fn auto_runs(trials: &[tune::Trial]) -> String {
    let label = |t: &tune::Trial| match &t.suggested_by {
        Some(c) => format!("by {} ({})", c.algorithm.as_str(), c.reason),
        None => "given".to_string(),
    };
    let mut runs: Vec<(u64, u64, String)> = Vec::new();
    for t in trials {
        let l = label(t);
        match runs.last_mut() {
            Some((_, last, prev)) if *prev == l && *last + 1 == t.id => *last = t.id,
            _ => runs.push((t.id, t.id, l)),
        }
    }
    if runs.is_empty() {
        return "no trial yet".into();
    }
    runs.iter()
        .map(|(first, last, l)| {
            if first == last {
                format!("trial {first} {l}")
            } else {
                format!("trials {first}-{last} {l}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The best trial, or with several objectives the Pareto front, whose ids it returns.
fn print_best(out: &mut impl Write, sweep: &SweepState) -> std::io::Result<Option<Vec<u64>>> {
    let (spec, trials) = (&sweep.spec, &sweep.trials);
    let completed = trials
        .iter()
        .filter(|t| t.status == Status::Completed)
        .count();
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
            None if !spec.constraints.is_empty() && completed > 0 => writeln!(
                out,
                "best: none within [constraints] yet ({} completed outside them)",
                completed
            ),
            None => writeln!(out, "best: none yet"),
        },
    }?;
    Ok(front)
}

/// The coordinator, this machine's GPUs and the workers that serve the sweep.
fn print_serving(
    out: &mut impl Write,
    sweep: &SweepState,
    gpus: &[tune_trials::GpuUse],
) -> std::io::Result<()> {
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
    Ok(())
}

/// One line per trial: its values, step and params, and what is wrong with it.
fn print_trials(
    out: &mut impl Write,
    sweep: &SweepState,
    front: Option<&[u64]>,
) -> std::io::Result<()> {
    let (spec, trials) = (&sweep.spec, &sweep.trials);
    let objectives = spec.objectives();
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
        let on_front = front.is_some_and(|f| f.contains(&t.id));
        let step = t
            .last_step()
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into());
        // Six significant digits, as a person reads them; the export keeps every digit.
        let params = tune::params_digits(&t.params, 6);
        let mut line = format!(
            "{:>5}{} {:<10}{value} {:>6}  {}",
            t.id,
            if on_front { "*" } else { " " },
            t.status.as_str(),
            step,
            params
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
