//! Timeline notices: the group changes members see in the conversation itself ("members
//! joined", "the group info changed"), written by message-svc as the system account. The
//! outbox relay sends each change's notice after its sync event, so a crash between the
//! change and the call loses nothing; message-svc keys each notice on the group's version,
//! so the relay's retries store it once.

use std::sync::{Arc, OnceLock};

use imesh_kit::grpc::{self, Keyed};
use imesh_kit::{
    identity::{Actor, Caller},
    outbox::{OutboxRow, Sink, SyncSink},
};
use imesh_protos::{
    group::{GroupChanged, GroupType},
    message::{
        Content, Notice, SendNoticeRequest, content, message_service_client::MessageServiceClient,
    },
    sync::{Fanout, sync_event::Kind},
};
use prost::Message as _;

use crate::domain::Gate;

/// The relay's sink: the changed groups forgotten by the gate, then sync-svc, then the
/// timeline notice of each change that has one.
pub struct TimelineSink {
    sync: SyncSink,
    /// message-svc's replicas: each notice goes to the one owning its group's
    /// conversation, the one the group's sends go to, so they share one order.
    messages: Keyed,
    caller: Caller,
    gate: Arc<OnceLock<Arc<Gate>>>,
}

impl TimelineSink {
    /// `gate` is set once the gate is built (it is built over the store this sink's relay
    /// serves).
    pub fn new(
        sync: SyncSink,
        messages: Keyed,
        caller: Caller,
        gate: Arc<OnceLock<Arc<Gate>>>,
    ) -> Self {
        Self {
            sync,
            messages,
            caller,
            gate,
        }
    }
}

#[async_trait::async_trait]
impl Sink for TimelineSink {
    async fn deliver(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        // The handler forgets a changed group after its commit, and the relay may deliver
        // the change before that: nobody may see a change (a kick's notice, say) while
        // the gate can still answer with the members before it.
        if let Some(gate) = self.gate.get() {
            let mut groups: Vec<i64> = rows
                .iter()
                .filter_map(|row| group_change(&row.payload))
                .filter_map(|changed| changed.group.map(|g| g.group_id))
                .collect();
            groups.sort_unstable();
            groups.dedup();
            for group_id in groups {
                gate.forget(group_id).await;
            }
        }
        self.sync.deliver(rows).await?;
        for row in rows {
            let Some(request) = notice_of(&row.payload) else {
                continue;
            };
            let replica = self.messages.owner(grpc::group_key(request.group_ids[0]));
            let reply = MessageServiceClient::new(replica.channel.clone())
                .send_notice(self.caller.request(Actor::System, request))
                .await
                .inspect_err(|status| {
                    // The relay tries again, then with the next replica.
                    self.messages.unreachable(&replica, status);
                })?;
            for refused in reply
                .into_inner()
                .results
                .iter()
                .filter(|r| r.sent.is_none())
            {
                // A dismissed or vanished group takes no notice; retrying will not change that.
                tracing::info!(code = refused.code, error = %refused.error, "timeline notice not stored");
            }
        }
        Ok(())
    }
}

/// The group change an outbox row carries, if it carries one.
fn group_change(payload: &[u8]) -> Option<GroupChanged> {
    match Fanout::decode(payload).ok()?.event?.kind? {
        Kind::Group(changed) => Some(changed),
        _ => None,
    }
}

/// The notice a group change shows in the conversation, if it shows one. Personal changes
/// (a member's mute, alias) and join requests do not; super groups skip members coming and
/// going, which would drown their conversation.
pub fn notice_of(payload: &[u8]) -> Option<SendNoticeRequest> {
    let GroupChanged {
        group,
        op,
        operator_id,
        members,
    } = group_change(payload)?;
    let group = group?;
    let churn = matches!(op.as_str(), "invited" | "joined" | "quit" | "kicked");
    if churn && group.r#type() == GroupType::Super {
        return None;
    }
    let text = match op.as_str() {
        "created" => "The group was created",
        "invited" => "New members were added",
        "joined" => "A new member joined",
        "quit" => "A member left",
        "kicked" => "Members were removed",
        "admin" => "The admins changed",
        "owner" => "The group has a new owner",
        "mute_all" if group.mute_all => "Only admins can send messages now",
        "mute_all" => "Everyone can send messages again",
        "updated" => "The group info changed",
        _ => return None,
    };
    let user_ids: Vec<i64> = members.iter().map(|m| m.user_id).collect();
    let details = serde_json::json!({ "operator_id": operator_id, "user_ids": user_ids });
    Some(SendNoticeRequest {
        client_msg_id: format!("grp:{}:{}", group.group_id, group.version),
        user_ids: vec![],
        group_ids: vec![group.group_id],
        content: Some(Content {
            kind: Some(content::Kind::Notice(Notice {
                code: format!("group.{op}"),
                text: text.into(),
                json: details.to_string(),
            })),
        }),
    })
}

#[cfg(test)]
mod tests {
    use imesh_protos::{
        group::{Group, Member},
        sync::SyncEvent,
    };

    use super::*;

    fn change(op: &str, kind: GroupType) -> Vec<u8> {
        let changed = GroupChanged {
            group: Some(Group {
                group_id: 7,
                version: 3,
                r#type: kind as i32,
                ..Group::default()
            }),
            op: op.into(),
            operator_id: 1,
            members: vec![Member {
                user_id: 2,
                ..Member::default()
            }],
        };
        Fanout {
            event: Some(SyncEvent {
                kind: Some(Kind::Group(changed)),
            }),
            ..Fanout::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn group_wide_changes_become_notices_keyed_on_the_version() {
        let notice = notice_of(&change("joined", GroupType::Normal)).unwrap();
        assert_eq!(
            (notice.client_msg_id.as_str(), notice.group_ids.as_slice()),
            ("grp:7:3", &[7][..])
        );
        let Some(content::Kind::Notice(n)) = notice.content.and_then(|c| c.kind) else {
            panic!("not a notice")
        };
        assert_eq!(n.code, "group.joined");
        let details: serde_json::Value = serde_json::from_str(&n.json).unwrap();
        assert_eq!(details["user_ids"], serde_json::json!([2]));
    }

    #[test]
    fn personal_changes_and_super_group_churn_show_nothing() {
        for op in ["muted", "alias", "join_requested", "dismissed"] {
            assert!(notice_of(&change(op, GroupType::Normal)).is_none(), "{op}");
        }
        assert!(notice_of(&change("joined", GroupType::Super)).is_none());
        assert!(notice_of(&change("updated", GroupType::Super)).is_some());
    }
}
