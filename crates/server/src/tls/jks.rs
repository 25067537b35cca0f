//! Java KeyStore (JKS) files, read as the JDK's `sun.security.provider.JavaKeyStore` reads them,
//! which is how ZooKeeper reads `ssl.keyStore.type=JKS` (and `*.jks` files by default).
//!
//! Layout (big-endian): magic `FEEDFEED`, version (1 or 2), entry count, then per entry a tag (1 =
//! private key with its certificate chain, 2 = trusted certificate), an alias (Java modified UTF-8
//! with a u16 length), a u64 timestamp, and the entry: a protected key (u32 length + bytes) followed
//! by a chain (u32 count, each certificate as [version 2: type string] u32 length + DER), or one
//! certificate. The file ends with SHA-1(password as UTF-16BE || "Mighty Aphrodite" || everything
//! before the digest).
//!
//! A private key is protected by Sun's key protector (OID 1.3.6.1.4.1.42.2.17.1.1), inside a DER
//! `EncryptedPrivateKeyInfo`: the encrypted bytes are salt (20) || ciphertext || check (20); the
//! key stream is SHA-1(password || salt), then SHA-1(password || previous block), ...; the
//! plaintext is a PKCS#8 `PrivateKeyInfo`, and the check is SHA-1(password || plaintext).

use sha1::{Digest, Sha1};

use super::TlsError;

/// A JKS file's contents: its private keys (PKCS#8 DER, each with its chain, leaf first) and its
/// trusted certificates (DER).
#[derive(Debug, Default)]
pub struct JksStore {
    pub keys: Vec<(Vec<u8>, Vec<Vec<u8>>)>,
    pub trusted: Vec<Vec<u8>>,
}

const MAGIC: u32 = 0xFEED_FEED;
const KEY_PROTECTOR_OID: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x2a, 0x02, 0x11, 0x01, 0x01];

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TlsError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len()).ok_or_else(|| bad("truncated"))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, TlsError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, TlsError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn bytes(&mut self) -> Result<&'a [u8], TlsError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn utf(&mut self) -> Result<&'a [u8], TlsError> {
        let n = self.u16()? as usize;
        self.take(n)
    }
}

fn bad(why: &str) -> TlsError {
    TlsError::Store(format!("JKS: {why}"))
}

