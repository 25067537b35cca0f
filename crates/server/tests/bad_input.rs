//! Malformed, truncated and oversized frames and garbage on the client port: the offending connection
//! gets ZooKeeper's error or is closed, and the server keeps serving everyone else.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::ReplyHeader;
use warden_proto::request::{CreateRequest, PathWatch, Request};
use warden_proto::{Acl, Record};

mod common;
use common::TestServer;

/// Reads one length-prefixed frame; `None` when the server closed the connection.
async fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut len))
        .await
        .expect("server answered in time")
        .ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.ok()?;
    Some(body)
}

/// True once the server has closed the connection (EOF or reset), reading past anything it sent.
async fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

async fn handshake(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], read_only: Some(false), ..Default::default() };
    s.write_all(&warden_proto::frame::encode_frame(&req)).await.unwrap();
    let resp = ConnectResponse::from_bytes(&read_frame(&mut s).await.expect("handshake reply")).unwrap();
    assert_ne!(resp.session_id, 0);
    s
}

/// A healthy client can still create and read a node.
async fn still_serving(addr: std::net::SocketAddr, path: &str) {
    let mut s = handshake(addr).await;
    let create = Request::Create(CreateRequest {
        path: path.into(),
        data: Some(b"ok".to_vec()),
        acl: Acl::open_unsafe(),
        flags: 0,
    });
    s.write_all(&create.encode_frame(1)).await.unwrap();
    let hdr = ReplyHeader::from_bytes(&read_frame(&mut s).await.unwrap()).unwrap();
    assert_eq!((hdr.xid, hdr.err), (1, 0), "create on a healthy connection");
    let get = Request::GetData(PathWatch { path: path.into(), watch: false });
    s.write_all(&get.encode_frame(2)).await.unwrap();
    let hdr = ReplyHeader::from_bytes(&read_frame(&mut s).await.unwrap()).unwrap();
    assert_eq!((hdr.xid, hdr.err), (2, 0));
}

#[tokio::test]
async fn oversized_and_negative_lengths_close_only_that_connection() {
    let server = TestServer::start().await;
    let addr = server.addr;
    let bystander = handshake(addr).await;
    for len in [0x0010_0000i32 + 1, i32::MAX, -5] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&len.to_be_bytes()).await.unwrap();
        assert!(closed(&mut s).await, "length {len} must close the connection");
        // The same after a valid handshake.
        let mut s = handshake(addr).await;
        s.write_all(&len.to_be_bytes()).await.unwrap();
        assert!(closed(&mut s).await, "length {len} after handshake must close the connection");
    }
    drop(bystander);
    still_serving(addr, "/after-lengths").await;
    server.stop().await;
}

#[tokio::test]
async fn unknown_opcode_gets_unimplemented_then_close() {
    let server = TestServer::start().await;
    let mut s = handshake(server.addr).await;
    let mut frame = 8i32.to_be_bytes().to_vec();
    frame.extend_from_slice(&7i32.to_be_bytes());
    frame.extend_from_slice(&555i32.to_be_bytes());
    s.write_all(&frame).await.unwrap();
    let hdr = ReplyHeader::from_bytes(&read_frame(&mut s).await.expect("an error reply")).unwrap();
    assert_eq!((hdr.xid, hdr.err), (7, -6));
    assert!(closed(&mut s).await);
    still_serving(server.addr, "/after-opcode").await;
    server.stop().await;
}

#[tokio::test]
async fn undecodable_body_gets_marshalling_error_then_close() {
    let server = TestServer::start().await;
    let mut s = handshake(server.addr).await;
    // create (1) whose path claims 1000 bytes but the frame ends after 3.
    let mut payload = Vec::new();
    payload.extend_from_slice(&3i32.to_be_bytes());
    payload.extend_from_slice(&1i32.to_be_bytes());
    payload.extend_from_slice(&1000i32.to_be_bytes());
    payload.extend_from_slice(b"/ab");
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    s.write_all(&frame).await.unwrap();
    let hdr = ReplyHeader::from_bytes(&read_frame(&mut s).await.expect("an error reply")).unwrap();
    assert_eq!((hdr.xid, hdr.err), (3, -5));
    assert!(closed(&mut s).await);
    still_serving(server.addr, "/after-body").await;
    server.stop().await;
}

#[tokio::test]
async fn garbage_and_truncated_frames_cost_nothing_else() {
    let server = TestServer::start().await;
    let addr = server.addr;
    // A garbage handshake: a plausible length followed by random bytes.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0, 0, 6, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x02]).await.unwrap();
    assert!(closed(&mut s).await, "an undecodable ConnectRequest closes the connection");
    // A frame cut short, then the client goes away: nothing to answer, nothing lost.
    let mut s = handshake(addr).await;
    let full = Request::Exists(PathWatch { path: "/zookeeper".into(), watch: false }).encode_frame(1);
    s.write_all(&full[..full.len() - 3]).await.unwrap();
    drop(s);
    // Pure noise that is not a four-letter word.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 0x80).collect();
    let _ = s.write_all(&noise).await;
    assert!(closed(&mut s).await, "noise closes the connection");
    still_serving(addr, "/after-garbage").await;
    server.stop().await;
}

#[tokio::test]
async fn a_silent_connection_without_handshake_does_not_block_others() {
    let server = TestServer::start().await;
    let _silent = TcpStream::connect(server.addr).await.unwrap();
    still_serving(server.addr, "/beside-silent").await;
    server.stop().await;
}

#[tokio::test]
async fn connections_beyond_max_client_cnxns_per_ip_are_closed() {
    let server = TestServer::start_with(|cfg| cfg.max_client_cnxns = 2).await;
    let a = handshake(server.addr).await;
    let b = handshake(server.addr).await;
    let mut c = TcpStream::connect(server.addr).await.unwrap();
    assert!(closed(&mut c).await, "a third connection from the same address is refused");
    drop((a, b));
    // Slots are released when connections end.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let req = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], ..Default::default() };
        s.write_all(&warden_proto::frame::encode_frame(&req)).await.unwrap();
        if read_frame(&mut s).await.is_some() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "slots were never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;
}
