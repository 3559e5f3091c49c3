//! Who is looking: sign-in with an access key and its secret, sessions
//! (an unguessable id in an HttpOnly, Secure, SameSite=Strict cookie, kept
//! in memory with an expiry), a proxy's header believed only from the
//! proxy's address, a CSRF token per viewer, and a limit on failed
//! sign-ins per address and key.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The session cookie's name (the `__Host-` prefix makes browsers keep it
/// only when Secure, for this host and path `/`).
pub const COOKIE: &str = "__Host-qm_session";

/// Failed sign-ins allowed per address and access key per
/// [`FAILURE_WINDOW`] (so a guesser behind a shared proxy address locks
/// out only the key it guesses, not everyone).
pub const MAX_FAILURES: u32 = 10;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(300);
/// Failed sign-ins allowed per address, whatever keys they name.
pub const MAX_FAILURES_PER_ADDRESS: u32 = 100;
/// Addresses and keys whose failures are remembered at most; when full,
/// sign-ins from addresses and keys not in it are refused until entries
/// age out (failing closed: flooding it never frees a guesser's entry).
pub const MAX_FAILURE_ENTRIES: usize = 10_000;
/// Sessions one person may hold (a new one ends their oldest).
pub const MAX_SESSIONS_PER_PERSON: usize = 20;
/// Sessions held at most (a new one ends the one closest to expiry).
pub const MAX_SESSIONS: usize = 100_000;

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
    /// The access key it was signed in with: the session ends when the
    /// key stops acting for its principal (ADR 0020).
    key_id: String,
    csrf: String,
    expires: Instant,
}

