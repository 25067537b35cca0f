//! The SASL GSSAPI mechanism (Kerberos V5, RFC 4752), server side, over MIT krb5's
//! `libgssapi_krb5` (the `libgssapi` crate).
//!
//! ZooKeeper runs this through Java's `GssKrb5Server` with the JAAS `Server` section's
//! `Krb5LoginModule` (`keyTab=`, `principal=`). The exchange:
//! 1. The client's context tokens go to `gss_accept_sec_context`; its output tokens go back as
//!    challenges until the context is established. If the last accept step produced a token (the
//!    AP-REP of mutual authentication), the client answers it with an empty response first.
//! 2. The server sends a wrapped (integrity only) 4-byte offer: the security layers it supports
//!    (only "no security layer", 0x01, as ZooKeeper's default QOP `auth`) and its maximum receive
//!    buffer (65536, Java's default).
//! 3. The client answers with a wrapped choice (it must be 0x01), its maximum buffer, and an
//!    optional authorization id. As ZooKeeper's `SaslServerCallbackHandler`, the identity is the
//!    authenticated principal whatever authorization id the client asked for (it is logged).
//!
//! The authenticated principal is the exchange's authentication id; the shell (`ConnSasl::step`)
//! applies ZooKeeper's `removeHostFromPrincipal` / `removeRealmFromPrincipal` rules to it.
//!
//! Keytab and krb5 configuration: MIT krb5 reads the acceptor keytab from `KRB5_KTNAME` and its
//! configuration from `KRB5_CONFIG`; [`configure_process`] sets `KRB5_KTNAME` from the JAAS `keyTab`
//! (and `KRB5_CONFIG` when asked) once at start-up, before any thread exists that may read the
//! environment (`warden serve` calls it through `sasl::prepare_process` before its runtime starts).
//! Steps run in the connection's reader: accepting a token reads the keytab and krb5's replay
//! cache, small local file reads.

use std::path::Path;
use std::sync::Arc;

use super::{Mechanism, Step};

use libgssapi::context::{SecurityContext, ServerCtx};
use libgssapi::credential::{Cred, CredUsage};
use libgssapi::name::Name;
use libgssapi::oid::{OidSet, GSS_MECH_KRB5, GSS_NT_KRB5_PRINCIPAL};

/// "No security layer", the only layer offered (RFC 4752 section 3.3).
pub const LAYER_NONE: u8 = 0x01;
/// The maximum message size the server offers, as Java's `GssKrb5Server` (javax.security.sasl.maxbuffer).
pub const MAX_BUFFER: u32 = 65536;

/// Points MIT krb5 at `keytab` (the JAAS `keyTab=`) and, when given, at the krb5 configuration
/// `krb5_conf`. Sets process environment variables: call it once, at start-up, before threads
/// that may read the environment exist.
pub fn configure_process(keytab: Option<&Path>, krb5_conf: Option<&Path>) {
    if let Some(k) = keytab {
        std::env::set_var("KRB5_KTNAME", keytab_name(k));
    }
    if let Some(c) = krb5_conf {
        std::env::set_var("KRB5_CONFIG", c);
    }
}

/// The krb5 keytab name for a file.
pub fn keytab_name(keytab: &Path) -> String {
    format!("FILE:{}", keytab.display())
}

/// The acceptor: credentials for the server's principal, shared by every connection.
#[derive(Clone)]
pub struct GssapiServer {
    cred: Cred,
    principal: Arc<str>,
}

impl std::fmt::Debug for GssapiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GssapiServer").field("principal", &self.principal).finish_non_exhaustive()
    }
}

impl GssapiServer {
    /// Acquires acceptor credentials for `principal` (`service/host@REALM`) from the keytab, or
    /// for any principal the keytab holds when `None`. Fails, with krb5's reason, when the keytab
    /// holds no key for it.
    pub fn new(principal: Option<&str>) -> Result<Self, String> {
        let name = match principal {
            None => None,
            Some(p) => Some(
                Name::new(p.as_bytes(), Some(GSS_NT_KRB5_PRINCIPAL))
                    .map_err(|e| format!("GSSAPI: bad principal {p:?}: {e}"))?,
            ),
        };
        let shown = principal.unwrap_or("(any in the keytab)");
        let mechs = OidSet::singleton(GSS_MECH_KRB5).map_err(|e| format!("GSSAPI: {e}"))?;
        let cred = Cred::acquire(name.as_ref(), None, CredUsage::Accept, Some(&mechs))
            .map_err(|e| format!("GSSAPI: no acceptor credentials for {shown} in the keytab: {e}"))?;
        Ok(Self { cred, principal: shown.into() })
    }

