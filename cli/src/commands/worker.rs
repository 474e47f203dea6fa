//! `tune worker URL`: trials of sweeps kept in PostgreSQL, run on this machine.

use std::process::ExitCode;

use tune::TuneError;

use crate::args::WorkerArgs;

pub fn worker(args: WorkerArgs) -> Result<ExitCode, TuneError> {
    let WorkerArgs {
        url,
        experiment,
        slots,
        gpus,
        trials_per_gpu,
        dir,
        lease,
        wait,
        address,
    } = args;
    let flag = |e: tune_search::FieldError| TuneError::Invalid(format!("{}: {}", e.key, e.message));
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
    if let Some(address) = address {
        worker = worker.address(address);
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
    if done.checkpoints_written + done.checkpoints_read > 0 {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        eprintln!(
            "tune worker: wrote {} trial folders ({:.1} MB) to the database, read {} ({:.1} MB)",
            done.checkpoints_written,
            mb(done.checkpoint_bytes_written),
            done.checkpoints_read,
            mb(done.checkpoint_bytes_read)
        );
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
