//! Requests: who is asking (session cookie, or a trusted proxy's header),
//! the CSRF check on every write, the routes, and the headers every answer
//! carries (a strict Content-Security-Policy, no caching of pages, no
//! framing). The pages people read are in `reads.rs`, the forms that
//! change something (and the what-if) in `changes.rs`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode};
use maud::Markup;
use qm_service::client::CallError;
use qm_wire::messages::{self as wire, ErrorCode};
use qm_wire::subjects::Operation;

use crate::pages::{self, Frame, Nav};
use crate::session::{self, SignInError, Viewer};
use crate::Console;

mod changes;
mod reads;

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

/// Every page's policy: only this origin's script and style, no inline
/// script or style, no plugins, no framing, forms post only here.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The largest form accepted.
const MAX_FORM_BYTES: usize = 8 * 1024;

/// How long a live poll waits for a change before answering "nothing".
const LIVE_WAIT: Duration = Duration::from_secs(25);

type Answer = Response<Full<Bytes>>;

/// An answer given instead of going on (boxed: a response is large).
type Refusal = Box<Answer>;

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn html(status: StatusCode, page: Markup) -> Answer {
    respond(status, "text/html; charset=utf-8", page.into_string())
}

fn redirect(to: &str, cookie: Option<String>) -> Answer {
    let mut r = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(v) = hyper::header::HeaderValue::from_str(to) {
        r.headers_mut().insert(hyper::header::LOCATION, v);
    }
    if let Some(c) = cookie.and_then(|c| hyper::header::HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(hyper::header::SET_COOKIE, c);
    }
    r
}

/// A form's fields (`application/x-www-form-urlencoded`).
pub fn form_fields(body: &[u8]) -> BTreeMap<String, String> {
    let text = String::from_utf8_lossy(body).replace('+', "%20");
    let mut out = BTreeMap::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if let (Some(k), Some(v)) = (qm_sigv4::percent_decode(k), qm_sigv4::percent_decode(v)) {
            out.insert(k, v);
        }
    }
    out
}

/// An API failure, as a status and a sentence for the person. Failures
/// to reach the services are logged, and told in general terms.
fn failure(e: &CallError) -> (StatusCode, String) {
    let status = match e.code() {
        Some(ErrorCode::AccessDenied) => StatusCode::FORBIDDEN,
        Some(ErrorCode::NotFound) => StatusCode::NOT_FOUND,
        Some(ErrorCode::Invalid | ErrorCode::Conflict) => StatusCode::BAD_REQUEST,
        Some(_) => StatusCode::BAD_GATEWAY,
        None => StatusCode::BAD_GATEWAY,
    };
    match e {
        CallError::Api(_) => (status, e.to_string()),
        _ => {
            tracing::warn!(error = %e, "an API call failed");
            (
                status,
                "Quartermaster did not answer in time: try again in a moment.".into(),
            )
        }
    }
}

impl Console {
    /// Answers one request, timed and counted.
    pub(crate) async fn answer(&self, req: Request<hyper::body::Incoming>) -> Answer {
        let started = std::time::Instant::now();
        let (route, answer) = self.route(req).await;
        let status = answer.status().as_u16().to_string();
        self.metrics
            .requests
            .with_label_values(&[route, &status])
            .inc();
        self.metrics
            .duration
            .with_label_values(&[route])
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .sessions
            .with_label_values::<&str>(&[])
            .set(self.sessions.live() as f64);
        answer
    }

    fn secure(&self) -> bool {
        self.settings.tls()
    }

