//! The 100,000-member super group end to end: 100,000 memberships imported (the most a
//! super group holds: one more is refused), 1,000 of the members online through real
//! gateway connections. Messages sent while members quit and others join reach every
//! online member as a live hint and can be fetched; a member who joined late and never
//! connected catches up (`History { after_seq }`) with exactly what its `join_seq`
//! allows; member pages, search and the most active members answer over the whole group;
//! `member_count` stays exact through the quits and joins.

use std::collections::HashSet;

use futures::{StreamExt as _, stream};
use imesh_kit::grpc::Channel;
use imesh_kit::identity::Actor;
use imesh_protos::{
    gateway::server_frame::Body,
    group::{
        ActiveMembersRequest, CreateGroupRequest, GetGroupRequest, GetMembersRequest, GroupType,
        ImportMembersRequest, JoinGroupRequest, JoinMode, ListMembersRequest, QuitGroupRequest,
        RecountMembersRequest, SearchMembersRequest, group_service_client::GroupServiceClient,
    },
    message::{
        Content, HistoryRequest, SendRequest, Text, content,
        message_service_client::MessageServiceClient, send_request::To,
    },
    sync::sync_event::Kind,
};
use imesh_tests::{Device, Stores, TestCluster};

const MEMBERS: usize = 100_000;
const ONLINE: usize = 1_000;
/// Online members who quit while messages are sent, then users who join while more are.
const QUITTERS: usize = 60;
const JOINERS: usize = 50;
/// Most members one ImportMembers call takes.
const IMPORT_CHUNK: usize = 10_000;

fn text(text: &str) -> Option<Content> {
    Some(Content {
        kind: Some(content::Kind::Text(Text { text: text.into() })),
    })
}

struct Group {
    env: TestCluster,
    id: i64,
    groups: GroupServiceClient<Channel>,
    messages: MessageServiceClient<Channel>,
}

impl Group {
    fn conversation(&self) -> String {
        format!("g:{}", self.id)
    }

    /// Sends `body` to the group as `user`; its seq.
    async fn send(&self, user: i64, client_msg_id: &str, body: &str) -> i64 {
        let send = SendRequest {
            client_msg_id: client_msg_id.into(),
            to: Some(To::GroupId(self.id)),
            content: text(body),
            ..SendRequest::default()
        };
        let caller = &self.env.caller;
        self.messages
            .clone()
            .send(caller.request(Actor::User(user), send))
            .await
            .expect("sent")
            .into_inner()
            .seq
    }

    /// Every seq `user` may read, oldest first: history pages from the newest back.
    async fn readable_seqs(&self, user: i64) -> Vec<i64> {
        let mut seqs = self
            .history_seqs(user, 0, 100, |page, oldest| page.before_seq = oldest)
            .await;
        seqs.reverse();
        seqs
    }

    /// What `user` catches up with from `after_seq`: `History { after_seq }` pages, oldest
    /// first, until the last.
    async fn catch_up(&self, user: i64, after_seq: i64) -> Vec<i64> {
        self.history_seqs(user, after_seq, 2, |page, newest| page.after_seq = newest)
            .await
    }

    /// The seqs of `user`'s history pages of `limit`, in the order read, each page asked
    /// after the last seq of the one before (`next`) while there are more.
    async fn history_seqs(
        &self,
        user: i64,
        after_seq: i64,
        limit: u32,
        next: impl Fn(&mut HistoryRequest, i64),
    ) -> Vec<i64> {
        let mut request = HistoryRequest {
            conversation_id: self.conversation(),
            after_seq,
            limit,
            ..HistoryRequest::default()
        };
        let mut seqs = Vec::new();
        loop {
            let page = self
                .messages
                .clone()
                .history(self.env.caller.request(Actor::User(user), request.clone()))
                .await
                .expect("history")
                .into_inner();
            seqs.extend(page.messages.iter().map(|m| m.seq));
            match page.messages.last() {
                Some(last) if page.has_more => next(&mut request, last.seq),
                _ => return seqs,
            }
        }
    }

