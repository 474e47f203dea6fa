//! Gangs: a trial on several machines (`[resources] nodes_per_trial = M`) is run by M
//! workers at once, one node each, or by none.
//!
//! - **Forming** (`form`): a worker with a free slot takes, in one transaction under the
//!   sweep's gang lock, the oldest offer and M - 1 other live workers with a free seat (their
//!   slots less the gang places they hold), and writes one `tune_gang_members` row per node:
//!   its own node 0 (`running`, with the rendezvous endpoint it holds the port of) and the
//!   others' (`assigned`). Too few free workers: nothing is written, nobody holds anything,
//!   so two gangs wanting the same workers never wait on each other.
//! - **Joining** (`take_assignments`): a worker finds the places assigned to it, takes a slot
//!   for each and starts its node with node 0's endpoint.
//! - **Watching** (`watch`): every node keeps its own lease (renewed with the worker's
//!   heartbeat). Node 0 ends the attempt when another node fails (failed), is stopped with
//!   its worker (interrupted: the trial runs again, counting nothing) or stops renewing its
//!   lease (lost: the trial runs again, as the coordinator's `max_lost_attempts` allows);
//!   a node above 0 ends when the attempt has ended, or another node broke so.
//!
//! Only node 0's reports reach the coordinator; the decisions go to node 0 only.

use postgres::types::ToSql;
use tune_search::TrialId;

use super::claim::ClaimedAttempt;
use super::{Key, WorkerState};
use crate::error::TuneError;
use crate::objective::command::{GangPlace, PortLease};
use crate::pool::Slot;
use crate::protocol::Outcome;
use crate::remote::db::Db;
use crate::remote::{coordinator_channel, NOTE_CLAIM, OFFERS_CHANNEL};
use crate::store::pg_store::bigint;

/// The first key of the advisory lock under which gangs of a sweep are formed ("tung").
const GANG_LOCK_SPACE: i32 = 0x7475_6e67;

/// A worker's free seats for gang places: its slots less the places it holds (assigned or
/// running, with a lease not run out), for the live workers serving sweep `$1`.
const SEATS_SQL: &str = "SELECT w.id, w.slots - (
        SELECT count(*) FROM tune_gang_members m
        WHERE m.experiment = $1 AND m.worker = w.id
          AND m.state IN ('assigned', 'running') AND m.lease_until > now())::int
     FROM tune_workers w
     WHERE w.experiment = $1 AND w.heartbeat_at > now() - make_interval(secs => w.lease_s)";

