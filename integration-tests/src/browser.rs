//! A real browser for the web console's tests: Debian's headless Chromium,
//! driven over WebDriver (chromedriver) with fantoccini; and the console
//! itself, started on a stack with a test certificate and the people's
//! access keys.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

use crate::stack::{free_port, Stack};
use crate::tls::{https_request, Answer, TestCerts};

/// The access key ids `deploy/tenancy.dev.yaml` maps to people.
pub const KEYS: [(&str, &str); 4] = [
    ("platform", "AKIAQMPLATFORM00001"),
    ("alice", "AKIAQMALICE00000001"),
    ("bob", "AKIAQMBOB0000000001"),
    ("carol", "AKIAQMCAROL00000001"),
];

/// A person's secret in these tests.
pub fn secret_of(principal: &str) -> String {
    format!("{principal}-secret-{:08}-qm-console", std::process::id())
}

/// The keys file `qm auth` would write (mode 0600).
pub fn write_keys(dir: &Path) -> PathBuf {
    let mut file = String::new();
    for (who, id) in KEYS {
        file.push_str(&format!("{id}: {{secret: {}}}\n", secret_of(who)));
    }
    let path = dir.join("console-keys.yaml");
    std::fs::write(&path, file).expect("keys written");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// A console serving a stack.
pub struct Console {
    pub port: u16,
    pub certs: TestCerts,
    pub name: String,
    /// Its keys file (people's access keys and secrets).
    pub keys: PathBuf,
}

impl Console {
    /// Starts `qm-console` as `name` on `stack` (HTTPS with a test CA's
    /// certificate), with extra settings; waits until it serves.
    pub async fn start(stack: &mut Stack, name: &str, extra: &[(&str, &str)]) -> Console {
        let certs = crate::tls::make(&stack.dir.join(format!("{name}-tls")), name);
        let keys = write_keys(&stack.dir);
        let port = free_port();
        let mut env = vec![
            (
                "QM_CONSOLE_TENANCY".to_string(),
                stack.auth.tenancy_file.display().to_string(),
            ),
            (
                "QM_CONSOLE_KEYS_FILE".to_string(),
                keys.display().to_string(),
            ),
            (
                "QM_CONSOLE_LISTEN_ADDRESS".to_string(),
                format!("127.0.0.1:{port}"),
            ),
            (
                "QM_CONSOLE_TLS_CERT_FILE".to_string(),
                certs.cert.display().to_string(),
            ),
            (
                "QM_CONSOLE_TLS_KEY_FILE".to_string(),
                certs.key.display().to_string(),
            ),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        stack.spawn_as(name, "qm-console", "console", &env);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !stack.log_of(name).contains("console at https://") {
            assert!(
                std::time::Instant::now() < deadline,
                "the console did not start:\n{}",
                stack.log_of(name)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Console {
            port,
            certs,
            name: name.to_string(),
            keys,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// One request, as a browser or an attacker would send it.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        https_request(self.port, &self.certs.ca_pem, method, path, headers, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Signs `who` in with their key and secret: their session cookie
    /// (`name=value`).
    pub async fn sign_in(&self, who: &str) -> String {
        let key = KEYS
            .iter()
            .find(|(p, _)| *p == who)
            .map(|(_, k)| *k)
            .unwrap_or_else(|| panic!("{who} has no key"));
        let form = format!("accessKeyId={key}&secret={}", secret_of(who));
        let a = self
            .request(
                "POST",
                "/sign-in",
                &[("content-type", "application/x-www-form-urlencoded")],
                &form,
            )
            .await;
        assert_eq!(a.status, 303, "{who} signs in: {}", a.body);
        let set = a.header("set-cookie").expect("a session cookie");
        set.split(';').next().expect("name=value").to_string()
    }

    /// `GET path` with a session cookie.
    pub async fn get(&self, cookie: &str, path: &str) -> Answer {
        self.request("GET", path, &[("cookie", cookie)], "").await
    }

    /// The CSRF token in a page's forms.
    pub fn csrf_of(page: &str) -> String {
        let at = page
            .find("name=\"csrf\" value=\"")
            .expect("a form with a CSRF token");
        let rest = &page[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').expect("closed")].to_string()
    }
}

/// Headless Chromium behind chromedriver.
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// Where screenshots go (test artifacts).
    pub artifacts: PathBuf,
}

/// Where the console's screenshots are kept: `target/console-artifacts`.
pub fn artifacts_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console-artifacts");
    std::fs::create_dir_all(&dir).expect("artifacts dir");
    dir
}

impl Browser {
    pub async fn start() -> Browser {
        let port = free_port();
        let chromedriver = [
            "chromedriver",
            "/usr/bin/chromedriver",
            "/usr/lib/chromium/chromedriver",
        ]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromedriver (Debian's chromium-driver) is installed: make chromium");
        // Its own process group: Chromium is its child, and both go when
        // the group is killed (a failing test leaves no browser behind).
        use std::os::unix::process::CommandExt;
        let driver = Command::new(chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let mut caps = serde_json::Map::new();
        caps.insert("acceptInsecureCerts".into(), serde_json::json!(true));
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1400,1000", "--no-first-run", "--disable-extensions"]
            }),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let client = loop {
            let mut builder = ClientBuilder::rustls().expect("TLS for WebDriver");
            builder.capabilities(caps.clone());
            match builder.connect(&format!("http://127.0.0.1:{port}")).await {
                Ok(c) => break c,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("chromedriver did not open a session: {e}"),
            }
        };
        Browser {
            client,
            driver,
            artifacts: artifacts_dir(),
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigates");
    }

    /// The text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until the element `css` contains `text` (at most `secs`).
    pub async fn wait_text(&self, css: &str, text: &str, secs: u64) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let now = self.text(css).await;
            if now.contains(text) {
                return now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{css} never showed {text:?} in {secs} s; it shows:\n{now}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Opens `path` until its main content shows `text` (at most 20 s).
    pub async fn wait_text_after_reload(
        &self,
        console: &Console,
        path: &str,
        text: &str,
    ) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            self.goto(&console.url(path)).await;
            let now = self.text("main").await;
            if now.contains(text) {
                return now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path} never showed {text:?}; it shows:\n{now}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Runs `script` in the page (its value).
    pub async fn js(&self, script: &str) -> serde_json::Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// Signs in through the form, like a person.
    pub async fn sign_in(&self, console: &Console, who: &str) {
        let key = KEYS
            .iter()
            .find(|(p, _)| *p == who)
            .map(|(_, k)| *k)
            .expect("a key");
        self.goto(&console.url("/sign-in")).await;
        let form = self
            .client
            .form(Locator::Css("form"))
            .await
            .expect("the sign-in form");
        form.set_by_name("accessKeyId", key)
            .await
            .expect("key typed");
        form.set_by_name("secret", &secret_of(who))
            .await
            .expect("secret typed");
        form.submit().await.expect("submitted");
        self.wait_text("header", who, 20).await;
    }

    /// Saves a screenshot of the page as `<name>.png` among the artifacts.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let path = self.artifacts.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("screenshot written");
        path
    }

    /// Presses Tab (WebDriver's key code) on whatever has the focus.
    pub async fn tab(&self) {
        let active = self
            .client
            .active_element()
            .await
            .expect("an active element");
        active.send_keys("\u{e004}").await.expect("Tab");
    }

    /// Ends the session, then chromedriver and its browser.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
        // Drop kills the process group.
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}
