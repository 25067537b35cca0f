//! Byte-level fuzz targets: one `pub fn <target>(data: &[u8])` per decoder of untrusted input,
//! each calling the very functions the server calls on those bytes. cargo-fuzz runs them from
//! `fuzz/fuzz_targets/<target>.rs`; `tests/corpus.rs` replays the committed corpus and the
//! regressions through them in `cargo test`.
//!
//! Every target must return normally whatever the input. Besides not panicking, each checks a
//! property where one holds: what decodes re-encodes to bytes that decode to the same value; a
//! stream decoder waits for more only while the frame it waits for is within its limit; a
//! snapshot that loads gives a tree whose invariants hold. And each runs inside [`bounded`]: with
//! [`CountingAlloc`] installed, one input may not make the decoder allocate more than
//! [`MAX_RATIO`] times (its length + [`FIXED_ALLOWANCE`] + what it declares and is entitled to,
//! such as a compressed snapshot's uncompressed size), nor ever more than [`BLOW_UP`].

mod alloc;

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warden_proto::election::{split_message, InitialMessage, Notification};
use warden_proto::quorum::{LearnerInfo, QuorumAuthPacket, QuorumPacket};
use warden_proto::{
    four_letter_word, ConnectRequest, ConnectResponse, FrameDecoder, Membership, Reader, Record, Request,
    RequestHeader, Txn, TxnDigest, TxnHeader, Writer,
};
use warden_quorum::zab::codec;
use warden_server::sasl::{digest_md5, jaas, kerberos, Mechanism, SaslServer, Step};
use warden_server::Config;
use warden_storage::{Compression, SnapshotBody, SnapshotBodyDecoder, SNAP_SYNC_SIGNATURE};
use warden_tree::DataTree;

pub use alloc::{installed as counting_alloc_installed, CountingAlloc};

/// What every target may allocate on top of its input: the decoders' fixed-size state (a
/// `Config`'s defaults, a fresh `DataTree` with `/zookeeper`, a `HashMap`'s first table) and what
/// the standard library sets up on first use.
pub const FIXED_ALLOWANCE: usize = 64 << 10;
/// The bound on a target's peak allocation, as a multiple of its input's length plus
/// [`FIXED_ALLOWANCE`] plus what it declares (see [`Measure`]).
pub const MAX_RATIO: f64 = 16.0;
/// A "memory blow-up" (issue 32): more than this for one input, whatever its size.
pub const BLOW_UP: usize = 64 << 20;

/// One input's allocation: the peak above what was allocated before it, and what it was allowed
/// to be measured against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    pub peak: usize,
    pub input: usize,
    /// Bytes the input legitimately stands for beyond itself (a compressed snapshot's
    /// uncompressed length); 0 for most targets.
    pub declared: usize,
}

impl Measure {
    /// peak / (input + declared + [`FIXED_ALLOWANCE`]).
    pub fn ratio(&self) -> f64 {
        self.peak as f64 / (self.input + self.declared + FIXED_ALLOWANCE) as f64
    }
}

thread_local! {
    static LAST: Cell<Option<Measure>> = const { Cell::new(None) };
}

/// The last measurement [`bounded`] took on this thread (`None` without [`CountingAlloc`]).
pub fn last_measure() -> Option<Measure> {
    LAST.with(Cell::get)
}

/// Runs one target's body on an input of `input` bytes; the body returns the bytes it declared.
/// With [`CountingAlloc`] installed, measures the peak and panics past the bound, so that the
/// fuzzer reports an allocation blow-up as a crash.
pub fn bounded(input: usize, body: impl FnOnce() -> usize) {
    if !alloc::installed() {
        body();
        return;
    }
    let base = alloc::start();
    let declared = body();
    let m = Measure { peak: alloc::peak_since(base), input, declared };
    LAST.with(|l| l.set(Some(m)));
    assert!(m.peak <= BLOW_UP, "allocation blow-up: {m:?}");
    assert!(m.ratio() <= MAX_RATIO, "allocation out of bounds: {m:?}, ratio {:.2}", m.ratio());
}

