//! A connection's bounded queue of outgoing frames: many senders (pushes, answers, the
//! reader), one receiver (the writer). It holds no buffer while empty, and a wait
//! allocates nothing. flume, used before, kept its grown buffers and waiter lists and
//! allocated a hook per wait: about 560 B for every idle connection, against about 130 B
//! here.

use std::{
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
};

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::transport::window::Out;

/// Why a frame was not queued; the frame comes back.
#[derive(Debug)]
pub enum TrySendError {
    /// The queue holds its capacity.
    Full(Out),
    /// The connection's writer is gone.
    Disconnected(Out),
}

/// A queue of at most `capacity` frames.
pub fn bounded(capacity: usize) -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        frames: Mutex::new(VecDeque::new()),
        capacity: capacity.max(1),
        senders: AtomicUsize::new(1),
        receiver_gone: AtomicBool::new(false),
        writer: AtomicWaker::new(),
        room: Notify::new(),
        acked: AtomicI64::new(0),
    });
    (Sender(shared.clone()), Receiver(shared))
}

struct Shared {
    frames: Mutex<VecDeque<Out>>,
    capacity: usize,
    senders: AtomicUsize,
    receiver_gone: AtomicBool,
    /// The receiver, waiting for a frame or for the last sender to go.
    writer: AtomicWaker,
    /// Senders waiting for room.
    room: Notify,
    /// The client's cumulative ack. Not queued: an ack behind a queue of pushes would
    /// reach the writer's window only after them, and a full queue would drop it.
    acked: AtomicI64,
}

pub struct Sender(Arc<Shared>);

impl Sender {
    /// Queues `out` unless the queue is full or its receiver gone.
    pub fn try_send(&self, out: Out) -> Result<(), TrySendError> {
        let shared = &self.0;
        if shared.receiver_gone.load(Ordering::Acquire) {
            return Err(TrySendError::Disconnected(out));
        }
        let mut frames = shared.frames.lock();
        if frames.len() >= shared.capacity {
            return Err(TrySendError::Full(out));
        }
        frames.push_back(out);
        drop(frames);
        shared.writer.wake();
        Ok(())
    }

    /// Records the client's cumulative ack `sync_seq` for the writer (never lowering it).
    pub fn ack(&self, sync_seq: i64) {
        self.0.acked.fetch_max(sync_seq, Ordering::Relaxed);
    }

    /// Queues `out`, waiting for room; `Err` (with the frame) once the receiver is gone.
    pub async fn send(&self, mut out: Out) -> Result<(), Out> {
        loop {
            let room = self.0.room.notified();
            tokio::pin!(room);
            // Registered before the attempt: room made after it still wakes this wait.
            room.as_mut().enable();
            match self.try_send(out) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(back)) => return Err(back),
                Err(TrySendError::Full(back)) => out = back,
            }
            room.await;
        }
    }
}

impl Clone for Sender {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Self(self.0.clone())
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.writer.wake();
        }
    }
}

pub struct Receiver(Arc<Shared>);

impl Receiver {
    /// The next frame; `None` once the queue is empty and every sender gone.
    pub async fn recv(&self) -> Option<Out> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<Out>> {
        if let Some(out) = self.try_recv() {
            return Poll::Ready(Some(out));
        }
        self.0.writer.register(cx.waker());
        // Again after registering: a frame queued in between would not wake this wait.
        if let Some(out) = self.try_recv() {
            return Poll::Ready(Some(out));
        }
        if self.0.senders.load(Ordering::Acquire) == 0 {
            return Poll::Ready(None);
        }
        let mut frames = self.0.frames.lock();
        if frames.is_empty() && frames.capacity() > 0 {
            // Waiting: let go of the buffer a burst grew.
            *frames = VecDeque::new();
        }
        Poll::Pending
    }

    /// The client's latest cumulative ack.
    pub fn acked(&self) -> i64 {
        self.0.acked.load(Ordering::Relaxed)
    }

    /// The next frame if one is queued.
    pub fn try_recv(&self) -> Option<Out> {
        let mut frames = self.0.frames.lock();
        let was_full = frames.len() >= self.0.capacity;
        let out = frames.pop_front();
        drop(frames);
        if was_full {
            self.0.room.notify_waiters();
        }
        out
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.0.receiver_gone.store(true, Ordering::Release);
        self.0.frames.lock().clear();
        self.0.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn frame(n: u8) -> Out {
        Out::Frame(Bytes::from(vec![n]))
    }

    fn byte(out: Option<Out>) -> Option<u8> {
        match out? {
            Out::Frame(frame) => Some(frame[0]),
            _ => None,
        }
    }

    #[test]
    fn a_full_queue_refuses_and_a_gone_receiver_disconnects() {
        let (tx, rx) = bounded(2);
        tx.try_send(frame(1)).unwrap();
        tx.try_send(frame(2)).unwrap();
        assert!(matches!(tx.try_send(frame(3)), Err(TrySendError::Full(_))));
        assert_eq!(byte(rx.try_recv()), Some(1));
        tx.try_send(frame(3)).unwrap();
        drop(rx);
        assert!(matches!(
            tx.try_send(frame(4)),
            Err(TrySendError::Disconnected(_))
        ));
    }

    #[tokio::test]
    async fn frames_come_out_in_order_and_the_end_after_the_last_sender() {
        let (tx, rx) = bounded(4);
        let writer = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(n) = byte(rx.recv().await) {
                got.push(n);
            }
            got
        });
        let second = tx.clone();
        for n in 0..100 {
            // Waits for room: the queue holds 4.
            second.send(frame(n)).await.unwrap();
        }
        drop((tx, second));
        assert_eq!(writer.await.unwrap(), (0..100).collect::<Vec<u8>>());
    }

    #[tokio::test]
    async fn a_waiting_sender_gets_its_frame_back_when_the_receiver_goes() {
        let (tx, rx) = bounded(1);
        tx.try_send(frame(1)).unwrap();
        let waiting =
            tokio::spawn(async move { tx.send(frame(2)).await.map_err(|f| byte(Some(f))) });
        tokio::task::yield_now().await;
        drop(rx);
        assert_eq!(waiting.await.unwrap(), Err(Some(2)));
    }

    #[test]
    fn an_emptied_queue_holds_no_buffer_while_its_receiver_waits() {
        let (tx, rx) = bounded(8);
        for n in 0..8 {
            tx.try_send(frame(n)).unwrap();
        }
        while rx.try_recv().is_some() {}
        let waker = futures::task::noop_waker();
        assert!(rx.poll_recv(&mut Context::from_waker(&waker)).is_pending());
        assert_eq!(rx.0.frames.lock().capacity(), 0);
    }
}
