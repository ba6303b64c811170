//! A socket read through a buffer on the stack: what one read brings beyond what the caller
//! asked for is kept, sized to it, until it is asked for, then let go. The WebSocket layer
//! (tungstenite) runs without a read buffer of its own and asks for a frame's header, then
//! its payload; through this it still takes the socket's bytes in one system call for
//! several frames, and an idle connection holds no buffer. (With tungstenite's own buffer,
//! every idle WebSocket kept about a kilobyte.)

use std::{
    io::IoSlice,
    pin::Pin,
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::READ_CHUNK;

pub struct SpareReader<S> {
    io: S,
    /// Read from the socket, not yet asked for; empty, without an allocation, when drained.
    spare: Vec<u8>,
    /// How much of `spare` has been handed out.
    taken: usize,
}

impl<S> SpareReader<S> {
    pub fn new(io: S) -> Self {
        Self {
            io,
            spare: Vec::new(),
            taken: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SpareReader<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.taken < this.spare.len() {
            let n = buf.remaining().min(this.spare.len() - this.taken);
            buf.put_slice(&this.spare[this.taken..this.taken + n]);
            this.taken += n;
            if this.taken == this.spare.len() {
                this.spare = Vec::new();
                this.taken = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() >= READ_CHUNK {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let mut chunk = [0u8; READ_CHUNK];
        let mut read = ReadBuf::new(&mut chunk);
        ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
        let (now, later) = read
            .filled()
            .split_at(buf.remaining().min(read.filled().len()));
        buf.put_slice(now);
        this.spare = later.to_vec();
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SpareReader<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn small_reads_share_one_socket_read_and_nothing_is_kept_once_taken() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut reader = SpareReader::new(server);
        let sent: Vec<u8> = (0..300u16).map(|i| i as u8).collect();
        client.write_all(&sent).await.unwrap();

        let mut header = [0u8; 14];
        reader.read_exact(&mut header).await.unwrap();
        assert_eq!(header[..], sent[..14]);
        assert_eq!(reader.spare.len(), 286, "one read took all 300 bytes");
        let mut rest = vec![0u8; 286];
        reader.read_exact(&mut rest).await.unwrap();
        assert_eq!(rest[..], sent[14..]);
        assert_eq!(reader.spare.capacity(), 0, "drained: no buffer kept");

        client.write_all(&sent[..5]).await.unwrap();
        drop(client);
        let mut tail = Vec::new();
        reader.read_to_end(&mut tail).await.unwrap();
        assert_eq!(tail[..], sent[..5]);
    }
}
