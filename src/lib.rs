//! `tune`: a hyperparameter tuning orchestrator.
//!
//! A coordinator runs a search algorithm and a trial scheduler against a pool of workers;
//! every trial's state is kept in an embedded store, so an interrupted sweep resumes where it
//! stopped. Use it from the command line (`tune run space.toml`) or from Rust:
//!
//! ```
//! use tune::{Mode, Space, Tuner};
//! # let dir = tempfile::tempdir().unwrap();
//! let space = Space::builder()
//!     .loguniform("lr", 1e-4, 1e-1)
//!     .choice("optimizer", ["sgd", "adam"])
//!     .build()?;
//! let result = Tuner::new(space)
//!     .metric("loss", Mode::Min)
//!     .samples(8)
//!     .dir(dir.path().join("demo"))
//!     .fit(|ctx| {
//!         let lr = ctx.params().f64("lr")?;
//!         ctx.report(1, [("loss", (lr.ln() + 5.0).abs())])?;
//!         Ok(())
//!     })?;
//! println!("best: {:?}", result.best().map(|t| &t.params));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// The Rust examples of the README and docs/ run as doctests, so the book cannot drift from
/// the API (`cli/tests/end_to_end/docs.rs` checks that every page with one is here).
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/guide/rust-api.md")]
    struct RustApi;
    #[doc = include_str!("../docs/distributed.md")]
    struct Distributed;
}

mod best;
pub mod check;
mod control;
mod coordinator;
mod error;
pub mod experiment;
pub mod export;
pub mod failpoint;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod objective;
mod observer;
mod pool;
mod progress;
mod protocol;
pub mod remote;
mod replay;
pub mod seconds;
mod spec;
mod stop;
pub mod store;
pub mod tracking;
mod trial;
mod tuner;
mod warm_start;

pub use best::{best_trial, pareto_front};
pub use control::{Control, ControlError, SweepControl};
pub use error::TuneError;
pub use objective::{
    share_cores_among_trials, share_cores_among_worker_slots, BoxError, IntoMetrics, ObjectiveFn,
    Stop, TrialContext,
};
pub use observer::{Event, Notes, Observer, StopHandle, Summary, SweepInfo};
pub use pool::{GpuSet, Slot};
pub use progress::{format_line, ProgressLine};
pub use replay::scheduler_status;
pub use spec::{
    check_mlflow_url, Algorithm, Bound, CheckpointPlace, Constraints, ExperimentSpec, Fuse, Goal,
    Gpus, InvalidSetting, MlflowServer, ObjectiveSpec, RaisedMaxT, Resources, SchedulerSpec,
    Search, SearchSpec, SearcherError, SpecError, StoreSpec, TrackingSpec, WarmStart,
};
pub use stop::{StopConditions, StopReason};
pub use store::StoreError;
pub use trial::{
    budget_by_seq, budget_of_reports, now_ms, rfc3339, steps_trained, Lineage, Trial, TrialResult,
};
pub use tune_schedulers::{AshaConfig, AshaVariant, HyperBandConfig, MedianConfig, PbtConfig};
pub use tune_search::gp::{GpOptions, Matern};
pub use tune_search::{
    params_digits, value_brief, value_digits, value_short, value_text, AutoOptions, Condition,
    Domain, DomainError, FieldError, Mode, Nsga2Options, ParamError, Params, PriorTrial, Space,
    SpaceBuilder, SpaceError, Status, TpeOptions, TrialId, Value,
};
pub use tuner::{TuneResult, Tuner};
pub use warm_start::{read_warm_start, read_warm_start_stored, WarmStartRead};
