//! Tests of `net.rs`.

use super::handshake::{HELLO_LABEL, WELCOME_LABEL};
use super::*;

#[test]
fn frames_round_trip_and_refuse_damage() {
    let frame = encode_frame(b"hello").unwrap();
    let header: [u8; HEADER] = frame[..HEADER].try_into().unwrap();
    assert_eq!(frame_len(&header, MAX_FRAME).unwrap(), 5);
    assert_eq!(decode_frame(&header, &frame[HEADER..]).unwrap(), b"hello");
    let mut bad = frame.clone();
    bad[HEADER] ^= 1;
    assert!(decode_frame(&header, &bad[HEADER..]).is_err());
    let mut huge = header;
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(frame_len(&huge, MAX_FRAME).is_err());
}

#[test]
fn a_handshake_tag_binds_every_field_and_the_key() {
    let key = PeerKey::new(b"0123456789abcdef");
    let tag = key.tag(HELLO_LABEL, 1, (2, 3), (4, 5));
    assert!(key.verify(HELLO_LABEL, 1, (2, 3), (4, 5), &tag));
    let others = [
        (WELCOME_LABEL, 1, (2, 3), (4, 5)),
        (HELLO_LABEL, 9, (2, 3), (4, 5)),
        (HELLO_LABEL, 1, (9, 3), (4, 5)),
        (HELLO_LABEL, 1, (2, 9), (4, 5)),
        (HELLO_LABEL, 1, (2, 3), (9, 5)),
        (HELLO_LABEL, 1, (2, 3), (4, 9)),
    ];
    for (label, cluster, nonces, ends) in others {
        assert!(
            !key.verify(label, cluster, nonces, ends, &tag),
            "{label} {cluster} {nonces:?} {ends:?}"
        );
    }
    let other_key = PeerKey::new(b"fedcba9876543210");
    assert!(!other_key.verify(HELLO_LABEL, 1, (2, 3), (4, 5), &tag));
}

/// A listener that answers the handshake with a welcome it cannot have made (another
/// key's): the opener refuses to go on.
#[test]
#[allow(clippy::disallowed_types, clippy::disallowed_methods)]
fn an_opener_refuses_a_welcome_without_the_secret() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let impostor = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let challenge = rmp_serde::to_vec(&Challenge { nonce: 7 }).unwrap();
        socket
            .write_all(&encode_frame(&challenge).unwrap())
            .unwrap();
        let mut header = [0u8; HEADER];
        socket.read_exact(&mut header).unwrap();
        let mut body = vec![0u8; frame_len(&header, MAX_HELLO).unwrap()];
        socket.read_exact(&mut body).unwrap();
        let hello: Hello = rmp_serde::from_slice(&body).unwrap();
        let wrong = PeerKey::new(b"not the secret!!");
        let proof = wrong.tag(
            WELCOME_LABEL,
            hello.cluster,
            (7, hello.nonce),
            (hello.from, hello.to),
        );
        let welcome = rmp_serde::to_vec(&Reply::Welcome(proof)).unwrap();
        socket.write_all(&encode_frame(&welcome).unwrap()).unwrap();
    });
    let env = cairn_engine::env::real::env().unwrap();
    let key = PeerKey::new(b"0123456789abcdef");
    let result = cairn_engine::env::real::block_on(identify(
        &env,
        (1, &key),
        0,
        3,
        addr,
        Duration::from_secs(5),
    ));
    impostor.join().unwrap();
    let error = result.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
    assert!(error.to_string().contains("does not prove"), "{error}");
}

#[test]
fn a_connection_names_its_cluster_in_a_small_first_frame() {
    let key = PeerKey::new(b"0123456789abcdef");
    let ends = (u64::MAX, MemberId::MAX);
    let hello = rmp_serde::to_vec(&Hello {
        cluster: u128::MAX,
        from: u64::MAX,
        to: MemberId::MAX,
        nonce: u128::MAX,
        proof: key.tag(HELLO_LABEL, u128::MAX, (u128::MAX, u128::MAX), ends),
    })
    .unwrap();
    assert!(hello.len() <= MAX_HELLO, "{} bytes", hello.len());
    let welcome = rmp_serde::to_vec(&Reply::Welcome(key.tag(
        WELCOME_LABEL,
        u128::MAX,
        (0, 0),
        ends,
    )))
    .unwrap();
    assert!(welcome.len() <= MAX_HELLO, "{} bytes", welcome.len());
    // A first frame past the bound is refused by its header, before its body is read.
    let frame = encode_frame(&vec![0u8; MAX_HELLO + 1]).unwrap();
    let header: [u8; HEADER] = frame[..HEADER].try_into().unwrap();
    assert!(frame_len(&header, MAX_HELLO).is_err());
    assert!(frame_len(&header, MAX_FRAME).is_ok());
}
