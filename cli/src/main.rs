//! The `tune` command line: run, resume, inspect and export sweeps. This file only
//! dispatches: each command is a module of its own, its arguments in `args`.

mod args;
mod commands;
mod error;

use std::process::ExitCode;

use clap::Parser;
use tune::{StoreError, TuneError};

use args::{Cli, Command};
use commands::{check, export, plot, resume, run, serve, status, watch, worker};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let worker = matches!(cli.command, Command::Worker(_));
    let ran = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Resume(args) => resume::resume(args),
        Command::Worker(args) => worker::worker(args),
        Command::Status(args) => status::status(args),
        Command::Check(args) => check::check(args),
        Command::Watch(args) => watch::watch(args),
        Command::Serve(args) => serve::serve(args),
        Command::Export(args) => export::export(args),
        Command::Plot(args) => plot::plot(args),
    };
    match ran {
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
            eprintln!("error: {}", error::cli_message(&e));
            ExitCode::from(if e.is_input() { 2 } else { 1 })
        }
    }
}
