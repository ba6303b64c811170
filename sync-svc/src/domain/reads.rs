//! Conversation state: read watermarks (`read_seq`, only ever raised), unread counts as
//! `latest seq − read_seq` (no per-recipient counter written per message), mention flags,
//! the last message, and the conversation list.

use std::collections::HashMap;

use bytes::Bytes;

use super::{Error, Inboxes, IncomingEvent, invalid};

/// What a message or recall event does to its conversation's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub conversation_id: String,
    pub seq: i64,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new message: the conversation's latest, read by its sender (0: the system account,
    /// who reads nothing), mentioning some recipients or all of them.
    Message {
        sender: i64,
        time_ms: i64,
        mentioned: Vec<i64>,
        mention_all: bool,
        /// 0, or the map bound of a message asking for read receipts.
        receipt_bound: u32,
    },
    /// Message `seq` was recalled.
    Recall { by: i64, at_ms: i64 },
    /// Message `seq` was edited: `event` is the encoded sync event saying how it reads now.
    Edit { event: Bytes },
}

/// A conversation read up to a seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadMark {
    pub conversation_id: String,
    pub read_seq: i64,
}

/// One conversation as its member sees it in their list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationView {
    pub conversation_id: String,
    pub latest_seq: i64,
    pub read_seq: i64,
    /// Taken off the user's list up to this seq (0: never).
    pub removed_seq: i64,
    pub mentioned: bool,
    /// The encoded sync event of the latest message.
    pub last_event: Bytes,
    pub updated_at_ms: i64,
    /// Who recalled the latest message, 0 if nobody did.
    pub last_recalled_by: i64,
    pub last_recalled_at_ms: i64,
    /// The encoded sync event of the latest message's last edit (empty: not edited).
    pub last_edit: Bytes,
    /// In a direct conversation, how far the other user read.
    pub peer_read_seq: i64,
    pub settings: Settings,
}

/// A member's own settings of a conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    pub pinned: bool,
    /// Do not disturb.
    pub muted: bool,
}

/// Encodes the sync event telling a user's devices their settings of a conversation.
pub type EncodeSettings = fn(conversation_id: &str, settings: Settings) -> Bytes;
/// Encodes the sync event telling a user's devices a conversation left their list.
pub type EncodeRemoved = fn(conversation_id: &str, removed_seq: i64) -> Bytes;

impl ConversationView {
    /// Messages after what the user read, or after where they removed the conversation.
    pub fn unread(&self) -> i64 {
        (self.latest_seq - self.read_seq.max(self.removed_seq)).max(0)
    }
}

/// Where a conversation list page starts: after this conversation, in list order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub updated_at_ms: i64,
    pub conversation_id: String,
}

impl Cursor {
    pub fn token(&self) -> String {
        format!("{}/{}", self.updated_at_ms, self.conversation_id)
    }

    pub fn parse(token: &str) -> Result<Option<Self>, Error> {
        if token.is_empty() {
            return Ok(None);
        }
        let parsed = token.split_once('/').and_then(|(at, id)| {
            let updated_at_ms = at.parse().ok()?;
            (!id.is_empty() && id.len() <= 64).then(|| Self {
                updated_at_ms,
                conversation_id: id.to_owned(),
            })
        });
        parsed
            .map(Some)
            .ok_or_else(|| invalid("page_token", "is not a token this service issued"))
    }
}

/// One page of a user's conversations.
#[derive(Debug, Default)]
pub struct ConversationPage {
    pub conversations: Vec<ConversationView>,
    pub next: Option<Cursor>,
    pub total_unread: i64,
}

/// Encodes the sync event telling devices that `user` read `conversation` up to `seq`.
pub type EncodeRead = fn(conversation_id: &str, user: i64, read_seq: i64) -> Bytes;

const MAX_READ_MARKS: usize = 100;
const MAX_CONVERSATION_PAGE: u32 = 100;

