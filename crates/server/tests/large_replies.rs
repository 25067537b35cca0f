//! Replies above jute.maxbuffer (issue 25). ZooKeeper applies the limit to what a server reads,
//! not to what it sends: getChildren, getChildren2, getAllChildrenNumber, getEphemerals and
//! multiRead of a node with thousands of long-named children, and getData of a node written while
//! the limit was higher, are answered whole, and the connection goes on serving. (A client that
//! wants a bound enforces its own; `zookeeper-client` has none.)

mod common;

use common::*;
use tokio::task::JoinSet;
use zk::{Acls, CreateMode, MultiReadResult};
use zookeeper_client as zk;

const MAX_BUFFER: usize = 0xfffff;

/// Names of `len` characters, each starting with its index so they are distinct and sort by it.
fn long_names(n: usize, len: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:06}{}", "a".repeat(len - 6))).collect()
}

/// Creates `parent/<name>` for every name, 200 at a time.
async fn create_all(c: &zk::Client, parent: &str, names: &[String], mode: CreateMode) {
    for chunk in names.chunks(200) {
        let mut set = JoinSet::new();
        for name in chunk {
            let (c, path) = (c.clone(), format!("{parent}/{name}"));
            set.spawn(async move { c.create(&path, b"", &mode.with_acls(Acls::anyone_all())).await.map(|_| ()) });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_lists_above_jute_maxbuffer_are_answered_whole() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    c.create("/big", b"", &persistent).await.unwrap();
    let names = long_names(1_000, 2_000);
    create_all(&c, "/big", &names, CreateMode::Persistent).await;

    let mut got = within("getChildren", c.list_children("/big")).await.unwrap();
    got.sort();
    assert_eq!(got.len(), names.len());
    assert!(got.iter().map(|n| 4 + n.len()).sum::<usize>() > MAX_BUFFER, "the reply must be above jute.maxbuffer");
    assert_eq!(got, names);
    let (mut got, stat) = within("getChildren2", c.get_children("/big")).await.unwrap();
    got.sort();
    assert_eq!((got, stat.num_children), (names.clone(), 1_000));
    assert_eq!(within("getAllChildrenNumber", c.count_descendants_number("/big")).await.unwrap(), 1_000);
    let mut reader = c.new_multi_reader();
    reader.add_get_children("/big").unwrap();
    reader.add_get_data("/big").unwrap();
    let results = within("multiRead", reader.commit()).await.unwrap();
    let MultiReadResult::Children { children } = &results[0] else { panic!("{:?}", &results[..1]) };
    assert_eq!(children.len(), 1_000);
    assert!(matches!(results[1], MultiReadResult::Data { .. }));

    // Ephemeral paths of one session above the limit.
    let owner = srv.client().await;
    owner.create("/eph", b"", &persistent).await.unwrap();
    let eph = long_names(600, 2_000);
    create_all(&owner, "/eph", &eph, CreateMode::Ephemeral).await;
    let mut paths = within("getEphemerals", owner.list_ephemerals("/")).await.unwrap();
    paths.sort();
    assert_eq!(paths, eph.iter().map(|n| format!("/eph/{n}")).collect::<Vec<_>>());

    // Both connections go on serving.
    assert_eq!(c.get_data("/big").await.unwrap().1.num_children, 1_000);
    assert_eq!(owner.get_data("/eph").await.unwrap().1.num_children, 600);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_before_the_limit_was_lowered_is_served() {
    let srv = TestServer::start_with(|cfg| cfg.jute_max_buffer = 8 << 20).await;
    let c = srv.client().await;
    let data: Vec<u8> = (0..5 << 20).map(|i| (i % 251) as u8).collect();
    c.create("/large", &data, &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
    drop(c);
    let dir = srv.stop_keeping_dir().await;

    // Restarted with the default limit: the log record is recovered and the data is served.
    let srv = TestServer::start_in(dir, |_| {}).await;
    let c = srv.client().await;
    let (got, stat) = within("getData", c.get_data("/large")).await.unwrap();
    assert_eq!((got.len(), stat.data_length as usize), (data.len(), data.len()));
    assert!(got == data, "the data read back differs");
    // A write of that size is now refused (the request frame is above the limit): the connection
    // is closed, as ZooKeeper closes it, and the server goes on serving others.
    let err = c.set_data("/large", &data, None).await.unwrap_err();
    // The client may still be writing the frame when the server closes: then it reports the
    // closed socket (broken pipe, reset) instead of a connection loss.
    let closed_socket = matches!(err, zk::Error::Custom(_))
        && ["BrokenPipe", "ConnectionReset"].iter().any(|k| format!("{err:?}").contains(k));
    assert!(
        closed_socket || matches!(err, zk::Error::ConnectionLoss | zk::Error::SessionExpired | zk::Error::ClientClosed),
        "{err:?}"
    );
    let other = srv.client().await;
    assert_eq!(other.get_data("/large").await.unwrap().1.data_length as usize, data.len());
    srv.stop().await;
}
