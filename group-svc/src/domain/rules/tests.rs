use super::*;
use crate::domain::GroupType;

const NOW: Now = Now {
    ms: 1_000_000,
    seq: 42,
};

fn member(user: i64, role: Role) -> Member {
    Member {
        group_id: 9,
        user_id: user,
        role,
        map_id: user as u32,
        alias: String::new(),
        nickname: String::new(),
        mute_until_ms: 0,
        join_seq: 0,
        leave_seq: 0,
        joined_at_ms: 0,
        status: MemberStatus::Normal,
        extra_permissions: 0,
    }
}

/// Group 9: owner 1, admin 2, members 3 and 4; user 5 was kicked.
fn state(actor: i64, mode: JoinMode) -> GroupState {
    let mut rows = vec![
        member(1, Role::Owner),
        member(2, Role::Admin),
        member(3, Role::Member),
        member(4, Role::Member),
    ];
    rows.push(Member {
        status: MemberStatus::Kicked,
        ..member(5, Role::Member)
    });
    let targets: HashMap<i64, Member> = rows.into_iter().map(|m| (m.user_id, m)).collect();
    GroupState {
        group: Group {
            id: 9,
            kind: GroupType::Normal,
            owner_id: 1,
            member_count: 4,
            max_member: 5,
            join_mode: mode,
            next_map_id: 6,
            version: 3,
            ..Default::default()
        },
        actor_id: actor,
        actor: targets.get(&actor).cloned(),
        targets,
        requests: HashMap::new(),
    }
}

/// The send gate on a group and member as the store holds them.
fn send(group: &Group, member: Option<&Member>, needs: u32) -> Result<(), Error> {
    check_send(
        &GateGroup::from(group),
        member.map(GateMember::from).as_ref(),
        needs,
        NOW.ms,
    )
}

