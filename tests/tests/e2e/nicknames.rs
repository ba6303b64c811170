//! Member search by nickname end to end: a super group's members are found by the
//! nickname relation-svc has for them, and a nickname change reaches every group the user
//! belongs to through relation-svc's rename outbox. Runs on every available store set.

use imesh_kit::grpc::Channel;
use imesh_kit::identity::Actor;
use imesh_protos::{
    group::{
        CreateGroupRequest, GroupType, SearchMembersRequest,
        group_service_client::GroupServiceClient,
    },
    relation::UpdateProfileRequest,
};
use imesh_tests::{Stores, TestCluster};

async fn search(
    groups: &mut GroupServiceClient<Channel>,
    env: &TestCluster,
    asker: i64,
    group_id: i64,
    query: &str,
) -> Vec<i64> {
    let request = SearchMembersRequest {
        group_id,
        query: query.into(),
        limit: 0,
    };
    let found = groups
        .search_members(env.caller.request(Actor::User(asker), request))
        .await
        .unwrap();
    found
        .into_inner()
        .members
        .iter()
        .map(|m| m.user_id)
        .collect()
}

async fn scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (alice, _) = env.user("alice").await;
    let (bob, _) = env.user("bob").await;
    let (carol, _) = env.user("carol").await;
    let mut groups = GroupServiceClient::new(env.channel(env.cluster.addrs.group));
    let mut ids = Vec::new();
    for kind in [GroupType::Super, GroupType::Normal] {
        let create = CreateGroupRequest {
            name: "company".into(),
            member_ids: vec![bob, carol],
            r#type: kind as i32,
            ..CreateGroupRequest::default()
        };
        let created = groups
            .create_group(env.caller.request(Actor::User(alice), create))
            .await
            .unwrap();
        ids.push(created.into_inner().group.unwrap().group_id);
    }
    // The harness names each user after their username.
    assert_eq!(
        search(&mut groups, &env, alice, ids[0], "bob").await,
        vec![bob],
        "{stores:?}"
    );

    let rename = UpdateProfileRequest {
        nickname: Some("Robert Builder".into()),
        ..UpdateProfileRequest::default()
    };
    let mut relation = env.relation();
    let request = env.caller.request(Actor::User(bob), rename);
    relation.update_profile(request).await.unwrap();
    for group in ids {
        let found = imesh_tests::eventually(
            "the rename to reach group-svc",
            imesh_tests::PATIENCE,
            || {
                let mut groups = groups.clone();
                let env = &env;
                async move {
                    let found = search(&mut groups, env, carol, group, "Builder").await;
                    (found == vec![bob]).then_some(found)
                }
            },
        )
        .await;
        assert_eq!(found, vec![bob], "{stores:?}");
    }
}

#[tokio::test]
async fn members_are_found_by_their_current_nickname_on_every_store_set() {
    for stores in Stores::available() {
        scenario(stores).await;
    }
}