/// Sign-ins and sessions.
pub struct Sessions {
    ttl: Duration,
    /// Access key id -> secret (the keys file, followed).
    secrets: qm_service::tenancy::KeysFile,
    sessions: Mutex<HashMap<String, Session>>,
    /// (address, access key id) -> failures since.
    failures: Mutex<HashMap<(IpAddr, String), (u32, Instant)>>,
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
    pub fn new(secrets: qm_service::tenancy::KeysFile, ttl: Duration) -> Sessions {
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
        // IPv6 clients are counted per /64, as one host may hold all of it.
        let from = match from.to_canonical() {
            IpAddr::V6(v6) => {
                let mut o = v6.octets();
                o[8..].fill(0);
                IpAddr::V6(o.into())
            }
            v4 => v4,
        };
        let who = (from, key_id.chars().take(128).collect::<String>());
        // Every failure from the address, whatever key it named ("*" is no
        // access key id).
        let address = (from, "*".to_string());
        if let Ok(mut f) = self.failures.lock() {
            f.retain(|_, (_, since)| now.duration_since(*since) < FAILURE_WINDOW);
            let full = f.len() >= MAX_FAILURE_ENTRIES
                && !(f.contains_key(&who) && f.contains_key(&address));
            if full
                || f.get(&who).is_some_and(|(n, _)| *n >= MAX_FAILURES)
                || f.get(&address)
                    .is_some_and(|(n, _)| *n >= MAX_FAILURES_PER_ADDRESS)
            {
                return Err(SignInError::TooMany);
            }
        }
        let secrets = self.secrets.get();
        let known = secrets.get(key_id);
        // Compared even for an unknown key, so timing says nothing of it.
        let expected = known.map_or("-", String::as_str);
        let secret_ok = same(expected.as_bytes(), secret.as_bytes()) && known.is_some();
        let principal = principal_of(key_id).filter(|_| secret_ok);
        let Some(principal) = principal else {
            if let Ok(mut f) = self.failures.lock() {
                for k in [who, address] {
                    if f.len() < MAX_FAILURE_ENTRIES || f.contains_key(&k) {
                        f.entry(k).or_insert((0, now)).0 += 1;
                    }
                }
            }
            return Err(SignInError::Refused);
        };
        let id = random_hex();
        let csrf = random_hex();
        if let Ok(mut s) = self.sessions.lock() {
            s.retain(|_, v| v.expires > now);
            // A person's oldest session ends past their limit, and the one
            // closest to expiry past the console's.
            let mine: Vec<(Instant, String)> = s
                .iter()
                .filter(|(_, v)| v.principal == principal)
                .map(|(k, v)| (v.expires, k.clone()))
                .collect();
            if mine.len() >= MAX_SESSIONS_PER_PERSON {
                if let Some((_, oldest)) = mine.into_iter().min() {
                    s.remove(&oldest);
                }
            }
            if s.len() >= MAX_SESSIONS {
                let first = s
                    .iter()
                    .min_by_key(|(_, v)| v.expires)
                    .map(|(k, _)| k.clone());
                if let Some(first) = first {
                    s.remove(&first);
                }
            }
            s.insert(
                id.clone(),
                Session {
                    principal: principal.clone(),
                    key_id: key_id.to_string(),
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

    /// The viewer a session id belongs to, if it is live: not expired,
    /// its key still in the keys file, and `acts_for(key, principal)`
    /// (the tenancy in effect still maps the key to the person). A session
    /// that fails either has ended, and is dropped.
    pub fn viewer(&self, id: &str, acts_for: impl Fn(&str, &str) -> bool) -> Option<Viewer> {
        let mut s = self.sessions.lock().ok()?;
        let session = s.get(id)?;
        let live = session.expires > Instant::now()
            && self.secrets.get().contains_key(&session.key_id)
            && acts_for(&session.key_id, &session.principal);
        if !live {
            if let Some(ended) = s.remove(id) {
                tracing::info!(principal = %ended.principal, key = %ended.key_id, "a console session ended (expired, or its key no longer acts for its principal)");
            }
            return None;
        }
        Some(Viewer {
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

    /// Sessions held now, expired ones not yet dropped included (for the
    /// metrics; counted without a scan).
    pub fn live(&self) -> usize {
        self.sessions.lock().map(|s| s.len()).unwrap_or(0)
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

/// The `Set-Cookie` value of a new session: always Secure (behind a TLS
/// proxy the browser sees HTTPS; browsers keep Secure cookies on
/// http://localhost too), as its `__Host-` name requires.
pub fn set_cookie(name: &str, id: &str, ttl: Duration) -> String {
    format!(
        "{name}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict; Secure",
        ttl.as_secs()
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie(name: &str) -> String {
    format!("{name}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict; Secure")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sessions() -> Sessions {
        let mut secrets = BTreeMap::new();
        secrets.insert("AKIAQMALICE00000001".into(), "s3cret-s3cret-s3cret".into());
        Sessions::new(
            qm_service::tenancy::KeysFile::fixed(secrets),
            Duration::from_secs(60),
        )
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
        assert_eq!(s.viewer(&id, |_, _| true), Some(viewer.clone()));
        assert_eq!(id.len(), 64, "an unguessable id");
        assert_ne!(viewer.csrf, id);
        s.sign_out(&id);
        assert_eq!(
            s.viewer(&id, |_, _| true),
            None,
            "a session used after sign-out"
        );
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
        assert_eq!(s.viewer("0".repeat(64).as_str(), |_, _| true), None);
    }

    #[test]
    fn a_session_ends_when_its_key_stops_acting_for_its_person() {
        let s = sessions();
        let (id, _) = s
            .sign_in(HOME, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
            .expect("signed in");
        let seen = std::cell::RefCell::new(Vec::new());
        let revoked = s.viewer(&id, |key, who| {
            seen.borrow_mut().push((key.to_string(), who.to_string()));
            false
        });
        assert_eq!(revoked, None, "the tenancy no longer maps the key to alice");
        assert_eq!(
            seen.into_inner(),
            vec![("AKIAQMALICE00000001".to_string(), "alice".to_string())],
            "asked about the key the session was signed in with"
        );
        assert_eq!(
            s.viewer(&id, |_, _| true),
            None,
            "an ended session stays ended when the key acts for her again"
        );
        // A key gone from the keys file ends its sessions too.
        let gone = Sessions::new(
            qm_service::tenancy::KeysFile::fixed(BTreeMap::new()),
            Duration::from_secs(60),
        );
        gone.sessions.lock().expect("lock").insert(
            "x".into(),
            Session {
                principal: "alice".into(),
                key_id: "AKIAQMALICE00000001".into(),
                csrf: "c".into(),
                expires: Instant::now() + Duration::from_secs(60),
            },
        );
        assert_eq!(gone.viewer("x", |_, _| true), None);
    }

    #[test]
    fn an_expired_session_signs_no_one_in() {
        let s = sessions();
        let (id, _) = s
            .sign_in(HOME, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
            .expect("signed in");
        s.expire_all();
        assert_eq!(s.viewer(&id, |_, _| true), None);
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
            .is_ok()); // The same address as IPv4-mapped IPv6 is the same address.
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("ip");
        assert_eq!(
            s.sign_in(mapped, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
                .map(|_| ()),
            Err(SignInError::TooMany)
        );
    }

    #[test]
    fn a_guesser_behind_a_shared_address_locks_out_only_the_key_it_guesses() {
        let mut secrets = BTreeMap::new();
        secrets.insert("AKIAQMALICE00000001".into(), "s3cret-s3cret-s3cret".into());
        secrets.insert("AKIAQMBOB0000000001".into(), "b0b-s3cret-b0b-s3cret".into());
        let s = Sessions::new(
            qm_service::tenancy::KeysFile::fixed(secrets),
            Duration::from_secs(60),
        );
        let both = |k: &str| match k {
            "AKIAQMALICE00000001" => Some("alice".to_string()),
            "AKIAQMBOB0000000001" => Some("bob".to_string()),
            _ => None,
        };
        for _ in 0..MAX_FAILURES {
            let _ = s.sign_in(HOME, "AKIAQMALICE00000001", "guess", both);
        }
        assert!(s
            .sign_in(HOME, "AKIAQMBOB0000000001", "b0b-s3cret-b0b-s3cret", both)
            .is_ok());
    }

    #[test]
    fn one_address_guessing_many_keys_is_stopped_too() {
        let s = sessions();
        for i in 0..MAX_FAILURES_PER_ADDRESS {
            let _ = s.sign_in(HOME, &format!("AKIAQMGUESS{i:08}"), "guess", alice);
        }
        assert_eq!(
            s.sign_in(HOME, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
                .map(|_| ()),
            Err(SignInError::TooMany)
        );
    }

    #[test]
    fn a_person_holds_at_most_twenty_sessions_the_oldest_ending_first() {
        let s = sessions();
        let mut ids = Vec::new();
        for _ in 0..MAX_SESSIONS_PER_PERSON + 5 {
            let (id, _) = s
                .sign_in(HOME, "AKIAQMALICE00000001", "s3cret-s3cret-s3cret", alice)
                .expect("signed in");
            ids.push(id);
        }
        assert_eq!(s.live(), MAX_SESSIONS_PER_PERSON);
        assert!(
            s.viewer(&ids[ids.len() - 1], |_, _| true).is_some(),
            "the newest lives"
        );
    }

    #[test]
    fn cookies_are_read_by_name_and_set_strict() {
        assert_eq!(
            cookie("a=1; __Host-qm_session=abc; b=2", COOKIE),
            Some("abc")
        );
        assert_eq!(cookie("__Host-qm_session_x=abc", COOKIE), None);
        let set = set_cookie(COOKIE, "abc", Duration::from_secs(60));
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
