//! The actuator's accepted connections, bounded: at most [`MAX_CONNECTIONS`] at once, each of
//! which must send its opening within [`OPENING_WITHIN`]: in plain text, [`OPENING_BYTES`] (an
//! HTTP/2 client preface's length); over TLS, its whole ClientHello record and
//! [`TLS_FLIGHT_BYTES`] more (the client's second flight: its Finished message and the
//! encrypted preface), so that a hello cut short, or a handshake left unfinished, does not hold
//! a slot ([`crate::slots`] bounds the count). Without them, connections held open without a
//! byte (no token needed for that) used up the process's file descriptors, after which the
//! server spun on the failed accept and a controller whose stream dropped could not reconnect.
//! A client that completes its opening and then holds the connection idle is not cut (a
//! controller does just that between calls): the cap bounds what such clients can hold.

use crate::slots::Slots;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Connections served at once; more wait in the listener's backlog. A controller holds one.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a new connection may take to send its opening.
pub const OPENING_WITHIN: Duration = Duration::from_secs(10);
/// The opening in plain text: the HTTP/2 client preface is 24 bytes.
pub const OPENING_BYTES: usize = 24;
/// What a TLS client sends after its ClientHello to finish the handshake and open HTTP/2, at
/// the least (a TLS 1.3 Finished record alone is over 50 bytes, the encrypted preface over 40).
pub const TLS_FLIGHT_BYTES: usize = 64;

/// The bytes a connection whose first bytes are `head` must send to have opened.
fn opening_bytes(head: &[u8]) -> usize {
    // A TLS handshake record: type 22, a version, then its length.
    match head {
        [22, _, _, hi, lo, ..] => 5 + usize::from(u16::from_be_bytes([*hi, *lo])) + TLS_FLIGHT_BYTES,
        _ => OPENING_BYTES,
    }
}

/// Accept connections from `listener` as a stream for tonic's `serve_with_incoming`, at most
/// `connections` at once ([`MAX_CONNECTIONS`], or fewer where the open-file limit is low).
pub fn bounded(listener: TcpListener, connections: usize) -> impl Stream<Item = io::Result<Guarded>> {
    bounded_with(listener, connections, OPENING_WITHIN)
}

/// [`bounded`], with `connections` at once and `opening_within`.
fn bounded_with(
    listener: TcpListener,
    connections: usize,
    opening_within: Duration,
) -> impl Stream<Item = io::Result<Guarded>> {
    let slots = Slots::new(listener, connections, "actuator");
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            let (stream, slot) = slots.accept().await;
            let _ = stream.set_nodelay(true);
            let opening =
                Some(Opening { deadline: Box::pin(tokio::time::sleep(opening_within)), first: Vec::new(), read: 0 });
            if tx.send(Ok(Guarded { stream, _slot: slot, opening })).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// An accepted connection: its slot is freed when it closes.
pub struct Guarded {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    /// Until its opening has arrived.
    opening: Option<Opening>,
}

/// A connection's opening, under way.
struct Opening {
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The first bytes read, up to five (a TLS record's header).
    first: Vec<u8>,
    /// Every byte read so far.
    read: usize,
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let Some(opening) = this.opening.as_mut() else { return read };
        let fresh = &buf.filled()[before..];
        // The first five bytes are kept; past them only their count matters.
        let keep = fresh.len().min(5usize.saturating_sub(opening.first.len()));
        opening.first.extend_from_slice(&fresh[..keep]);
        opening.read += fresh.len();
        if opening.read >= opening_bytes(&opening.first) {
            this.opening = None;
        } else if read.is_pending() && opening.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client did not open in time")));
        }
        read
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    #[test]
    fn a_tls_client_opens_with_its_whole_hello_and_more() {
        assert_eq!(opening_bytes(b"PRI * HTTP/2.0"), OPENING_BYTES);
        assert_eq!(opening_bytes(&[22, 3, 1]), OPENING_BYTES, "not yet a whole record header");
        assert_eq!(opening_bytes(&[22, 3, 1, 0x02, 0x00]), 5 + 512 + TLS_FLIGHT_BYTES);
    }

    /// A connection that has not sent its opening is cut at its deadline, which frees its slot
    /// for the next one; a connection that opened in time is not cut, however idle after.
    #[tokio::test]
    async fn silent_connections_are_cut_and_free_their_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let within = Duration::from_millis(200);
        let mut incoming = Box::pin(bounded_with(listener, 1, within));
        let mut silent = TcpStream::connect(addr).await.unwrap();
        silent.write_all(b"PRI").await.unwrap();
        let mut first = incoming.next().await.unwrap().unwrap();
        let mut talker = TcpStream::connect(addr).await.unwrap();
        talker.write_all(&[b'h'; OPENING_BYTES]).await.unwrap();
        // One slot: the second connection waits until the silent one is cut.
        let mut byte = [0u8; 1];
        let mut read = [0u8; 3];
        first.read_exact(&mut read).await.unwrap();
        let cut = tokio::time::timeout(within * 10, first.read(&mut byte)).await.expect("cut in time");
        assert_eq!(cut.unwrap_err().kind(), io::ErrorKind::TimedOut);
        drop(first);
        let mut second =
            tokio::time::timeout(within * 10, incoming.next()).await.expect("slot freed").unwrap().unwrap();
        let mut got = [0u8; OPENING_BYTES];
        second.read_exact(&mut got).await.unwrap();
        tokio::time::sleep(within * 2).await;
        talker.write_all(b"!").await.unwrap();
        second.read_exact(&mut byte).await.unwrap();
        assert_eq!(byte, *b"!");
    }
}
