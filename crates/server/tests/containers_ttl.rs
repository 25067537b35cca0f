//! Container and TTL nodes (ZooKeeper's `CreateMode`, `EphemeralType`, `ContainerManager`):
//! creation opcodes and Stat encoding, reaping by the container manager (every 200 ms in these
//! tests), the rules that keep a node (children, never-used container), and TTL being refused when
//! extended types are off.

mod common;

use std::time::Duration;

use common::*;
use warden_proto::{ErrorCode, Request, Response};
use zk::{Acls, CreateMode, Error, EventType};
use zookeeper_client as zk;

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn container() -> zk::CreateOptions<'static> {
    CreateMode::Container.with_acls(Acls::anyone_all())
}

fn ttl(ms: u64) -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all()).with_ttl(Duration::from_millis(ms))
}

async fn gone(c: &zk::Client, path: &str) {
    eventually(&format!("{path} to be reaped"), || async { c.check_stat(path).await.unwrap().is_none().then_some(()) })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_is_reaped_after_its_last_child_goes() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let (stat, _) = c.create("/never", b"", &container()).await.unwrap();
    assert_eq!(stat.ephemeral_owner, 0, "containers show ephemeralOwner 0");
    c.create("/keep", b"", &container()).await.unwrap();
    c.create("/keep/k", b"", &persistent()).await.unwrap();
    c.create("/used", b"", &container()).await.unwrap();
    c.create("/used/k", b"", &persistent()).await.unwrap();
    let (_, watcher) = c.check_and_watch_stat("/used").await.unwrap();
    c.delete("/used/k", None).await.unwrap();
    let e = within("container reaped", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDeleted, "/used"));
    assert_eq!(c.check_stat("/used").await.unwrap(), None);
    // Reaping /used took at least one manager pass; the others must have survived it.
    assert!(
        c.check_stat("/never").await.unwrap().is_some(),
        "a never-used container is kept (maxNeverUsedIntervalMs = 0)"
    );
    assert!(c.check_stat("/keep").await.unwrap().is_some(), "a container with children is kept");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_can_be_used_like_a_persistent_node() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/box", b"d", &container()).await.unwrap();
    c.create("/box/a", b"", &persistent()).await.unwrap();
    c.create("/box/b", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
    let (_, seq) =
        c.create("/box/s-", b"", &CreateMode::PersistentSequential.with_acls(Acls::anyone_all())).await.unwrap();
    assert_eq!(seq.into_i64(), 2);
    c.set_data("/box", b"e", None).await.unwrap();
    assert_eq!(c.get_children("/box").await.unwrap().1.num_children, 3);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_uses_opcode_19_and_create2_reply_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let (h, body) = r.call(&Request::CreateContainer(create_req("/rc", Some(b"xy"), 4))).await;
    assert_eq!(h.err, 0);
    match body {
        Some(Response::Create2 { path, stat }) => {
            assert_eq!(path, "/rc");
            assert_eq!(stat.ephemeral_owner, 0);
            assert_eq!(stat.data_length, 2);
        }
        other => panic!("createContainer must reply Create2Response: {other:?}"),
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_node_expires_unless_it_has_children() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    // Created first, so its TTL runs out first: it must survive because it has a child.
    c.create("/ttl-parent", b"", &ttl(300)).await.unwrap();
    c.create("/ttl-parent/k", b"", &persistent()).await.unwrap();
    let (stat, _) = c.create("/ttl", b"", &ttl(300)).await.unwrap();
    assert_eq!(stat.ephemeral_owner, 0, "TTL nodes show ephemeralOwner 0");
    assert!(!stat.is_invalid());
    let long = c.create("/ttl-long", b"", &ttl(3_600_000)).await.unwrap().0;
    assert_eq!(long.ephemeral_owner, 0);
    let (_, watcher) = c.check_and_watch_stat("/ttl").await.unwrap();
    let e = within("TTL node reaped", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDeleted, "/ttl"));
    assert!(c.check_stat("/ttl-parent").await.unwrap().is_some(), "a TTL node with children is kept");
    assert!(c.check_stat("/ttl-long").await.unwrap().is_some(), "an unexpired TTL node is kept");
    // Once the child is gone the expired parent goes too.
    c.delete("/ttl-parent/k", None).await.unwrap();
    gone(&c, "/ttl-parent").await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_sequential_and_in_multi() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/tq", b"", &persistent()).await.unwrap();
    let opts = CreateMode::PersistentSequential.with_acls(Acls::anyone_all()).with_ttl(Duration::from_secs(3600));
    let (stat, seq) = c.create("/tq/item-", b"", &opts).await.unwrap();
    assert_eq!(seq.into_i64(), 0);
    assert_eq!(stat.ephemeral_owner, 0);
    let mut w = c.new_multi_writer();
    w.add_create("/tq/m", b"", &ttl(3_600_000)).unwrap();
    let res = w.commit().await.unwrap();
    match &res[0] {
        zk::MultiWriteResult::Create { path, stat } => {
            assert_eq!(path, "/tq/m");
            assert_eq!(stat.ephemeral_owner, 0);
        }
        other => panic!("{other:?}"),
    }
    let mut kids = c.list_children("/tq").await.unwrap();
    kids.sort();
    assert_eq!(kids, vec!["item-0000000000", "m"]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_is_unimplemented_without_extended_types() {
    let srv = TestServer::start_with(|cfg| cfg.extended_types_enabled = false).await;
    let c = srv.client().await;
    assert_eq!(c.create("/t", b"", &ttl(1000)).await.unwrap_err(), Error::Unimplemented);
    assert_eq!(c.check_stat("/t").await.unwrap(), None);
    // The session survives the refusal and ordinary creates still work.
    c.create("/plain", b"", &persistent()).await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_max_value_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let make = |path: &str, ttl: i64| {
        Request::CreateTtl(warden_proto::CreateTtlRequest {
            path: path.into(),
            data: Some(vec![]),
            acl: open_acl(),
            flags: 5,
            ttl,
        })
    };
    let (h, _) = r.call(&make("/tmax", 0x00FF_FFFF_FFFF)).await;
    assert_eq!(h.err, 0, "the largest TTL is accepted");
    let (h, _) = r.call(&make("/tover", 0x00FF_FFFF_FFFF + 1)).await;
    assert_eq!(h.err, ErrorCode::BadArguments.code(), "TTL above the maximum");
    let (h, _) = r.call(&make("/tneg", -5)).await;
    assert_eq!(h.err, ErrorCode::BadArguments.code(), "negative TTL");
    srv.stop().await;
}
