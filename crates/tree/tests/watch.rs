//! Watch rules (registration, triggers, setWatches, removeWatches / checkWatches, as ZooKeeper's
//! `DataTree` and `WatchManager` apply them) driven through real txns.

mod common;
use common::*;
use warden_tree::{AddWatchMode, SetWatchesLists, WatchManager, WatchTableKind, WatcherType};

#[test]
fn one_shot_data_and_child_watches() {
    let mut h = Harness::new();
    h.watches.add_data_watch(1, "/a"); // exists on a missing node
    h.watches.add_child_watch(2, "/");
    h.write(0, create("/a", 0)).unwrap();
    assert_eq!(h.take_fired(), vec![(1, 1, "/a".into()), (2, 4, "/".into())]);
    h.write(0, set_data("/a", b"x", -1)).unwrap();
    assert_eq!(h.take_fired(), vec![], "one-shot watches are gone");
    h.watches.add_data_watch(1, "/a");
    h.watches.add_data_watch(1, "/a"); // dedupe per connection
    h.watches.add_data_watch(3, "/a");
    h.write(0, set_data("/a", b"y", -1)).unwrap();
    assert_eq!(h.take_fired(), vec![(1, 3, "/a".into()), (3, 3, "/a".into())]);
    h.write(0, WriteOpExt::set_acl("/a")).unwrap();
    h.write(0, WriteOpExt::check_in_multi("/a")).unwrap();
    assert_eq!(h.take_fired(), vec![], "setACL and check fire nothing");
}

struct WriteOpExt;
impl WriteOpExt {
    fn set_acl(p: &str) -> warden_tree::WriteOp {
        warden_tree::WriteOp::SetAcl { path: p.into(), acl: warden_proto::Acl::open_unsafe(), version: -1 }
    }
    fn check_in_multi(p: &str) -> warden_tree::WriteOp {
        warden_tree::WriteOp::Multi(vec![warden_tree::WriteOp::Check { path: p.into(), version: -1 }])
    }
}

#[test]
fn delete_suppresses_child_table_for_data_notified() {
    let mut h = Harness::new();
    h.write(0, create("/a", 0)).unwrap();
    h.watches.add_data_watch(1, "/a");
    h.watches.add_child_watch(1, "/a");
    h.watches.add_child_watch(2, "/a");
    h.watches.add_child_watch(3, "/");
    h.write(0, delete("/a", -1)).unwrap();
    assert_eq!(h.take_fired(), vec![(1, 2, "/a".into()), (2, 2, "/a".into()), (3, 4, "/".into())]);
    assert_eq!(h.watches.watch_count(), 0, "suppressed one-shot child watch was still consumed");
}

#[test]
fn persistent_watch_fires_everything_on_its_path_and_stays() {
    let mut h = Harness::new();
    h.watches.add_watch(1, "/p", AddWatchMode::Persistent);
    h.write(0, create("/p", 0)).unwrap();
    h.write(0, create("/p/c", 0)).unwrap();
    h.write(0, set_data("/p/c", b"", -1)).unwrap(); // not its path
    h.write(0, set_data("/p", b"", -1)).unwrap();
    h.write(0, delete("/p/c", -1)).unwrap();
    h.write(0, delete("/p", -1)).unwrap();
    assert_eq!(
        h.take_fired(),
        vec![(1, 1, "/p".into()), (1, 4, "/p".into()), (1, 3, "/p".into()), (1, 4, "/p".into()), (1, 2, "/p".into())]
    );
    assert!(h.watches.check(1, "/p", WatcherType::Persistent));
}

#[test]
fn recursive_watch_covers_subtree_without_children_events() {
    let mut h = Harness::new();
    h.watches.add_watch(1, "/r", AddWatchMode::PersistentRecursive);
    h.watches.add_data_watch(1, "/r/a"); // same conn, exact one-shot: still one event
    h.write(0, create("/r", 0)).unwrap();
    h.write(0, create("/r/a", 0)).unwrap();
    h.write(0, create("/r/a/b", 0)).unwrap();
    h.write(0, set_data("/r/a/b", b"", -1)).unwrap();
    h.write(0, create("/rx", 0)).unwrap(); // string prefix, not a descendant
    h.write(0, delete("/r/a/b", -1)).unwrap();
    assert_eq!(
        h.take_fired(),
        vec![
            (1, 1, "/r".into()),
            (1, 1, "/r/a".into()),
            (1, 1, "/r/a/b".into()),
            (1, 3, "/r/a/b".into()),
            (1, 2, "/r/a/b".into())
        ]
    );
    assert!(!h.watches.check(1, "/r/a", WatcherType::Data), "the one-shot entry fired");
    assert!(h.watches.check(1, "/r", WatcherType::PersistentRecursive));
    // Recursive on "/" sees everything.
    h.watches.add_watch(2, "/", AddWatchMode::PersistentRecursive);
    h.write(0, create("/q", 0)).unwrap();
    assert_eq!(h.take_fired(), vec![(2, 1, "/q".into())]);
}

#[test]
fn close_connection_and_counts() {
    let mut w = WatchManager::new();
    w.add_data_watch(1, "/a");
    w.add_data_watch(2, "/a");
    w.add_child_watch(1, "/b");
    w.add_watch(3, "/c", AddWatchMode::Persistent);
    w.add_watch(3, "/d", AddWatchMode::PersistentRecursive);
    assert_eq!(w.watch_count(), 6);
    let s = w.summary(WatchTableKind::Data);
    assert_eq!((s.connections, s.paths, s.total), (3, 3, 4));
    assert_eq!(w.watches_by_connection(WatchTableKind::Data)[&3], vec!["/c", "/d"]);
    assert_eq!(w.watches_by_path(WatchTableKind::Data)["/a"], vec![1, 2]);
    assert_eq!(w.watches_by_path(WatchTableKind::Child)["/c"], vec![3]);
    w.remove_connection(3);
    w.remove_connection(1);
    assert_eq!(w.watch_count(), 1);
    w.check_invariants().unwrap();
}

