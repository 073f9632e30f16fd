//! The connection to an actuator: TLS, the bearer token on every request, and the URL checks
//! that would otherwise fail only later, as an unreachable actuator.

use crate::actuator::security::holds_pem_certificate;
use crate::error::CliError;
use crate::grpc_timeout;
use ecn_proto::v1 as pb;
use pb::actuator_client::ActuatorClient;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::body::Body;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tower_service::Service;

/// Adds the bearer token to every request.
#[derive(Clone)]
pub struct Auth(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A connected actuator client.
pub type Client = ActuatorClient<InterceptedService<Timed, Auth>>;

/// How long the connection may stay silent before the client asks the actuator for a sign of
/// life (an HTTP/2 PING; `--call-timeout` to answer it). A peer that vanished without a reset
/// (a power cut, a path that drops everything, a NAT that forgot the connection) is noticed
/// this way and the connection dropped, so that the next call opens a new one, resolving the
/// actuator's name again; without it the kernel gives up after about 15 minutes, and a stalled
/// telemetry stream was reopened on the dead connection meanwhile.
pub const KEEPALIVE_EVERY: Duration = Duration::from_secs(10);

/// The channel with `--call-timeout` around each call as a whole. tonic's own timeout
/// (`Endpoint::timeout`, not set) starts only once a connection takes the call: a call queued while the channel reconnects (a TLS
/// handshake that never ends, a name lookup that hangs) waited without end, and the loop, its
/// kill switch and its stop with it. A call cut short fails as tonic's own timeout does
/// (`Cancelled`, "Timeout expired").
#[derive(Clone)]
pub struct Timed {
    channel: Channel,
    timeout: Duration,
}

impl Service<http::Request<Body>> for Timed {
    type Response = http::Response<Body>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // The actuator's deadline for the call (gRPC's `grpc-timeout`): one that waits there
        // past it, behind a slow device write, is not carried out after this client has given up
        // on it. Not on the telemetry stream, which runs for as long as the controller does.
        if !request.uri().path().ends_with("/StreamTelemetry") {
            if let Ok(v) = http::HeaderValue::from_str(&grpc_timeout::encode(self.timeout)) {
                request.headers_mut().insert(grpc_timeout::HEADER, v);
            }
        }
        let call = self.channel.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(tonic::TimeoutExpired(()).into()),
            }
        })
    }
}

/// How long opening a TCP connection to the actuator may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest reply or telemetry batch a client takes: 1 GiB, about ten million queues.
pub const MAX_REPLY_BYTES: usize = 1 << 30;

/// A port in the URL that is no port number (`:99999`) parses as a URL without one, and then
/// fails only at connection time, as an unreachable actuator: refused as the bad input it is.
fn check_port(url: &str) -> Result<(), String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    // After an IPv6 literal's closing bracket, if any.
    let after_host = host_port.rsplit_once(']').map_or(host_port, |(_, p)| p);
    match after_host.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_err() => Err(format!("port '{port}' is not a port number (0-65535)")),
        _ => Ok(()),
    }
}

