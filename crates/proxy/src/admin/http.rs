//! Just enough HTTP/1.1: read a bounded request head, parse its request
//! line, encode a `Connection: close` response.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Why a request head could not be read.
pub(super) enum HeadError {
    TooLarge,
    Io,
}

/// Read until the blank line ending the head; returns the head without it.
pub(super) async fn read_head(stream: &mut TcpStream, max: usize) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|_| HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Io);
        }
        // Resume the search a few bytes back: the terminator may straddle reads.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_end(&head[from..]) {
            head.truncate(from + end);
            return Ok(head);
        }
        if head.len() > max {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Offset of the head terminator (`\r\n\r\n`, or a bare `\n\n` from lenient
/// clients).
pub(super) fn find_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Method and path (query string dropped) of a well-formed HTTP/1.x request line.
pub(super) fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || method.is_empty() || !version.starts_with("HTTP/1.") {
        return None;
    }
    if !target.starts_with('/') {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Some((method, path))
}

pub(super) struct Response {
    pub(super) status: u16,
    pub(super) reason: &'static str,
    pub(super) content_type: &'static str,
    pub(super) body: Vec<u8>,
    /// Send `Allow: GET, HEAD` (405).
    pub(super) allow: bool,
    /// HEAD: headers as for GET, no body.
    pub(super) head_only: bool,
}

impl Response {
    pub(super) fn text(status: u16, reason: &'static str, body: &str) -> Response {
        Response {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            allow: false,
            head_only: false,
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.reason,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if self.allow {
            out.extend_from_slice(b"Allow: GET, HEAD\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}
