//! What the actuator lets in before a call reaches its handler, so that no client can make it
//! run out of memory (an actuator killed for memory leaves an unconfirmed change on its device,
//! and its journal then holds it back until an operator looks).
//!
//! gRPC reads a call's whole request before its handler runs, up to the message limit (4 MiB
//! and more on a large fabric), and HTTP/2 lets a client open streams without limit: one
//! connection that started hundreds of Applies and never finished them held 1.8 GB. So:
//! - a connection may have [`STREAMS_PER_CONNECTION`] streams open at once (HTTP/2's own limit);
//! - a request is read freely up to [`FREE_REQUEST_BYTES`], which every call but a large Apply
//!   stays under; past that it needs one of [`LARGE_REQUESTS`] places, all connections
//!   together, and waits for one, its data held back meanwhile by HTTP/2's flow control. A
//!   place is taken by bytes, not by a request's start: places taken at the start let one
//!   client that opened 16 calls and sent nothing hold every other call back, the lease
//!   holder's renewals, Confirms and kill switch among them;
//! - a call must be answered within [`CALL_LIMIT`], its request read included, so that a
//!   request left unfinished does not hold its place for good;
//! - telemetry streams hold [`StreamPlaces`], taken by the service as each stream starts.
//!
//! A request that is not valid protobuf is answered `INVALID_ARGUMENT`, as the API promises for
//! a malformed request, not gRPC's default `INTERNAL`, which this actuator uses for failures of
//! its device.

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Streams one connection may have open at once: a controller uses three or four (its
/// telemetry stream, a call, a lag probe).
pub const STREAMS_PER_CONNECTION: u32 = 32;

/// Bytes of a request read without a place: a Confirm, a Rollback, a lease renewal or an
/// Apply of a few hundred queues (about 60 bytes a queue). Unplaced, every stream of every
/// connection holds at most this much (and HTTP/2's window) until its call ends.
pub const FREE_REQUEST_BYTES: u64 = 16 << 10;

/// Requests read past [`FREE_REQUEST_BYTES`] at once, all connections together: large Applies.
pub const LARGE_REQUESTS: usize = 16;

/// The longest a call may take from its first byte to its answer (a telemetry stream: to its
/// start). The controller gives up on a call after its `--call-timeout` (5 s by default).
pub const CALL_LIMIT: Duration = Duration::from_secs(60);

/// Where gRPC's protobuf decoder says a request is malformed (tonic maps it to `INTERNAL`).
const DECODE_ERROR: &str = "failed to decode Protobuf message";

/// When a call's headers came in, set on each request: its client's deadline (`grpc-timeout`)
/// counts from here, not from its handler's start, which comes only once the whole request is
/// read (a large Apply's upload, its wait for a place).
#[derive(Debug, Clone, Copy)]
pub struct Arrived(pub std::time::Instant);

/// The layer ([`tower_layer::Layer`]) that admits calls: one for the server, its places
/// shared by every connection.
#[derive(Clone)]
pub struct AdmissionLayer {
    places: Arc<Semaphore>,
}

impl AdmissionLayer {
    /// Reads at most `large_requests` requests past [`FREE_REQUEST_BYTES`] at once.
    pub fn new(large_requests: usize) -> AdmissionLayer {
        AdmissionLayer { places: Arc::new(Semaphore::new(large_requests)) }
    }
}

impl<S> tower_layer::Layer<S> for AdmissionLayer {
    type Service = Admission<S>;

    fn layer(&self, inner: S) -> Admission<S> {
        Admission { inner, places: self.places.clone() }
    }
}

/// A service behind [`AdmissionLayer`].
#[derive(Clone)]
pub struct Admission<S> {
    inner: S,
    places: Arc<Semaphore>,
}

impl<S, ResBody> tower_service::Service<Request<tonic::body::Body>> for Admission<S>
where
    S: tower_service::Service<Request<tonic::body::Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<tonic::body::Body>) -> Self::Future {
        // The service that was made ready is the one to call; its clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let places = self.places.clone();
        let mut request = request.map(|body| tonic::body::Body::new(Metered::new(body, places)));
        request.extensions_mut().insert(Arrived(std::time::Instant::now()));
        Box::pin(async move {
            let mut response = inner.call(request).await?;
            malformed_as_invalid_argument(&mut response);
            Ok(response)
        })
    }
}

