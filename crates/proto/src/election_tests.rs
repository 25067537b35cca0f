use super::*;
use proptest::prelude::*;

fn sample() -> Notification {
    Notification {
        state: ServerState::Looking,
        leader: 3,
        zxid: 0x2_0000_0005,
        election_epoch: 7,
        peer_epoch: 2,
        version: NOTIFICATION_VERSION,
        config: b"server.1=a:2888:3888:participant\nversion=100000000".to_vec(),
    }
}

#[test]
fn notification_golden_bytes() {
    let n = Notification { config: b"v".to_vec(), ..sample() };
    let want: Vec<u8> = [
        &[0, 0, 0, 0][..],
        &[0, 0, 0, 0, 0, 0, 0, 3],
        &[0, 0, 0, 2, 0, 0, 0, 5],
        &[0, 0, 0, 0, 0, 0, 0, 7],
        &[0, 0, 0, 0, 0, 0, 0, 2],
        &[0, 0, 0, 2],
        &[0, 0, 0, 1],
        b"v",
    ]
    .concat();
    assert_eq!(n.encode(), want);
    assert_eq!(n.encode().len(), 44 + 1);
    assert_eq!(Notification::decode(&want).unwrap(), n);
}

#[test]
fn notification_round_trips_for_every_state() {
    for state in [ServerState::Looking, ServerState::Following, ServerState::Leading, ServerState::Observing] {
        let n = Notification { state, ..sample() };
        assert_eq!(Notification::decode(&n.encode()).unwrap(), n);
        assert_eq!(ServerState::from_wire(state.to_wire()), Some(state));
    }
}

#[test]
fn legacy_forms_decode_as_zookeeper_reads_them() {
    let n = sample();
    let b28 = n.encode_28();
    assert_eq!(b28.len(), 28);
    let d = Notification::decode(&b28).unwrap();
    assert_eq!((d.peer_epoch, d.version, d.config.len()), (2, 0, 0), "peer epoch from zxid >> 32");
    let b40 = n.encode_40();
    assert_eq!(b40.len(), 40);
    assert_eq!(&b40[36..], &[0, 0, 0, 1]);
    let d = Notification::decode(&b40).unwrap();
    assert_eq!(d, Notification { version: 0, config: vec![], ..n.clone() });
    // Version 1 in a longer message: no config is read, trailing bytes ignored.
    let mut v1 = Notification { version: 1, ..n.clone() }.encode();
    v1.truncate(42);
    let d = Notification::decode(&v1).unwrap();
    assert_eq!((d.version, d.config.len()), (1, 0));
}

#[test]
fn short_and_malformed_notifications_are_rejected() {
    let full = sample().encode();
    for len in 0..full.len() {
        let r = Notification::decode(&full[..len]);
        match len {
            28 | 40 => assert!(r.is_ok(), "{len}"),
            _ => assert!(r.is_err(), "{len}: {r:?}"),
        }
    }
    let mut bad_state = full.clone();
    bad_state[3] = 9;
    assert_eq!(Notification::decode(&bad_state), Err(DecodeError::Invalid("unknown server state")));
}

#[test]
fn hostile_config_lengths_are_rejected() {
    let mut b = Notification { config: vec![], ..sample() }.encode();
    let at = b.len() - 4;
    for len in [-1i32, 45, i32::MAX, i32::MIN] {
        b[at..].copy_from_slice(&len.to_be_bytes());
        assert_eq!(Notification::decode(&b), Err(DecodeError::BadLength(len)));
    }
    // Within the payload's size but beyond its end: a truncated message.
    b[at..].copy_from_slice(&44i32.to_be_bytes());
    assert!(matches!(Notification::decode(&b), Err(DecodeError::Incomplete { .. })));
}

