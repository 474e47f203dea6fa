//! What the `tune` binary draws, beside the library's engine: the terminal dashboard
//! (`tune run`, `tune watch`) and the charts of `tune plot`. The commands themselves are the
//! binary's (`main.rs` and `commands/`); these two are a library so that the fuzz targets and
//! the benches can drive them.

pub mod dashboard;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod plot;
pub mod secret;
pub mod serve;