    /// The server's own principal.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// A fresh exchange for one client.
    pub fn start(&self) -> GssapiExchange {
        GssapiExchange { ctx: ServerCtx::new(Some(self.cred.clone())), stage: Stage::Context, peer: String::new() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Accepting context tokens.
    Context,
    /// The context is established and its last token sent; the client answers with nothing.
    AwaitEmpty,
    /// The security-layer offer is sent; the client answers with its wrapped choice.
    AwaitChoice,
    /// Done or failed: nothing more is accepted.
    Over,
}

/// One client's exchange.
pub struct GssapiExchange {
    ctx: ServerCtx,
    stage: Stage,
    peer: String,
}

impl Mechanism for GssapiExchange {
    fn name(&self) -> &'static str {
        "GSSAPI"
    }

    /// Takes the client's next response.
    fn step(&mut self, token: &[u8]) -> Step {
        let step = match self.stage {
            Stage::Context => self.accept(token),
            Stage::AwaitEmpty if token.is_empty() => self.offer(),
            Stage::AwaitEmpty => Err(format!("expected an empty response, got {} bytes", token.len())),
            Stage::AwaitChoice => self.choose(token),
            Stage::Over => Err("the exchange is over".to_string()),
        };
        match step {
            Ok(s @ Step::Continue(_)) => s,
            Ok(s) => {
                self.stage = Stage::Over;
                s
            }
            Err(reason) => {
                self.stage = Stage::Over;
                Step::Fail(reason)
            }
        }
    }
}

impl GssapiExchange {
    fn accept(&mut self, token: &[u8]) -> Result<Step, String> {
        if token.is_empty() {
            return Err("empty GSSAPI context token".to_string());
        }
        let out = self.ctx.step(token, None).map_err(|e| format!("GSSAPI context not accepted: {e}"))?;
        if !self.ctx.is_complete() {
            return Ok(Step::Continue(out.map(|b| b.to_vec()).unwrap_or_default()));
        }
        let peer = self.ctx.source_name().map_err(|e| format!("GSSAPI: no client name: {e}"))?;
        self.peer = peer.to_string();
        match out {
            Some(t) if !t.is_empty() => {
                self.stage = Stage::AwaitEmpty;
                Ok(Step::Continue(t.to_vec()))
            }
            _ => self.offer(),
        }
    }

    fn offer(&mut self) -> Result<Step, String> {
        let [_, a, b, c] = MAX_BUFFER.to_be_bytes();
        let wrapped = self
            .ctx
            .wrap(false, &[LAYER_NONE, a, b, c])
            .map_err(|e| format!("GSSAPI: cannot wrap the security-layer offer: {e}"))?;
        self.stage = Stage::AwaitChoice;
        Ok(Step::Continue(wrapped.to_vec()))
    }

    fn choose(&mut self, token: &[u8]) -> Result<Step, String> {
        let plain = self.ctx.unwrap(token).map_err(|e| format!("GSSAPI: cannot unwrap the client's choice: {e}"))?;
        let (layer, authzid) = parse_choice(&plain)?;
        if layer != LAYER_NONE {
            return Err(format!("client chose security layer {layer:#04x}; only 0x01 (none) is offered"));
        }
        let authzid = std::str::from_utf8(authzid).map_err(|_| "authorization id is not UTF-8".to_string())?;
        if !authzid.is_empty() && authzid != self.peer {
            tracing::info!(
                principal = %self.peer,
                authzid,
                "GSSAPI: the client asked for another authorization id; its identity is its principal"
            );
        }
        Ok(Step::Done { authentication_id: self.peer.clone(), final_token: None })
    }

    /// The authenticated principal, once the context is established.
    pub fn peer(&self) -> Option<&str> {
        (!self.peer.is_empty()).then_some(self.peer.as_str())
    }
}

/// Splits the client's unwrapped answer: layer byte, 3-byte max buffer, authorization id.
pub fn parse_choice(plain: &[u8]) -> Result<(u8, &[u8]), String> {
    if plain.len() < 4 {
        return Err(format!("the client's security-layer answer has {} bytes, at least 4 needed", plain.len()));
    }
    Ok((plain[0], &plain[4..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_needs_four_bytes_and_carries_the_authzid() {
        assert!(parse_choice(&[1, 0, 0]).is_err());
        assert_eq!(parse_choice(&[1, 0, 0x10, 0]).unwrap(), (1, &b""[..]));
        assert_eq!(parse_choice(b"\x01\x00\x10\x00client@R").unwrap(), (1, &b"client@R"[..]));
    }
}
