//! The peers' trivial objective (`benches/peers/run_overhead.py`): the sum of five uniform
//! [0, 1] parameters, reported once as `loss`. One definition for the benches that time
//! tune's own overhead against theirs.

use tune::{BoxError, Space, Status, Trial, TrialContext};

/// The parameters' names, made once (the objective runs millions of times).
const NAMES: [&str; 5] = ["x0", "x1", "x2", "x3", "x4"];

/// Five uniform [0, 1] parameters.
pub fn space() -> Space {
    NAMES
        .iter()
        .fold(Space::builder(), |b, name| b.uniform(*name, 0.0, 1.0))
        .build()
        .expect("valid space")
}

/// Reports the sum of the parameters as `loss` at step 1.
pub fn report_sum(ctx: &mut TrialContext) -> Result<(), BoxError> {
    let sum: f64 = NAMES
        .iter()
        .map(|k| ctx.params().f64(k).unwrap_or(0.0))
        .sum();
    ctx.report(1, [("loss", sum)])?;
    Ok(())
}

/// Whether a stored trial is what [`report_sum`] makes: completed, its value the sum of its
/// params.
pub fn is_sum_of_params(t: &Trial) -> bool {
    let sum: f64 = NAMES
        .iter()
        .map(|k| t.params.f64(k).expect("every parameter drawn"))
        .sum();
    t.status == Status::Completed && t.value("loss") == Some(sum)
}