#[test]
fn check_and_remove_by_type() {
    let mut w = WatchManager::new();
    w.add_data_watch(1, "/x");
    w.add_child_watch(1, "/x");
    w.add_watch(1, "/x", AddWatchMode::Persistent);
    assert!(w.check(1, "/x", WatcherType::Data));
    assert!(w.check(1, "/x", WatcherType::Children));
    assert!(w.check(1, "/x", WatcherType::Persistent));
    assert!(!w.check(1, "/x", WatcherType::PersistentRecursive));
    assert!(!w.check(2, "/x", WatcherType::Any), "other connections' watches are invisible");
    assert!(w.remove(1, "/x", WatcherType::Data));
    assert!(!w.remove(1, "/x", WatcherType::Data), "NOWATCHER the second time");
    assert!(w.check(1, "/x", WatcherType::Persistent), "persistent entry untouched by Data");
    assert!(w.remove(1, "/x", WatcherType::Persistent));
    assert!(!w.check(1, "/x", WatcherType::Persistent));
    assert!(w.check(1, "/x", WatcherType::Children));
    assert!(w.remove(1, "/x", WatcherType::Any));
    assert_eq!(w.watch_count(), 0);
    w.add_watch(1, "/y", AddWatchMode::PersistentRecursive);
    assert!(!w.remove(1, "/y", WatcherType::Persistent));
    assert!(w.check(1, "/y", WatcherType::Any));
    assert!(w.remove(1, "/y", WatcherType::PersistentRecursive));
    w.add_watch(1, "/z", AddWatchMode::PersistentRecursive);
    assert!(w.remove(1, "/z", WatcherType::Any), "pre-3.9 clients remove persistent watches with Any");
    assert_eq!(w.watch_count(), 0);
    w.check_invariants().unwrap();
}

#[test]
fn set_watches_rearms_or_fires_now() {
    let mut h = Harness::new();
    h.write(0, create("/same", 0)).unwrap(); // zxid 1
    h.write(0, create("/changed", 0)).unwrap(); // zxid 2
    h.write(0, create("/kids", 0)).unwrap(); // zxid 3
    let rel = h.zxid;
    h.write(0, set_data("/changed", b"", -1)).unwrap(); // zxid 4
    h.write(0, create("/kids/k", 0)).unwrap(); // zxid 5
    let s = |v: &[&str]| v.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let (data, exist, child) =
        (s(&["/same", "/changed", "/gone"]), s(&["/same", "/later"]), s(&["/same", "/kids", "/gone"]));
    let (pers, rec) = (s(&["/p"]), s(&["/r"]));
    let lists = SetWatchesLists { data: &data, exist: &exist, child: &child, persistent: &pers, recursive: &rec };
    let fired = h.watches.set_watches(&h.tree, 9, rel, lists);
    let got: Vec<_> = fired.iter().map(|f| (f.event_type.code(), f.path.as_str(), f.zxid)).collect();
    assert_eq!(got, vec![(3, "/changed", -1), (2, "/gone", -1), (1, "/same", -1), (4, "/kids", -1), (2, "/gone", -1)]);
    assert!(h.watches.check(9, "/same", WatcherType::Data));
    assert!(h.watches.check(9, "/later", WatcherType::Data));
    assert!(h.watches.check(9, "/same", WatcherType::Children));
    assert!(!h.watches.check(9, "/kids", WatcherType::Children));
    assert!(h.watches.check(9, "/p", WatcherType::Persistent));
    assert!(h.watches.check(9, "/r", WatcherType::PersistentRecursive));
    h.write(0, create("/later", 0)).unwrap();
    assert_eq!(h.take_fired(), vec![(9, 1, "/later".into())]);
    h.check();
}

#[test]
fn a_storm_fires_each_watcher_once_and_keeps_only_persistent_registrations() {
    let mut h = Harness::new();
    h.write(0, create("/s", 0)).unwrap();
    // Connections 9..1 in descending order: the notifications still come in ascending order.
    for conn in (1..10).rev() {
        h.watches.add_data_watch(conn, "/s");
    }
    h.watches.add_watch(4, "/s", AddWatchMode::Persistent); // also one-shot on /s
    h.watches.add_watch(7, "/", AddWatchMode::PersistentRecursive); // also one-shot on /s
    h.watches.add_watch(12, "/", AddWatchMode::PersistentRecursive);
    h.write(0, set_data("/s", b"1", -1)).unwrap();
    let conns: Vec<u64> = h
        .take_fired()
        .into_iter()
        .map(|(c, t, p)| {
            assert_eq!((t, p.as_str()), (3, "/s"));
            c
        })
        .collect();
    assert_eq!(conns, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 12], "each watcher once, ascending");
    h.write(0, set_data("/s", b"2", -1)).unwrap();
    let conns: Vec<u64> = h.take_fired().into_iter().map(|(c, _, _)| c).collect();
    assert_eq!(conns, vec![4, 7, 12], "only the persistent registrations are left");
    assert!(!h.watches.check(4, "/s", WatcherType::Data), "4's one-shot watch was consumed");
    assert!(h.watches.check(4, "/s", WatcherType::Persistent));
}