/// A fuzz target: takes any bytes, returns normally.
pub type Target = fn(&[u8]);

/// Every target by name, in the order `scripts/fuzz` runs them.
pub const TARGETS: &[(&str, Target)] = &[
    ("client_stream", client_stream),
    ("request", request),
    ("connect_request", connect_request),
    ("txn", txn),
    ("txn_log", txn_log),
    ("snapshot", snapshot),
    ("snapshot_gz", snapshot_gz),
    ("snapshot_snappy", snapshot_snappy),
    ("snap_sync", snap_sync),
    ("quorum_stream", quorum_stream),
    ("election_stream", election_stream),
    ("zoo_cfg", zoo_cfg),
    ("dynamic_config", dynamic_config),
    ("jaas", jaas),
    ("sasl_digest", sasl_digest),
    ("admin_http", admin_http),
];

/// Splits `data` at its first NUL: the text fields of the text targets (each lossily UTF-8, as
/// the server reads files with `read_to_string`, which refuses non-UTF-8: those inputs end early).
fn fields(data: &[u8], n: usize) -> Option<Vec<&str>> {
    let mut out: Vec<&str> = Vec::with_capacity(n);
    let mut rest = data;
    for i in 0..n {
        let part = if i + 1 == n {
            std::mem::take(&mut rest)
        } else {
            match rest.iter().position(|&b| b == 0) {
                Some(at) => {
                    let (p, r) = rest.split_at(at);
                    rest = &r[1..];
                    p
                }
                None => std::mem::take(&mut rest),
            }
        };
        out.push(std::str::from_utf8(part).ok()?);
    }
    Some(out)
}

// --- Client port ------------------------------------------------------------------------------

/// The client port as a connection task reads it: bytes 0-1 are the decoder's limit
/// (jute.maxbuffer, 0 ..= 65535), byte 2 the size the stream arrives in (1 ..= 256 bytes a
/// read); the rest is the stream. A four-letter word in its first four bytes ends it; the first
/// frame is a ConnectRequest, every later one a RequestHeader and a request body, decoded over
/// the frame's `Bytes` as `connection.rs` does. Checks that the decoder waits for more bytes only
/// while the frame it waits for fits the limit, so a connection never buffers more than
/// limit + 4 bytes for one frame, and that every frame and request round-trips.
pub fn client_stream(data: &[u8]) {
    bounded(data.len(), || {
        client_stream_inner(data);
        0
    })
}

fn client_stream_inner(data: &[u8]) {
    let [a, b, c, stream @ ..] = data else { return };
    let max_len = usize::from(u16::from_be_bytes([*a, *b]));
    let read_size = usize::from(*c) + 1;
    if let Some(first4) = stream.get(..4) {
        if four_letter_word([first4[0], first4[1], first4[2], first4[3]]).is_some() {
            return;
        }
    }
    let mut decoder = FrameDecoder::new(max_len);
    let mut buf = BytesMut::new();
    let mut handshake = true;
    for piece in stream.chunks(read_size) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= max_len, "a frame of {} bytes passed the limit {max_len}", frame.len());
                    if handshake {
                        handshake = false;
                        if !connect_frame(&frame) {
                            return;
                        }
                    } else if !request_frame(&frame) {
                        return;
                    }
                }
                Ok(None) => {
                    assert!(
                        buf.len() < 4 + max_len,
                        "the decoder waits with {} bytes buffered, limit {max_len}",
                        buf.len()
                    );
                    break;
                }
                Err(_) => return,
            }
        }
    }
}

/// A ConnectRequest frame; false when the server would close the connection.
fn connect_frame(frame: &[u8]) -> bool {
    match ConnectRequest::from_bytes(frame) {
        Ok(req) => {
            assert_eq!(ConnectRequest::from_bytes(&req.to_bytes()).as_ref(), Ok(&req), "ConnectRequest round trip");
            true
        }
        Err(_) => false,
    }
}

