//! Content kinds, mentions, system notices and rate limits.

use prost::Message as _;

use super::*;

fn to(to: Target, client_msg_id: &str, content: Content) -> SendCommand {
    SendCommand {
        client_msg_id: client_msg_id.into(),
        to: Some(to),
        content: Some(content),
        mentions: Mentions::default(),
        receipt: false,
        reply_to_seq: 0,
        forward: None,
    }
}

fn image() -> Media {
    Media {
        url: "https://cdn.example.com/a.png".into(),
        size_bytes: 2048,
        mime_type: "image/png".into(),
        width: 640,
        height: 480,
        ..Media::default()
    }
}

#[tokio::test]
async fn media_references_and_notices_are_stored_and_read_back_as_sent() {
    let (messages, _) = messages().await;
    let file = Media {
        url: "https://cdn.example.com/r.pdf".into(),
        size_bytes: 10,
        mime_type: "application/pdf".into(),
        name: "report.pdf".into(),
        ..Media::default()
    };
    let notice = Notice {
        code: "maintenance".into(),
        text: "Down at 02:00".into(),
        json: r#"{"at":"02:00"}"#.into(),
    };
    let contents = [
        Content::Media(MediaKind::Image, image()),
        Content::Media(MediaKind::File, file),
    ];
    for (i, content) in contents.iter().enumerate() {
        let command = to(Target::User(2), &format!("k{i}"), content.clone());
        messages.send(u(1), command).await.unwrap();
    }
    let command = to(Target::Group(7), "n1", Content::Notice(notice.clone()));
    messages.send(Sender::System, command).await.unwrap();
    let (direct, _) = messages
        .history(u(2), "d:1:2", HistoryPage::Before(0), 0)
        .await
        .unwrap();
    let stored: Vec<Content> = direct.iter().rev().map(|m| m.content.clone()).collect();
    assert_eq!(stored, contents);
    let (group, _) = messages
        .history(u(3), "g:7", HistoryPage::Before(0), 0)
        .await
        .unwrap();
    assert_eq!(
        (group[0].sender_id, group[0].content.clone()),
        (0, Content::Notice(notice))
    );
}

