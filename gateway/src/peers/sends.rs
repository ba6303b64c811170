//! Client sends, batched on their way to message-svc.
//!
//! A send frame is queued at once, in the order its connection read it, on one queue. One
//! task takes sends off it in batches (up to `send_batch_max`) and keeps up to
//! `send_batches_in_flight` `SendBatch` calls out at once:
//! - a batch goes out at once when none is out, so a lone send never waits;
//! - while one is out, the next waits for it unless [`BATCH_WORTH_SHARING`] of a
//!   batch's room is ready: light load rides in few, fuller calls, heavy load in several
//!   large ones at once;
//! - a sender with a send in a batch that is out sends nothing more until its answer,
//!   and its queued sends keep their order, so message-svc sees a device's sends in the
//!   order sent and gives them seqs in that order.
//!
//! With several message-svc replicas, each batch is split by the replica owning each
//! send's conversation ([`Keyed`], rendezvous hashing over the replicas' addresses) and the
//! shares go out together: a conversation's sends always reach one replica, whose single
//! writer and outbox relay keep them in seq order all the way to the recipients.
//!
//! Admission is bounded twice, each bound answered at once with `RESOURCE_EXHAUSTED` and a
//! wait (never by waiting): a connection may have `sends_in_flight` sends unanswered, and
//! the queue holds at most `send_backlog` sends. A send refused with a retryable status
//! holds its conversation on its connection until it comes again ([`crate::holds`]).

use std::{
    collections::{HashSet, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::{FutureExt as _, StreamExt as _};
use imesh_kit::grpc::{self, Keyed, Replica};
use imesh_kit::identity::{Actor, Caller};
use imesh_protos::{
    gateway::server_frame::Body,
    message::{
        BatchedSend, SendBatchRequest, SendOutcome, SendRequest,
        message_service_client::MessageServiceClient, send_request::To,
    },
};
use prometheus_client::{metrics::counter::Counter, registry::Registry};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};
use tracing::Instrument as _;

use crate::{
    holds::{HoldLimits, Holds},
    transport::frames,
    transport::queue::{self, TrySendError},
    transport::window::Out,
};

/// How the gateway batches sends.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most `SendBatch` calls out at once.
    pub batches_in_flight: usize,
    pub batch_max: usize,
    pub backlog: usize,
    pub in_flight: usize,
    /// How long one batch may take before its sends are answered UNAVAILABLE.
    pub timeout: Duration,
    /// How long a refused send's hold outlasts the wait it names (or the last resend).
    pub hold: Duration,
}

impl Limits {
    fn holds(&self) -> HoldLimits {
        HoldLimits {
            grace: self.hold,
            max: self.in_flight.max(1),
        }
    }
}

/// Where a connection's answers go, and how many of its sends are unanswered.
pub struct Outlet {
    frames: queue::Sender,
    close: CancellationToken,
    in_flight: AtomicUsize,
    holds: Holds,
}

impl Outlet {
    pub fn new(frames: queue::Sender, close: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            frames,
            close,
            in_flight: AtomicUsize::new(0),
            holds: Holds::default(),
        })
    }

    /// Queues an answer; a connection too far behind to take it is closed (it resyncs).
    fn answer(&self, frame: Bytes) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Err(TrySendError::Full(_)) = self.frames.try_send(Out::Frame(frame)) {
            self.close.cancel();
        }
    }
}

/// One queued send.
#[derive(Clone)]
struct Queued {
    sender: i64,
    request_id: u64,
    request: SendRequest,
    /// Its place in its connection's order of sends ([`Holds::admit`]).
    place: u64,
    outlet: Arc<Outlet>,
    /// The client request's span (none unless traces are exported).
    span: tracing::Span,
}

impl Queued {
    /// A key of the send's conversation: a direct one's two users (either way round), or
    /// its group.
    fn conversation(&self) -> u64 {
        match self.request.to {
            Some(To::UserId(peer)) => grpc::direct_key(self.sender, peer),
            Some(To::GroupId(group)) => grpc::group_key(group),
            // Refused by message-svc whichever replica gets it.
            None => grpc::direct_key(self.sender, self.sender),
        }
    }
}

pub struct Sends {
    queue: flume::Sender<Queued>,
    /// The last batch's round trip, in µs: the base of the wait a refusal names.
    round_trip_us: Arc<AtomicU64>,
    limits: Limits,
    refused: Counter,
    batches: Counter,
}