impl WorkerState<'_> {
    /// The machines one trial of the sweep this worker serves spans, where above 1.
    pub(super) fn gang_nodes(&self) -> Option<u32> {
        let served = self.experiments.get(&self.only?)?;
        (served.nodes > 1).then_some(served.nodes)
    }

    /// Joins the gangs this worker was assigned to, then forms new ones with its free
    /// slots, and starts every node it took. After a database error the nodes taken before
    /// it still start, and the slots left are free again.
    pub(super) fn claim_gang_places(
        &mut self,
        rt: &tokio::runtime::Runtime,
        nodes: u32,
    ) -> Result<(), TuneError> {
        let mut taken = Vec::new();
        let mut result = self.take_assignments(&mut taken);
        if result.is_ok() {
            while let Some(slot) = self.pool.claim() {
                match self.form(slot, nodes) {
                    Ok(Some(attempt)) => taken.push(attempt),
                    other => {
                        self.pool.release(slot);
                        result = other.map(drop);
                        break;
                    }
                }
            }
        }
        for attempt in taken {
            self.start(rt, attempt);
        }
        result
    }

    /// Takes a slot for each gang place assigned to this worker, as far as its slots go (a
    /// place left waits for the next round; its lease runs out if none comes free).
    fn take_assignments(&mut self, taken: &mut Vec<ClaimedAttempt>) -> Result<(), TuneError> {
        let Some(e) = self.only else {
            return Ok(());
        };
        let rows = self
            .db
            .query(
                "SELECT m.trial, m.attempt, m.node_rank, m.token, z.endpoint, a.job,
                        (SELECT count(*) FROM tune_gang_members n
                         WHERE n.experiment = m.experiment AND n.trial = m.trial
                           AND n.attempt = m.attempt)::int
                 FROM tune_gang_members m
                 JOIN tune_gang_members z ON z.experiment = m.experiment
                      AND z.trial = m.trial AND z.attempt = m.attempt AND z.node_rank = 0
                 JOIN tune_attempts a ON a.experiment = m.experiment AND a.trial = m.trial
                      AND a.attempt = m.attempt
                 WHERE m.experiment = $1 AND m.worker = $2 AND m.state = 'assigned'
                   AND a.state = 'running'
                 ORDER BY m.trial, m.attempt",
                &[&e, &self.me],
            )
            .map_err(|e| self.err(e))?;
        for row in rows {
            let key: Key = (
                e,
                row.get::<_, i64>(0) as TrialId,
                row.get::<_, i32>(1) as u32,
            );
            if self.running.contains_key(&key) {
                continue;
            }
            let endpoint: Option<String> = row.get(4);
            let Some((addr, port)) = endpoint.as_deref().and_then(split_endpoint) else {
                continue;
            };
            let Some(slot) = self.pool.claim() else {
                break;
            };
            let token: i64 = row.get(3);
            let joined = self
                .db
                .execute(
                    "UPDATE tune_gang_members SET state = 'running'
                     WHERE token = $1 AND state = 'assigned'",
                    &[&token],
                )
                .map_err(|e| self.err(e));
            match joined {
                Ok(1) => {}
                Ok(_) => {
                    self.pool.release(slot);
                    continue;
                }
                Err(e) => {
                    self.pool.release(slot);
                    return Err(e);
                }
            }
            let place = GangPlace {
                nnodes: row.get::<_, i32>(6) as u32,
                node_rank: row.get::<_, i32>(2) as u32,
                master_addr: addr.to_string(),
                master_port: port,
            };
            let job: String = row.get(5);
            match self.claimed(key, token, &job, slot, Some((place, None))) {
                Ok(attempt) => taken.push(attempt),
                Err(e) => {
                    self.pool.release(slot);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Forms a gang of `nodes` with this worker's `slot` as node 0: the oldest offer and
    /// `nodes - 1` other workers with a free seat, all or nothing. `None`: no offer, or too
    /// few workers free now.
    fn form(&mut self, slot: Slot, nodes: u32) -> Result<Option<ClaimedAttempt>, TuneError> {
        let Some(e) = self.only else {
            return Ok(None);
        };
        // Most rounds find no offer: looked for first without the sweep's gang lock, which
        // every idle worker of the sweep would otherwise take every round.
        let offered = self
            .db
            .query_opt(
                "SELECT 1 FROM tune_attempts WHERE experiment = $1 AND state = 'offered' LIMIT 1",
                &[&e],
            )
            .map_err(|err| self.err(err))?;
        if offered.is_none() {
            return Ok(None);
        }
        let port = PortLease::take().map_err(|err| {
            TuneError::Invalid(format!("no port for a trial's rendezvous here: {err}"))
        })?;
        let address = self.address();
        let endpoint = format!("{address}:{}", port.port());
        let lease = self.settings.lease.as_secs_f64();
        let formed = form_gang(
            self.db.client(),
            (e, &self.me, &slot.to_string()),
            nodes,
            (&endpoint, lease),
        )
        .map_err(|err| self.err(err))?;
        let Some(Formed { key, token, job }) = formed else {
            return Ok(None);
        };
        let place = GangPlace {
            nnodes: nodes,
            node_rank: 0,
            master_addr: address,
            master_port: port.port(),
        };
        self.claimed(key, token, &job, slot, Some((place, Some(port))))
            .map(Some)
    }

    /// Where other machines reach this one: `--address`, else its host name.
    fn address(&self) -> String {
        (self.settings.address.clone()).unwrap_or_else(crate::store::pg_store::host_name)
    }

    /// Ends the nodes whose gang broke: node 0 when another node failed or was lost (the
    /// attempt ends so), a node above 0 when the attempt ended or another node is gone.
    pub(super) fn watch(&mut self) -> Result<(), TuneError> {
        let Some(e) = self.only else {
            return Ok(());
        };
        let (trials, attempts): (Vec<i64>, Vec<i32>) = (self.running.iter())
            .filter(|(_, r)| r.gang.is_some() && !r.lost)
            .map(|(k, _)| (bigint(k.1), k.2 as i32))
            .unzip();
        if trials.is_empty() {
            return Ok(());
        }
        let rows = self
            .db
            .query(
                "SELECT m.trial, m.attempt, m.node_rank, m.worker, m.state, m.outcome,
                        m.lease_until < now(), a.state = 'running'
                 FROM unnest($2::bigint[], $3::int[]) AS k (trial, attempt)
                 JOIN tune_gang_members m ON m.experiment = $1 AND m.trial = k.trial
                      AND m.attempt = k.attempt
                 JOIN tune_attempts a ON a.experiment = $1 AND a.trial = k.trial
                      AND a.attempt = k.attempt
                 WHERE m.worker <> $4",
                &[&e, &trials, &attempts, &self.me],
            )
            .map_err(|e| self.err(e))?;
        for row in rows {
            let key: Key = (
                e,
                row.get::<_, i64>(0) as TrialId,
                row.get::<_, i32>(1) as u32,
            );
            let (node, worker): (i32, String) = (row.get(2), row.get(3));
            let (state, outcome): (String, Option<String>) = (row.get(4), row.get(5));
            let (expired, attempt_running): (bool, bool) = (row.get(6), row.get(7));
            let live = state == "assigned" || state == "running";
            let broke = if state == "failed" {
                Some(Outcome::Failed(format!(
                    "node {node} of the trial (worker {worker}) failed: {}",
                    outcome.unwrap_or_default()
                )))
            } else if state == "interrupted" {
                Some(Outcome::Interrupted)
            } else if live && expired {
                Some(Outcome::Lost(format!(
                    "node {node} of the trial (worker {worker}) stopped renewing its lease"
                )))
            } else {
                None
            };
            let Some(r) = self.running.get_mut(&key) else {
                continue;
            };
            let node_0 = r.holds_attempt();
            if node_0 {
                if let Some(outcome) = broke.filter(|_| !r.decided && r.ends_as.is_none()) {
                    eprintln!(
                        "tune worker: trial {} (attempt {}): {}; ending it on every node",
                        key.1,
                        key.2,
                        outcome.to_text()
                    );
                    r.ends_as = Some(outcome);
                    r.shutdown.send_replace(true);
                }
            } else if !attempt_running || broke.is_some() {
                // Its gang's attempt is over (ended, lost, cancelled) or cannot go on.
                r.decided = true;
                r.shutdown.send_replace(true);
            }
        }
        Ok(())
    }
}

/// An attempt a gang was formed for.
struct Formed {
    key: Key,
    token: i64,
    job: String,
}

/// The transaction of [`WorkerState::form`]: `(experiment, this worker, its slot)`,
/// `(endpoint, lease)`.
fn form_gang(
    client: &mut postgres::Client,
    (e, me, slot): (i64, &str, &str),
    nodes: u32,
    (endpoint, lease): (&str, f64),
) -> Result<Option<Formed>, postgres::Error> {
    let mut tx = client.transaction()?;
    // Gangs of one sweep are formed one at a time: a transaction sees every seat the others
    // took, and none waits on another's rows.
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, ($2::bigint % 2147483647)::int)",
        &[&GANG_LOCK_SPACE, &e],
    )?;
    let Some(offer) = tx.query_opt(
        "SELECT trial, attempt FROM tune_attempts
         WHERE experiment = $1 AND state = 'offered' ORDER BY offered_at LIMIT 1 FOR UPDATE",
        &[&e],
    )?
    else {
        return Ok(None);
    };
    let (trial, attempt): (i64, i32) = (offer.get(0), offer.get(1));
    let mut seats: Vec<(String, i32)> = tx
        .query(SEATS_SQL, &[&e])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if !seats.iter().any(|(w, free)| w == me && *free > 0) {
        return Ok(None);
    }
    // Most free seats first, so that gangs spread over workers the same way each time.
    seats.retain(|(w, free)| w != me && *free > 0);
    seats.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if seats.len() + 1 < nodes as usize {
        return Ok(None);
    }
    let members: Vec<String> = std::iter::once(me.to_string())
        .chain(seats.into_iter().map(|(w, _)| w))
        .take(nodes as usize)
        .collect();
    let device = crate::remote::gang_device(slot, &members[1..]);
    let row = tx.query_one(
        "UPDATE tune_attempts SET state = 'running', worker = $4, device = $5,
             token = nextval('tune_tokens'), lease_until = now() + make_interval(secs => $6)
         WHERE experiment = $1 AND trial = $2 AND attempt = $3
         RETURNING token, job",
        &[&e, &trial, &attempt, &me, &device, &lease],
    )?;
    let (token, job): (i64, String) = (row.get(0), row.get(1));
    let params: [&(dyn ToSql + Sync); 7] =
        [&e, &trial, &attempt, &members, &token, &endpoint, &lease];
    tx.execute(
        "INSERT INTO tune_gang_members
             (experiment, trial, attempt, node_rank, worker, token, state, lease_until, endpoint)
         SELECT $1, $2, $3, (n - 1)::int, w,
                CASE WHEN n = 1 THEN $5 ELSE nextval('tune_tokens') END,
                CASE WHEN n = 1 THEN 'running' ELSE 'assigned' END,
                now() + make_interval(secs => $7),
                CASE WHEN n = 1 THEN $6 END
         FROM unnest($4::text[]) WITH ORDINALITY AS t (w, n)",
        &params,
    )?;
    tx.execute(
        "SELECT pg_notify($1, 'gang'), pg_notify($2, $3)",
        &[&OFFERS_CHANNEL, &coordinator_channel(e), &NOTE_CLAIM],
    )?;
    tx.commit()?;
    Ok(Some(Formed {
        key: (e, trial as TrialId, attempt as u32),
        token,
        job,
    }))
}

/// Renews the leases of this worker's gang places (`tokens`).
pub(super) fn renew_members(
    db: &mut Db,
    tokens: &[i64],
    lease: f64,
) -> Result<u64, postgres::Error> {
    if tokens.is_empty() {
        return Ok(0);
    }
    db.execute(
        "UPDATE tune_gang_members SET lease_until = now() + make_interval(secs => $2)
         WHERE token = ANY($1) AND state IN ('assigned', 'running')",
        &[&tokens, &lease],
    )
}

/// How a node above 0 of a gang ended, as its row says it to node 0.
pub(super) enum MemberEnding {
    /// Exited 0, or was ended because the attempt was over.
    Ended,
    /// Failed, why: the attempt fails.
    Failed(String),
    /// Its worker was stopped (Ctrl-C, SIGTERM) mid-attempt: the attempt is interrupted, and
    /// its trial runs again, counting nothing against it.
    Interrupted,
}

/// Records how a node above 0 ended.
pub(super) fn end_member(
    db: &mut Db,
    token: i64,
    ending: &MemberEnding,
) -> Result<(), postgres::Error> {
    let (state, why) = match ending {
        MemberEnding::Ended => ("ended", None),
        MemberEnding::Failed(why) => ("failed", Some(why.as_str())),
        MemberEnding::Interrupted => ("interrupted", None),
    };
    db.execute(
        "UPDATE tune_gang_members SET state = $2, outcome = $3
         WHERE token = $1 AND state IN ('assigned', 'running')",
        &[&token, &state, &why],
    )
    .map(drop)
}

/// `host:port` (the host may hold colons: an IPv6 address in brackets or not).
fn split_endpoint(endpoint: &str) -> Option<(&str, u16)> {
    let (host, port) = endpoint.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_splits_at_its_last_colon() {
        assert_eq!(split_endpoint("10.0.0.5:29500"), Some(("10.0.0.5", 29500)));
        assert_eq!(split_endpoint("[::1]:80"), Some(("[::1]", 80)));
        assert_eq!(split_endpoint("host"), None);
        assert_eq!(split_endpoint("host:x"), None);
    }
}
