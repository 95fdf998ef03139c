//! Streamable HTTP: MCP at `/mcp` (rmcp's streamable HTTP service) beside `/health`,
//! `/health/ready`, `/metrics` (Prometheus text) and `/status` (index status JSON), on hyper.
//!
//! Every request's `Host` must be in the host allowlist and its `Origin`, when present, in the
//! origin allowlist (DNS-rebinding protection); others get 403. rmcp is configured with the same
//! lists and caps request bodies.
//!
//! Resource bounds ("never hang"): request headers must arrive within `header_timeout`
//! (hyper closes the connection otherwise) and a `POST /mcp` body within `body_timeout`
//! (408 otherwise: a lying `Content-Length` does not hold a connection); at most
//! `max_sessions` MCP sessions exist at once: an `initialize` over the cap gets 503 with
//! `Retry-After` (no eviction: a flood cannot push out the sessions of working clients);
//! sessions idle for `session_idle` are closed; tool calls are capped by the server
//! ([`Server::busy`]: 503 with `Retry-After` when every slot is taken as a call arrives).
//!
//! Authentication: with a token (`--token-file`, required for `--allow-remote`), every request
//! but `/health` needs `Authorization: Bearer <token>`; others get 401 with
//! `WWW-Authenticate`. The token is compared as a blake3 hash in constant time.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::mcp::Server;
use engine::tools::status::StatusArgs;

/// Default cap on request bodies (MCP messages are small; 1 MiB leaves room for code).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default cap on MCP sessions open at once.
pub const DEFAULT_MAX_SESSIONS: usize = 64;
/// Default idle time after which an MCP session is closed, in seconds.
pub const DEFAULT_SESSION_IDLE_SECS: f64 = 120.0;
/// Default time allowed for a request's headers, in seconds.
pub const DEFAULT_HEADER_TIMEOUT_SECS: f64 = 10.0;
/// Default time allowed for a request's body, in seconds.
pub const DEFAULT_BODY_TIMEOUT_SECS: f64 = 10.0;
/// Shortest accepted bearer token.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The bearer token clients must present, kept only as its blake3 hash.
#[derive(Clone)]
pub struct Token(blake3::Hash);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("reading the token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the token file {path} can be read or written by other users (mode {mode:o}); \
         run `chmod 600 {path}`"
    )]
    Permissions { path: String, mode: u32 },
    #[error(
        "the token in {path} is {len} characters; use at least {MIN_TOKEN_CHARS} random \
         characters (e.g. `openssl rand -hex 32 > {path}`)"
    )]
    TooShort { path: String, len: usize },
}

impl Token {
    /// A token from its text (surrounding whitespace and newlines are not part of it).
    pub fn new(token: &str) -> Token {
        Token(blake3::hash(token.trim().as_bytes()))
    }

    /// Reads the token from `path`: a file only its owner may read or write (unix mode
    /// `0600` or stricter), holding at least [`MIN_TOKEN_CHARS`] characters.
    pub fn from_file(path: &Path) -> Result<Token, TokenError> {
        let shown = path.display().to_string();
        let read_err = |source| TokenError::Read {
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read_err)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(TokenError::Permissions { path: shown, mode });
            }
        }
        #[cfg(not(unix))]
        let _ = meta;
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        let len = text.trim().chars().count();
        if len < MIN_TOKEN_CHARS {
            return Err(TokenError::TooShort { path: shown, len });
        }
        Ok(Token::new(&text))
    }

    /// Whether an `Authorization` header value carries this token (constant-time comparison
    /// of the hashes).
    pub fn accepts(&self, authorization: Option<&str>) -> bool {
        let Some(v) = authorization else {
            return false;
        };
        let Some((scheme, cred)) = v.trim().split_once(' ') else {
            return false;
        };
        // blake3::Hash's equality is constant-time.
        scheme.eq_ignore_ascii_case("bearer") && blake3::hash(cred.trim().as_bytes()) == self.0
    }
}

/// Settings of the HTTP transport.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Allowed `Host` header values: `host` (any port) or `host:port`.
    pub allowed_hosts: Vec<String>,
    /// Allowed `Origin` header values (`scheme://host:port`); requests without `Origin` pass.
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// Cap on MCP sessions open at once (an `initialize` beyond it gets 503).
    pub max_sessions: usize,
    /// An MCP session with no traffic for this long is closed.
    pub session_idle: Duration,
    /// Time allowed for a request's headers (the connection is closed after it).
    pub header_timeout: Duration,
    /// Time allowed for a `POST /mcp` body (408 after it).
    pub body_timeout: Duration,
    /// When set, every request but `/health` must carry `Authorization: Bearer <token>`.
    pub token: Option<Token>,
}

