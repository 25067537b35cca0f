//! Requests answered from the local tree (reads, watch management, sync, ping) and authentication.

use warden_proto::header::{keeper_state, WatcherEvent};
use warden_proto::request::{MultiOp, Request};
use warden_proto::response::{encode_notification, encode_read_reply, ClientInfo, ReadReply, ReadResult, Response};
use warden_proto::{perms, Acl, ErrorCode, Id, Stat};
use warden_tree::acl::{check_acl, digest_id, mask_digests_for_get_acl};
use warden_tree::{AddWatchMode, SetWatchesLists, WatcherType};

use crate::node::{ConnId, Node, Output};
use crate::stats::LatencyKind;

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
            Request::SetWatches(sw) => {
                self.set_watches(conn, sw.relative_zxid, [sw.data, sw.exist, sw.child, Vec::new(), Vec::new()], out);
                (Ok(Response::Empty), false)
            }
            Request::SetWatches2(sw) => {
                let lists = [sw.base.data, sw.base.exist, sw.base.child, sw.persistent, sw.persistent_recursive];
                self.set_watches(conn, sw.base.relative_zxid, lists, out);
                (Ok(Response::Empty), false)
            }
            Request::AddWatch(r) => (self.add_watch(conn, &r.path, r.mode), false),
            Request::CheckWatches(r) => (self.check_or_remove_watch(conn, &r.path, r.watcher_type, false), false),
            Request::RemoveWatches(r) => (self.check_or_remove_watch(conn, &r.path, r.watcher_type, true), false),
            other => {
                let Some(frame) = self.answer_read(conn, xid, other) else {
                    out.push(Output::Close { conn });
                    return true;
                };
                self.send_reply(conn, frame, arrived_ms, LatencyKind::Read, out);
                return false;
            }
        };
        let frame = match result {
            Ok(Response::Empty) => self.reply_frame(xid, 0, None),
            Ok(body) => self.reply_frame(xid, 0, Some(&body)),
            Err(e) => self.reply_frame(xid, e.code(), None),
        };
        self.send_reply(conn, frame, arrived_ms, LatencyKind::Read, out);
        close
    }

    /// Answers a read from the local tree: encodes the reply frame straight from the tree, then
    /// sets the watch the request asked for if ZooKeeper would (on success; an exists watch also
    /// when the node is missing). `None` when the reply is too large to frame at all (above 2 GiB);
    /// the connection is then closed, as ZooKeeper's would be when it cannot serialise a reply.
    fn answer_read(&mut self, conn: ConnId, xid: i32, req: Request) -> Option<Vec<u8>> {
        let result = self.read(conn, &req);
        let watch = match (&req, &result) {
            (Request::Exists(r), Ok(_) | Err(ErrorCode::NoNode)) | (Request::GetData(r), Ok(_)) if r.watch => {
                Some((WatcherType::Data, &r.path))
            }
            (Request::GetChildren(r) | Request::GetChildren2(r), Ok(_)) if r.watch => {
                Some((WatcherType::Children, &r.path))
            }
            _ => None,
        };
        // `read_per_namespace`: what DataTree's getData, statNode and getChildren count.
        let read_bytes = match (&req, &result) {
            (Request::Exists(r), Ok(_)) => Some((r.path.as_str(), 0)),
            (Request::GetData(r), Ok(ReadReply::Data { data, .. })) => {
                Some((r.path.as_str(), data.map_or(0, <[u8]>::len)))
            }
            (Request::GetChildren(r) | Request::GetChildren2(r), Ok(ReadReply::Children { names, .. })) => {
                Some((r.path.as_str(), names.iter().map(|n| n.len()).sum()))
            }
            _ => None,
        };
        let encoded = match &result {
            Ok(body) => encode_read_reply(&self.reply_header(xid, 0), Some(body)),
            Err(e) => encode_read_reply(&self.reply_header(xid, e.code()), None),
        };
        drop(result);
        if let Some((path, bytes)) = read_bytes {
            self.namespace_sizes.read(path, bytes);
        }
        let frame = match encoded {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!(conn, xid, "closing the connection: {e}");
                return None;
            }
        };
        match watch {
            Some((WatcherType::Children, path)) => self.watches.add_child_watch(conn, path),
            Some((_, path)) => self.watches.add_data_watch(conn, path),
            None => {}
        }
        Some(frame)
    }

    fn allowed(&self, conn: ConnId, acl: &[Acl], perm: i32) -> bool {
        self.cfg.skip_acl || check_acl(acl, perm, self.conn_ids(conn))
    }

    /// The node's client Stat after the READ check.
    fn readable(&self, conn: ConnId, path: &str) -> Result<Stat, ErrorCode> {
        let node = self.tree.node(path).ok_or(ErrorCode::NoNode)?;
        if !self.allowed(conn, &node.acl, perms::READ) {
            return Err(ErrorCode::NoAuth);
        }
        Ok(node.client_stat())
    }

    /// The reply to a read, borrowing names and data from the tree. Sets no watch.
    fn read<'a>(&'a self, conn: ConnId, req: &Request) -> Result<ReadReply<'a>, ErrorCode> {
        let owned = |r: Response| Ok(ReadReply::Owned(r));
        match req {
            Request::Ping => owned(Response::Empty),
            Request::Sync(r) => owned(Response::Sync { path: r.path.clone() }),
            Request::Exists(r) if r.path.contains('\0') => Err(ErrorCode::BadArguments),
            Request::Exists(r) => self.readable(conn, &r.path).map(|stat| ReadReply::Owned(Response::Stat(stat))),
            Request::GetData(r) => self.get_data(conn, &r.path).map(|(data, stat)| ReadReply::Data { data, stat }),
            Request::GetChildren(r) => {
                self.get_children(conn, &r.path).map(|(names, _)| ReadReply::Children { names, stat: None })
            }
            Request::GetChildren2(r) => {
                self.get_children(conn, &r.path).map(|(names, stat)| ReadReply::Children { names, stat: Some(stat) })
            }
            Request::GetAcl(r) => self.get_acl(conn, &r.path).map(ReadReply::Owned),
            Request::GetAllChildrenNumber(r) => {
                self.readable(conn, &r.path)?;
                let n = self.tree.all_children_number(&r.path).unwrap_or(0);
                owned(Response::AllChildrenNumber(i32::try_from(n).unwrap_or(i32::MAX)))
            }
            Request::GetEphemerals(r) => Ok(ReadReply::Paths(self.ephemerals(conn, &r.prefix))),
            Request::WhoAmI => owned(Response::WhoAmI(self.who_am_i(conn))),
            Request::MultiRead(ops) => {
                Ok(ReadReply::MultiRead(ops.iter().map(|op| self.multi_read(conn, op)).collect()))
            }
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    fn add_watch(&mut self, conn: ConnId, path: &str, mode: i32) -> Result<Response, ErrorCode> {
        let mode = AddWatchMode::from_code(mode).ok_or(ErrorCode::BadArguments)?;
        self.watches.add_watch(conn, path, mode);
        Ok(Response::AddWatch)
    }

    /// checkWatches (`remove` false) and removeWatches: NOWATCHER when the connection has no such
    /// watch on `path`.
    fn check_or_remove_watch(
        &mut self,
        conn: ConnId,
        path: &str,
        watcher_type: i32,
        remove: bool,
    ) -> Result<Response, ErrorCode> {
        let t = WatcherType::from_code(watcher_type).ok_or(ErrorCode::BadArguments)?;
        let found = if remove { self.watches.remove(conn, path, t) } else { self.watches.check(conn, path, t) };
        if found {
            Ok(Response::Empty)
        } else {
            Err(ErrorCode::NoWatcher)
        }
    }

    /// The node's data and Stat after the READ check.
    fn get_data(&self, conn: ConnId, path: &str) -> Result<(Option<&[u8]>, Stat), ErrorCode> {
        let stat = self.readable(conn, path)?;
        let node = self.tree.node(path).ok_or(ErrorCode::NoNode)?;
        Ok((node.data.as_deref(), stat))
    }

    /// The node's sorted child names and Stat after the READ check.
    fn get_children(&self, conn: ConnId, path: &str) -> Result<(Vec<&str>, Stat), ErrorCode> {
        let stat = self.readable(conn, path)?;
        Ok((self.tree.children(path).unwrap_or_default(), stat))
    }

    fn get_acl(&self, conn: ConnId, path: &str) -> Result<Response, ErrorCode> {
        let node = self.tree.node(path).ok_or(ErrorCode::NoNode)?;
        let admin = self.allowed(conn, &node.acl, perms::ADMIN);
        if !admin && !self.allowed(conn, &node.acl, perms::READ) {
            return Err(ErrorCode::NoAuth);
        }
        let acl = if admin { node.acl.to_vec() } else { mask_digests_for_get_acl(&node.acl) };
        Ok(Response::GetAcl { acl, stat: node.client_stat() })
    }

    /// The paths of the session's ephemerals under `prefix` (all of them for "" or "/").
    fn ephemerals(&self, conn: ConnId, prefix: &str) -> Vec<&str> {
        let session = self.conns.get(&conn).map_or(0, |c| c.session_id);
        let prefix = match prefix.trim() {
            "/" => "",
            p => p,
        };
        self.tree.ephemeral_paths(session).filter(|p| p.starts_with(prefix)).collect()
    }

    fn who_am_i(&self, conn: ConnId) -> Vec<ClientInfo> {
        self.conn_ids(conn)
            .iter()
            .map(|id| {
                let user = match &*id.scheme {
                    "digest" => id.id.split(':').next().unwrap_or_default().to_string(),
                    "ip" | "sasl" | "x509" => id.id.to_string(),
                    _ => String::new(),
                };
                ClientInfo { auth_scheme: id.scheme.to_string(), user }
            })
            .collect()
    }

    fn multi_read<'a>(&'a self, conn: ConnId, op: &MultiOp) -> ReadResult<'a> {
        let r = match op {
            MultiOp::GetData(r) => self.get_data(conn, &r.path).map(|(data, stat)| ReadResult::Data { data, stat }),
            MultiOp::GetChildren(r) => {
                self.get_children(conn, &r.path).map(|(names, _)| ReadResult::Children { names })
            }
            _ => Err(ErrorCode::BadArguments),
        };
        r.unwrap_or_else(|e| ReadResult::Error(e.code()))
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
            out.push(Output::Send { conn, frame: encode_notification(-1, &ev).into(), completes_request: false });
        }
    }
}

