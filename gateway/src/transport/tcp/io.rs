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
use crate::transport::{READ_CHUNK, link::Inbound};

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

    /// Reports why the stream cannot be followed; nothing is read after it.
    fn end(&mut self, broken: FramingError) -> Inbound {
        self.ended = true;
        self.partial = BytesMut::new();
        Inbound::Broken(broken.to_string())
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

#[cfg(test)]
mod tests {
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::transport::tcp::{HEADER_LEN, VERSION};

    fn framed(body: &[u8], version: u16) -> Vec<u8> {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend(version.to_be_bytes());
        out.extend([0; 6]);
        out.extend(body);
        out
    }

    fn frame_of(inbound: Option<Inbound>) -> Bytes {
        match inbound {
            Some(Inbound::Frame(frame)) => frame,
            _ => panic!("expected a frame"),
        }
    }

    #[tokio::test]
    async fn frames_are_reassembled_and_no_buffer_is_kept_between_them() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut reader = FrameReader::new(server, FrameCodec::new(64));
        let mut both = framed(b"abc", VERSION);
        both.extend(framed(b"de", VERSION));
        client.write_all(&both).await.unwrap();
        assert_eq!(frame_of(reader.next().await), &b"abc"[..]);
        assert_eq!(frame_of(reader.next().await), &b"de"[..]);
        assert_eq!(reader.partial.capacity(), 0, "nothing held between frames");

        let split = framed(b"fgh", VERSION);
        client.write_all(&split[..HEADER_LEN + 1]).await.unwrap();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut reader).poll_next(&mut cx).is_pending());
        assert_eq!(
            reader.partial.len(),
            HEADER_LEN + 1,
            "the partial frame is kept"
        );
        client.write_all(&split[HEADER_LEN + 1..]).await.unwrap();
        assert_eq!(frame_of(reader.next().await), &b"fgh"[..]);
        assert_eq!(reader.partial.capacity(), 0);

        // A frame cut short by the client leaving ends the stream.
        client
            .write_all(&framed(b"ijk", VERSION)[..5])
            .await
            .unwrap();
        drop(client);
        assert!(reader.next().await.is_none());
    }

    #[tokio::test]
    async fn a_header_that_cannot_be_followed_is_reported_once_then_ends_the_stream() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut reader = FrameReader::new(server, FrameCodec::new(64));
        client.write_all(&framed(b"abc", 9)).await.unwrap();
        match reader.next().await {
            Some(Inbound::Broken(why)) => assert!(why.starts_with("header.version"), "{why}"),
            _ => panic!("expected the broken stream reported"),
        }
        assert!(reader.next().await.is_none());
    }

    #[tokio::test]
    async fn written_frames_carry_their_header_and_the_buffer_goes_after_the_flush() {
        let (client, mut server) = tokio::io::duplex(1024);
        let mut writer = FrameWriter::new(client, FrameCodec::new(64));
        writer.feed(Bytes::from_static(b"abc")).await.unwrap();
        writer.feed(Bytes::from_static(b"de")).await.unwrap();
        assert!(writer.0.write_buffer().capacity() > 0);
        writer.flush().await.unwrap();
        assert_eq!(writer.0.write_buffer().capacity(), 0);
        let mut written = vec![0; 2 * HEADER_LEN + 5];
        server.read_exact(&mut written).await.unwrap();
        assert_eq!(&written[HEADER_LEN..HEADER_LEN + 3], b"abc");
        assert_eq!(&written[..4], &3u32.to_be_bytes());
        assert_eq!(&written[2 * HEADER_LEN + 3..], b"de");
    }
}
