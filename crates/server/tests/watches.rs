//! Watches (ZooKeeper's `DataTree` watch tables, `WatchManager`, `AddWatchMode`): one-shot data /
//! exist / child watches, persistent and persistent-recursive watches, trigger rules,
//! per-connection dedupe, notification zxids, ordering of notifications before later replies, and
//! removeWatches / checkWatches.
//!
//! Exact event lists (including the absence of events) are checked with the raw client: a
//! "barrier" read issued after the writes returns only after every notification those writes
//! triggered has been written to the connection (ZooKeeper's ordering guarantee).

mod common;

use std::time::Duration;

use common::*;
use warden_proto::{add_watch_mode, watcher_type, ErrorCode, EventType as Ev, Request, Response, WatchesRequest};
use zk::{Acls, AddWatchMode, CreateMode, EventType};
use zookeeper_client as zk;

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Reads "/" so that every notification triggered before now is queued; returns and clears them
/// as (type, path) pairs.
async fn drain_after_barrier(r: &mut RawClient) -> Vec<(i32, String)> {
    let (h, _) = r.call(&Request::Exists(path_watch("/", false))).await;
    assert_eq!(h.err, 0);
    r.notifications.drain(..).map(|(_, e)| (e.event_type, e.path)).collect()
}

fn ev(t: Ev, p: &str) -> (i32, String) {
    (t.code(), p.to_string())
}

async fn raw_add_watch(r: &mut RawClient, path: &str, mode: i32) {
    let (h, body) = r.call(&Request::AddWatch(warden_proto::AddWatchRequest { path: path.into(), mode })).await;
    assert_eq!(h.err, 0, "addWatch {path}");
    assert_eq!(body, Some(Response::AddWatch));
}

async fn check_watches(r: &mut RawClient, path: &str, t: i32) -> i32 {
    r.call(&Request::CheckWatches(WatchesRequest { path: path.into(), watcher_type: t })).await.0.err
}

