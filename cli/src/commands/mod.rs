//! One module per command; `state` and `sweep` hold what several of them share (opening a
//! stored sweep, running one to its end).

pub mod check;
pub mod export;
pub mod plot;
pub mod resume;
pub mod run;
pub mod serve;
pub mod state;
pub mod status;
pub mod sweep;
pub mod watch;
pub mod worker;
