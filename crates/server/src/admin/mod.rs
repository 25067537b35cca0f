//! The AdminServer: ZooKeeper's HTTP interface to its commands (`admin.*` keys; Jetty's
//! `/commands/<name>` servlet in ZooKeeper), on hyper; and on its own port the Prometheus
//! endpoint (`metricsProvider.*`, `GET /metrics`, rendered by `metrics.rs`).
//!
//! - `GET <commandURL>` lists the commands as HTML links, as ZooKeeper does.
//! - `GET <commandURL>/<name>` (a primary name or an alias; query parameters are the command's
//!   arguments) answers JSON in ZooKeeper's shape and print (`commands.rs`, `json.rs`); an unknown
//!   name answers 200 with `"error" : "Unknown command: <name>"`.
//! - `GET <commandURL>/snapshot` and `POST <commandURL>/restore` need authentication
//!   (`backup.rs`).
//! - Other paths get 404, other methods 405.
//!
//! The HTTP side only parses and formats: each command runs in the owner task
//! (`Event::Admin`), like a four-letter word, so it sees the node between two of its steps.
//! Connections idle for `admin.idleTimeout` are closed; a malformed request gets hyper's 400 and
//! costs nothing else.

pub(crate) mod backup;
pub mod commands;
pub mod json;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use crate::owner::Event;
use backup::{Refusal, RestoreAnswer};

/// The `admin.*` settings of zoo.cfg (also `-Dzookeeper.admin.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// `admin.enableServer`: only `false` turns it off.
    pub enable: bool,
    /// `admin.serverAddress`.
    pub address: std::net::IpAddr,
    /// `admin.serverPort`.
    pub port: u16,
    /// `admin.commandURL`.
    pub command_url: String,
    /// `admin.idleTimeout`.
    pub idle_timeout: Duration,
    /// `zookeeper.admin.snapshot.enabled`, `zookeeper.admin.restore.enabled`.
    pub snapshot_enabled: bool,
    pub restore_enabled: bool,
    /// `zookeeper.admin.rateLimiterIntervalInMS` (`backup.rs`).
    pub rate_limiter_interval_ms: u64,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            enable: true,
            address: std::net::Ipv4Addr::UNSPECIFIED.into(),
            port: 8080,
            command_url: "/commands".into(),
            idle_timeout: Duration::from_millis(30_000),
            snapshot_enabled: true,
            restore_enabled: true,
            rate_limiter_interval_ms: 300_000,
        }
    }
}

impl AdminSettings {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }
}

/// Binds the AdminServer's port; `None` when it is disabled. A port that cannot be bound is
/// logged and the server goes on without it, as ZooKeeper's quorum peers do.
pub(crate) async fn bind(s: &AdminSettings) -> Option<TcpListener> {
    if !s.enable {
        return None;
    }
    match TcpListener::bind(s.addr()).await {
        Ok(l) => {
            tracing::info!(addr = %l.local_addr().map_or(s.addr(), |a| a), url = %s.command_url, "AdminServer");
            Some(l)
        }
        Err(e) => {
            tracing::error!(addr = %s.addr(), error = %e, "cannot start the AdminServer; going on without it (admin.enableServer=false turns it off)");
            None
        }
    }
}

/// What an HTTP port serves.
#[derive(Debug, Clone)]
pub(crate) enum Site {
    /// The AdminServer, its commands under this URL.
    Admin { command_url: String },
    /// The Prometheus endpoint, `/metrics` (`metricsProvider.*`).
    Metrics,
}

/// The Prometheus provider's settings (`metricsProvider.httpHost`, `metricsProvider.httpPort`),
/// used when `metricsProvider.className` names ZooKeeper's PrometheusMetricsProvider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    pub address: std::net::IpAddr,
    pub port: u16,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self { address: std::net::Ipv4Addr::UNSPECIFIED.into(), port: 7000 }
    }
}

/// Binds the Prometheus endpoint's port; a port that cannot be bound stops start-up, as
/// ZooKeeper's provider does.
pub(crate) async fn bind_metrics(s: &MetricsSettings) -> anyhow::Result<TcpListener> {
    use anyhow::Context as _;
    let addr = SocketAddr::new(s.address, s.port);
    let l = TcpListener::bind(addr).await.with_context(|| format!("binding the Prometheus endpoint {addr}"))?;
    tracing::info!(addr = %l.local_addr()?, "Prometheus metrics at /metrics");
    Ok(l)
}

/// The most a request's line and headers may take.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// Serves HTTP on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    site: Site,
    idle: Duration,
    events: mpsc::Sender<Event>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "AdminServer accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (events, site) = (events.clone(), site.clone());
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (events, site) = (events.clone(), site.clone());
                        async move {
                            let resp = match &site {
                                Site::Admin { command_url } => handle(req, command_url, peer.ip(), &events).await,
                                Site::Metrics => metrics(req, &events).await,
                            };
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(idle)
                        // A request's head beyond this is refused (431); Jetty's default is 8 KiB.
                        .max_buf_size(MAX_HEAD_BYTES)
                        .serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "AdminServer connection ended");
                    }
                });
            }
        }
    }
    conns.abort_all();
}

