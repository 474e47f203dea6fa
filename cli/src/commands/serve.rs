//! `tune serve DIR`: the web view of the sweeps under a folder (`tune_cli::serve`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use tune::TuneError;
use tune_cli::serve::{ServeError, Server, Source};

use crate::args::ServeArgs;

pub fn serve(args: ServeArgs) -> Result<ExitCode, TuneError> {
    let source = match args.store.url {
        Some(url) => Source::Database(url),
        None => Source::Folder(args.dir.clone()),
    };
    let server = start(source, &args.dir, args.listen)?;
    server
        .wait()
        .map_err(|e| TuneError::io(format!("serving {}", args.dir.display()), e))?;
    Ok(ExitCode::SUCCESS)
}

/// Starts the server on `source` (its URL file in `root` where that is a folder, else here),
/// says where (stdout: the URL with its token; stderr: a warning where it listens beyond this
/// machine).
pub fn start(source: Source, root: &Path, listen: SocketAddr) -> Result<Server, TuneError> {
    let shown = match &source {
        Source::Folder(dir) => dir.display().to_string(),
        Source::Database(url) => tune::store::redact_url(url),
    };
    if let Source::Database(url) = &source {
        // Said now, with the URL's fault named, rather than as an empty list.
        tune::remote::experiment_names(url)?;
    }
    let url_in = if root.is_dir() { root } else { Path::new(".") };
    let server = Server::start(source, url_in, listen, None).map_err(|e| match e {
        ServeError::NotAFolder(_) => TuneError::Invalid(format!(
            "tune serve: {e}: expected a folder of experiment folders (runs) or an experiment folder"
        )),
        ServeError::Listen { .. } => TuneError::Invalid(format!(
            "tune serve: {e} (another port: --listen 127.0.0.1:0 takes any free one)"
        )),
        ServeError::Io { context, source } => TuneError::io(context, source),
    })?;
    if !listen.ip().is_loopback() {
        eprintln!(
            "tune: warning: serving on {} reaches beyond this machine: anyone who can connect \
             and holds the token sees and steers these sweeps; the traffic is not encrypted \
             (put it behind a TLS reverse proxy, docs/guide/serve.md)",
            server.addr()
        );
    }
    println!("tune: serving {shown} at {}", server.url());
    println!(
        "tune: the URL is also in {} (readable by you alone)",
        url_in.join(tune_cli::serve::URL_FILE).display()
    );
    Ok(server)
}
