//! Requests answered from the local tree (reads, watch management, sync, ping) and authentication.

use warden_proto::header::{keeper_state, WatcherEvent};
use warden_proto::request::{MultiOp, PathWatch, Request};
use warden_proto::response::{encode_notification, ClientInfo, MultiResult, Response};
use warden_proto::{perms, Acl, ErrorCode, Id, Stat};
use warden_tree::acl::{check_acl, digest_id, mask_digests_for_get_acl};
use warden_tree::{AddWatchMode, SetWatchesLists, WatcherType};

use crate::node::{ConnId, Node, Output};

type ReadResult = Result<Response, ErrorCode>;

impl Node {
    /// Answers one read that reached the head of its connection's queue. Returns true when the
    /// connection must be closed after the reply.
    pub(crate) fn run_read(
        &mut self,
        conn: ConnId,
        xid: i32,
        req: Request,
        arrived_ms: u64,
        out: &mut Vec<Output>,
    ) -> bool {
        let (result, close) = match req {
            Request::Sasl(_) => (Err(ErrorCode::AuthFailed), true),
            Request::Reconfig(_) => {
                let e = if self.cfg.reconfig_enabled { ErrorCode::Unimplemented } else { ErrorCode::ReconfigDisabled };
                (Err(e), false)
            }
            Request::SetWatches(sw) => {
                self.set_watches(conn, sw.relative_zxid, [sw.data, sw.exist, sw.child, Vec::new(), Vec::new()], out);
                (Ok(Response::Empty), false)
            }
            Request::SetWatches2(sw) => {
                let lists = [sw.base.data, sw.base.exist, sw.base.child, sw.persistent, sw.persistent_recursive];
                self.set_watches(conn, sw.base.relative_zxid, lists, out);
                (Ok(Response::Empty), false)
            }
            other => (self.read(conn, other), false),
        };
        let frame = match result {
            Ok(Response::Empty) => self.reply_frame(xid, 0, None),
            Ok(body) => self.reply_frame(xid, 0, Some(&body)),
            Err(e) => self.reply_frame(xid, e.code(), None),
        };
        self.send_reply(conn, frame, arrived_ms, out);
        close
    }

    fn allowed(&self, conn: ConnId, acl: &[Acl], perm: i32) -> bool {
        self.cfg.skip_acl || check_acl(acl, perm, self.conn_ids(conn))
    }

    /// The node's ACL and client Stat after the READ check.
    fn readable(&self, conn: ConnId, path: &str) -> Result<(Vec<Acl>, Stat), ErrorCode> {
        let node = self.tree.node(path).ok_or(ErrorCode::NoNode)?;
        if !self.allowed(conn, &node.acl, perms::READ) {
            return Err(ErrorCode::NoAuth);
        }
        Ok((node.acl.to_vec(), node.client_stat()))
    }

