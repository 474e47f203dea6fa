//! The coordinator's side of remote workers: a thread that turns the coordinator's launches
//! into offers, and the database's claims, reports, ends and lost leases into the messages a
//! local worker would send (see the module above for the tables).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};
use tune_search::TrialId;

use super::db::Db;
use super::{
    coordinator_channel, metrics_from_text, remote_slot, worker_from_row, Offer, WorkerInfo,
    DECISIONS_CHANNEL, NOTE_CLAIM, NOTE_CONTROL, NOTE_END, NOTE_REPORT, OFFERS_CHANNEL, POLL,
    WORKERS_SQL,
};
use crate::error::TuneError;
use crate::protocol::{Outcome, ReportAnswer, WorkerMsg};
use crate::store::pg_store::{self, bigint, db_error, existing};

/// An attempt that was running remotely when this coordinator started, taken over as it is.
#[derive(Debug, Clone)]
pub(crate) struct Adopted {
    pub id: TrialId,
    pub attempt: u32,
}

/// The answer to a control the coordinator ended without answering.
const UNANSWERED: &str = "the sweep ended before it answered";

enum Event {
    /// An attempt to offer, with its offer as stored.
    Offer(TrialId, u32, String),
    Answered {
        report: i64,
        heard: ReportAnswer,
    },
    /// A worker wrote something (a notification says what).
    Wake(Changed),
    /// The sweep is shutting down: offers not claimed are withdrawn.
    Shutdown,
    /// The sweep ended: `true` when it is complete (workers serving it may exit).
    Ended(bool),
}

/// What a worker's notification says it wrote, so that the bridge reads only that.
#[derive(Debug, Clone, Copy, Default)]
struct Changed {
    reports: bool,
    claims: bool,
    ends: bool,
    controls: bool,
}

impl Changed {
    const ALL: Changed = Changed {
        reports: true,
        claims: true,
        ends: true,
        controls: true,
    };

    /// A worker's payload: `report`, `claim` or `end` (anything else: look at everything).
    fn from_note(payload: &str) -> Changed {
        match payload {
            NOTE_REPORT => Changed {
                reports: true,
                ..Changed::default()
            },
            NOTE_CLAIM => Changed {
                claims: true,
                ..Changed::default()
            },
            NOTE_END => Changed {
                ends: true,
                ..Changed::default()
            },
            NOTE_CONTROL => Changed {
                controls: true,
                ..Changed::default()
            },
            _ => Changed::ALL,
        }
    }

    fn add(&mut self, other: Changed) {
        self.reports |= other.reports;
        self.claims |= other.claims;
        self.ends |= other.ends;
        self.controls |= other.controls;
    }
}

