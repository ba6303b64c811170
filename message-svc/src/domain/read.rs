//! Reading a conversation back, and recalling one of its messages.

use imesh_kit::outbox::OutboxRow;

use super::{Content, Conversation, Error, MAX_HISTORY_PAGE, Message, Messages, Sender, invalid};

impl Messages {
    /// Recalls message `seq` of a conversation as `by`: a user's own message within the
    /// recall window, anyone's in a group where they hold RECALL_OTHER, anything for the
    /// system actor. Idempotent.
    pub async fn recall(
        &self,
        by: Sender,
        conversation_id: &str,
        seq: i64,
    ) -> Result<Message, Error> {
        let conversation = Conversation::parse(conversation_id)?;
        let (after, until) = self.visible(by, conversation).await?;
        let found = self.store.message(conversation_id, seq).await?;
        let message = found
            .filter(|m| m.seq > after && until.is_none_or(|u| m.seq <= u))
            .ok_or(Error::NoMessage)?;
        if message.recalled_by != 0 {
            return Ok(message);
        }
        let now = imesh_kit::ids::unix_ms();
        if let Sender::User(user) = by {
            self.may_recall(user, conversation, &message, now).await?;
        }
        let recipients = match conversation {
            Conversation::Group(g) => self
                .peers
                .groups
                .member_ids(g)
                .await
                .map_err(Error::Directory)?,
            Conversation::Direct(a, b) => vec![a, b],
            Conversation::Notices(u) => vec![u],
        };
        let recalled = Message {
            content: Content::Text(String::new()),
            recalled_by: by.id(),
            recalled_at_ms: now,
            ..message
        };
        let event = OutboxRow {
            id: self.ids.next_id(),
            payload: (self.encode.recall)(&recalled, &recipients),
        };
        if !self
            .store
            .recall(conversation_id, seq, by.id(), now, event)
            .await?
        {
            // Someone recalled it meanwhile: answer with what is stored.
            return self
                .store
                .message(conversation_id, seq)
                .await?
                .ok_or(Error::NoMessage);
        }
        self.relay.notify_one();
        Ok(recalled)
    }

    /// A user may recall their own message in time, or anyone's as a group moderator.
    async fn may_recall(
        &self,
        user: i64,
        conversation: Conversation,
        message: &Message,
        now: i64,
    ) -> Result<(), Error> {
        let own_in_time = message.sender_id == user
            && now - message.server_time_ms <= self.limits.recall_window_ms;
        if own_in_time {
            return Ok(());
        }
        let moderator = match conversation {
            Conversation::Group(g) => self
                .peers
                .groups
                .may_recall_others(g, user)
                .await
                .map_err(Error::Directory)?,
            Conversation::Direct(..) | Conversation::Notices(_) => false,
        };
        if moderator {
            return Ok(());
        }
        Err(Error::RecallRefused(if message.sender_id == user {
            "the recall window has passed"
        } else {
            "only the sender, or a group admin, may recall this message"
        }))
    }

    /// `reader`'s view of a conversation's history before `before_seq` (0: the latest),
    /// newest first, and whether older visible messages remain.
    pub async fn history(
        &self,
        reader: Sender,
        conversation_id: &str,
        before_seq: i64,
        limit: u32,
    ) -> Result<(Vec<Message>, bool), Error> {
        let limit = imesh_kit::page_limit(limit, 50, MAX_HISTORY_PAGE)
            .map_err(|reason| invalid("limit", reason))?;
        let (after, until) = self
            .visible(reader, Conversation::parse(conversation_id)?)
            .await?;
        let before = if before_seq > 0 {
            before_seq - 1
        } else {
            i64::MAX
        };
        let up_to = until.map_or(before, |u| u.min(before));
        let mut page = self
            .store
            .history(conversation_id, after, up_to, limit + 1)
            .await?;
        let more = page.len() > limit as usize;
        page.truncate(limit as usize);
        Ok((page, more))
    }

    /// The seq range `(after, until]` of a conversation `reader` may read; the system actor
    /// reads everything.
    async fn visible(
        &self,
        reader: Sender,
        conversation: Conversation,
    ) -> Result<(i64, Option<i64>), Error> {
        let Sender::User(user) = reader else {
            return Ok((0, None));
        };
        let group = match conversation {
            Conversation::Direct(a, b) if user == a || user == b => return Ok((0, None)),
            Conversation::Notices(u) if user == u => return Ok((0, None)),
            Conversation::Direct(..) | Conversation::Notices(_) => {
                return Err(Error::NotParticipant);
            }
            Conversation::Group(group) => group,
        };
        match self
            .peers
            .groups
            .visibility(group, user)
            .await
            .map_err(Error::Directory)?
        {
            Some(range) => Ok(range),
            None => Err(Error::NotParticipant),
        }
    }
}
