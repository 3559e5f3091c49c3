//! The gateway's settings: file keys, `QM_GATEWAY_*` variables, checks;
//! and its keys file.

use qm_service::settings::{Key, Spec};

use serde::{Deserialize, Serialize};

/// What `qm-gateway` is and every key of its settings: its `--help`, its
/// flags and the tables in `docs/settings.md` come from here.
pub(crate) const SPEC: Spec = Spec {
    service: "gateway",
    about: "Speaks AWS Batch's HTTP API (restJson1, service model 2016-08-10) for service jobs, quota shares, job queues, scheduling policies and service environments, so boto3, the AWS CLI and the AWS SDKs work unchanged with --endpoint-url. Every request must be signed (SigV4) with an access key the tenancy file maps to a principal; it is then made on NATS for that principal, with exactly its rights.",
    keys: &[
        Key {
            name: "tenancy",
            help: "required: the tenancy file (its awsAccessKeys map access keys to principals)",
        },
        Key {
            name: "keysFile",
            help: "required: the secrets, a YAML map <access key id>: {secret: ...}, not readable by other users (mode 0600)",
        },
        Key {
            name: "listenAddress",
            help: "host:port the API is served on",
        },
        Key {
            name: "tlsCertFile",
            help: "a PEM certificate chain: serve HTTPS (with tlsKeyFile)",
        },
        Key {
            name: "tlsKeyFile",
            help: "that certificate's PEM private key",
        },
        Key {
            name: "insecurePlainHttp",
            help: "allow plain HTTP on a non-loopback address (request bodies would travel in clear); refused by default",
        },
        Key {
            name: "region",
            help: "the region clients sign for and ARNs carry (lowercase letters, digits and -)",
        },
        Key {
            name: "accountId",
            help: "the account id ARNs carry (12 digits)",
        },
        Key {
            name: "trainingImages",
            help: "no longer a setting: refused by name (which images a share may run is its imagePrefixes)",
        },
        Key {
            name: "hostCommandImages",
            help: "TrainingImage values that stand for the host runtime (a JSON list): a job naming one runs its ContainerEntrypoint as a host command; every other image runs in the container runtime, if its share's imagePrefixes allow it",
        },
        Key {
            name: "maxBodyBytes",
            help: "the largest request body accepted, in bytes; 1024 to 67108864",
        },
        Key {
            name: "maxBodiesInFlightBytes",
            help: "the bytes of request bodies held at once, counted as they arrive; a request whose bytes would pass it is answered 429 and the rest of its body is not read; at least maxBodyBytes",
        },
        Key {
            name: "maxConnections",
            help: "connections served at once (more wait in the listen queue); 1 to 65536",
        },
        Key {
            name: "maxConnectionsPerClient",
            help: "connections from one IP address at once; more are closed as they arrive; 1 to maxConnections",
        },
        Key {
            name: "headerReadTimeoutSeconds",
            help: "a request's headers (and an idle connection's next request) must arrive within this many seconds; 1 to 300",
        },
        Key {
            name: "bodyReadTimeoutSeconds",
            help: "a request's body must arrive within this many seconds (else 408); 1 to 300",
        },
        Key {
            name: "requestTimeoutMs",
            help: "how long a request made on NATS waits for its answer, in milliseconds",
        },
        Key {
            name: "streamReplicas",
            help: "copies JetStream keeps of the gateway's buckets: 1 for a single server, 3 for a cluster; 1 to 5",
        },
        Key {
            name: "jobRecordDays",
            help: "how long a job's AWS request and tags are kept, in days; 1 to 3650",
        },
    ],
    notes: "On SIGTERM the gateway answers /readyz 503 and keeps serving for 3 seconds (so load balancers stop routing to it), then stops accepting connections and lets the requests in flight finish (at most 20 seconds).",
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
    pub(crate) region: String,
    pub(crate) account_id: String,
    /// No longer a setting (the share's `imagePrefixes` are): kept only to
    /// refuse it by name, so an installation that restricted images here
    /// is not silently opened.
    pub(crate) training_images: Vec<String>,
    pub(crate) host_command_images: Vec<String>,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_bodies_in_flight_bytes: usize,
    pub(crate) max_connections: usize,
    pub(crate) max_connections_per_client: usize,
    pub(crate) header_read_timeout_seconds: u64,
    pub(crate) body_read_timeout_seconds: u64,
    pub(crate) request_timeout_ms: u64,
    pub(crate) stream_replicas: usize,
    pub(crate) job_record_days: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tenancy: String::new(),
            keys_file: String::new(),
            listen_address: "127.0.0.1:9650".into(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            insecure_plain_http: false,
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            training_images: Vec::new(),
            host_command_images: Vec::new(),
            max_body_bytes: 1 << 20,
            max_bodies_in_flight_bytes: 32 << 20,
            max_connections: 512,
            max_connections_per_client: 64,
            header_read_timeout_seconds: 10,
            body_read_timeout_seconds: 10,
            request_timeout_ms: 10_000,
            stream_replicas: 1,
            job_record_days: 30,
        }
    }
}