fn refused<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::Forbidden(m) | Error::NotMember(m) | Error::Precondition(m)) => m.to_owned(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_send_gate_checks_in_the_seeds_order() {
    let s = state(3, JoinMode::Invite);
    let g = &s.group;
    assert!(send(g, s.targets.get(&3), 0).is_ok());
    let dismissed = Group {
        status: GroupStatus::Dismissed,
        mute_all: true,
        ..g.clone()
    };
    assert!(
        refused(send(&dismissed, s.targets.get(&3), 0)).contains("dismissed"),
        "alive first"
    );
    assert!(
        refused(send(g, s.targets.get(&5), 0)).contains("not a member"),
        "kicked is no member"
    );
    let muted_all = Group {
        mute_all: true,
        ..g.clone()
    };
    assert!(refused(send(&muted_all, s.targets.get(&3), 0)).contains("everyone is muted"));
    assert!(
        send(&muted_all, s.targets.get(&2), 0).is_ok(),
        "admins speak under mute-all"
    );
    let muted_admin = Member {
        mute_until_ms: NOW.ms + 1,
        ..member(2, Role::Admin)
    };
    assert!(
        refused(send(g, Some(&muted_admin), 0)).contains("you are muted"),
        "nobody is exempt"
    );
    let expired = Member {
        mute_until_ms: NOW.ms - 1,
        ..member(3, Role::Member)
    };
    assert!(send(g, Some(&expired), 0).is_ok());
    assert!(refused(send(g, s.targets.get(&3), perm::AT_ALL)).contains("permission"));
    assert!(send(g, s.targets.get(&2), perm::AT_ALL).is_ok());
    let granted = Member {
        extra_permissions: perm::AT_ALL,
        ..member(3, Role::Member)
    };
    assert!(
        send(g, Some(&granted), perm::AT_ALL).is_ok(),
        "extra bits count"
    );
}

#[test]
fn invitations_add_new_members_with_fresh_map_ids_and_respect_the_limit() {
    let change = invite(&state(3, JoinMode::Invite), &[5, 3], NOW).unwrap();
    assert_eq!(change.members.len(), 1, "3 is already a member");
    let back = &change.members[0];
    assert_eq!(
        (back.user_id, back.map_id, back.join_seq, back.status),
        (5, 6, 42, MemberStatus::Normal)
    );
    assert_eq!(change.group.next_map_id, 7, "map ids are never reused");
    assert!(refused(invite(&state(3, JoinMode::Invite), &[6, 7], NOW)).contains("member limit"));
    let approval = invite(&state(3, JoinMode::Approval), &[6], NOW).unwrap();
    assert_eq!(
        (approval.members.len(), approval.put_requests.len()),
        (0, 1),
        "a member's invitation awaits approval"
    );
    assert_eq!(
        invite(&state(2, JoinMode::Approval), &[6], NOW)
            .unwrap()
            .members
            .len(),
        1,
        "an admin adds directly"
    );
    assert!(refused(invite(&state(5, JoinMode::Invite), &[6], NOW)).contains("not a member"));
}

#[test]
fn joining_follows_the_join_mode_and_reviews_need_an_admin() {
    let outsider = |mode| GroupState {
        actor_id: 8,
        actor: None,
        ..state(8, mode)
    };
    assert_eq!(
        join(&outsider(JoinMode::Free), "", NOW).unwrap().members[0].user_id,
        8
    );
    assert_eq!(
        join(&outsider(JoinMode::Approval), "me?", NOW)
            .unwrap()
            .put_requests[0]
            .message,
        "me?"
    );
    assert!(refused(join(&outsider(JoinMode::Invite), "", NOW)).contains("invitation only"));
    let mut pending = state(2, JoinMode::Approval);
    let request = JoinRequest {
        group_id: 9,
        user_id: 8,
        message: String::new(),
        inviter_id: 0,
        created_at_ms: 0,
    };
    pending.requests.insert(8, request);
    let approved = review(&pending, 8, true, NOW).unwrap();
    assert_eq!(
        (approved.members[0].user_id, approved.drop_requests.clone()),
        (8, vec![8])
    );
    let by_member = GroupState {
        actor_id: 3,
        actor: pending.targets.get(&3).cloned(),
        ..pending.clone()
    };
    assert!(refused(review(&by_member, 8, true, NOW)).contains("only admins"));
    assert!(refused(review(&pending, 7, true, NOW)).contains("no pending"));
}

#[test]
fn ranks_bound_kicks_mutes_and_admin_changes() {
    assert!(
        refused(kick(&state(2, JoinMode::Invite), &[1], NOW)).contains("your rank or above"),
        "an admin on the owner"
    );
    assert!(matches!(
        kick(&state(2, JoinMode::Invite), &[2], NOW),
        Err(Error::Invalid {
            field: "user_ids",
            ..
        })
    ));
    assert!(refused(kick(&state(3, JoinMode::Invite), &[4], NOW)).contains("may not remove"));
    assert!(
        refused(kick(&state(1, JoinMode::Invite), &[5], NOW)).contains("not a member"),
        "the kicked are gone"
    );
    let kicked = kick(&state(1, JoinMode::Invite), &[2, 3], NOW).unwrap();
    assert!(kicked.members.iter().all(|m| m.leave_seq == NOW.seq));
    assert!(
        kicked
            .members
            .iter()
            .all(|m| m.status == MemberStatus::Kicked)
            && kicked.affected == vec![2, 3]
    );
    assert!(refused(mute(&state(2, JoinMode::Invite), 1, NOW.ms + 10, NOW)).contains("rank"));
    assert!(matches!(
        mute(&state(2, JoinMode::Invite), 3, NOW.ms - 10, NOW),
        Err(Error::Invalid {
            field: "until_ms",
            ..
        })
    ));
    assert_eq!(
        mute(&state(2, JoinMode::Invite), 3, NOW.ms + 10, NOW)
            .unwrap()
            .members[0]
            .mute_until_ms,
        NOW.ms + 10
    );
    assert!(refused(set_admin(&state(2, JoinMode::Invite), 3, true)).contains("only the owner"));
    assert_eq!(
        set_admin(&state(1, JoinMode::Invite), 3, true)
            .unwrap()
            .members[0]
            .role,
        Role::Admin
    );
}

#[test]
fn ownership_moves_in_one_change_and_the_owner_cannot_just_quit() {
    let roles = |change: GroupChange| -> Vec<(i64, Role)> {
        change.members.iter().map(|m| (m.user_id, m.role)).collect()
    };
    let change = transfer(&state(1, JoinMode::Invite), 3, false).unwrap();
    assert_eq!(change.group.owner_id, 3);
    assert_eq!(
        roles(change),
        vec![(1, Role::Member), (3, Role::Owner)],
        "the old owner becomes a plain member (seed 001)"
    );
    let kept = transfer(&state(1, JoinMode::Invite), 3, true).unwrap();
    assert_eq!(roles(kept), vec![(1, Role::Admin), (3, Role::Owner)]);
    assert!(refused(transfer(&state(2, JoinMode::Invite), 3, false)).contains("only the owner"));
    assert!(refused(transfer(&state(1, JoinMode::Invite), 5, false)).contains("not a member"));
    assert!(refused(quit(&state(1, JoinMode::Invite), NOW)).contains("transfer"));
    assert_eq!(
        quit(&state(3, JoinMode::Invite), NOW).unwrap().members[0].status,
        MemberStatus::Quit
    );
    assert!(refused(dismiss(&state(2, JoinMode::Invite))).contains("only the owner"));
    let dismissed = dismiss(&state(1, JoinMode::Invite)).unwrap();
    let after = GroupState {
        group: dismissed.group,
        ..state(1, JoinMode::Invite)
    };
    assert!(
        refused(mute_all(&after, true)).contains("dismissed"),
        "nothing changes a dismissed group"
    );
}
