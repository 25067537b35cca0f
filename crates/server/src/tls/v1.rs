//! X.509 version 1 certificates, which Java accepts and webpki (so rustls) refuses: a v1 server
//! certificate is served as it is, and a v1 client certificate issued directly by a trusted CA is
//! verified here (validity period, issuer among the trust anchors, the issuer's signature, and,
//! in TLS 1.3, the handshake signature with its public key). Every other certificate goes through
//! webpki unchanged. kazoo's test harness (and older ZooKeeper deployments) use v1 certificates.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use x509_parser::prelude::{FromDer, X509Certificate};

/// The server's one certificate and key, whatever the client asks for.
#[derive(Debug)]
pub struct OneCert(pub Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

pub fn is_v1(cert: &CertificateDer<'_>) -> bool {
    X509Certificate::from_der(cert.as_ref()).is_ok_and(|(_, c)| c.version().0 == 0)
}

fn bad(e: CertificateError) -> Error {
    Error::InvalidCertificate(e)
}

/// webpki's client verification, with the v1 case above beside it.
#[derive(Debug)]
pub struct Verifier {
    pub webpki: Arc<dyn ClientCertVerifier>,
    pub anchors: Vec<CertificateDer<'static>>,
    pub provider: Arc<CryptoProvider>,
}

impl Verifier {
    fn verify_v1(&self, leaf: &X509Certificate<'_>, now: UnixTime) -> Result<(), Error> {
        let at = x509_parser::time::ASN1Time::from_timestamp(now.as_secs() as i64)
            .map_err(|_| bad(CertificateError::BadEncoding))?;
        if !leaf.validity().is_valid_at(at) {
            return Err(bad(if leaf.validity().not_after < at {
                CertificateError::Expired
            } else {
                CertificateError::NotValidYet
            }));
        }
        for der in &self.anchors {
            let Ok((_, ca)) = X509Certificate::from_der(der.as_ref()) else { continue };
            if ca.subject().as_raw() != leaf.issuer().as_raw() {
                continue;
            }
            let is_ca = ca.version().0 == 0 || ca.basic_constraints().ok().flatten().is_some_and(|b| b.value.ca);
            if is_ca && ca.validity().is_valid_at(at) && leaf.verify_signature(Some(ca.public_key())).is_ok() {
                return Ok(());
            }
        }
        Err(bad(CertificateError::UnknownIssuer))
    }
}

impl ClientCertVerifier for Verifier {
    fn offer_client_auth(&self) -> bool {
        self.webpki.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.webpki.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        match X509Certificate::from_der(end_entity.as_ref()) {
            Ok((_, leaf)) if leaf.version().0 == 0 => {
                self.verify_v1(&leaf, now)?;
                Ok(ClientCertVerified::assertion())
            }
            _ => self.webpki.verify_client_cert(end_entity, intermediates, now),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match X509Certificate::from_der(cert.as_ref()) {
            // rustls checks raw-key signatures for TLS 1.3 only; ZooKeeper 3.8's Java client
            // speaks TLS 1.2 by default. In TLS 1.2 a scheme does not name an ECDSA curve: the
            // key's algorithm (curve included) picks the verifier among the scheme's.
            Ok((_, leaf)) if leaf.version().0 == 0 => {
                let (key_alg, key) =
                    spki_parts(leaf.public_key().raw).ok_or_else(|| bad(CertificateError::BadEncoding))?;
                let algs = self.provider.signature_verification_algorithms.mapping;
                let candidates = algs.iter().find(|(s, _)| *s == dss.scheme).map(|(_, a)| *a).unwrap_or(&[]);
                let alg = candidates
                    .iter()
                    .find(|a| a.public_key_alg_id().as_ref() == key_alg)
                    .ok_or_else(|| bad(CertificateError::BadSignature))?;
                alg.verify_signature(key, message, dss.signature())
                    .map(|_| HandshakeSignatureValid::assertion())
                    .map_err(|_| bad(CertificateError::BadSignature))
            }
            _ => self.webpki.verify_tls12_signature(message, cert, dss),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match X509Certificate::from_der(cert.as_ref()) {
            Ok((_, leaf)) if leaf.version().0 == 0 => {
                let spki = SubjectPublicKeyInfoDer::from(leaf.public_key().raw);
                rustls::crypto::verify_tls13_signature_with_raw_key(
                    message,
                    &spki,
                    dss,
                    &self.provider.signature_verification_algorithms,
                )
            }
            _ => self.webpki.verify_tls13_signature(message, cert, dss),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A SubjectPublicKeyInfo's algorithm (the AlgorithmIdentifier's contents) and key bits.
fn spki_parts(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (0x30, contents, _) = super::der_element(spki)? else { return None };
    let (0x30, alg, rest) = super::der_element(contents)? else { return None };
    let (0x03, bits, _) = super::der_element(rest)? else { return None };
    let (&0, key) = bits.split_first()? else { return None };
    Some((alg, key))
}
