//! What a request must get before it is served: its body, read within its timeout once the
//! server's byte budget has room for it (a full budget stops reading large bodies:
//! back-pressure; a small one never waits), then a concurrency slot. A slot is never held
//! while a client trickles its body, so slow bodies cannot keep every request waiting
//! (review S3); the budget bounds the bytes of all bodies being read, with the binary
//! listener's (S5). A poll's response holds its reply's share until written
//! ([`holding`]). A send's body is read by its handler, after the permission
//! check ([`messages`](super::messages)), so a user who may not send never has one read.
//!
//! ```text
//! request ──► send route?  yes ──► handler: authenticate, may send? ──► read_body ──► slot
//!                          no  ──► read_body (≤ SMALL_BODY_BYTES) ──► slot ──► handler
//!             (the read and the slot within ADMISSION_TIMEOUT; the body within
//!              body_timeout(its length); a handler admitted runs to its end)
//! a poll's response ──► its user's reply share held until hyper has written it
//! ```

use super::error::{codes, ApiError};
use super::Api;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cairn_engine::env::chan::Charge;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A body must arrive whole within this long of its request's headers, plus a second per
/// [`MIN_BODY_RATE`] bytes it announces (a 64 MiB send gets 74 s; a login, 10 s).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The slowest body rate a request's body is waited for at.
pub const MIN_BODY_RATE: u64 = 1024 * 1024;
/// A request must be admitted (its body read, a slot taken) within this long of its
/// headers. A request admitted runs to its end: a send cut off after its append would be
/// appended again by the client's retry.
pub const ADMISSION_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a body of `bytes` is waited for.
pub fn body_timeout(bytes: u64) -> Duration {
    BODY_READ_TIMEOUT + Duration::from_secs(bytes / MIN_BODY_RATE)
}

/// The route whose POST is a send (its body read by the handler, after the permission
/// check).
pub const SEND_ROUTE: &str = "/streams/{stream_id}/topics/{topic_id}/messages";

/// A body read whole, counted in the server's budget while held.
pub struct Held {
    pub bytes: Bytes,
    _room: Room,
}

/// The bytes a body holds while it is read and used.
enum Room {
    /// Of the server's byte budget alone (a small body, or one read for no user yet).
    Budget(#[allow(dead_code)] Charge),
    /// Of its user's share of that budget (`Context::bodies`), as over TCP.
    Share(#[allow(dead_code)] crate::command::replies::Held),
}

/// Reads `body` (at most `limit` bytes; `announced` is its Content-Length, if any) once the
/// budget has room, within [`BODY_READ_TIMEOUT`]. A body larger than a small one read for
/// `user` (a send's, once its permission is checked) takes its size from that user's
/// share of the budget, so one tenant's slow or large sends wait on its own share.
pub async fn read_body(
    api: &Api,
    body: Body,
    announced: Option<u64>,
    limit: usize,
    user: Option<u32>,
) -> Result<Held, ApiError> {
    let exact = http_body::Body::size_hint(&body).exact().or(announced);
    if exact.is_some_and(|len| len > limit as u64) {
        return Err(too_large(limit));
    }
    // An empty body takes nothing; one of no announced length, as much as it may have.
    let wanted = exact.unwrap_or(limit as u64);
    let small = super::SMALL_BODY_BYTES as u64;
    let read = async {
        let room = match user {
            Some(user) if wanted > small => {
                Room::Share(api.cx.bodies.reserve_exact(&api.cx.env, user, wanted).await)
            }
            _ => Room::Budget(api.cx.buffers.admit(wanted, small).await),
        };
        let limited = http_body_util::Limited::new(body, limit);
        let collected = http_body_util::BodyExt::collect(limited).await;
        match collected {
            Ok(collected) => Ok(Held {
                bytes: http_body_util::Collected::to_bytes(collected),
                _room: room,
            }),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(limit)),
            Err(e) => Err(ApiError::client(
                codes::INVALID_COMMAND,
                format!("the request body could not be read: {e}"),
            )),
        }
    };
    let within = body_timeout(wanted);
    timed(within, read).await.unwrap_or_else(|| {
        Err(ApiError::client(
            codes::ERROR,
            format!("the request body did not arrive within {within:?}"),
        )
        .with_status(StatusCode::REQUEST_TIMEOUT))
    })
}

fn too_large(limit: usize) -> ApiError {
    ApiError::client(
        codes::INVALID_COMMAND,
        format!("the request body is larger than the {limit} bytes this request may have"),
    )
    .with_status(StatusCode::PAYLOAD_TOO_LARGE)
}

// The HTTP adapter's timers are tokio's (outside the `Env` seam).
#[allow(clippy::disallowed_methods)]
async fn timed<T>(limit: Duration, future: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(limit, future).await.ok()
}

/// The Content-Length a request announces, if any and well formed.
pub fn announced(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The middleware of every route: a request's body (but a send's) read first, then a
/// concurrency slot, then the handler; the response counted until written.
pub async fn admit(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    let is_send = request.method() == Method::POST
        && request
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|p| p.as_str() == SEND_ROUTE);
    if is_send {
        // The handler reads the body after its permission check, then takes a slot.
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let admitted = admission(async {
        let limit = small_limit(&api);
        let held = read_body(&api, body, announced(&parts.headers), limit, None).await?;
        Ok((held, api.slots.acquire().await))
    });
    let (held, slot) = match admitted.await {
        Ok(admitted) => admitted,
        Err(e) => return e.into_response(),
    };
    let request = Request::from_parts(parts, Body::from(held.bytes.clone()));
    let response = next.run(request).await;
    drop((held, slot));
    response
}

/// `admit` within [`ADMISSION_TIMEOUT`], else a 503.
pub async fn admission<T>(
    admit: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    timed(ADMISSION_TIMEOUT, admit).await.unwrap_or_else(|| {
        Err(ApiError::client(
            codes::ERROR,
            format!("the request was not admitted within {ADMISSION_TIMEOUT:?}"),
        )
        .with_status(StatusCode::SERVICE_UNAVAILABLE))
    })
}

/// The most bytes of a body that is not a send's.
pub fn small_limit(api: &Api) -> usize {
    super::SMALL_BODY_BYTES.min(api.settings.max_body_bytes)
}

/// `response`, holding `held` (a poll reply's share) until hyper has written its body (or
/// dropped it with the connection).
pub fn holding(response: Response, held: crate::command::replies::Held) -> Response {
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, Body::new(Charged { body, held }))
}

/// A response body that holds its reply's share until it is dropped.
struct Charged {
    body: Body,
    #[allow(dead_code)] // held for its Drop
    held: crate::command::replies::Held,
}

impl http_body::Body for Charged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