    fn read(&mut self, conn: ConnId, req: Request) -> ReadResult {
        match req {
            Request::Ping => Ok(Response::Empty),
            Request::Sync(r) => Ok(Response::Sync { path: r.path }),
            Request::Exists(r) => self.exists(conn, r),
            Request::GetData(r) => self.get_data(conn, &r),
            Request::GetChildren(r) => self.get_children(conn, &r).map(|(children, _)| Response::Children { children }),
            Request::GetChildren2(r) => {
                self.get_children(conn, &r).map(|(children, stat)| Response::Children2 { children, stat })
            }
            Request::GetAcl(r) => self.get_acl(conn, &r.path),
            Request::GetAllChildrenNumber(r) => {
                self.readable(conn, &r.path)?;
                Ok(Response::AllChildrenNumber(self.tree.all_children_number(&r.path).unwrap_or(0) as i32))
            }
            Request::GetEphemerals(r) => Ok(Response::Ephemerals(self.ephemerals(conn, &r.prefix))),
            Request::WhoAmI => Ok(Response::WhoAmI(self.who_am_i(conn))),
            Request::AddWatch(r) => {
                let mode = AddWatchMode::from_code(r.mode).ok_or(ErrorCode::BadArguments)?;
                self.watches.add_watch(conn, &r.path, mode);
                Ok(Response::AddWatch)
            }
            Request::CheckWatches(r) => {
                let t = WatcherType::from_code(r.watcher_type).ok_or(ErrorCode::BadArguments)?;
                if self.watches.check(conn, &r.path, t) {
                    Ok(Response::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::RemoveWatches(r) => {
                let t = WatcherType::from_code(r.watcher_type).ok_or(ErrorCode::BadArguments)?;
                if self.watches.remove(conn, &r.path, t) {
                    Ok(Response::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::MultiRead(ops) => {
                Ok(Response::Multi(ops.into_iter().map(|op| self.multi_read(conn, op)).collect()))
            }
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    fn exists(&mut self, conn: ConnId, r: PathWatch) -> ReadResult {
        if r.path.contains('\0') {
            return Err(ErrorCode::BadArguments);
        }
        if r.watch {
            // An exists watch is set whether or not the node exists.
            self.watches.add_data_watch(conn, &r.path);
        }
        let (_, stat) = self.readable(conn, &r.path)?;
        Ok(Response::Stat(stat))
    }

    fn get_data(&mut self, conn: ConnId, r: &PathWatch) -> ReadResult {
        self.readable(conn, &r.path)?;
        let node = self.tree.node(&r.path).ok_or(ErrorCode::NoNode)?;
        let (data, stat) = (node.data.as_deref().map(<[u8]>::to_vec), node.client_stat());
        if r.watch {
            self.watches.add_data_watch(conn, &r.path);
        }
        Ok(Response::GetData { data, stat })
    }

    fn get_children(&mut self, conn: ConnId, r: &PathWatch) -> Result<(Vec<String>, Stat), ErrorCode> {
        let (_, stat) = self.readable(conn, &r.path)?;
        let children = self.tree.children(&r.path).unwrap_or_default();
        if r.watch {
            self.watches.add_child_watch(conn, &r.path);
        }
        Ok((children, stat))
    }

    fn get_acl(&self, conn: ConnId, path: &str) -> ReadResult {
        let node = self.tree.node(path).ok_or(ErrorCode::NoNode)?;
        let admin = self.allowed(conn, &node.acl, perms::ADMIN);
        if !admin && !self.allowed(conn, &node.acl, perms::READ) {
            return Err(ErrorCode::NoAuth);
        }
        let acl = if admin { node.acl.to_vec() } else { mask_digests_for_get_acl(&node.acl) };
        Ok(Response::GetAcl { acl, stat: node.client_stat() })
    }

    fn ephemerals(&self, conn: ConnId, prefix: &str) -> Vec<String> {
        let session = self.conns.get(&conn).map_or(0, |c| c.session_id);
        let all = self.tree.ephemerals(session);
        let prefix = prefix.trim();
        if prefix.is_empty() || prefix == "/" {
            return all;
        }
        all.into_iter().filter(|p| p.starts_with(prefix)).collect()
    }

    fn who_am_i(&self, conn: ConnId) -> Vec<ClientInfo> {
        self.conn_ids(conn)
            .iter()
            .map(|id| {
                let user = match &*id.scheme {
                    "digest" => id.id.split(':').next().unwrap_or_default().to_string(),
                    "ip" => id.id.to_string(),
                    _ => String::new(),
                };
                ClientInfo { auth_scheme: id.scheme.to_string(), user }
            })
            .collect()
    }

    fn multi_read(&mut self, conn: ConnId, op: MultiOp) -> MultiResult {
        let r = match &op {
            MultiOp::GetData(r) => self.get_data(conn, &PathWatch { path: r.path.clone(), watch: false }),
            MultiOp::GetChildren(r) => self
                .get_children(conn, &PathWatch { path: r.path.clone(), watch: false })
                .map(|(children, _)| Response::Children { children }),
            _ => Err(ErrorCode::BadArguments),
        };
        match r {
            Ok(Response::GetData { data, stat }) => MultiResult::GetData { data, stat },
            Ok(Response::Children { children }) => MultiResult::GetChildren { children },
            Ok(_) => MultiResult::Error(ErrorCode::BadArguments.code()),
            Err(e) => MultiResult::Error(e.code()),
        }
    }

    /// Re-arms watches after a reconnect; changes the client missed are sent at once (zxid -1).
    fn set_watches(&mut self, conn: ConnId, relative_zxid: i64, lists: [Vec<String>; 5], out: &mut Vec<Output>) {
        let [data, exist, child, persistent, recursive] = lists;
        let lists = SetWatchesLists {
            data: &data,
            exist: &exist,
            child: &child,
            persistent: &persistent,
            recursive: &recursive,
        };
        for fired in self.watches.set_watches(&self.tree, conn, relative_zxid, lists) {
            let ev = WatcherEvent {
                event_type: fired.event_type.code(),
                state: keeper_state::SYNC_CONNECTED,
                path: fired.path,
            };
            if let Some(c) = self.conns.get_mut(&conn) {
                c.sent += 1;
            }
            out.push(Output::Send { conn, frame: encode_notification(-1, &ev), completes_request: false });
        }
    }
}

/// The ids an auth packet adds to its connection, as ZooKeeper's default providers decide, or
/// `None` when it fails (the connection is then closed). `digest` accepts any credential and adds
/// `digest:<id>` ([`digest_id`]), plus `super` when that id is the configured super digest; `ip`
/// adds the connection's own address (`peer`), which it already holds. Every other scheme has no
/// provider and fails.
pub(crate) fn authenticate(
    scheme: &str,
    auth: &[u8],
    super_digest: Option<&str>,
    peer: Option<&Id>,
) -> Option<Vec<Id>> {
    match scheme {
        "digest" => {
            let id = digest_id(auth);
            let sup = (super_digest == Some(id.as_str())).then(|| Id::new("super", ""));
            Some(sup.into_iter().chain([Id::new("digest", id)]).collect())
        }
        "ip" => Some(peer.cloned().into_iter().collect()),
        _ => None,
    }
}
