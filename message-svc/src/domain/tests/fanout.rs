//! What goes out to sync-svc: message events keyed on their msg ids; read fanout, where
//! super groups get no recipient lists and members catch up by seq.

use prost::Message as _;

use super::*;

fn to_super(client_msg_id: &str, mentioned: Vec<i64>) -> SendCommand {
    SendCommand {
        client_msg_id: client_msg_id.into(),
        to: Some(Target::Group(70)),
        content: Some(Content::Text("to everyone".into())),
        mentions: Mentions {
            users: mentioned,
            all: false,
        },
        receipt: false,
        reply_to_seq: 0,
        forward: None,
    }
}

#[tokio::test]
async fn message_events_are_keyed_on_their_msg_ids_later_ones_sorting_after() {
    let (messages, outbox) = messages().await;
    // Two conversations, interleaved.
    let mut sent = Vec::new();
    for (client_msg_id, to) in [("k1", None), ("k2", Some(Target::Group(7))), ("k3", None)] {
        let mut command = text(client_msg_id, 2, "hi");
        command.to = to.or(command.to);
        sent.push(messages.send(u(1), command).await.unwrap());
    }
    let rows = outbox.pending(10).await.unwrap();
    let keys: Vec<String> = rows
        .iter()
        .map(|row| {
            imesh_protos::sync::Fanout::decode(row.payload.as_slice())
                .unwrap()
                .event_id
        })
        .collect();
    let expected: Vec<String> = sent.iter().map(|s| format!("m:{}", s.msg_id)).collect();
    assert_eq!(keys, expected);
    assert!(
        keys.is_sorted(),
        "sync-svc's event index takes each later message at its end: {keys:?}"
    );
}

#[tokio::test]
async fn a_super_group_message_and_its_recall_go_out_as_read_fanout_without_a_member_list() {
    let (messages, outbox) = messages().await;
    let sent = messages.send(u(1), to_super("s1", vec![3])).await.unwrap();
    assert_eq!(sent.conversation_id, "g:70");
    let stranger = messages
        .send(u(1), to_super("s2", vec![9]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            stranger,
            Error::Invalid {
                field: "mentioned_user_ids",
                ..
            }
        ),
        "mentions are checked against the members even without a list: {stranger:?}"
    );
    messages.recall(u(1), "g:70", sent.seq).await.unwrap();
    let rows = outbox.pending(10).await.unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let fanout = imesh_protos::sync::Fanout::decode(row.payload.as_slice()).unwrap();
        assert_eq!(
            (fanout.recipient_ids.len(), fanout.read_fanout_group_id),
            (0, 70),
            "{}",
            fanout.event_id
        );
    }
}

#[tokio::test]
async fn members_catch_up_oldest_first_after_a_seq() {
    let (messages, _) = messages().await;
    for i in 0..5 {
        messages
            .send(u(2), to_super(&format!("c{i}"), vec![]))
            .await
            .unwrap();
    }
    let (page, more) = messages
        .history(u(1), "g:70", HistoryPage::After(1), 2)
        .await
        .unwrap();
    assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![2, 3]);
    assert!(more);
    let (rest, more) = messages
        .history(u(1), "g:70", HistoryPage::After(3), 10)
        .await
        .unwrap();
    assert_eq!(rest.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![4, 5]);
    assert!(!more);
}
