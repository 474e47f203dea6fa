//! Claiming offered attempts for a worker's free slots, and starting them.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tune_search::TrialId;

use super::{serve_experiment, GangRole, Key, Running, WorkerState};
use crate::error::TuneError;
use crate::objective::command::{GangPlace, PortLease};
use crate::objective::Job;
use crate::pool::Slot;
use crate::protocol::{Outcome, WorkerMsg};
use crate::remote::checkpoints::{self, KeptFolder};
use crate::remote::{Offer, NOTE_CLAIM};

/// An attempt this worker has claimed, before it starts.
pub(super) struct ClaimedAttempt {
    key: Key,
    token: i64,
    slot: Slot,
    /// The coordinator's offer, or why it cannot be read.
    offer: Result<Offer, String>,
    trial_dir: PathBuf,
    /// Whether it goes on from the checkpoint in `trial_dir`.
    restored: bool,
    /// Its trial folder as fetched from the database, where the sweep keeps them there.
    kept: Option<KeptFolder>,
    /// Its place in a gang across machines, and (node 0) the rendezvous port it holds.
    gang: Option<(GangPlace, Option<PortLease>)>,
}

/// The claim of the oldest offer nobody holds, ours with a fresh token; `$filter` picks the
/// offers (`$5`: the experiment served, or `NULL` for every one).
macro_rules! claim_sql {
    ($filter:literal) => {
        concat!(
            "WITH c AS (
                SELECT experiment, trial, attempt FROM tune_attempts
                WHERE state = 'offered' AND ",
            $filter,
            " ORDER BY offered_at LIMIT 1 FOR UPDATE SKIP LOCKED),
             u AS (
                UPDATE tune_attempts a SET state = 'running', worker = $1, device = $2,
                    token = nextval('tune_tokens'),
                    lease_until = now() + make_interval(secs => $3)
                FROM c WHERE a.experiment = c.experiment AND a.trial = c.trial
                    AND a.attempt = c.attempt
                RETURNING a.experiment, a.trial, a.attempt, a.token, a.job)
             SELECT u.*, pg_notify('tune_e' || u.experiment, $4) FROM u"
        )
    };
}

/// Two statements, not one with `$5 IS NULL OR experiment = $5`: each gets a plan of its own,
/// the first on the offers index (experiment, offered_at). A worker serving every sweep
/// claims from the sweeps it has met and serves (`$5`: their ids), so never a trial of a sweep
/// whose trials take several slots, not even one offered a moment after it looked.
const CLAIM_OFFER_OF_ONE: &str = claim_sql!("experiment = $5");
const CLAIM_ANY_OFFER: &str = claim_sql!("experiment = ANY($5::bigint[])");

