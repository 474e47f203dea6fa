//! The decoder of outside input the binary owns, for the fuzz target `fuzz/fuzz_targets/watch.rs`
//! and its corpus test: none may panic, hang or allocate without bound, whatever the bytes.

use crate::dashboard::{Board, Update};

/// The watch protocol: one JSON update per line, applied to a board.
pub fn watch(bytes: &[u8]) {
    let mut board = Board::default();
    for line in bytes.split(|&b| b == b'\n') {
        if let Ok(update) = serde_json::from_slice::<Update>(line) {
            board.apply(update);
        }
    }
}
