//! Receipt messages: groups small enough to count record their map bound; everything else
//! is refused by field.

use prost::Message as _;

use super::*;

fn asking(client_msg_id: &str, to: Target) -> SendCommand {
    SendCommand {
        client_msg_id: client_msg_id.into(),
        to: Some(to),
        content: Some(Content::Text("read this".into())),
        mentions: Mentions::default(),
        receipt: true,
        reply_to_seq: 0,
        forward: None,
    }
}

#[tokio::test]
async fn a_receipt_message_carries_the_map_bound_to_history_and_to_sync_svc() {
    let (messages, outbox) = messages().await;
    let sent = messages
        .send(u(1), asking("r1", Target::Group(7)))
        .await
        .unwrap();
    let (page, _) = messages
        .history(u(1), "g:7", HistoryPage::Before(0), 10)
        .await
        .unwrap();
    assert_eq!(page[0].receipt_bound, 5);
    let rows = outbox.pending(10).await.unwrap();
    let fanout = imesh_protos::sync::Fanout::decode(rows[0].payload.as_slice()).unwrap();
    assert_eq!(fanout.receipt_map_bound, 5);
    let Some(imesh_protos::sync::sync_event::Kind::Message(message)) =
        fanout.event.and_then(|e| e.kind)
    else {
        panic!("a message event");
    };
    assert!(message.receipt);
    assert_eq!(message.seq, sent.seq);

    let plain = SendCommand {
        receipt: false,
        ..asking("p1", Target::Group(7))
    };
    messages.send(u(1), plain).await.unwrap();
    let rows = outbox.pending(10).await.unwrap();
    let fanout = imesh_protos::sync::Fanout::decode(rows[1].payload.as_slice()).unwrap();
    assert_eq!(fanout.receipt_map_bound, 0, "only when asked");
}

#[tokio::test]
async fn receipts_are_refused_for_direct_messages_read_fanout_and_groups_over_the_limit() {
    let (messages, outbox) = messages().await;
    let direct = messages.send(u(1), asking("d", Target::User(2))).await;
    assert!(
        matches!(
            direct,
            Err(Error::Invalid {
                field: "receipt",
                ..
            })
        ),
        "{direct:?}"
    );
    let system = messages
        .send(Sender::System, asking("sys", Target::Group(7)))
        .await;
    assert!(
        matches!(
            system,
            Err(Error::Invalid {
                field: "receipt",
                ..
            })
        ),
        "{system:?}"
    );
    for (key, group) in [("s", 70), ("big", 9)] {
        let refused = messages
            .send(u(1), asking(key, Target::Group(group)))
            .await
            .unwrap_err();
        let Error::GroupRefused(GroupRefusal::Precondition, text) = &refused else {
            panic!("group {group}: {refused:?}");
        };
        assert!(text.starts_with("receipt: "), "{text}");
        assert!(text.contains("up to 3 members"), "{text}");
    }
    assert!(
        outbox.pending(10).await.unwrap().is_empty(),
        "nothing stored"
    );
}
