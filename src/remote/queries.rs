//! What is read of remote workers straight from the database: who serves an experiment,
//! which worker ran each attempt, which reports were answered.

use std::collections::BTreeMap;

use super::{Serving, WorkerInfo};
use crate::store::{pg_store, StorePlace, StoredExperiment};

/// The workers of experiment `$1` (registered and not yet exited), as [`worker_from_row`]
/// reads them.
pub(crate) const WORKERS_SQL: &str = "SELECT w.id, w.slots, e.name,
        extract(epoch FROM now() - w.heartbeat_at)::float8,
        w.heartbeat_at > now() - make_interval(secs => w.lease_s),
        coalesce((SELECT array_agg(a.trial ORDER BY a.trial) FROM tune_attempts a
                  WHERE a.state = 'running' AND a.experiment = $1
                    AND (a.worker = w.id OR EXISTS (
                        SELECT 1 FROM tune_gang_members m
                        WHERE m.experiment = $1 AND m.trial = a.trial
                          AND m.attempt = a.attempt AND m.worker = w.id
                          AND m.state IN ('assigned', 'running')))), '{}'),
        w.gpus
     FROM tune_workers w LEFT JOIN tune_experiments e ON e.id = w.experiment
     WHERE w.experiment IS NULL OR w.experiment = $1 ORDER BY w.id";

pub(crate) fn worker_from_row(r: &postgres::Row) -> WorkerInfo {
    let age_s: f64 = r.get(3);
    WorkerInfo {
        id: r.get(0),
        slots: r.get::<_, i32>(1).max(0) as u32,
        serving: r.get(2),
        heartbeat_at: crate::trial::now_ms().saturating_sub((age_s.max(0.0) * 1000.0) as u64),
        live: r.get(4),
        running: r
            .get::<_, Vec<i64>>(5)
            .into_iter()
            .map(|t| t as tune_search::TrialId)
            .collect(),
        // Written by the worker itself as JSON; a worker of another version may write what
        // this one cannot read, which shows as no GPUs rather than an error.
        gpus: r
            .get::<_, Option<String>>(6)
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
    }
}

/// One connection to the database holding experiment `name`, for reading it: its records,
/// who serves it, which worker ran each attempt, which reports were answered. A command that
/// reads several of these opens one connection (and checks the schema once), not one each.
///
/// ```no_run
/// let mut db = tune::remote::ExperimentReader::connect("postgres://tune@db/tune", "mnist-lr")?;
/// let stored = db.stored()?;
/// let serving = db.serving()?;
/// println!("{} trials; coordinator: {:?}", stored.trials.len(), serving.coordinator);
/// for w in &serving.workers {
///     println!("{} ({} slots): {:?}", w.id, w.slots, w.running);
/// }
/// # Ok::<(), tune::StoreError>(())
/// ```
pub struct ExperimentReader {
    client: postgres::Client,
    experiment: i64,
    location: StorePlace,
}