fn utf16be(password: &str) -> Vec<u8> {
    password.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

/// Parses and checks a JKS file. `password` checks the file's integrity and unprotects its keys
/// (ZooKeeper uses one password for both).
pub fn parse(data: &[u8], password: &str) -> Result<JksStore, TlsError> {
    if data.len() < 12 + 20 {
        return Err(bad("file too short"));
    }
    let (body, digest) = data.split_at(data.len() - 20);
    let mut c = Cursor { data: body, pos: 0 };
    if c.u32()? != MAGIC {
        return Err(bad("not a JKS file (bad magic)"));
    }
    let version = c.u32()?;
    if version != 1 && version != 2 {
        return Err(bad(&format!("unsupported version {version}")));
    }
    let pw = utf16be(password);
    let mut h = Sha1::new();
    h.update(&pw);
    h.update(b"Mighty Aphrodite");
    h.update(body);
    if h.finalize().as_slice() != digest {
        return Err(bad("integrity check failed (wrong password, or the file is corrupt)"));
    }
    let count = c.u32()?;
    let mut store = JksStore::default();
    let cert = |c: &mut Cursor| -> Result<Vec<u8>, TlsError> {
        if version == 2 {
            let kind = c.utf()?;
            if kind != b"X.509" {
                return Err(bad(&format!("certificate type {:?} is not X.509", String::from_utf8_lossy(kind))));
            }
        }
        Ok(c.bytes()?.to_vec())
    };
    for _ in 0..count {
        let tag = c.u32()?;
        let _alias = c.utf()?;
        let _timestamp = c.take(8)?;
        match tag {
            1 => {
                let protected = c.bytes()?;
                let n = c.u32()?;
                let chain = (0..n).map(|_| cert(&mut c)).collect::<Result<Vec<_>, _>>()?;
                store.keys.push((unprotect(protected, &pw)?, chain));
            }
            2 => store.trusted.push(cert(&mut c)?),
            3 => return Err(bad("secret-key entries are JCEKS, not JKS")),
            t => return Err(bad(&format!("unknown entry tag {t}"))),
        }
    }
    if c.pos != body.len() {
        return Err(bad("trailing bytes after the entries"));
    }
    Ok(store)
}

/// One DER element: (tag, contents, rest).
fn der(data: &[u8]) -> Result<(u8, &[u8], &[u8]), TlsError> {
    let (&tag, rest) = data.split_first().ok_or_else(|| bad("empty DER"))?;
    let (&first, rest) = rest.split_first().ok_or_else(|| bad("truncated DER"))?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad("bad DER length"));
        }
        (rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize), &rest[n..])
    };
    if rest.len() < len {
        return Err(bad("truncated DER"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The PKCS#8 key inside a key-protector `EncryptedPrivateKeyInfo`.
fn unprotect(info: &[u8], pw: &[u8]) -> Result<Vec<u8>, TlsError> {
    let (tag, seq, _) = der(info)?;
    if tag != 0x30 {
        return Err(bad("protected key is not a DER SEQUENCE"));
    }
    let (tag, alg, rest) = der(seq)?;
    let (oid_tag, oid, _) = der(alg)?;
    if tag != 0x30 || oid_tag != 0x06 {
        return Err(bad("protected key has no algorithm identifier"));
    }
    if oid != KEY_PROTECTOR_OID {
        return Err(bad("private key is not protected by the JKS key protector (a JCEKS or PKCS12 key?)"));
    }
    let (tag, enc, _) = der(rest)?;
    if tag != 0x04 || enc.len() < 40 {
        return Err(bad("protected key data too short"));
    }
    let (salt, rest) = enc.split_at(20);
    let (cipher, check) = rest.split_at(rest.len() - 20);
    let mut plain = Vec::with_capacity(cipher.len());
    let mut block: Vec<u8> = salt.to_vec();
    for chunk in cipher.chunks(20) {
        block = Sha1::new().chain_update(pw).chain_update(&block).finalize().to_vec();
        plain.extend(chunk.iter().zip(&block).map(|(c, k)| c ^ k));
    }
    if Sha1::new().chain_update(pw).chain_update(&plain).finalize().as_slice() != check {
        return Err(bad("key password does not unprotect the private key"));
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Protects `key` as the JDK's KeyProtector does, for building files in tests.
    fn protect(key: &[u8], pw: &[u8], salt: [u8; 20]) -> Vec<u8> {
        let mut out = salt.to_vec();
        let mut block = salt.to_vec();
        for chunk in key.chunks(20) {
            block = Sha1::new().chain_update(pw).chain_update(&block).finalize().to_vec();
            out.extend(chunk.iter().zip(&block).map(|(c, k)| c ^ k));
        }
        out.extend(Sha1::new().chain_update(pw).chain_update(key).finalize());
        let mut alg = vec![0x06, KEY_PROTECTOR_OID.len() as u8];
        alg.extend(KEY_PROTECTOR_OID);
        alg.extend([0x05, 0x00]);
        let tlv = |tag: u8, body: Vec<u8>| {
            let mut v = vec![tag];
            match body.len() {
                n @ 0..=127 => v.push(n as u8),
                n @ 128..=255 => v.extend([0x81, n as u8]),
                n => v.extend([0x82, (n >> 8) as u8, n as u8]),
            }
            v.extend(body);
            v
        };
        let mut seq = tlv(0x30, alg);
        seq.extend(tlv(0x04, out));
        tlv(0x30, seq)
    }

    fn jks(password: &str, key: &[u8], chain: &[&[u8]], trusted: &[&[u8]]) -> Vec<u8> {
        let pw = utf16be(password);
        let mut b = Vec::new();
        b.extend(MAGIC.to_be_bytes());
        b.extend(2u32.to_be_bytes());
        b.extend((1 + trusted.len() as u32).to_be_bytes());
        let cert = |b: &mut Vec<u8>, der: &[u8]| {
            b.extend(5u16.to_be_bytes());
            b.extend(b"X.509");
            b.extend((der.len() as u32).to_be_bytes());
            b.extend(der);
        };
        b.extend(1u32.to_be_bytes());
        b.extend(3u16.to_be_bytes());
        b.extend(b"key");
        b.extend(0u64.to_be_bytes());
        let protected = protect(key, &pw, [7; 20]);
        b.extend((protected.len() as u32).to_be_bytes());
        b.extend(&protected);
        b.extend((chain.len() as u32).to_be_bytes());
        for c in chain {
            cert(&mut b, c);
        }
        for t in trusted {
            b.extend(2u32.to_be_bytes());
            b.extend(2u16.to_be_bytes());
            b.extend(b"ca");
            b.extend(0u64.to_be_bytes());
            cert(&mut b, t);
        }
        let digest = Sha1::new().chain_update(&pw).chain_update(b"Mighty Aphrodite").chain_update(&b).finalize();
        b.extend(digest);
        b
    }

    #[test]
    fn a_store_round_trips_its_key_chain_and_trusted_certs() {
        let key: Vec<u8> = (0..=200u8).collect();
        let file = jks("apassword", &key, &[b"leaf", b"ca"], &[b"root"]);
        let s = parse(&file, "apassword").unwrap();
        assert_eq!(s.keys, vec![(key, vec![b"leaf".to_vec(), b"ca".to_vec()])]);
        assert_eq!(s.trusted, vec![b"root".to_vec()]);
    }

    #[test]
    fn a_wrong_password_or_a_flipped_bit_is_refused() {
        let file = jks("apassword", b"0123456789012345678901234", &[b"leaf"], &[]);
        assert!(matches!(parse(&file, "other"), Err(TlsError::Store(m)) if m.contains("integrity")));
        for i in [0, 5, 20, file.len() / 2, file.len() - 1] {
            let mut f = file.clone();
            f[i] ^= 1;
            assert!(parse(&f, "apassword").is_err(), "bit flipped at {i} went unnoticed");
        }
    }

    #[test]
    fn truncated_and_garbage_files_are_errors_not_panics() {
        let file = jks("pw", b"0123456789012345678901234", &[b"leaf"], &[b"root"]);
        for n in 0..file.len() {
            assert!(parse(&file[..n], "pw").is_err());
        }
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for len in [0, 1, 31, 32, 33, 100, 1000] {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert!(parse(&data, "pw").is_err());
        }
    }
}
