//! The send path, one batch at a time (a single send is a batch of one): validate, answer
//! retries, rate-limit, gate, allocate msg ids and seqs in the batch's order, store with the
//! outbox events. Notices to many targets take the same path once per target.

use std::collections::{HashMap, HashSet};

use futures::{StreamExt, future::join_all, stream};
use imesh_kit::{error::StoreError, outbox::OutboxRow};

use super::{
    AT_ALL, Audience, Content, Conversation, ConversationId, DirectPolicy, Error, Gated,
    GroupRefusal, MAX_MENTIONS, Mentions, Message, Messages, PeerRelation, Sender, Sent, Target,
    Verdict, direct_conversation, invalid, types::parse_client_msg_id,
};

#[derive(Default)]
pub struct SendCommand {
    pub client_msg_id: String,
    pub to: Option<Target>,
    pub content: Option<Content>,
    pub mentions: Mentions,
    /// Count who reads it (groups only).
    pub receipt: bool,
    /// A reply to this seq of the same conversation (0: none).
    pub reply_to_seq: i64,
    /// A forward of this message (conversation, seq); the content is then the original's.
    pub forward: Option<(String, i64)>,
}

/// One message from the system account to each of many users and groups.
pub struct NoticeCommand {
    pub client_msg_id: String,
    pub users: Vec<i64>,
    pub groups: Vec<i64>,
    pub content: Option<Content>,
}

pub type NoticeTarget = Target;

/// What became of one target of a notice.
#[derive(Debug)]
pub struct NoticeOutcome {
    pub target: NoticeTarget,
    pub result: Result<Sent, Error>,
}

/// Most targets one notice call reaches.
const MAX_NOTICE_TARGETS: usize = 1000;
/// Longest notice `client_msg_id`: the per-target key appends `#<conversation>`.
const MAX_NOTICE_KEY: usize = 40;
/// Targets of one notice stored at once.
const NOTICE_CONCURRENCY: usize = 16;

use imesh_protos::MAX_SEND_BATCH;

/// A send that passed the checks of its own fields, before the idempotency lookup and the
/// gate.
struct Checked {
    sender: Sender,
    client_msg_id: String,
    to: Target,
    /// None for a forward, whose content is the original's.
    content: Option<Content>,
    mentions: Mentions,
    receipt: bool,
    reply_to_seq: i64,
    forward: Option<(String, i64)>,
}

/// A message the gate let through, waiting for its msg_id and seq.
struct Draft {
    message: Message,
    audience: Audience,
}

/// Where one send of a batch stands.
enum Step {
    Checked(Checked),
    Drafted(Draft),
    Done(Result<Sent, Error>),
}

impl Messages {
    /// Stores a message from `sender` and queues its delivery; a repeated
    /// `(sender, client_msg_id)` returns the first send's result and stores nothing.
    pub async fn send(&self, sender: Sender, command: SendCommand) -> Result<Sent, Error> {
        let mut outcomes = self.send_batch(vec![(sender, command)]).await?;
        outcomes.pop().expect("one outcome per send")
    }

