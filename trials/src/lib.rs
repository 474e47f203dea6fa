//! What runs inside a trial: Candle trainables, datasets, early stopping, checkpoints and
//! device selection.
//!
//! Not written yet: today every objective is a user closure or a command (see the `tune`
//! crate). This crate exists so the workspace has its final shape and dependency direction.
