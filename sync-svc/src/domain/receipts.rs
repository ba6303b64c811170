//! Read receipts of group messages (seed 002, levels 3 and 4). A message that asked for
//! them has a bitmap over the group's map ids in its conversation's arena ([`super::ReceiptBits`]).
//! Nothing is written per recipient when it is sent: a member's watermark moving from `a`
//! to `b` sets their bit in exactly the receipt messages in `(a, b]`, before the watermark
//! is stored, so a stored watermark always has its bits. Who counts is decided when
//! counting, from group-svc's current member map: members whose map id is below the
//! message's bound (joined before it; a rejoin gets a new map id) and who are still
//! members, never the sender. A lost arena is rebuilt from the watermarks.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use bytes::Bytes;
use imesh_kit::{error::StoreError, identity::Actor};

use super::{
    Change, Error, Inboxes, IncomingEvent, invalid,
    ports::{StoredEvent, is_set, set_bit},
    reads::group_of,
};

/// The first arena byte a slot may use; byte 0 is the built marker.
pub const FIRST_SLOT: u64 = 1;
/// Most messages one count call covers (a screen of a chat).
const MAX_COUNTED: usize = 100;
const MAX_READERS_PAGE: u32 = 500;
/// Receipt messages whose count moved and whose sender has not been told yet; past this
/// many, further moves wait for the sender's next count call.
const MAX_DIRTY: usize = 100_000;

/// A message that asked for read receipts, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub seq: i64,
    pub sender: i64,
    /// Members with a map id below this could read it when it was sent.
    pub bound: u32,
    /// Where its bitmap starts in the conversation's arena, in bytes.
    pub offset: u64,
}

impl Receipt {
    /// Bytes of a bitmap over map ids `0..bound`.
    pub fn slot_len(bound: u32) -> u64 {
        u64::from(bound).div_ceil(8)
    }

    fn end(&self) -> u64 {
        self.offset + Self::slot_len(self.bound)
    }

    fn bit(&self, map_id: u32) -> u64 {
        self.offset * 8 + u64::from(map_id)
    }

    /// Whether `member` is one of those who can read it.
    fn counts(&self, member: &MapMember) -> bool {
        member.map_id < self.bound && member.user != self.sender
    }
}

/// One current member of a group, as receipts need them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapMember {
    pub user: i64,
    pub map_id: u32,
    /// An admin or the owner (may see who read anyone's message).
    pub manages: bool,
}

/// A group's current members by map id.
#[derive(Debug, Default)]
pub struct MemberMap {
    members: Vec<MapMember>,
    by_user: HashMap<i64, usize>,
}

impl MemberMap {
    pub fn new(mut members: Vec<MapMember>) -> Self {
        members.sort_unstable_by_key(|m| m.map_id);
        let by_user = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.user, i))
            .collect();
        Self { members, by_user }
    }

    fn get(&self, user: i64) -> Option<&MapMember> {
        self.by_user.get(&user).map(|i| &self.members[*i])
    }
}

/// A receipt message's read count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptCount {
    pub conversation_id: String,
    pub seq: i64,
    /// Members who read it.
    pub read: u32,
    /// Members who can.
    pub total: u32,
}

/// Encodes the event telling a sender that a message's read count moved.
pub type EncodeReceipt = fn(&ReceiptCount) -> Bytes;

/// Receipt messages whose count moved since their senders were last told.
#[derive(Default)]
pub struct Dirty(parking_lot::Mutex<HashSet<(String, i64)>>);

impl Dirty {
    fn add(&self, conversation_id: &str, seqs: impl Iterator<Item = i64>) {
        let mut dirty = self.0.lock();
        for seq in seqs {
            if dirty.len() >= MAX_DIRTY {
                tracing::warn!("too many unsent read counts; senders see the rest when they ask");
                return;
            }
            dirty.insert((conversation_id.to_owned(), seq));
        }
    }