    /// Many senders' messages at once (a gateway's batch). Each is checked, answered from an
    /// earlier send, or refused on its own; the rest get msg ids and seqs in the batch's
    /// order and are stored together. Outcomes come in the batch's order; `Err` only when
    /// the batch itself is bad, delivery is too far behind, or a store failed before
    /// anything was written.
    pub async fn send_batch(
        &self,
        sends: Vec<(Sender, SendCommand)>,
    ) -> Result<Vec<Result<Sent, Error>>, Error> {
        if sends.is_empty() || sends.len() > MAX_SEND_BATCH {
            return Err(invalid(
                "sends",
                format!("must hold 1–{MAX_SEND_BATCH} sends"),
            ));
        }
        // Delivery sets the pace: wait while the relay has enough in hand, refuse once it
        // has been behind for too long.
        let behind = self.backlog.behind();
        let patience = self.limits.max_relay_lag.saturating_sub(behind);
        if patience.is_zero() || !self.backlog.room(patience).await {
            return Err(Error::Overloaded(self.backlog.behind()));
        }
        let mut steps: Vec<Step> = sends
            .into_iter()
            .map(|(sender, command)| match self.check(sender, command) {
                Ok(checked) => Step::Checked(checked),
                Err(e) => Step::Done(Err(e)),
            })
            .collect();
        // The retry lookup and the relation check are independent reads: one wait for both.
        let pairs = direct_pairs(&steps);
        let (answered, relations) =
            tokio::join!(self.answer_retries(&mut steps), self.relations(&pairs));
        answered?;
        for step in &mut steps {
            if let Step::Checked(c) = step
                && let Err(limited) = self.rate_check(c)
            {
                *step = Step::Done(Err(limited));
            }
        }
        let steps = self.gate_all(steps, &relations).await;
        let mut outcomes: Vec<Option<Result<Sent, Error>>> = Vec::with_capacity(steps.len());
        let mut ready = Vec::new();
        for step in steps {
            match step {
                Step::Drafted(draft) => {
                    ready.push(draft);
                    outcomes.push(None);
                }
                Step::Done(outcome) => outcomes.push(Some(outcome)),
                Step::Checked(_) => unreachable!("the gate decides every checked send"),
            }
        }
        let mut stored = self.commit(ready).await?.into_iter();
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| stored.next().expect("one outcome per draft")))
            .collect())
    }

    /// The checks of a send's own fields.
    fn check(&self, sender: Sender, command: SendCommand) -> Result<Checked, Error> {
        let client_msg_id = parse_client_msg_id(&command.client_msg_id)?;
        let to = command
            .to
            .ok_or_else(|| invalid("to", "set user_id or group_id"))?;
        let content = match command.forward {
            None => Some(self.checked_content(sender, command.content)?),
            Some(_) if command.content.is_some() => {
                return Err(invalid(
                    "content",
                    "must be empty in a forward (the copy takes the original's)",
                ));
            }
            Some(_) => None,
        };
        if command.reply_to_seq < 0 {
            return Err(invalid("reply_to_seq", "must be a seq, or 0"));
        }
        let mentions = checked_mentions(command.mentions, to)?;
        if command.receipt {
            checked_receipt(sender, to)?;
        }
        Ok(Checked {
            sender,
            client_msg_id,
            to,
            content,
            mentions,
            receipt: command.receipt,
            reply_to_seq: command.reply_to_seq,
            forward: command.forward,
        })
    }

    /// Answers retries of stored sends (one lookup for the batch).
    async fn answer_retries(&self, steps: &mut [Step]) -> Result<(), Error> {
        let keys: Vec<(i64, &str)> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Checked(c) => Some((c.sender.id(), c.client_msg_id.as_str())),
                _ => None,
            })
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let found = self.store.find_sent_many(&keys).await?;
        let checked = steps.iter_mut().filter(|s| matches!(s, Step::Checked(_)));
        for (step, earlier) in checked.zip(found) {
            if let Some(sent) = earlier {
                *step = Step::Done(Ok(Sent {
                    duplicate: true,
                    ..sent
                }));
            }
        }
        Ok(())
    }

    fn rate_check(&self, checked: &Checked) -> Result<(), Error> {
        let Sender::User(user) = checked.sender else {
            return Ok(());
        };
        let group = match checked.to {
            Target::Group(g) => Some(g),
            Target::User(_) => None,
        };
        Ok(self.rates.check(user, group)?)
    }

    /// relation-svc's answer for the batch's direct pairs, in one check.
    async fn relations(
        &self,
        pairs: &[(i64, i64)],
    ) -> anyhow::Result<HashMap<(i64, i64), PeerRelation>> {
        if pairs.is_empty() {
            return Ok(HashMap::new());
        }
        let found = self.peers.relations.relations(pairs).await?;
        Ok(pairs.iter().copied().zip(found).collect())
    }

    /// Gates every checked send: the direct ones by `relations` (the batch's one relation
    /// check), the others one by one, concurrently.
    async fn gate_all(
        &self,
        steps: Vec<Step>,
        relations: &anyhow::Result<HashMap<(i64, i64), PeerRelation>>,
    ) -> Vec<Step> {
        join_all(steps.into_iter().map(|step| async move {
            let Step::Checked(checked) = step else {
                return step;
            };
            match self.draft(checked, relations).await {
                Ok(draft) => Step::Drafted(draft),
                Err(e) => Step::Done(Err(e)),
            }
        }))
        .await
    }

    /// The gate's decision on one send, as a message ready for its seq.
    async fn draft(
        &self,
        checked: Checked,
        relations: &anyhow::Result<HashMap<(i64, i64), PeerRelation>>,
    ) -> Result<Draft, Error> {
        let Checked {
            sender,
            client_msg_id,
            to,
            content,
            mentions,
            receipt,
            reply_to_seq,
            forward,
        } = checked;
        let (conversation, gated) = self.gate(sender, to, &mentions, relations).await?;
        let (content, forwarded) = match (content, forward) {
            (Some(content), _) => (content, None),
            (None, Some((source, seq))) => self.forwarded(sender, &source, seq).await?,
            (None, None) => return Err(invalid("content", "must be set")),
        };
        let reply = match reply_to_seq {
            0 => None,
            seq => Some(self.quoted(sender, &conversation, seq).await?),
        };
        let mut message = compose(sender, client_msg_id, conversation, content, mentions);
        message.reply = reply;
        message.forwarded = forwarded;
        if let Sender::User(_) = sender {
            self.before_send(&mut message).await?;
        }
        if message.forwarded.is_none() {
            // A forward's objects were checked when the original was sent.
            self.check_objects(sender, &message.content, &[]).await?;
        }
        if receipt {
            message.receipt_bound = self.receipt_bound(&gated)?;
        }
        Ok(Draft {
            message,
            audience: gated.audience,
        })
    }

    /// Asks the app server's before-send hook, if one is set, about a user's message: it
    /// may let it through, refuse it, or replace its content.
    async fn before_send(&self, message: &mut Message) -> Result<(), Error> {
        let Some(hook) = &self.peers.before_send else {
            return Ok(());
        };
        match hook.hook.check(message).await {
            Ok(Verdict::Allow) => Ok(()),
            Ok(Verdict::Reject(reason)) => Err(Error::HookRefused(reason)),
            Ok(Verdict::Replace(content)) => {
                let sender = Sender::User(message.sender_id);
                message.content = self.checked_content(sender, Some(content))?;
                Ok(())
            }
            Err(e) if hook.fail_open => {
                tracing::warn!(error = %format!("{e:#}"), "before-send hook failed; sending anyway (fail open)");
                Ok(())
            }
            Err(e) => Err(Error::HookUnavailable(e)),
        }
    }

    /// The map bound a receipt message records, when its group is small enough to count.
    fn receipt_bound(&self, gated: &Gated) -> Result<u32, Error> {
        let max = self.limits.receipt_max_members;
        if matches!(gated.audience, Audience::Group(_)) || gated.member_count > max {
            return Err(Error::GroupRefused(
                GroupRefusal::Precondition,
                format!(
                    "receipt: read receipts are for groups of up to {max} members; larger groups show read watermarks only"
                ),
            ));
        }
        Ok(gated.map_bound)
    }

    /// Sends `command.content` from the system account to every target, each on its own:
    /// one target's refusal leaves the others stored. Outcomes come users first, in order.
    pub async fn send_notice(&self, command: NoticeCommand) -> Result<Vec<NoticeOutcome>, Error> {
        let key = &command.client_msg_id;
        if key.len() > MAX_NOTICE_KEY {
            return Err(invalid(
                "client_msg_id",
                format!("must be at most {MAX_NOTICE_KEY} characters"),
            ));
        }
        parse_client_msg_id(key)?;
        let targets: Vec<Target> = dedup(&command.users)
            .map(Target::User)
            .chain(dedup(&command.groups).map(Target::Group))
            .collect();
        if targets.is_empty() || targets.len() > MAX_NOTICE_TARGETS {
            return Err(invalid(
                "user_ids",
                format!("user_ids and group_ids must hold 1–{MAX_NOTICE_TARGETS} targets"),
            ));
        }
        if let Some(bad) = targets.iter().find(|t| target_id(**t) <= 0) {
            let field = if matches!(bad, Target::User(_)) {
                "user_ids"
            } else {
                "group_ids"
            };
            return Err(invalid(field, "must be ids"));
        }
        let content = self.checked_content(Sender::System, command.content)?;
        let users: Vec<i64> = targets
            .iter()
            .filter_map(|t| match t {
                Target::User(u) => Some(*u),
                Target::Group(_) => None,
            })
            .collect();
        let existing: HashSet<i64> = if users.is_empty() {
            HashSet::new()
        } else {
            let found = self.peers.relations.existing(&users).await;
            found.map_err(Error::Directory)?.into_iter().collect()
        };
        let outcomes = stream::iter(targets)
            .map(|target| {
                let content = content.clone();
                let existing = &existing;
                async move {
                    let result = match target {
                        Target::User(u) if !existing.contains(&u) => Err(Error::UnknownUser(u)),
                        _ => self.notice_one(key, target, content).await,
                    };
                    NoticeOutcome { target, result }
                }
            })
            .buffered(NOTICE_CONCURRENCY)
            .collect()
            .await;
        Ok(outcomes)
    }

    async fn notice_one(&self, key: &str, target: Target, content: Content) -> Result<Sent, Error> {
        let conversation = match target {
            Target::User(u) => Conversation::Notices(u),
            Target::Group(g) => Conversation::Group(g),
        };
        let key = format!("{key}#{}", conversation.id());
        if let Some(sent) = self.earlier(Sender::System.id(), &key).await? {
            return Ok(sent);
        }
        let audience = match target {
            Target::User(u) => Audience::Users(vec![u]),
            Target::Group(g) => self.group_audience(g, Sender::System, 0).await?.audience,
        };
        let message = compose(
            Sender::System,
            key,
            conversation.id(),
            content,
            Mentions::default(),
        );
        let mut stored = self.commit(vec![Draft { message, audience }]).await?;
        stored.pop().expect("one outcome per draft")
    }

    pub(super) fn checked_content(
        &self,
        sender: Sender,
        content: Option<Content>,
    ) -> Result<Content, Error> {
        let content = content.ok_or_else(|| invalid("content", "must be set"))?;
        content.validate(self.limits.max_content_bytes)?;
        if content.is_notice() && sender != Sender::System {
            return Err(Error::NoticeForbidden);
        }
        Ok(content)
    }

    /// The stored answer to an earlier send with this key, marked as a duplicate.
    async fn earlier(&self, sender_id: i64, client_msg_id: &str) -> Result<Option<Sent>, Error> {
        let found = self.store.find_sent(sender_id, client_msg_id).await?;
        Ok(found.map(|sent| Sent {
            duplicate: true,
            ..sent
        }))
    }

    /// Gives each draft, in order, its msg id and conversation seq (a conversation's
    /// drafts get increasing seqs in the order given), then stores them with their outbox
    /// events through the group commit. A draft whose key a concurrent retry took is
    /// answered with that retry's result.
    async fn commit(&self, drafts: Vec<Draft>) -> Result<Vec<Result<Sent, Error>>, Error> {
        if drafts.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = drafts
            .iter()
            .map(|d| crate::keys::conversation_seq(&d.message.conversation_id))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        // Ids before seqs: a process that may not mint ids takes no seq it cannot use.
        let msg_ids = (0..drafts.len())
            .map(|_| self.ids.next_id())
            .collect::<Result<Vec<i64>, StoreError>>()?;
        let numbering = self.numbering.lock().await;
        let seqs = self.seqs.next_many(&keys).await?;
        let appends: Vec<(Message, OutboxRow)> = drafts
            .into_iter()
            .zip(seqs.into_iter().zip(msg_ids))
            .map(
                |(
                    Draft {
                        mut message,
                        audience,
                    },
                    (seq, msg_id),
                )| {
                    message.msg_id = msg_id;
                    message.seq = seq;
                    message.server_time_ms = imesh_kit::ids::unix_ms();
                    let event = OutboxRow {
                        id: message.msg_id,
                        payload: (self.encode.message)(&message, &audience),
                    };
                    (message, event)
                },
            )
            .collect();
        // The store hands what it committed to the relay.
        let queued = self.store.append_many(&appends).await;
        drop(numbering);
        let written = queued.outcomes().await;
        let mut outcomes = Vec::with_capacity(appends.len());
        for ((message, _), result) in appends.iter().zip(written) {
            outcomes.push(match result {
                Ok(()) => Ok(Sent::of(message)),
                // A concurrent retry of the same send won the race: answer with its result
                // (a failed lookup fails this send only: the others are stored).
                Err(StoreError::Conflict(_)) => self
                    .earlier(message.sender_id, &message.client_msg_id)
                    .await
                    .and_then(|found| {
                        found.ok_or_else(|| StoreError::Conflict("message".into()).into())
                    }),
                Err(e) => Err(e.into()),
            });
        }
        Ok(outcomes)
    }

    /// Decides whether `sender` may write to `to`; returns the conversation and audience.
    /// `relations` holds relation-svc's answer for the batch's direct pairs.
    async fn gate(
        &self,
        sender: Sender,
        to: Target,
        mentions: &Mentions,
        relations: &anyhow::Result<HashMap<(i64, i64), PeerRelation>>,
    ) -> Result<(ConversationId, Gated), Error> {
        match (to, sender) {
            (Target::User(peer), _) if peer <= 0 => Err(invalid("user_id", "must be a user id")),
            (Target::Group(group), _) if group <= 0 => {
                Err(invalid("group_id", "must be a group id"))
            }
            (Target::User(peer), Sender::System) => {
                let found = self.peers.relations.existing(&[peer]).await;
                if found.map_err(Error::Directory)?.is_empty() {
                    return Err(Error::UnknownUser(peer));
                }
                Ok((Conversation::Notices(peer).id(), Gated::direct(vec![peer])))
            }
            (Target::User(peer), Sender::User(me)) => {
                if peer == me {
                    return Err(invalid("user_id", "cannot message yourself"));
                }
                let relation = match relations {
                    Ok(found) => found.get(&(me, peer)).copied().ok_or_else(|| {
                        Error::Directory(anyhow::anyhow!("relation-svc left out ({me}, {peer})"))
                    })?,
                    Err(e) => return Err(Error::Directory(anyhow::anyhow!("{e:#}"))),
                };
                self.allowed(peer, relation)?;
                Ok((direct_conversation(me, peer), Gated::direct(vec![me, peer])))
            }
            (Target::Group(group), _) => {
                let needs = if mentions.all { AT_ALL } else { 0 };
                let gated = self.group_audience(group, sender, needs).await?;
                self.check_mentioned(group, sender, &gated.audience, &mentions.users)
                    .await?;
                Ok((Conversation::Group(group).id(), gated))
            }
        }
    }

    /// Every mentioned user must be a member.
    async fn check_mentioned(
        &self,
        group: i64,
        sender: Sender,
        audience: &Audience,
        mentioned: &[i64],
    ) -> Result<(), Error> {
        if mentioned.is_empty() {
            return Ok(());
        }
        let members: HashSet<i64> = match audience {
            Audience::Users(users) => users.iter().copied().collect(),
            Audience::Group(_) => {
                let found = self.peers.groups.members_among(group, sender, mentioned);
                let found = found.await;
                found.map_err(Error::Directory)?.into_iter().collect()
            }
        };
        match mentioned.iter().find(|u| !members.contains(u)) {
            Some(stranger) => Err(invalid(
                "mentioned_user_ids",
                format!("user {stranger} is not a member of this group"),
            )),
            None => Ok(()),
        }
    }

    async fn group_audience(&self, group: i64, sender: Sender, needs: u32) -> Result<Gated, Error> {
        self.peers
            .groups
            .recipients(group, sender, needs)
            .await
            .map_err(Error::Directory)?
            .map_err(|(why, message)| Error::GroupRefused(why, message))
    }

    /// The direct-send rules: the peer exists, neither blocked the other, and the policy.
    fn allowed(&self, peer: i64, relation: PeerRelation) -> Result<(), Error> {
        if !relation.exists {
            return Err(Error::UnknownUser(peer));
        }
        if relation.peer_blocked_sender {
            return Err(Error::Refused("this user does not accept your messages"));
        }
        if relation.sender_blocked_peer {
            return Err(Error::Refused(
                "you blocked this user; unblock them to send",
            ));
        }
        if self.limits.direct_policy == DirectPolicy::FriendsOnly && !relation.peer_lists_sender {
            return Err(Error::Refused("only friends may message this user"));
        }
        Ok(())
    }
}

