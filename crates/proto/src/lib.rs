//! ZooKeeper's wire vocabulary for Warden: jute encoding, records, opcodes, error codes and framing.
//!
//! Pure: no sockets, files, threads or clocks. Every decoder distrusts its input: lengths are bounded
//! before allocation, truncated input is `Incomplete`, never a panic.
//!
//! Client protocol map: [`frame`] splits the byte stream (and spots four-letter words), [`connect`]
//! holds the handshake, [`header`] the request/reply headers and watch events, [`request`] every
//! request record and the [`Request`] enum, [`response`] every reply body and the reply encoders.

/// Returns `Err` with the formatted message when the condition does not hold: the form every
/// `check_invariants(&self) -> Result<(), String>` in the workspace is written in.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

pub mod connect;
pub mod data;
pub mod election;
pub mod error;
pub mod frame;
pub mod header;
pub mod jute;
pub mod membership;
pub mod opcode;
pub mod quorum;
pub mod request;
pub mod response;
pub mod txn;

pub use connect::{ConnectRequest, ConnectResponse, PASSWD_LEN};
pub use data::{perms, Acl, Id, Stat, StatPersisted};
pub use error::ErrorCode;
pub use frame::{encode_frame, four_letter_word, frame_with, FourLetterWord, FrameDecoder, FrameError};
pub use header::{
    add_watch_mode, keeper_state, watcher_type, EventType, MultiHeader, ReplyHeader, RequestHeader, WatcherEvent,
};
pub use jute::{DecodeError, Reader, Record, Writer, DEFAULT_MAX_BUFFER};
pub use membership::{Membership, MembershipError, ServerRole, ServerSpec};
pub use opcode::{xid, OpCode};
pub use request::{
    AddWatchRequest, AuthPacket, CheckVersionRequest, CheckWatchesRequest, CreateRequest, CreateTtlRequest,
    DeleteContainerRequest, DeleteRequest, GetAclRequest, GetAllChildrenNumberRequest, GetEphemeralsRequest, MultiKind,
    MultiOp, PathRequest, PathVersion, PathWatch, ReconfigRequest, RemoveWatchesRequest, Request, RequestDecodeError,
    SaslRequest, SetAclRequest, SetDataRequest, SetWatches, SetWatches2, SyncRequest, WatchesRequest,
};
pub use response::{
    decode_notification, decode_reply, encode_notification, encode_read_reply, encode_reply, ClientInfo, MultiResult,
    ReadReply, ReadResult, ReplyTooLarge, Response,
};
pub use txn::{Txn, TxnDigest, TxnHeader};
