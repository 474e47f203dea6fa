//! A real headless browser for the web view's tests: Debian's Chromium driven through its
//! ChromeDriver (the W3C WebDriver protocol over loopback HTTP). `.ci/run` installs both
//! (packages `chromium` and `chromium-driver`); each test starts its own driver on a free
//! port, with a throwaway profile, and stops it when done.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long a wait for the page lasts before the test fails, saying what it waited for. A
/// bound on a hang, not a timing assertion: everything awaited happens within seconds.
pub const PAGE_WAIT: Duration = Duration::from_secs(120);

/// One browser session, ended (and its driver stopped) when dropped.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts ChromeDriver and a headless Chromium session. Panics, naming the packages, where
    /// they are not installed.
    pub fn start() -> Browser {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: the web view's tests need Debian's `{package}` \
                 (`.ci/run` installs it: apt-get install chromium chromium-driver)"
            );
        }
        let port = crate::mlflow_server::free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while ureq::get(&format!("{base}/status")).call().is_err() {
            assert!(started.elapsed() < PAGE_WAIT, "chromedriver never answered");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().expect("a profile folder");
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1400,1000", "--no-first-run", "--no-default-browser-check",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            _profile: profile,
        };
        let created = browser.call("POST", "/session", Some(caps));
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        browser
    }

    /// A WebDriver command: its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Json>) -> Json {
        self.try_call(method, path, body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    /// A WebDriver command: its `value`, or what went wrong.
    fn try_call(&self, method: &str, path: &str, body: Option<Json>) -> Result<Json, String> {
        let url = format!("{}{path}", self.base);
        let response = match method {
            "GET" => ureq::get(&url).call(),
            "DELETE" => ureq::delete(&url).call(),
            _ => ureq::post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or(json!({})).to_string()),
        };
        let mut response = response.map_err(|e| e.to_string())?;
        let text = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| e.to_string())?;
        let body: Json = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        Ok(body["value"].clone())
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        );
    }

    /// Runs `script` (a function body: `return …`) in the page.
    pub fn run(&self, script: &str) -> Json {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Waits until `script` returns something truthy in the page (and returns it).
    pub fn wait_for(&self, script: &str, what: &str) -> Json {
        let started = Instant::now();
        loop {
            let got = self.run(script);
            let truthy = match &got {
                Json::Null | Json::Bool(false) => false,
                Json::String(s) => !s.is_empty(),
                Json::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return got;
            }
            if started.elapsed() > PAGE_WAIT {
                let page = self
                    .run("return location.href + '\\n' + document.body.innerText.slice(0, 3000)");
                panic!(
                    "the page never showed {what} (last: {got}); the page:\n{}",
                    page.as_str().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the element `css` selects, as a user would (WebDriver's element click). A page
    /// that redraws the element between the find and the click (a live table) is asked again.
    pub fn click(&self, css: &str) {
        let started = Instant::now();
        loop {
            let found = self.try_call(
                "POST",
                &self.session_path("/element"),
                Some(json!({ "using": "css selector", "value": css })),
            );
            let id = found.ok().and_then(|f| {
                f.as_object()
                    .and_then(|o| o.values().next())
                    .and_then(Json::as_str)
                    .map(str::to_string)
            });
            if let Some(id) = id {
                let path = self.session_path(&format!("/element/{id}/click"));
                if self.try_call("POST", &path, Some(json!({}))).is_ok() {
                    return;
                }
            }
            assert!(started.elapsed() < PAGE_WAIT, "could not click {css}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `text` into the element `css` selects, after clearing it.
    pub fn type_into(&self, css: &str, text: &str) {
        let found = self.call(
            "POST",
            &self.session_path("/element"),
            Some(json!({ "using": "css selector", "value": css })),
        );
        let id = found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Json::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string();
        self.call(
            "POST",
            &self.session_path(&format!("/element/{id}/clear")),
            Some(json!({})),
        );
        self.call(
            "POST",
            &self.session_path(&format!("/element/{id}/value")),
            Some(json!({ "text": text })),
        );
    }

    /// A PNG of the window, written to `path`.
    pub fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let data = self.call("GET", &self.session_path("/screenshot"), None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap_or_default())
            .expect("a base64 PNG");
        std::fs::write(path, png).expect("writing the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = ureq::delete(&format!("{}/session/{}", self.base, self.session)).call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
