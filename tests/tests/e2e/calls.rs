//! Friend and group operations through the gateway: a device makes friends, creates a group,
//! mutes it, lists its members and reads its operation log with frames, acting as its own
//! user; a member without the right gets the service's refusal as an error frame and
//! nothing changes.

use imesh_protos::{
    gateway::{
        GroupCall, GroupResult, RelationCall, RelationResult, client_frame, group_call,
        group_result, relation_call, relation_result, server_frame::Body,
    },
    group::{
        CreateGroupRequest, GetGroupRequest, KickMembersRequest, ListMembersRequest,
        ListOperationsRequest, MuteAllRequest,
    },
    relation::{CheckRelationsRequest, Relation, SendFriendRequestRequest},
};
use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

async fn relation(device: &mut Device, call: relation_call::Call) -> Body {
    let call = RelationCall { call: Some(call) };
    let id = device.send_frame(client_frame::Body::Relation(call)).await;
    device.reply(id).await
}

async fn group(device: &mut Device, call: group_call::Call) -> Body {
    let call = GroupCall { call: Some(call) };
    let id = device.send_frame(client_frame::Body::Group(call)).await;
    device.reply(id).await
}

fn group_result(body: Body) -> group_result::Result {
    match body {
        Body::Group(GroupResult {
            result: Some(result),
        }) => result,
        other => panic!("not a group result: {other:?}"),
    }
}

#[tokio::test]
async fn devices_make_friends_and_run_groups_with_frames() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (ann, ann_token) = env.user("ann").await;
    let (ben, ben_token) = env.user("ben").await;
    let mut ann_dev = env.signed_in(&ann_token, "ann-1").await;
    let mut ben_dev = env.signed_in(&ben_token, "ben-1").await;

    for (device, peer) in [(&mut ann_dev, ben), (&mut ben_dev, ann)] {
        let ask = SendFriendRequestRequest {
            to_user_id: peer,
            ..Default::default()
        };
        let reply = relation(device, relation_call::Call::SendFriendRequest(ask)).await;
        assert!(matches!(reply, Body::Relation(_)), "{reply:?}");
    }
    let check = CheckRelationsRequest {
        user_id: 0,
        peer_ids: vec![ben],
    };
    let Body::Relation(RelationResult {
        result: Some(relation_result::Result::CheckRelations(check)),
    }) = relation(&mut ann_dev, relation_call::Call::CheckRelations(check)).await
    else {
        panic!("no relations answer");
    };
    assert_eq!(check.relations[0].relation(), Relation::Both);

    let create = CreateGroupRequest {
        name: "frames".into(),
        member_ids: vec![ben],
        ..Default::default()
    };
    let group_result::Result::CreateGroup(created) =
        group_result(group(&mut ann_dev, group_call::Call::CreateGroup(create)).await)
    else {
        panic!("not created");
    };
    let g = created.group.unwrap().group_id;
    let mute = MuteAllRequest {
        group_id: g,
        muted: true,
    };
    group_result(group(&mut ann_dev, group_call::Call::MuteAll(mute)).await);

    // Ben may look but not kick the owner.
    let kick = KickMembersRequest {
        group_id: g,
        user_ids: vec![ann],
    };
    let Body::Error(e) = group(&mut ben_dev, group_call::Call::KickMembers(kick)).await else {
        panic!("a member kicked the owner");
    };
    assert_eq!(e.code, Code::PermissionDenied as u32, "{e:?}");
    let list = ListMembersRequest {
        group_id: g,
        ..Default::default()
    };
    let group_result::Result::ListMembers(members) =
        group_result(group(&mut ben_dev, group_call::Call::ListMembers(list)).await)
    else {
        panic!("no member list");
    };
    let mut ids: Vec<i64> = members.members.iter().map(|m| m.user_id).collect();
    ids.sort();
    let mut expected = vec![ann, ben];
    expected.sort();
    assert_eq!(ids, expected, "nobody was kicked");
    let get = GetGroupRequest { group_id: g };
    let group_result::Result::GetGroup(info) =
        group_result(group(&mut ben_dev, group_call::Call::GetGroup(get)).await)
    else {
        panic!("no group info");
    };
    let info = info.group.unwrap();
    assert!(info.mute_all, "{info:?}");

    // The owner reads the group's operation log; a plain member may not.
    let log = ListOperationsRequest {
        group_id: g,
        ..Default::default()
    };
    let group_result::Result::ListOperations(log_page) =
        group_result(group(&mut ann_dev, group_call::Call::ListOperations(log)).await)
    else {
        panic!("no operation log");
    };
    let ops: Vec<(&str, i64)> = log_page
        .operations
        .iter()
        .map(|o| (o.op.as_str(), o.operator_id))
        .collect();
    assert_eq!(ops, vec![("mute_all", ann), ("created", ann)]);
    let Body::Error(e) = group(&mut ben_dev, group_call::Call::ListOperations(log)).await else {
        panic!("a plain member read the operation log");
    };
    assert_eq!(e.code, Code::PermissionDenied as u32, "{e:?}");

    let empty = GroupCall { call: None };
    let id = ben_dev.send_frame(client_frame::Body::Group(empty)).await;
    let Body::Error(e) = ben_dev.reply(id).await else {
        panic!("an empty call was taken");
    };
    assert_eq!(
        (e.code, e.field.as_str()),
        (Code::InvalidArgument as u32, "group.call")
    );
}