impl WorkerState<'_> {
    /// Claims offered attempts for the free slots and starts them. After a database error
    /// the attempts claimed before it still start, and the slots left are free again.
    pub(super) fn claim(&mut self, rt: &tokio::runtime::Runtime) -> Result<(), TuneError> {
        if self.only.is_none() {
            self.meet_new_sweeps()?;
        }
        if let Some(nodes) = self.gang_nodes() {
            return self.claim_gang_places(rt, nodes);
        }
        let mut slots = Vec::new();
        while let Some(slot) = self.pool.claim() {
            slots.push(slot);
        }
        let mut claimed = Vec::new();
        let mut free = slots.into_iter();
        let mut result = Ok(());
        while let Some(slot) = free.next() {
            match self.claim_offer(slot) {
                Ok(Some(attempt)) => claimed.push(attempt),
                other => {
                    self.pool.release(slot);
                    free.by_ref().for_each(|s| self.pool.release(s));
                    result = other.map(|_| ());
                }
            }
        }
        for attempt in claimed {
            self.start(rt, attempt);
        }
        result
    }

    /// One statement for `slot`: the oldest offer nobody holds, ours with a fresh token;
    /// `None` where there is none.
    fn claim_offer(&mut self, slot: Slot) -> Result<Option<ClaimedAttempt>, TuneError> {
        let lease = self.settings.lease.as_secs_f64();
        let sql = match self.only {
            Some(_) => CLAIM_OFFER_OF_ONE,
            None => CLAIM_ANY_OFFER,
        };
        let (device, only) = (slot.to_string(), self.only);
        let served: Vec<i64> = self.experiments.keys().copied().collect();
        let filter: &(dyn postgres::types::ToSql + Sync) = match &only {
            Some(_) => &only,
            None => &served,
        };
        let Some(row) = self
            .db
            .query_opt(sql, &[&self.me, &device, &lease, &NOTE_CLAIM, filter])
            .map_err(|e| self.err(e))?
        else {
            return Ok(None);
        };
        let experiment: i64 = row.get(0);
        let key: Key = (
            experiment,
            row.get::<_, i64>(1) as TrialId,
            row.get::<_, i32>(2) as u32,
        );
        let token: i64 = row.get(3);
        let job: String = row.get(4);
        self.claimed(key, token, &job, slot, None).map(Some)
    }

    /// An attempt claimed on `slot` (`gang`: a node of it), made ready to start: its sweep
    /// read, its offer read, its trial folder fetched where the sweep keeps them in the
    /// database (node 0 only: the other nodes of a gang start with this machine's folder).
    pub(super) fn claimed(
        &mut self,
        key: Key,
        token: i64,
        job: &str,
        slot: Slot,
        gang: Option<(GangPlace, Option<PortLease>)>,
    ) -> Result<ClaimedAttempt, TuneError> {
        let experiment = key.0;
        let node_0 = gang.as_ref().is_none_or(|(place, _)| place.node_rank == 0);
        if !self.experiments.contains_key(&experiment) {
            let served = self.read_sweep(experiment)?;
            self.experiments.insert(experiment, served);
        }
        let served = &self.experiments[&experiment];
        let mut offer: Result<Offer, String> =
            serde_json::from_str(job).map_err(|e| format!("its offer is unreadable: {e}"));
        let trial_dir = crate::experiment::trial_dir(&served.dir, key.1);
        let kept = match (served.checkpoint_cap, &offer) {
            (Some(cap), Ok(o)) if node_0 => {
                let exploit_from = o.exploit_from;
                match self.fetch_folder(key, token, &trial_dir, cap, exploit_from)? {
                    Ok(kept) => Some(kept),
                    Err(why) => {
                        offer = Err(why);
                        None
                    }
                }
            }
            _ => None,
        };
        let restored = offer.as_ref().is_ok_and(|o| {
            o.last_step.is_some()
                && std::fs::read_dir(&trial_dir).is_ok_and(|mut e| e.next().is_some())
        });
        if restored && node_0 {
            // Told to the coordinator with the attempt's end (it numbers nothing by it before
            // then).
            self.db
                .execute(
                    "UPDATE tune_attempts SET restored = true WHERE token = $1",
                    &[&token],
                )
                .map_err(|e| self.err(e))?;
        }
        Ok(ClaimedAttempt {
            key,
            token,
            slot,
            offer,
            trial_dir,
            restored,
            kept,
            gang,
        })
    }

    /// What this worker needs to run the trials of sweep `experiment` ([`serve_experiment`]).
    fn read_sweep(&mut self, experiment: i64) -> Result<super::Served, TuneError> {
        let packing = self.packing();
        serve_experiment(
            &mut self.db,
            experiment,
            self.settings,
            &*self.objective_of,
            packing,
        )
        .map_err(|e| self.err(e))
    }

    /// Reads the unfinished sweeps this worker has not met yet, so that it claims no trial
    /// that takes several slots or machines: a worker serving every sweep has one trial per
    /// slot (its pool is shared), and such a sweep is served by workers started for it alone
    /// (its coordinator offers this worker nothing, so the sweep is met by its record, not by
    /// an offer).
    pub(super) fn meet_new_sweeps(&mut self) -> Result<(), TuneError> {
        let known: Vec<i64> = (self.experiments.keys().copied())
            .chain(self.not_served.iter().copied())
            .collect();
        let rows = self
            .db
            .query(
                "SELECT id FROM tune_experiments
                 WHERE NOT finished AND meta IS NOT NULL AND NOT (id = ANY($1::bigint[]))",
                &[&known],
            )
            .map_err(|e| self.err(e))?;
        for experiment in rows.iter().map(|r| r.get::<_, i64>(0)) {
            let served = self.read_sweep(experiment)?;
            if let Some((cpus, gpus)) = served.takes {
                let takes = match gpus {
                    _ if served.nodes > 1 => format!("{} machines", served.nodes),
                    Some(g) if g > 1 => format!("{g} GPUs"),
                    _ => format!("{cpus} CPU slots"),
                };
                eprintln!(
                    "tune worker: trials of {:?} take {takes} each; a worker serving every \
                     sweep runs one trial per slot, so it leaves them to a worker started for \
                     that sweep alone (tune worker --experiment {})",
                    served.name, served.name
                );
                self.not_served.push(experiment);
            } else {
                self.experiments.insert(experiment, served);
            }
        }
        Ok(())
    }

    /// Makes `trial_dir` the trial's folder as the database keeps it (an exploit's: its
    /// source's, copied there first). The inner `Err`: why the attempt cannot run (its stored
    /// folder is damaged, or this machine's cannot be written).
    fn fetch_folder(
        &mut self,
        key: Key,
        token: i64,
        trial_dir: &std::path::Path,
        cap: u64,
        exploit_from: Option<TrialId>,
    ) -> Result<Result<KeptFolder, String>, TuneError> {
        if let Some(from) = exploit_from {
            checkpoints::copy(&mut self.db, key.0, from, key.1, token).map_err(|e| self.err(e))?;
        }
        match checkpoints::fetch(
            &mut self.db,
            key.0,
            key.1,
            trial_dir,
            exploit_from.is_some(),
        ) {
            Ok(fetched) => {
                if fetched.bytes_read > 0 {
                    self.summary.checkpoints_read += 1;
                    self.summary.checkpoint_bytes_read += fetched.bytes_read;
                }
                Ok(Ok(KeptFolder {
                    dir: trial_dir.to_path_buf(),
                    cap,
                    kept: fetched.files,
                }))
            }
            Err(e) => match e.database() {
                Ok(e) => Err(self.err(e)),
                Err(why) => Ok(Err(format!("worker {}: {why}", self.me))),
            },
        }
    }

    /// Starts a claimed attempt on its slot; one that cannot start (its sweep's objective
    /// or its offer unreadable) fails at once, through the same channel as its end.
    pub(super) fn start(&mut self, rt: &tokio::runtime::Runtime, attempt: ClaimedAttempt) {
        let ClaimedAttempt {
            key,
            token,
            slot,
            offer,
            trial_dir,
            restored,
            kept,
            gang,
        } = attempt;
        let (place, port) = gang.unzip();
        let role = place.as_ref().map(|p| GangRole {
            node_rank: p.node_rank,
            _port: port.flatten(),
            told_reports: false,
        });
        self.summary.attempts += 1;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (job_tx, mut job_rx) = mpsc::unbounded_channel();
        let tx = self.tx.clone();
        rt.spawn(async move {
            while let Some(m) = job_rx.recv().await {
                if tx.send((key, m)).is_err() {
                    return;
                }
            }
        });
        let base = match &offer {
            Ok(o) if restored || o.exploited => o.last_step.unwrap_or(0),
            _ => 0,
        };
        self.running.insert(
            key,
            Running {
                token,
                slot,
                shutdown,
                base,
                reports: 0,
                lost: false,
                kept,
                ends_as: None,
                decided: false,
                gang: role,
            },
        );
        let objective = self.experiments[&key.0].objective.clone();
        match objective.and_then(|objective| Ok((objective, offer?))) {
            Ok((objective, offer)) => {
                let job = Job {
                    id: key.1,
                    attempt: key.2,
                    params: offer.params,
                    device: slot,
                    restore_dir: Some(trial_dir.clone()).filter(|_| restored),
                    trial_dir,
                    timeout: offer.timeout_s.map(Duration::from_secs_f64),
                    completes_at: offer.completes_at,
                    tx: job_tx,
                    shutdown: shutdown_rx,
                    // Its run ends by `shutdown` (the worker's own stop or a lost lease).
                    cancel: tokio::sync::watch::channel(false).1,
                    gang: place,
                };
                let _guard = rt.enter();
                objective.launch(job);
            }
            Err(why) => {
                let _ = job_tx.send(WorkerMsg::Finished {
                    id: key.1,
                    attempt: key.2,
                    outcome: Outcome::Failed(format!("worker {}: {why}", self.me)),
                });
            }
        }
    }
}
