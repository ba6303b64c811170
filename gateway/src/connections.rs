//! The connections this gateway holds, and the internal `Push` that writes to them.
//!
//! Each connection has a bounded queue of encoded frames. A push that finds the queue full
//! closes the connection (a slow consumer resyncs from its cursor) instead of waiting, so
//! one slow device never delays the others.

use std::{
    collections::{HashMap, HashSet},
    sync::atomic::{AtomicU64, Ordering},
};

use bytes::Bytes;
use imesh_kit::identity;
use imesh_protos::{
    gateway::{self as pb, gateway_service_server::GatewayService},
    group::{GroupChanged, GroupType},
    sync::{RawEntry, SyncEvent, sync_event::Kind},
};
use parking_lot::RwLock;
use prometheus_client::{
    metrics::{counter::Counter, gauge::Gauge},
    registry::Registry,
};
use prost::Message as _;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::{
    admission::Overflow,
    transport::frames,
    transport::queue::{self, TrySendError},
    transport::window::Out,
};

/// What the rest of the gateway holds of one connection.
#[derive(Clone)]
pub struct Handle {
    pub user: i64,
    pub frames: queue::Sender,
    /// Cancelled to close the connection.
    pub close: CancellationToken,
    pub signals: std::sync::Arc<Signals>,
}

impl Handle {
    /// Queues `frame` (a final error), then closes the connection.
    fn farewell(&self, frame: Bytes) {
        let _ = self.frames.try_send(Out::Frame(frame));
        self.close.cancel();
    }
}

/// What the registry and a connection's reader tell each other.
pub struct Signals {
    /// Woken when a push tells the user a super group of theirs changed: the connection
    /// re-lists the super groups it follows.
    pub regroup: tokio::sync::Notify,
    /// When the connection last read anything, in ms of [`clock_ms`].
    last_read_ms: AtomicU64,
}

impl Default for Signals {
    /// A connection that has just read.
    fn default() -> Self {
        Self {
            regroup: tokio::sync::Notify::new(),
            last_read_ms: AtomicU64::new(clock_ms()),
        }
    }
}

impl Signals {
    /// The connection read a frame (or a transport-level ping).
    pub fn read(&self) {
        self.last_read_ms.store(clock_ms(), Ordering::Relaxed);
    }
}

/// Milliseconds since the registry's clock started (monotonic).
fn clock_ms() -> u64 {
    static START: std::sync::LazyLock<std::time::Instant> =
        std::sync::LazyLock::new(std::time::Instant::now);
    START.elapsed().as_millis() as u64
}

/// A registered connection.
pub struct Inserted {
    pub id: u64,
    /// The user's oldest connection, to close for this one.
    pub replaced: Option<u64>,
}

#[derive(Default)]
pub struct Connections {
    next_id: AtomicU64,
    open: RwLock<HashMap<u64, Handle>>,
    /// User → their connections here, oldest first.
    sessions: parking_lot::Mutex<HashMap<i64, Vec<u64>>>,
    /// Super group → the connections here whose user belongs to it.
    followers: RwLock<HashMap<i64, HashSet<u64>>>,
    connected: Gauge,
    queued: Counter,
    slow: Counter,
}

