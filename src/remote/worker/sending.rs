//! What a worker writes for its attempts: their reports, their trial folders (where the sweep
//! keeps them in the database) and how they ended, each fenced by the attempt's token. A write
//! the database does not take waits, in order, and is sent again while the lease lasts.

use std::collections::BTreeMap;

use tokio::sync::oneshot;

use super::{Key, WorkerState};
use crate::error::TuneError;
use crate::protocol::{Outcome, ReportAnswer};
use crate::remote::checkpoints::{CheckpointError, KeptFolder, Saved};
use crate::remote::db::Db;
use crate::remote::{coordinator_channel, metrics_to_text, NOTE_END, NOTE_REPORT};
use crate::store::pg_store::bigint;

/// A write of an attempt that waits for the database.
pub(super) enum Unsent {
    /// A report, its trial waiting for the decision.
    Report {
        step: u64,
        metrics: BTreeMap<String, f64>,
        ack: oneshot::Sender<ReportAnswer>,
    },
    /// How the attempt (of this token) ended, after its trial folder where the sweep keeps
    /// them in the database.
    End {
        token: i64,
        outcome: Outcome,
        kept: Option<KeptFolder>,
    },
    /// How a node above 0 of a gang ended (its token is its own, not the attempt's): failed
    /// or interrupted, it ends the attempt on the other nodes.
    MemberEnd {
        token: i64,
        ending: super::gang::MemberEnding,
    },
}

impl WorkerState<'_> {
    /// Sends what waits, in order, until the database fails again (what is left waits on).
    pub(super) fn send_unsent(&mut self) -> Result<(), TuneError> {
        while let Some((key, unsent)) = self.unsent.pop_front() {
            let sent = match unsent {
                Unsent::Report { step, metrics, ack } => {
                    self.send_report(key, step, metrics, ack, true)
                }
                Unsent::End {
                    token,
                    outcome,
                    kept,
                } => self.send_end(key, token, outcome, kept),
                Unsent::MemberEnd { token, ending } => {
                    super::gang::end_member(&mut self.db, token, &ending)
                        .map_err(|e| (Unsent::MemberEnd { token, ending }, e))
                }
            };
            if let Err((unsent, e)) = sent {
                self.unsent.push_front((key, unsent));
                return Err(self.err(e));
            }
        }
        Ok(())
    }

    /// Sends report `step` of attempt `key`, after its trial folder where the sweep keeps them
    /// in the database; the trial then waits for the decision. `again`: the database may have
    /// taken it already (it is not stored twice). What the database did not take comes back,
    /// to be sent again while the lease lasts.
    pub(super) fn send_report(
        &mut self,
        key: Key,
        step: u64,
        metrics: BTreeMap<String, f64>,
        ack: oneshot::Sender<ReportAnswer>,
        again: bool,
    ) -> Result<(), (Unsent, postgres::Error)> {
        // The folder as the trial left it after its last decision, kept before the report
        // that follows it.
        if let Err(e) = self.keep_folder(key) {
            return Err((Unsent::Report { step, metrics, ack }, e));
        }
        let Some(r) = self.running.get(&key).filter(|r| !r.lost) else {
            let _ = ack.send(ReportAnswer::Refused);
            return Ok(());
        };
        let token = r.token;
        let row = match again {
            true => resend_report(&mut self.db, token, key, step, &metrics),
            false => insert_report(&mut self.db, token, key, step, &metrics),
        };
        match row {
            Ok(Some(id)) => {
                self.listening.lock().unwrap().insert(id);
                self.pending.insert(id, (key, ack));
            }
            Ok(None) => {
                let _ = ack.send(ReportAnswer::Refused);
                self.lose(key, "its report was refused: the attempt is no longer its");
            }
            Err(e) => return Err((Unsent::Report { step, metrics, ack }, e)),
        }
        Ok(())
    }

    /// Records how attempt `key` (of `token`) ended, after its trial folder where the sweep
    /// keeps them in the database. What the database did not take comes back.
    fn send_end(
        &mut self,
        key: Key,
        token: i64,
        mut outcome: Outcome,
        mut kept: Option<KeptFolder>,
    ) -> Result<(), (Unsent, postgres::Error)> {
        let saved = match kept.as_mut() {
            Some(folder) => folder.save(&mut self.db, key.0, key.1, token).map(Some),
            None => Ok(None),
        };
        // A folder refused (the attempt lost meanwhile) is the end's fate too: refused.
        let written = match saved {
            Ok(saved) => {
                if let Some(saved) = saved {
                    self.summary.count(saved);
                }
                end_attempt(&mut self.db, token, key.0, &outcome)
            }
            Err(e) => match e.database() {
                Ok(e) => Err(e),
                Err(why) => {
                    outcome = self.failed_by(why);
                    end_attempt(&mut self.db, token, key.0, &outcome)
                }
            },
        };
        written.map(drop).map_err(|e| {
            let end = Unsent::End {
                token,
                outcome,
                kept,
            };
            (end, e)
        })
    }

    /// Keeps attempt `key`'s trial folder in the database if it changed since it was last
    /// kept (where its sweep keeps them there). `Err`: the database failed, to be tried again.
    /// A folder over the cap, or one that cannot be read, fails the attempt: its trial is
    /// stopped, and its end says why.
    pub(super) fn keep_folder(&mut self, key: Key) -> Result<(), postgres::Error> {
        let Some(r) = self.running.get_mut(&key).filter(|r| !r.lost) else {
            return Ok(());
        };
        let Some(folder) = r.kept.as_mut() else {
            return Ok(());
        };
        let refused = match folder.save(&mut self.db, key.0, key.1, r.token) {
            Ok(saved) => {
                self.summary.count(saved);
                saved == Saved::Refused
            }
            Err(e) => {
                let why = match e.database() {
                    Ok(e) => return Err(e),
                    Err(why) => why,
                };
                r.ends_as = Some(Outcome::Failed(format!("worker {}: {why}", self.me)));
                r.kept = None;
                r.shutdown.send_replace(true);
                false
            }
        };
        if refused {
            self.lose(
                key,
                "its checkpoint was refused: the attempt is no longer its",
            );
        }
        Ok(())
    }

    /// The failure of an attempt whose trial folder could not be kept in the database.
    pub(super) fn failed_by(&self, why: CheckpointError) -> Outcome {
        Outcome::Failed(format!("worker {}: {why}", self.me))
    }
}