    fn take(&self) -> HashSet<(String, i64)> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// A span of a conversation's arena.
struct Arena {
    start: u64,
    bytes: Vec<u8>,
}

impl Arena {
    fn read(&self, receipt: &Receipt, map_id: u32) -> bool {
        is_set(&self.bytes, receipt.bit(map_id) - self.start * 8)
    }
}

impl Inboxes {
    /// Sets `user`'s bit in every receipt message their watermarks pass, per conversation
    /// `(id, from, to)`; called before the watermarks are stored.
    pub(super) async fn mark_receipts(
        &self,
        user: i64,
        advances: &[(String, i64, i64)],
    ) -> Result<(), Error> {
        let marks = advances
            .iter()
            .filter_map(|(id, from, to)| Some((id, group_of(id)?, *from, *to)))
            .map(|(id, group, from, to)| self.mark_one(user, id, group, from, to));
        futures::future::try_join_all(marks).await?;
        Ok(())
    }

    async fn mark_one(
        &self,
        user: i64,
        conversation_id: &str,
        group: i64,
        from: i64,
        to: i64,
    ) -> Result<(), Error> {
        let receipts = self
            .store
            .receipts_between(conversation_id, from, to)
            .await?;
        self.mark_passed(user, conversation_id, group, &receipts)
            .await
    }

    /// Sending raises the sender's watermark too: the receipt messages each sender of
    /// `events` is about to pass, read before the append stores the new watermarks.
    pub(super) async fn passed_by_senders(
        &self,
        events: &[StoredEvent],
    ) -> Result<Vec<(i64, String, Vec<Receipt>)>, Error> {
        let mut latest: HashMap<(i64, &str), i64> = HashMap::new();
        for mark in events.iter().filter_map(|e| e.mark.as_ref()) {
            if let Change::Message { sender, .. } = mark.change
                && sender > 0
                && group_of(&mark.conversation_id).is_some()
            {
                let seq = latest.entry((sender, &mark.conversation_id)).or_default();
                *seq = (*seq).max(mark.seq);
            }
        }
        if latest.is_empty() {
            return Ok(Vec::new());
        }
        let asks: Vec<(i64, &str, i64)> = latest
            .into_iter()
            .map(|((sender, id), seq)| (sender, id, seq))
            .collect();
        let mut passed: HashMap<(i64, String), Vec<Receipt>> = HashMap::new();
        for (sender, id, receipt) in self.store.receipts_unread_by(&asks).await? {
            passed.entry((sender, id)).or_default().push(receipt);
        }
        Ok(passed
            .into_iter()
            .map(|((sender, id), receipts)| (sender, id, receipts))
            .collect())
    }

    /// Counts each sender as a reader of what [`Self::passed_by_senders`] found, once the
    /// append is stored (best effort: a lost mark comes back with the next rebuild).
    pub(super) async fn mark_senders(&self, passed: Vec<(i64, String, Vec<Receipt>)>) {
        for (sender, id, receipts) in passed {
            let Some(group) = group_of(&id) else { continue };
            if let Err(e) = self.mark_passed(sender, &id, group, &receipts).await {
                tracing::warn!(error = %e, conversation_id = id, "counting a sender as a reader failed");
            }
        }
    }

    /// Sets `user`'s bit in each of `receipts` they count for.
    async fn mark_passed(
        &self,
        user: i64,
        conversation_id: &str,
        group: i64,
        receipts: &[Receipt],
    ) -> Result<(), Error> {
        if receipts.is_empty() {
            return Ok(());
        }
        let mut map = self.member_map(group, false).await?;
        if map.get(user).is_none() {
            // Joined since the cached map was read.
            map = self.member_map(group, true).await?;
        }
        let Some(me) = map.get(user) else {
            return Ok(());
        };
        let counted: Vec<&Receipt> = receipts.iter().filter(|r| r.counts(me)).collect();
        if counted.is_empty() {
            return Ok(());
        }
        let bits: Vec<u64> = counted.iter().map(|r| r.bit(me.map_id)).collect();
        let fresh = self.bits.set(conversation_id, &bits).await?;
        let moved = counted
            .iter()
            .zip(fresh)
            .filter(|(_, f)| *f)
            .map(|(r, _)| r.seq);
        self.dirty.add(conversation_id, moved);
        Ok(())
    }