impl HttpConfig {
    /// Loopback names on the bound port, plus `extra_hosts` / `extra_origins`.
    pub fn for_addr(addr: SocketAddr, extra_hosts: &[String], extra_origins: &[String]) -> Self {
        let p = addr.port();
        let mut allowed_hosts = vec![
            format!("127.0.0.1:{p}"),
            format!("localhost:{p}"),
            format!("[::1]:{p}"),
        ];
        let ip = addr.ip().to_string();
        if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
            allowed_hosts.push(if addr.is_ipv6() {
                format!("[{ip}]:{p}")
            } else {
                format!("{ip}:{p}")
            });
        }
        allowed_hosts.extend(extra_hosts.iter().cloned());
        let mut allowed_origins = vec![
            format!("http://127.0.0.1:{p}"),
            format!("http://localhost:{p}"),
            format!("http://[::1]:{p}"),
        ];
        allowed_origins.extend(extra_origins.iter().cloned());
        HttpConfig {
            allowed_hosts,
            allowed_origins,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: Duration::from_secs_f64(DEFAULT_SESSION_IDLE_SECS),
            header_timeout: Duration::from_secs_f64(DEFAULT_HEADER_TIMEOUT_SECS),
            body_timeout: Duration::from_secs_f64(DEFAULT_BODY_TIMEOUT_SECS),
            token: None,
        }
    }
}

/// Whether a `Host` value is allowed: an entry `h` allows `h` on any port, `h:p` only that port.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let bare = strip_port(&host);
    allowed.iter().any(|a| {
        let a = a.trim().to_ascii_lowercase();
        a == host || (strip_port(&a) == a && a == bare)
    })
}

fn strip_port(h: &str) -> &str {
    if let Some(rest) = h.strip_prefix('[') {
        // [v6]:port
        return rest.find(']').map_or(h, |i| &h[..i + 2]);
    }
    match h.rsplit_once(':') {
        Some((a, p)) if p.chars().all(|c| c.is_ascii_digit()) => a,
        _ => h,
    }
}

/// Whether an `Origin` value is allowed (exact, case-insensitive; default ports are implied).
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let norm = |o: &str| {
        let o = o.trim().trim_end_matches('/').to_ascii_lowercase();
        if let Some(h) = o.strip_prefix("http://") {
            if strip_port(h) == h {
                return format!("http://{h}:80");
            }
        }
        if let Some(h) = o.strip_prefix("https://") {
            if strip_port(h) == h {
                return format!("https://{h}:443");
            }
        }
        o
    };
    let o = norm(origin);
    allowed.iter().any(|a| norm(a) == o)
}

struct State {
    server: Server,
    mcp: StreamableHttpService<Server, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// Held while a session-creating request is checked against the cap and handed to rmcp,
    /// so concurrent `initialize`s cannot overshoot it.
    creating: tokio::sync::Mutex<()>,
    cfg: HttpConfig,
}

type Body = BoxBody<Bytes, Infallible>;

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()).boxed())
        .expect("a static response is valid")
}

fn json(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    reply(status, "application/json", v.to_string())
}

fn with_header(mut r: Response<Body>, name: header::HeaderName, value: &str) -> Response<Body> {
    if let Ok(v) = header::HeaderValue::from_str(value) {
        r.headers_mut().insert(name, v);
    }
    r
}

fn retry_after(status: StatusCode, message: String, secs: u64) -> Response<Body> {
    with_header(
        json(status, &serde_json::json!({"error": message})),
        header::RETRY_AFTER,
        &secs.max(1).to_string(),
    )
}

/// `POST /mcp`: the body read here (bounded in size and time), then the checks that need it
/// (session cap, busy tool calls), then rmcp.
async fn handle_mcp_post(req: Request<Incoming>, st: &State) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("absent")
        .to_string();
    let limited = Limited::new(body, st.cfg.max_body_bytes);
    let bytes = match tokio::time::timeout(st.cfg.body_timeout, limited.collect()).await {
        Err(_) => {
            return with_header(
                json(
                    StatusCode::REQUEST_TIMEOUT,
                    &serde_json::json!({"error": format!(
                        "the request body did not arrive within {:.1} s (Content-Length: {declared}); send the whole body promptly",
                        st.cfg.body_timeout.as_secs_f64()
                    )}),
                ),
                header::CONNECTION,
                "close",
            )
        }
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return with_header(
                json(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &serde_json::json!({"error": format!(
                        "the request body is larger than {} bytes (--max-body-bytes)",
                        st.cfg.max_body_bytes
                    )}),
                ),
                header::CONNECTION,
                "close",
            )
        }
        Ok(Err(e)) => {
            return json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({"error": format!("reading the request body: {e}")}),
            )
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    let method = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_string));
    if method.as_deref() == Some("tools/call") && st.server.busy() {
        return retry_after(StatusCode::SERVICE_UNAVAILABLE, st.server.busy_message(), 1);
    }
    let req = Request::from_parts(parts, Full::new(bytes));
    if req.headers().contains_key("mcp-session-id") {
        return st.mcp.handle(req).await;
    }
    // No session id: an `initialize` (rmcp creates a session) or a request rmcp rejects.
    let _creating = st.creating.lock().await;
    let open = st.sessions.sessions.read().await.len();
    if open >= st.cfg.max_sessions {
        return retry_after(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many MCP sessions: {open} are open (the --max-sessions cap); close idle \
                 ones (DELETE /mcp with their Mcp-Session-Id) or retry later (sessions idle \
                 for {:.0} s are closed)",
                st.cfg.session_idle.as_secs_f64()
            ),
            st.cfg.session_idle.as_secs().clamp(1, 60),
        );
    }
    st.mcp.handle(req).await
}

