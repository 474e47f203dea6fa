//! tune's end-to-end tests: the real `tune` binary run on spec files, killed and resumed,
//! against private PostgreSQL and MLflow servers and the peers' own readers. One test binary
//! (each former test file a module) so that the suite links once.

mod common;

mod auto;
mod bad_input;
mod builtin;
mod cli;
mod constraints;
mod damage;
mod dashboard;
mod database_checkpoints;
mod distributed_trials;
mod docs;
mod failpoints;
mod fuzz_corpus;
mod gangs;
mod gp;
mod hostile;
mod lcbench;
mod mlflow;
mod multi_objective;
mod network;
mod optuna_journal;
mod plot;
mod postgres_store;
mod resume;
mod schedulers;
mod serve;
mod slurm;
mod stop;
mod stored_format;
mod tensorboard;
mod tls;
mod workers;
