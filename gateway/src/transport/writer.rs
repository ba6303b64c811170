//! A connection's writer, run beside its reader in the connection's task: queued frames
//! written in batches (one flush per burst), pushes kept in the unacked [`Window`] and resent
//! or given up, and the close.

use std::time::Duration;

use bytes::Bytes;
use futures::{Sink, SinkExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::{
    transport::frames,
    transport::window::{GiveUp, Out, Window},
};

/// Most frames written in one flush when a burst is queued.
const WRITE_BATCH: usize = 64;

/// Writes queued frames, several per flush when a burst is waiting, keeping pushes in the
/// `window` until acknowledged (resent once when their ack is late; the connection is
/// closed when that fails too or the window overflows). After `close`, writes what is
/// still queued (e.g. a final error frame) and closes the sink.
pub async fn write_frames<W>(
    mut sink: W,
    rx: flume::Receiver<Out>,
    mut window: Window,
    close: CancellationToken,
) where
    W: Sink<Bytes> + Unpin,
{
    let closing = loop {
        let due = window.due();
        let out = tokio::select! {
            out = rx.recv_async() => out.ok(),
            () = close.cancelled() => break true,
            () = sleep_until(due), if due.is_some() => {
                let written = match window.expire(Instant::now()) {
                    Ok(resend) => write_all(&mut sink, resend).await,
                    Err(why) => return give_up(sink, &close, why).await,
                };
                if written.is_err() {
                    return;
                }
                continue;
            }
        };
        let Some(out) = out else { break false };
        let mut batch = Vec::new();
        let mut next = Some(out);
        while let Some(out) = next.take() {
            match out {
                Out::Frame(frame) => batch.push(frame),
                Out::Push { last_seq, frame } => {
                    if let Err(why) = window.sent(last_seq, frame.clone(), Instant::now()) {
                        return give_up(sink, &close, why).await;
                    }
                    batch.push(frame);
                }
                Out::Acked(sync_seq) => window.acked(sync_seq),
            }
            if batch.len() < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if write_all(&mut sink, batch).await.is_err() {
            return;
        }
    };
    if closing {
        while let Ok(out) = rx.try_recv() {
            if let Out::Frame(frame) | Out::Push { frame, .. } = out
                && sink.feed(frame).await.is_err()
            {
                return;
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
}

/// Writes `frames` with one flush; `Err` when the connection is gone.
async fn write_all<W>(sink: &mut W, frames: Vec<Bytes>) -> Result<(), W::Error>
where
    W: Sink<Bytes> + Unpin,
{
    if frames.is_empty() {
        return Ok(());
    }
    for frame in frames {
        sink.feed(frame).await?;
    }
    sink.flush().await
}

/// Closes a connection whose client does not ack, telling it why: it reconnects and
/// pulls after its cursor.
async fn give_up<W>(mut sink: W, close: &CancellationToken, why: GiveUp)
where
    W: Sink<Bytes> + Unpin,
{
    let why = match why {
        GiveUp::Full(n) => {
            format!("ack: more than {n} pushes unacknowledged; pull after your cursor")
        }
        GiveUp::Unacked => {
            "ack: pushes unacknowledged after a resend; pull after your cursor".to_owned()
        }
    };
    tracing::info!(reason = %why, "closing a connection that does not ack");
    close.cancel();
    let fatal = frames::error(0, Code::DeadlineExceeded, why, true);
    if write_all(&mut sink, vec![fatal]).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
    }
}

async fn sleep_until(due: Option<Instant>) {
    if let Some(due) = due {
        tokio::time::sleep_until(due).await;
    }
}