#[tokio::test]
async fn bad_media_and_notices_name_the_field_at_fault() {
    let (messages, outbox) = messages().await;
    let cases = [
        (
            Media {
                url: "ftp://x".into(),
                ..image()
            },
            MediaKind::Image,
            "content.image.url",
        ),
        (
            Media {
                size_bytes: 0,
                ..image()
            },
            MediaKind::Image,
            "content.image.size_bytes",
        ),
        (
            Media {
                mime_type: "png".into(),
                ..image()
            },
            MediaKind::Image,
            "content.image.mime_type",
        ),
        (
            Media {
                height: 0,
                ..image()
            },
            MediaKind::Video,
            "content.video.width",
        ),
        (image(), MediaKind::Audio, "content.audio.duration_ms"),
        (image(), MediaKind::File, "content.file.name"),
    ];
    for (media, kind, field) in cases {
        let command = to(Target::User(2), "bad", Content::Media(kind, media));
        match messages.send(u(1), command).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected invalid {field}, got {other:?}"),
        }
    }
    let notice = |code: &str| {
        Content::Notice(Notice {
            code: code.into(),
            text: "t".into(),
            json: String::new(),
        })
    };
    let refused = messages
        .send(u(1), to(Target::Group(7), "n", notice("ok")))
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::NoticeForbidden), "{refused:?}");
    let refused = messages
        .send(
            Sender::System,
            to(Target::Group(7), "n", notice("Bad Code")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Invalid {
                field: "content.notice.code",
                ..
            }
        ),
        "{refused:?}"
    );
    assert!(outbox.pending(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn mentions_reach_the_event_and_are_checked_against_members_and_at_all() {
    let (messages, outbox) = messages().await;
    let mention = |client_msg_id: &str, target, users: Vec<i64>, all| SendCommand {
        mentions: Mentions { users, all },
        receipt: false,
        ..to(target, client_msg_id, Content::Text("hey".into()))
    };
    messages
        .send(u(1), mention("m1", Target::Group(7), vec![3, 2, 3], false))
        .await
        .unwrap();
    messages
        .send(u(2), mention("m2", Target::Group(7), vec![], true))
        .await
        .unwrap();
    let refusals = [
        (
            u(1),
            mention("m3", Target::Group(7), vec![9], false),
            "mentioned_user_ids",
        ),
        (
            u(1),
            mention("m4", Target::User(2), vec![2], false),
            "mentioned_user_ids",
        ),
    ];
    for (sender, command, field) in refusals {
        match messages.send(sender, command).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected invalid {field}, got {other:?}"),
        }
    }
    let at_all = messages
        .send(u(1), mention("m5", Target::Group(7), vec![], true))
        .await
        .unwrap_err();
    assert!(
        matches!(at_all, Error::GroupRefused(GroupRefusal::Forbidden, _)),
        "@all needs AT_ALL: {at_all:?}"
    );
    let rows = outbox.pending(10).await.unwrap();
    assert_eq!(rows.len(), 2);
    let event = |i: usize| {
        let fanout = imesh_protos::sync::Fanout::decode(rows[i].payload.as_slice()).unwrap();
        match fanout.event.and_then(|e| e.kind) {
            Some(imesh_protos::sync::sync_event::Kind::Message(m)) => m,
            other => panic!("not a message: {other:?}"),
        }
    };
    assert_eq!(event(0).mentioned_user_ids, vec![2, 3], "deduplicated");
    assert!(event(1).mention_all);
    let (history, _) = messages
        .history(u(3), "g:7", HistoryPage::Before(0), 0)
        .await
        .unwrap();
    assert_eq!(history[1].mentions.users, vec![2, 3]);
}

#[tokio::test]
async fn a_notice_reaches_each_target_once_and_reports_the_ones_it_could_not() {
    let (messages, outbox) = messages().await;
    let command = || NoticeCommand {
        client_msg_id: "welcome".into(),
        users: vec![1, 99, 2, 1],
        groups: vec![7, 8],
        content: Some(Content::Text("hello from the app".into())),
    };
    let outcomes = messages.send_notice(command()).await.unwrap();
    let summary: Vec<(Target, Option<String>)> = outcomes
        .iter()
        .map(|o| {
            (
                o.target,
                o.result.as_ref().ok().map(|s| s.conversation_id.clone()),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (Target::User(1), Some("s:1".into())),
            (Target::User(99), None),
            (Target::User(2), Some("s:2".into())),
            (Target::Group(7), Some("g:7".into())),
            (Target::Group(8), None),
        ]
    );
    assert!(matches!(outcomes[1].result, Err(Error::UnknownUser(99))));
    let again = messages.send_notice(command()).await.unwrap();
    assert!(
        again
            .iter()
            .filter_map(|o| o.result.as_ref().ok())
            .all(|s| s.duplicate)
    );
    assert_eq!(
        outbox.pending(10).await.unwrap().len(),
        3,
        "a retry stores nothing"
    );
    let (mine, _) = messages
        .history(u(1), "s:1", HistoryPage::Before(0), 0)
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert!(matches!(
        messages
            .history(u(2), "s:1", HistoryPage::Before(0), 0)
            .await,
        Err(Error::NotParticipant)
    ));
    let empty = NoticeCommand {
        users: vec![],
        groups: vec![],
        ..command()
    };
    assert!(matches!(
        messages.send_notice(empty).await,
        Err(Error::Invalid {
            field: "user_ids",
            ..
        })
    ));
}

#[tokio::test]
async fn a_sender_past_the_rate_limit_is_refused_until_the_window_passes_and_retries_are_free() {
    let (messages, outbox) = build(DirectPolicy::Anyone, RateLimits::new(2, 0)).await;
    messages.send(u(1), text("a", 2, "1")).await.unwrap();
    messages.send(u(1), text("b", 2, "2")).await.unwrap();
    let retry = messages.send(u(1), text("b", 2, "2")).await.unwrap();
    assert!(retry.duplicate, "a retry of a stored send takes no budget");
    let limited = messages.send(u(1), text("c", 2, "3")).await.unwrap_err();
    match limited {
        Error::RateLimited(RateLimited {
            scope,
            retry_after_ms,
            ..
        }) => {
            assert_eq!(scope, "user_id");
            assert!((1..=500).contains(&retry_after_ms), "{retry_after_ms}");
        }
        other => panic!("expected a rate limit, got {other:?}"),
    }
    messages
        .send(u(2), text("d", 1, "other user"))
        .await
        .unwrap();
    messages
        .send(Sender::System, text("e", 1, "the system is not limited"))
        .await
        .unwrap();
    assert_eq!(outbox.pending(10).await.unwrap().len(), 4);
}
