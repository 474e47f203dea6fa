//! The sweep as a dashboard knows it: built from [`Update`]s alone, so the same state serves
//! `tune run` (updates from the coordinator in this process), `tune watch` on a running sweep
//! (updates over a local socket) and on a finished one (updates replayed from the store).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use tune_search::{Mode, Status, TrialId};

use tune::remote::{gang_slots, split_remote_slot, WorkerInfo};
use tune::{Constraints, Goal};
use tune::{Trial, TrialResult};

/// How many log lines a board keeps.
const LOG_LINES: usize = 500;

/// What does not change during a sweep.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub name: String,
    pub dir: String,
    /// Search algorithm and scheduler, as named in the spec (`tpe`, `asha`).
    pub search: String,
    pub scheduler: String,
    pub metric: String,
    pub mode: Mode,
    /// With several objectives, every one (`metric` and `mode` are the first's); else empty.
    #[serde(default)]
    pub objectives: Vec<Goal>,
    /// `[constraints]`: a trial outside them is neither the best nor on the front.
    #[serde(default)]
    pub constraints: Constraints,
    /// Trials the sweep will create in all.
    pub total: u64,
    /// The worker slots (`cpu:0`, `cuda:1`), in order.
    pub slots: Vec<String>,
    /// Unix milliseconds when this run of the sweep started.
    pub started_at: u64,
}

/// One trial and every result it reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialView {
    pub trial: Trial,
    pub results: Vec<TrialResult>,
}

impl TrialView {
    /// The trial record with its results, as the store keeps it.
    pub fn to_trial(&self) -> Trial {
        Trial {
            results: self.results.clone(),
            ..self.trial.clone()
        }
    }

    /// The metric's values by step, in the order reported.
    pub fn curve(&self, metric: &str) -> Vec<(u64, f64)> {
        self.results
            .iter()
            .filter_map(|r| r.metrics.get(metric).map(|&v| (r.step, v)))
            .collect()
    }

    /// The metric at the last report.
    pub fn last(&self, metric: &str) -> Option<f64> {
        self.results
            .iter()
            .rev()
            .find_map(|r| r.metrics.get(metric).copied())
    }

    /// The best value the trial ever reported.
    pub fn best(&self, metric: &str, mode: Mode) -> Option<f64> {
        self.results
            .iter()
            .filter_map(|r| r.metrics.get(metric).copied())
            .reduce(|a, b| if mode.better(b, a) { b } else { a })
    }
}

/// Something that changed, as sent to dashboards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Update {
    /// Everything known so far: the first update a dashboard gets.
    Board(Box<Board>),
    /// A trial was created or changed state (its results come as [`Update::Result`]).
    Trial(Trial),
    /// A trial reported, at Unix milliseconds `at`.
    Result {
        id: TrialId,
        at: u64,
        result: TrialResult,
    },
    /// The scheduler's account of itself (rungs, brackets, population).
    Scheduler(Vec<String>),
    /// A line for the log, at Unix milliseconds `at`.
    Log { at: u64, text: String },
    /// The sweep ended at `at`: finished, or interrupted and resumable.
    Ended { at: u64, interrupted: bool },
    /// The remote workers serving the sweep (`tune worker`), all of them.
    Workers(Vec<WorkerInfo>),
    /// This machine's GPUs, sampled through NVML (none without an NVIDIA driver).
    Gpus(Vec<tune_trials::GpuUse>),
    /// The budget changed while the sweep runs (samples or a point added): trials in all.
    Total(u64),
}

