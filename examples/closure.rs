//! The Rust API: a closure objective with a conditional space.
//!
//!     cargo run --release --example closure
//!
//! Each run creates a new experiment folder under runs/ (printed at the end).

use tune::{BoxError, Mode, Space, TrialContext, Tuner};

fn objective(ctx: &mut TrialContext) -> Result<(), BoxError> {
    let p = ctx.params();
    let (x, lr) = (p.f64("x")?, p.f64("lr")?);
    let penalty = match p.str("optimizer")? {
        "sgd" => 0.5 * (0.99 - p.f64("momentum")?),
        _ => 0.0,
    };
    for epoch in 1..=10 {
        let loss =
            (x - 2.0).powi(2) + 0.1 * (lr.log10() + 2.0).powi(2) + penalty + 5.0 / epoch as f64;
        // Returns Err when the sweep stops this trial; `?` ends the closure there.
        ctx.report(epoch, [("loss", loss)])?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let space = Space::builder()
        .uniform("x", -5.0, 10.0)
        .loguniform("lr", 1e-4, 1e-1)
        .choice("optimizer", ["sgd", "adam"])
        .uniform("momentum", 0.5, 0.99)
        .when("optimizer", "sgd")
        .build()?;
    let result = Tuner::new(space)
        .metric("loss", Mode::Min)
        .samples(200)
        .seed(1)
        .cpu_slots(2)
        .progress(true)
        .handle_signals(true)
        .fit(objective)?;
    let best = result.best().ok_or("no trial completed")?;
    println!("best trial {} with loss {:?}", best.id, best.value("loss"));
    for (name, value) in best.params.iter() {
        println!("  {name} = {value}");
    }
    println!("experiment folder: {}", result.dir().display());
    Ok(())
}
