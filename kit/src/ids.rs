//! Snowflake ids: 41 bits of milliseconds since 2024-01-01, 10 bits of node, 12 bits of
//! sequence. Unique across nodes with distinct node ids, increasing per node, lock-free.
//! A process leases its node id from its database ([`lease`]); a generator whose lease
//! lapsed refuses to mint until it is renewed.
//! When more than 4,096 ids are asked for within one millisecond the generator borrows from
//! the next millisecond instead of waiting, so ids stay unique and increasing.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use crate::error::StoreError;

#[cfg(feature = "sql")]
pub mod lease;

/// The conversation id of a group, as message-svc names it.
pub fn group_conversation(group_id: i64) -> String {
    format!("g:{group_id}")
}

const EPOCH_MS: u64 = 1_704_067_200_000;
const NODE_BITS: u32 = 10;
pub(crate) const SEQ_BITS: u32 = 12;
pub const MAX_NODE: u16 = (1 << NODE_BITS) - 1;

#[derive(Debug)]
pub struct Snowflake {
    node: AtomicU64,
    /// `(ms << SEQ_BITS) | seq` of the last id handed out.
    last: AtomicU64,
    /// With a leased node: the Unix millisecond the lease stops covering (0: not held).
    valid_until_ms: Option<Arc<AtomicI64>>,
}

impl Snowflake {
    /// A fixed `node`, which must be unique among the processes sharing an id space
    /// (0..=1023); [`lease::NodeLease`] hands out leased ones.
    pub fn new(node: u16) -> Self {
        assert!(
            node <= MAX_NODE,
            "snowflake node {node} is above {MAX_NODE}"
        );
        Self {
            node: AtomicU64::new(u64::from(node)),
            last: AtomicU64::new(0),
            valid_until_ms: None,
        }
    }

    /// The next id; unavailable while a leased node's lease has lapsed.
    pub fn next_id(&self) -> Result<i64, StoreError> {
        let now_unix = unix_ms();
        if let Some(until) = &self.valid_until_ms
            && now_unix >= until.load(Ordering::Acquire)
        {
            return Err(StoreError::Unavailable(anyhow::anyhow!(
                "this process's node id lease lapsed; no ids until it is renewed"
            )));
        }
        let now = (now_unix as u64).saturating_sub(EPOCH_MS) << SEQ_BITS;
        let mut last = self.last.load(Ordering::Relaxed);
        let state = loop {
            let next = if now > last { now } else { last + 1 };
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break next,
                Err(seen) => last = seen,
            }
        };
        let ms = state >> SEQ_BITS;
        let seq = state & ((1 << SEQ_BITS) - 1);
        let node = self.node.load(Ordering::Acquire);
        Ok(((ms << (NODE_BITS + SEQ_BITS)) | (node << SEQ_BITS) | seq) as i64)
    }

    /// The node this generator mints with now.
    pub fn node(&self) -> u16 {
        self.node.load(Ordering::Acquire) as u16
    }
}

/// The lowest id any node hands out at `unix_ms`: ids below it are older (retention cuts).
pub fn first_id_at(unix_ms: i64) -> i64 {
    let ms = (unix_ms.max(0) as u64).saturating_sub(EPOCH_MS);
    (ms << (NODE_BITS + SEQ_BITS)) as i64
}

/// When `id` was handed out, in Unix milliseconds (a little later for ids borrowed from
/// the next millisecond).
pub fn unix_ms_of(id: i64) -> i64 {
    ((id.max(0) as u64) >> (NODE_BITS + SEQ_BITS)) as i64 + EPOCH_MS as i64
}

/// Milliseconds since the Unix epoch, the unit of every `*_ms` field.
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_id_tells_the_millisecond_it_was_handed_out() {
        let ids = Snowflake::new(7);
        let before = unix_ms();
        let id = ids.next_id().unwrap();
        let after = unix_ms();
        let at = unix_ms_of(id);
        assert!((before..=after).contains(&at), "{before} ≤ {at} ≤ {after}");
        assert_eq!(unix_ms_of(first_id_at(before)), before);
    }

    #[test]
    fn ids_minted_after_a_moment_are_at_or_above_its_first_id() {
        let before = first_id_at(unix_ms());
        let id = Snowflake::new(MAX_NODE).next_id().unwrap();
        assert!(id >= before);
        assert!(first_id_at(unix_ms() + 1_000) > id);
    }

    use std::{collections::HashSet, sync::Arc};

    use super::*;

    #[test]
    fn ids_increase_and_never_repeat_across_threads() {
        let ids = Arc::new(Snowflake::new(3));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let ids = ids.clone();
                std::thread::spawn(move || {
                    let ids: Vec<i64> = (0..20_000).map(|_| ids.next_id().unwrap()).collect();
                    assert!(
                        ids.windows(2).all(|w| w[0] < w[1]),
                        "ids must increase per thread"
                    );
                    ids
                })
            })
            .collect();
        let mut all = HashSet::new();
        for h in handles {
            for id in h.join().unwrap() {
                assert!(all.insert(id), "duplicate id {id}");
            }
        }
        assert_eq!(all.len(), 80_000);
    }

    #[test]
    fn node_is_encoded_and_ids_are_positive() {
        let a = Snowflake::new(1).next_id().unwrap();
        let b = Snowflake::new(2).next_id().unwrap();
        assert!(a > 0 && b > 0);
        assert_eq!((a >> SEQ_BITS) & i64::from(MAX_NODE), 1);
        assert_eq!((b >> SEQ_BITS) & i64::from(MAX_NODE), 2);
    }
}