impl Sends {
    /// Starts the batching task on the current runtime; it stops when `self` is dropped.
    pub fn spawn(replicas: Keyed, caller: Caller, limits: Limits) -> Self {
        let batches = Counter::default();
        let (queue, waiting) = flume::bounded(limits.backlog.max(1));
        let round_trip_us = Arc::new(AtomicU64::new(0));
        let carrier = Carrier {
            replicas,
            caller,
            timeout: limits.timeout,
            holds: limits.holds(),
            round_trip_us: round_trip_us.clone(),
            batches: batches.clone(),
        };
        tokio::spawn(dispatch(carrier, waiting, limits));
        Self {
            queue,
            round_trip_us,
            limits,
            refused: Counter::default(),
            batches,
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "sends_refused",
            "Client sends refused at once because a bound was reached",
            self.refused.clone(),
        );
        registry.register(
            "send_batches",
            "SendBatch calls to message-svc",
            self.batches.clone(),
        );
    }

    /// Queues `sender`'s send; the answer reaches `outlet` later. Returns the error frame
    /// to write now when a bound refuses it.
    pub fn offer(
        &self,
        (sender, request_id, request): (i64, u64, SendRequest),
        outlet: &Arc<Outlet>,
        span: tracing::Span,
    ) -> Option<Bytes> {
        let holds = self.limits.holds();
        let place = match outlet
            .holds
            .admit(&request.to, &request.client_msg_id, holds)
        {
            Ok(place) => place,
            Err(first) => {
                self.refused.inc();
                let wait = held_wait(&self.round_trip_us, holds);
                return Some(refused(request_id, held_back(&first), wait));
            }
        };
        let max = self.limits.in_flight;
        if outlet.in_flight.fetch_add(1, Ordering::AcqRel) >= max {
            outlet.in_flight.fetch_sub(1, Ordering::AcqRel);
            let why =
                format!("send: {max} sends in flight on this connection; wait for their acks");
            let refusal = (request_id, why, self.wait(1));
            return Some(self.refuse_holding(outlet, (&request, place), refusal));
        }
        let queued = Queued {
            sender,
            request_id,
            request,
            place,
            outlet: outlet.clone(),
            span,
        };
        match self.queue.try_send(queued) {
            Ok(()) => None,
            Err(full) => {
                let request = full.into_inner().request;
                outlet.in_flight.fetch_sub(1, Ordering::AcqRel);
                let batches_ahead = self.queue.len() / self.limits.batch_max + 1;
                let why = "send: the gateway is at capacity; retry after the wait".to_owned();
                let refusal = (request_id, why, self.wait(batches_ahead));
                Some(self.refuse_holding(outlet, (&request, place), refusal))
            }
        }
    }

    /// Refuses an admitted send (a bound): its conversation waits for it to come again.
    fn refuse_holding(
        &self,
        outlet: &Outlet,
        (request, place): (&SendRequest, u64),
        (request_id, why, wait): (u64, String, Duration),
    ) -> Bytes {
        let send = (&request.to, request.client_msg_id.as_str(), place);
        outlet.holds.refused(send, wait, self.limits.holds());
        self.refused.inc();
        refused(request_id, why, wait)
    }

    /// How long `batches` batches take, at least 5 ms.
    fn wait(&self, batches: usize) -> Duration {
        batches_wait(&self.round_trip_us, batches)
    }

    /// A send refused before it was offered (the connection's frame limit): it holds its
    /// conversation as a refused offer does.
    pub fn throttled(&self, request: &SendRequest, outlet: &Outlet, wait: Duration) {
        let holds = self.limits.holds();
        let (to, id) = (&request.to, request.client_msg_id.as_str());
        if let Ok(place) = outlet.holds.admit(to, id, holds) {
            outlet.holds.refused((to, id, place), wait, holds);
        }
    }
}

/// How long `batches` batches take at the last batch's round trip, at least 5 ms.
fn batches_wait(round_trip_us: &AtomicU64, batches: usize) -> Duration {
    let round_trip = Duration::from_micros(round_trip_us.load(Ordering::Relaxed));
    (round_trip * batches as u32).max(Duration::from_millis(5))
}

/// The wait named to a send refused by a hold: one batch, but well within the hold's
/// grace, or the hold would end before its turn.
fn held_wait(round_trip_us: &AtomicU64, holds: HoldLimits) -> Duration {
    batches_wait(round_trip_us, 1).min(holds.grace / 4)
}

fn held_back(first: &str) -> String {
    format!("send: an earlier send to this conversation ({first}) was refused; send it again first")
}

fn refused(request_id: u64, why: String, wait: Duration) -> Bytes {
    let status = Status::new(Code::ResourceExhausted, why);
    frames::status_with_wait(request_id, &status, wait.as_millis() as u64)
}

/// The share of a batch's room that must be ready before it goes out beside another batch
/// still out: fewer sends wait for that batch's answer and go with whatever queued meanwhile.
const BATCH_WORTH_SHARING: usize = 4;