    /// Always `__Host-` and Secure: behind a TLS proxy the browser sees
    /// HTTPS, and browsers keep Secure cookies on http://localhost too.
    fn cookie_name(&self) -> &'static str {
        session::COOKIE
    }

    /// Who is asking: a trusted proxy's header, or a live session. Err: the
    /// answer to give instead (the sign-in page, or a refusal).
    fn viewer(
        &self,
        req: &Request<hyper::body::Incoming>,
        peer: Option<IpAddr>,
    ) -> Result<Viewer, Refusal> {
        let header = &self.settings.proxy_user_header;
        let named_all: Vec<&hyper::header::HeaderValue> =
            req.headers().get_all(header.as_str()).iter().collect();
        if let Some(named) = named_all.first().copied() {
            let trusted = peer.is_some_and(|p| self.proxies.contains(&p.to_canonical()))
                && named_all.len() == 1;
            if !trusted {
                tracing::warn!(?peer, header = %header, "a proxy header from an address that is not a trusted proxy: refused");
                return Err(Box::new(html(
                    StatusCode::FORBIDDEN,
                    pages::sign_in(
                        Some(&format!(
                            "The {header} header is accepted only from the authenticating proxy, and this request did not come from it."
                        )),
                        self.sessions_off(),
                    ),
                )));
            }
            let named = named.to_str().unwrap_or_default();
            return match self.tenancy.get().console_speaks_for(named) {
                Ok(_) => Ok(self.sessions.proxied(named)),
                Err(e) => Err(Box::new(html(
                    StatusCode::FORBIDDEN,
                    pages::sign_in(Some(&e.to_string()), self.sessions_off()),
                ))),
            };
        }
        let cookies = req
            .headers()
            .get_all(hyper::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|c| session::cookie(c, self.cookie_name()).map(str::to_string));
        let tenancy = self.tenancy.get();
        let acts_for = |key: &str, principal: &str| {
            tenancy.access_key_principal(key) == Some(principal)
                && tenancy.console_speaks_for(principal).is_ok()
        };
        match cookies.and_then(|id| self.sessions.viewer(&id, acts_for)) {
            Some(v) => Ok(v),
            None if req.method() == Method::GET => Err(Box::new(redirect("/sign-in", None))),
            None => Err(Box::new(html(
                StatusCode::UNAUTHORIZED,
                pages::sign_in(
                    Some("Your session has ended: sign in again."),
                    self.sessions_off(),
                ),
            ))),
        }
    }

    fn sessions_off(&self) -> bool {
        self.settings.keys_file.is_empty()
    }

    async fn read_form(
        &self,
        req: Request<hyper::body::Incoming>,
    ) -> Result<BTreeMap<String, String>, Refusal> {
        let too_large = || {
            respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                "text/plain; charset=utf-8",
                format!("a form larger than {MAX_FORM_BYTES} bytes"),
            )
        };
        let mut body = req.into_body();
        let mut bytes = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else {
                    return Err(());
                };
                if let Ok(data) = frame.into_data() {
                    if bytes.len() + data.len() > MAX_FORM_BYTES {
                        return Err(());
                    }
                    bytes.extend_from_slice(&data);
                }
            }
            Ok(())
        })
        .await;
        match read {
            Ok(Ok(())) => Ok(form_fields(&bytes)),
            _ => Err(Box::new(too_large())),
        }
    }

    /// A form posted from another site's page: browsers name the page's
    /// origin, which must be this console's (login CSRF, and a second
    /// guard behind the token on every other form).
    fn foreign_origin(&self, req: &Request<hyper::body::Incoming>) -> bool {
        let Some(origin) = req.headers().get(hyper::header::ORIGIN) else {
            return false;
        };
        let origin = origin.to_str().unwrap_or("null");
        if !self.settings.public_origin.is_empty() {
            return origin != self.settings.public_origin.trim_end_matches('/');
        }
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        // Plain HTTP is served behind a TLS proxy: the page's origin is
        // https (or http on localhost).
        let https = format!("https://{host}");
        let http = format!("http://{host}");
        origin != https && (self.secure() || origin != http)
    }

    /// A request naming a host other than `publicOrigin`'s (DNS rebinding).
    fn foreign_host(&self, req: &Request<hyper::body::Incoming>) -> bool {
        let Some(public) = self.settings.public_host() else {
            return false;
        };
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        !host.eq_ignore_ascii_case(public)
    }

    async fn route(&self, req: Request<hyper::body::Incoming>) -> (&'static str, Answer) {
        let peer = req
            .extensions()
            .get::<qm_service::http::Peer>()
            .map(|p| p.0.ip());
        if self.foreign_host(&req) {
            tracing::warn!(?peer, "a request for another host name: refused");
            return (
                "unauthenticated",
                respond(
                    StatusCode::MISDIRECTED_REQUEST,
                    "text/plain; charset=utf-8",
                    "refused: this console answers only at its public origin",
                ),
            );
        }
        if req.method() == Method::POST && self.foreign_origin(&req) {
            tracing::warn!(?peer, "a form posted from another site: refused");
            return (
                "write",
                respond(
                    StatusCode::FORBIDDEN,
                    "text/plain; charset=utf-8",
                    "refused: this form was posted from another site",
                ),
            );
        }
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query = form_fields(req.uri().query().unwrap_or("").as_bytes());
        match (&method, path.as_str()) {
            (&Method::GET, "/assets/console.css") => {
                return (
                    "asset",
                    respond(StatusCode::OK, "text/css; charset=utf-8", CSS),
                )
            }
            (&Method::GET, "/assets/console.js") => {
                return (
                    "asset",
                    respond(StatusCode::OK, "text/javascript; charset=utf-8", JS),
                )
            }
            (&Method::GET, "/sign-in") => {
                return (
                    "sign-in",
                    html(StatusCode::OK, pages::sign_in(None, self.sessions_off())),
                )
            }
            (&Method::POST, "/sign-in") => {
                let form = match self.read_form(req).await {
                    Ok(f) => f,
                    Err(a) => return ("sign-in", *a),
                };
                return ("sign-in", self.sign_in(peer, &form));
            }
            _ => {}
        }
        let viewer = match self.viewer(&req, peer) {
            Ok(v) => v,
            Err(answer) => return ("unauthenticated", *answer),
        };
        let Some(caller) = self.tenancy.get().caller(&viewer.principal) else {
            return ("unauthenticated", redirect("/sign-in", None));
        };
        let segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| qm_sigv4::percent_decode(s).unwrap_or_default())
            .collect();
        let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
        let form = if method == Method::POST {
            let form = match self.read_form(req).await {
                Ok(f) => f,
                Err(a) => return ("write", *a),
            };
            let token = form.get("csrf").map(String::as_str).unwrap_or_default();
            if !session::same(token.as_bytes(), viewer.csrf.as_bytes()) {
                tracing::warn!(principal = %viewer.principal, %path, "a write without the right CSRF token: refused");
                return (
                    "write",
                    respond(
                        StatusCode::FORBIDDEN,
                        "text/plain; charset=utf-8",
                        "refused: this form did not come from a console page (its CSRF token is missing or wrong); reload the page and try again",
                    ),
                );
            }
            Some(form)
        } else {
            None
        };
        let cx = Cx {
            viewer: &viewer,
            role: caller.role.clone(),
            caller,
            live_since: self.live.last(),
        };
        match (method, seg.as_slice(), form) {
            (Method::GET, [], None) => ("root", redirect("/queues", None)),
            (Method::GET, ["queues"], None) => ("queues", self.queues_page(&cx).await),
            (Method::GET, ["queues", q], None) => ("queue", self.queue_page(&cx, q).await),
            (Method::GET, ["queues", q, "shares", s], None) => {
                ("share", self.share_page(&cx, q, s, &query).await)
            }
            (Method::GET, ["queues", q, "flows"], None) => ("flows", self.flows_page(&cx, q).await),
            (Method::GET, ["queues", q, "what-if"], None) => {
                ("what-if", self.what_if_page(&cx, q, None).await)
            }
            (Method::POST, ["queues", q, "what-if"], Some(form)) => {
                ("what-if", self.what_if_page(&cx, q, Some(&form)).await)
            }
            (Method::POST, ["queues", q, "what-if", "limit"], Some(form)) => {
                ("what-if", self.what_if_page(&cx, q, Some(&form)).await)
            }
            (Method::GET, ["jobs", id], None) => ("job", self.job_page(&cx, id).await),
            (Method::POST, ["jobs", id, "priority"], Some(form)) => {
                ("write", self.change_priority(&cx, id, &form).await)
            }
            (Method::POST, ["jobs", id, "terminate"], Some(form)) => {
                ("write", self.terminate(&cx, id, &form).await)
            }
            (Method::GET, ["audit"], None) => ("audit", self.audit_page(&cx, &query).await),
            (Method::GET, ["live"], None) => ("live", self.live_poll(&cx, &query).await),
            (Method::POST, ["sign-out"], Some(_)) => ("sign-out", self.sign_out(&viewer)),
            _ => (
                "not-found",
                self.framed(
                    &cx,
                    StatusCode::NOT_FOUND,
                    "Not found",
                    Nav::Queues,
                    None,
                    pages::problem("Not found", &format!("There is no page at {path}.")),
                ),
            ),
        }
    }
}

/// One request's viewer.
struct Cx<'a> {
    viewer: &'a Viewer,
    caller: wire::Caller,
    role: String,
    live_since: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_decoded_with_plus_as_space_and_escapes() {
        let f = form_fields(b"csrf=ab%2Fc&reason=out+of+budget&empty=&x%3Dy=1");
        assert_eq!(f["csrf"], "ab/c");
        assert_eq!(f["reason"], "out of budget");
        assert_eq!(f["empty"], "");
        assert_eq!(f["x=y"], "1");
    }

    #[test]
    fn the_policy_allows_no_inline_script_and_no_other_origin() {
        assert!(CSP.contains("script-src 'self'"));
        assert!(!CSP.contains("unsafe-inline"));
        assert!(CSP.contains("frame-ancestors 'none'"));
        assert!(CSP.contains("default-src 'none'"));
    }
}