/// What `digest user:password` proves (DigestAuthenticationProvider): `digest:user:<hash>`, and
/// `super` when that is the superDigest.
pub fn digest_identities(auth: &[u8], super_digest: Option<&str>) -> Vec<Id> {
    let id = digest_id(auth);
    let sup = (super_digest == Some(id.as_str())).then(|| Id::new("super", ""));
    sup.into_iter().chain([Id::new("digest", id)]).collect()
}

/// The ids an auth packet adds to its connection, as ZooKeeper's default providers decide, or
/// `None` when it fails (the connection is then closed). `digest` accepts any credential and adds
/// `digest:<id>` ([`digest_id`]), plus `super` when that id is the configured super digest; `ip`
/// adds the connection's own address, which it already holds; `x509` succeeds when the connection
/// came with a verified client certificate (its id, already held) and fails otherwise, as
/// `X509AuthenticationProvider.handleAuthentication` re-checking the connection's chain. Every
/// other scheme has no provider and fails.
pub(crate) fn authenticate(scheme: &str, auth: &[u8], super_digest: Option<&str>, held: &[Id]) -> Option<Vec<Id>> {
    match scheme {
        "digest" => Some(digest_identities(auth, super_digest)),
        "ip" | "x509" => {
            let ids: Vec<Id> = held.iter().filter(|id| id.scheme == scheme).cloned().collect();
            (scheme == "ip" || !ids.is_empty()).then_some(ids)
        }
        _ => None,
    }
}