/// A request frame as `connection::decode_request` reads it; false when the server would close.
fn request_frame(frame: &Bytes) -> bool {
    let mut r = Reader::over_bytes(frame);
    let Ok(hdr) = RequestHeader::decode(&mut r) else { return false };
    if let Ok(req) = Request::decode_from(hdr.op_type, &mut r) {
        request_round_trip(&req);
    }
    true
}

fn request_round_trip(req: &Request) {
    let mut w = Writer::new();
    req.encode_body(&mut w);
    let again = Request::decode(req.op_code().code(), w.as_slice());
    assert_eq!(again.as_ref(), Ok(req), "request round trip");
}

/// One request body: bytes 0-3 are the opcode (big-endian, as in the RequestHeader), the rest
/// the body, for every opcode including multi, multiRead, SetWatches and SetWatches2. Also reads
/// the whole input as a frame payload (RequestHeader, then body).
pub fn request(data: &[u8]) {
    bounded(data.len(), || {
        if let [a, b, c, d, body @ ..] = data {
            if let Ok(req) = Request::decode(i32::from_be_bytes([*a, *b, *c, *d]), body) {
                request_round_trip(&req);
            }
        }
        if let Ok((_, req)) = Request::decode_payload(data) {
            request_round_trip(&req);
        }
        0
    })
}

/// The handshake frame's payload: ConnectRequest with and without the trailing readOnly byte
/// (and, for the clients Warden ships, the ConnectResponse). Both round-trip.
pub fn connect_request(data: &[u8]) {
    bounded(data.len(), || {
        connect_frame(data);
        if let Ok(resp) = ConnectResponse::from_bytes(data) {
            assert_eq!(ConnectResponse::from_bytes(&resp.to_bytes()).as_ref(), Ok(&resp), "ConnectResponse round trip");
        }
        0
    })
}

// --- Data directory ---------------------------------------------------------------------------

/// One txn as a log record's body holds it (TxnHeader, the body of its type, an optional
/// TxnDigest), each field as long as the record, as `log_format::decode_record` reads it. What
/// decodes round-trips.
pub fn txn(data: &[u8]) {
    bounded(data.len(), || {
        let mut r = Reader::with_max_len(data, data.len());
        let Ok(hdr) = TxnHeader::decode(&mut r) else { return 0 };
        let Ok(txn) = Txn::decode_body(hdr.txn_type, &mut r) else { return 0 };
        let digest = TxnDigest::decode_trailing(&mut r);
        let mut w = Writer::new();
        hdr.encode(&mut w);
        txn.encode_body(&mut w);
        if let Some(d) = &digest {
            d.encode(&mut w);
        }
        let bytes = w.into_inner();
        let mut r = Reader::with_max_len(&bytes, bytes.len());
        assert_eq!(TxnHeader::decode(&mut r).as_ref(), Ok(&hdr), "TxnHeader round trip");
        assert_eq!(Txn::decode_body(hdr.txn_type, &mut r).as_ref(), Ok(&txn), "txn round trip");
        assert_eq!(TxnDigest::decode_trailing(&mut r), digest, "TxnDigest round trip");
        0
    })
}

/// A whole txn log file (`log.<zxid>`), as recovery and `warden data log` read it.
pub fn txn_log(data: &[u8]) {
    bounded(data.len(), || {
        if let Ok(contents) = warden_storage::parse_log_file(Path::new("log.fuzz"), data) {
            let offsets: Vec<u64> = contents.records.iter().map(|(o, _, _)| *o).collect();
            assert!(offsets.windows(2).all(|w| w[0] < w[1]), "record offsets go forward");
        }
        0
    })
}

/// An uncompressed snapshot file (`snapshot.<zxid>`), as recovery reads it, then as the admin
/// `restore` command reads a stream. A snapshot that loads gives a tree whose invariants hold,
/// and that tree written out loads again to the same digest.
pub fn snapshot(data: &[u8]) {
    bounded(data.len(), || {
        snapshot_bytes(data);
        0
    })
}