impl Connections {
    /// Reports open connections, queued pushes and slow consumers closed in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "connections",
            "Client connections open",
            self.connected.clone(),
        );
        registry.register(
            "pushes_queued",
            "Push frames queued to client connections",
            self.queued.clone(),
        );
        registry.register(
            "slow_connections_closed",
            "Connections closed because their send queue was full",
            self.slow.clone(),
        );
    }

    /// Registers a connection, at most `cap` per user (0: no cap). Past the cap the user's
    /// oldest connection is named for closing, or with [`Overflow::RefuseNew`] this one is
    /// refused (`None`). Returns its id (unique within this gateway process).
    pub fn insert(&self, handle: Handle, cap: usize, overflow: Overflow) -> Option<Inserted> {
        let mut sessions = self.sessions.lock();
        let ids = sessions.entry(handle.user).or_default();
        let replaced = if cap > 0 && ids.len() >= cap {
            match overflow {
                Overflow::RefuseNew => return None,
                Overflow::CloseOldest => Some(ids.remove(0)),
            }
        } else {
            None
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        ids.push(id);
        self.open.write().insert(id, handle);
        self.connected.inc();
        Some(Inserted { id, replaced })
    }

    pub fn remove(&self, id: u64) {
        let Some(handle) = self.open.write().remove(&id) else {
            return;
        };
        self.connected.dec();
        let mut sessions = self.sessions.lock();
        if let Some(ids) = sessions.get_mut(&handle.user) {
            ids.retain(|&other| other != id);
            if ids.is_empty() {
                sessions.remove(&handle.user);
            }
        }
        drop(sessions);
        self.unfollow(id);
    }

    /// Connection `id` receives the live events of `groups` instead of those it followed.
    pub fn refollow(&self, id: u64, groups: &[i64]) {
        self.unfollow(id);
        self.follow(id, groups);
    }

    fn unfollow(&self, id: u64) {
        self.followers.write().retain(|_, conns| {
            conns.remove(&id);
            !conns.is_empty()
        });
    }

    /// Connection `id` receives the live events of `groups`.
    pub fn follow(&self, id: u64, groups: &[i64]) {
        let mut followers = self.followers.write();
        for group in groups {
            followers.entry(*group).or_default().insert(id);
        }
    }

    /// Queues `event` (a live group event) on every connection following `group`.
    pub fn offer_group(&self, group: i64, event: Bytes) {
        let conns: Vec<u64> = match self.followers.read().get(&group) {
            Some(conns) => conns.iter().copied().collect(),
            None => return,
        };
        let frame = frames::push(vec![RawEntry { sync_seq: 0, event }]);
        for conn in conns {
            self.offer(conn, Out::Frame(frame.clone()));
        }
    }

    pub fn len(&self) -> usize {
        self.open.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes `frame` (a final error) to every connection, then closes them (the start of
    /// a drain).
    pub fn kick_all(&self, frame: &Bytes) {
        for handle in self.open.read().values() {
            handle.farewell(frame.clone());
        }
    }

    /// Closes every connection (the end of a drain).
    pub fn close_all(&self) {
        for handle in self.open.read().values() {
            handle.close.cancel();
        }
    }

    /// Has connection `id` re-list the super groups it follows.
    pub fn regroup(&self, id: u64) {
        if let Some(handle) = self.open.read().get(&id) {
            handle.signals.regroup.notify_one();
        }
    }

    /// Writes `frame` (a final error) to every connection that read nothing for `idle`,
    /// then closes them. One sweep of the registry replaces a timer per idle connection.
    pub fn close_idle(&self, idle: std::time::Duration, frame: &Bytes) {
        let cutoff = clock_ms().saturating_sub(idle.as_millis() as u64);
        for handle in self.open.read().values() {
            let last_read = handle.signals.last_read_ms.load(Ordering::Relaxed);
            if last_read < cutoff && !handle.close.is_cancelled() {
                handle.farewell(frame.clone());
            }
        }
    }

    /// Writes `frame` (a final error) to connection `id`, then closes it.
    pub fn kick(&self, id: u64, frame: Bytes) {
        if let Some(handle) = self.open.read().get(&id) {
            handle.farewell(frame);
        }
    }

    /// Queues `frame` on connection `id`; false when the connection is gone or too slow
    /// (then it is closed). The handle is used under the registry's read lock, not cloned
    /// per frame.
    pub fn offer(&self, id: u64, frame: Out) -> bool {
        let open = self.open.read();
        let Some(handle) = open.get(&id) else {
            return false;
        };
        match handle.frames.try_send(frame) {
            Ok(()) => {
                self.queued.inc();
                true
            }
            Err(TrySendError::Full(_)) => {
                self.slow.inc();
                tracing::info!(conn_id = id, "send queue full: closing slow connection");
                handle.close.cancel();
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// The internal `Push` over a shared registry.
pub struct PushApi(pub std::sync::Arc<Connections>);

#[tonic::async_trait]
impl GatewayService for PushApi {
    async fn push(
        &self,
        request: Request<pb::PushRequest>,
    ) -> Result<Response<pb::PushResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let pb::PushRequest {
            pushes,
            group_events,
        } = request.into_inner();
        let mut gone_conn_ids = Vec::new();
        for push in pushes {
            if push.entries.iter().any(|e| is_super_group_change(&e.event)) {
                self.0.regroup(push.conn_id);
            }
            let last_seq = push.entries.iter().map(|e| e.sync_seq).max().unwrap_or(0);
            let frame = frames::push(push.entries);
            let out = match last_seq {
                0 => Out::Frame(frame),
                last_seq => Out::Push { last_seq, frame },
            };
            if !self.0.offer(push.conn_id, out) {
                gone_conn_ids.push(push.conn_id);
            }
        }
        for event in group_events {
            self.0.offer_group(event.group_id, event.event);
        }
        Ok(Response::new(pb::PushResponse { gone_conn_ids }))
    }

    async fn kick(
        &self,
        request: Request<pb::KickRequest>,
    ) -> Result<Response<pb::KickResponse>, Status> {
        identity::actor(&request)?.require_system()?;
        let pb::KickRequest { conn_ids, reason } = request.into_inner();
        let frame = frames::error(0, tonic::Code::Aborted, reason, true);
        for conn in conn_ids {
            self.0.kick(conn, frame.clone());
        }
        Ok(Response::new(pb::KickResponse {}))
    }
}

/// The field number of `group` in `imesh.sync.v1.SyncEvent`: a GroupChanged event.
const GROUP_CHANGED_FIELD: u32 = 4;

/// Whether an encoded SyncEvent is a change of a super group (which, in a super group,
/// only reaches its actor and the members it changed). Other events are told from their
/// first key without decoding them: a push is passed through, not parsed.
fn is_super_group_change(event: &[u8]) -> bool {
    let mut buf = event;
    let first_key = prost::encoding::decode_key(&mut buf);
    if !matches!(
        first_key,
        Ok((
            GROUP_CHANGED_FIELD,
            prost::encoding::WireType::LengthDelimited
        ))
    ) {
        return false;
    }
    matches!(
        SyncEvent::decode(event).map(|e| e.kind),
        Ok(Some(Kind::Group(GroupChanged { group: Some(g), .. }))) if g.r#type() == GroupType::Super
    )
}

#[cfg(test)]
mod tests {
    use imesh_protos::{group::Group, message::Message};

    use super::*;

    #[test]
    fn super_group_changes_are_told_from_other_events() {
        let encode = |kind| SyncEvent { kind: Some(kind) }.encode_to_vec();
        let change = |kind: GroupType| {
            encode(Kind::Group(GroupChanged {
                group: Some(Group {
                    r#type: kind as i32,
                    ..Group::default()
                }),
                ..GroupChanged::default()
            }))
        };
        assert!(is_super_group_change(&change(GroupType::Super)));
        assert!(!is_super_group_change(&change(GroupType::Normal)));
        assert!(!is_super_group_change(&encode(Kind::Group(
            GroupChanged::default()
        ))));
        assert!(!is_super_group_change(&encode(Kind::Message(
            Message::default()
        ))));
        assert!(!is_super_group_change(&[]));
    }
}
