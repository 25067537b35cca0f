//! Named limits behave plainly: a connection with more requests in flight than its limit is simply
//! read more slowly (every request is still answered, in order), never dropped or reordered.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::ReplyHeader;
use warden_proto::request::{PathWatch, Request};
use warden_proto::Record;
use zookeeper_client as zk;

mod common;
use common::TestServer;

/// A connection with a new session, split so that a test can write and read at once.
async fn new_session(addr: std::net::SocketAddr) -> (OwnedReadHalf, OwnedWriteHalf) {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let req = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], ..Default::default() };
    wr.write_all(&warden_proto::frame::encode_frame(&req)).await.unwrap();
    let mut len = [0u8; 4];
    rd.read_exact(&mut len).await.unwrap();
    let mut body = vec![0; i32::from_be_bytes(len) as usize];
    rd.read_exact(&mut body).await.unwrap();
    assert_ne!(ConnectResponse::from_bytes(&body).unwrap().session_id, 0);
    (rd, wr)
}

#[tokio::test]
async fn pipelined_requests_beyond_the_outstanding_limit_are_all_answered_in_order() {
    let server = TestServer::start_with(|cfg| cfg.max_outstanding_per_connection = 4).await;

    let (mut rd, mut wr) = new_session(server.addr).await;
    let mut len = [0u8; 4];

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

/// A client that stops reading while its watch fires is disconnected once its writer's queue holds
/// `CONN_QUEUE` frames (counted in frames, though the owner hands the writer a turn's frames as one
/// message); the server goes on serving everyone else.
#[tokio::test]
async fn a_client_that_does_not_read_its_notifications_is_disconnected() {
    use common::RawClient;
    use warden_proto::header::add_watch_mode;
    use warden_proto::request::AddWatchRequest;

    let server = TestServer::start().await;
    let mut idle = RawClient::new_session(server.addr, 30_000).await;
    let watch = AddWatchRequest { path: "/".into(), mode: add_watch_mode::PERSISTENT_RECURSIVE };
    assert_eq!(idle.call(&Request::AddWatch(watch)).await.0.err, 0);

    let writer = server.client().await;
    writer.create("/n", b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await.unwrap();
    // Each multi fires 1,000 notifications at the idle client in one turn of the owner's loop. The
    // socket buffers take some megabytes of them before the queue starts to fill.
    const MULTIS: usize = 500;
    for _ in 0..MULTIS {
        let mut m = writer.new_multi_writer();
        for _ in 0..1000 {
            m.add_set_data("/n", b"x", None).unwrap();
        }
        m.commit().await.unwrap();
    }
    // The writer's session is served all along, and after.
    assert!(writer.check_stat("/n").await.unwrap().is_some());

    let mut notifications = 0usize;
    let read_all = async {
        while let common::Frame::Reply(_) = idle.read_frame().await {
            notifications += 1;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), read_all).await.expect("the connection was closed");
    assert!(
        notifications < MULTIS * 1000,
        "{notifications} notifications arrived: the connection should have been closed before all did"
    );
    server.stop().await;
}

/// Hundreds of creates become durable in one fsync and are applied a chunk per turn of the owner's
/// loop, while more requests come in: a session's getData pipelined right behind its create still
/// sees the node, and every reply comes back in request order.
#[tokio::test]
async fn reads_pipelined_behind_a_large_batch_of_creates_see_them() {
    use warden_proto::request::CreateRequest;
    let server = TestServer::start().await;

    let (mut rd, mut wr) = new_session(server.addr).await;
    let mut len = [0u8; 4];

    const N: i32 = 2_000;
    let writer = tokio::spawn(async move {
        let mut buf = Vec::new();
        for i in 0..N {
            let create = CreateRequest {
                path: format!("/c{i}"),
                data: Some(i.to_be_bytes().to_vec()),
                acl: warden_proto::Acl::open_unsafe(),
                flags: 0,
            };
            buf.extend_from_slice(&Request::Create(create).encode_frame(2 * i + 1));
            let get = PathWatch { path: format!("/c{i}"), watch: false };
            buf.extend_from_slice(&Request::GetData(get).encode_frame(2 * i + 2));
        }
        // One write: the server reads them as fast as it can, so the creates pile up behind fsyncs.
        wr.write_all(&buf).await.unwrap();
        wr
    });
    let reader = async {
        let mut last_zxid = 0;
        for i in 0..N {
            for xid in [2 * i + 1, 2 * i + 2] {
                rd.read_exact(&mut len).await.unwrap();
                let mut body = vec![0; i32::from_be_bytes(len) as usize];
                rd.read_exact(&mut body).await.unwrap();
                let hdr = ReplyHeader::from_bytes(&body).unwrap();
                assert_eq!((hdr.xid, hdr.err), (xid, 0), "replies in request order, all succeeding");
                assert!(hdr.zxid >= last_zxid, "zxids never go back");
                last_zxid = hdr.zxid;
                if xid % 2 == 0 {
                    // ReplyHeader (16 bytes), then the data as a jute buffer.
                    assert_eq!(&body[16..20], &4i32.to_be_bytes(), "getData of /c{i}");
                    assert_eq!(&body[20..24], &i.to_be_bytes(), "getData of /c{i} sees its create");
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), reader).await.expect("every request answered");
    drop(writer.await.unwrap());
    server.stop().await;
}
