//! A TCP relay in front of an actuator whose open connections can be frozen: bytes stop
//! flowing both ways while the sockets stay open, as when a peer vanishes without a reset (a
//! host powered off, a NAT or firewall that dropped the flow). New connections are relayed
//! as usual, so a client that gives a dead connection up and reconnects gets through.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The relay; it runs until the test's runtime ends.
pub struct FrozenRelay {
    /// Where clients connect.
    pub addr: SocketAddr,
    /// Connections numbered below this are frozen.
    frozen_below: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
}

impl FrozenRelay {
    /// Relay every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FrozenRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
        let addr = listener.local_addr().expect("the relay's address");
        let (frozen_below, accepted) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (frozen, count) = (frozen_below.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else { continue };
                let n = count.fetch_add(1, Ordering::SeqCst);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, n, frozen.clone()));
                tokio::spawn(pump(server_read, client_write, n, frozen.clone()));
            }
        });
        FrozenRelay { addr, frozen_below, accepted }
    }

    /// Freeze every connection open now; later ones are relayed.
    pub fn freeze_open_connections(&self) {
        self.frozen_below.store(self.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Copy `from` to `to` until either closes, or for ever without a byte once connection `n`
/// is frozen (both halves kept open: no FIN, no reset).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    n: u64,
    frozen_below: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let read = from.read(&mut buf).await;
        if n < frozen_below.load(Ordering::SeqCst) {
            // `from` and `to` stay open, unread and unwritten.
            std::future::pending::<()>().await;
        }
        match read {
            Ok(0) | Err(_) => return,
            Ok(k) => {
                if to.write_all(&buf[..k]).await.is_err() {
                    return;
                }
            }
        }
    }
}
