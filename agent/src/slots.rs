//! Accepting TCP connections a bounded number at a time: each accepted connection holds a slot
//! until it is dropped, and the next is accepted only once a slot is free (more wait in the
//! listener's backlog). Shared by the actuator's gRPC server and the controller's `/metrics`
//! endpoint, whose connections held open without a byte used to use up the process's file
//! descriptors.

use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connection slots of one listener.
pub struct Slots {
    listener: TcpListener,
    free: Arc<Semaphore>,
    /// Names the server in the warning of a failed accept.
    what: &'static str,
}

impl Slots {
    /// `listener`'s connections, `count` at a time; `what` names the server in warnings.
    pub fn new(listener: TcpListener, count: usize, what: &'static str) -> Self {
        Slots { listener, free: Arc::new(Semaphore::new(count)), what }
    }

    /// The next connection, once a slot is free, with its slot. A failed accept (out of file
    /// descriptors, say) is warned of and tried again 100 ms later, not in a busy loop.
    pub async fn accept(&self) -> (TcpStream, OwnedSemaphorePermit) {
        // The semaphore is never closed.
        let slot = self.free.clone().acquire_owned().await.expect("slots are never closed");
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => return (stream, slot),
                Err(e) => {
                    tracing::warn!(error = %e, "{} cannot accept a connection", self.what);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}