/// A `.gz` snapshot file: gunzipped as recovery does, then as [`snapshot`]. Measured against its
/// uncompressed length too (what gunzip yields, also when it then fails).
pub fn snapshot_gz(data: &[u8]) {
    // What gunzip yields before it fails (a bad CRC comes after the member's data): declared
    // too, taken outside the measurement.
    let mut partial = Vec::new();
    let _ = std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(data), &mut partial);
    let yielded = partial.len();
    drop(partial);
    bounded(data.len(), || compressed_snapshot(Compression::Gzip, data).max(yielded))
}

/// A `.snappy` snapshot file (snappy-java's stream framing): decompressed as recovery does, then
/// as [`snapshot`]. Measured against its uncompressed length too.
pub fn snapshot_snappy(data: &[u8]) {
    bounded(data.len(), || compressed_snapshot(Compression::Snappy, data))
}

fn compressed_snapshot(c: Compression, data: &[u8]) -> usize {
    match warden_storage::decompress(c, data.to_vec()) {
        Ok(plain) => {
            snapshot_bytes(&plain);
            plain.len()
        }
        Err(_) => 0,
    }
}

fn snapshot_bytes(data: &[u8]) {
    if let Ok(snap) = warden_storage::decode_snapshot(data, 0) {
        if let Ok((tree, sessions)) = snap.into_tree(Path::new("snapshot.0")) {
            tree_loaded(&tree);
            let again = warden_storage::encode_snapshot(&tree, &sessions);
            let snap2 = warden_storage::decode_snapshot(&again, 0).expect("a written snapshot decodes");
            let (tree2, sessions2) = snap2.into_tree(Path::new("snapshot.0")).expect("a written snapshot loads");
            assert_eq!(sessions2, sessions, "sessions survive a snapshot round trip");
            assert_eq!(tree2.znode_count(), tree.znode_count(), "nodes survive a snapshot round trip");
            assert_eq!(tree2.zk_digest(), tree.zk_digest(), "the digest survives a snapshot round trip");
        }
    }
    if let Ok(s) = warden_storage::decode_snapshot_stream(data) {
        tree_loaded(&s.tree);
    }
}

fn tree_loaded(tree: &DataTree) {
    if let Err(e) = tree.check_invariants() {
        panic!("a loaded snapshot breaks the tree's invariants: {e}");
    }
}

// --- Quorum and election ports ----------------------------------------------------------------

/// The SNAP sync stream a learner reads after SNAP, as `quorum_net/conn.rs` reads it: byte 0 is
/// the size the stream arrives in (1 ..= 256 bytes a read), byte 1 the field limit
/// (jute.maxbuffer: 16 << (byte % 16) bytes), the rest the stream: sessions, ACL cache, nodes,
/// "/", the "BenWasHere" signature. Fed in pieces, keeping what an incomplete item left, with the
/// connection's limit on what may wait; the result must equal one feed of the whole, and a
/// stream that decodes loads into a tree whose invariants hold.
pub fn snap_sync(data: &[u8]) {
    bounded(data.len(), || {
        snap_sync_inner(data);
        0
    })
}

