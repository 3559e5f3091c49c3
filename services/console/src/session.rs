//! Who is looking: sign-in with an access key and its secret, sessions
//! (an unguessable id in an HttpOnly, Secure, SameSite=Strict cookie, kept
//! in memory with an expiry), a proxy's header believed only from the
//! proxy's address, a CSRF token per viewer, and a limit on failed
//! sign-ins per address.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The session cookie's name (the `__Host-` prefix makes browsers keep it
/// only when Secure, for this host and path `/`).
pub const COOKIE: &str = "__Host-qm_session";
/// The same on plain HTTP (loopback behind a TLS proxy), where browsers
/// refuse `__Host-` cookies.
pub const COOKIE_PLAIN: &str = "qm_session";

/// Failed sign-ins allowed per address per [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 10;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(300);

/// The person a request is made for, and how they are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Viewer {
    pub principal: String,
    /// The token every write must carry.
    pub csrf: String,
    /// The session's id (None: named by the proxy on this request).
    pub session: Option<String>,
}

struct Session {
    principal: String,
    csrf: String,
    expires: Instant,
}

/// Sign-ins and sessions.
pub struct Sessions {
    ttl: Duration,
    /// Access key id -> secret.
    secrets: BTreeMap<String, String>,
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    /// Keys the CSRF tokens of proxy-named viewers (no session to hold one).
    csrf_key: [u8; 32],
}

/// Why a sign-in was refused (shown to the person as it is).
#[derive(Debug, PartialEq, Eq)]
pub enum SignInError {
    /// The key is unknown, not mapped, or the secret is wrong: one message
    /// for all, so a guess learns nothing.
    Refused,
    /// Too many failures from this address lately.
    TooMany,
}

