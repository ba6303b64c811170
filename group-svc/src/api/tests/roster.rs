//! A large group's member pages and member checks come from its roster once it is filled,
//! stay exact through kicks, invites and imports, and agree with the database — with the
//! roster in process and in every real Redis.

use tonic::Code;

use super::*;
use crate::{domain::ports::Rosters, store::tests::rosters::rosters};

/// Every member's id, page by page of 500, as `reader` sees them.
async fn listing(api: &GroupApi, g: i64, reader: i64) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut cursor = 0;
    loop {
        let page = pb::ListMembersRequest {
            group_id: g,
            cursor,
            limit: 500,
        };
        let page = api
            .list_members(user(reader, page))
            .await
            .unwrap()
            .into_inner();
        ids.extend(page.members.iter().map(|m| m.user_id));
        if page.next_cursor == 0 {
            return ids;
        }
        cursor = page.next_cursor;
    }
}

/// Roster reads so far: (hits, misses).
fn reads(api: &GroupApi) -> (u64, u64) {
    let mut registry = prometheus_client::registry::Registry::default();
    api.roster().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let count = |hit: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("group_roster_reads_total{{hit=\"{hit}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    (count("true"), count("false"))
}

async fn filled(rosters: &dyn Rosters, g: i64, name: &str) {
    testing::until_async(&format!("{name}: the roster fills"), || async {
        rosters.page(g, 0, 1).await.unwrap().is_some()
    })
    .await;
}

#[tokio::test]
async fn a_large_groups_pages_come_from_its_roster_and_follow_every_change() {
    for (name, rosters) in rosters().await {
        let api = api_with(rosters.clone()).await;
        let create = pb::CreateGroupRequest {
            name: "all hands".into(),
            r#type: pb::GroupType::Super as i32,
            ..Default::default()
        };
        let created = api.create_group(user(1, create)).await.unwrap();
        let g = created.into_inner().group.unwrap().group_id;
        let import = pb::ImportMembersRequest {
            group_id: g,
            user_ids: (2..=2_600).collect(),
        };
        api.import_members(call(Actor::System, import))
            .await
            .unwrap();

        // The first listing misses, is answered by the database, and starts a fill.
        let from_db = listing(&api, g, 5).await;
        assert_eq!(from_db, (1..=2_600).collect::<Vec<_>>(), "{name}");
        assert!(reads(&api).1 >= 1, "{name}: a miss");
        filled(&*rosters, g, name).await;
        let (hits, misses) = reads(&api);
        assert_eq!(listing(&api, g, 5).await, from_db, "{name}");
        assert_eq!(
            reads(&api),
            (hits + 12, misses),
            "{name}: six pages, each with its member check, from the roster"
        );

        // A kick and an invite are applied to the roster, which keeps answering.
        let kick = pb::KickMembersRequest {
            group_id: g,
            user_ids: vec![7, 1_000],
        };
        api.kick_members(user(1, kick)).await.unwrap();
        let invite = pb::InviteMembersRequest {
            group_id: g,
            user_ids: vec![7, 9_000],
        };
        api.invite_members(user(1, invite)).await.unwrap();
        let mut expected: Vec<i64> = from_db
            .into_iter()
            .filter(|u| ![7, 1_000].contains(u))
            .collect();
        expected.extend([7, 9_000]);
        let misses = reads(&api).1;
        assert_eq!(
            listing(&api, g, 9_000).await,
            expected,
            "{name}: rejoiners last"
        );
        let refused = api.list_members(user(
            1_000,
            pb::ListMembersRequest {
                group_id: g,
                cursor: 0,
                limit: 10,
            },
        ));
        assert_eq!(
            refused.await.unwrap_err().code(),
            Code::PermissionDenied,
            "{name}: kicked"
        );
        assert_eq!(reads(&api).1, misses, "{name}: no refill after changes");

        // An import adds too many members to apply one by one: it drops the roster, and the
        // next read refills it.
        let import = pb::ImportMembersRequest {
            group_id: g,
            user_ids: vec![10_000],
        };
        api.import_members(call(Actor::System, import))
            .await
            .unwrap();
        expected.push(10_000);
        assert_eq!(listing(&api, g, 10_000).await, expected, "{name}");
        assert!(
            reads(&api).1 > misses,
            "{name}: the import dropped the roster"
        );
        filled(&*rosters, g, name).await;
        assert_eq!(listing(&api, g, 10_000).await, expected, "{name}");
    }
}