impl Settings {
    /// The listener settings the gateway shares with the console.
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
}

impl qm_service::settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.tenancy.is_empty() {
            p.push("tenancy: is required (the tenancy file, with awsAccessKeys)".into());
        }
        if self.keys_file.is_empty() {
            p.push("keysFile: is required (<access key id>: {secret: ...}, mode 0600)".into());
        }
        if !self.training_images.is_empty() {
            p.push("trainingImages: is no longer a gateway setting; list the images each share may run in its imagePrefixes (qm apply), and remove this".into());
        }
        let listener = self.listener();
        match listener.address(&mut p) {
            Some(a) if !a.ip().is_loopback() && !self.tls() && !self.insecure_plain_http => {
                p.push(format!(
                    "listenAddress: {a} is reachable from other hosts: give tlsCertFile and tlsKeyFile (or set insecurePlainHttp for a network you trust)"
                ))
            }
            _ => {}
        }
        let region_ok = !self.region.is_empty()
            && self
                .region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !region_ok {
            p.push(format!(
                "region: {:?} is not a region name (lowercase letters, digits, '-')",
                self.region
            ));
        }
        if self.account_id.len() != 12 || !self.account_id.bytes().all(|b| b.is_ascii_digit()) {
            p.push(format!("accountId: {:?} is not 12 digits", self.account_id));
        }
        if !(1024..=64 << 20).contains(&self.max_body_bytes) {
            p.push(format!(
                "maxBodyBytes: {} is not 1024 to 67108864",
                self.max_body_bytes
            ));
        }
        if self.max_bodies_in_flight_bytes < self.max_body_bytes {
            p.push(format!(
                "maxBodiesInFlightBytes: {} is less than maxBodyBytes ({}): no largest request could ever be read",
                self.max_bodies_in_flight_bytes, self.max_body_bytes
            ));
        }
        listener.problems(&mut p);
        for (name, v) in [
            ("headerReadTimeoutSeconds", self.header_read_timeout_seconds),
            ("bodyReadTimeoutSeconds", self.body_read_timeout_seconds),
        ] {
            if !(1..=300).contains(&v) {
                p.push(format!("{name}: {v} is not 1 to 300"));
            }
        }
        if self.request_timeout_ms == 0 {
            p.push("requestTimeoutMs: must be >= 1".into());
        }
        if !(1..=5).contains(&self.stream_replicas) {
            p.push(format!(
                "streamReplicas: {} is not 1 to 5",
                self.stream_replicas
            ));
        }
        if !(1..=3650).contains(&self.job_record_days) {
            p.push(format!(
                "jobRecordDays: {} is not 1 to 3650",
                self.job_record_days
            ));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_service::settings::Validate;

    #[test]
    fn plain_http_beyond_loopback_and_bad_names_are_refused() {
        let ok = Settings {
            tenancy: "t.yaml".into(),
            keys_file: "k.yaml".into(),
            ..Settings::default()
        };
        assert!(ok.problems().is_empty(), "{:?}", ok.problems());
        let open = Settings {
            listen_address: "0.0.0.0:9650".into(),
            region: "EU West".into(),
            account_id: "12".into(),
            tls_key_file: "key.pem".into(),
            ..Settings::default()
        };
        let p = open.problems().join("\n");
        for says in [
            "tenancy: is required",
            "keysFile: is required",
            "reachable from other hosts: give tlsCertFile and tlsKeyFile",
            "give both or neither",
            "region: \"EU West\"",
            "accountId: \"12\" is not 12 digits",
        ] {
            assert!(p.contains(says), "{says:?} not in {p}");
        }
    }
}

#[cfg(test)]
mod described {
    qm_service::settings_test!(super::Settings, super::SPEC);
}
