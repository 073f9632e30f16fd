//! What the actuator lets in before a call reaches its handler, so that no client can make it
//! run out of memory (an actuator killed for memory leaves an unconfirmed change on its device,
//! and its journal then holds it back until an operator looks).
//!
//! gRPC reads a call's whole request before its handler runs, up to the message limit (4 MiB
//! and more on a large fabric), and HTTP/2 lets a client open streams without limit: one
//! connection that started hundreds of Applies and never finished them held 1.8 GB, and one
//! that opened thousands of telemetry streams and never read them 700 MB. So:
//! - a connection may have [`STREAMS_PER_CONNECTION`] streams open at once (HTTP/2's own limit);
//! - at most [`CALLS_IN_FLIGHT`] calls other than telemetry streams are read at once, all
//!   connections together; the rest wait, their data held back by HTTP/2's flow control, not
//!   buffered here;
//! - a call must be answered within [`CALL_LIMIT`], its request read included, so that a
//!   request left unfinished does not hold its place for good;
//! - the telemetry streams are bounded in the service ([`super::service`]).
//!
//! A request that is not valid protobuf is answered `INVALID_ARGUMENT`, as the API promises for
//! a malformed request, not gRPC's default `INTERNAL`, which this actuator uses for failures of
//! its device.

use http::{HeaderValue, Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Streams one connection may have open at once: a controller uses three or four (its
/// telemetry stream, a call, a lag probe).
pub const STREAMS_PER_CONNECTION: u32 = 32;

/// Calls other than telemetry streams read or handled at once, all connections together.
/// Ours take milliseconds; a hundred controllers' worth fit.
pub const CALLS_IN_FLIGHT: usize = 16;

/// The longest a call may take from its first byte to its answer (a telemetry stream: to its
/// start). The controller gives up on a call after its `--call-timeout` (5 s by default).
pub const CALL_LIMIT: Duration = Duration::from_secs(60);

/// The path of the call that streams telemetry, which holds no place among the calls in flight.
const STREAM_TELEMETRY_PATH: &str = "/ecn_tuner.v1.Actuator/StreamTelemetry";

/// Where gRPC's protobuf decoder says a request is malformed (tonic maps it to `INTERNAL`).
const DECODE_ERROR: &str = "failed to decode Protobuf message";

/// The layer ([`tower_layer::Layer`]) that admits calls: one for the server, its permits
/// shared by every connection.
#[derive(Clone)]
pub struct AdmissionLayer {
    calls: Arc<Semaphore>,
}

impl AdmissionLayer {
    /// Admits at most `calls_in_flight` calls (other than telemetry streams) at once.
    pub fn new(calls_in_flight: usize) -> AdmissionLayer {
        AdmissionLayer { calls: Arc::new(Semaphore::new(calls_in_flight)) }
    }
}

impl<S> tower_layer::Layer<S> for AdmissionLayer {
    type Service = Admission<S>;

    fn layer(&self, inner: S) -> Admission<S> {
        Admission { inner, calls: self.calls.clone() }
    }
}

/// A service behind [`AdmissionLayer`].
#[derive(Clone)]
pub struct Admission<S> {
    inner: S,
    calls: Arc<Semaphore>,
}

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for Admission<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was made ready is the one to call; its clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let calls = (request.uri().path() != STREAM_TELEMETRY_PATH).then(|| self.calls.clone());
        Box::pin(async move {
            // Held until the answer: the request is read meanwhile. The semaphore is never
            // closed, so acquiring fails only if it were; then the call goes in unbounded.
            let _place = match calls {
                Some(calls) => calls.acquire_owned().await.ok(),
                None => None,
            };
            let mut response = inner.call(request).await?;
            malformed_as_invalid_argument(&mut response);
            Ok(response)
        })
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