fn snap_sync_inner(data: &[u8]) {
    let [a, b, stream @ ..] = data else { return };
    let read_size = usize::from(*a) + 1;
    let max_field = 16usize << (b % 16);
    let mut dec = SnapshotBodyDecoder::new(max_field);
    let mut buf: Vec<u8> = Vec::new();
    let mut pieces = stream.chunks(read_size);
    let mut fed = 0;
    let body: Result<SnapshotBody, String> = loop {
        let used = match dec.feed(&buf) {
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        buf.drain(..used);
        if dec.is_done() {
            break dec.finish();
        }
        // The connection's limit (`2 * max_buffer + PACKET_OVERHEAD_MAX`) on an item still waiting.
        if buf.len() > 2 * max_field + 64 {
            return;
        }
        match pieces.next() {
            Some(p) => {
                fed += p.len();
                buf.extend_from_slice(p);
            }
            None => return,
        }
    };
    // One feed of everything read so far must agree.
    let mut whole = SnapshotBodyDecoder::new(max_field);
    let once = whole.feed(&stream[..fed]).and_then(|_| whole.finish());
    let body = match (body, once) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "fed in pieces or at once, the SNAP stream decodes alike");
            a
        }
        (Err(_), Err(_)) => return,
        (a, b) => panic!("fed in pieces: {:?}; at once: {:?}", a.map(|_| ()), b.map(|_| ())),
    };
    let mut r = Reader::with_max_len(&buf, 64);
    if r.read_ustring().ok().as_deref() != Some(SNAP_SYNC_SIGNATURE) {
        return;
    }
    if let Ok(tree) = DataTree::from_snapshot(body.nodes, 0) {
        tree_loaded(&tree);
    }
}

/// The quorum port: bytes 0-1 are the packet limit (jute.maxbuffer + extrasize, 0 ..= 65535),
/// the rest the stream. A quorum SASL packet may open it (`sasl/quorum.rs`); then QuorumPackets
/// as `quorum_net/conn.rs` cuts them, each through every payload decoder the leader and the
/// learner use (a txn entry, the designated leader, PING's session table, a forwarded request
/// and its body, REVALIDATE both ways, an epoch, a LearnerInfo, a configuration text). Packets,
/// entries and forwarded requests round-trip.
pub fn quorum_stream(data: &[u8]) {
    bounded(data.len(), || {
        quorum_stream_inner(data);
        0
    })
}

fn quorum_stream_inner(data: &[u8]) {
    let [a, b, stream @ ..] = data else { return };
    let max_len = usize::from(u16::from_be_bytes([*a, *b]));
    let mut buf = stream;
    if QuorumAuthPacket::starts(buf) == Some(true) {
        let mut r = Reader::with_max_len(buf, max_len);
        match QuorumAuthPacket::decode(&mut r) {
            Ok(p) => {
                assert_eq!(QuorumAuthPacket::from_bytes(&p.to_bytes()).as_ref(), Ok(&p), "auth packet round trip");
                buf = &buf[r.position()..];
            }
            Err(_) => return,
        }
    }
    while let Ok(Some((packet, used))) = QuorumPacket::decode_stream(buf, max_len) {
        buf = &buf[used..];
        let again = QuorumPacket::decode_stream(&packet.to_bytes(), max_len);
        assert_eq!(again.as_ref().map(|o| o.as_ref().map(|(p, _)| p)), Ok(Some(&packet)), "packet round trip");
        payloads(&packet);
    }
}

fn payloads(packet: &QuorumPacket) {
    if let Ok(entry) = codec::decode_entry(packet) {
        let p = codec::proposal(&entry);
        assert_eq!(codec::decode_entry(&p).as_ref(), Ok(&entry), "txn entry round trip");
    }
    let _ = codec::decode_designated(packet);
    let _ = codec::decode_int(packet);
    let data = packet.data.as_deref().unwrap_or_default();
    if let Ok(touches) = codec::decode_touches(data) {
        assert_eq!(codec::encode_touches(&touches), data, "a PING table re-encodes to itself");
    }
    if let Ok(fwd) = codec::ForwardedRequest::from_packet(packet) {
        assert_eq!(codec::ForwardedRequest::from_packet(&fwd.to_packet()).as_ref(), Ok(&fwd), "REQUEST round trip");
        if let Ok(req) = Request::decode(fwd.op_type, &fwd.request) {
            request_round_trip(&req);
        }
    }
    let _ = codec::decode_revalidate(data);
    let _ = codec::decode_revalidate_reply(data);
    let _ = LearnerInfo::decode_lenient(data);
    if let Ok(text) = std::str::from_utf8(data) {
        membership_text(text);
    }
}

