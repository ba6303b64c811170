//! What a connection's writer is handed, and the window of pushes it has written that the
//! client has not acknowledged yet.
//!
//! A push stays in the window until a cumulative ack covers its last `sync_seq`. When the
//! oldest has waited `ack_timeout`, every unacknowledged push is written once more; when a
//! resent push times out too, or the window is full, the connection is given up: the
//! device reconnects and pulls after its cursor, so nothing is lost either way.

use std::{collections::VecDeque, time::Duration};

use bytes::Bytes;
use tokio::time::Instant;

/// One item of a connection's send queue.
#[derive(Debug)]
pub enum Out {
    /// A reply, an error or a live hint: written once, never resent.
    Frame(Bytes),
    /// Inbox entries up to `last_seq`: kept until acknowledged.
    Push { last_seq: i64, frame: Bytes },
}

/// Why a connection's pushes are given up.
#[derive(Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// More than the window's size of pushes await an ack.
    Full(usize),
    /// A resent push went unacknowledged for another timeout.
    Unacked,
}

struct Pending {
    last_seq: i64,
    frame: Bytes,
    due: Instant,
    resent: bool,
}

pub struct Window {
    pending: VecDeque<Pending>,
    size: usize,
    timeout: Duration,
    /// The client's cumulative ack: it has every entry up to this `sync_seq`.
    acked: i64,
}

impl Window {
    /// A window of at most `size` unacknowledged pushes, each given `timeout` for its ack.
    pub fn new(size: usize, timeout: Duration) -> Self {
        Self {
            pending: VecDeque::new(),
            size,
            timeout,
            acked: 0,
        }
    }

    /// Records a push just written.
    pub fn sent(&mut self, last_seq: i64, frame: Bytes, now: Instant) -> Result<(), GiveUp> {
        if last_seq <= self.acked {
            return Ok(()); // the client has these entries already (pulled them)
        }
        if self.pending.len() >= self.size {
            return Err(GiveUp::Full(self.size));
        }
        self.pending.push_back(Pending {
            last_seq,
            frame,
            due: now + self.timeout,
            resent: false,
        });
        Ok(())
    }

    /// Forgets every push the cumulative ack `sync_seq` covers (in any order: pushes of
    /// concurrent deliveries may arrive out of seq order). An ack no later than the last
    /// one costs nothing.
    pub fn acked(&mut self, sync_seq: i64) {
        if sync_seq <= self.acked {
            return;
        }
        self.acked = sync_seq;
        self.pending.retain(|p| p.last_seq > sync_seq);
    }

    /// When the oldest push's ack is due; `None` with nothing pending. Dues only grow along
    /// the queue: a resend moves every pending push to the same later due.
    pub fn due(&self) -> Option<Instant> {
        self.pending.front().map(|p| p.due)
    }

    /// At the due time: the frames to write again, or why the connection is given up.
    pub fn expire(&mut self, now: Instant) -> Result<Vec<Bytes>, GiveUp> {
        match self.pending.front() {
            None => return Ok(Vec::new()),
            Some(oldest) if oldest.due > now => return Ok(Vec::new()),
            Some(oldest) if oldest.resent => return Err(GiveUp::Unacked),
            Some(_) => {}
        }
        let due = now + self.timeout;
        Ok(self
            .pending
            .iter_mut()
            .map(|p| {
                p.due = due;
                p.resent = true;
                p.frame.clone()
            })
            .collect())
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(10);

    fn frame(n: u8) -> Bytes {
        Bytes::from(vec![n])
    }

    #[test]
    fn an_ack_forgets_the_pushes_it_covers_even_out_of_order() {
        let now = Instant::now();
        let mut window = Window::new(8, T);
        for seq in [3, 1, 2, 5] {
            window.sent(seq, frame(seq as u8), now).unwrap();
        }
        window.acked(3);
        assert_eq!(window.len(), 1);
        window.acked(5);
        assert!(window.is_empty());
        assert_eq!(window.due(), None);
    }

    #[test]
    fn a_push_the_client_acked_already_is_not_kept() {
        let now = Instant::now();
        let mut window = Window::new(8, T);
        window.sent(4, frame(4), now).unwrap();
        window.acked(4);
        window.acked(2); // an older ack changes nothing
        window.sent(3, frame(3), now).unwrap(); // pulled before it was pushed
        assert!(window.is_empty());
        window.sent(5, frame(5), now).unwrap();
        assert_eq!(window.len(), 1);
    }

    #[test]
    fn unacked_pushes_are_resent_once_then_given_up() {
        let now = Instant::now();
        let mut window = Window::new(8, T);
        window.sent(1, frame(1), now).unwrap();
        window.sent(2, frame(2), now + T / 2).unwrap();
        assert_eq!(window.expire(now + T / 2), Ok(vec![]), "not due yet");
        assert_eq!(window.expire(now + T), Ok(vec![frame(1), frame(2)]));
        assert_eq!(window.due(), Some(now + T + T));
        window.acked(1);
        assert_eq!(window.expire(now + T + T), Err(GiveUp::Unacked));
    }

    #[test]
    fn an_acked_resend_keeps_the_connection() {
        let now = Instant::now();
        let mut window = Window::new(8, T);
        window.sent(1, frame(1), now).unwrap();
        assert_eq!(window.expire(now + T), Ok(vec![frame(1)]));
        window.acked(1);
        window.sent(2, frame(2), now + T + T).unwrap();
        assert_eq!(window.expire(now + T + T), Ok(vec![]));
    }

    #[test]
    fn a_full_window_gives_up() {
        let now = Instant::now();
        let mut window = Window::new(2, T);
        window.sent(1, frame(1), now).unwrap();
        window.sent(2, frame(2), now).unwrap();
        assert_eq!(window.sent(3, frame(3), now), Err(GiveUp::Full(2)));
        window.acked(2);
        assert_eq!(window.sent(3, frame(3), now), Ok(()));
    }
}