impl Inboxes {
    /// Raises `user`'s watermarks to the marks (never past a conversation's latest seq) and
    /// returns the stored ones. Each conversation left at the requested seq gets a ReadMoved
    /// event for the user's devices and a direct peer's, once per seq however often the mark
    /// is replayed. The receipt messages a watermark passes count the user as a reader.
    pub async fn mark_read(&self, user: i64, marks: Vec<ReadMark>) -> Result<Vec<ReadMark>, Error> {
        if marks.is_empty() || marks.len() > MAX_READ_MARKS {
            return Err(invalid(
                "marks",
                format!("must hold 1–{MAX_READ_MARKS} marks"),
            ));
        }
        let mut wanted: HashMap<String, i64> = HashMap::new();
        for mark in marks {
            if mark.conversation_id.is_empty() || mark.conversation_id.len() > 64 {
                return Err(invalid("marks.conversation_id", "must be 1–64 characters"));
            }
            if mark.read_seq < 0 {
                return Err(invalid("marks.read_seq", "must not be negative"));
            }
            let seq = wanted.entry(mark.conversation_id).or_default();
            *seq = (*seq).max(mark.read_seq);
        }
        let ids: Vec<&str> = wanted.keys().map(String::as_str).collect();
        let mut states = self.store.read_states(user, &ids).await?;
        if states.len() < ids.len() {
            states.extend(self.opened_states(user, &ids, &states).await?);
        }
        let mut raise = Vec::new();
        let mut advances = Vec::new();
        let mut stored = Vec::new();
        let mut events = Vec::new();
        for (conversation_id, read_seq, latest_seq) in states {
            let want = wanted[&conversation_id].min(latest_seq);
            if want > read_seq {
                raise.push((conversation_id.clone(), want));
                advances.push((conversation_id.clone(), read_seq, want));
            }
            let now = read_seq.max(want);
            if want == now && now > 0 {
                events.push(self.read_event(user, &conversation_id, now));
            }
            stored.push(ReadMark {
                conversation_id,
                read_seq: now,
            });
        }
        // Receipt bits first: a stored watermark always has its bits.
        self.mark_receipts(user, &advances).await?;
        self.store.raise_read(user, &raise).await?;
        if !events.is_empty() {
            self.append(events).await?;
        }
        Ok(stored)
    }

    /// Changes `user`'s settings of a conversation they have (fields left `None` stay) and
    /// tells their devices.
    pub async fn update_settings(
        &self,
        user: i64,
        conversation_id: &str,
        pinned: Option<bool>,
        muted: Option<bool>,
    ) -> Result<Settings, Error> {
        self.own_latest_seq(user, conversation_id).await?;
        let settings = self
            .store
            .update_settings(user, conversation_id, pinned, muted)
            .await?;
        let event = IncomingEvent {
            event_id: format!("settings:{user}:{conversation_id}:{}", self.ids.next_id()?),
            recipients: vec![user],
            read_fanout_group: None,
            payload: (self.encode.settings)(conversation_id, settings),
            mark: None,
        };
        self.append(vec![event]).await?;
        Ok(settings)
    }

    /// Takes a conversation off `user`'s list up to its latest message (their view only)
    /// and tells their devices; the seq it is removed up to.
    pub async fn remove_conversation(
        &self,
        user: i64,
        conversation_id: &str,
    ) -> Result<i64, Error> {
        let latest = self.own_latest_seq(user, conversation_id).await?;
        let removed = self
            .store
            .remove_conversation(user, conversation_id, latest)
            .await?;
        let event = IncomingEvent {
            event_id: format!("removed:{user}:{conversation_id}:{removed}"),
            recipients: vec![user],
            read_fanout_group: None,
            payload: (self.encode.removed)(conversation_id, removed),
            mark: None,
        };
        self.append(vec![event]).await?;
        Ok(removed)
    }

    /// The latest seq of a conversation `user` has, opening their read state in a group
    /// they belong to that has none yet (read fanout writes none per member).
    async fn own_latest_seq(&self, user: i64, conversation_id: &str) -> Result<i64, Error> {
        if conversation_id.is_empty() || conversation_id.len() > 64 {
            return Err(invalid("conversation_id", "must be 1–64 characters"));
        }
        let ids = [conversation_id];
        if let Some((_, _, latest)) = self.store.read_states(user, &ids).await?.first() {
            return Ok(*latest);
        }
        let opened = self.opened_states(user, &ids, &[]).await?;
        let Some((_, read, latest)) = opened.first() else {
            return Err(Error::NoConversation);
        };
        self.store
            .raise_read(user, &[(conversation_id.to_owned(), *read)])
            .await?;
        Ok(*latest)
    }

