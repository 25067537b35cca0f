//! The node's side of SASL (opcode 102) and of `enforce.auth`: what a finished SASL step means for
//! the connection. The exchange itself (mechanisms, nonces, JAAS, later Kerberos) runs in the shell,
//! per connection; the node only learns each step's [`SaslOutcome`] and answers as ZooKeeper's
//! `processSasl` does: at once, outside the request queue, with zxid 0 in the reply header.

use warden_proto::header::ReplyHeader;
use warden_proto::request::Request;
use warden_proto::response::{encode_reply, Response};
use warden_proto::{ErrorCode, Id};

use crate::conn::Early;
use crate::node::{ConnId, Node, Output};

/// What one SASL packet's step through the server's mechanism came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslOutcome {
    /// The server has no SASL login (no JAAS server section): ZooKeeper answers err 0 with a null
    /// token and keeps the connection.
    NoServer,
    /// The exchange goes on; `challenge` is the server's next token.
    Continue { challenge: Vec<u8> },
    /// The exchange succeeded: the connection is `sasl:<authorization_id>`; `token` is the
    /// server's final data (DIGEST-MD5: `rspauth=...`).
    Done { authorization_id: String, token: Option<Vec<u8>> },
    /// The exchange failed (bad password, unknown user, malformed token, a packet after
    /// completion, an unsupported mechanism). The reason was logged by the shell.
    Failed,
}

impl Node {
    /// One SASL packet's outcome, in the order the connection's requests arrived.
    pub(crate) fn on_sasl(&mut self, conn: ConnId, xid: i32, outcome: SaslOutcome, out: &mut Vec<Output>) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.session_id == 0 {
            // Pipelined behind the ConnectRequest: answered once the session exists, in order.
            c.before_session.push_back((xid, Early::Sasl(outcome)));
            return;
        }
        c.received += 1;
        let sasl_enforced = self.cfg.enforce_auth_schemes.iter().any(|s| s == "sasl");
        let (err, token, close) = match outcome {
            SaslOutcome::NoServer => (0, None, false),
            SaslOutcome::Continue { challenge } => (0, Some(challenge), false),
            SaslOutcome::Done { authorization_id, token } => {
                let is_super = self.cfg.sasl_super_users.contains(&authorization_id);
                tracing::info!(conn, id = %authorization_id, is_super, "SASL authentication succeeded");
                let ids = is_super.then(|| Id::new("super", "")).into_iter().chain([Id::new("sasl", authorization_id)]);
                for id in ids {
                    if !c.auth.contains(&id) {
                        c.auth.push(id);
                    }
                }
                (0, token, false)
            }
            SaslOutcome::Failed if self.cfg.allow_sasl_failed_clients && !sasl_enforced => {
                self.counters.auth_failed_count += 1;
                tracing::warn!(conn, "SASL authentication failed; connection kept (allowSaslFailedClients)");
                (0, None, false)
            }
            SaslOutcome::Failed => {
                self.counters.auth_failed_count += 1;
                let err = if sasl_enforced { ErrorCode::SessionClosedRequireSaslAuth } else { ErrorCode::AuthFailed };
                tracing::warn!(conn, "SASL authentication failed; closing the connection");
                (err.code(), None, true)
            }
        };
        c.sent += 1;
        let frame = sasl_reply(ReplyHeader { xid, zxid: 0, err }, token);
        out.push(Output::Send { conn, frame: frame.into(), completes_request: true });
        if close {
            self.drop_conn(conn);
            out.push(Output::Close { conn });
        }
    }

    /// Handles, in order, what arrived before the connection's session existed.
    pub(crate) fn replay_early(
        &mut self,
        conn: ConnId,
        early: std::collections::VecDeque<(i32, Early)>,
        out: &mut Vec<Output>,
    ) {
        for (xid, e) in early {
            match e {
                Early::Request(req) => self.on_request(conn, xid, req, out),
                Early::Sasl(outcome) => self.on_sasl(conn, xid, outcome, out),
            }
        }
    }

    /// `enforce.auth.enabled`: a request other than auth or SASL from a connection holding no id of
    /// an enforced scheme is answered `{xid, 0, SESSIONCLOSEDREQUIRESASLAUTH}` and the connection is
    /// closed (the session lives on until it expires). True when the request may go on.
    pub(crate) fn enforce_auth(&mut self, conn: ConnId, xid: i32, req: &Request, out: &mut Vec<Output>) -> bool {
        if self.cfg.enforce_auth_schemes.is_empty() || matches!(req, Request::Auth(_) | Request::Sasl(_)) {
            return true;
        }
        let schemes = &self.cfg.enforce_auth_schemes;
        let Some(c) = self.conns.get_mut(&conn) else { return false };
        if c.auth.iter().any(|id| schemes.iter().any(|s| **s == *id.scheme)) {
            return true;
        }
        tracing::warn!(
            conn,
            xid,
            ?schemes,
            "request from a connection not authenticated by an enforced scheme; closing"
        );
        c.sent += 1;
        let frame =
            encode_reply(&ReplyHeader { xid, zxid: 0, err: ErrorCode::SessionClosedRequireSaslAuth.code() }, None);
        out.push(Output::Send { conn, frame: frame.into(), completes_request: true });
        self.drop_conn(conn);
        out.push(Output::Close { conn });
        false
    }
}

/// A SASL reply frame: ZooKeeper sends the SetSASLResponse body even with an error code (its token
/// then null), where every other error reply has no body.
fn sasl_reply(hdr: ReplyHeader, token: Option<Vec<u8>>) -> Vec<u8> {
    if hdr.err == 0 {
        return encode_reply(&hdr, Some(&Response::Sasl { token }));
    }
    let mut frame = encode_reply(&hdr, None);
    frame.extend_from_slice(&(-1i32).to_be_bytes());
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    frame
}
