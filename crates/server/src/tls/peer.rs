//! TLS between servers, as ZooKeeper's `QuorumX509Util` and `UnifiedServerSocket` do it:
//! `sslQuorum=true` makes a server dial its peers' quorum and election ports with TLS, using the
//! `ssl.quorum.*` stores; its own ports then accept only TLS, or, with `portUnification=true`,
//! TLS and plaintext both (a first byte of 0x16 is a TLS handshake record), which is how an
//! ensemble moves to TLS by rolling restarts: portUnification everywhere, then sslQuorum
//! everywhere, then portUnification off.
//!
//! Both ends present a certificate and verify the other's against the trust store
//! (`ssl.quorum.clientAuth` defaults to need). With `ssl.quorum.hostnameVerification` (default
//! true) a certificate must also name the peer's address, as ZooKeeper's `ZKTrustManager` checks
//! it: the dialled IP address among the server certificate's IP SANs (rustls), and the connecting
//! peer's IP among the client certificate's IP SANs, or a DNS name (SAN, else CN) that resolves to
//! it.
//!
//! Architecture invariant: the election and quorum shells see a [`PeerStream`] and never a TLS
//! type; what a port accepts and how it dials is decided here, once, from the configuration.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::{TlsContext, TlsError, TlsSettings};

/// The first byte of a TLS record carrying a handshake message (a ClientHello).
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Whether a connection on a port that takes TLS and plaintext (`portUnification`,
/// `client.portUnification`) opens with a TLS handshake record. No byte within `timeout`, or
/// another first byte, means plaintext; an error when it closed or failed before its first byte.
pub async fn opens_with_tls(stream: &TcpStream, timeout: std::time::Duration) -> Result<bool, String> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
        Ok(Ok(1)) => Ok(first[0] == TLS_HANDSHAKE_RECORD),
        Ok(Ok(_)) => Err("closed before sending anything".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Ok(false),
    }
}

/// A connection to or from another server, plaintext or TLS.
pub enum PeerStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

/// The reading half of a [`PeerStream`].
pub type PeerRead = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a [`PeerStream`]. A TLS writer may hold bytes until flushed.
pub type PeerWrite = Box<dyn AsyncWrite + Send + Unpin>;

impl PeerStream {
    /// Independent halves: a plain socket's own halves, a TLS stream's through a lock.
    pub fn into_split(self) -> (PeerRead, PeerWrite) {
        match self {
            PeerStream::Plain(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            PeerStream::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (Box::new(r), Box::new(w))
            }
        }
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            PeerStream::Plain(s) => s,
            PeerStream::Tls(s) => s.get_ref().0,
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, PeerStream::Tls(_))
    }
}

impl fmt::Debug for PeerStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.is_tls() { "Tls" } else { "Plain" };
        write!(f, "PeerStream::{kind}({:?} -> {:?})", self.tcp().local_addr().ok(), self.tcp().peer_addr().ok())
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What the quorum and election ports accept.
#[derive(Clone, Default)]
enum Accept {
    #[default]
    Plain,
    Tls(Arc<TlsContext>),
    /// `portUnification`: TLS or plaintext, told apart by the first byte.
    Unified(Arc<TlsContext>),
}

/// How this server's peer connections are secured; cheap to clone.
#[derive(Clone, Default)]
pub struct PeerTls {
    accept: Accept,
    /// `sslQuorum`: dial peers with TLS.
    dial: Option<Arc<TlsContext>>,
}

impl fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let accept = match self.accept {
            Accept::Plain => "plaintext",
            Accept::Tls(_) => "TLS",
            Accept::Unified(_) => "TLS or plaintext",
        };
        let dial = if self.dial.is_some() { "TLS" } else { "plaintext" };
        write!(f, "PeerTls {{ accepts: {accept}, dials: {dial} }}")
    }
}

impl PeerTls {
    /// From the `ssl.quorum.*` settings (`None` when no key store is set), `sslQuorum` and
    /// `portUnification`. `sslQuorumReloadCertFiles` is the settings' `reload`.
    pub fn new(settings: Option<TlsSettings>, ssl_quorum: bool, port_unification: bool) -> Result<PeerTls, TlsError> {
        let Some(settings) = settings else {
            if ssl_quorum {
                return Err(TlsError::Setting {
                    key: "ssl.quorum.keyStore.location".into(),
                    reason: "sslQuorum=true needs the key and trust stores the servers authenticate each other with"
                        .into(),
                });
            }
            if port_unification {
                tracing::warn!("portUnification=true without ssl.quorum.keyStore.location: the quorum and election ports take plaintext only");
            }
            return Ok(PeerTls::default());
        };
        if !ssl_quorum && !port_unification {
            return Ok(PeerTls::default());
        }
        let ctx = Arc::new(TlsContext::for_peers(settings)?);
        let accept = if port_unification { Accept::Unified(ctx.clone()) } else { Accept::Tls(ctx.clone()) };
        Ok(PeerTls { accept, dial: ssl_quorum.then_some(ctx) })
    }

