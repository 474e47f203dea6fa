//! `tune check`: whether a stored sweep kept every result.

use std::io::Write;
use std::process::ExitCode;

use tune::TuneError;

use crate::args::{CheckArgs, Named};
use crate::commands::state::{quiet_on_broken_pipe, stored_of, Stored};

pub fn check(args: CheckArgs) -> Result<ExitCode, TuneError> {
    findings(&Named::new(args.experiment, &args.store)?)
}

/// `tune check`: the findings on stdout, one a line; exit 1 where there are any.
fn findings(named: &Named) -> Result<ExitCode, TuneError> {
    let Stored { place, stored, db } = stored_of(named)?;
    let decided = match db {
        Some(mut db) => db.decided_reports()?,
        None => Vec::new(),
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
        place,
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