fn random_hex() -> String {
    // 244 random bits from the OS (two version-4 UUIDs).
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Equal, in time that depends only on the lengths.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    pub fn new(secrets: BTreeMap<String, String>, ttl: Duration) -> Sessions {
        let mut csrf_key = [0u8; 32];
        csrf_key.copy_from_slice(&random_hex().as_bytes()[..32]);
        Sessions {
            ttl,
            secrets,
            sessions: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            csrf_key,
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Checks an access key and its secret, as the person `principal_of`
    /// maps the key to; on success, a new session's id.
    pub fn sign_in(
        &self,
        from: IpAddr,
        key_id: &str,
        secret: &str,
        principal_of: impl Fn(&str) -> Option<String>,
    ) -> Result<(String, Viewer), SignInError> {
        let now = Instant::now();
        if let Ok(mut f) = self.failures.lock() {
            f.retain(|_, (_, since)| now.duration_since(*since) < FAILURE_WINDOW);
            if f.get(&from).is_some_and(|(n, _)| *n >= MAX_FAILURES) {
                return Err(SignInError::TooMany);
            }
        }
        let known = self.secrets.get(key_id);
        // Compared even for an unknown key, so timing says nothing of it.
        let expected = known.map_or("-", String::as_str);
        let secret_ok = same(expected.as_bytes(), secret.as_bytes()) && known.is_some();
        let principal = principal_of(key_id).filter(|_| secret_ok);
        let Some(principal) = principal else {
            if let Ok(mut f) = self.failures.lock() {
                let e = f.entry(from).or_insert((0, now));
                e.0 += 1;
            }
            return Err(SignInError::Refused);
        };
        let id = random_hex();
        let csrf = random_hex();
        if let Ok(mut s) = self.sessions.lock() {
            s.retain(|_, v| v.expires > now);
            s.insert(
                id.clone(),
                Session {
                    principal: principal.clone(),
                    csrf: csrf.clone(),
                    expires: now + self.ttl,
                },
            );
        }
        let viewer = Viewer {
            principal,
            csrf,
            session: Some(id.clone()),
        };
        Ok((id, viewer))
    }

    /// The viewer a session id belongs to, if it is live.
    pub fn viewer(&self, id: &str) -> Option<Viewer> {
        let s = self.sessions.lock().ok()?;
        let session = s.get(id)?;
        (session.expires > Instant::now()).then(|| Viewer {
            principal: session.principal.clone(),
            csrf: session.csrf.clone(),
            session: Some(id.to_string()),
        })
    }

    /// A viewer a trusted proxy named: their CSRF token is derived from
    /// their name (there is no session to keep one in).
    pub fn proxied(&self, principal: &str) -> Viewer {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.csrf_key)
            .expect("HMAC takes any key length");
        mac.update(b"csrf:");
        mac.update(principal.as_bytes());
        Viewer {
            principal: principal.to_string(),
            csrf: hex::encode(mac.finalize().into_bytes()),
            session: None,
        }
    }

    /// Ends a session: its cookie no longer signs anyone in.
    pub fn sign_out(&self, id: &str) {
        if let Ok(mut s) = self.sessions.lock() {
            s.remove(id);
        }
    }

    /// Sessions live now (for the metrics).
    pub fn live(&self) -> usize {
        let now = Instant::now();
        self.sessions
            .lock()
            .map(|s| s.values().filter(|v| v.expires > now).count())
            .unwrap_or(0)
    }

    #[cfg(test)]
    fn expire_all(&self) {
        if let Ok(mut s) = self.sessions.lock() {
            for v in s.values_mut() {
                v.expires = Instant::now();
            }
        }
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// The `Set-Cookie` value of a new session.
pub fn set_cookie(name: &str, id: &str, ttl: Duration, secure: bool) -> String {
    format!(
        "{name}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        ttl.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie(name: &str, secure: bool) -> String {
    format!(
        "{name}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        let mut secrets = BTreeMap::new();
        secrets.insert("AKIAQMALICE00000001".into(), "s3cret-s3cret-s3cret".into());
        Sessions::new(secrets, Duration::from_secs(60))
    }

    fn alice(key: &str) -> Option<String> {
        (key == "AKIAQMALICE00000001").then(|| "alice".to_string())
    }

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn a_right_secret_opens_a_session_and_signing_out_closes_it() {
        let s = sessions();
        let (id, viewer) = s
            .sign_in(HOME, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
            .expect("signed in");
        assert_eq!(viewer.principal, "alice");
        assert_eq!(s.viewer(&id), Some(viewer.clone()));
        assert_eq!(id.len(), 64, "an unguessable id");
        assert_ne!(viewer.csrf, id);
        s.sign_out(&id);
        assert_eq!(s.viewer(&id), None, "a session used after sign-out");
    }

    #[test]
    fn wrong_secrets_unknown_keys_and_forged_ids_are_refused_alike() {
        let s = sessions();
        for (key, secret) in [
            ("AKIAQMALICE00000001", "s3cret-s3cret-s3creT"),
            ("AKIAQMALICE00000001", ""),
            ("AKIAQMBOB0000000001", "s3cret-s3cret-s3cret"),
        ] {
            assert_eq!(
                s.sign_in(HOME, key, secret, alice).map(|_| ()),
                Err(SignInError::Refused)
            );
        }
        assert_eq!(s.viewer("0".repeat(64).as_str()), None);
    }

    #[test]
    fn an_expired_session_signs_no_one_in() {
        let s = sessions();
        let (id, _) = s
            .sign_in(HOME, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
            .expect("signed in");
        s.expire_all();
        assert_eq!(s.viewer(&id), None);
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn guessing_is_stopped_after_ten_failures_even_with_the_right_secret() {
        let s = sessions();
        for _ in 0..MAX_FAILURES {
            let _ = s.sign_in(HOME, "AKIAQMALICE00000001", "guess", alice);
        }
        assert_eq!(
            s.sign_in(HOME, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
                .map(|_| ()),
            Err(SignInError::TooMany)
        );
        let elsewhere: IpAddr = "10.0.0.9".parse().expect("ip");
        assert!(s
            .sign_in(
                elsewhere,
                "AKIAQMALICE00000001",
                "s3cret-s3cret-s3cret",
                alice
            )
            .is_ok());
    }

    #[test]
    fn cookies_are_read_by_name_and_set_strict() {
        assert_eq!(
            cookie("a=1; __Host-qm_session=abc; b=2", COOKIE),
            Some("abc")
        );
        assert_eq!(cookie("qm_session_x=abc", COOKIE_PLAIN), None);
        let set = set_cookie(COOKIE, "abc", Duration::from_secs(60), true);
        for part in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Max-Age=60",
            "Path=/",
        ] {
            assert!(set.contains(part), "{set}");
        }
    }

    #[test]
    fn a_proxied_viewer_has_a_stable_token_of_their_own() {
        let s = sessions();
        assert_eq!(s.proxied("alice").csrf, s.proxied("alice").csrf);
        assert_ne!(s.proxied("alice").csrf, s.proxied("bob").csrf);
        assert_ne!(sessions().proxied("alice").csrf, s.proxied("alice").csrf);
    }
}
