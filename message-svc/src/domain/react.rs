//! Reactions: a user adds an emoji to a message they can read or takes it back; members
//! hear of each change, or of a large group's counts once per flush window.

use std::collections::HashMap;

use imesh_kit::outbox::OutboxRow;

use super::{
    Audience, Conversation, Error, MAX_EMOJI_BYTES, MAX_EMOJIS, Messages, MovedReactions,
    ReactOutcome, ReactionChange, ReactionCount, Sender, invalid,
};

/// Most reactors one page lists.
const MAX_REACTORS_PAGE: u32 = 100;
/// Most marked messages one flush takes.
const FLUSH_BATCH: usize = 256;

impl Messages {
    /// Adds `by`'s reaction `emoji` to message `seq`, or takes it back (`remove`).
    /// Idempotent. The message's reaction counts as `by` sees them.
    pub async fn react(
        &self,
        by: Sender,
        conversation_id: &str,
        seq: i64,
        emoji: &str,
        remove: bool,
    ) -> Result<Vec<ReactionCount>, Error> {
        check_emoji(emoji)?;
        let Sender::User(user) = by else {
            return Err(Error::NotParticipant);
        };
        let conversation = Conversation::parse(conversation_id)?;
        let message = self
            .visible_message(by, conversation, conversation_id, seq)
            .await?;
        if message.recalled_by != 0 && !remove {
            return Err(Error::ReactRecalled);
        }
        let change = ReactionChange {
            conversation_id: conversation_id.to_owned(),
            seq,
            emoji: emoji.to_owned(),
            user_id: user,
            added: !remove,
            at_ms: imesh_kit::ids::unix_ms(),
        };
        // Large groups (and read-fanout ones) hear of reactions as counts once per window.
        let event = match self.audience_now(conversation).await? {
            Audience::Users(users) if users.len() <= self.limits.reaction_coalesce_members => {
                Some(OutboxRow {
                    id: self.ids.next_id()?,
                    payload: (self.encode.reaction)(&change, &Audience::Users(users)),
                })
            }
            Audience::Users(_) | Audience::Group(_) => None,
        };
        let queued = event.is_some();
        match self.store.react(&change, MAX_EMOJIS, event).await? {
            ReactOutcome::Full => return Err(Error::ReactionsFull),
            ReactOutcome::Changed if queued => self.relay.notify_one(),
            ReactOutcome::Changed | ReactOutcome::Unchanged => {}
        }
        let mut counts = self.store.reactions(conversation_id, &[seq], user).await?;
        Ok(counts.remove(&seq).unwrap_or_default())
    }

    /// Who reacted to message `seq` with `emoji`, in user id order after `after_user`, and
    /// whether more follow.
    pub async fn reactors(
        &self,
        reader: Sender,
        conversation_id: &str,
        seq: i64,
        emoji: &str,
        after_user: i64,
        limit: u32,
    ) -> Result<(Vec<i64>, bool), Error> {
        check_emoji(emoji)?;
        let limit = imesh_kit::page_limit(limit, 50, MAX_REACTORS_PAGE)
            .map_err(|reason| invalid("limit", reason))?;
        let conversation = Conversation::parse(conversation_id)?;
        self.visible_message(reader, conversation, conversation_id, seq)
            .await?;
        let mut users = self
            .store
            .reactors(conversation_id, seq, emoji, after_user, limit + 1)
            .await?;
        let more = users.len() > limit as usize;
        users.truncate(limit as usize);
        Ok((users, more))
    }

    /// Tells large groups' members the counts of the messages whose reactions moved since
    /// the last flush, one event per message; how many it told.
    pub async fn flush_reactions(&self) -> Result<usize, Error> {
        let moved = self.store.moved_reactions(FLUSH_BATCH).await?;
        let mut by_conversation: HashMap<&str, Vec<&MovedReactions>> = HashMap::new();
        for m in &moved {
            by_conversation
                .entry(m.conversation_id.as_str())
                .or_default()
                .push(m);
        }
        let mut events = Vec::with_capacity(moved.len());
        for (conversation_id, marks) in by_conversation {
            let audience = self
                .audience_now(Conversation::parse(conversation_id)?)
                .await?;
            let seqs: Vec<i64> = marks.iter().map(|m| m.seq).collect();
            let mut counts = self.store.reactions(conversation_id, &seqs, 0).await?;
            for mark in marks {
                let counts = counts.remove(&mark.seq).unwrap_or_default();
                events.push(OutboxRow {
                    id: self.ids.next_id()?,
                    payload: (self.encode.reaction_counts)(mark, &counts, &audience),
                });
            }
        }
        if moved.is_empty() {
            return Ok(0);
        }
        self.store.forget_moved(&moved, events).await?;
        self.relay.notify_one();
        Ok(moved.len())
    }
}

/// An emoji (or shortcode) is 1–32 bytes without spaces or control characters.
fn check_emoji(emoji: &str) -> Result<(), Error> {
    if emoji.is_empty() || emoji.len() > MAX_EMOJI_BYTES {
        return Err(invalid(
            "emoji",
            format!("must be 1–{MAX_EMOJI_BYTES} bytes"),
        ));
    }
    if emoji.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            "emoji",
            "must hold no spaces or control characters",
        ));
    }
    Ok(())
}