/// Connect to an actuator, with TLS and a bearer token when configured. A call without a reply
/// (its response headers, for the telemetry stream) after `call_timeout` fails with
/// `CANCELLED`, as a lost connection would; a stream's batches are not timed.
pub async fn connect(
    target: &str,
    token: Option<&str>,
    tls_ca: Option<&[u8]>,
    call_timeout: Duration,
) -> Result<Client, CliError> {
    let bad = |e: &dyn std::fmt::Display| CliError::BadInput(format!("--target {target}: {e}"));
    // Anything else only fails later, as an unhelpful transport error.
    if !(target.starts_with("http://") || target.starts_with("https://")) {
        return Err(bad(&"the URL must start with http:// or https://"));
    }
    check_port(target).map_err(|e| bad(&e))?;
    let uri: tonic::codegen::http::Uri = target.parse().map_err(|e| bad(&e))?;
    // `http://[::1]@switch:50051` connects to `switch`: what comes before an `@` is user info,
    // which no actuator takes, and which would pass a reading of the URL for its host.
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(bad(&"the URL has user info (before an '@'); give the actuator's host and port alone"));
    }
    // tonic would fail each call later ("Connecting to HTTPS without TLS enabled"), exit 1.
    if target.starts_with("https://") && tls_ca.is_none() {
        return Err(bad(&"https:// needs --tls-ca (the CA certificate that signed the actuator's)"));
    }
    if tls_ca.is_some_and(|ca| !holds_pem_certificate(ca)) {
        return Err(bad(&"--tls-ca holds no PEM certificate"));
    }
    // A bearer token over plain HTTP is readable by anyone on the path; only loopback is safe.
    if token.is_some() && target.starts_with("http://") && !is_loopback_url(target) {
        return Err(bad(&"a token is only sent over https:// (or to a loopback address)"));
    }
    let mut endpoint = Channel::from_shared(target.to_string()).map_err(|e| bad(&e))?;
    endpoint = endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_EVERY)
        .keep_alive_timeout(call_timeout)
        .keep_alive_while_idle(true)
        .tcp_keepalive(Some(KEEPALIVE_EVERY));
    if let Some(ca) = tls_ca {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca))
            .timeout(call_timeout);
        endpoint = endpoint.tls_config(tls).map_err(|e| bad(&e))?;
    }
    // The connect timeout covers the TCP connection, not the name lookup before it.
    let unreachable = |why: String| CliError::Failed(format!("cannot reach the actuator at {target}: {why}"));
    let channel = match tokio::time::timeout(CONNECT_TIMEOUT + call_timeout, endpoint.connect()).await {
        Ok(connected) => connected.map_err(|e| unreachable(crate::error::with_causes(&e)))?,
        Err(_) => {
            return Err(unreachable(format!(
                "no connection within {:?} (the name lookup or the TLS handshake got no answer)",
                CONNECT_TIMEOUT + call_timeout
            )))
        }
    };
    let channel = Timed { channel, timeout: call_timeout };
    let header = match token {
        Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| bad(&"the token is not valid header text"))?),
        None => None,
    };
    // gRPC's default 4 MiB would cut telemetry at about 42 000 queues (a sample is ~100 bytes
    // on the wire), and GetConfig at 80 000: a controller then never saw a first sample and
    // held every queue. The actuator is trusted to send what its fabric has.
    Ok(ActuatorClient::with_interceptor(channel, Auth(header)).max_decoding_message_size(MAX_REPLY_BYTES))
}

/// Whether the URL's host is a loopback address (`127.x.y.z`, `[::1]`, or `localhost` where
/// every address it resolves to is one), read as the connection will read it.
fn is_loopback_url(url: &str) -> bool {
    let Ok(uri) = url.parse::<tonic::codegen::http::Uri>() else { return false };
    let Some(authority) = uri.authority().filter(|a| !a.as_str().contains('@')) else { return false };
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    use std::net::ToSocketAddrs;
    host.eq_ignore_ascii_case("localhost")
        && (host, 0).to_socket_addrs().is_ok_and(|mut addrs| addrs.all(|a| a.ip().is_loopback()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_that_is_no_port_number_is_refused() {
        for ok in ["http://127.0.0.1:50051", "https://h", "http://[::1]:1/x", "http://[::1]", "https://u:p@h:65535/"] {
            assert_eq!(check_port(ok), Ok(()), "{ok}");
        }
        for bad in ["http://127.0.0.1:99999", "http://h:", "https://h:x/", "http://[::1]:65536"] {
            let e = check_port(bad).unwrap_err();
            assert!(e.contains("is not a port number"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_loopback_urls_are_loopback() {
        for url in ["http://127.0.0.1:50051", "http://localhost:1", "http://[::1]:9", "http://127.3.2.1"] {
            assert!(is_loopback_url(url), "{url}");
        }
        // What precedes an '@' is user info: the host is what follows it.
        for url in [
            "http://10.0.0.1:50051",
            "http://switch1:50051",
            "http://[2001:db8::1]:9",
            "http://127.0.0.1.evil:1",
            "http://[::1]@192.0.2.2:50099",
            "http://[::1]:50051@192.0.2.2:50099",
            "http://localhost@192.0.2.2",
            "http://127.0.0.1@192.0.2.2:1",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }
}