/// The coordinator's handle on its bridge thread; dropping it stops the thread.
pub(crate) struct Bridge {
    events: std_mpsc::Sender<Event>,
    /// How many attempts live workers can run now (their slots).
    capacity: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Marks the sweep unfinished and adopts, of the attempts stored as `running`, those still
/// offered or running remotely; other attempts left offered or running are cancelled, so
/// that their workers stop. One transaction.
fn adopt(
    client: &mut Client,
    experiment: i64,
    running: &[(TrialId, u32)],
    location: &crate::store::StorePlace,
) -> Result<Vec<Adopted>, TuneError> {
    let err = |e| TuneError::Store(db_error(location, e));
    let mut db = client.transaction().map_err(err)?;
    db.execute(
        "UPDATE tune_experiments SET finished = false WHERE id = $1",
        &[&experiment],
    )
    .map_err(err)?;
    let ids: Vec<i64> = running.iter().map(|&(id, _)| bigint(id)).collect();
    let attempts: Vec<i32> = running.iter().map(|&(_, a)| a as i32).collect();
    let adopted: Vec<Adopted> = db
        .query(
            "SELECT a.trial, a.attempt FROM tune_attempts a
             JOIN unnest($2::bigint[], $3::int[]) AS r (trial, attempt)
               ON a.trial = r.trial AND a.attempt = r.attempt
             WHERE a.experiment = $1 AND a.state IN ('offered', 'running', 'ended', 'lost')",
            &[&experiment, &ids, &attempts],
        )
        .map_err(err)?
        .iter()
        .map(|row| Adopted {
            id: row.get::<_, i64>(0) as TrialId,
            attempt: row.get::<_, i32>(1) as u32,
        })
        .collect();
    let kept_ids: Vec<i64> = adopted.iter().map(|a| bigint(a.id)).collect();
    let kept_attempts: Vec<i32> = adopted.iter().map(|a| a.attempt as i32).collect();
    db.execute(
        "UPDATE tune_attempts a SET state = 'cancelled'
         WHERE a.experiment = $1 AND a.state IN ('offered', 'running')
           AND NOT EXISTS (SELECT 1 FROM unnest($2::bigint[], $3::int[]) AS k (trial, attempt)
                           WHERE k.trial = a.trial AND k.attempt = a.attempt)",
        &[&experiment, &kept_ids, &kept_attempts],
    )
    .map_err(err)?;
    db.commit().map_err(err)?;
    Ok(adopted)
}

impl Bridge {
    /// Starts the bridge for experiment `name` at `url`. `running` are the trials stored as
    /// running, with their attempt: those still offered or running remotely are adopted
    /// (returned); other attempts left offered or running are cancelled, so that their
    /// workers stop.
    pub(crate) fn start(
        url: &str,
        spec: &crate::spec::ExperimentSpec,
        running: &[(TrialId, u32)],
        tx: mpsc::UnboundedSender<WorkerMsg>,
        shutdown: watch::Receiver<bool>,
        control: crate::control::SweepControl,
        rt: &Handle,
    ) -> Result<(Bridge, Vec<Adopted>), TuneError> {
        let name = &spec.name;
        let location = crate::store::postgres_location(url, name);
        let settings = pg_store::settings(url, &location)?;
        let mut client = pg_store::connect_with(&settings, &location)?;
        let experiment = existing(&mut client, name, &location)?;
        let adopted = adopt(&mut client, experiment, running, &location)?;
        let (events, inbox) = std_mpsc::channel();
        let capacity = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let listener = {
            let (settings, events, stop) = (settings.clone(), events.clone(), stop.clone());
            let channel = coordinator_channel(experiment);
            std::thread::spawn(move || {
                listen(
                    &settings,
                    &[&channel],
                    |_, what| events.send(Event::Wake(Changed::from_note(what))).is_ok(),
                    &stop,
                )
            })
        };
        {
            let events = events.clone();
            let mut shutdown = shutdown;
            rt.spawn(async move {
                if shutdown.wait_for(|s| *s).await.is_ok() {
                    let _ = events.send(Event::Shutdown);
                }
            });
        }
        let mut state = State {
            db: Db::new(client, settings),
            stop: stop.clone(),
            experiment,
            tracked: adopted
                .iter()
                .map(|a| ((a.id, a.attempt), Tracked { claimed: false }))
                .collect(),
            offers: Vec::new(),
            heard: Vec::new(),
            delivered: HashSet::new(),
            tx,
            rt: rt.clone(),
            events: events.clone(),
            capacity: capacity.clone(),
            nodes_per_trial: spec.resources.nodes_per_trial() as usize,
            own_workers_only: spec.resources.needs_workers_of_its_own(),
            shutting_down: false,
            ended: None,
            changed: Changed::ALL,
            looked: Instant::now(),
            workers_sent: Vec::new(),
            workers_sent_at: Instant::now(),
            unreachable_since: None,
            control,
            controls: Vec::new(),
        };
        let worker = std::thread::spawn(move || state.run(inbox));
        Ok((
            Bridge {
                events,
                capacity,
                stop,
                threads: vec![worker, listener],
            },
            adopted,
        ))
    }