#[test]
fn message_framing() {
    let payload = sample().encode();
    let mut stream = frame_message(&payload);
    let first = stream.len();
    stream.extend(frame_message(b"x"));
    for n in 0..first {
        assert_eq!(split_message(&stream[..n]), Ok(None), "{n}");
    }
    let (p, used) = split_message(&stream).unwrap().unwrap();
    assert_eq!((p, used), (&payload[..], first));
    assert_eq!(split_message(&stream[used..]).unwrap().unwrap(), (&b"x"[..], 5));
    for len in [0i32, -1, i32::MIN, (ELECTION_PACKET_MAX + 1) as i32, i32::MAX] {
        assert_eq!(split_message(&len.to_be_bytes()), Err(ElectionFrameError::BadLength(len)));
    }
    let max = (ELECTION_PACKET_MAX as i32).to_be_bytes();
    assert_eq!(split_message(&max), Ok(None));
}

#[test]
fn initial_message_golden_bytes_and_prefixes() {
    let m = InitialMessage::Versioned { protocol_version: PROTOCOL_VERSION_V1, sid: 2, addr: "zk2:3888".into() };
    let bytes = m.encode();
    let want: Vec<u8> =
        [&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0][..], &[0, 0, 0, 0, 0, 0, 0, 2], &[0, 0, 0, 8], b"zk2:3888"]
            .concat();
    assert_eq!(bytes, want);
    for n in 0..bytes.len() {
        assert_eq!(InitialMessage::decode(&bytes[..n]), Ok(None), "{n}");
    }
    let mut stream = bytes.clone();
    stream.extend([0, 0, 0, 44]);
    assert_eq!(InitialMessage::decode(&stream), Ok(Some((m.clone(), bytes.len()))));
    assert_eq!(m.sid(), 2);
    assert_eq!(m.addresses(), Some(vec![("zk2".to_string(), 3888)]));
}

#[test]
fn initial_message_forms() {
    let bare = InitialMessage::BareSid(5);
    assert_eq!(bare.encode(), [0, 0, 0, 0, 0, 0, 0, 5]);
    assert_eq!(InitialMessage::decode(&bare.encode()), Ok(Some((bare, 8))));
    let v2 = InitialMessage::Versioned {
        protocol_version: PROTOCOL_VERSION_V2,
        sid: 9,
        addr: "10.0.0.1:3888|[::1]:3889".into(),
    };
    assert_eq!(InitialMessage::decode(&v2.encode()).unwrap().unwrap().0, v2);
    assert_eq!(v2.addresses(), Some(vec![("10.0.0.1".to_string(), 3888), ("::1".to_string(), 3889)]));
    for bad in ["nohost", "h:notaport", "::1:3888", "h:70000", "a:1|"] {
        let m = InitialMessage::Versioned { protocol_version: PROTOCOL_VERSION_V2, sid: 1, addr: bad.into() };
        assert_eq!(m.addresses(), None, "{bad}");
    }
}

#[test]
fn hostile_initial_messages_are_rejected() {
    let mut w = Writer::new();
    w.write_i64(-3);
    assert!(matches!(InitialMessage::decode(w.as_slice()), Err(DecodeError::Invalid(_))));
    for len in [0i32, -1, (INITIAL_ADDR_MAX + 1) as i32, i32::MAX] {
        let mut w = Writer::new();
        w.write_i64(PROTOCOL_VERSION_V1);
        w.write_i64(1);
        w.write_i32(len);
        assert_eq!(InitialMessage::decode(w.as_slice()), Err(DecodeError::BadLength(len)));
    }
    let mut w = Writer::new();
    w.write_i64(PROTOCOL_VERSION_V1);
    w.write_i64(1);
    w.write_buffer(Some(&[0xff, 0xfe]));
    assert_eq!(InitialMessage::decode(w.as_slice()), Err(DecodeError::BadUtf8));
}

fn any_state() -> impl Strategy<Value = ServerState> {
    (0i32..4).prop_map(|v| ServerState::from_wire(v).unwrap())
}

proptest! {
    #[test]
    fn any_notification_round_trips(
        state in any_state(), leader: i64, zxid: i64, election_epoch: i64, peer_epoch: i64,
        config in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let n = Notification { state, leader, zxid, election_epoch, peer_epoch, version: 2, config };
        prop_assert_eq!(Notification::decode(&n.encode()).unwrap(), n);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = Notification::decode(&bytes);
        let _ = InitialMessage::decode(&bytes);
        let _ = split_message(&bytes);
    }
}