async fn handle(
    req: Request<Incoming>,
    command_url: &str,
    peer: IpAddr,
    events: &mpsc::Sender<Event>,
) -> Response<Full<Bytes>> {
    let Some((name, args)) = parse_target(req.uri().path(), req.uri().query(), command_url) else {
        return plain(StatusCode::NOT_FOUND, "Not Found\n");
    };
    // The two commands 3.9 guards with authentication: GET snapshot, POST restore.
    match (name.as_deref().and_then(commands::find).map(|c| c.name), req.method()) {
        (Some("snapshot"), &Method::GET) => return snapshot(req, peer, events).await,
        (Some("restore"), &Method::POST) => return restore(req, peer, events).await,
        (Some("snapshot" | "restore"), _) => return plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n"),
        _ => {}
    }
    if req.method() != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    }
    let Some(name) = name else { return listing(command_url) };
    let body = match commands::find(&name) {
        None => {
            commands::Answer { error: Some(format!("Unknown command: {name}")), ..Default::default() }.into_json(&name)
        }
        Some(cmd) => match ask_owner(events, |reply| Event::Admin { cmd, args, reply }).await {
            Some(answer) => answer.into_json(cmd.name),
            None => return plain(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping\n"),
        },
    };
    typed(json::to_jackson(&body), "application/json")
}

/// A JSON answer in ZooKeeper's shape with this status.
fn json_answer(status: StatusCode, command: &str, answer: commands::Answer) -> Response<Full<Bytes>> {
    let mut resp = typed(json::to_jackson(&answer.into_json(command)), "application/json");
    *resp.status_mut() = status;
    resp
}

fn refused(command: &str, why: Refusal) -> Response<Full<Bytes>> {
    let answer = commands::Answer { error: why.error(), ..Default::default() };
    json_answer(why.status(), command, answer)
}

fn authorization(req: &Request<Incoming>) -> Option<String> {
    req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string)
}

const STOPPING: &str = "the server is stopping\n";

/// `GET snapshot[?streaming=false]` (`backup.rs`).
async fn snapshot(req: Request<Incoming>, peer: IpAddr, events: &mpsc::Sender<Event>) -> Response<Full<Bytes>> {
    // Java's Boolean.parseBoolean: only "true" (any case) is true; absent means streaming.
    let streaming =
        query_args(req.uri().query().unwrap_or("")).get("streaming").is_none_or(|v| v.eq_ignore_ascii_case("true"));
    let authorization = authorization(&req);
    let taken = match ask_owner(events, |reply| Event::AdminSnapshot { authorization, peer, reply }).await {
        None => return plain(StatusCode::SERVICE_UNAVAILABLE, STOPPING),
        Some(Err(why)) => return refused("snapshot", why),
        Some(Ok(taken)) => taken,
    };
    let zxid = taken.zxid;
    let encoded = tokio::task::spawn_blocking(move || {
        warden_storage::encode_snapshot_with_last_zxid(&taken.tree, &taken.sessions)
    })
    .await;
    let Ok(bytes) = encoded else {
        return refused("snapshot", Refusal::Failed("encoding the snapshot failed".into()));
    };
    tracing::info!(%peer, zxid = format_args!("{zxid:#x}"), bytes = bytes.len(), streaming, "admin snapshot");
    let size = bytes.len();
    let mut resp = if streaming {
        typed_bytes(Bytes::from(bytes), "application/octet-stream")
    } else {
        json_answer(StatusCode::OK, "snapshot", commands::Answer::default())
    };
    let headers = resp.headers_mut();
    headers.insert("last_zxid", hyper::header::HeaderValue::from_str(&format!("0x{zxid:x}")).expect("hex"));
    headers.insert("snapshot_size", hyper::header::HeaderValue::from(size));
    resp
}