/// Takes sends off the queue in batches and keeps up to `batches_in_flight` of them out.
async fn dispatch(carrier: Carrier, waiting: flume::Receiver<Queued>, limits: Limits) {
    let most_out = limits.batches_in_flight.max(1);
    let batch_max = limits.batch_max;
    let worth_sharing = (batch_max / BATCH_WORTH_SHARING).max(1);
    // Sends taken off the queue but not yet sent: at most two batches, so the queue's
    // bound still holds the rest back.
    let mut pending: VecDeque<Queued> = VecDeque::new();
    let mut busy: HashSet<i64> = HashSet::new();
    let mut out = futures::stream::FuturesUnordered::new();
    let mut open = true;
    loop {
        let room = pending.len() < 2 * batch_max;
        tokio::select! {
            Some(senders) = out.next(), if !out.is_empty() => {
                for sender in senders {
                    busy.remove(&sender);
                }
            }
            queued = waiting.recv_async(), if open && room => match queued {
                Ok(queued) => pending.push_back(queued),
                Err(_) => open = false,
            },
            else => return,
        }
        while pending.len() < 2 * batch_max
            && let Ok(queued) = waiting.try_recv()
        {
            pending.push_back(queued);
        }
        while out.len() < most_out {
            let ready = pending.iter().filter(|q| !busy.contains(&q.sender)).count();
            if ready == 0 || (!out.is_empty() && ready < worth_sharing) {
                break;
            }
            let batch = take_ready(&mut pending, &busy, batch_max, |q| q.sender);
            let batch = carrier.still_free(batch);
            if batch.is_empty() {
                continue;
            }
            let senders: Vec<i64> = batch.iter().map(|q| q.sender).collect();
            busy.extend(&senders);
            out.push(carrier.send(batch).map(move |()| senders));
        }
        if !open && pending.is_empty() && out.is_empty() {
            return;
        }
    }
}

/// Takes, in queue order, up to `max` of `pending` whose sender is not `busy`; the rest
/// stay queued in their order.
fn take_ready<T>(
    pending: &mut VecDeque<T>,
    busy: &HashSet<i64>,
    max: usize,
    sender: impl Fn(&T) -> i64,
) -> Vec<T> {
    let mut batch = Vec::new();
    let mut rest = VecDeque::with_capacity(pending.len());
    for item in pending.drain(..) {
        if batch.len() < max && !busy.contains(&sender(&item)) {
            batch.push(item);
        } else {
            rest.push_back(item);
        }
    }
    *pending = rest;
    batch
}

/// Carries batches to message-svc and their answers back to the connections.
struct Carrier {
    replicas: Keyed,
    caller: Caller,
    timeout: Duration,
    holds: HoldLimits,
    round_trip_us: Arc<AtomicU64>,
    batches: Counter,
}

impl Carrier {
    /// `batch` without the sends whose conversation was held after they queued: those are
    /// answered now and wait with it.
    fn still_free(&self, mut batch: Vec<Queued>) -> Vec<Queued> {
        batch.retain(
            |q| match q.outlet.holds.still_free(&q.request.to, q.place) {
                Ok(()) => true,
                Err(first) => {
                    let wait = held_wait(&self.round_trip_us, self.holds);
                    let send = (&q.request.to, q.request.client_msg_id.as_str(), q.place);
                    q.outlet.holds.refused(send, wait, self.holds);
                    q.outlet
                        .answer(refused(q.request_id, held_back(&first), wait));
                    false
                }
            },
        );
        batch
    }

    /// Sends a batch, split by replica, and hands each connection its answer.
    async fn send(&self, batch: Vec<Queued>) {
        let shares = self.replicas.split(batch, Queued::conversation);
        futures::future::join_all(
            shares
                .into_iter()
                .map(|(replica, share)| self.carry(replica, share)),
        )
        .await;
    }

    /// Sends one batch to a replica and hands each connection its answer. When the replica
    /// cannot be reached (it died or restarts) and another is up, the batch goes once more
    /// to the next choice of each conversation: sends are idempotent (client_msg_id), so
    /// those the lost replica stored are answered from the store.
    async fn carry(&self, replica: Replica, batch: Vec<Queued>) {
        let again = (self.replicas.len() > 1).then(|| batch.clone());
        let Err((status, answers)) = self.share(&replica, batch).await else {
            return;
        };
        if let Some(again) = again
            && self.replicas.unreachable(&replica, &status)
        {
            tracing::warn!(error = %status, "a message-svc replica is unreachable; its senders go to the next");
            for (next, share) in self.replicas.split(again, Queued::conversation) {
                if let Err((status, answers)) = self.share(&next, share).await {
                    self.answer_all(answers, &status);
                }
            }
            return;
        }
        self.answer_all(answers, &status);
    }

