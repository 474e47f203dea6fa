//! `tune serve`: a live web view of every sweep under a folder, with control. One process, an
//! HTTP server on loopback (axum), the page compiled into the binary, updates pushed as
//! server-sent events, every request behind a random token (a cookie or a bearer header), controls carried out
//! by each sweep's coordinator through its watch socket (never by writing its store).
//!
//! ```no_run
//! use tune_cli::serve::{Server, Source};
//! let runs = std::path::Path::new("runs");
//! let server = Server::start(Source::Folder(runs.into()), runs, "127.0.0.1:0".parse().unwrap(), None)
//!     .unwrap();
//! println!("{}", server.url());
//! server.wait();
//! ```

mod api;
mod auth;
pub mod catalog;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

pub use auth::COOKIE;
use catalog::Catalog;
pub use catalog::Source;

/// The file (in the served folder, mode 0600) holding the URL with the token, for scripts on
/// the same machine and account.
pub const URL_FILE: &str = "serve.url";

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0} is not a folder")]
    NotAFolder(PathBuf),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// How long [`Server::finish`] lets answers under way finish.
pub const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A running `tune serve`.
pub struct Server {
    addr: SocketAddr,
    token: String,
    url_file: UrlFile,
    runtime: tokio::runtime::Runtime,
    done: tokio::sync::oneshot::Receiver<std::io::Result<()>>,
    /// Asks the server to stop taking connections and finish what it answers.
    stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    /// Serves the sweeps of `source` on `listen` (port 0: any free one), with `token` or a
    /// new random one; the URL file goes in the folder `url_in`.
    pub fn start(
        source: Source,
        url_in: &Path,
        listen: SocketAddr,
        token: Option<String>,
    ) -> Result<Server, ServeError> {
        if let Source::Folder(root) = &source {
            if !root.is_dir() {
                return Err(ServeError::NotAFolder(root.to_path_buf()));
            }
        }
        let io = |context: &str| {
            let context = context.to_string();
            move |source| ServeError::Io { context, source }
        };
        let token = match token {
            Some(t) => t,
            None => crate::secret::new_token().map_err(io("drawing a token"))?,
        };
        let catalog = Catalog::watch(source).map_err(io("reading the sweeps"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(io("starting the runtime"))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(listen))
            .map_err(|source| ServeError::Listen {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(io("reading the address"))?;
        let app = router(catalog, token.clone());
        let (finished, done) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            let _ = finished.send(served.await);
        });
        let url_file = UrlFile(url_in.join(URL_FILE));
        let server = Server {
            addr,
            token,
            url_file,
            runtime,
            done,
            stop,
        };
        server
            .write_url_file()
            .map_err(io("writing the URL file"))?;
        Ok(server)
    }

    /// The URL in its file, readable by its owner only.
    fn write_url_file(&self) -> std::io::Result<()> {
        crate::secret::write_owner_only(&self.url_file.0, &format!("{}\n", self.url()))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The token every request needs.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The URL to open: the page, with the token.
    pub fn url(&self) -> String {
        let host = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => format!("127.0.0.1:{}", a.port()),
            SocketAddr::V6(a) if a.ip().is_unspecified() => format!("[::1]:{}", a.port()),
            a => a.to_string(),
        };
        format!("http://{host}/?token={}", self.token)
    }

    /// Stops: no new connection is taken, and answers under way (a control's) are finished
    /// for up to [`FINISH_WAIT`] (event streams never end by themselves: they are cut then).
    pub fn finish(self) {
        let Server {
            runtime,
            done,
            stop,
            ..
        } = self;
        let _ = stop.send(());
        runtime.block_on(async {
            let _ = tokio::time::timeout(FINISH_WAIT, done).await;
        });
    }

    /// Serves until the process ends (or the server fails).
    pub fn wait(self) -> std::io::Result<()> {
        let Server { runtime, done, .. } = self;
        runtime.block_on(done).unwrap_or(Ok(()))
    }
}

/// The URL file, removed when the server goes.
struct UrlFile(PathBuf);

impl Drop for UrlFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn router(catalog: Arc<Catalog>, token: String) -> Router {
    Router::new()
        .route("/", get(api::page))
        .route("/assets/app.js", get(api::script))
        .route("/assets/app.css", get(api::style))
        .route("/api/sweeps", get(api::sweeps))
        .route("/api/sweeps/{name}", get(api::sweep))
        .route("/api/sweeps/{name}/trials", get(api::trials))
        .route("/api/sweeps/{name}/trials/{id}", get(api::trial))
        .route("/api/sweeps/{name}/charts/{file}", get(api::chart))
        .route("/api/sweeps/{name}/events", get(api::events))
        .route("/api/sweeps/{name}/control", post(api::control))
        .with_state(catalog)
        .layer(axum::middleware::from_fn_with_state(
            token,
            auth::require_token,
        ))
}