    /// Whether peers are dialled with TLS.
    pub fn dials_tls(&self) -> bool {
        self.dial.is_some()
    }

    /// A connection accepted on the quorum or election port, after its TLS handshake when it
    /// speaks (or must speak) TLS. The error says why it was refused; the caller logs it.
    pub async fn accept(&self, stream: TcpStream, peer: SocketAddr) -> Result<PeerStream, String> {
        let ctx = match &self.accept {
            Accept::Plain => return Ok(PeerStream::Plain(stream)),
            Accept::Tls(ctx) => ctx,
            // Peers write first on both ports, so one that says nothing is taken for plaintext,
            // as ZooKeeper's UnifiedServerSocket does.
            Accept::Unified(ctx) => match opens_with_tls(&stream, ctx.settings().handshake_timeout).await? {
                true => ctx,
                false => return Ok(PeerStream::Plain(stream)),
            },
        };
        let timeout = ctx.settings().handshake_timeout;
        let acceptor = tokio_rustls::TlsAcceptor::from(ctx.config());
        let tls = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return Err(format!("TLS handshake failed: {e}")),
            Err(_) => return Err(format!("TLS handshake not finished within {timeout:?}")),
        };
        if ctx.settings().hostname_verification {
            let leaf = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
            match leaf {
                Some(leaf) if names_address(leaf, peer.ip()).await => {}
                Some(_) => {
                    return Err(format!(
                        "the peer's certificate does not name {} (ssl.quorum.hostnameVerification)",
                        peer.ip()
                    ))
                }
                // ssl.quorum.clientAuth=want or none: nothing to verify.
                None => {}
            }
        }
        Ok(PeerStream::Tls(Box::new(tokio_rustls::TlsStream::Server(tls))))
    }

    /// A connection this server opened to a peer at `peer`, after the TLS handshake with
    /// `sslQuorum`.
    pub async fn dial(&self, stream: TcpStream, peer: SocketAddr) -> io::Result<PeerStream> {
        let Some(ctx) = &self.dial else { return Ok(PeerStream::Plain(stream)) };
        let config = ctx.client_config().ok_or_else(|| io::Error::other("no TLS client configuration"))?;
        let connector = tokio_rustls::TlsConnector::from(config);
        let timeout = ctx.settings().handshake_timeout;
        match tokio::time::timeout(timeout, connector.connect(ServerName::IpAddress(peer.ip().into()), stream)).await {
            Ok(Ok(tls)) => Ok(PeerStream::Tls(Box::new(tokio_rustls::TlsStream::Client(tls)))),
            Ok(Err(e)) => Err(io::Error::new(e.kind(), format!("TLS handshake with {peer}: {e}"))),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("TLS handshake with {peer} timed out"))),
        }
    }
}

/// Whether `cert` names `ip`: an IP SAN equal to it, or a DNS SAN (the CN when there is no SAN)
/// that resolves to it.
async fn names_address(cert: &CertificateDer<'_>, ip: IpAddr) -> bool {
    let Ok((_, cert)) = X509Certificate::from_der(cert.as_ref()) else { return false };
    let ip = canonical(ip);
    let mut names = Vec::new();
    match cert.subject_alternative_name() {
        Ok(Some(san)) => {
            for name in &san.value.general_names {
                match name {
                    GeneralName::IPAddress(bytes) => {
                        let listed = match bytes.len() {
                            4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).expect("4 bytes")),
                            16 => IpAddr::from(<[u8; 16]>::try_from(*bytes).expect("16 bytes")),
                            _ => continue,
                        };
                        if canonical(listed) == ip {
                            return true;
                        }
                    }
                    GeneralName::DNSName(dns) => names.push(dns.to_string()),
                    _ => {}
                }
            }
        }
        _ => names.extend(cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).map(str::to_string)),
    }
    for name in names {
        if name.parse::<IpAddr>().is_ok_and(|n| canonical(n) == ip) {
            return true;
        }
        if let Ok(mut addrs) = tokio::net::lookup_host((name.as_str(), 0)).await {
            if addrs.any(|a| canonical(a.ip()) == ip) {
                return true;
            }
        }
    }
    false
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// webpki's verification of a peer server's certificate, with the name check skipped when
/// `ssl.quorum.hostnameVerification=false` (webpki checks the name last, after the chain).
#[derive(Debug)]
pub(super) struct ServerVerifier {
    pub webpki: Arc<WebPkiServerVerifier>,
    pub check_name: bool,
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
