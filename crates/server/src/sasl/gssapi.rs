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

use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext, ServerCtx};
use libgssapi::credential::{Cred, CredUsage};
use libgssapi::name::Name;
use libgssapi::oid::{OidSet, GSS_MECH_KRB5, GSS_NT_HOSTBASED_SERVICE, GSS_NT_KRB5_PRINCIPAL};

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

/// Initiator credentials for `principal` (a quorum learner's JAAS `principal=`), from the client
/// keytab MIT krb5 finds in `KRB5_CLIENT_KTNAME` ([`configure_client_process`]); the ticket itself
/// is fetched from the KDC on the first context step.
pub fn initiator_credentials(principal: &str) -> Result<Cred, String> {
    let name = Name::new(principal.as_bytes(), Some(GSS_NT_KRB5_PRINCIPAL))
        .map_err(|e| format!("GSSAPI: bad principal {principal:?}: {e}"))?;
    let mechs = OidSet::singleton(GSS_MECH_KRB5).map_err(|e| format!("GSSAPI: {e}"))?;
    Cred::acquire(Some(&name), None, CredUsage::Initiate, Some(&mechs))
        .map_err(|e| format!("GSSAPI: no initiator credentials for {principal}: {e}"))
}

/// Points MIT krb5's initiator at the keytab `keytab` (`KRB5_CLIENT_KTNAME`) and at a credential
/// cache of this process's own (`KRB5CCNAME=MEMORY:`), as Java's `Krb5LoginModule` with
/// `useKeyTab=true` logs in from the keytab without a ticket cache. Process environment: call it
/// at start-up, before threads exist.
pub fn configure_client_process(keytab: &Path) {
    std::env::set_var("KRB5_CLIENT_KTNAME", keytab_name(keytab));
    std::env::set_var("KRB5CCNAME", "MEMORY:warden-quorum-learner");
}

/// The client side of SASL GSSAPI (RFC 4752), as Java's `GssKrb5Client` runs it for a quorum
/// learner: context tokens until the context is established (mutual authentication), then the
/// answer to the server's wrapped security-layer offer: "no security layer", the offered
/// maximum buffer, no authorization id.
pub struct GssapiClient {
    ctx: ClientCtx,
    answered: bool,
}

impl GssapiClient {
    /// An exchange with the service `service@host` (host-based, as Java names it: the realm
    /// comes from krb5's `domain_realm`), with `cred` (the default credentials when `None`).
    pub fn new(cred: Option<Cred>, service: &str, host: &str) -> Result<Self, String> {
        let target = format!("{service}@{host}");
        let name = Name::new(target.as_bytes(), Some(GSS_NT_HOSTBASED_SERVICE))
            .map_err(|e| format!("GSSAPI: bad service name {target:?}: {e}"))?;
        let flags = CtxFlags::GSS_C_MUTUAL_FLAG | CtxFlags::GSS_C_INTEG_FLAG;
        Ok(Self { ctx: ClientCtx::new(cred, name, flags, Some(GSS_MECH_KRB5)), answered: false })
    }

    /// The first token (GSSAPI has an initial response).
    pub fn initial(&mut self) -> Result<Vec<u8>, String> {
        let token = self.ctx.step(None, None).map_err(|e| format!("GSSAPI: no context token: {e}"))?;
        Ok(token.map(|t| t.to_vec()).unwrap_or_default())
    }

    /// The response to the server's next challenge.
    pub fn step(&mut self, challenge: &[u8]) -> Result<Vec<u8>, String> {
        if !self.ctx.is_complete() {
            let out = self.ctx.step(Some(challenge), None).map_err(|e| format!("GSSAPI: context refused: {e}"))?;
            return Ok(out.map(|t| t.to_vec()).unwrap_or_default());
        }
        if self.answered {
            return Err("the server sent a challenge after the exchange ended".into());
        }
        let offer = self.ctx.unwrap(challenge).map_err(|e| format!("GSSAPI: cannot unwrap the offer: {e}"))?;
        if offer.len() != 4 || offer[0] & LAYER_NONE == 0 {
            return Err(format!("GSSAPI: the server's offer {:?} does not allow no security layer", &offer[..]));
        }
        let answer = [LAYER_NONE, offer[1], offer[2], offer[3]];
        let wrapped = self.ctx.wrap(false, &answer).map_err(|e| format!("GSSAPI: cannot wrap the answer: {e}"))?;
        self.answered = true;
        Ok(wrapped.to_vec())
    }

    /// Whether the exchange is over on the client's side (the server still says SUCCESS).
    pub fn is_done(&self) -> bool {
        self.answered
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
