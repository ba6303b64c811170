//! Live delivery off the append's path. [`Queued`] takes each call's deliveries into a
//! bounded queue and returns; one task hands them on in order, and whatever queued while
//! its last call was out goes in its next call, merged. So an append (and the relay behind
//! it) waits for its entries to be stored, not for notify-svc and the gateways to push
//! them, and under load many appends' pushes share one call.
//!
//! Deliveries stay best effort, as before: a failed call is logged and the devices catch
//! up by pulling. A caller waits only while the queue is full, so a slow notify-svc holds
//! appends back by at most [`Queued::spawn`]'s bound instead of piling up memory, or when
//! it asks to ([`Notifier::deliver_and_wait`]: the append of a big fanout, see
//! `Inboxes::notify`).

use std::{collections::HashMap, sync::Arc};

use bytes::Bytes;
use imesh_kit::metrics::Registry;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, oneshot};

use super::{Entry, Notifier};

/// One call's deliveries, waiting in the queue; a user delivery's caller may wait for it.
enum Live {
    Users(Vec<(i64, Vec<Entry>)>, Option<oneshot::Sender<()>>),
    Groups(Vec<(i64, Bytes)>),
}

/// A [`Notifier`] that queues and returns; see the module.
pub struct Queued {
    queue: mpsc::Sender<Live>,
    /// Calls' deliveries waiting in the queue, as of the last call to queue or take one.
    waiting: Gauge,
}

impl Queued {
    /// Hands deliveries on to `notifier` from a task of its own, with at most `bound`
    /// calls' deliveries waiting for it. The task ends once the last `Queued` is dropped
    /// and the queue is empty.
    pub fn spawn(notifier: Arc<dyn Notifier>, bound: usize) -> Self {
        let (queue, queued) = mpsc::channel(bound);
        let waiting = Gauge::default();
        tokio::spawn(hand_on(queued, notifier, waiting.clone()));
        Self { queue, waiting }
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "live_deliveries_waiting",
            "Appends' live deliveries queued for notify-svc (appends wait past the bound)",
            self.waiting.clone(),
        );
    }

    async fn queue(&self, live: Live) -> anyhow::Result<()> {
        (self.queue.send(live).await).map_err(|_| anyhow::anyhow!("live delivery has stopped"))?;
        let waiting = self.queue.max_capacity() - self.queue.capacity();
        self.waiting.set(waiting as i64);
        Ok(())
    }
}

#[async_trait::async_trait]
impl Notifier for Queued {
    async fn deliver(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        self.queue(Live::Users(deliveries, None)).await
    }

    async fn deliver_and_wait(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
        let (done, pushed) = oneshot::channel();
        self.queue(Live::Users(deliveries, Some(done))).await?;
        // The task answers after the call that carried them, whatever its outcome.
        (pushed.await).map_err(|_| anyhow::anyhow!("live delivery has stopped"))
    }

    async fn deliver_to_groups(&self, events: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
        self.queue(Live::Groups(events)).await
    }
}

/// Calls `notifier` with what `waiting` holds, in order: each call takes everything of one
/// kind queued in a row.
async fn hand_on(mut waiting: mpsc::Receiver<Live>, notifier: Arc<dyn Notifier>, gauge: Gauge) {
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(live) => live,
            None => match waiting.recv().await {
                Some(live) => live,
                None => return,
            },
        };
        let delivered = match first {
            Live::Users(deliveries, done) => {
                let mut merged = Merged::default();
                merged.add(deliveries, done);
                next = gather(&mut waiting, &gauge, |live| match live {
                    Live::Users(more, done) => {
                        merged.add(more, done);
                        None
                    }
                    other => Some(other),
                });
                let delivered = notifier.deliver(merged.users).await;
                for done in merged.waiting {
                    let _ = done.send(());
                }
                delivered
            }
            Live::Groups(mut events) => {
                next = gather(&mut waiting, &gauge, |live| match live {
                    Live::Groups(more) => {
                        events.extend(more);
                        None
                    }
                    other => Some(other),
                });
                notifier.deliver_to_groups(events).await
            }
        };
        if let Err(e) = delivered {
            tracing::warn!(error = %format!("{e:#}"), "live delivery failed; devices will catch up by pulling");
        }
    }
}

/// Takes what queued behind a call while `add` takes it in (a delivery of the same kind)
/// and counts what is left waiting; the first delivery `add` hands back goes in the call
/// after.
fn gather(
    waiting: &mut mpsc::Receiver<Live>,
    gauge: &Gauge,
    mut add: impl FnMut(Live) -> Option<Live>,
) -> Option<Live> {
    let mut next = None;
    while let Ok(live) = waiting.try_recv() {
        next = add(live);
        if next.is_some() {
            break;
        }
    }
    gauge.set(waiting.len() as i64 + i64::from(next.is_some()));
    next
}

/// Deliveries of several calls as one: each user once, with their entries in the order
/// the calls queued them; and the callers waiting for them.
#[derive(Default)]
struct Merged {
    users: Vec<(i64, Vec<Entry>)>,
    at: HashMap<i64, usize>,
    waiting: Vec<oneshot::Sender<()>>,
}