    /// Sends one share of a batch and hands each connection its answer; the batch's status
    /// and its answers, unanswered, when it failed as a whole. The call continues the trace
    /// of the share's first send.
    async fn share(
        &self,
        replica: &Replica,
        batch: Vec<Queued>,
    ) -> Result<(), (Status, Vec<Answer>)> {
        let span = batch[0].span.clone();
        let mut answers = Vec::with_capacity(batch.len());
        let sends = batch
            .into_iter()
            .map(|q| {
                let send = (q.request.to, q.request.client_msg_id.clone(), q.place);
                answers.push(Answer {
                    request_id: q.request_id,
                    outlet: q.outlet,
                    send,
                });
                BatchedSend {
                    sender_id: q.sender,
                    send: Some(q.request),
                }
            })
            .collect();
        let mut request = span.in_scope(|| {
            self.caller
                .request(Actor::System, SendBatchRequest { sends })
        });
        request.set_timeout(self.timeout);
        let started = Instant::now();
        self.batches.inc();
        let reply = MessageServiceClient::new(replica.channel.clone())
            .send_batch(request)
            .instrument(span)
            .await;
        let took = started.elapsed().as_micros() as u64;
        self.round_trip_us.store(took, Ordering::Relaxed);
        match reply {
            Ok(reply) => {
                let outcomes = reply.into_inner().outcomes;
                if outcomes.len() != answers.len() {
                    tracing::error!(
                        sent = answers.len(),
                        answered = outcomes.len(),
                        "message-svc answered a batch with the wrong number of outcomes"
                    );
                    let status = Status::internal("send: message-svc answered badly; retry");
                    return Err((status, answers));
                }
                for (answer, outcome) in answers.into_iter().zip(outcomes) {
                    if outcome.sent.is_none() && retryable(Code::from_i32(outcome.code)) {
                        answer.hold(outcome.retry_after_ms, self.holds);
                    }
                    answer
                        .outlet
                        .answer(outcome_frame(answer.request_id, outcome));
                }
            }
            Err(status) => return Err((status, answers)),
        }
        Ok(())
    }

    /// Every send of a batch that failed as a whole gets the batch's status (none of them
    /// was acknowledged, so the client retries them with the same client_msg_id).
    fn answer_all(&self, answers: Vec<Answer>, status: &Status) {
        let wait = frames::retry_after_ms(status);
        for answer in answers {
            if retryable(status.code()) {
                answer.hold(wait, self.holds);
            }
            answer
                .outlet
                .answer(frames::status(answer.request_id, status));
        }
    }
}

/// Where a batched send's answer goes.
struct Answer {
    request_id: u64,
    outlet: Arc<Outlet>,
    /// The send's conversation, client_msg_id and place in its connection's order.
    send: (Option<To>, String, u64),
}

impl Answer {
    /// The send was refused, and will come again after `wait_ms`: its conversation waits
    /// for it.
    fn hold(&self, wait_ms: u64, limits: HoldLimits) {
        let (to, client_msg_id, place) = &self.send;
        let wait = Duration::from_millis(wait_ms);
        let send = (to, client_msg_id.as_str(), *place);
        self.outlet.holds.refused(send, wait, limits);
    }
}

/// Whether a client resends after this status (it is not about the send itself).
fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::ResourceExhausted
            | Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Aborted
            | Code::Internal
            | Code::Unknown
    )
}

fn outcome_frame(request_id: u64, outcome: SendOutcome) -> Bytes {
    match outcome.sent {
        Some(sent) => frames::encode(request_id, Body::SendAck(sent)),
        None => {
            let status = Status::new(Code::from_i32(outcome.code), outcome.error);
            frames::status_with_wait(request_id, &status, outcome.retry_after_ms)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashSet, VecDeque};

    use super::take_ready;

    /// (sender, the sender's own count)
    fn queue(items: &[(i64, u32)]) -> VecDeque<(i64, u32)> {
        items.iter().copied().collect()
    }

    #[test]
    fn a_busy_senders_sends_stay_queued_in_order_while_others_go() {
        let mut pending = queue(&[(1, 1), (2, 1), (1, 2), (3, 1), (2, 2)]);
        let busy = HashSet::from([1]);
        let batch = take_ready(&mut pending, &busy, 10, |q| q.0);
        assert_eq!(batch, vec![(2, 1), (3, 1), (2, 2)]);
        assert_eq!(pending, queue(&[(1, 1), (1, 2)]));
    }

    #[test]
    fn a_full_batch_leaves_the_rest_queued_in_order() {
        let mut pending = queue(&[(1, 1), (2, 1), (1, 2), (3, 1)]);
        let batch = take_ready(&mut pending, &HashSet::new(), 2, |q| q.0);
        assert_eq!(batch, vec![(1, 1), (2, 1)]);
        assert_eq!(pending, queue(&[(1, 2), (3, 1)]));
    }
}
