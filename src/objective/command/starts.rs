//! Trial processes being started: a child holds every descriptor of tune from its fork to its
//! exec (close-on-exec closes them only then), so another trial's pipes stay open for that
//! moment. Whoever must see no such moment (a pipe's last writer, the keeper's fork) waits
//! for starts to finish.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Read-held while a trial's process is started (starts run side by side), write-held to see
/// that none is under way.
static STARTING: RwLock<()> = RwLock::new(());

/// Held while one trial's process starts.
pub(super) fn starting() -> RwLockReadGuard<'static, ()> {
    STARTING
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits until no trial's process is being started (between its fork and its exec), and keeps
/// any from starting until the guard is dropped.
pub(super) fn no_start_under_way() -> RwLockWriteGuard<'static, ()> {
    STARTING
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