    /// Read states of group conversations `user` has none in yet but belongs to (read
    /// fanout writes none per member), starting at 0; other conversations stay unknown.
    async fn opened_states(
        &self,
        user: i64,
        ids: &[&str],
        known: &[(String, i64, i64)],
    ) -> Result<Vec<(String, i64, i64)>, Error> {
        let missing: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| group_of(id).is_some() && !known.iter().any(|k| k.0 == *id))
            .collect();
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let groups: Vec<(String, i64, i64)> = self
            .store
            .latest_seqs(&missing)
            .await?
            .into_iter()
            .filter_map(|(id, latest)| {
                let group = group_of(&id)?;
                Some((id, group, latest))
            })
            .collect();
        let asks = groups
            .iter()
            .map(|(_, group, _)| self.members.is_member(*group, user));
        let members = futures::future::try_join_all(asks)
            .await
            .map_err(Error::Groups)?;
        let opened = groups
            .into_iter()
            .zip(members)
            .filter(|(_, member)| *member)
            .map(|((id, _, latest), _)| (id, 0, latest))
            .collect();
        Ok(opened)
    }

    fn read_event(&self, user: i64, conversation_id: &str, read_seq: i64) -> IncomingEvent {
        let mut recipients = vec![user];
        recipients.extend(direct_peer(conversation_id, user));
        IncomingEvent {
            event_id: format!("read:{user}:{conversation_id}:{read_seq}"),
            recipients,
            payload: (self.encode.read)(conversation_id, user, read_seq),
            read_fanout_group: None,
            mark: None,
        }
    }

    /// A page of `user`'s conversations, most recently active first, and their unread total.
    pub async fn conversations(
        &self,
        user: i64,
        page_token: &str,
        limit: u32,
    ) -> Result<ConversationPage, Error> {
        let limit = imesh_kit::page_limit(limit, 50, MAX_CONVERSATION_PAGE)
            .map_err(|reason| invalid("limit", reason))?;
        let after = Cursor::parse(page_token)?;
        let mut page = self
            .store
            .conversations(user, after.as_ref(), limit + 1)
            .await?;
        let next = (page.len() > limit as usize).then(|| {
            page.truncate(limit as usize);
            let last = &page[page.len() - 1];
            Cursor {
                updated_at_ms: last.updated_at_ms,
                conversation_id: last.conversation_id.clone(),
            }
        });
        let peers: Vec<(i64, String)> = page
            .iter()
            .filter_map(|c| {
                Some((
                    direct_peer(&c.conversation_id, user)?,
                    c.conversation_id.clone(),
                ))
            })
            .collect();
        let peer_reads = self.store.read_seqs(&peers).await?;
        for conversation in &mut page {
            if let Some(seq) = peer_reads.get(&conversation.conversation_id) {
                conversation.peer_read_seq = *seq;
            }
        }
        Ok(ConversationPage {
            conversations: page,
            next,
            total_unread: self.store.total_unread(user).await?,
        })
    }
}

/// The group of a group conversation `g:<group>`.
pub(super) fn group_of(conversation_id: &str) -> Option<i64> {
    conversation_id
        .strip_prefix("g:")?
        .parse()
        .ok()
        .filter(|g| *g > 0)
}

/// The other user of a direct conversation `d:<lo>:<hi>` that `user` is in.
fn direct_peer(conversation_id: &str, user: i64) -> Option<i64> {
    let rest = conversation_id.strip_prefix("d:")?;
    let (a, b) = rest.split_once(':')?;
    let (a, b): (i64, i64) = (a.parse().ok()?, b.parse().ok()?);
    match user {
        u if u == a => Some(b),
        u if u == b => Some(a),
        _ => None,
    }
}
