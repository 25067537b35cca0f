//! Client write requests: which requests are writes, how they become the tree's `WriteOp`, and how an
//! applied txn's result becomes the reply the client expects for the opcode it used.
//!
//! The write path: the node touches the session and runs `Prep`, which sees earlier prepped but
//! unapplied changes; the request's path, data and ACL list move into the txn (an ACL list that
//! needs no fixing is not copied, `fixup_acl_owned`); the node assigns the next zxid and emits
//! `Persist`. A failing write becomes an `Error` txn with its own zxid, as in ZooKeeper. Only
//! `Input::Durable` applies txns, in zxid order: the tree, then the watches (notifications leave
//! before the reply), then the reply. Standalone, storage has let go of a txn by then, so a
//! create's data moves into the tree (`DataTree::apply_taking_data`) and its path into the reply
//! instead of being copied. A setData's data is never copied out of the frame it arrived in (the
//! connection decodes over the frame's `Bytes`, `Reader::over_bytes`; a leader copies it out,
//! `Txn::detach_data`, before its committed log could keep whole read buffers alive); applied, a
//! setData of the node's current length copies into the buffer the node holds.

use warden_proto::request::{CreateRequest, CreateTtlRequest, MultiOp, Request};
use warden_proto::response::{MultiResult, Response};
use warden_proto::{ErrorCode, OpCode};
use warden_tree::{CreateKind, TxnResult, WriteOp};

/// The opcodes that shape a write's reply: the request's own, and for a multi also its sub-ops'.
/// A single write (the common case) holds its code inline, without a heap allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WriteOps {
    One(i32),
    /// 14, then the sub-op codes.
    Multi(Box<[i32]>),
}

impl WriteOps {
    pub(crate) fn codes(&self) -> &[i32] {
        match self {
            WriteOps::One(op) => std::slice::from_ref(op),
            WriteOps::Multi(ops) => ops,
        }
    }
}

impl Default for WriteOps {
    /// No opcode: the reply has no body beyond the error code.
    fn default() -> Self {
        WriteOps::Multi(Box::default())
    }
}

/// The opcodes of a write request, or `None` for a read.
pub(crate) fn write_ops(req: &Request) -> Option<WriteOps> {
    let op = req.op_code();
    match req {
        Request::Multi(ops) => {
            Some(WriteOps::Multi(std::iter::once(op.code()).chain(ops.iter().map(|o| o.op_code().code())).collect()))
        }
        Request::Create(_)
        | Request::Create2(_)
        | Request::CreateContainer(_)
        | Request::CreateTtl(_)
        | Request::Delete(_)
        | Request::DeleteContainer(_)
        | Request::SetData(_)
        | Request::SetAcl(_)
        | Request::Reconfig(_)
        | Request::CloseSession => Some(WriteOps::One(op.code())),
        _ => None,
    }
}

fn create(r: CreateRequest, kind: CreateKind) -> WriteOp {
    WriteOp::Create { path: r.path, data: r.data, acl: r.acl, flags: r.flags, kind }
}

fn create_ttl(r: CreateTtlRequest) -> WriteOp {
    WriteOp::Create { path: r.path, data: r.data, acl: r.acl, flags: r.flags, kind: CreateKind::Ttl(r.ttl) }
}

/// The tree's view of a client write (the request's path and data move into it, uncopied).
pub(crate) fn to_write_op(req: Request) -> Result<WriteOp, ErrorCode> {
    Ok(match req {
        Request::Create(r) | Request::Create2(r) => create(r, CreateKind::Regular),
        Request::CreateContainer(r) => create(r, CreateKind::Container),
        Request::CreateTtl(r) => create_ttl(r),
        Request::Delete(r) => WriteOp::Delete { path: r.path, version: r.version },
        Request::DeleteContainer(r) => WriteOp::DeleteContainer { path: r.path },
        Request::SetData(r) => WriteOp::SetData { path: r.path, data: r.data, version: r.version },
        Request::SetAcl(r) => WriteOp::SetAcl { path: r.path, acl: r.acl, version: r.version },
        Request::Multi(ops) => WriteOp::Multi(ops.into_iter().map(sub_op).collect::<Result<_, _>>()?),
        _ => return Err(ErrorCode::Unimplemented),
    })
}

fn sub_op(op: MultiOp) -> Result<WriteOp, ErrorCode> {
    Ok(match op {
        MultiOp::Create(r) | MultiOp::Create2(r) => create(r, CreateKind::Regular),
        MultiOp::CreateContainer(r) => create(r, CreateKind::Container),
        MultiOp::CreateTtl(r) => create_ttl(r),
        MultiOp::Delete(r) => WriteOp::Delete { path: r.path, version: r.version },
        MultiOp::SetData(r) => WriteOp::SetData { path: r.path, data: r.data, version: r.version },
        MultiOp::Check(r) => WriteOp::Check { path: r.path, version: r.version },
        MultiOp::GetChildren(_) | MultiOp::GetData(_) => return Err(ErrorCode::BadArguments),
    })
}

/// The reply's error code and body for an applied write, shaped by the opcode the client used.
/// Takes the result by value: a created path moves into the reply.
pub(crate) fn reply_body(ops: &[i32], result: TxnResult) -> (i32, Option<Response>) {
    let op = ops.first().copied().and_then(OpCode::from_code);
    let body = match (op, result) {
        (Some(OpCode::Multi), TxnResult::Multi(results)) => {
            let sub_ops = ops[1..].iter().copied().chain(std::iter::repeat(-1));
            Response::Multi(results.into_iter().zip(sub_ops).map(|(r, o)| multi_result(o, r)).collect())
        }
        (_, TxnResult::Error(e)) => return (e.code(), None),
        (Some(OpCode::Create), TxnResult::Created { path, .. }) => Response::Create { path },
        (_, TxnResult::Created { path, stat }) => Response::Create2 { path, stat },
        (_, TxnResult::SetData { stat }) | (_, TxnResult::SetAcl { stat }) => Response::Stat(stat),
        _ => Response::Empty,
    };
    (0, Some(body))
}

fn multi_result(op: i32, r: TxnResult) -> MultiResult {
    match r {
        TxnResult::Error(e) => MultiResult::Error(e.code()),
        TxnResult::Created { path, .. } if op == OpCode::Create.code() => MultiResult::Create { path },
        TxnResult::Created { path, stat } => MultiResult::Create2 { path, stat },
        TxnResult::Deleted => MultiResult::Delete,
        TxnResult::SetData { stat } => MultiResult::SetData { stat },
        TxnResult::Check => MultiResult::Check,
        other => MultiResult::Error(other.err().code()),
    }
}