async fn handle(req: Request<Incoming>, st: Arc<State>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let endpoint = match path.as_str() {
        "/mcp" | "/health" | "/health/ready" | "/metrics" | "/status" => path.as_str(),
        _ => "other",
    }
    .to_string();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    // A browser's request from an allowed page (`Origin` in `--allow-origin`, or this server's
    // own loopback origins) gets CORS headers, so the page can read the reply; one from any
    // other page is refused below.
    let cors_origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .filter(|o| origin_allowed(o, &st.cfg.allowed_origins))
        .map(str::to_string);
    let resp = if !host_allowed(host, &st.cfg.allowed_hosts) {
        json(
            StatusCode::FORBIDDEN,
            &serde_json::json!({"error": format!("Host `{host}` is not allowed; start queryd with --allow-host {host} to accept it")}),
        )
    } else if let Some(origin) = req
        .headers()
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or("<invalid>").to_string())
        .filter(|o| !origin_allowed(o, &st.cfg.allowed_origins))
    {
        json(
            StatusCode::FORBIDDEN,
            &serde_json::json!({"error": format!("Origin `{origin}` is not allowed; start queryd with --allow-origin {origin} to accept it")}),
        )
    } else if cors_origin.is_some()
        && req.method() == http::Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        // A CORS preflight carries no credentials (the Fetch standard): it is answered before
        // the token check, and says only which methods and headers the real request may use.
        preflight(
            req.headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .and_then(|h| h.to_str().ok()),
        )
    } else if let Some(token) = st.cfg.token.as_ref().filter(|_| path != "/health") {
        let auth = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok());
        if token.accepts(auth) {
            route(req, &path, &st).await
        } else {
            let (why, challenge) = if auth.is_none() {
                ("missing", r#"Bearer realm="queryd""#)
            } else {
                ("wrong", r#"Bearer realm="queryd", error="invalid_token""#)
            };
            with_header(
                json(
                    StatusCode::UNAUTHORIZED,
                    &serde_json::json!({"error": format!(
                        "{why} bearer token: send `Authorization: Bearer <token>` with the token \
                         from queryd's --token-file"
                    )}),
                ),
                header::WWW_AUTHENTICATE,
                challenge,
            )
        }
    } else {
        route(req, &path, &st).await
    };
    let resp = match &cors_origin {
        Some(origin) => with_cors(resp, origin),
        None => resp,
    };
    st.server
        .metrics
        .record_http(&endpoint, resp.status().as_u16());
    Ok(resp)
}

/// Request headers a browser page may send when its preflight names none: the MCP
/// Streamable HTTP transport's and the bearer token. A preflight that names headers gets
/// them back (the page's origin is allowed; newer MCP versions add open-ended ones such as
/// `Mcp-Param-*`).
const CORS_ALLOW_HEADERS: &str =
    "authorization, content-type, accept, mcp-session-id, mcp-protocol-version, last-event-id";
/// Response headers a browser page may read: the session id an MCP client must send back, the
/// authentication challenge and the retry hint.
const CORS_EXPOSE_HEADERS: &str = "mcp-session-id, www-authenticate, retry-after";

/// `204` to a CORS preflight from an allowed origin (`with_cors` adds the origin), allowing
/// the headers it asks for (`requested`).
fn preflight(requested: Option<&str>) -> Response<Body> {
    let r = Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(Full::new(Bytes::new()).boxed())
        .expect("a static response is valid");
    let r = with_header(
        r,
        header::ACCESS_CONTROL_ALLOW_METHODS,
        "GET, POST, DELETE, OPTIONS",
    );
    let allow = requested
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .unwrap_or(CORS_ALLOW_HEADERS);
    let r = with_header(r, header::ACCESS_CONTROL_ALLOW_HEADERS, allow);
    with_header(r, header::ACCESS_CONTROL_MAX_AGE, "600")
}

