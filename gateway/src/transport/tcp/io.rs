//! Framing that holds no buffer while a connection idles: bytes are read through a buffer
//! on the stack and only a partial frame is kept, sized to it; the write buffer is let go
//! once flushed. (tokio-util's `FramedRead` and `FramedWrite` keep their buffers for the
//! connection's life: a kilobyte for every idle client.)

use std::{
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::{Bytes, BytesMut};
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::codec::{Decoder, FramedWrite};

use super::{FrameCodec, FramingError};
use crate::transport::link::Inbound;

/// Bytes taken from the socket per read.
const READ_CHUNK: usize = 4096;

/// The frames of a byte stream, as the connection takes them: I/O errors and EOF (a
/// truncated frame included) end the stream; a framing error is reported once, then ends
/// it.
pub(super) struct FrameReader<R> {
    io: R,
    codec: FrameCodec,
    /// A frame begun but not complete (empty, without an allocation, between frames).
    partial: BytesMut,
    ended: bool,
}

impl<R> FrameReader<R> {
    pub(super) fn new(io: R, codec: FrameCodec) -> Self {
        Self {
            io,
            codec,
            partial: BytesMut::new(),
            ended: false,
        }
    }
}

impl<R: AsyncRead + Unpin> Stream for FrameReader<R> {
    type Item = Inbound;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Inbound>> {
        let this = &mut *self;
        while !this.ended {
            match this.codec.decode(&mut this.partial) {
                Ok(Some(frame)) => {
                    if this.partial.is_empty() {
                        // Lets the frame own the allocation alone; the next read starts anew.
                        this.partial = BytesMut::new();
                    }
                    return Poll::Ready(Some(Inbound::Frame(frame)));
                }
                Ok(None) => {}
                Err(broken) => return Poll::Ready(Some(this.end(broken))),
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            match ready!(Pin::new(&mut this.io).poll_read(cx, &mut read)) {
                Ok(()) if !read.filled().is_empty() => {
                    this.partial.extend_from_slice(read.filled())
                }
                Ok(()) | Err(_) => this.ended = true,
            }
        }
        Poll::Ready(None)
    }
}

impl<R> FrameReader<R> {
    fn end(&mut self, broken: FramingError) -> Inbound {
        self.ended = true;
        self.partial = BytesMut::new();
        Inbound::Broken(broken.to_string())
    }
}

/// Frames with their headers, written in bursts; the buffer is let go after each flush.
pub(super) struct FrameWriter<W>(FramedWrite<W, FrameCodec>);

impl<W: AsyncWrite> FrameWriter<W> {
    pub(super) fn new(io: W, codec: FrameCodec) -> Self {
        Self(FramedWrite::with_capacity(io, codec, 0))
    }
}

impl<W: AsyncWrite + Unpin> Sink<Bytes> for FrameWriter<W> {
    type Error = FramingError;

    fn poll_ready(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), FramingError>> {
        Pin::new(&mut self.0).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, frame: Bytes) -> Result<(), FramingError> {
        Pin::new(&mut self.0).start_send(frame)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), FramingError>> {
        ready!(Pin::new(&mut self.0).poll_flush(cx))?;
        if self.0.write_buffer().capacity() > 0 {
            *self.0.write_buffer_mut() = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_close(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), FramingError>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}