impl Merged {
    fn add(&mut self, deliveries: Vec<(i64, Vec<Entry>)>, done: Option<oneshot::Sender<()>>) {
        self.waiting.extend(done);
        for (user, entries) in deliveries {
            match self.at.get(&user) {
                Some(&i) => self.users[i].1.extend(entries),
                None => {
                    self.at.insert(user, self.users.len());
                    self.users.push((user, entries));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use parking_lot::Mutex;
    use tokio::sync::Semaphore;

    use super::*;
    use imesh_kit::testing::until;

    /// Records each call as it starts, then waits for a permit before it returns.
    struct Gated {
        calls: Mutex<Vec<Call>>,
        permits: Semaphore,
    }

    impl Default for Gated {
        fn default() -> Self {
            Self {
                calls: Mutex::default(),
                permits: Semaphore::new(0),
            }
        }
    }

    #[derive(Debug, PartialEq)]
    enum Call {
        Users(Vec<(i64, Vec<i64>)>),
        Groups(Vec<i64>),
    }

    #[async_trait::async_trait]
    impl Notifier for Gated {
        async fn deliver(&self, deliveries: Vec<(i64, Vec<Entry>)>) -> anyhow::Result<()> {
            let seqs = deliveries
                .into_iter()
                .map(|(user, entries)| (user, entries.iter().map(|e| e.sync_seq).collect()))
                .collect();
            self.calls.lock().push(Call::Users(seqs));
            self.permits.acquire().await?.forget();
            Ok(())
        }

        async fn deliver_to_groups(&self, events: Vec<(i64, Bytes)>) -> anyhow::Result<()> {
            let groups = events.into_iter().map(|(group, _)| group).collect();
            self.calls.lock().push(Call::Groups(groups));
            self.permits.acquire().await?.forget();
            Ok(())
        }
    }

    fn entries(user: i64, seqs: &[i64]) -> Vec<(i64, Vec<Entry>)> {
        let entries = seqs.iter().map(|&sync_seq| Entry {
            sync_seq,
            payload: Bytes::new(),
        });
        vec![(user, entries.collect())]
    }

    #[tokio::test]
    async fn deliveries_return_at_once_and_what_queued_behind_a_call_goes_in_the_next_in_order() {
        let gated = Arc::new(Gated::default());
        let queued = Queued::spawn(gated.clone(), 16);
        queued.deliver(entries(1, &[1])).await.unwrap();
        until("the first call starts", || gated.calls.lock().len() == 1).await;
        // While the first call is out, these return without waiting for it.
        queued.deliver(entries(1, &[2, 3])).await.unwrap();
        queued.deliver(entries(2, &[1])).await.unwrap();
        queued.deliver(entries(1, &[4])).await.unwrap();
        queued
            .deliver_to_groups(vec![(7, Bytes::new())])
            .await
            .unwrap();
        queued
            .deliver_to_groups(vec![(8, Bytes::new())])
            .await
            .unwrap();
        queued.deliver(entries(2, &[2])).await.unwrap();
        gated.permits.add_permits(4);
        until("every call is made", || gated.calls.lock().len() == 4).await;
        assert_eq!(
            *gated.calls.lock(),
            [
                Call::Users(vec![(1, vec![1])]),
                Call::Users(vec![(1, vec![2, 3, 4]), (2, vec![1])]),
                Call::Groups(vec![7, 8]),
                Call::Users(vec![(2, vec![2])]),
            ]
        );
    }

    #[tokio::test]
    async fn a_full_queue_holds_the_next_delivery_back_until_the_notifier_catches_up() {
        let gated = Arc::new(Gated::default());
        let queued = Queued::spawn(gated.clone(), 1);
        queued.deliver(entries(1, &[1])).await.unwrap();
        until("the first call starts", || gated.calls.lock().len() == 1).await;
        queued.deliver(entries(1, &[2])).await.unwrap();
        assert_eq!(queued.waiting.get(), 1, "one call's deliveries wait");
        let mut third = Box::pin(queued.deliver(entries(1, &[3])));
        assert!(
            (&mut third).now_or_never().is_none(),
            "a delivery past the queue's bound waits"
        );
        gated.permits.add_permits(1);
        third.await.unwrap();
        gated.permits.add_permits(2);
        until("every entry is delivered", || {
            let calls = gated.calls.lock();
            let seqs: Vec<i64> = (calls.iter())
                .flat_map(|c| match c {
                    Call::Users(users) => users.iter().flat_map(|(_, s)| s.clone()).collect(),
                    Call::Groups(_) => Vec::new(),
                })
                .collect();
            seqs == [1, 2, 3]
        })
        .await;
    }

    #[tokio::test]
    async fn a_waited_delivery_returns_after_its_call_and_keeps_its_place_in_line() {
        let gated = Arc::new(Gated::default());
        let queued = Arc::new(Queued::spawn(gated.clone(), 16));
        queued.deliver(entries(1, &[1])).await.unwrap();
        until("the first call starts", || gated.calls.lock().len() == 1).await;
        let waited = tokio::spawn({
            let queued = queued.clone();
            async move { queued.deliver_and_wait(entries(1, &[2])).await }
        });
        until("the waited delivery is queued", || {
            queued.waiting.get() == 1
        })
        .await;
        queued.deliver(entries(1, &[3])).await.unwrap();
        gated.permits.add_permits(1);
        until("the second call starts", || gated.calls.lock().len() == 2).await;
        assert!(!waited.is_finished(), "it waits while its call is out");
        gated.permits.add_permits(1);
        waited.await.unwrap().unwrap();
        assert_eq!(
            *gated.calls.lock(),
            [
                Call::Users(vec![(1, vec![1])]),
                Call::Users(vec![(1, vec![2, 3])]),
            ]
        );
    }
}