/// The CORS headers of a reply to a page of the allowed `origin`.
fn with_cors(r: Response<Body>, origin: &str) -> Response<Body> {
    let r = with_header(r, header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    let mut r = with_header(
        r,
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        CORS_EXPOSE_HEADERS,
    );
    // Added to any `Vary` the reply has, not in place of it.
    r.headers_mut()
        .append(header::VARY, header::HeaderValue::from_static("Origin"));
    r
}

async fn route(req: Request<Incoming>, path: &str, st: &State) -> Response<Body> {
    match path {
        "/mcp" if req.method() == http::Method::POST => handle_mcp_post(req, st).await,
        "/mcp" => st.mcp.handle(req).await,
        "/health" => reply(StatusCode::OK, "text/plain", "ok\n"),
        "/health/ready" => {
            let e = &st.server.engine;
            let snap = e.snapshot();
            json(
                StatusCode::OK,
                &serde_json::json!({
                    "ready": true,
                    "generation": snap.generation(),
                    "degraded": e.last_failure().is_some()
                        || e.memory_log_damage().is_some()
                        || !snap.code.index.damaged.is_empty()
                        || !e.problems().is_empty(),
                }),
            )
        }
        "/metrics" => {
            let snap = st.server.engine.snapshot();
            let m = &st.server.metrics;
            m.generation.set(snap.generation() as i64);
            m.live_chunks.set(snap.code.index.live_chunks() as i64);
            reply(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                m.encode(),
            )
        }
        "/status" => match st.server.engine.index_status(&StatusArgs::default()) {
            Ok(s) => json(StatusCode::OK, &serde_json::to_value(s).unwrap_or_default()),
            Err(e) => json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &serde_json::json!({"error": e.to_string()}),
            ),
        },
        _ => json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error": format!("no endpoint {path}; try /mcp, /health, /health/ready, /metrics or /status")}),
        ),
    }
}

/// Serves until the listener fails. Each connection is served on its own task.
pub async fn serve(
    listener: tokio::net::TcpListener,
    server: Server,
    cfg: HttpConfig,
) -> std::io::Result<()> {
    let factory_server = server.clone();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(cfg.session_idle);
    let sessions = Arc::new(sessions);
    let mcp = StreamableHttpService::new(
        move || Ok(factory_server.clone()),
        sessions.clone(),
        StreamableHttpServerConfig::default()
            .with_allowed_hosts(cfg.allowed_hosts.clone())
            .with_allowed_origins(cfg.allowed_origins.clone())
            .enforce_origin_validation()
            .with_max_request_body_bytes(cfg.max_body_bytes),
    );
    let st = Arc::new(State {
        server,
        mcp,
        sessions,
        creating: tokio::sync::Mutex::new(()),
        cfg,
    });
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("queryd: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let st = st.clone();
        let header_timeout = st.cfg.header_timeout;
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(req, st.clone()));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
                if !e.is_incomplete_message() {
                    eprintln!("queryd: HTTP connection error: {e}");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins() {
        let c = HttpConfig::for_addr(
            "127.0.0.1:8080".parse().unwrap(),
            &["example.dev".into()],
            &[],
        );
        assert!(host_allowed("127.0.0.1:8080", &c.allowed_hosts));
        assert!(host_allowed("LOCALHOST:8080", &c.allowed_hosts));
        assert!(host_allowed("[::1]:8080", &c.allowed_hosts));
        assert!(host_allowed("example.dev:9999", &c.allowed_hosts));
        assert!(!host_allowed("127.0.0.1:8081", &c.allowed_hosts));
        assert!(!host_allowed("evil.com:8080", &c.allowed_hosts));
        assert!(!host_allowed("", &c.allowed_hosts));
        assert!(origin_allowed("http://localhost:8080", &c.allowed_origins));
        assert!(origin_allowed("http://127.0.0.1:8080/", &c.allowed_origins));
        assert!(!origin_allowed("http://evil.com", &c.allowed_origins));
        assert!(!origin_allowed("http://localhost:8081", &c.allowed_origins));
        assert!(!origin_allowed("null", &c.allowed_origins));
        assert!(origin_allowed(
            "https://a.dev",
            &["https://a.dev:443".into()]
        ));
    }

    #[test]
    fn tokens_compare_by_hash() {
        let t = Token::new("0123456789abcdef0123456789abcdef\n");
        assert!(t.accepts(Some("Bearer 0123456789abcdef0123456789abcdef")));
        assert!(t.accepts(Some("bearer  0123456789abcdef0123456789abcdef ")));
        assert!(!t.accepts(Some("Bearer 0123456789abcdef0123456789abcdeX")));
        assert!(!t.accepts(Some("Basic 0123456789abcdef0123456789abcdef")));
        assert!(!t.accepts(Some("Bearer")));
        assert!(!t.accepts(Some("")));
        assert!(!t.accepts(None));
        assert_eq!(format!("{t:?}"), "Token(<redacted>)");
    }
}
