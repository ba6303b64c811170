//! Reading a conversation back, and recalling or editing one of its messages.

use imesh_kit::outbox::OutboxRow;

use super::{
    Audience, Content, Conversation, Error, Forwarded, Hidden, MAX_HIDE, MAX_HISTORY_PAGE,
    MAX_PINS, Message, Messages, PIN, Pin, PinChange, PinOutcome, PinnedMessage, Reply, Sender,
    invalid,
};

/// Which page of a conversation's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryPage {
    /// Newest first, below a seq (0: from the latest).
    Before(i64),
    /// Oldest first, above a seq (catching up).
    After(i64),
}

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
        let message = self
            .visible_message(by, conversation, conversation_id, seq)
            .await?;
        if message.recalled_by != 0 {
            return Ok(message);
        }
        let now = imesh_kit::ids::unix_ms();
        if let Sender::User(user) = by {
            self.may_recall(user, conversation, &message, now).await?;
        }
        let audience = self.audience_now(conversation).await?;
        let recalled = Message {
            content: Content::Text(String::new()),
            recalled_by: by.id(),
            recalled_at_ms: now,
            ..message
        };
        let event = OutboxRow {
            id: self.ids.next_id()?,
            payload: (self.encode.recall)(&recalled, &audience),
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

    /// Gives `by`'s own message `seq` new content, within the edit window, and tells the
    /// conversation's members. A recalled message or a notice is not edited; of two
    /// concurrent edits, the second is refused and may be made again.
    pub async fn edit(
        &self,
        by: Sender,
        conversation_id: &str,
        seq: i64,
        content: Option<Content>,
    ) -> Result<Message, Error> {
        let content = self.checked_content(by, content)?;
        let conversation = Conversation::parse(conversation_id)?;
        let message = self
            .visible_message(by, conversation, conversation_id, seq)
            .await?;
        if message.sender_id != by.id() {
            return Err(Error::NotSender);
        }
        if message.recalled_by != 0 {
            return Err(Error::EditRefused("a recalled message cannot be edited"));
        }
        if message.content.is_notice() {
            return Err(Error::EditRefused("a notice cannot be edited"));
        }
        let kept: Vec<&str> = message
            .content
            .objects()
            .into_iter()
            .map(|(_, key)| key)
            .collect();
        self.check_objects(by, &content, &kept).await?;
        let now = imesh_kit::ids::unix_ms();
        if now - message.server_time_ms > self.limits.edit_window_ms {
            return Err(Error::EditRefused("the edit window has passed"));
        }
        let audience = self.audience_now(conversation).await?;
        let edited = Message {
            content,
            version: message.version + 1,
            edited_at_ms: now,
            ..message
        };
        let event = OutboxRow {
            id: self.ids.next_id()?,
            payload: (self.encode.edit)(&edited, &audience),
        };
        let stored = self
            .store
            .edit(
                conversation_id,
                seq,
                &edited.content,
                edited.version,
                now,
                event,
            )
            .await?;
        if !stored {
            return Err(Error::EditRefused(
                "the message changed meanwhile (edited or recalled); read it again",
            ));
        }
        self.relay.notify_one();
        Ok(edited)
    }

    /// Hides messages `seqs` of a conversation from `by`'s own view (never anyone else's)
    /// and tells their devices. Seqs they cannot read are left out.
    pub async fn delete_for_me(
        &self,
        by: Sender,
        conversation_id: &str,
        mut seqs: Vec<i64>,
    ) -> Result<Hidden, Error> {
        if seqs.is_empty() || seqs.len() > MAX_HIDE || seqs.iter().any(|s| *s <= 0) {
            return Err(invalid("seqs", format!("must hold 1–{MAX_HIDE} seqs")));
        }
        let (after, until) = self.own_view(by, conversation_id).await?;
        seqs.retain(|s| *s > after && until.is_none_or(|u| *s <= u));
        seqs.sort_unstable();
        seqs.dedup();
        self.hide(Hidden {
            conversation_id: conversation_id.to_owned(),
            user: by.id(),
            seqs,
            cleared_seq: 0,
        })
        .await
    }

    /// Hides everything of a conversation up to its latest message from `by`'s own view.
    pub async fn clear_history(&self, by: Sender, conversation_id: &str) -> Result<Hidden, Error> {
        let (_, until) = self.own_view(by, conversation_id).await?;
        let latest = self.store.max_seq(conversation_id).await?;
        self.hide(Hidden {
            conversation_id: conversation_id.to_owned(),
            user: by.id(),
            seqs: Vec::new(),
            cleared_seq: until.map_or(latest, |u| u.min(latest)),
        })
        .await
    }

    /// The range of a conversation a user (only) may hide messages of.
    async fn own_view(
        &self,
        by: Sender,
        conversation_id: &str,
    ) -> Result<(i64, Option<i64>), Error> {
        if by == Sender::System {
            return Err(invalid(
                "x-imesh-actor",
                "only a user hides messages, from their own view",
            ));
        }
        self.visible(by, Conversation::parse(conversation_id)?)
            .await
    }

    async fn hide(&self, hidden: Hidden) -> Result<Hidden, Error> {
        let event = OutboxRow {
            id: self.ids.next_id()?,
            payload: (self.encode.hidden)(&hidden),
        };
        self.store.hide(&hidden, event).await?;
        self.relay.notify_one();
        Ok(hidden)
    }

    /// Pins message `seq` for every member, or unpins it, as `by`: either member of a direct
    /// conversation, members holding PIN in a group, the owner of a notice conversation, the
    /// system actor anywhere. Idempotent. The conversation's pins, as `by` reads them.
    pub async fn pin(
        &self,
        by: Sender,
        conversation_id: &str,
        seq: i64,
        unpin: bool,
    ) -> Result<Vec<PinnedMessage>, Error> {
        let conversation = Conversation::parse(conversation_id)?;
        let range = self.visible(by, conversation).await?;
        self.message_within(conversation_id, seq, range).await?;
        if let (Sender::User(user), Conversation::Group(g)) = (by, conversation)
            && !self
                .peers
                .groups
                .holds(g, user, PIN)
                .await
                .map_err(Error::Directory)?
        {
            return Err(Error::PinRefused(
                "only members holding PIN (admins, the owner) pin in a group",
            ));
        }
        let change = PinChange {
            conversation_id: conversation_id.to_owned(),
            pin: Pin {
                seq,
                pinned_by: by.id(),
                pinned_at_ms: imesh_kit::ids::unix_ms(),
            },
            pinned: !unpin,
        };
        let event = OutboxRow {
            id: self.ids.next_id()?,
            payload: (self.encode.pin)(&change, &self.audience_now(conversation).await?),
        };
        let changed = if unpin {
            self.store.unpin(conversation_id, seq, event).await?
        } else {
            match self
                .store
                .pin(conversation_id, change.pin, MAX_PINS, event)
                .await?
            {
                PinOutcome::Pinned => true,
                PinOutcome::AlreadyPinned => false,
                PinOutcome::Full => return Err(Error::PinsFull),
            }
        };
        if changed {
            self.relay.notify_one();
        }
        self.pins_within(conversation_id, range).await
    }

    /// A conversation's pins `reader` may read, newest first, with their messages.
    pub async fn pins(
        &self,
        reader: Sender,
        conversation_id: &str,
    ) -> Result<Vec<PinnedMessage>, Error> {
        let range = self
            .visible(reader, Conversation::parse(conversation_id)?)
            .await?;
        self.pins_within(conversation_id, range).await
    }

    /// A conversation's pins within the seq range `(after, until]`, newest first.
    async fn pins_within(
        &self,
        conversation_id: &str,
        (after, until): (i64, Option<i64>),
    ) -> Result<Vec<PinnedMessage>, Error> {
        let pins: Vec<Pin> = self
            .store
            .pins(conversation_id)
            .await?
            .into_iter()
            .filter(|p| p.seq > after && until.is_none_or(|u| p.seq <= u))
            .collect();
        let seqs: Vec<i64> = pins.iter().map(|p| p.seq).collect();
        let mut messages: std::collections::HashMap<i64, Message> = self
            .store
            .messages_at(conversation_id, &seqs)
            .await?
            .into_iter()
            .map(|m| (m.seq, m))
            .collect();
        Ok(pins
            .into_iter()
            .filter_map(|pin| {
                let message = messages.remove(&pin.seq)?;
                Some(PinnedMessage { pin, message })
            })
            .collect())
    }

    /// What a reply to message `seq` of `conversation_id` quotes, if `sender` may read it.
    pub(super) async fn quoted(
        &self,
        sender: Sender,
        conversation_id: &str,
        seq: i64,
    ) -> Result<Reply, Error> {
        let conversation = Conversation::parse(conversation_id)?;
        let quoted = self
            .visible_message(sender, conversation, conversation_id, seq)
            .await
            .map_err(|e| match e {
                Error::NoMessage | Error::NotParticipant => {
                    invalid("reply_to_seq", "no message of this conversation has it")
                }
                other => other,
            })?;
        Ok(Reply {
            seq,
            sender_id: quoted.sender_id,
            excerpt: quoted.content.excerpt(),
            recalled: quoted.recalled_by != 0,
        })
    }

    /// The content and origin of a forward of message `seq` of `source`, which `sender`
    /// must be able to read.
    pub(super) async fn forwarded(
        &self,
        sender: Sender,
        source: &str,
        seq: i64,
    ) -> Result<(Content, Option<Forwarded>), Error> {
        let unreadable = || {
            invalid(
                "forward",
                "no message you can read has this conversation_id and seq",
            )
        };
        let conversation = Conversation::parse(source).map_err(|_| unreadable())?;
        let original = self
            .visible_message(sender, conversation, source, seq)
            .await
            .map_err(|e| match e {
                Error::NoMessage | Error::NotParticipant => unreadable(),
                other => other,
            })?;
        if original.recalled_by != 0 {
            return Err(invalid("forward", "the message was recalled"));
        }
        if original.content.is_notice() {
            return Err(invalid("forward", "notices are not forwarded"));
        }
        let origin = original.forwarded.unwrap_or(Forwarded {
            msg_id: original.msg_id,
            sender_id: original.sender_id,
            server_time_ms: original.server_time_ms,
        });
        Ok((original.content, Some(origin)))
    }

    /// Message `seq` of a conversation, if `reader` may see it.
    pub(super) async fn visible_message(
        &self,
        reader: Sender,
        conversation: Conversation,
        conversation_id: &str,
        seq: i64,
    ) -> Result<Message, Error> {
        let range = self.visible(reader, conversation).await?;
        self.message_within(conversation_id, seq, range).await
    }

    /// Message `seq` of a conversation, if it lies within the seq range `(after, until]`.
    async fn message_within(
        &self,
        conversation_id: &str,
        seq: i64,
        (after, until): (i64, Option<i64>),
    ) -> Result<Message, Error> {
        let found = self.store.message(conversation_id, seq).await?;
        found
            .filter(|m| m.seq > after && until.is_none_or(|u| m.seq <= u))
            .ok_or(Error::NoMessage)
    }

    /// Whom an event of the conversation reaches now.
    pub(super) async fn audience_now(&self, conversation: Conversation) -> Result<Audience, Error> {
        Ok(match conversation {
            Conversation::Group(g) => self
                .peers
                .groups
                .audience(g)
                .await
                .map_err(Error::Directory)?,
            Conversation::Direct(a, b) => Audience::Users(vec![a, b]),
            Conversation::Notices(u) => Audience::Users(vec![u]),
        })
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
                .holds(g, user, super::RECALL_OTHER)
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

    /// A page of `reader`'s view of a conversation, and whether more visible messages lie
    /// beyond it in the page's direction.
    pub async fn history(
        &self,
        reader: Sender,
        conversation_id: &str,
        page: HistoryPage,
        limit: u32,
    ) -> Result<(Vec<Message>, bool), Error> {
        let limit = imesh_kit::page_limit(limit, 50, MAX_HISTORY_PAGE)
            .map_err(|reason| invalid("limit", reason))?;
        let (after, until) = self
            .visible(reader, Conversation::parse(conversation_id)?)
            .await?;
        let until = until.unwrap_or(i64::MAX);
        let (after, up_to, newest_first) = match page {
            HistoryPage::Before(0) => (after, until, true),
            HistoryPage::Before(seq) => (after, until.min(seq - 1), true),
            HistoryPage::After(seq) => (after.max(seq), until, false),
        };
        // What the reader hid from their own view: a page asks for that many more rows.
        let (after, hidden) = match reader {
            Sender::User(user) => {
                let (cleared, hidden) = self
                    .store
                    .hidden_for(user, conversation_id, after, up_to)
                    .await?;
                (after.max(cleared), hidden)
            }
            Sender::System => (after, Default::default()),
        };
        let asked = limit + 1 + hidden.len() as u32;
        let mut page = self
            .store
            .history(conversation_id, after, up_to, asked, newest_first)
            .await?;
        page.retain(|m| !hidden.contains(&m.seq));
        let more = page.len() > limit as usize;
        page.truncate(limit as usize);
        self.mark_recalled_quotes(conversation_id, &mut page)
            .await?;
        let seqs: Vec<i64> = page.iter().map(|m| m.seq).collect();
        let mut reactions = self
            .store
            .reactions(conversation_id, &seqs, reader.id())
            .await?;
        for message in &mut page {
            message.reactions = reactions.remove(&message.seq).unwrap_or_default();
        }
        Ok((page, more))
    }

    /// Flags the replies of `page` whose quoted message was recalled since.
    async fn mark_recalled_quotes(
        &self,
        conversation_id: &str,
        page: &mut [Message],
    ) -> Result<(), Error> {
        let quoted: Vec<i64> = page
            .iter()
            .filter_map(|m| m.reply.as_ref().map(|r| r.seq))
            .collect();
        if quoted.is_empty() {
            return Ok(());
        }
        let recalled = self.store.recalled_among(conversation_id, &quoted).await?;
        for reply in page.iter_mut().filter_map(|m| m.reply.as_mut()) {
            reply.recalled = recalled.contains(&reply.seq);
        }
        Ok(())
    }

    /// The seq range `(after, until]` of a conversation `reader` may read; the system actor
    /// reads everything.
    pub(super) async fn visible(
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
