//! The frame codec: coalesced and split packets, bad headers, and the header's command.

use imesh_protos::gateway::{self as pb, client_frame, server_frame};
use prost::Message as _;

use super::*;

fn header(len: u32, version: u16) -> Vec<u8> {
    let mut out = len.to_be_bytes().to_vec();
    out.extend(version.to_be_bytes());
    out.extend([0; 6]);
    out
}

#[test]
fn coalesced_frames_come_out_one_by_one_and_split_ones_wait_for_their_rest() {
    let mut codec = FrameCodec::new(64);
    let mut src = BytesMut::new();
    src.extend(header(3, VERSION));
    src.extend(b"abc");
    src.extend(header(2, VERSION));
    src.extend(b"d");
    assert_eq!(
        codec.decode(&mut src).unwrap(),
        Some(Bytes::from_static(b"abc"))
    );
    assert_eq!(
        codec.decode(&mut src).unwrap(),
        None,
        "half of the second frame"
    );
    src.extend(b"e");
    assert_eq!(
        codec.decode(&mut src).unwrap(),
        Some(Bytes::from_static(b"de"))
    );
    src.extend(&header(0, VERSION)[..5]);
    assert_eq!(codec.decode(&mut src).unwrap(), None, "half a header");
    src.extend(&header(0, VERSION)[5..]);
    assert_eq!(codec.decode(&mut src).unwrap(), Some(Bytes::new()));
}

#[test]
fn oversized_frames_and_other_versions_break_the_stream() {
    let mut codec = FrameCodec::new(64);
    let mut src = BytesMut::from(&header(65, VERSION)[..]);
    assert!(matches!(
        codec.decode(&mut src),
        Err(FramingError::TooLarge { got: 65, max: 64 })
    ));
    let mut src = BytesMut::from(&header(1, 7)[..]);
    assert!(matches!(
        codec.decode(&mut src),
        Err(FramingError::Version(7))
    ));
}

#[test]
fn written_frames_carry_their_body_command_and_request_seq() {
    let frame = pb::ServerFrame {
        request_id: 0x1_0005,
        body: Some(server_frame::Body::Pong(pb::Pong {})),
    }
    .encode_to_vec();
    let mut dst = BytesMut::new();
    FrameCodec::new(64)
        .encode(Bytes::from(frame.clone()), &mut dst)
        .unwrap();
    assert_eq!(&dst[..4], &(frame.len() as u32).to_be_bytes());
    assert_eq!(&dst[4..6], &VERSION.to_be_bytes());
    assert_eq!(&dst[8..10], &7u16.to_be_bytes(), "pong is field 7");
    assert_eq!(
        &dst[10..12],
        &5u16.to_be_bytes(),
        "low 16 bits of the request id"
    );
    assert_eq!(&dst[HEADER_LEN..], &frame[..]);
    // A frame without a request id starts with its body.
    let ping = pb::ClientFrame {
        request_id: 0,
        body: Some(client_frame::Body::Ping(pb::Ping {})),
    }
    .encode_to_vec();
    assert_eq!(frame_command(&ping), (0, 6));
}
