//! The gateway's TCP frame decoder on arbitrary bytes, arriving in arbitrary pieces (half
//! and coalesced packets). It must never panic; every frame it yields must be within the
//! size limit and survive a round trip through the encoder; a stream it refuses stays
//! refused; and whatever the frame holds, decoding it as a `ClientFrame` and reading its
//! command must not panic.

#![no_main]

use bytes::BytesMut;
use gateway::transport::tcp::{FrameCodec, HEADER_LEN, frame_command};
use imesh_protos::gateway::ClientFrame;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use tokio_util::codec::{Decoder, Encoder};

const MAX: usize = 4096;

fuzz_target!(|input: &[u8]| {
    // The first byte sets the size of the pieces the rest arrives in.
    let Some((&piece, stream)) = input.split_first() else {
        return;
    };
    let piece = usize::from(piece).max(1);
    let mut codec = FrameCodec::new(MAX);
    let mut buffer = BytesMut::new();
    for chunk in stream.chunks(piece) {
        buffer.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut buffer) {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= MAX);
                    let _ = ClientFrame::decode(frame.clone());
                    let _ = frame_command(&frame);
                    let mut encoded = BytesMut::new();
                    codec.encode(frame.clone(), &mut encoded).unwrap();
                    assert_eq!(encoded.len(), HEADER_LEN + frame.len());
                    let again = codec.decode(&mut encoded).unwrap().unwrap();
                    assert_eq!(again, frame);
                    assert!(encoded.is_empty());
                }
                Ok(None) => break,
                Err(_) => {
                    // The stream is broken for good: the same bytes are refused again.
                    assert!(codec.decode(&mut buffer).is_err());
                    return;
                }
            }
        }
    }
});