/// The election port: the initiator's handshake (`InitialMessage`, bare sid or versioned with
/// its addresses), then length-prefixed notifications, as `election/listener.rs` and
/// `election/conn.rs` read them. Every notification form round-trips through the current one.
pub fn election_stream(data: &[u8]) {
    bounded(data.len(), || {
        let mut buf = data;
        match InitialMessage::decode(buf) {
            Ok(Some((msg, used))) => {
                let _ = msg.addresses();
                assert_eq!(
                    InitialMessage::decode(&msg.encode()),
                    Ok(Some((msg.clone(), used))),
                    "handshake round trip"
                );
                buf = &buf[used..];
            }
            _ => return 0,
        }
        while let Ok(Some((payload, used))) = split_message(buf) {
            buf = &buf[used..];
            if let Ok(n) = Notification::decode(payload) {
                assert_eq!(Notification::decode(&n.encode()).as_ref(), Ok(&n), "notification round trip");
                if let Ok(text) = std::str::from_utf8(&n.config) {
                    membership_text(text);
                }
            }
        }
        0
    })
}

// --- Configuration files ----------------------------------------------------------------------

/// A configuration text as a NEWLEADER, a notification or `/zookeeper/config` carries it. What
/// parses prints back to text that parses to the same configuration.
fn membership_text(text: &str) {
    if let Ok(m) = Membership::parse_text(text) {
        let again = Membership::parse_text(&m.to_text()).expect("a printed configuration parses");
        assert_eq!(again, m, "configuration text round trip");
    }
}

/// zoo.cfg as `Config::parse` reads it, then the JVM flags (`SERVER_JVMFLAGS`) applied to it:
/// the text up to the first NUL, and the flags after it. Only what reads no other file is
/// called (TLS stores and JAAS files are other targets' business).
pub fn zoo_cfg(data: &[u8]) {
    bounded(data.len(), || {
        let Some(f) = fields(data, 2) else { return 0 };
        if let Ok(mut cfg) = Config::parse(f[0]) {
            let _ = cfg.membership();
            let _ = cfg.unknown_keys();
            let _ = cfg.enforced_auth_schemes();
            let _ = cfg.four_letter_allowed("ruok");
            let _ = cfg.apply_jvm_flags(f[1]);
            let _ = cfg.sasl_provider();
        }
        0
    })
}

/// The dynamic configuration: a `dynamicConfigFile` as `Config::load` reads it (no version
/// line), and a reconfig's texts: a whole new member list, and incremental joining and leaving
/// lists against the file's configuration (three fields split at NULs). What parses round-trips
/// through the file's text and the `/zookeeper/config` text.
pub fn dynamic_config(data: &[u8]) {
    bounded(data.len(), || {
        let Some(f) = fields(data, 3) else { return 0 };
        let base = match Config::parse_dynamic(f[0]) {
            Ok(m) => {
                let again = Membership::parse_text(&m.dynamic_file_text()).expect("a written dynamic file parses");
                assert_eq!(again.servers, m.servers, "dynamic file round trip");
                membership_text(&m.to_text());
                m
            }
            Err(_) => Membership::default(),
        };
        let _ = Membership::from_new_members(f[1]);
        let _ = base.incremental(Some(f[1]), Some(f[2]));
        membership_text(f[0]);
        0
    })
}

/// What one Kerberos-name rule may allocate beyond its length: its regular expressions compile
/// to programs whose size follows their structure, not their length (`(a{99}){99}`), within the
/// regex crate's own limits. The rules are operator configuration, not network input.
pub const REGEX_ALLOWANCE: usize = 1 << 20;

