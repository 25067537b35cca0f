//! X.509 version 1 certificates. Java (so ZooKeeper) accepts a v1 end-entity certificate; webpki,
//! under rustls, refuses any certificate that is not v3. kazoo's test harness makes its server and
//! client certificates as v1, as do quick `openssl x509 -req` recipes. Here: the server's own
//! certificate is used without webpki parsing it, and a client's v1 certificate is checked by hand
//! the way a chain of one is checked: issued (name and signature) by a trust-store certificate, and
//! within its validity period. Anything else (v3 certificates, longer chains) goes to webpki.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::{ASN1Time, X509Version};

use super::der_element;

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, Error> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))
}

fn is_v1(der: &[u8]) -> bool {
    parse(der).is_ok_and(|c| c.version() == X509Version::V1)
}

/// A SubjectPublicKeyInfo's algorithm (contents of its AlgorithmIdentifier) and key bits.
fn spki_parts(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (0x30, contents, _) = der_element(spki)? else { return None };
    let (0x30, alg, rest) = der_element(contents)? else { return None };
    let (0x03, bits, _) = der_element(rest)? else { return None };
    let (&0, key) = bits.split_first()? else { return None };
    Some((alg, key))
}

/// A certificate's signed part, signature algorithm (contents) and signature.
fn signed_parts(der: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (0x30, body, _) = der_element(der)? else { return None };
    let (0x30, _, rest) = der_element(body)? else { return None };
    let tbs = &body[..body.len() - rest.len()];
    let (0x30, alg, rest) = der_element(rest)? else { return None };
    let (0x03, bits, _) = der_element(rest)? else { return None };
    let (&0, sig) = bits.split_first()? else { return None };
    Some((tbs, alg, sig))
}

fn verify_v1(
    end_entity: &[u8],
    roots: &[CertificateDer<'static>],
    algs: &WebPkiSupportedAlgorithms,
    now: UnixTime,
) -> Result<(), Error> {
    let invalid = Error::InvalidCertificate;
    let cert = parse(end_entity)?;
    let t = ASN1Time::from_timestamp(now.as_secs() as i64).map_err(|_| invalid(CertificateError::BadEncoding))?;
    if t < cert.validity().not_before {
        return Err(invalid(CertificateError::NotValidYet));
    }
    if t > cert.validity().not_after {
        return Err(invalid(CertificateError::Expired));
    }
    let (tbs, sig_alg, sig) = signed_parts(end_entity).ok_or(invalid(CertificateError::BadEncoding))?;
    for root in roots {
        let Ok(issuer) = parse(root) else { continue };
        if issuer.subject().as_raw() != cert.issuer().as_raw() {
            continue;
        }
        let Some((key_alg, key)) = spki_parts(issuer.public_key().raw) else { continue };
        let verified = algs.all.iter().any(|a| {
            a.signature_alg_id().as_ref() == sig_alg
                && a.public_key_alg_id().as_ref() == key_alg
                && a.verify_signature(key, tbs, sig).is_ok()
        });
        if verified {
            return Ok(());
        }
    }
    Err(invalid(CertificateError::UnknownIssuer))
}

/// A handshake signature by a v1 certificate's key.
fn verify_signature(
    message: &[u8],
    cert: &[u8],
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    let bad = Error::InvalidCertificate(CertificateError::BadSignature);
    let parsed = parse(cert)?;
    let (key_alg, key) =
        spki_parts(parsed.public_key().raw).ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let candidates = algs.mapping.iter().find(|(s, _)| *s == dss.scheme).map(|(_, a)| *a).unwrap_or(&[]);
    for a in candidates {
        if a.public_key_alg_id().as_ref() == key_alg {
            return a
                .verify_signature(key, message, dss.signature())
                .map(|_| HandshakeSignatureValid::assertion())
                .map_err(|_| bad);
        }
    }
    Err(bad)
}

/// webpki's client verifier, with v1 client certificates checked by [`verify_v1`].
#[derive(Debug)]
pub(super) struct AcceptV1 {
    pub(super) inner: Arc<dyn ClientCertVerifier>,
    pub(super) roots: Vec<CertificateDer<'static>>,
    pub(super) algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AcceptV1 {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if !is_v1(end_entity) {
            return self.inner.verify_client_cert(end_entity, intermediates, now);
        }
        verify_v1(end_entity, &self.roots, &self.algs, now).map(|_| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if !is_v1(cert) {
            return self.inner.verify_tls12_signature(message, cert, dss);
        }
        verify_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if !is_v1(cert) {
            return self.inner.verify_tls13_signature(message, cert, dss);
        }
        use SignatureScheme as S;
        let tls13 = matches!(
            dss.scheme,
            S::ECDSA_NISTP256_SHA256
                | S::ECDSA_NISTP384_SHA384
                | S::ECDSA_NISTP521_SHA512
                | S::RSA_PSS_SHA256
                | S::RSA_PSS_SHA384
                | S::RSA_PSS_SHA512
                | S::ED25519
                | S::ED448
        );
        if !tls13 {
            return Err(Error::PeerMisbehaved(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme));
        }
        verify_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The private key must belong to the certificate (what rustls's `with_single_cert` checks, which
/// also has webpki parse the certificate and so refuses v1).
pub(super) fn check_key_matches(leaf: &[u8], key: &dyn rustls::sign::SigningKey) -> Result<(), String> {
    let cert = parse(leaf).map_err(|e| e.to_string())?;
    match key.public_key() {
        Some(spki) if spki.as_ref() != cert.public_key().raw => {
            Err("the private key does not belong to the certificate".into())
        }
        _ => Ok(()),
    }
}