/// Sends a report of attempt `key`, fenced: only while the attempt is still the holder of
/// `token` (`FOR SHARE` waits for a concurrent expiry and sees its outcome). `None`: refused.
pub(super) fn insert_report(
    client: &mut Db,
    token: i64,
    key: Key,
    step: u64,
    metrics: &BTreeMap<String, f64>,
) -> Result<Option<i64>, postgres::Error> {
    let row = client.query_opt(
        "WITH r AS (
            INSERT INTO tune_reports (experiment, trial, attempt, token, step, metrics)
            SELECT $2, $3, $4, $1, $5, $6
            WHERE EXISTS (SELECT 1 FROM tune_attempts
                          WHERE token = $1 AND state = 'running' FOR SHARE)
            RETURNING id)
         SELECT id, pg_notify($7, $8) FROM r",
        &[
            &token,
            &key.0,
            &bigint(key.1),
            &(key.2 as i32),
            &bigint(step),
            &metrics_to_text(metrics),
            &coordinator_channel(key.0),
            &NOTE_REPORT,
        ],
    )?;
    Ok(row.map(|r| r.get(0)))
}

/// [`insert_report`] of a report that may have been stored already: the database may have
/// taken it and failed before it answered (the report is found, by its attempt's token and
/// step, and not stored twice).
fn resend_report(
    client: &mut Db,
    token: i64,
    key: Key,
    step: u64,
    metrics: &BTreeMap<String, f64>,
) -> Result<Option<i64>, postgres::Error> {
    let stored = client.query_opt(
        "SELECT id FROM tune_reports WHERE token = $1 AND step = $2",
        &[&token, &bigint(step)],
    )?;
    match stored {
        Some(row) => Ok(Some(row.get(0))),
        None => insert_report(client, token, key, step, metrics),
    }
}

/// Records how attempt `token` of `experiment` ended, fenced as reports are; `false`: refused.
pub(super) fn end_attempt(
    client: &mut Db,
    token: i64,
    experiment: i64,
    outcome: &Outcome,
) -> Result<bool, postgres::Error> {
    let rows = client.query(
        // Node 0 of a gang holds its attempt's token: its row ends with the attempt (the
        // other nodes watch it end).
        "WITH e AS (
            UPDATE tune_attempts SET state = 'ended', outcome = $2
            WHERE token = $1 AND state = 'running' RETURNING 1),
         g AS (
            UPDATE tune_gang_members SET state = 'ended'
            WHERE token = $1 AND state IN ('assigned', 'running'))
         SELECT pg_notify($3, $4) FROM e",
        &[
            &token,
            &outcome.to_text(),
            &coordinator_channel(experiment),
            &NOTE_END,
        ],
    )?;
    Ok(!rows.is_empty())
}
