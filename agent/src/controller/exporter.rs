//! The `/metrics` endpoint: one `GET` per connection, answered and closed, with a bounded number
//! of connections each given a bounded time. A scraper opens one connection per scrape; what it
//! must not do is take the controller down: connections held open without a request used to
//! pile up until the process had no file descriptor left, not even to reconnect to its
//! actuator.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Connections served at once; more wait in the listener's backlog.
const MAX_CONNECTIONS: usize = 32;
/// The whole life of a connection: reading a request and writing the answer.
const CONNECTION_TIME: Duration = Duration::from_secs(10);
/// The most a request's head may take (a scraper's is a few hundred bytes).
const MAX_HEAD_BYTES: usize = 8192;

/// The media type of the exposition: prometheus-client writes OpenMetrics text; said so, or a
/// scraper parses it as the older text format.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bind `addr` and answer `GET /metrics` with `render()` until the process ends; returns the
/// bound address.
pub async fn serve(
    addr: SocketAddr,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> std::io::Result<SocketAddr> {
    serve_with(addr, render, MAX_CONNECTIONS, CONNECTION_TIME).await
}

/// [`serve`], with `connections` at once, each for at most `connection_time`.
async fn serve_with(
    addr: SocketAddr,
    render: impl Fn() -> String + Send + Sync + 'static,
    connections: usize,
    connection_time: Duration,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let render = Arc::new(render);
    let slots = Arc::new(Semaphore::new(connections));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else { return };
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: try again later, not in a busy loop.
                    tracing::warn!(error = %e, "metrics endpoint cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let render = render.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let _ = tokio::time::timeout(connection_time, answer(stream, &*render)).await;
            });
        }
    });
    Ok(bound)
}

/// Read one request's head and answer it.
async fn answer(mut stream: TcpStream, render: &(dyn Fn() -> String + Send + Sync)) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() > MAX_HEAD_BYTES {
            return respond(&mut stream, "431 Request Header Fields Too Large", "text/plain", "").await;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics") => respond(&mut stream, "200 OK", OPENMETRICS_TEXT, &render()).await,
        (b"GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "try /metrics\n").await,
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", "GET /metrics only\n").await,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn answers_get_metrics_and_refuses_the_rest() {
        let addr = serve("127.0.0.1:0".parse().unwrap(), || "up 1\n# EOF\n".to_string()).await.unwrap();
        let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(
            ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.contains(OPENMETRICS_TEXT) && ok.ends_with("up 1\n# EOF\n"),
            "{ok}"
        );
        assert!(exchange(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").await.starts_with("HTTP/1.1 200"));
        assert!(exchange(addr, b"GET / HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404"));
        assert!(exchange(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 405"));
        let long = [b"GET /metrics HTTP/1.1\r\nX: ".as_slice(), &[b'a'; 9000]].concat();
        assert!(exchange(addr, &long).await.starts_with("HTTP/1.1 431"));
    }

    /// Connections that never send a request hold no more than their share: a scrape beside
    /// more of them than the endpoint serves at once is answered once theirs time out.
    #[tokio::test]
    async fn idle_connections_do_not_shut_scrapes_out() {
        let time = Duration::from_millis(300);
        let addr = serve_with("127.0.0.1:0".parse().unwrap(), || "up 1\n".to_string(), 4, time).await.unwrap();
        let mut idle = Vec::new();
        for _ in 0..12 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let scrape = tokio::spawn(exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n"));
        let answered = tokio::time::timeout(time * 20, scrape).await.expect("answered").unwrap();
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    }
}