/// A request body that takes a place once it passes [`FREE_REQUEST_BYTES`], and holds it until
/// it is dropped (once its message is read).
struct Metered {
    inner: tonic::body::Body,
    read: u64,
    places: Arc<Semaphore>,
    place: Option<OwnedSemaphorePermit>,
    waiting: Option<Pin<Box<dyn Future<Output = Option<OwnedSemaphorePermit>> + Send>>>,
}

impl Metered {
    fn new(inner: tonic::body::Body, places: Arc<Semaphore>) -> Metered {
        Metered { inner, read: 0, places, place: None, waiting: None }
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        if this.read > FREE_REQUEST_BYTES && this.place.is_none() {
            let places = this.places.clone();
            let waiting =
                this.waiting.get_or_insert_with(|| Box::pin(async move { places.acquire_owned().await.ok() }));
            this.place = ready!(waiting.as_mut().poll(cx));
            this.waiting = None;
            // The semaphore is never closed; were it, the request would read another free
            // stretch before asking again, rather than stop.
            if this.place.is_none() {
                this.read = 0;
            }
        }
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
            this.read = this.read.saturating_add(data.map_or(0, |d| d.len() as u64));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Telemetry streams one connection may have open at once: a controller and a recorder need
/// one each.
pub const TELEMETRY_STREAMS_PER_CONNECTION: usize = 4;

/// Memory the batches of unread telemetry streams may hold, all streams together, in bytes.
const TELEMETRY_MEMORY: usize = 256 << 20;

/// Batches a telemetry stream holds that its client has not read yet (the service's channel).
pub const UNREAD_BATCHES: usize = 16;

/// Telemetry streams served at once on a fabric of `queues` queues: as many as
/// [`TELEMETRY_MEMORY`] holds at [`UNREAD_BATCHES`] batches each (about 256 bytes a queue a
/// batch), from 16 on the largest fabrics to 256 (the connections served) on small ones.
pub fn telemetry_streams(queues: usize) -> usize {
    let batch_bytes = queues.max(1).saturating_mul(256);
    (TELEMETRY_MEMORY / UNREAD_BATCHES / batch_bytes).clamp(16, 256)
}

/// The telemetry streams open, in all and per connection (by its peer's address). Without a
/// bound, one connection that opened thousands of streams and read none held 700 MB; with one
/// bound for all alone, one that opened 16 locked every controller out of its telemetry.
#[derive(Debug)]
pub struct StreamPlaces {
    most: usize,
    open: std::sync::Mutex<(usize, std::collections::HashMap<std::net::SocketAddr, usize>)>,
}

/// A telemetry stream's place, given back when dropped (when the stream ends).
#[derive(Debug)]
pub struct StreamPlace {
    places: Arc<StreamPlaces>,
    peer: Option<std::net::SocketAddr>,
}

impl StreamPlaces {
    /// Places for at most `most` streams in all.
    pub fn new(most: usize) -> Arc<StreamPlaces> {
        Arc::new(StreamPlaces { most, open: Default::default() })
    }

    /// A place for a stream from `peer` (unknown: counted in all only), or why there is none.
    pub fn take(self: &Arc<Self>, peer: Option<std::net::SocketAddr>) -> Result<StreamPlace, String> {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (all, by_peer) = &mut *open;
        if *all >= self.most {
            return Err(format!(
                "this actuator serves at most {} telemetry streams at once, and has as many open: end one (a \
                 controller or recorder still running, or stuck) and try again",
                self.most
            ));
        }
        if let Some(peer) = peer {
            let mine = by_peer.entry(peer).or_insert(0);
            if *mine >= TELEMETRY_STREAMS_PER_CONNECTION {
                return Err(format!(
                    "a connection may have at most {TELEMETRY_STREAMS_PER_CONNECTION} telemetry streams open at once"
                ));
            }
            *mine += 1;
        }
        *all += 1;
        Ok(StreamPlace { places: self.clone(), peer })
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut open = self.places.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (all, by_peer) = &mut *open;
        *all -= 1;
        if let Some(peer) = self.peer {
            if let Some(n) = by_peer.get_mut(&peer) {
                *n -= 1;
                if *n == 0 {
                    by_peer.remove(&peer);
                }
            }
        }
    }
}

/// Turns the decoder's `INTERNAL` for a request that is not valid protobuf into
/// `INVALID_ARGUMENT`, the code for a request the client got wrong. Such an answer carries its
/// status in its headers (gRPC's "trailers only").
fn malformed_as_invalid_argument<B>(response: &mut Response<B>) {
    let headers = response.headers();
    let internal = headers.get("grpc-status").is_some_and(|s| s == "13");
    // The message is percent-encoded (tonic encodes its spaces).
    let message = headers.get("grpc-message").and_then(|m| m.to_str().ok()).map(|m| m.replace("%20", " "));
    let malformed = message.is_some_and(|m| m.starts_with(DECODE_ERROR));
    if internal && malformed {
        response.headers_mut().insert("grpc-status", HeaderValue::from_static("3"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_streams_are_bounded_in_all_and_per_connection() {
        assert_eq!((telemetry_streams(24), telemetry_streams(4096), telemetry_streams(51_000)), (256, 16, 16));
        let places = StreamPlaces::new(6);
        let (a, b) = ("10.0.0.1:5000".parse().ok(), "10.0.0.1:5001".parse().ok());
        let mut held: Vec<StreamPlace> = (0..4).map(|_| places.take(a).unwrap()).collect();
        assert!(places.take(a).unwrap_err().contains("a connection may have at most 4"));
        held.push(places.take(b).unwrap());
        held.push(places.take(None).unwrap());
        assert!(places.take(b).unwrap_err().contains("at most 6 telemetry streams"));
        held.remove(0);
        held.push(places.take(a).unwrap());
        held.clear();
        assert_eq!(places.open.lock().unwrap().0, 0);
        assert!(places.open.lock().unwrap().1.is_empty());
    }

    /// A request body whose one byte comes `after` its first read: a slow upload. Its timer
    /// starts at that read, after the admission layer's stamp, so that the stamp is at least
    /// `after` old once the body is read.
    struct SlowUpload {
        after: Duration,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
        sent: bool,
    }

    impl Body for SlowUpload {
        type Data = Bytes;
        type Error = tonic::Status;

        fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
            let this = self.get_mut();
            if this.sent {
                return Poll::Ready(None);
            }
            let after = this.after;
            ready!(this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(after))).as_mut().poll(cx));
            this.sent = true;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    /// A handler as gRPC runs one: it starts once the request is read, and answers how long
    /// before that its call's headers came in ([`Arrived`]).
    #[derive(Clone)]
    struct ReadsThenAnswers;

    impl tower_service::Service<Request<tonic::body::Body>> for ReadsThenAnswers {
        type Response = Response<Duration>;
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Response<Duration>, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<tonic::body::Body>) -> Self::Future {
            Box::pin(async move {
                let arrived = request.extensions().get::<Arrived>().map(|a| a.0);
                let mut body = request.into_body();
                while std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await.is_some() {}
                Ok(Response::new(arrived.expect("no Arrived on the request").elapsed()))
            })
        }
    }

    /// The admission layer stamps each call with the moment its headers came, before its
    /// request is read: a client's deadline counts from there, not from the handler's start
    /// after a slow upload (the service's deadline test sets the stamp by hand).
    #[tokio::test]
    async fn calls_are_stamped_as_their_headers_come_in() {
        use tower_service::Service;
        let mut admission = tower_layer::Layer::layer(&AdmissionLayer::new(1), ReadsThenAnswers);
        let upload = SlowUpload { after: Duration::from_millis(300), sleep: None, sent: false };
        std::future::poll_fn(|cx| admission.poll_ready(cx)).await.unwrap();
        let before_handler = admission.call(Request::new(tonic::body::Body::new(upload))).await.unwrap().into_body();
        assert!(before_handler >= Duration::from_millis(300), "stamped {before_handler:?} before the handler");
    }

    #[test]
    fn only_a_decoding_failure_becomes_invalid_argument() {
        let answer = |status: &'static str, message: &'static str| {
            let mut r = Response::new(());
            r.headers_mut().insert("grpc-status", HeaderValue::from_static(status));
            r.headers_mut().insert("grpc-message", HeaderValue::from_static(message));
            malformed_as_invalid_argument(&mut r);
            r.headers()["grpc-status"].to_str().unwrap().to_string()
        };
        assert_eq!(answer("13", "failed to decode Protobuf message: QueueId.switch: invalid string value"), "3");
        assert_eq!(answer("13", "failed%20to%20decode%20Protobuf%20message:%20QueueId.switch"), "3");
        assert_eq!(answer("13", "the sonic backend failed to apply generation 4"), "13");
        assert_eq!(answer("9", "failed to decode Protobuf message"), "9");
    }
}
