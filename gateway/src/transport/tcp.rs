//! The TCP transport: each protobuf frame follows a 12-byte big-endian header in the
//! TeamTalk manner:
//!
//! | bytes | field |
//! |---|---|
//! | 0–3 | length of the frame after the header |
//! | 4–5 | version, [`VERSION`] |
//! | 6–7 | flags, 0 (reserved) |
//! | 8–9 | command: the field number of the frame's `body` (`send` = 3, `push` = 5, …) |
//! | 10–11 | the low 16 bits of the frame's `request_id` |
//!
//! Coalesced and split packets are reassembled by the codec; a frame over
//! `max_frame_bytes` or a header of another version breaks the stream (the client gets a
//! fatal error frame and the connection closes), a body that is not a `ClientFrame` gets
//! an error frame and the connection goes on.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use imesh_kit::tls::Tls;
use tokio::net::TcpListener;
use tokio_util::codec::{Decoder, Encoder};

use crate::{
    Gateway,
    admission::Refused,
    transport::frames,
    transport::link,
    transport::listen::{self, Accepting, Refusal},
    transport::tcp::io::{FrameReader, FrameWriter},
};

pub const HEADER_LEN: usize = 12;
pub const VERSION: u16 = 1;

/// Why the byte stream cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("header.version: {0} is not {VERSION}")]
    Version(u16),
    #[error("header.length: {got} bytes is over the limit of {max}")]
    TooLarge { got: usize, max: usize },
}

/// Splits a byte stream into frames and prefixes frames with their header.
pub struct FrameCodec {
    max_frame_bytes: usize,
}

impl FrameCodec {
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { max_frame_bytes }
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FramingError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FramingError> {
        if src.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        let version = u16::from_be_bytes([src[4], src[5]]);
        if version != VERSION {
            return Err(FramingError::Version(version));
        }
        if len > self.max_frame_bytes {
            return Err(FramingError::TooLarge {
                got: len,
                max: self.max_frame_bytes,
            });
        }
        if src.len() < HEADER_LEN + len {
            src.reserve(HEADER_LEN + len - src.len());
            return Ok(None);
        }
        src.advance(HEADER_LEN);
        Ok(Some(src.split_to(len).freeze()))
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = FramingError;

    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> Result<(), FramingError> {
        let (request_id, command) = frame_command(&frame);
        dst.reserve(HEADER_LEN + frame.len());
        dst.put_u32(frame.len() as u32);
        dst.put_u16(VERSION);
        dst.put_u16(0);
        dst.put_u16(command);
        dst.put_u16(request_id as u16);
        dst.extend_from_slice(&frame);
        Ok(())
    }
}

/// The `request_id` (field 1) and the `body` field number of an encoded frame, read from
/// its leading keys: prost writes fields in field-number order.
pub fn frame_command(frame: &[u8]) -> (u64, u16) {
    let mut rest = frame;
    let Some(key) = varint(&mut rest) else {
        return (0, 0);
    };
    if key >> 3 != 1 {
        return (0, (key >> 3) as u16);
    }
    let request_id = varint(&mut rest).unwrap_or(0);
    let command = varint(&mut rest).map_or(0, |key| (key >> 3) as u16);
    (request_id, command)
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Serves TCP clients until the gateway drains: admitted ones (see [`crate::transport::listen`]) each
/// on a task of its own, over TLS when `tls` is set; a refused plaintext client is told
/// why in one frame, then closed.
pub async fn serve(listener: TcpListener, gateway: Arc<Gateway>, tls: Option<Arc<Tls>>) {
    let max = gateway.config.max_frame_bytes;
    let how = Accepting {
        admission: gateway.admission.clone(),
        tls,
        refusal: Refusal::Frame,
        proxy_protocol: true,
        stop: gateway.draining.clone(),
    };
    listen::accept(listener, how, move |stream, client| {
        // Set up before the task's future: it holds the connection and nothing else.
        let serving = client.take_place().map(|place| {
            let (read, write) = tokio::io::split(stream);
            let reader = Box::pin(FrameReader::new(read, FrameCodec::new(max)));
            let writer = FrameWriter::new(write, FrameCodec::new(max));
            link::serve(reader, writer, gateway.clone(), place)
        });
        async move {
            if let Some(serving) = serving {
                serving.await;
            }
        }
    })
    .await;
}

/// A refusal as the one framed error a refused client reads before the close.
pub fn refusal_frame(refused: &Refused) -> Bytes {
    let mut framed = BytesMut::new();
    // Encoding checks no limit (only decoding does) and cannot fail.
    let _ = FrameCodec::new(0).encode(frames::refused(0, refused), &mut framed);
    framed.freeze()
}

mod io;
#[cfg(test)]
mod tests;