    /// How many attempts live workers can run now (their slots), kept up to date by the bridge.
    pub(crate) fn capacity(&self) -> Arc<AtomicUsize> {
        self.capacity.clone()
    }

    /// Offers `job` to remote workers.
    pub(crate) fn offer(&self, id: TrialId, attempt: u32, offer: &Offer) {
        // An offer is params and numbers: JSON always encodes it.
        let text = serde_json::to_string(offer).unwrap_or_default();
        let _ = self.events.send(Event::Offer(id, attempt, text));
    }

    /// Tells workers the sweep ended (`complete`: nothing is left to run) and stops the bridge.
    pub(crate) fn end(mut self, complete: bool) {
        let _ = self.events.send(Event::Ended(complete));
        let mut threads = std::mem::take(&mut self.threads).into_iter();
        // The bridge writes the end, then the listener is stopped.
        if let Some(bridge) = threads.next() {
            let _ = bridge.join();
        }
        self.stop.store(true, Ordering::SeqCst);
        threads.for_each(|t| {
            let _ = t.join();
        });
    }
}

/// Hands each notification on `channels` (its channel and payload) to `note` until `stop` is
/// set or `note` returns `false`; reconnects when the connection is lost.
pub(super) fn listen(
    settings: &pg_store::PgSettings,
    channels: &[&str],
    note: impl Fn(&str, &str) -> bool,
    stop: &AtomicBool,
) {
    let mut client = None::<Client>;
    while !stop.load(Ordering::SeqCst) {
        let c = match &mut client {
            Some(c) => c,
            None => {
                let listens: String = channels.iter().map(|ch| format!("LISTEN {ch};")).collect();
                let connected = pg_store::open(settings)
                    .ok()
                    .and_then(|mut c| c.batch_execute(&listens).map(|()| c).ok());
                match connected {
                    Some(c) => client.insert(c),
                    None => {
                        std::thread::sleep(POLL);
                        continue;
                    }
                }
            }
        };
        let mut lost = false;
        {
            let mut notes = c.notifications();
            let mut iter = notes.timeout_iter(POLL);
            loop {
                match postgres::fallible_iterator::FallibleIterator::next(&mut iter) {
                    Ok(Some(n)) => {
                        if !note(n.channel(), n.payload()) {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        lost = true;
                        break;
                    }
                }
            }
        }
        if lost || c.is_closed() {
            client = None;
        }
    }
}

struct Tracked {
    /// A worker claimed it (the coordinator was told).
    claimed: bool,
}

struct State {
    db: Db,
    stop: Arc<AtomicBool>,
    experiment: i64,
    /// The attempts this coordinator waits on: offered or running remotely.
    tracked: HashMap<(TrialId, u32), Tracked>,
    /// Offers not yet written.
    offers: Vec<(TrialId, u32, String)>,
    /// Decisions not yet written.
    heard: Vec<(i64, ReportAnswer)>,
    /// Reports handed to the coordinator and not yet decided.
    delivered: HashSet<i64>,
    tx: mpsc::UnboundedSender<WorkerMsg>,
    rt: Handle,
    events: std_mpsc::Sender<Event>,
    capacity: Arc<AtomicUsize>,
    /// The machines one trial spans: above 1, each attempt takes that many workers at once.
    nodes_per_trial: usize,
    /// Its trials run only on workers serving it alone: those serving every sweep leave
    /// them, so their slots are no capacity of this sweep.
    own_workers_only: bool,
    shutting_down: bool,
    ended: Option<bool>,
    /// What workers wrote since the last look.
    changed: Changed,
    /// When the bridge last looked at everything (leases, workers, and what notifications
    /// may have missed).
    looked: Instant,
    /// The workers as last sent to the coordinator, and when.
    workers_sent: Vec<WorkerInfo>,
    workers_sent_at: Instant,
    /// Since when the database has not answered.
    unreachable_since: Option<Instant>,
    /// Where controls asked through the database go: the coordinator.
    control: crate::control::SweepControl,
    /// Controls taken and handed to the coordinator, by id, with where its answer comes.
    controls: Vec<(i64, std_mpsc::Receiver<Result<String, String>>)>,
}

impl State {
    fn run(&mut self, inbox: std_mpsc::Receiver<Event>) {
        while !self.stop.load(Ordering::SeqCst) {
            let due = POLL.saturating_sub(self.looked.elapsed());
            let first = match inbox.recv_timeout(due) {
                Ok(e) => Some(e),
                Err(std_mpsc::RecvTimeoutError::Timeout) => None,
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
            };
            for event in first.into_iter().chain(inbox.try_iter()) {
                self.take(event);
            }
            // An unreachable database: keep trying, losing nothing buffered, for as long as a
            // worker keeps its trials without it (a restart, a failover); past that the sweep
            // ends with the error (`tune resume` adopts what workers still run). A coordinator
            // shutting down does not wait for the database: its trials are handed back as they
            // are.
            match self.round() {
                Ok(()) => self.unreachable_since = None,
                Err(e) => {
                    if self.db.is_closed() && self.db.reconnect() {
                        self.unreachable_since = None;
                    } else {
                        let since = *self.unreachable_since.get_or_insert_with(Instant::now);
                        if self.shutting_down {
                            self.hand_back();
                        } else if since.elapsed() >= crate::store::OUTAGE_RIDDEN {
                            let _ = self.tx.send(WorkerMsg::Unreachable(format!(
                                "the database has not answered for {} s (last: {})",
                                since.elapsed().as_secs(),
                                crate::store::pg_store::Described(e)
                            )));
                            return;
                        }
                    }
                }
            }
            if self.ended.is_some() {
                return;
            }
        }
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::Offer(id, attempt, text) => {
                self.tracked
                    .insert((id, attempt), Tracked { claimed: false });
                self.offers.push((id, attempt, text));
            }
            Event::Answered { report, heard } => self.heard.push((report, heard)),
            Event::Wake(changed) => self.changed.add(changed),
            Event::Shutdown => self.shutting_down = true,
            Event::Ended(complete) => self.ended = Some(complete),
        }
    }

    /// One look at the database: writes what is buffered, reads what workers did.
    fn round(&mut self) -> Result<(), postgres::Error> {
        let e = self.experiment;
        if let Some(complete) = self.ended {
            // The coordinator answered what it carried out before it ended: those answers
            // go out first, and what it never will answer is refused, not left to time out.
            self.write_answers()?;
            self.refuse_unanswered()?;
            self.db.execute(
                "UPDATE tune_experiments SET finished = $2 WHERE id = $1",
                &[&e, &complete],
            )?;
            self.db
                .execute("SELECT pg_notify($1, '')", &[&OFFERS_CHANNEL])?;
            return Ok(());
        }
        self.write_offers()?;
        self.write_decisions()?;
        self.write_answers()?;
        if self.shutting_down {
            // Offers nobody claimed are withdrawn (resume offers them again); attempts running
            // remotely go on, for the next coordinator to adopt.
            let (ids, attempts) = self.tracked_keys(|t| !t.claimed);
            self.db.execute(
                "UPDATE tune_attempts a SET state = 'cancelled'
                 FROM unnest($2::bigint[], $3::int[]) AS k (trial, attempt)
                 WHERE a.experiment = $1 AND a.trial = k.trial AND a.attempt = k.attempt
                   AND a.state = 'offered'",
                &[&e, &ids, &attempts],
            )?;
            self.hand_back();
            return Ok(());
        }
        // What notifications said changed; every so often everything (a notification can be
        // missed), with the leases and the workers' slots, which no notification announces.
        let mut changed = std::mem::take(&mut self.changed);
        let full = self.looked.elapsed() >= POLL;
        if full {
            self.looked = Instant::now();
            changed = Changed::ALL;
            self.expire_leases()?;
        }
        if changed.claims {
            self.read_claims()?;
        }
        if changed.reports {
            self.read_reports()?;
        }
        if changed.ends {
            self.read_ends()?;
        }
        if changed.controls {
            self.read_controls()?;
        }
        if full {
            self.read_workers()?;
        }
        Ok(())
    }

    /// Takes the controls asked since the last look (each once: `taken_at`) and hands them to
    /// the coordinator.
    fn read_controls(&mut self) -> Result<(), postgres::Error> {
        let rows = self.db.query(
            "UPDATE tune_controls SET taken_at = now()
             WHERE experiment = $1 AND answer IS NULL AND taken_at IS NULL
             RETURNING id, control, asked_by",
            &[&self.experiment],
        )?;
        let mut rows: Vec<(i64, String, String)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        rows.sort_by_key(|r| r.0);
        for (id, text, asked_by) in rows {
            let (answer, answered) = std_mpsc::channel();
            match serde_json::from_str::<crate::control::Control>(&text) {
                Ok(control) => match self.control.submit(control, &asked_by) {
                    Ok(rx) => self.controls.push((id, rx)),
                    Err(e) => {
                        let _ = answer.send(Err(e.to_string()));
                        self.controls.push((id, answered));
                    }
                },
                Err(e) => {
                    let _ = answer.send(Err(format!("not a control: {e}")));
                    self.controls.push((id, answered));
                }
            }
        }
        Ok(())
    }

    /// Writes the coordinator's answers to the controls it has answered.
    fn write_answers(&mut self) -> Result<(), postgres::Error> {
        let mut answered = Vec::new();
        self.controls.retain(|(id, rx)| match rx.try_recv() {
            Ok(answer) => {
                answered.push((*id, answer));
                false
            }
            Err(std_mpsc::TryRecvError::Empty) => true,
            Err(std_mpsc::TryRecvError::Disconnected) => {
                answered.push((*id, Err(UNANSWERED.into())));
                false
            }
        });
        for (id, answer) in answered {
            let (ok, text) = match answer {
                Ok(text) => (true, text),
                Err(text) => (false, text),
            };
            self.db.execute(
                "UPDATE tune_controls SET ok = $2, answer = $3 WHERE id = $1",
                &[&id, &ok, &text],
            )?;
        }
        Ok(())
    }

    /// Refuses the controls this coordinator ends without answering: taken and not carried
    /// out, or asked too late to be taken.
    fn refuse_unanswered(&mut self) -> Result<(), postgres::Error> {
        self.controls.clear();
        self.db.execute(
            "UPDATE tune_controls SET ok = false, answer = $2
             WHERE experiment = $1 AND answer IS NULL",
            &[&self.experiment, &UNANSWERED],
        )?;
        Ok(())
    }

    /// Writes the buffered offers, and wakes the workers where any is new.
    fn write_offers(&mut self) -> Result<(), postgres::Error> {
        if self.offers.is_empty() {
            return Ok(());
        }
        let e = self.experiment;
        let ids: Vec<i64> = self.offers.iter().map(|o| bigint(o.0)).collect();
        let attempts: Vec<i32> = self.offers.iter().map(|o| o.1 as i32).collect();
        let jobs: Vec<&str> = self.offers.iter().map(|o| o.2.as_str()).collect();
        self.db.query(
            "WITH o AS (
                INSERT INTO tune_attempts (experiment, trial, attempt, job, state)
                SELECT $1, *, 'offered' FROM unnest($2::bigint[], $3::int[], $4::text[])
                ON CONFLICT (experiment, trial, attempt) DO UPDATE
                SET job = excluded.job, state = 'offered', worker = NULL, token = NULL,
                    lease_until = NULL, outcome = NULL, offered_at = clock_timestamp()
                RETURNING 1)
             SELECT pg_notify($5, '') WHERE EXISTS (SELECT 1 FROM o)",
            &[&e, &ids, &attempts, &jobs, &OFFERS_CHANNEL],
        )?;
        if attempts.iter().any(|&a| a > 1) {
            // Only kills, delays and waits mean something here.
            let _ = crate::failpoint::hit("bridge.offer.resumed");
        }
        self.offers.clear();
        Ok(())
    }