async fn remove_watches(r: &mut RawClient, path: &str, t: i32) -> i32 {
    r.call(&Request::RemoveWatches(WatchesRequest { path: path.into(), watcher_type: t })).await.0.err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_watch_fires_on_set_data_with_txn_zxid() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    a.create("/w", b"0", &persistent()).await.unwrap();
    let (_, _, watcher) = b.get_and_watch_data("/w").await.unwrap();
    let stat = a.set_data("/w", b"1", None).await.unwrap();
    let e = within("NodeDataChanged", watcher.changed()).await;
    assert_eq!(e.event_type, EventType::NodeDataChanged);
    assert_eq!(e.path, "/w");
    assert_eq!(e.zxid, stat.mzxid, "3.9 notifications carry the firing txn's zxid");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_watch_fires_on_delete() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    a.create("/wd", b"", &persistent()).await.unwrap();
    let (_, _, watcher) = b.get_and_watch_data("/wd").await.unwrap();
    a.delete("/wd", None).await.unwrap();
    let e = within("NodeDeleted", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDeleted, "/wd"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exists_watch_on_missing_node_fires_on_create() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    let (stat, watcher) = b.check_and_watch_stat("/later").await.unwrap();
    assert_eq!(stat, None);
    let (created, _) = a.create("/later", b"", &persistent()).await.unwrap();
    let e = within("NodeCreated", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeCreated, "/later"));
    assert_eq!(e.zxid, created.czxid);
    // An exists watch on a present node fires on data change.
    let (stat, watcher) = b.check_and_watch_stat("/later").await.unwrap();
    assert!(stat.is_some());
    a.set_data("/later", b"x", None).await.unwrap();
    assert_eq!(within("NodeDataChanged", watcher.changed()).await.event_type, EventType::NodeDataChanged);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_watch_fires_on_child_create_and_delete_and_node_delete() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    a.create("/cw", b"", &persistent()).await.unwrap();
    let (_, watcher) = b.list_and_watch_children("/cw").await.unwrap();
    a.create("/cw/k", b"", &persistent()).await.unwrap();
    let e = within("NodeChildrenChanged on create", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeChildrenChanged, "/cw"));

    let (_, _, watcher) = b.get_and_watch_children("/cw").await.unwrap();
    a.delete("/cw/k", None).await.unwrap();
    let e = within("NodeChildrenChanged on delete", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeChildrenChanged, "/cw"));

    let (_, watcher) = b.list_and_watch_children("/cw").await.unwrap();
    a.delete("/cw", None).await.unwrap();
    let e = within("NodeDeleted for child watch", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDeleted, "/cw"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_precedes_later_reply_that_sees_the_change() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    a.create("/ord", b"old", &persistent()).await.unwrap();
    let (_, _, watcher) = b.get_and_watch_data("/ord").await.unwrap();
    a.set_data("/ord", b"new", None).await.unwrap();
    // Wait until b observes the new data through an ordinary read...
    eventually("b sees the new data", || async { (b.get_data("/ord").await.unwrap().0 == b"new").then_some(()) }).await;
    // ...by then the notification must already have been delivered.
    let e = tokio::time::timeout(Duration::ZERO, watcher.changed())
        .await
        .expect("watch event must arrive before the reply to a read that observes the change");
    assert_eq!(e.event_type, EventType::NodeDataChanged);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_watch_fires_once_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    w.create("/once", b"", &persistent()).await.unwrap();
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let (h, _) = r.call(&Request::GetData(path_watch("/once", true))).await;
    assert_eq!(h.err, 0);
    w.set_data("/once", b"1", None).await.unwrap();
    w.set_data("/once", b"2", None).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![ev(Ev::NodeDataChanged, "/once")]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_deduplicated_per_connection_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    w.create("/dd", b"", &persistent()).await.unwrap();
    w.create("/dd/n", b"", &persistent()).await.unwrap();
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    // exists + getData watches share the data table: one event.
    r.call(&Request::Exists(path_watch("/dd/n", true))).await;
    r.call(&Request::GetData(path_watch("/dd/n", true))).await;
    w.set_data("/dd/n", b"x", None).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![ev(Ev::NodeDataChanged, "/dd/n")]);

    // Data + child watch on a node that is deleted: one NodeDeleted; the parent's child watch fires too.
    r.call(&Request::GetData(path_watch("/dd/n", true))).await;
    r.call(&Request::GetChildren(path_watch("/dd/n", true))).await;
    r.call(&Request::GetChildren2(path_watch("/dd", true))).await;
    w.delete("/dd/n", None).await.unwrap();
    let mut got = drain_after_barrier(&mut r).await;
    got.sort();
    let mut want = vec![ev(Ev::NodeDeleted, "/dd/n"), ev(Ev::NodeChildrenChanged, "/dd")];
    want.sort();
    assert_eq!(got, want);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_rules_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    w.create("/tr", b"", &persistent()).await.unwrap();
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    // A child watch does not fire on the node's own setData; a data watch does not fire on child changes.
    r.call(&Request::GetChildren(path_watch("/tr", true))).await;
    w.set_data("/tr", b"d", None).await.unwrap();
    w.set_acl("/tr", &[zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())], None).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![], "setData/setACL must not fire child watches");
    r.call(&Request::GetData(path_watch("/tr", true))).await;
    w.create("/tr/c", b"", &persistent()).await.unwrap();
    assert_eq!(
        drain_after_barrier(&mut r).await,
        vec![ev(Ev::NodeChildrenChanged, "/tr")],
        "only the child watch fires"
    );
    w.set_acl("/tr", &[zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())], None).await.unwrap();
    w.sync("/tr").await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![], "setACL and sync fire nothing");
    w.set_data("/tr", b"e", None).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![ev(Ev::NodeDataChanged, "/tr")]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_data_on_missing_node_sets_no_watch_but_exists_does_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let (h, _) = r.call(&Request::GetData(path_watch("/gm", true))).await;
    assert_eq!(h.err, ErrorCode::NoNode.code());
    let (h, _) = r.call(&Request::GetChildren(path_watch("/gm", true))).await;
    assert_eq!(h.err, ErrorCode::NoNode.code());
    assert_eq!(check_watches(&mut r, "/gm", watcher_type::ANY).await, ErrorCode::NoWatcher.code());
    let (h, _) = r.call(&Request::Exists(path_watch("/em", true))).await;
    assert_eq!(h.err, ErrorCode::NoNode.code());
    assert_eq!(check_watches(&mut r, "/em", watcher_type::DATA).await, 0, "exists on a missing node sets a data watch");
    w.create("/gm", b"", &persistent()).await.unwrap();
    w.create("/em", b"", &persistent()).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![ev(Ev::NodeCreated, "/em")]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_watch_events() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    let mut watcher = b.watch("/pw", AddWatchMode::Persistent).await.unwrap();
    a.create("/pw", b"", &persistent()).await.unwrap();
    a.set_data("/pw", b"1", None).await.unwrap();
    a.create("/pw/c", b"", &persistent()).await.unwrap();
    a.set_data("/pw/c", b"1", None).await.unwrap();
    a.delete("/pw/c", None).await.unwrap();
    a.delete("/pw", None).await.unwrap();
    a.create("/pw", b"", &persistent()).await.unwrap();
    let want = [
        EventType::NodeCreated,
        EventType::NodeDataChanged,
        EventType::NodeChildrenChanged,
        EventType::NodeChildrenChanged,
        EventType::NodeDeleted,
        EventType::NodeCreated,
    ];
    for (i, t) in want.into_iter().enumerate() {
        let e = within(&format!("persistent event {i}"), watcher.changed()).await;
        assert_eq!((e.event_type, e.path.as_str()), (t, "/pw"), "event {i}");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_watch_exact_events_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    raw_add_watch(&mut r, "/pe", add_watch_mode::PERSISTENT).await;
    w.create("/pe", b"", &persistent()).await.unwrap();
    w.create("/pe/c", b"", &persistent()).await.unwrap();
    w.create("/pe/c/g", b"", &persistent()).await.unwrap();
    w.set_data("/pe/c", b"x", None).await.unwrap();
    w.set_data("/pe", b"x", None).await.unwrap();
    assert_eq!(
        drain_after_barrier(&mut r).await,
        vec![ev(Ev::NodeCreated, "/pe"), ev(Ev::NodeChildrenChanged, "/pe"), ev(Ev::NodeDataChanged, "/pe")],
        "a PERSISTENT watch covers only its own path"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_recursive_watch_events() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    let mut watcher = b.watch("/rw", AddWatchMode::PersistentRecursive).await.unwrap();
    a.create("/rw", b"", &persistent()).await.unwrap();
    a.create("/rw/a", b"", &persistent()).await.unwrap();
    a.create("/rw/a/b", b"", &persistent()).await.unwrap();
    a.set_data("/rw/a/b", b"1", None).await.unwrap();
    a.delete("/rw/a/b", None).await.unwrap();
    a.set_data("/rw", b"1", None).await.unwrap();
    let want = [
        (EventType::NodeCreated, "/rw"),
        (EventType::NodeCreated, "/rw/a"),
        (EventType::NodeCreated, "/rw/a/b"),
        (EventType::NodeDataChanged, "/rw/a/b"),
        (EventType::NodeDeleted, "/rw/a/b"),
        (EventType::NodeDataChanged, "/rw"),
    ];
    for (i, (t, p)) in want.into_iter().enumerate() {
        let e = within(&format!("recursive event {i}"), watcher.changed()).await;
        assert_eq!((e.event_type, e.path.as_str()), (t, p), "event {i}");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_recursive_never_sends_children_changed_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    w.create("/other", b"", &persistent()).await.unwrap();
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    raw_add_watch(&mut r, "/rr", add_watch_mode::PERSISTENT_RECURSIVE).await;
    w.create("/rr", b"", &persistent()).await.unwrap();
    w.create("/rr/x", b"", &persistent()).await.unwrap();
    w.create("/rrx", b"", &persistent()).await.unwrap(); // sibling with a common string prefix
    w.create("/other/y", b"", &persistent()).await.unwrap();
    w.delete("/rr/x", None).await.unwrap();
    assert_eq!(
        drain_after_barrier(&mut r).await,
        vec![ev(Ev::NodeCreated, "/rr"), ev(Ev::NodeCreated, "/rr/x"), ev(Ev::NodeDeleted, "/rr/x")]
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_remove_standard_watches_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    w.create("/rm", b"", &persistent()).await.unwrap();
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let nowatcher = ErrorCode::NoWatcher.code();
    r.call(&Request::GetData(path_watch("/rm", true))).await;
    assert_eq!(check_watches(&mut r, "/rm", watcher_type::DATA).await, 0);
    assert_eq!(check_watches(&mut r, "/rm", watcher_type::ANY).await, 0);
    assert_eq!(check_watches(&mut r, "/rm", watcher_type::CHILDREN).await, nowatcher);
    assert_eq!(remove_watches(&mut r, "/rm", watcher_type::CHILDREN).await, nowatcher);
    assert_eq!(check_watches(&mut r, "/rm", watcher_type::DATA).await, 0, "checkWatches does not remove");
    assert_eq!(remove_watches(&mut r, "/rm", watcher_type::DATA).await, 0);
    assert_eq!(check_watches(&mut r, "/rm", watcher_type::DATA).await, nowatcher);
    assert_eq!(remove_watches(&mut r, "/rm", watcher_type::DATA).await, nowatcher);
    w.set_data("/rm", b"x", None).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![], "a removed watch must not fire");

    r.call(&Request::GetChildren(path_watch("/rm", true))).await;
    r.call(&Request::Exists(path_watch("/rm", true))).await;
    assert_eq!(check_watches(&mut r, "/rm", watcher_type::CHILDREN).await, 0);
    assert_eq!(remove_watches(&mut r, "/rm", watcher_type::ANY).await, 0);
    assert_eq!(check_watches(&mut r, "/rm", watcher_type::ANY).await, nowatcher);
    w.create("/rm/k", b"", &persistent()).await.unwrap();
    w.set_data("/rm", b"y", None).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_remove_persistent_watches_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let nowatcher = ErrorCode::NoWatcher.code();
    raw_add_watch(&mut r, "/pp", add_watch_mode::PERSISTENT).await;
    assert_eq!(check_watches(&mut r, "/pp", watcher_type::PERSISTENT).await, 0);
    assert_eq!(check_watches(&mut r, "/pp", watcher_type::DATA).await, nowatcher, "Data matches only STANDARD entries");
    assert_eq!(check_watches(&mut r, "/pp", watcher_type::PERSISTENT_RECURSIVE).await, nowatcher);
    assert_eq!(check_watches(&mut r, "/pp", watcher_type::ANY).await, 0);
    assert_eq!(remove_watches(&mut r, "/pp", watcher_type::PERSISTENT_RECURSIVE).await, nowatcher);
    assert_eq!(remove_watches(&mut r, "/pp", watcher_type::PERSISTENT).await, 0);
    assert_eq!(check_watches(&mut r, "/pp", watcher_type::ANY).await, nowatcher);

    raw_add_watch(&mut r, "/pr", add_watch_mode::PERSISTENT_RECURSIVE).await;
    assert_eq!(check_watches(&mut r, "/pr", watcher_type::PERSISTENT_RECURSIVE).await, 0);
    assert_eq!(check_watches(&mut r, "/pr", watcher_type::PERSISTENT).await, nowatcher);
    assert_eq!(remove_watches(&mut r, "/pr", watcher_type::ANY).await, 0);
    assert_eq!(check_watches(&mut r, "/pr", watcher_type::ANY).await, nowatcher);

    w.create("/pp", b"", &persistent()).await.unwrap();
    w.create("/pr", b"", &persistent()).await.unwrap();
    w.create("/pr/x", b"", &persistent()).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r).await, vec![], "removed persistent watches must not fire");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_watches_only_touches_own_connection_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    w.create("/own", b"", &persistent()).await.unwrap();
    let mut r1 = RawClient::new_session(srv.addr, 10_000).await;
    let mut r2 = RawClient::new_session(srv.addr, 10_000).await;
    r2.call(&Request::GetData(path_watch("/own", true))).await;
    assert_eq!(check_watches(&mut r1, "/own", watcher_type::DATA).await, ErrorCode::NoWatcher.code());
    assert_eq!(remove_watches(&mut r1, "/own", watcher_type::ANY).await, ErrorCode::NoWatcher.code());
    w.set_data("/own", b"x", None).await.unwrap();
    assert_eq!(drain_after_barrier(&mut r2).await, vec![ev(Ev::NodeDataChanged, "/own")]);
    assert_eq!(drain_after_barrier(&mut r1).await, vec![]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn crate_watcher_remove_succeeds() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/cr", b"", &persistent()).await.unwrap();
    let (_, _, watcher) = c.get_and_watch_data("/cr").await.unwrap();
    watcher.remove().await.expect("removeWatches of a live data watch succeeds");
    let (_, watcher) = c.list_and_watch_children("/cr").await.unwrap();
    watcher.remove().await.expect("removeWatches of a live child watch succeeds");
    let pw = c.watch("/cr", AddWatchMode::PersistentRecursive).await.unwrap();
    pw.remove().await.expect("removeWatches of a persistent watch succeeds");
    // The session is still healthy afterwards.
    let (_, _, watcher) = c.get_and_watch_data("/cr").await.unwrap();
    c.set_data("/cr", b"x", None).await.unwrap();
    assert_eq!(within("event", watcher.changed()).await.event_type, EventType::NodeDataChanged);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_frame_shape_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    r.call(&Request::Exists(path_watch("/shape", true))).await;
    let (stat, _) = w.create("/shape", b"", &persistent()).await.unwrap();
    let (h, e) = r.next_notification().await;
    assert_eq!(h.xid, -1);
    assert_eq!(h.err, 0);
    assert_eq!(h.zxid, stat.czxid, "3.9: notification header zxid is the firing txn's zxid");
    assert_eq!(e.event_type, Ev::NodeCreated.code());
    assert_eq!(e.state, 3, "server-sent events always carry SyncConnected");
    assert_eq!(e.path, "/shape");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_write_notification_precedes_its_reply_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    r.call(&Request::Create(create_req("/self", Some(b""), 0))).await;
    r.call(&Request::GetData(path_watch("/self", true))).await;
    let (h, _) = r
        .call(&Request::SetData(warden_proto::SetDataRequest {
            path: "/self".into(),
            data: Some(b"x".to_vec().into()),
            version: -1,
        }))
        .await;
    assert_eq!(h.err, 0);
    let queued: Vec<(i32, String)> = r.notifications.drain(..).map(|(_, e)| (e.event_type, e.path)).collect();
    assert_eq!(queued, vec![ev(Ev::NodeDataChanged, "/self")], "the watch event is written before the setData reply");
    srv.stop().await;
}