/// The experiments kept in the PostgreSQL database at `url`, by name (`tune serve --store`).
pub fn experiment_names(url: &str) -> Result<Vec<String>, crate::StoreError> {
    let location = crate::store::StorePlace::Postgres {
        url: crate::store::redact_url(url),
        name: None,
    };
    let mut client = pg_store::connect(url, &location)?;
    let rows = client
        .query(
            "SELECT name FROM tune_experiments WHERE meta IS NOT NULL ORDER BY name",
            &[],
        )
        .map_err(|e| pg_store::db_error(&location, e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

impl ExperimentReader {
    /// Connects to `url` (migrating its schema if it lags), refusing a database without an
    /// experiment `name` ([`crate::StoreError::NoMeta`]).
    pub fn connect(url: &str, name: &str) -> Result<ExperimentReader, crate::StoreError> {
        let location = crate::store::postgres_location(url, name);
        let mut client = pg_store::connect(url, &location)?;
        let experiment = pg_store::existing(&mut client, name, &location)?;
        Ok(ExperimentReader {
            client,
            experiment,
            location,
        })
    }

    /// Everything stored: the experiment record and every trial with its results.
    pub fn stored(&mut self) -> Result<StoredExperiment, crate::StoreError> {
        pg_store::read(&mut self.client, self.experiment, &self.location)
    }

    /// Asks the experiment's coordinator, wherever it runs, to carry out `control` (`from`
    /// names who asks, for its log) through the database, and waits for its answer.
    /// [`crate::ControlError::NotRunning`] where no coordinator runs it; a control its
    /// coordinator has not taken within the wait is withdrawn (never carried out later).
    pub fn ask(
        &mut self,
        control: &crate::Control,
        from: &str,
    ) -> Result<Result<String, crate::ControlError>, crate::StoreError> {
        let location = &self.location;
        let err = |e| pg_store::db_error(location, e);
        if pg_store::coordinator(&mut self.client, self.experiment)
            .map_err(err)?
            .is_none()
        {
            return Ok(Err(crate::ControlError::NotRunning));
        }
        let text = serde_json::to_string(control).map_err(|source| crate::StoreError::Encode {
            what: "the control".into(),
            source,
        })?;
        let id: i64 = self
            .client
            .query_one(
                "INSERT INTO tune_controls (experiment, control, asked_by) VALUES ($1, $2, $3)
                 RETURNING id",
                &[&self.experiment, &text, &from],
            )
            .map_err(err)?
            .get(0);
        self.client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[
                    &super::coordinator_channel(self.experiment),
                    &super::NOTE_CONTROL,
                ],
            )
            .map_err(err)?;
        let asked = std::time::Instant::now();
        let wait = crate::control::ANSWER_WAIT;
        loop {
            let row = self
                .client
                .query_one(
                    "SELECT taken_at IS NOT NULL, ok, answer FROM tune_controls WHERE id = $1",
                    &[&id],
                )
                .map_err(err)?;
            let (taken, ok, answer): (bool, Option<bool>, Option<String>) =
                (row.get(0), row.get(1), row.get(2));
            match (ok, answer) {
                (Some(true), Some(a)) => return Ok(Ok(a)),
                (Some(false), Some(a)) => return Ok(Err(crate::ControlError::Refused(a))),
                _ => {}
            }
            // Taken: the coordinator answers between two rounds of its loop; not taken in
            // time: withdrawn, unless it is taken at this very moment.
            if asked.elapsed() > wait && !taken {
                let withdrawn = self
                    .client
                    .execute(
                        "UPDATE tune_controls SET ok = false, answer = 'withdrawn: not taken in time'
                         WHERE id = $1 AND taken_at IS NULL",
                        &[&id],
                    )
                    .map_err(err)?;
                if withdrawn == 1 {
                    return Ok(Err(crate::ControlError::NoAnswer(wait)));
                }
            }
            if asked.elapsed() > wait * 4 {
                return Ok(Err(crate::ControlError::NoAnswer(wait * 4)));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Who serves the experiment now (one snapshot).
    pub fn serving(&mut self) -> Result<Serving, crate::StoreError> {
        let location = &self.location;
        let err = |e| pg_store::db_error(location, e);
        let mut snapshot = self
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(err)?;
        let coordinator = pg_store::coordinator(&mut snapshot, self.experiment).map_err(err)?;
        let workers = snapshot
            .query(WORKERS_SQL, &[&self.experiment])
            .map_err(err)?
            .iter()
            .map(worker_from_row)
            .collect();
        snapshot.commit().map_err(err)?;
        Ok(Serving {
            coordinator,
            workers,
        })
    }

    /// The worker (`host:pid`) of each attempt a worker claimed, by (trial, attempt): what
    /// `tune export` gives each result.
    pub fn attempt_workers(
        &mut self,
    ) -> Result<BTreeMap<(tune_search::TrialId, u32), String>, crate::StoreError> {
        let rows = self
            .client
            .query(
                "SELECT trial, attempt, worker FROM tune_attempts
                 WHERE experiment = $1 AND worker IS NOT NULL",
                &[&self.experiment],
            )
            .map_err(|e| pg_store::db_error(&self.location, e))?;
        Ok(rows
            .iter()
            .map(|r| {
                let key = (
                    r.get::<_, i64>(0) as tune_search::TrialId,
                    r.get::<_, i32>(1) as u32,
                );
                (key, r.get(2))
            })
            .collect())
    }

    /// Every report remote workers sent that the coordinator answered, in the order sent:
    /// what `tune check` holds against the stored results.
    pub fn decided_reports(
        &mut self,
    ) -> Result<Vec<crate::check::DecidedReport>, crate::StoreError> {
        let rows = self
            .client
            .query(
                "SELECT trial, attempt, step, heard FROM tune_reports
                 WHERE experiment = $1 AND heard IS NOT NULL AND step IS NOT NULL ORDER BY id",
                &[&self.experiment],
            )
            .map_err(|e| pg_store::db_error(&self.location, e))?;
        Ok(rows
            .iter()
            .map(|r| crate::check::DecidedReport {
                trial: r.get::<_, i64>(0) as tune_search::TrialId,
                attempt: r.get::<_, i32>(1) as u32,
                step: r.get::<_, i64>(2) as u64,
                heard: r.get(3),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use crate::experiment::StoreLocation;
    use crate::store::test_server;
    use crate::{Control, ControlError, Mode, Space, Status, Tuner};

    use super::ExperimentReader;

    #[test]
    fn a_control_asked_through_the_database_is_carried_out_by_the_coordinator() {
        let url = test_server::fresh_database();
        let dir = tempfile::tempdir().unwrap();
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let answers = Arc::new(Mutex::new(Vec::new()));
        let (heard, asking_url) = (answers.clone(), url.clone());
        let result = Tuner::new(space)
            .name("steered")
            .metric("loss", Mode::Min)
            .samples(2)
            .local_slots(1)
            .store(StoreLocation::Postgres(url.clone()))
            .dir(dir.path().join("steered"))
            .fit(move |ctx| {
                ctx.report(1, [("loss", 1.0)])?;
                if ctx.id() == 0 {
                    let mut reader = ExperimentReader::connect(&asking_url, "steered").unwrap();
                    for control in [
                        Control::AddSamples { count: 1 },
                        Control::StopTrial { trial: 0 },
                    ] {
                        let answer = reader.ask(&control, "another machine").unwrap();
                        heard.lock().unwrap().push(answer);
                    }
                }
                ctx.report(2, [("loss", 0.5)])?;
                Ok(())
            })
            .unwrap();
        assert_eq!(
            *answers.lock().unwrap(),
            [
                Ok("added 1 samples: the sweep creates 3 trials in all".to_string()),
                Ok("stopped trial 0 (running until now)".to_string()),
            ]
        );
        let trials = result.trials().unwrap();
        assert_eq!(trials.len(), 3);
        assert_eq!(trials[0].status, Status::Stopped);
        assert!(trials[1..].iter().all(|t| t.status == Status::Completed));
        // No coordinator now: refused at once, and nothing is left for a later one to do.
        let mut reader = ExperimentReader::connect(&url, "steered").unwrap();
        assert_eq!(
            reader.ask(&Control::StopSweep, "late").unwrap(),
            Err(ControlError::NotRunning)
        );
        let open: i64 = reader
            .client
            .query_one(
                "SELECT count(*) FROM tune_controls WHERE answer IS NULL",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(open, 0);
    }

    /// The control that ends the sweep (it stops its last trial) is answered all the same: the
    /// coordinator ends right after it answers, before the database's next look.
    #[test]
    fn the_control_that_ends_the_sweep_is_answered() {
        let url = test_server::fresh_database();
        let dir = tempfile::tempdir().unwrap();
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let asking = Arc::new(Mutex::new(None));
        let (asker, asking_url) = (asking.clone(), url.clone());
        let result = Tuner::new(space)
            .name("last")
            .metric("loss", Mode::Min)
            .samples(1)
            .local_slots(1)
            .store(StoreLocation::Postgres(url.clone()))
            .dir(dir.path().join("last"))
            .fit(move |ctx| {
                ctx.report(1, [("loss", 1.0)])?;
                let url = asking_url.clone();
                // Not joined here: the trial ends as soon as it hears it was stopped.
                *asker.lock().unwrap() = Some(std::thread::spawn(move || {
                    let mut reader = ExperimentReader::connect(&url, "last").unwrap();
                    reader
                        .ask(&Control::StopTrial { trial: 0 }, "another machine")
                        .unwrap()
                }));
                for step in 2.. {
                    ctx.report(step, [("loss", 1.0)])?;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Ok(())
            })
            .unwrap();
        let answer = asking.lock().unwrap().take().unwrap().join().unwrap();
        assert_eq!(
            answer,
            Ok("stopped trial 0 (running until now)".to_string())
        );
        assert_eq!(result.trials().unwrap()[0].status, Status::Stopped);
    }
}