    /// Writes the buffered decisions on reports, each with a notification that carries it.
    fn write_decisions(&mut self) -> Result<(), postgres::Error> {
        if self.heard.is_empty() {
            return Ok(());
        }
        let _ = crate::failpoint::hit("bridge.heard.before");
        let ids: Vec<i64> = self.heard.iter().map(|h| h.0).collect();
        let heard: Vec<&str> = self.heard.iter().map(|h| h.1.as_str()).collect();
        // The decision rides on the notification too: a worker that hears it need not ask.
        self.db.query(
            // `id = ANY`: an index lookup per report, whatever the table's statistics say.
            "WITH d AS (
                UPDATE tune_reports r SET heard = ($2::text[])[array_position($1, r.id)]
                WHERE r.id = ANY($1::bigint[])
                RETURNING r.id, r.heard)
             SELECT pg_notify($3, id || ':' || heard) FROM d",
            &[&ids, &heard, &DECISIONS_CHANNEL],
        )?;
        for id in &ids {
            self.delivered.remove(id);
        }
        self.heard.clear();
        Ok(())
    }

    /// Tells the coordinator every attempt it waits on was interrupted (it is shutting down;
    /// offers left in the database unclaimed are adopted or cancelled by the next coordinator).
    fn hand_back(&mut self) {
        for ((id, attempt), _) in self.tracked.drain() {
            let _ = self.tx.send(WorkerMsg::Finished {
                id,
                attempt,
                outcome: Outcome::Interrupted,
            });
        }
    }

    /// Attempts whose lease ran out, by the database's clock, are lost: their trials run again
    /// as the coordinator's `max_lost_attempts` allows.
    fn expire_leases(&mut self) -> Result<(), postgres::Error> {
        let e = self.experiment;
        for row in self.db.query(
            "UPDATE tune_attempts SET state = 'lost'
             WHERE experiment = $1 AND state = 'running' AND lease_until < now()
             RETURNING trial, attempt, worker,
                       extract(epoch FROM now() - lease_until)::float8",
            &[&e],
        )? {
            let key = (row.get::<_, i64>(0) as TrialId, row.get::<_, i32>(1) as u32);
            let worker: Option<String> = row.get(2);
            if self.tracked.remove(&key).is_some() {
                let _ = self.tx.send(WorkerMsg::Finished {
                    id: key.0,
                    attempt: key.1,
                    outcome: Outcome::Lost(format!(
                        "worker {} stopped renewing its lease",
                        worker.unwrap_or_else(|| "?".into())
                    )),
                });
            }
        }
        Ok(())
    }

    /// Tells the coordinator which worker claimed each offer.
    fn read_claims(&mut self) -> Result<(), postgres::Error> {
        let e = self.experiment;
        let (ids, attempts) = self.tracked_keys(|t| !t.claimed);
        if !ids.is_empty() {
            for row in self.db.query(
                // One primary-key lookup per tracked attempt, whatever the table holds:
                // `OFFSET 0` keeps the planner from flattening the LATERAL into a join, which
                // it runs as a scan of every attempt of the experiment while the table's
                // statistics lag behind its growth (autovacuum analyzes once a minute).
                "SELECT a.trial, a.attempt, a.worker, a.device, a.restored
                 FROM unnest($2::bigint[], $3::int[]) AS k (trial, attempt)
                 CROSS JOIN LATERAL (
                     SELECT * FROM tune_attempts a WHERE a.experiment = $1
                       AND a.trial = k.trial AND a.attempt = k.attempt OFFSET 0) a
                 WHERE a.state <> 'offered' AND a.worker IS NOT NULL",
                &[&e, &ids, &attempts],
            )? {
                let key = (row.get::<_, i64>(0) as TrialId, row.get::<_, i32>(1) as u32);
                if let Some(t) = self.tracked.get_mut(&key) {
                    t.claimed = true;
                    let _ = self.tx.send(WorkerMsg::Claimed {
                        id: key.0,
                        attempt: key.1,
                        worker: remote_slot(row.get(2), row.get(3)),
                        restored: row.get(4),
                    });
                }
            }
        }
        Ok(())
    }

    /// Hands the coordinator the reports waiting for a decision.
    fn read_reports(&mut self) -> Result<(), postgres::Error> {
        let e = self.experiment;
        for row in self.db.query(
            "SELECT id, trial, attempt, step, metrics FROM tune_reports
             WHERE experiment = $1 AND heard IS NULL ORDER BY id",
            &[&e],
        )? {
            let report: i64 = row.get(0);
            if !self.delivered.insert(report) {
                continue;
            }
            let (ack, answer) = oneshot::channel();
            let events = self.events.clone();
            self.rt.spawn(async move {
                // A coordinator that ends without deciding leaves the report for the next.
                if let Ok(heard) = answer.await {
                    let _ = events.send(Event::Answered { report, heard });
                }
            });
            let metrics: &str = row.get(4);
            let _ = self.tx.send(WorkerMsg::Report {
                id: row.get::<_, i64>(1) as TrialId,
                attempt: row.get::<_, i32>(2) as u32,
                step: row.get::<_, Option<i64>>(3).map(|s| s as u64),
                metrics: metrics_from_text(metrics),
                ack,
            });
        }
        Ok(())
    }

    /// Tells the coordinator of the attempts that ended.
    fn read_ends(&mut self) -> Result<(), postgres::Error> {
        let e = self.experiment;
        let (ids, attempts) = self.tracked_keys(|_| true);
        if !ids.is_empty() {
            for row in self.db.query(
                // One lookup per tracked attempt, as in `read_claims`.
                "SELECT a.trial, a.attempt, a.outcome, a.worker, a.device, a.restored
                 FROM unnest($2::bigint[], $3::int[]) AS k (trial, attempt)
                 CROSS JOIN LATERAL (
                     SELECT * FROM tune_attempts a WHERE a.experiment = $1
                       AND a.trial = k.trial AND a.attempt = k.attempt OFFSET 0) a
                 WHERE a.state IN ('ended', 'lost')",
                &[&e, &ids, &attempts],
            )? {
                let key = (row.get::<_, i64>(0) as TrialId, row.get::<_, i32>(1) as u32);
                if self.tracked.remove(&key).is_some() {
                    if row.get::<_, bool>(5) {
                        // It went on from a checkpoint: the coordinator counts its results so.
                        let _ = self.tx.send(WorkerMsg::Claimed {
                            id: key.0,
                            attempt: key.1,
                            worker: remote_slot(row.get(3), row.get(4)),
                            restored: true,
                        });
                    }
                    let outcome: Option<String> = row.get(2);
                    let outcome = match outcome {
                        Some(text) => Outcome::from_text(&text),
                        None => Outcome::Lost("its worker lost its lease".into()),
                    };
                    let _ = self.tx.send(WorkerMsg::Finished {
                        id: key.0,
                        attempt: key.1,
                        outcome,
                    });
                }
            }
        }
        Ok(())
    }

    /// The workers serving the experiment: how many slots live ones have (a change wakes the
    /// coordinator), and the list for dashboards when it changed (at most once a second for
    /// heartbeats alone).
    fn read_workers(&mut self) -> Result<(), postgres::Error> {
        let e = self.experiment;
        let workers: Vec<WorkerInfo> = self
            .db
            .query(WORKERS_SQL, &[&e])?
            .iter()
            .map(worker_from_row)
            .collect();
        let slots = placeable(&workers, self.nodes_per_trial, self.own_workers_only);
        if self.capacity.swap(slots, Ordering::SeqCst) != slots {
            let _ = self.tx.send(WorkerMsg::Wake);
        }
        let same = |a: &WorkerInfo, b: &WorkerInfo| {
            (&a.id, a.slots, a.live, &a.running) == (&b.id, b.slots, b.live, &b.running)
        };
        let changed = workers.len() != self.workers_sent.len()
            || workers
                .iter()
                .zip(&self.workers_sent)
                .any(|(a, b)| !same(a, b));
        if changed || self.workers_sent_at.elapsed() >= Duration::from_secs(1) {
            self.workers_sent_at = Instant::now();
            self.workers_sent = workers.clone();
            let _ = self.tx.send(WorkerMsg::Workers(workers));
        }
        Ok(())
    }

    /// The tracked attempts `keep` selects, as arrays for `unnest`.
    fn tracked_keys(&self, keep: impl Fn(&Tracked) -> bool) -> (Vec<i64>, Vec<i32>) {
        self.tracked
            .iter()
            .filter(|(_, t)| keep(t))
            .map(|(&(id, attempt), _)| (bigint(id), attempt as i32))
            .unzip()
    }
}