/// Only members' group messages ask for read receipts.
fn checked_receipt(sender: Sender, to: Target) -> Result<(), Error> {
    let refusal = match (sender, to) {
        (_, Target::User(_)) => {
            "only group messages ask for read receipts; direct ones show the peer's read_seq"
        }
        (Sender::System, _) => "the system account has no receipts: it is not a member",
        (Sender::User(_), Target::Group(_)) => return Ok(()),
    };
    Err(invalid("receipt", refusal))
}

/// Mentions deduplicated and bounded; only group messages mention anyone.
fn checked_mentions(mut mentions: Mentions, to: Target) -> Result<Mentions, Error> {
    if mentions.is_empty() {
        return Ok(mentions);
    }
    if matches!(to, Target::User(_)) {
        return Err(invalid(
            "mentioned_user_ids",
            "only group messages mention members",
        ));
    }
    mentions.users.sort_unstable();
    mentions.users.dedup();
    if mentions.users.len() > MAX_MENTIONS {
        return Err(invalid(
            "mentioned_user_ids",
            format!("at most {MAX_MENTIONS} users"),
        ));
    }
    if mentions.users.iter().any(|u| *u <= 0) {
        return Err(invalid("mentioned_user_ids", "must be user ids"));
    }
    Ok(mentions)
}

