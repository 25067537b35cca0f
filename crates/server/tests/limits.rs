//! Named limits behave plainly: a connection with more requests in flight than its limit is simply
//! read more slowly (every request is still answered, in order), never dropped or reordered.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::ReplyHeader;
use warden_proto::request::{PathWatch, Request};
use warden_proto::Record;

mod common;
use common::TestServer;

#[tokio::test]
async fn pipelined_requests_beyond_the_outstanding_limit_are_all_answered_in_order() {
    let server = TestServer::start_with(|cfg| cfg.max_outstanding_per_connection = 4).await;

    let s = TcpStream::connect(server.addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let req = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], ..Default::default() };
    wr.write_all(&warden_proto::frame::encode_frame(&req)).await.unwrap();
    let mut len = [0u8; 4];
    rd.read_exact(&mut len).await.unwrap();
    let mut body = vec![0; i32::from_be_bytes(len) as usize];
    rd.read_exact(&mut body).await.unwrap();
    assert_ne!(ConnectResponse::from_bytes(&body).unwrap().session_id, 0);

    const N: i32 = 5_000;
    let writer = tokio::spawn(async move {
        let mut buf = Vec::new();
        for xid in 1..=N {
            buf.extend_from_slice(
                &Request::Exists(PathWatch { path: "/zookeeper".into(), watch: false }).encode_frame(xid),
            );
        }
        wr.write_all(&buf).await.unwrap();
        wr
    });
    let reader = async {
        for xid in 1..=N {
            rd.read_exact(&mut len).await.unwrap();
            let mut body = vec![0; i32::from_be_bytes(len) as usize];
            rd.read_exact(&mut body).await.unwrap();
            let hdr = ReplyHeader::from_bytes(&body).unwrap();
            assert_eq!((hdr.xid, hdr.err), (xid, 0), "replies in request order");
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), reader).await.expect("every request answered");
    drop(writer.await.unwrap());
    server.stop().await;
}
