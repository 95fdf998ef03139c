//! Streamable HTTP: MCP at `/mcp` (rmcp's streamable HTTP service) beside `/health`,
//! `/health/ready`, `/metrics` (Prometheus text) and `/status` (index status JSON), on hyper.
//!
//! Every request's `Host` must be in the host allowlist and its `Origin`, when present, in the
//! origin allowlist (DNS-rebinding protection); others get 403. rmcp is configured with the same
//! lists and caps request bodies.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::mcp::Server;
use engine::tools::status::StatusArgs;

/// Default cap on request bodies (MCP messages are small; 1 MiB leaves room for code).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Settings of the HTTP transport.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Allowed `Host` header values: `host` (any port) or `host:port`.
    pub allowed_hosts: Vec<String>,
    /// Allowed `Origin` header values (`scheme://host:port`); requests without `Origin` pass.
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
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
    } else {
        match path.as_str() {
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
                        "degraded": e.last_failure().is_some() || e.memory_log_damage().is_some(),
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
    };
    st.server
        .metrics
        .record_http(&endpoint, resp.status().as_u16());
    Ok(resp)
}

/// Serves until the listener fails. Each connection is served on its own task.
pub async fn serve(
    listener: tokio::net::TcpListener,
    server: Server,
    cfg: HttpConfig,
) -> std::io::Result<()> {
    let factory_server = server.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(factory_server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_allowed_hosts(cfg.allowed_hosts.clone())
            .with_allowed_origins(cfg.allowed_origins.clone())
            .enforce_origin_validation()
            .with_max_request_body_bytes(cfg.max_body_bytes),
    );
    let st = Arc::new(State { server, mcp, cfg });
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
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(req, st.clone()));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
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
}
