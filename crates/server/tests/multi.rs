//! multi (14) and multiRead (22), as ZooKeeper's `MultiOperationRecord`, `MultiResponse` and
//! `OpResult`: atomicity, one zxid per multi, per-op error results on failure, result types
//! mirroring sub-op types, check inside multi, and multiRead's independent per-op results.

mod common;

use common::*;
use warden_proto::{ErrorCode, MultiOp, MultiResult, PathVersion, Request, Response};
use zk::{Acls, CreateMode, Error, MultiReadResult, MultiWriteError, MultiWriteResult};
use zookeeper_client as zk;

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_success_applies_all_with_one_zxid() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let mut w = c.new_multi_writer();
    w.add_create("/m", b"v0", &persistent()).unwrap();
    w.add_create("/m/a", b"", &persistent()).unwrap();
    w.add_set_data("/m", b"v1", Some(0)).unwrap();
    w.add_check_version("/m", 1).unwrap();
    w.add_create("/m/seq-", b"", &CreateMode::PersistentSequential.with_acls(Acls::anyone_all())).unwrap();
    w.add_delete("/m/a", Some(0)).unwrap();
    let results = w.commit().await.expect("multi succeeds");
    assert_eq!(results.len(), 6);
    let zxid = match &results[0] {
        MultiWriteResult::Create { path, stat } => {
            assert_eq!(path, "/m");
            assert!(!stat.is_invalid());
            stat.czxid
        }
        other => panic!("result 0: {other:?}"),
    };
    match &results[1] {
        MultiWriteResult::Create { path, stat } => {
            assert_eq!(path, "/m/a");
            assert_eq!(stat.czxid, zxid, "all sub-ops share one zxid");
        }
        other => panic!("result 1: {other:?}"),
    }
    match &results[2] {
        MultiWriteResult::SetData { stat } => {
            assert_eq!(stat.version, 1);
            assert_eq!(stat.mzxid, zxid);
        }
        other => panic!("result 2: {other:?}"),
    }
    assert_eq!(results[3], MultiWriteResult::Check);
    match &results[4] {
        MultiWriteResult::Create { path, .. } => {
            assert_eq!(path, "/m/seq-0000000001", "sequence counts the earlier sub-op create")
        }
        other => panic!("result 4: {other:?}"),
    }
    assert_eq!(results[5], MultiWriteResult::Delete);

    let (data, stat) = c.get_data("/m").await.unwrap();
    assert_eq!(data, b"v1");
    assert_eq!(stat.version, 1);
    assert_eq!(stat.czxid, zxid);
    assert_eq!(stat.mzxid, zxid);
    assert_eq!(stat.pzxid, zxid);
    assert_eq!(stat.num_children, 1);
    assert_eq!(c.list_children("/m").await.unwrap(), vec!["seq-0000000001".to_string()]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_failure_is_atomic_and_reports_index() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/base", b"orig", &persistent()).await.unwrap();
    let before = c.get_data("/base").await.unwrap().1;
    let mut w = c.new_multi_writer();
    w.add_create("/f1", b"", &persistent()).unwrap();
    w.add_set_data("/base", b"changed", None).unwrap();
    w.add_set_data("/missing", b"", None).unwrap();
    w.add_create("/f2", b"", &persistent()).unwrap();
    let err = w.commit().await.unwrap_err();
    assert_eq!(err, MultiWriteError::OperationFailed { index: 2, source: Error::NoNode });
    assert_eq!(c.check_stat("/f1").await.unwrap(), None, "no sub-op of a failed multi is applied");
    assert_eq!(c.check_stat("/f2").await.unwrap(), None);
    let (data, after) = c.get_data("/base").await.unwrap();
    assert_eq!(data, b"orig");
    assert_eq!(after, before);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_check_version_failure() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/chk", b"", &persistent()).await.unwrap();
    let mut w = c.new_multi_writer();
    w.add_check_version("/chk", 3).unwrap();
    w.add_create("/chk/x", b"", &persistent()).unwrap();
    assert_eq!(w.commit().await.unwrap_err(), MultiWriteError::OperationFailed { index: 0, source: Error::BadVersion });
    assert_eq!(c.check_stat("/chk/x").await.unwrap(), None);

    let mut w = c.new_multi_writer();
    w.add_create("/chk/y", b"", &persistent()).unwrap();
    w.add_check_version("/chk/none", 0).unwrap();
    assert_eq!(w.commit().await.unwrap_err(), MultiWriteError::OperationFailed { index: 1, source: Error::NoNode });
    assert_eq!(c.check_stat("/chk/y").await.unwrap(), None);

    // CheckWriter: a successful guard.
    let mut cw = c.new_check_writer("/chk", Some(0)).unwrap();
    cw.add_create("/chk/z", b"", &persistent()).unwrap();
    let res = cw.commit().await.unwrap();
    assert!(matches!(&res[0], MultiWriteResult::Create { path, .. } if path == "/chk/z"));
    // Check sees earlier sub-ops' effects (pending state).
    let mut w = c.new_multi_writer();
    w.add_set_data("/chk", b"1", Some(0)).unwrap();
    w.add_check_version("/chk", 1).unwrap();
    w.commit().await.expect("check sees the preceding setData");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_later_ops_see_earlier_ops() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let mut w = c.new_multi_writer();
    w.add_create("/t", b"", &persistent()).unwrap();
    w.add_create("/t/u", b"", &persistent()).unwrap();
    w.add_delete("/t/u", None).unwrap();
    w.add_delete("/t", None).unwrap();
    let res = w.commit().await.unwrap();
    assert_eq!(res.len(), 4);
    assert_eq!(c.check_stat("/t").await.unwrap(), None);
    // A create that collides with an earlier sub-op fails the whole multi.
    let mut w = c.new_multi_writer();
    w.add_create("/dup", b"", &persistent()).unwrap();
    w.add_create("/dup", b"", &persistent()).unwrap();
    assert_eq!(w.commit().await.unwrap_err(), MultiWriteError::OperationFailed { index: 1, source: Error::NodeExists });
    assert_eq!(c.check_stat("/dup").await.unwrap(), None);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_ephemeral_create_is_owned() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let mut w = c.new_multi_writer();
    w.add_create("/me", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).unwrap();
    let res = w.commit().await.unwrap();
    match &res[0] {
        MultiWriteResult::Create { stat, .. } => assert_eq!(stat.ephemeral_owner, c.session_id().0),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.list_ephemerals("/").await.unwrap(), vec!["/me"]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_failure_results_per_op_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let ops = vec![
        MultiOp::Create(create_req("/r1", Some(b""), 0)),
        MultiOp::Delete(PathVersion { path: "/absent".into(), version: -1 }),
        MultiOp::Create(create_req("/r2", Some(b""), 0)),
        MultiOp::Check(PathVersion { path: "/".into(), version: -1 }),
    ];
    let (h, body) = r.call(&Request::Multi(ops)).await;
    assert_eq!(h.err, 0, "a failed multi still has err 0 in its header");
    match body {
        Some(Response::Multi(results)) => assert_eq!(
            results,
            vec![
                MultiResult::Error(0),
                MultiResult::Error(ErrorCode::NoNode.code()),
                MultiResult::Error(ErrorCode::RuntimeInconsistency.code()),
                MultiResult::Error(ErrorCode::RuntimeInconsistency.code()),
            ]
        ),
        other => panic!("unexpected {other:?}"),
    }
    let (h, _) = r.call(&Request::Exists(path_watch("/r1", false))).await;
    assert_eq!(h.err, ErrorCode::NoNode.code());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_result_types_mirror_sub_ops_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let ops = vec![
        MultiOp::Create(create_req("/c1", Some(b"a"), 0)),
        MultiOp::Create2(create_req("/c2", Some(b"bb"), 0)),
        MultiOp::CreateContainer(create_req("/c3", Some(b""), 4)),
        MultiOp::SetData(warden_proto::SetDataRequest {
            path: "/c1".into(),
            data: Some(b"x".to_vec().into()),
            version: 0,
        }),
        MultiOp::Check(PathVersion { path: "/c1".into(), version: 1 }),
        MultiOp::Delete(PathVersion { path: "/c2".into(), version: 0 }),
    ];
    let (h, body) = r.call(&Request::Multi(ops)).await;
    assert_eq!(h.err, 0);
    let results = match body {
        Some(Response::Multi(results)) => results,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(results.len(), 6);
    assert_eq!(
        results[0],
        MultiResult::Create { path: "/c1".into() },
        "type-1 create gets a type-1 result (path only)"
    );
    match &results[1] {
        MultiResult::Create2 { path, stat } => {
            assert_eq!(path, "/c2");
            assert_eq!(stat.data_length, 2);
        }
        other => panic!("create2 result: {other:?}"),
    }
    match &results[2] {
        MultiResult::Create2 { path, stat } => {
            assert_eq!(path, "/c3");
            assert_eq!(stat.ephemeral_owner, 0, "containers show ephemeralOwner 0");
        }
        other => panic!("createContainer result must be type 15: {other:?}"),
    }
    match &results[3] {
        MultiResult::SetData { stat } => assert_eq!(stat.version, 1),
        other => panic!("setData result: {other:?}"),
    }
    assert_eq!(results[4], MultiResult::Check);
    assert_eq!(results[5], MultiResult::Delete);
    assert_eq!(
        h.zxid,
        match &results[3] {
            MultiResult::SetData { stat } => stat.mzxid,
            _ => unreachable!(),
        }
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_read_results_are_independent() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/mr", b"data", &persistent()).await.unwrap();
    c.create("/mr/k", b"", &persistent()).await.unwrap();
    let mut rd = c.new_multi_reader();
    rd.add_get_data("/mr").unwrap();
    rd.add_get_children("/mr").unwrap();
    rd.add_get_data("/nope").unwrap();
    rd.add_get_children("/nope").unwrap();
    rd.add_get_data("/mr/k").unwrap();
    let res = rd.commit().await.unwrap();
    assert_eq!(res.len(), 5);
    match &res[0] {
        MultiReadResult::Data { data, stat } => {
            assert_eq!(data, b"data");
            assert_eq!(stat.num_children, 1);
        }
        other => panic!("{other:?}"),
    }
    match &res[1] {
        MultiReadResult::Children { children } => assert_eq!(children, &vec!["k".to_string()]),
        other => panic!("{other:?}"),
    }
    assert!(matches!(&res[2], MultiReadResult::Error { err: Error::NoNode }), "{:?}", res[2]);
    assert!(matches!(&res[3], MultiReadResult::Error { err: Error::NoNode }), "{:?}", res[3]);
    match &res[4] {
        MultiReadResult::Data { data, .. } => assert!(data.is_empty()),
        other => panic!("a failure must not spill into later multiRead slots: {other:?}"),
    }
    srv.stop().await;
}
