//! What each admin path answers.

use super::http::{request_line, Response};
use super::AdminState;

pub(super) fn route(head: &[u8], state: &AdminState) -> Response {
    let Some((method, path)) = request_line(head) else {
        return Response::text(400, "Bad Request", "bad request\n");
    };
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let mut r = Response::text(405, "Method Not Allowed", "method not allowed\n");
        r.allow = true;
        return r;
    }
    let mut response = match path {
        "/metrics" => Response {
            status: 200,
            reason: "OK",
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: state.metrics.render().into_bytes(),
            allow: false,
            head_only: false,
        },
        "/health" => Response::text(200, "OK", "ok\n"),
        "/ready" if (state.ready)() => Response::text(200, "OK", "ready\n"),
        "/ready" => Response::text(503, "Service Unavailable", "not ready\n"),
        _ => Response::text(404, "Not Found", "not found\n"),
    };
    response.head_only = head_only;
    response
}