    /// Read counts of the receipt messages among `seqs`, by seq.
    pub async fn receipt_counts(
        &self,
        asker: Actor,
        conversation_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<ReceiptCount>, Error> {
        let group = receipt_group(conversation_id)?;
        if seqs.is_empty() || seqs.len() > MAX_COUNTED {
            return Err(invalid("seqs", format!("must hold 1–{MAX_COUNTED} seqs")));
        }
        Ok(self
            .counted(asker, conversation_id, group, seqs)
            .await?
            .into_iter()
            .map(|(_, count)| count)
            .collect())
    }

    async fn counted(
        &self,
        asker: Actor,
        conversation_id: &str,
        group: i64,
        seqs: &[i64],
    ) -> Result<Vec<(Receipt, ReceiptCount)>, Error> {
        let receipts = self.store.receipts(conversation_id, seqs).await?;
        if receipts.is_empty() {
            return Ok(Vec::new());
        }
        let map = self.member_map(group, false).await?;
        if let Actor::User(user) = asker
            && map.get(user).is_none()
        {
            return Err(Error::NoConversation);
        }
        let arena = self.arena(conversation_id, &receipts, &map).await?;
        Ok(receipts
            .into_iter()
            .map(|r| {
                let (mut read, mut total) = (0, 0);
                for m in map.members.iter().filter(|m| r.counts(m)) {
                    total += 1;
                    read += u32::from(arena.read(&r, m.map_id));
                }
                let count = ReceiptCount {
                    conversation_id: conversation_id.to_owned(),
                    seq: r.seq,
                    read,
                    total,
                };
                (r, count)
            })
            .collect())
    }

    /// A page of who read (or, `unread`, who has not read) message `seq`, by map id from
    /// `cursor`; the next cursor is 0 on the last page. For the sender and admins only.
    pub async fn receipt_readers(
        &self,
        asker: Actor,
        conversation_id: &str,
        seq: i64,
        unread: bool,
        cursor: u32,
        limit: u32,
    ) -> Result<(Vec<i64>, u32), Error> {
        let group = receipt_group(conversation_id)?;
        let limit = imesh_kit::page_limit(limit, 100, MAX_READERS_PAGE)
            .map_err(|reason| invalid("limit", reason))? as usize;
        let receipt = self
            .store
            .receipts(conversation_id, &[seq])
            .await?
            .pop()
            .ok_or(Error::NoReceipt(seq))?;
        let map = self.member_map(group, false).await?;
        if let Actor::User(user) = asker {
            let me = map.get(user).ok_or(Error::NoConversation)?;
            if user != receipt.sender && !me.manages {
                return Err(Error::Forbidden(
                    "seq: only the sender and the group's admins see who read a message",
                ));
            }
        }
        let arena = self
            .arena(conversation_id, std::slice::from_ref(&receipt), &map)
            .await?;
        let mut page: Vec<&MapMember> = map
            .members
            .iter()
            .filter(|m| m.map_id >= cursor && receipt.counts(m))
            .filter(|m| arena.read(&receipt, m.map_id) != unread)
            .take(limit + 1)
            .collect();
        let next = if page.len() > limit {
            page.truncate(limit);
            page[limit - 1].map_id + 1
        } else {
            0
        };
        Ok((page.iter().map(|m| m.user).collect(), next))
    }

    /// Tells the sender of each receipt message whose count moved since the last flush its
    /// count now: one event per message however many read it meanwhile. Returns how many.
    pub async fn flush_receipts(&self) -> Result<usize, Error> {
        let dirty = self.dirty.take();
        let mut by_conversation: HashMap<String, Vec<i64>> = HashMap::new();
        for (conversation_id, seq) in dirty {
            by_conversation
                .entry(conversation_id)
                .or_default()
                .push(seq);
        }
        let mut events = Vec::new();
        for (conversation_id, seqs) in &by_conversation {
            let Some(group) = group_of(conversation_id) else {
                continue;
            };
            for chunk in seqs.chunks(MAX_COUNTED) {
                let counted = self
                    .counted(Actor::System, conversation_id, group, chunk)
                    .await;
                let counted = match counted {
                    Ok(counted) => counted,
                    Err(e) => {
                        self.dirty.add(conversation_id, chunk.iter().copied());
                        return Err(e);
                    }
                };
                events.extend(counted.into_iter().map(|(receipt, count)| IncomingEvent {
                    event_id: format!("rcpt:{conversation_id}:{}:{}", count.seq, count.read),
                    recipients: vec![receipt.sender],
                    read_fanout_group: None,
                    payload: (self.encode.receipt)(&count),
                    mark: None,
                }));
            }
        }
        let sent = events.len();
        if !events.is_empty() {
            self.append(events).await?;
        }
        Ok(sent)
    }

    async fn member_map(&self, group: i64, fresh: bool) -> Result<Arc<MemberMap>, Error> {
        self.members
            .member_map(group, fresh)
            .await
            .map_err(Error::Groups)
    }

    /// The arena span covering `receipts`, rebuilt first when it was lost.
    async fn arena(
        &self,
        conversation_id: &str,
        receipts: &[Receipt],
        map: &MemberMap,
    ) -> Result<Arena, Error> {
        let start = receipts
            .iter()
            .map(|r| r.offset)
            .min()
            .unwrap_or(FIRST_SLOT);
        let end = receipts
            .iter()
            .map(Receipt::end)
            .max()
            .unwrap_or(FIRST_SLOT);
        for rebuilt in [false, true] {
            if let Some(bytes) = self.bits.read(conversation_id, start, end - start).await? {
                return Ok(Arena { start, bytes });
            }
            if !rebuilt {
                self.rebuild(conversation_id, map).await?;
            }
        }
        Err(StoreError::Unavailable(anyhow::anyhow!("receipt bitmaps were lost again")).into())
    }

    /// Rebuilds a conversation's arena from its members' read watermarks.
    async fn rebuild(&self, conversation_id: &str, map: &MemberMap) -> Result<(), Error> {
        let receipts = self
            .store
            .receipts_between(conversation_id, 0, i64::MAX)
            .await?;
        let reads: HashMap<i64, i64> = self
            .store
            .readers(conversation_id)
            .await?
            .into_iter()
            .collect();
        let end = receipts
            .iter()
            .map(Receipt::end)
            .max()
            .unwrap_or(FIRST_SLOT);
        let mut bytes = vec![0; (end - FIRST_SLOT) as usize];
        for r in &receipts {
            for m in map.members.iter().filter(|m| r.counts(m)) {
                if reads.get(&m.user).is_some_and(|read| *read >= r.seq) {
                    set_bit(&mut bytes, r.bit(m.map_id) - FIRST_SLOT * 8);
                }
            }
        }
        self.bits.merge(conversation_id, FIRST_SLOT, &bytes).await?;
        tracing::info!(
            conversation_id,
            receipts = receipts.len(),
            "rebuilt read-receipt bitmaps from read watermarks"
        );
        Ok(())
    }
}

/// The group of a conversation receipts are asked of.
fn receipt_group(conversation_id: &str) -> Result<i64, Error> {
    group_of(conversation_id).ok_or_else(|| {
        invalid(
            "conversation_id",
            "read receipts are kept for group conversations (g:<group>)",
        )
    })
}