/// Everything a dashboard shows.
///
/// ```
/// use tune_cli::dashboard::{Board, Header, Update};
/// let mut board = Board::new(Header { name: "demo".into(), total: 3, ..Header::default() });
/// board.apply(Update::Trial(tune::Trial::new(0, tune::Params::default())));
/// assert_eq!(board.trials.len(), 1);
/// assert_eq!(board.count(tune::Status::Pending), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Board {
    pub header: Header,
    /// By trial id.
    pub trials: Vec<TrialView>,
    /// Each time the best completed trial improved: (Unix ms, value, trial).
    pub best_over_time: Vec<(u64, f64, TrialId)>,
    /// The trial on each slot of `header.slots`, if any.
    pub workers: Vec<Option<TrialId>>,
    /// The remote workers serving the sweep, with their heartbeats; their slots join
    /// `header.slots` as trials start on them.
    pub remote: Vec<WorkerInfo>,
    pub scheduler: Vec<String>,
    /// (Unix ms, text), oldest first.
    pub log: VecDeque<(u64, String)>,
    /// When the sweep ended and whether it was interrupted.
    pub ended: Option<(u64, bool)>,
    /// The GPUs of the machine the sweep runs on, as last sampled.
    #[serde(default)]
    pub gpus: Vec<tune_trials::GpuUse>,
}

impl Board {
    pub fn new(header: Header) -> Board {
        Board {
            workers: vec![None; header.slots.len()],
            header,
            ..Board::default()
        }
    }

    /// The best completed trial and its value (as `tune status` picks it).
    pub fn best(&self) -> Option<(TrialId, f64)> {
        self.best_over_time.last().map(|&(_, v, id)| (id, v))
    }

    /// With several objectives, the ids of the completed trials on the Pareto front (as
    /// `tune status` finds it); `None` with one objective.
    pub fn pareto_front(&self) -> Option<Vec<TrialId>> {
        if self.header.objectives.len() < 2 {
            return None;
        }
        let trials: Vec<Trial> = self
            .trials
            .iter()
            .map(|v| {
                let mut t = v.trial.clone();
                t.results = v.results.last().cloned().into_iter().collect();
                t
            })
            .collect();
        Some(
            tune::pareto_front(&trials, &self.header.objectives, &self.header.constraints)
                .iter()
                .map(|t| t.id)
                .collect(),
        )
    }

    /// The steps the sweep has trained ([`tune::steps_trained`]).
    pub fn steps_trained(&self) -> u64 {
        tune::budget_of_reports(self.trials.iter().map(|t| t.results.as_slice()))
            .values()
            .last()
            .copied()
            .unwrap_or(0)
    }

    pub fn count(&self, status: Status) -> usize {
        self.trials
            .iter()
            .filter(|t| t.trial.status == status)
            .count()
    }

