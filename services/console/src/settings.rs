//! The console's settings: file keys, `QM_CONSOLE_*` variables, checks.

use qm_service::settings::{Key, Spec};
use serde::{Deserialize, Serialize};

/// What `qm-console` is and every key of its settings: its `--help`, its
/// flags and the table in `docs/settings.md` come from here.
pub(crate) const SPEC: Spec = Spec {
    service: "console",
    about: "Serves Quartermaster's web console over HTTPS: every share's capacity, a job's attempts and why it waits with an estimated start, reclaim exposure, who borrowed from whom, the audit log and what-if, pushed live from the events stream. A person signs in with the access key and secret `qm auth` gave them (or through an authenticating proxy); everything shown and done is through the API as that person, with exactly their rights.",
    keys: &[
        Key {
            name: "tenancy",
            help: "required: the tenancy file (who may sign in, and what each may read)",
        },
        Key {
            name: "keysFile",
            help: "the access keys' secrets people sign in with, a YAML map <access key id>: {secret: ...} not readable by other users (the gateway-keys.yaml `qm auth` writes); empty: sign-in with keys is off (proxy sign-in only)",
        },
        Key {
            name: "listenAddress",
            help: "host:port the console is served on",
        },
        Key {
            name: "tlsCertFile",
            help: "a PEM certificate chain: serve HTTPS (with tlsKeyFile); required unless insecurePlainHttp",
        },
        Key {
            name: "tlsKeyFile",
            help: "that certificate's PEM private key",
        },
        Key {
            name: "insecurePlainHttp",
            help: "serve plain HTTP on a loopback address (for a TLS-terminating proxy on the same host); browsers keep Secure cookies only on localhost then",
        },
        Key {
            name: "publicOrigin",
            help: "the origin people open the console at (https://console.example.com): requests naming another host are refused, and a form must come from a page of this origin (against DNS rebinding and cross-site forms); empty: the Host each request names",
        },
        Key {
            name: "sessionMinutes",
            help: "how long a sign-in lasts, in minutes (the session cookie's expiry); 5 to 10080",
        },
        Key {
            name: "trustedProxyAddresses",
            help: "IP addresses of an authenticating proxy (a JSON list): a request from one of them may name its person in proxyUserHeader; from anywhere else that header is refused",
        },
        Key {
            name: "proxyUserHeader",
            help: "the header an authenticating proxy names the signed-in person in",
        },
        Key {
            name: "requestTimeoutMs",
            help: "how long a request made on NATS waits for its answer, in milliseconds",
        },
        Key {
            name: "pageSize",
            help: "jobs listed per page; 10 to 1000",
        },
        Key {
            name: "maxConnections",
            help: "connections served at once (more wait in the listen queue); 1 to 65536",
        },
        Key {
            name: "maxConnectionsPerClient",
            help: "connections from one IP address at once; more are closed as they arrive; 1 to maxConnections",
        },
    ],
    notes: "Sessions are kept in memory: a restart signs everyone out. Failed sign-ins are limited to 10 per address and access key, and 100 per address, in 5 minutes.",
};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Settings {
    pub(crate) tenancy: String,
    pub(crate) keys_file: String,
    pub(crate) listen_address: String,
    pub(crate) tls_cert_file: String,
    pub(crate) tls_key_file: String,
    pub(crate) insecure_plain_http: bool,
    pub(crate) public_origin: String,
    pub(crate) session_minutes: u64,
    pub(crate) trusted_proxy_addresses: Vec<String>,
    pub(crate) proxy_user_header: String,
    pub(crate) request_timeout_ms: u64,
    pub(crate) page_size: u32,
    pub(crate) max_connections: usize,
    pub(crate) max_connections_per_client: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tenancy: String::new(),
            keys_file: String::new(),
            listen_address: "127.0.0.1:9660".into(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            insecure_plain_http: false,
            public_origin: String::new(),
            session_minutes: 480,
            trusted_proxy_addresses: Vec::new(),
            proxy_user_header: "X-Forwarded-User".into(),
            request_timeout_ms: 10_000,
            page_size: 100,
            max_connections: 512,
            max_connections_per_client: 64,
        }
    }
}