/// `POST restore` with a snapshot stream as the body (`backup.rs`): checked before the body is
/// read, decoded on a blocking thread, carried out by the owner.
async fn restore(req: Request<Incoming>, peer: IpAddr, events: &mpsc::Sender<Event>) -> Response<Full<Bytes>> {
    let authorization = authorization(&req);
    match ask_owner(events, |reply| Event::AdminRestoreAllowed { authorization, peer, reply }).await {
        None => return plain(StatusCode::SERVICE_UNAVAILABLE, STOPPING),
        Some(Err(why)) => return refused("restore", why),
        Some(Ok(())) => {}
    }
    let body = match Limited::new(req.into_body(), backup::MAX_RESTORE_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::warn!(%peer, error = %e, "admin restore: the body could not be read");
            let status = if e.is::<http_body_util::LengthLimitError>() {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            };
            let answer = commands::Answer {
                error: Some(format!("the snapshot stream could not be read: {e}")),
                ..Default::default()
            };
            return json_answer(status, "restore", answer);
        }
    };
    if body.is_empty() {
        // ZooKeeper: no input stream, 400.
        return json_answer(StatusCode::BAD_REQUEST, "restore", commands::Answer::default());
    }
    let decoded = tokio::task::spawn_blocking(move || warden_storage::decode_snapshot_stream(&body)).await;
    let snapshot = match decoded {
        Ok(Ok(warden_storage::StreamSnapshot { tree, sessions, zxid })) => {
            Ok(warden_node::SnapshotData { zxid, tree: Box::new(tree), sessions })
        }
        Ok(Err(why)) => {
            tracing::warn!(%peer, %why, "admin restore: not a snapshot stream");
            Err(format!("not a snapshot stream: {why}"))
        }
        Err(_) => Err("decoding the snapshot failed".to_string()),
    };
    let deadline = tokio::time::Instant::now() + backup::RESTORE_PATIENCE;
    let mut snapshot = snapshot;
    let answer = loop {
        match ask_owner(events, |reply| Event::AdminRestore { snapshot, reply }).await {
            None => break None,
            Some(RestoreAnswer::Busy(back)) if tokio::time::Instant::now() < deadline => {
                snapshot = Ok(back);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(RestoreAnswer::Busy(_)) => {
                break Some(Err(Refusal::Failed("the server stayed busy; retry later".into())))
            }
            Some(RestoreAnswer::Refused(why)) => break Some(Err(why)),
            Some(RestoreAnswer::Done(zxid)) => break Some(Ok(zxid)),
        }
    };
    match answer {
        None => plain(StatusCode::SERVICE_UNAVAILABLE, STOPPING),
        Some(Err(why)) => refused("restore", why),
        Some(Ok(zxid)) => {
            tracing::info!(%peer, zxid = format_args!("{zxid:#x}"), "admin restore: data replaced");
            let mut answer = commands::Answer::default();
            answer.fields.insert("last_zxid".into(), serde_json::json!(zxid));
            json_answer(StatusCode::OK, "restore", answer)
        }
    }
}

/// Sends the owner the event `make` builds around a reply channel and waits for the reply;
/// `None` when the owner has stopped.
async fn ask_owner<T>(events: &mpsc::Sender<Event>, make: impl FnOnce(oneshot::Sender<T>) -> Event) -> Option<T> {
    let (reply, rx) = oneshot::channel();
    events.send(make(reply)).await.ok()?;
    rx.await.ok()
}

/// A 200 answer with this body and content type.
fn typed(body: String, content_type: &'static str) -> Response<Full<Bytes>> {
    typed_bytes(Bytes::from(body), content_type)
}

fn typed_bytes(body: Bytes, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    resp.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    resp
}

/// `GET /metrics`: the Prometheus text exposition, rendered by the owner.
async fn metrics(req: Request<Incoming>, events: &mpsc::Sender<Event>) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "Not Found\n");
    }
    if req.method() != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    }
    match ask_owner(events, |reply| Event::Metrics { reply }).await {
        Some(text) => typed(text, "text/plain; version=0.0.4; charset=utf-8"),
        None => plain(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping\n"),
    }
}

/// `GET <commandURL>`: one link per primary name, as ZooKeeper's servlet lists them.
fn listing(command_url: &str) -> Response<Full<Bytes>> {
    let body: String =
        commands::COMMANDS.iter().map(|c| format!("<a href=\"{command_url}/{0}\">{0}</a>\n<br/>\n", c.name)).collect();
    typed(body, "text/html")
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *resp.status_mut() = status;
    resp
}

/// What the AdminServer makes of a request's target before anything runs, for the fuzz targets:
/// the command name (percent-decoded) when `path` is under `command_url`, and the query's
/// arguments. `None` for a path outside it (404).
#[doc(hidden)]
pub fn parse_target(
    path: &str,
    query: Option<&str>,
    command_url: &str,
) -> Option<(Option<String>, BTreeMap<String, String>)> {
    let rest = path.strip_prefix(command_url)?;
    let name = match rest {
        "" | "/" => None,
        r if r.starts_with('/') => Some(percent_decode(&r[1..])),
        _ => return None,
    };
    Some((name, query_args(query.unwrap_or(""))))
}

/// The identities an `Authorization` header proves to `snapshot` and `restore`
/// ([`backup::authenticate`]), `None` when it proves none; for the fuzz targets.
#[doc(hidden)]
pub fn authenticate(header: &str, peer: IpAddr, super_digest: Option<&str>) -> Option<Vec<warden_proto::Id>> {
    backup::authenticate(header, peer, super_digest).ok()
}

/// Query parameters; the first value of a name wins, as in ZooKeeper's servlet.
fn query_args(query: &str) -> BTreeMap<String, String> {
    let mut args = BTreeMap::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        args.entry(percent_decode(k)).or_insert_with(|| percent_decode(v));
    }
    args
}

/// `%XX` escapes and `+` (a space in a query) decoded; a malformed escape is kept as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_the_first_value_wins() {
        let args = query_args("traceMask=12&traceMask=99&a%20b=c+d&flag&bad=%zz%4");
        assert_eq!(args.get("traceMask").map(String::as_str), Some("12"));
        assert_eq!(args.get("a b").map(String::as_str), Some("c d"));
        assert_eq!(args.get("flag").map(String::as_str), Some(""));
        assert_eq!(args.get("bad").map(String::as_str), Some("%zz%4"));
        assert_eq!(percent_decode("%41%42c%"), "ABc%");
    }
}