    pub fn trial(&self, id: TrialId) -> Option<&TrialView> {
        self.trials.get(id as usize)
    }

    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Board(board) => *self = *board,
            Update::Trial(trial) => self.apply_trial(trial),
            Update::Result { id, at: _, result } => {
                if let Some(view) = self.trials.get_mut(id as usize) {
                    view.results.push(result);
                }
            }
            Update::Scheduler(lines) => self.scheduler = lines,
            Update::Workers(workers) => self.remote = workers,
            Update::Gpus(gpus) => self.gpus = gpus,
            Update::Total(total) => self.header.total = total,
            Update::Log { at, text } => self.log_line(at, text),
            Update::Ended { at, interrupted } => {
                self.ended = Some((at, interrupted));
                self.log_line(
                    at,
                    if interrupted {
                        "sweep interrupted: `tune resume` continues it".into()
                    } else {
                        "sweep finished".into()
                    },
                );
            }
        }
    }

    fn log_line(&mut self, at: u64, text: String) {
        if self.log.len() == LOG_LINES {
            self.log.pop_front();
        }
        self.log.push_back((at, text));
    }

    /// What the log says about trial `before` becoming `trial`, if anything.
    fn change_line(&self, before: &Trial, trial: &Trial) -> Option<String> {
        let id = trial.id;
        match trial.status {
            _ if trial.parent != before.parent && trial.parent.is_some() => Some(format!(
                "trial {id} took trial {}'s weights and new params",
                trial.parent.unwrap_or_default()
            )),
            s if s == before.status && trial.attempts == before.attempts => None,
            Status::Running => Some(format!(
                "trial {id} {} on {}",
                if trial.attempts > 1 {
                    "resumed"
                } else {
                    "started"
                },
                trial.device.as_deref().unwrap_or("?")
            )),
            Status::Failed => Some(format!(
                "trial {id} failed: {}",
                trial.error.as_deref().unwrap_or("no reason given")
            )),
            Status::Stopped => Some(format!(
                "trial {id} stopped at step {}",
                self.trials[id as usize]
                    .results
                    .last()
                    .map_or(0, |r| r.step)
            )),
            Status::Paused => Some(format!("trial {id} paused")),
            Status::Completed | Status::Pending => None,
        }
    }

    /// The slot `trial` runs on now, and no other.
    fn place(&mut self, trial: &Trial) {
        for w in self.workers.iter_mut() {
            if *w == Some(trial.id) {
                *w = None;
            }
        }
        if trial.status != Status::Running {
            return;
        }
        // A trial on several machines (a gang) holds a slot on each.
        for device in gang_slots(trial.device.as_deref().unwrap_or_default()) {
            // A remote worker's slot is known once a trial runs on it, and holds as many as
            // run there at once (GPU shares, a pack of fused trials).
            if split_remote_slot(device).is_some() {
                let free = (0..self.header.slots.len())
                    .any(|i| self.header.slots[i] == device && self.workers[i].is_none());
                if !free {
                    self.header.slots.push(device.to_string());
                    self.workers.push(None);
                }
            }
            // Several trials can share a GPU: each takes the first free slot of its device.
            let workers = &self.workers;
            if let Some(slot) = (0..self.header.slots.len())
                .find(|&i| self.header.slots[i] == device && workers[i].is_none())
            {
                self.workers[slot] = Some(trial.id);
            }
        }
    }

    fn apply_trial(&mut self, trial: Trial) {
        let id = trial.id as usize;
        while self.trials.len() <= id {
            let placeholder = Trial::new(self.trials.len() as TrialId, Default::default());
            self.trials.push(TrialView {
                trial: placeholder,
                results: Vec::new(),
            });
        }
        let before = self.trials[id].trial.clone();
        let at = trial
            .finished_at
            .or(trial.started_at)
            .unwrap_or(trial.created_at);
        let line = self.change_line(&before, &trial);
        if let Some(line) = line {
            self.log_line(at, line);
        }
        self.place(&trial);
        self.trials[id].trial = trial;
        let view = &self.trials[id];
        let feasible = self
            .header
            .constraints
            .violation_of(view.results.last().map(|r| &r.metrics))
            == 0.0;
        if view.trial.status == Status::Completed && feasible {
            if let Some(v) = view.last(&self.header.metric) {
                let candidate = (view.trial.id, v);
                if self
                    .best()
                    .is_none_or(|best| self.header.mode.beats(candidate, best))
                {
                    self.best_over_time.push((at, v, view.trial.id));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn header() -> Header {
        Header {
            name: "t".into(),
            metric: "loss".into(),
            mode: Mode::Min,
            total: 4,
            slots: vec!["cpu:0".into(), "cpu:1".into()],
            ..Header::default()
        }
    }

    fn result(step: u64, loss: f64) -> TrialResult {
        TrialResult {
            step,
            seq: 0,
            attempt: 1,
            metrics: BTreeMap::from([("loss".to_string(), loss)]),
        }
    }

    fn with(id: TrialId, status: Status, device: &str, at: u64) -> Trial {
        let mut t = Trial::new(id, Default::default());
        t.status = status;
        t.device = Some(device.into());
        t.attempts = 1;
        t.created_at = 0;
        t.started_at = Some(at);
        if status.is_finished() {
            t.finished_at = Some(at);
        }
        t
    }

    #[test]
    fn a_tie_for_the_best_goes_to_the_lower_id_whichever_completes_first() {
        let mut b = Board::new(header());
        for id in [1, 0] {
            b.apply(Update::Trial(with(id, Status::Running, "cpu:0", 10)));
            b.apply(Update::Result {
                id,
                at: 11,
                result: result(1, 0.5),
            });
            b.apply(Update::Trial(with(id, Status::Completed, "cpu:0", 12)));
        }
        assert_eq!(b.best(), Some((0, 0.5)));
    }

    #[test]
    fn updates_build_workers_best_and_log() {
        let mut b = Board::new(header());
        b.apply(Update::Trial(with(0, Status::Running, "cpu:1", 10)));
        b.apply(Update::Trial(with(1, Status::Running, "cpu:0", 11)));
        assert_eq!(b.workers, [Some(1), Some(0)]);
        for (step, loss) in [(1, 0.9), (2, 0.5)] {
            b.apply(Update::Result {
                id: 0,
                at: 12,
                result: result(step, loss),
            });
        }
        b.apply(Update::Trial(with(0, Status::Completed, "cpu:1", 20)));
        b.apply(Update::Result {
            id: 1,
            at: 21,
            result: result(1, 0.7),
        });
        b.apply(Update::Trial(with(1, Status::Stopped, "cpu:0", 22)));
        b.apply(Update::Trial(with(2, Status::Running, "cpu:0", 23)));
        b.apply(Update::Result {
            id: 2,
            at: 24,
            result: result(1, 0.25),
        });
        b.apply(Update::Trial(with(2, Status::Completed, "cpu:0", 30)));
        assert_eq!(b.workers, [None, None]);
        // Only completed trials count for the best, as in `tune status`.
        assert_eq!(b.best_over_time, [(20, 0.5, 0), (30, 0.25, 2)]);
        assert_eq!(b.best(), Some((2, 0.25)));
        assert_eq!(b.trials[0].best("loss", Mode::Min), Some(0.5));
        assert_eq!(b.trials[0].curve("loss"), [(1, 0.9), (2, 0.5)]);
        let log: Vec<&str> = b.log.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            log,
            [
                "trial 0 started on cpu:1",
                "trial 1 started on cpu:0",
                "trial 1 stopped at step 1",
                "trial 2 started on cpu:0",
            ]
        );
        let mut failed = with(3, Status::Failed, "cpu:1", 40);
        failed.error = Some("exit status 3".into());
        b.apply(Update::Trial(failed));
        b.apply(Update::Ended {
            at: 41,
            interrupted: true,
        });
        assert_eq!(b.count(Status::Failed), 1);
        assert_eq!(b.log[4].1, "trial 3 failed: exit status 3");
        assert!(b.log[5].1.contains("tune resume"));
        assert_eq!(b.ended, Some((41, true)));
    }

    #[test]
    fn a_trial_on_two_machines_holds_a_slot_on_each_worker_until_it_ends() {
        let mut b = Board::new(header());
        let gang = "a:1/cpu:0 + b:2/node 1";
        b.apply(Update::Trial(with(0, Status::Running, gang, 10)));
        assert_eq!(b.header.slots[2..], ["a:1/cpu:0", "b:2/node 1"]);
        assert_eq!(b.workers[2..], [Some(0), Some(0)]);
        b.apply(Update::Trial(with(0, Status::Completed, gang, 20)));
        assert_eq!(b.workers[2..], [None, None]);
        // The next gang on the same workers takes the same slots.
        b.apply(Update::Trial(with(1, Status::Running, gang, 30)));
        assert_eq!(b.header.slots.len(), 4);
        assert_eq!(b.workers[2..], [Some(1), Some(1)]);
    }

    #[test]
    fn a_snapshot_survives_json_with_its_results() {
        let mut b = Board::new(header());
        b.apply(Update::Trial(with(0, Status::Running, "cpu:0", 1)));
        b.apply(Update::Result {
            id: 0,
            at: 2,
            result: result(1, 0.5),
        });
        let line = serde_json::to_string(&Update::Board(Box::new(b.clone()))).unwrap();
        let mut copy = Board::default();
        copy.apply(serde_json::from_str(&line).unwrap());
        assert_eq!(copy, b);
        assert_eq!(copy.trials[0].results.len(), 1);
    }
}