/// How many trials can run at once on `workers` (live ones; with `own_workers_only`, those
/// serving this sweep alone), each on `nodes` of them.
fn placeable(workers: &[WorkerInfo], nodes: usize, own_workers_only: bool) -> usize {
    let slots: Vec<usize> = (workers.iter())
        .filter(|w| w.live && (w.serving.is_some() || !own_workers_only))
        .map(|w| w.slots as usize)
        .collect();
    gangs_placeable(&slots, nodes)
}

/// How many trials of `nodes` machines each can run at once on workers with these `slots`:
/// the most gangs `g` such that the workers' seats, each counted up to `g` (no worker holds
/// two nodes of one trial), fill `g` gangs. With `nodes` 1, every slot.
fn gangs_placeable(slots: &[usize], nodes: usize) -> usize {
    if nodes <= 1 {
        return slots.iter().sum();
    }
    let seats = |g: usize| slots.iter().map(|&s| s.min(g)).sum::<usize>();
    (0..=slots.iter().sum::<usize>() / nodes)
        .rev()
        .find(|&g| seats(g) >= g * nodes)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{gangs_placeable, placeable};
    use crate::remote::WorkerInfo;

    #[test]
    fn workers_serving_every_sweep_are_no_capacity_of_a_sweep_that_needs_its_own() {
        let worker = |slots, serving: Option<&str>, live| WorkerInfo {
            id: format!("h:{slots}"),
            slots,
            serving: serving.map(String::from),
            heartbeat_at: 0,
            live,
            running: Vec::new(),
            gpus: Vec::new(),
        };
        let workers = [
            worker(4, None, true),
            worker(2, Some("t"), true),
            worker(3, Some("t"), false),
        ];
        assert_eq!(placeable(&workers, 1, false), 6);
        assert_eq!(placeable(&workers, 1, true), 2);
        assert_eq!(placeable(&workers, 2, true), 0);
    }

    #[test]
    fn gangs_take_one_seat_of_as_many_workers_as_they_span() {
        assert_eq!(gangs_placeable(&[2, 3], 1), 5);
        assert_eq!(gangs_placeable(&[1, 1], 2), 1);
        assert_eq!(gangs_placeable(&[1, 1, 1], 2), 1);
        assert_eq!(gangs_placeable(&[2, 2], 2), 2);
        // Seats of one worker alone make no gang.
        assert_eq!(gangs_placeable(&[3, 1], 2), 1);
        assert_eq!(gangs_placeable(&[4], 2), 0);
        assert_eq!(gangs_placeable(&[2, 2, 2], 3), 2);
        assert_eq!(gangs_placeable(&[], 2), 0);
    }
}
