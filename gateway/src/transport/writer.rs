//! A connection's writer, run beside its reader in the connection's task: queued frames
//! written in batches (one flush per burst), pushes kept in the unacked [`Window`] and resent
//! or given up, and the close.

use std::{pin::Pin, time::Duration};

use bytes::Bytes;
use futures::{Sink, SinkExt};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::{
    transport::frames,
    transport::queue,
    transport::window::{GiveUp, Out, Window},
};

/// Most frames written in one flush when a burst is queued.
const WRITE_BATCH: usize = 64;

/// Writes queued frames, several per flush when a burst is waiting, keeping pushes in the
/// `window` until acknowledged (resent once when their ack is late; the connection is
/// closed when that fails too or the window overflows). After `close`, writes what is
/// still queued (e.g. a final error frame) and closes the sink.
///
/// The connection's task is sized for the largest state of this future, idle clients
/// included: the rare states (giving up, closing) are boxed.
pub fn write_frames<W>(
    mut sink: W,
    rx: queue::Receiver,
    mut window: Window,
    close: CancellationToken,
) -> impl Future<Output = ()>
where
    W: Sink<Bytes> + Unpin,
{
    // Only while pushes await their ack: idle, a connection holds no timer.
    let mut timer = None;
    // A block, not an `async fn`: an async fn's arguments would be stored twice in its
    // state (as arguments, then as locals).
    async move {
        let stop = loop {
            if let Err(stop) = step(&mut sink, &rx, &mut window, &close, &mut timer).await {
                break stop;
            }
        };
        match stop {
            Stop::GiveUp(why) => Box::pin(give_up(sink, &close, why)).await,
            Stop::Closed => Box::pin(finish(sink, Some(rx))).await,
            Stop::Gone => Box::pin(finish(sink, None)).await,
            Stop::Broken => {}
        }
    }
}

/// Why the writer stops writing.
enum Stop {
    /// The client does not ack its pushes.
    GiveUp(GiveUp),
    /// The connection is closing: what is queued still goes out.
    Closed,
    /// Every sender is gone.
    Gone,
    /// The connection is gone.
    Broken,
}

/// Waits for something to write and writes it.
async fn step<W>(
    sink: &mut W,
    rx: &queue::Receiver,
    window: &mut Window,
    close: &CancellationToken,
    timer: &mut Option<Pin<Box<Sleep>>>,
) -> Result<(), Stop>
where
    W: Sink<Bytes> + Unpin,
{
    match (window.due(), timer.as_mut()) {
        (None, _) => *timer = None,
        (Some(due), Some(timer)) => {
            if timer.deadline() != due {
                timer.as_mut().reset(due);
            }
        }
        (Some(due), None) => *timer = Some(Box::pin(tokio::time::sleep_until(due))),
    }
    let batch = match next(rx, close, timer.as_mut()).await {
        Next::Out(out) => burst(out, rx, window).map_err(Stop::GiveUp)?,
        Next::Due => {
            // A fired timer stays fired: the next wait, if any, takes a new one.
            *timer = None;
            window.acked(rx.acked());
            window.expire(Instant::now()).map_err(Stop::GiveUp)?
        }
        Next::Closed => return Err(Stop::Closed),
        Next::Gone => return Err(Stop::Gone),
    };
    write_all(sink, batch).await.map_err(|_| Stop::Broken)
}

/// What the writer wakes for.
enum Next {
    Out(Out),
    /// The oldest unacked push's ack is late.
    Due,
    /// The connection is closing.
    Closed,
    /// Every sender is gone.
    Gone,
}

async fn next(
    rx: &queue::Receiver,
    close: &CancellationToken,
    timer: Option<&mut Pin<Box<Sleep>>>,
) -> Next {
    let late = async {
        match timer {
            Some(timer) => timer.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        out = rx.recv() => out.map_or(Next::Gone, Next::Out),
        () = close.cancelled() => Next::Closed,
        () = late => Next::Due,
    }
}

/// The frames to write for `first` and what queued behind it (up to [`WRITE_BATCH`]
/// frames), pushes entered in the window after the client's latest ack is taken out.
fn burst(first: Out, rx: &queue::Receiver, window: &mut Window) -> Result<Vec<Bytes>, GiveUp> {
    let mut batch = Vec::new();
    let mut next = Some(first);
    while let Some(out) = next.take() {
        match out {
            Out::Frame(frame) => batch.push(frame),
            Out::Push { last_seq, frame } => {
                window.acked(rx.acked());
                window.sent(last_seq, frame.clone(), Instant::now())?;
                batch.push(frame);
            }
        }
        if batch.len() < WRITE_BATCH {
            next = rx.try_recv();
        }
    }
    Ok(batch)
}

/// Writes what is still queued when the connection closes (`queued`), then closes the sink.
async fn finish<W>(mut sink: W, queued: Option<queue::Receiver>)
where
    W: Sink<Bytes> + Unpin,
{
    for out in queued
        .iter()
        .flat_map(|rx| std::iter::from_fn(|| rx.try_recv()))
    {
        if let Out::Frame(frame) | Out::Push { frame, .. } = out
            && sink.feed(frame).await.is_err()
        {
            return;
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

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn push(seq: u8) -> Out {
        Out::Push {
            last_seq: seq.into(),
            frame: Bytes::from(vec![seq]),
        }
    }

    #[tokio::test]
    async fn an_ack_reaches_the_window_ahead_of_the_pushes_queued_before_it() {
        let (tx, rx) = queue::bounded(16);
        let (sink, mut written) = futures::channel::mpsc::unbounded::<Bytes>();
        let window = Window::new(4, Duration::from_secs(60));
        let writer = tokio::spawn(write_frames(sink, rx, window, CancellationToken::new()));
        for seq in 1..=4 {
            tx.try_send(push(seq)).unwrap();
        }
        for seq in 1..=4 {
            assert_eq!(written.next().await.unwrap()[..], [seq]);
        }
        // The window is full. The client acks all four while four more pushes wait in
        // the queue: the writer takes the ack first, and the pushes fit.
        for seq in 5..=8 {
            tx.try_send(push(seq)).unwrap();
        }
        tx.ack(4);
        for seq in 5..=8 {
            assert_eq!(written.next().await.unwrap()[..], [seq]);
        }
        drop(tx);
        writer.await.unwrap();
        assert_eq!(
            written.next().await,
            None,
            "closed with nothing more written"
        );
    }
}
