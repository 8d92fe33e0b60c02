//! The engine against a tiny line protocol on a local TCP server.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memshift_pipeline::{
    BackendError, Codec, ConnectError, Connector, DecodeError, Delivery, Event, Pipeline, Request,
    Settings,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type Answer = oneshot::Sender<Result<Bytes, BackendError>>;

/// One `\n`-terminated line per reply.
struct Lines;

impl Codec for Lines {
    type Expect = ();
    type Caller = Answer;
    type Reply = Bytes;

    fn decode(&mut self, buf: &mut BytesMut, _: ()) -> Result<Option<Bytes>, DecodeError> {
        Ok(memchr(buf).map(|end| buf.split_to(end + 1).freeze()))
    }

    fn deliver(&mut self, caller: Answer, reply: Bytes) -> Delivery<Answer> {
        let _ = caller.send(Ok(reply));
        Delivery::Done
    }

    fn fail(caller: Answer, err: BackendError) {
        let _ = caller.send(Err(err));
    }

    fn resend_preamble(&mut self, _: &mut BytesMut) -> (usize, ()) {
        (0, ())
    }
}

fn memchr(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

struct Local(String);

impl Connector for Local {
    type Codec = Lines;
    type Reader = OwnedReadHalf;
    type Writer = OwnedWriteHalf;

    async fn connect(&self) -> Result<(OwnedReadHalf, OwnedWriteHalf), ConnectError> {
        let tcp = TcpStream::connect(&self.0)
            .await
            .map_err(ConnectError::Connect)?;
        Ok(tcp.into_split())
    }

    fn codec(&self) -> Lines {
        Lines
    }

    fn event(&self, _: Event<'_>) {}
}

/// A server that echoes each line, or (`mute`) reads and never answers.
async fn server(mute: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (rd, mut wr) = tcp.into_split();
                let mut lines = BufReader::new(rd).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if !mute && wr.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn settings(timeout_ms: u64) -> Settings {
    Settings {
        timeout: Duration::from_millis(timeout_ms),
        connect_timeout: Duration::from_secs(1),
    }
}

async fn up(pipe: &Pipeline<Lines>) {
    for _ in 0..200 {
        if pipe.is_up() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never connected");
}

fn request(pipe: &Pipeline<Lines>, line: String) -> oneshot::Receiver<Result<Bytes, BackendError>> {
    let (tx, rx) = oneshot::channel();
    let _ = pipe.send(Request {
        bytes: Bytes::from(line),
        expect: (),
        caller: tx,
    });
    rx
}

#[tokio::test]
async fn replies_in_order_and_answers_in_flight_before_stopping() {
    let pipe = Pipeline::start(Local(server(false).await), settings(2000), 10_000);
    up(&pipe).await;
    let pending: Vec<_> = (0..1000)
        .map(|i| request(&pipe, format!("{i}\n")))
        .collect();
    // Every sender gone: what is in flight is still answered.
    drop(pipe);
    for (i, rx) in pending.into_iter().enumerate() {
        let reply = rx.await.expect("answered").expect("reply");
        assert_eq!(reply, Bytes::from(format!("{i}\n")));
    }
}

#[tokio::test]
async fn stuck_requests_time_out_and_down_fails_fast() {
    let pipe = Pipeline::start(Local(server(true).await), settings(100), 10);
    up(&pipe).await;
    let rx = request(&pipe, "x\n".to_string());
    assert_eq!(rx.await.expect("answered"), Err(BackendError::Timeout));

    // A port nothing listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let unreachable = Pipeline::start(Local(closed.to_string()), settings(100), 10);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rx = request(&unreachable, "x\n".to_string());
    assert_eq!(rx.await.expect("answered"), Err(BackendError::Unavailable));
}
