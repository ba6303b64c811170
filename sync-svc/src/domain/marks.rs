//! What a batch of appended events does to conversation state, decided before any store
//! writes it: the stores turn a [`MarkPlan`] into their statements.

use std::collections::HashMap;

use super::{Change, StoredEvent};

/// A conversation's newest message in the batch, and its latest @all.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Latest<'a> {
    pub seq: i64,
    pub time_ms: i64,
    /// The newest message's encoded event (the list's preview).
    pub payload: &'a [u8],
    /// 0, or the newest seq that mentioned everyone.
    pub mention_all_seq: i64,
}

/// The state changes of one batch of events.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MarkPlan<'a> {
    /// Per conversation.
    pub latest: HashMap<&'a str, Latest<'a>>,
    /// `(user, conversation)` → the read seq a read state starts at if it does not exist
    /// yet: just below the first message it receives (its recipients and, under read
    /// fanout, which writes no entries, its mentioned members).
    pub starts: HashMap<(i64, &'a str), i64>,
    /// `(user, conversation)` → (read seq, mention seq) to raise to: a sender has read
    /// their own message; a mentioned user is mentioned up to it.
    pub raised: HashMap<(i64, &'a str), (i64, i64)>,
    /// `(conversation, seq, recalled by, at ms)`: shown as recalled if still the latest.
    pub recalls: Vec<(&'a str, i64, i64, i64)>,
    /// `(conversation, seq, encoded event)`: shown as edited if still the latest.
    pub edits: Vec<(&'a str, i64, &'a [u8])>,
}

/// The state changes of `events`, in any order: every value only ever rises.
pub fn plan(events: &[StoredEvent]) -> MarkPlan<'_> {
    let mut plan = MarkPlan::default();
    for event in events {
        let Some(mark) = &event.mark else { continue };
        let conversation = mark.conversation_id.as_str();
        match &mark.change {
            Change::Message {
                sender,
                time_ms,
                mentioned,
                mention_all,
                ..
            } => {
                let newest = plan.latest.entry(conversation).or_default();
                if mark.seq > newest.seq {
                    (newest.seq, newest.time_ms) = (mark.seq, *time_ms);
                    newest.payload = &event.payload;
                }
                if *mention_all {
                    newest.mention_all_seq = newest.mention_all_seq.max(mark.seq);
                }
                for user in event.recipients.iter().chain(mentioned) {
                    let start = plan.starts.entry((*user, conversation)).or_insert(i64::MAX);
                    *start = (*start).min(mark.seq - 1);
                }
                let mut raise = |user: i64, read: i64, mention: i64| {
                    let entry = plan.raised.entry((user, conversation)).or_insert((0, 0));
                    *entry = (entry.0.max(read), entry.1.max(mention));
                };
                if *sender > 0 {
                    raise(*sender, mark.seq, 0);
                }
                for user in mentioned {
                    raise(*user, 0, mark.seq);
                }
            }
            Change::Recall { by, at_ms } => {
                plan.recalls.push((conversation, mark.seq, *by, *at_ms));
            }
            Change::Edit { event } => plan.edits.push((conversation, mark.seq, event)),
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::domain::Mark;

    fn message(seq: i64, sender: i64, recipients: &[i64], mentioned: &[i64]) -> StoredEvent {
        StoredEvent {
            id: seq,
            event_id: format!("m{seq}"),
            payload: Bytes::from(format!("event {seq}")),
            recipients: recipients.to_vec(),
            mark: Some(Mark {
                conversation_id: "g:1".into(),
                seq,
                change: Change::Message {
                    sender,
                    time_ms: seq * 10,
                    mentioned: mentioned.to_vec(),
                    mention_all: seq == 5,
                    receipt_bound: 0,
                },
            }),
            hook: None,
        }
    }

    #[test]
    fn a_batch_keeps_the_newest_message_and_raises_senders_and_mentions_in_any_order() {
        // Out of order, as concurrent relays may hand them over; 7 has no entries but
        // mentions 4 (read fanout).
        let events = [
            message(6, 2, &[1, 2, 3], &[]),
            message(5, 1, &[1, 2, 3], &[3]),
            message(7, 3, &[], &[4]),
        ];
        let plan = plan(&events);
        assert_eq!(
            plan.latest["g:1"],
            Latest {
                seq: 7,
                time_ms: 70,
                payload: b"event 7",
                mention_all_seq: 5,
            }
        );
        let starts: HashMap<i64, i64> = plan.starts.iter().map(|((u, _), s)| (*u, *s)).collect();
        assert_eq!(starts, HashMap::from([(1, 4), (2, 4), (3, 4), (4, 6)]));
        let raised: HashMap<i64, (i64, i64)> =
            plan.raised.iter().map(|((u, _), r)| (*u, *r)).collect();
        assert_eq!(
            raised,
            HashMap::from([(1, (5, 0)), (2, (6, 0)), (3, (7, 5)), (4, (0, 7))])
        );
    }

    #[test]
    fn recalls_and_edits_are_passed_on_and_the_system_account_reads_nothing() {
        let mut notice = message(1, 0, &[1], &[]);
        notice.mark.as_mut().unwrap().seq = 1;
        let recall = StoredEvent {
            mark: Some(Mark {
                conversation_id: "g:1".into(),
                seq: 1,
                change: Change::Recall { by: 9, at_ms: 99 },
            }),
            ..message(2, 0, &[], &[])
        };
        let edit = StoredEvent {
            mark: Some(Mark {
                conversation_id: "g:1".into(),
                seq: 1,
                change: Change::Edit {
                    event: Bytes::from_static(b"edited"),
                },
            }),
            ..message(3, 0, &[], &[])
        };
        let events = [notice, recall, edit];
        let plan = plan(&events);
        assert!(plan.raised.is_empty(), "{:?}", plan.raised);
        assert_eq!(plan.recalls, vec![("g:1", 1, 9, 99)]);
        assert_eq!(plan.edits, vec![("g:1", 1, &b"edited"[..])]);
    }
}