    async fn member_count(&self) -> u32 {
        let get = GetGroupRequest { group_id: self.id };
        self.groups
            .clone()
            .get_group(self.env.caller.request(Actor::System, get))
            .await
            .expect("group")
            .into_inner()
            .group
            .expect("the group")
            .member_count
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_thousand_member_group_reaches_its_online_members_and_keeps_its_count() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start_with(stores, |spec| {
        // A thousand devices connect from one address within a second or two.
        spec.gateway.admission.connects_per_addr_per_sec = 0;
    })
    .await;
    let (owner, _) = env.admin_user("owner").await;
    let users: Vec<(i64, String)> = stream::iter(0..ONLINE + JOINERS + 1)
        .map(|i| {
            let env = &env;
            async move { env.admin_user(&format!("member{i:04}")).await }
        })
        .buffered(32)
        .collect()
        .await;
    let (online, rest) = users.split_at(ONLINE);
    let (joiners, late) = rest.split_at(JOINERS);
    let (late, _) = late[0];
    let create = CreateGroupRequest {
        name: "all hands".into(),
        r#type: GroupType::Super as i32,
        join_mode: JoinMode::Free as i32,
        ..Default::default()
    };
    let group = Group {
        id: env.create_group(owner, create).await,
        groups: GroupServiceClient::new(env.channel(env.cluster.addrs.group)),
        messages: MessageServiceClient::new(env.channel(env.cluster.addrs.message)),
        env,
    };
    let env = &group.env;

    // The online users and synthetic ids (never users of the cluster, far below its
    // snowflake ids) up to 100,000 members with the owner, in calls of 10,000.
    let synthetic = (MEMBERS - 1 - ONLINE) as i64;
    let imported: Vec<i64> = online
        .iter()
        .map(|(u, _)| *u)
        .chain(1..=synthetic)
        .collect();
    let mut added = 0;
    for chunk in imported.chunks(IMPORT_CHUNK) {
        let import = ImportMembersRequest {
            group_id: group.id,
            user_ids: chunk.to_vec(),
        };
        added += group
            .groups
            .clone()
            .import_members(env.caller.request(Actor::System, import))
            .await
            .expect("imported")
            .into_inner()
            .added;
    }
    assert_eq!(added as usize, MEMBERS - 1, "{stores:?}");
    assert_eq!(group.member_count().await as usize, MEMBERS, "{stores:?}");

    // A thousand members online; each device follows the group once it has answered.
    let mut devices: Vec<Device> = stream::iter(online)
        .map(|(_, token)| async move {
            let mut device = env.signed_in(token, "phone").await;
            assert!(matches!(device.ping().await, Body::Pong(_)));
            device
        })
        .buffered(32)
        .collect()
        .await;

    let join = JoinGroupRequest {
        group_id: group.id,
        message: String::new(),
    };
    let join_as = |user: i64| {
        let mut groups = group.groups.clone();
        let join = join.clone();
        async move {
            groups
                .join_group(env.caller.request(Actor::User(user), join))
                .await
                .map(|joined| joined.into_inner())
        }
    };
    let full = join_as(late)
        .await
        .expect_err("a join past 100,000 members");
    assert_eq!(full.code(), tonic::Code::FailedPrecondition, "{full:?}");

    // Members quit while messages are sent.
    let quits = online[ONLINE - QUITTERS..].iter().map(|(user, _)| {
        let quit = QuitGroupRequest { group_id: group.id };
        let mut groups = group.groups.clone();
        async move {
            groups
                .quit_group(env.caller.request(Actor::User(*user), quit))
                .await
                .expect("quit")
        }
    });
    let sends = async {
        for i in 0..3 {
            group
                .send(owner, &format!("before-{i}"), "before you joined")
                .await;
        }
    };
    futures::future::join(futures::future::join_all(quits), sends).await;

    // The late member joins; its history starts after what was sent so far. Others join
    // while more messages are sent.
    let joined = join_as(late).await.expect("the late member joins");
    let join_seq = joined.member.expect("a member at once").join_seq;
    let joins = joiners
        .iter()
        .map(|(user, _)| async { join_as(*user).await.expect("joined") });
    let sends = async {
        let mut last = 0;
        for i in 0..3 {
            last = group
                .send(owner, &format!("during-{i}"), &format!("message {i}"))
                .await;
        }
        last
    };
    let (_, last) = futures::future::join(futures::future::join_all(joins), sends).await;

    // Every member still online hears that the conversation reached the last seq, and
    // fetches the last message.
    let conversation = group.conversation();
    let staying = &mut devices[..ONLINE - QUITTERS];
    futures::future::join_all(staying.iter_mut().map(|device| {
        let conversation = conversation.clone();
        async move {
            device
                .pushed(|kind| match kind {
                    Kind::Advanced(hint)
                        if hint.conversation_id == conversation && hint.latest_seq >= last =>
                    {
                        Some(())
                    }
                    Kind::Message(m) if m.conversation_id == conversation => {
                        panic!("a super group message was pushed whole: {m:?}")
                    }
                    _ => None,
                })
                .await;
            let page = device
                .history_page(HistoryRequest {
                    conversation_id: conversation.clone(),
                    after_seq: last - 1,
                    ..HistoryRequest::default()
                })
                .await;
            let seqs: Vec<i64> = page.messages.iter().map(|m| m.seq).collect();
            assert_eq!(seqs, vec![last]);
        }
    }))
    .await;

    // The late member, never connected, reads exactly what came after its join.
    let everything = group.readable_seqs(owner).await;
    let visible: Vec<i64> = everything
        .iter()
        .copied()
        .filter(|seq| *seq > join_seq)
        .collect();
    assert!(
        everything.iter().any(|seq| *seq <= join_seq) && visible.contains(&last),
        "{stores:?}: join_seq {join_seq} in {everything:?}"
    );
    assert_eq!(group.readable_seqs(late).await, visible, "{stores:?}");
    assert_eq!(
        group.catch_up(late, 1).await,
        visible,
        "{stores:?}: catching up from before its join starts at join_seq"
    );
    assert_eq!(group.catch_up(late, join_seq).await, visible, "{stores:?}");

    // member_count is exact through the churn, and a recount agrees with it.
    let expected = MEMBERS - QUITTERS + JOINERS + 1;
    assert_eq!(group.member_count().await as usize, expected, "{stores:?}");
    let recount = RecountMembersRequest { group_id: group.id };
    let counted = group
        .groups
        .clone()
        .recount_members(env.caller.request(Actor::System, recount))
        .await
        .expect("recounted")
        .into_inner();
    assert_eq!(
        (counted.stored as usize, counted.counted as usize),
        (expected, expected),
        "{stores:?}"
    );

    // Member pages walk the whole group once, in map-id order.
    let reader = Actor::User(online[0].0);
    let mut seen = HashSet::new();
    let mut last_map_id = None;
    let mut cursor = 0;
    loop {
        let list = ListMembersRequest {
            group_id: group.id,
            cursor,
            limit: 500,
        };
        let page = group
            .groups
            .clone()
            .list_members(env.caller.request(reader, list))
            .await
            .expect("a member page")
            .into_inner();
        for member in &page.members {
            assert!(
                last_map_id < Some(member.map_id),
                "{stores:?}: map-id order"
            );
            last_map_id = Some(member.map_id);
            assert!(seen.insert(member.user_id), "{stores:?}: listed twice");
        }
        if page.next_cursor == 0 {
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(seen.len(), expected, "{stores:?}");
    for (user, _) in &online[ONLINE - QUITTERS..] {
        assert!(!seen.contains(user), "{stores:?}: a quitter is listed");
    }
    assert!(seen.contains(&late) && seen.contains(&joiners[0].0));

    // Search finds a member by nickname among the 100,000.
    let search = SearchMembersRequest {
        group_id: group.id,
        query: "member0042".into(),
        limit: 10,
    };
    let found = group
        .groups
        .clone()
        .search_members(env.caller.request(reader, search))
        .await
        .expect("search")
        .into_inner()
        .members;
    let found: Vec<i64> = found.iter().map(|m| m.user_id).collect();
    assert_eq!(found, vec![online[42].0], "{stores:?}");

    // The most active members: the latest senders, latest first.
    for (i, (user, _)) in online[..3].iter().enumerate() {
        group.send(*user, &format!("active-{i}"), "here").await;
    }
    let active = ActiveMembersRequest {
        group_id: group.id,
        limit: 3,
    };
    let top = group
        .groups
        .clone()
        .active_members(env.caller.request(reader, active))
        .await
        .expect("active members")
        .into_inner()
        .members;
    let top: Vec<i64> = top.iter().map(|m| m.user_id).collect();
    let senders: Vec<i64> = online[..3].iter().rev().map(|(u, _)| *u).collect();
    assert_eq!(top, senders, "{stores:?}");

    // What a member's row says matches what it was shown.
    let rows = GetMembersRequest {
        group_id: group.id,
        user_ids: vec![late],
    };
    let row = group
        .groups
        .clone()
        .get_members(env.caller.request(Actor::User(late), rows))
        .await
        .expect("the late member's row")
        .into_inner()
        .members;
    assert_eq!(row[0].join_seq, join_seq, "{stores:?}");
}
