//! The `/metrics` endpoint: one `GET` per connection, answered and closed, with a bounded number
//! of connections each given a bounded time (2 s to send its request's head, 10 s in all). Bind
//! it where only scrapers reach it: 32 connections held open by anyone else, opened again as
//! they are cut, still keep scrapes out. A scraper opens one connection per scrape; what it
//! must not do is take the controller down: connections held open without a request used to
//! pile up until the process had no file descriptor left, not even to reconnect to its
//! actuator.

use crate::slots::Slots;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Connections served at once; more wait in the listener's backlog.
const MAX_CONNECTIONS: usize = 32;
/// The whole life of a connection: reading a request and writing the answer.
const CONNECTION_TIME: Duration = Duration::from_secs(10);
/// How long a connection may take to send its request's head: a scraper sends it at once, and
/// a connection that sends nothing holds one of the few slots meanwhile.
const HEAD_WITHIN: Duration = Duration::from_secs(2);
/// The most a request's head may take (a scraper's is a few hundred bytes).
const MAX_HEAD_BYTES: usize = 8192;
/// How long an answered connection is read on, for what its client still sends, before it closes.
const LINGER: Duration = Duration::from_secs(1);

/// The headers of a plain-text answer.
const TEXT: &[(&str, &str)] = &[("content-type", "text/plain")];

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
    let slots = Slots::new(listener, connections, "metrics endpoint");
    tokio::spawn(async move {
        loop {
            let (stream, slot) = slots.accept().await;
            let render = render.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let head_within = connection_time.min(HEAD_WITHIN);
                let _ = tokio::time::timeout(connection_time, answer(stream, &*render, head_within)).await;
            });
        }
    });
    Ok(bound)
}

/// Read one request's head and answer it.
async fn answer(
    mut stream: TcpStream,
    render: &(dyn Fn() -> String + Send + Sync),
    head_within: Duration,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    // The blank line that ends the head, looked for in what came since the last look.
    let mut looked: usize = 0;
    let give_up = tokio::time::Instant::now() + head_within;
    while !ends_head(&head[looked.saturating_sub(3)..]) {
        looked = head.len();
        if head.len() > MAX_HEAD_BYTES {
            return respond(&mut stream, "431 Request Header Fields Too Large", TEXT, "", true).await;
        }
        let Ok(n) = tokio::time::timeout_at(give_up, stream.read(&mut buf)).await else { return Ok(()) };
        let n = n?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    // Empty lines before the request line are allowed (RFC 9112 §2.2).
    let start = head.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(head.len());
    let line = head[start..].split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, target) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let metrics = request_path(target) == b"/metrics";
    match method {
        b"GET" | b"HEAD" if metrics => {
            respond(&mut stream, "200 OK", &[("content-type", OPENMETRICS_TEXT)], &render(), method == b"GET").await
        }
        // A reply to HEAD has no content (RFC 9110 §9.3.2), whatever its status.
        b"GET" | b"HEAD" => respond(&mut stream, "404 Not Found", TEXT, "try /metrics\n", method == b"GET").await,
        // RFC 9110 §15.5.6: a 405 lists the methods that are allowed.
        _ => {
            let headers = [TEXT[0], ("allow", "GET, HEAD")];
            respond(&mut stream, "405 Method Not Allowed", &headers, "GET /metrics only\n", true).await
        }
    }
}

/// Whether `bytes` hold the blank line that ends a request's head (bare LFs accepted).
fn ends_head(bytes: &[u8]) -> bool {
    // A blank line, whatever mix of CRLF and bare LF ends the lines around it.
    bytes.windows(2).any(|w| w == b"\n\n") || bytes.windows(3).any(|w| w == b"\n\r\n")
}

/// A request target's path, without its query, in origin form (`/metrics?x`) or absolute form
/// (`http://host:9464/metrics`).
fn request_path(target: &[u8]) -> &[u8] {
    let target = match target.windows(3).position(|w| w == b"://") {
        Some(at) => {
            let after = &target[at + 3..];
            &after[after.iter().position(|&b| b == b'/').unwrap_or(after.len())..]
        }
        None => target,
    };
    target.split(|&b| b == b'?').next().unwrap_or_default()
}

/// Write the answer (its body unless `with_body` is false, for HEAD), end the write side, and
/// read what the client still sends until it closes: closed with input unread, the kernel
/// resets the connection, and a client may lose the end of the answer.
async fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, &str)],
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).await?;
    if with_body {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await?;
    let mut rest = [0u8; 1024];
    let drained = async {
        while stream.read(&mut rest).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(LINGER, drained).await;
    Ok(())
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
        assert!(exchange(addr, b"\r\nGET http://h:1/metrics HTTP/1.1\n\n").await.starts_with("HTTP/1.1 200"));
        let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("content-length: 11\r\nconnection: close\r\n\r\n"));
        // Sent in pieces, and followed by more than was asked for: the whole answer arrives.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /met").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.write_all(b"rics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.ends_with("up 1\n# EOF\n") && out.matches("HTTP/1.1").count() == 1, "{out}");
        assert!(exchange(addr, b"GET / HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404"));
        // A HEAD gets no content, a 404 included; a blank line after bare-LF lines ends a head.
        assert!(exchange(addr, b"HEAD / HTTP/1.1\r\n\r\n").await.ends_with("\r\n\r\n"));
        assert!(exchange(addr, b"GET /metrics HTTP/1.1\nHost: x\n\r\n").await.starts_with("HTTP/1.1 200"));
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