/// A JAAS login configuration file (`--jaas`, `jaasLoginConfig`), the login each of its sections
/// means, the JVM flags that name it, and ZooKeeper's Kerberos-name rules
/// (`zookeeper.security.auth_to_local`) applied to a principal: three fields split at NULs. Each
/// rule declares [`REGEX_ALLOWANCE`].
pub fn jaas(data: &[u8]) {
    bounded(data.len(), || {
        let Some(f) = fields(data, 3) else { return 0 };
        let declared = f[1].matches("RULE:").count() * REGEX_ALLOWANCE;
        if let Ok(sections) = jaas::parse(f[0]) {
            for s in &sections {
                let _ = SaslServer::login_from_section(s, Some("pw"));
            }
        }
        let _ = jaas::login_config_from_jvm_flags(f[0]);
        let _ = jaas::jvm_property(f[0], "zookeeper.sasl.serverconfig");
        if let Ok(rules) = kerberos::AuthToLocal::parse(f[1]) {
            let _ = kerberos::authorization_id(f[2], &rules, "EXAMPLE.COM", false, false);
            let _ = kerberos::authorization_id(f[2], &rules, "EXAMPLE.COM", true, true);
        }
        declared
    })
}

/// The nonce of [`sasl_digest`]'s exchanges (a server draws a random one); seeds with a valid
/// digest-response use it.
pub const SASL_NONCE: &str = "fuzz-nonce-0123456789";

/// A DIGEST-MD5 client response as the server's mechanism takes it after its challenge (user
/// `super` / `secret` and `bob` / `pw`, nonce [`SASL_NONCE`]); and the same bytes as a server
/// challenge, which a quorum learner answers (`client_response`).
pub fn sasl_digest(data: &[u8]) {
    bounded(data.len(), || {
        let users = Arc::new(
            [("super", "secret"), ("bob", "pw")].iter().map(|(u, p)| (u.to_string(), p.to_string())).collect(),
        );
        let mut mech = digest_md5::DigestMd5::new(users, SASL_NONCE.to_string());
        assert!(matches!(mech.step(b""), Step::Continue(_)), "an empty first token gets the challenge");
        match mech.step(data) {
            Step::Done { authentication_id, .. } => {
                assert!(authentication_id == "super" || authentication_id == "bob");
            }
            Step::Continue(_) => panic!("DIGEST-MD5 has no third step"),
            Step::Fail(_) => {}
        }
        assert!(matches!(mech.step(data), Step::Fail(_)), "a packet after the end fails");
        let _ = digest_md5::client_response(data, "bob", "pw", "cnonce", digest_md5::ZK_DIGEST_URI);
        0
    })
}

// --- HTTP ports -------------------------------------------------------------------------------

/// An HTTP/1 request to the AdminServer or the Prometheus port: the head parsed by httparse (what
/// hyper parses with, within the AdminServer's 64 KiB head limit), then what Warden itself makes
/// of it: the command and its arguments under `/commands` (percent-decoded), the command's
/// lookup, the `Authorization` header's identities for `snapshot`/`restore`.
pub fn admin_http(data: &[u8]) {
    bounded(data.len(), || {
        if data.len() > 64 << 10 {
            return 0;
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(_)) = req.parse(data) else { return 0 };
        let Some(target) = req.path else { return 0 };
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let _metrics = path == "/metrics" && req.method == Some("GET");
        if let Some((Some(name), args)) = warden_server::admin::parse_target(path, query, "/commands") {
            let _ = warden_server::admin::commands::find(&name);
            let _ = args.get("streaming");
        }
        for h in req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("authorization")) {
            if let Ok(v) = std::str::from_utf8(h.value) {
                let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
                let _ = warden_server::admin::authenticate(v, peer, Some("super:D/InIHSb7yEEbrWz8b9l71RjZJU="));
            }
        }
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_split_at_nuls() {
        assert_eq!(fields(b"a\0b\0c\0d", 3), Some(vec!["a", "b", "c\0d"]));
        assert_eq!(fields(b"a", 3), Some(vec!["a", "", ""]));
        assert_eq!(fields(b"\xff", 1), None);
    }

    #[test]
    fn every_target_takes_the_empty_input() {
        for (_, t) in TARGETS {
            t(b"");
        }
    }
}