fn target_id(target: Target) -> i64 {
    match target {
        Target::User(id) | Target::Group(id) => id,
    }
}

/// The ids in their first order, each once.
fn dedup(ids: &[i64]) -> impl Iterator<Item = i64> + '_ {
    let mut seen = HashSet::new();
    ids.iter().copied().filter(move |id| seen.insert(*id))
}

/// A message before the commit gives it a msg id and seq.
fn compose(
    sender: Sender,
    client_msg_id: String,
    conversation_id: ConversationId,
    content: Content,
    mentions: Mentions,
) -> Message {
    Message {
        msg_id: 0,
        conversation_id,
        seq: 0,
        sender_id: sender.id(),
        client_msg_id,
        content,
        mentions,
        receipt_bound: 0,
        server_time_ms: 0,
        recalled_by: 0,
        recalled_at_ms: 0,
        version: 1,
        edited_at_ms: 0,
        reply: None,
        forwarded: None,
        reactions: Vec::new(),
    }
}

/// The (sender, peer) pairs of the checked direct sends, for the batch's relation check.
fn direct_pairs(steps: &[Step]) -> Vec<(i64, i64)> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Checked(Checked {
                sender: Sender::User(me),
                to: Target::User(peer),
                ..
            }) if *peer > 0 && peer != me => Some((*me, *peer)),
            _ => None,
        })
        .collect()
}
