//! A sweep through the library built without its default features, and the refusals of what
//! those features would have brought. Exits non-zero, saying why, when anything differs.

use std::path::Path;

use tune::experiment::StoreLocation;
use tune::{BoxError, ExperimentSpec, Mode, Space, TrialContext, Tuner};

fn objective(ctx: &mut TrialContext) -> Result<(), BoxError> {
    let x = ctx.params().f64("x")?;
    ctx.report(1, [("loss", (x - 0.3) * (x - 0.3))])?;
    Ok(())
}

fn space() -> Space {
    Space::builder().uniform("x", -1.0, 1.0).build().unwrap()
}

/// Fails the check unless `error` names the feature `feature`.
fn names_feature(what: &str, error: impl std::fmt::Display, feature: &str) -> Result<(), String> {
    let text = error.to_string();
    match text.contains(&format!("`{feature}` feature")) {
        true => Ok(()),
        false => Err(format!(
            "{what}: expected an error naming the `{feature}` feature, got: {text}"
        )),
    }
}

fn check(dir: &Path) -> Result<(), String> {
    let done = Tuner::new(space())
        .metric("loss", Mode::Min)
        .samples(8)
        .dir(dir.join("sweep"))
        .fit(objective)
        .map_err(|e| format!("a closure sweep: {e}"))?;
    if done.trials().map_err(|e| e.to_string())?.len() != 8 {
        return Err("a closure sweep: not 8 trials".into());
    }
    let postgres = Tuner::new(space())
        .metric("loss", Mode::Min)
        .samples(2)
        .dir(dir.join("pg"))
        .store(StoreLocation::Postgres(
            "postgres://tune@127.0.0.1:1/tune".into(),
        ))
        .fit(objective);
    names_feature(
        "a PostgreSQL store",
        postgres.err().ok_or("a PostgreSQL store: accepted")?,
        "postgres",
    )?;
    let mlflow = Tuner::new(space())
        .metric("loss", Mode::Min)
        .samples(2)
        .dir(dir.join("mlflow"))
        .mlflow("http://127.0.0.1:1", None)
        .fit(objective);
    names_feature(
        "[tracking] mlflow",
        mlflow.err().ok_or("[tracking] mlflow: accepted")?,
        "mlflow",
    )?;
    let spec = "name = \"s\"\nmetric = \"val_accuracy\"\nmode = \"max\"\nsamples = 2\n\
                [objective]\nbuiltin = \"mlp\"\ndataset = \"wine\"\n\
                [space]\nlr = { loguniform = [1e-3, 1e-1] }\n";
    let builtin = ExperimentSpec::from_toml(spec, Path::new("space.toml"));
    names_feature(
        "[objective] builtin",
        builtin.err().ok_or("[objective] builtin: accepted")?,
        "builtin",
    )?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let dir = std::env::temp_dir().join(format!("tune-lean-client-{}", std::process::id()));
    let checked = check(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    match checked {
        Ok(()) => {
            println!("lean client: a sweep ran; postgres, mlflow and builtin are refused by name");
            std::process::ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("lean client: {why}");
            std::process::ExitCode::FAILURE
        }
    }
}