impl Settings {
    /// The listener settings the console shares with the gateway.
    pub(crate) fn listener(&self) -> qm_service::http::Listener<'_> {
        qm_service::http::Listener {
            listen_address: &self.listen_address,
            tls_cert_file: &self.tls_cert_file,
            tls_key_file: &self.tls_key_file,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
        }
    }

    pub(crate) fn tls(&self) -> bool {
        self.listener().tls()
    }

    pub(crate) fn proxies(&self) -> Vec<std::net::IpAddr> {
        self.trusted_proxy_addresses
            .iter()
            .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
            .map(|a| a.to_canonical())
            .collect()
    }

    /// The host (and port) of `publicOrigin`, if set.
    pub(crate) fn public_host(&self) -> Option<&str> {
        self.public_origin
            .strip_prefix("https://")
            .or_else(|| self.public_origin.strip_prefix("http://"))
            .filter(|h| !h.is_empty())
    }
}

impl qm_service::settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.tenancy.is_empty() {
            p.push("tenancy: is required (the tenancy file)".into());
        }
        if self.keys_file.is_empty() && self.trusted_proxy_addresses.is_empty() {
            p.push("keysFile: is required unless trustedProxyAddresses names a proxy (else no one could sign in)".into());
        }
        let listener = self.listener();
        match listener.address(&mut p) {
            Some(a) if !self.tls() && !self.insecure_plain_http => p.push(format!(
                "tlsCertFile: the console serves HTTPS only (sessions are cookies); give tlsCertFile and tlsKeyFile, or insecurePlainHttp on a loopback address behind a TLS proxy (listenAddress {a})"
            )),
            Some(a) if !self.tls() && !a.ip().is_loopback() => p.push(format!(
                "insecurePlainHttp: only on a loopback address; listenAddress {a} is reachable from other hosts"
            )),
            _ => {}
        }
        if !self.public_origin.is_empty() {
            let ok = self.public_host().is_some_and(|h| {
                h.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                })
            });
            if !ok {
                p.push(format!(
                    "publicOrigin: {:?} is not an origin (https://host or https://host:port, no path)",
                    self.public_origin
                ));
            }
        }
        if !(5..=10_080).contains(&self.session_minutes) {
            p.push(format!(
                "sessionMinutes: {} is not 5 to 10080",
                self.session_minutes
            ));
        }
        for a in &self.trusted_proxy_addresses {
            if a.parse::<std::net::IpAddr>().is_err() {
                p.push(format!("trustedProxyAddresses: {a:?} is not an IP address"));
            }
        }
        let header_ok = !self.proxy_user_header.is_empty()
            && self
                .proxy_user_header
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !header_ok {
            p.push(format!(
                "proxyUserHeader: {:?} is not a header name (letters, digits, '-')",
                self.proxy_user_header
            ));
        }
        if self.request_timeout_ms == 0 {
            p.push("requestTimeoutMs: must be >= 1".into());
        }
        if !(10..=1000).contains(&self.page_size) {
            p.push(format!("pageSize: {} is not 10 to 1000", self.page_size));
        }
        listener.problems(&mut p);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_service::settings::Validate;

    #[test]
    fn https_is_required_and_plain_http_only_on_loopback() {
        let ok = Settings {
            tenancy: "t.yaml".into(),
            keys_file: "k.yaml".into(),
            tls_cert_file: "c.pem".into(),
            tls_key_file: "k.pem".into(),
            ..Settings::default()
        };
        assert!(ok.problems().is_empty(), "{:?}", ok.problems());
        let local = Settings {
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            insecure_plain_http: true,
            ..ok
        };
        assert!(local.problems().is_empty(), "{:?}", local.problems());
        let open = Settings {
            listen_address: "0.0.0.0:9660".into(),
            ..local
        };
        assert!(open
            .problems()
            .join("\n")
            .contains("only on a loopback address"));
        let bad = Settings {
            session_minutes: 1,
            trusted_proxy_addresses: vec!["proxy.local".into()],
            proxy_user_header: "X User".into(),
            public_origin: "https://console.example.com/path".into(),
            ..Settings::default()
        };
        let p = bad.problems().join("\n");
        for says in [
            "tenancy: is required",
            "the console serves HTTPS only",
            "sessionMinutes: 1",
            "\"proxy.local\" is not an IP address",
            "proxyUserHeader: \"X User\"",
            "publicOrigin: \"https://console.example.com/path\" is not an origin",
        ] {
            assert!(p.contains(says), "{says:?} not in {p}");
        }
    }
}

#[cfg(test)]
mod described {
    qm_service::settings_test!(super::Settings, super::SPEC);
}
