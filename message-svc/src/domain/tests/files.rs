//! Uploads: tickets within the rules, a message may reference only its sender's stored
//! objects, downloads for readers only, and the sweep of objects no message references.

use std::path::PathBuf;

use imesh_kit::{config::Secret, files::LinkSigner};

use super::*;
use crate::store::blobs::{LocalBlobs, LocalConfig};

/// [`messages`] with its objects under a folder the test writes to, as the gateway would.
async fn with_files() -> (Messages, PathBuf) {
    with_files_limited(RateLimits::unlimited()).await
}

async fn with_files_limited(rates: RateLimits) -> (Messages, PathBuf) {
    let (mut messages, _) = build(DirectPolicy::Anyone, rates).await;
    let dir = testing::scratch_dir("uploads");
    let config = LocalConfig {
        dir: dir.display().to_string(),
        public_url: "http://gateway.test/files".into(),
    };
    let signer = LinkSigner::new(&Secret::new("test-internal-secret-0123"));
    messages.files.blobs = Some(Arc::new(LocalBlobs::new(&config, signer).unwrap()));
    (messages, dir)
}

fn image_upload(size: i64) -> UploadRequest {
    UploadRequest {
        kind: Some(UploadKind::Image),
        mime_type: "image/png".into(),
        size_bytes: size,
        ..UploadRequest::default()
    }
}

/// What the client does with a ticket's URL: the bytes land under the key.
fn put(dir: &std::path::Path, key: &str, size: usize) {
    let path = dir.join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, vec![7u8; size]).unwrap();
}

/// `count` images of 10 bytes user 1 has a ticket for and uploaded: their keys.
async fn uploaded(messages: &Messages, dir: &std::path::Path, count: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for _ in 0..count {
        let ticket = messages.create_upload(u(1), image_upload(10)).await;
        let key = ticket.unwrap().object.key;
        put(dir, &key, 10);
        keys.push(key);
    }
    keys
}

fn image_of(key: &str, size: i64) -> Content {
    Content::Media(
        MediaKind::Image,
        Media {
            object_key: key.into(),
            size_bytes: size,
            mime_type: "image/png".into(),
            width: 64,
            height: 48,
            ..Media::default()
        },
    )
}

fn send(client_msg_id: &str, to: i64, content: Content) -> SendCommand {
    SendCommand {
        content: Some(content),
        ..text(client_msg_id, to, "")
    }
}

fn field_of(err: Error) -> &'static str {
    match err {
        Error::Invalid { field, .. } | Error::Precondition(field, _) => field,
        other => panic!("not a refusal naming a field: {other:?}"),
    }
}

#[tokio::test]
async fn tickets_keep_within_each_kinds_type_and_size() {
    let (messages, _) = with_files().await;
    let ticket = messages
        .create_upload(
            u(1),
            UploadRequest {
                thumbnail_size_bytes: 300,
                thumbnail_mime_type: "image/jpeg".into(),
                ..image_upload(1000)
            },
        )
        .await
        .unwrap();
    assert!(ticket.object.key.starts_with("1/"), "{}", ticket.object.key);
    assert!(imesh_kit::files::is_object_key(&ticket.object.key));
    let thumbnail = ticket.thumbnail.expect("a thumbnail target");
    assert_ne!(thumbnail.key, ticket.object.key);
    assert!(
        ticket
            .object
            .url
            .starts_with(&format!("http://gateway.test/files/{}?", ticket.object.key)),
        "{}",
        ticket.object.url
    );
    assert_eq!(
        ticket.object.headers,
        vec![("content-type".to_string(), "image/png".to_string())]
    );

    let refused = [
        (
            UploadRequest {
                kind: None,
                ..image_upload(10)
            },
            "kind",
        ),
        (
            UploadRequest {
                kind: Some(UploadKind::Thumbnail),
                ..image_upload(10)
            },
            "kind",
        ),
        (
            UploadRequest {
                mime_type: "text/html".into(),
                ..image_upload(10)
            },
            "mime_type",
        ),
        (
            UploadRequest {
                mime_type: "image/PNG".into(),
                ..image_upload(10)
            },
            "mime_type",
        ),
        (
            UploadRequest {
                mime_type: "image/png; q=1".into(),
                ..image_upload(10)
            },
            "mime_type",
        ),
        (image_upload(0), "size_bytes"),
        (image_upload((20 << 20) + 1), "size_bytes"),
        (
            UploadRequest {
                thumbnail_size_bytes: (512 << 10) + 1,
                thumbnail_mime_type: "image/png".into(),
                ..image_upload(10)
            },
            "thumbnail_size_bytes",
        ),
        (
            UploadRequest {
                thumbnail_size_bytes: 10,
                thumbnail_mime_type: "video/mp4".into(),
                ..image_upload(10)
            },
            "thumbnail_mime_type",
        ),
    ];
    for (request, field) in refused {
        let err = messages
            .create_upload(u(1), request.clone())
            .await
            .unwrap_err();
        assert_eq!(field_of(err), field, "{request:?}");
    }
    let any_file = UploadRequest {
        kind: Some(UploadKind::File),
        mime_type: "application/vnd.ms-excel".into(),
        size_bytes: 100 << 20,
        ..UploadRequest::default()
    };
    messages.create_upload(u(1), any_file).await.unwrap();
}

#[tokio::test]
async fn a_message_references_only_its_senders_stored_object_as_uploaded() {
    let (messages, dir) = with_files().await;
    let ticket = messages
        .create_upload(u(1), image_upload(100))
        .await
        .unwrap();
    let key = ticket.object.key;

    let err = messages
        .send(u(1), send("early", 2, image_of(&key, 100)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Precondition("content.image.object_key", _)),
        "{err:?}"
    );
    put(&dir, &key, 99);
    let err = messages
        .send(u(1), send("short", 2, image_of(&key, 100)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Precondition("content.image.object_key", _)),
        "{err:?}"
    );
    put(&dir, &key, 100);
    let err = messages
        .send(u(1), send("size", 2, image_of(&key, 101)))
        .await
        .unwrap_err();
    assert_eq!(field_of(err), "content.image.object_key");
    let err = messages
        .send(u(2), send("theirs", 1, image_of(&key, 100)))
        .await
        .unwrap_err();
    assert_eq!(field_of(err), "content.image.object_key");
    let unknown = "1/00000000000000000000000000000000";
    let err = messages
        .send(u(1), send("unknown", 2, image_of(unknown, 100)))
        .await
        .unwrap_err();
    assert_eq!(field_of(err), "content.image.object_key");
    let err = messages
        .send(u(1), send("bad", 2, image_of("../etc/passwd", 100)))
        .await
        .unwrap_err();
    assert_eq!(field_of(err), "content.image.object_key");

    let sent = messages
        .send(u(1), send("ok", 2, image_of(&key, 100)))
        .await
        .unwrap();
    let (page, _) = messages
        .history(u(2), "d:1:2", HistoryPage::Before(0), 0)
        .await
        .unwrap();
    assert_eq!(page[0].seq, sent.seq);
    assert_eq!(page[0].content, image_of(&key, 100));
}

#[tokio::test]
async fn downloads_are_for_readers_of_the_message() {
    let (messages, dir) = with_files().await;
    let ticket = messages
        .create_upload(
            u(1),
            UploadRequest {
                thumbnail_size_bytes: 5,
                thumbnail_mime_type: "image/jpeg".into(),
                ..image_upload(10)
            },
        )
        .await
        .unwrap();
    let (key, thumbnail) = (ticket.object.key, ticket.thumbnail.unwrap().key);
    put(&dir, &key, 10);
    put(&dir, &thumbnail, 5);
    let Content::Media(kind, mut media) = image_of(&key, 10) else {
        unreachable!()
    };
    media.thumbnail_key = thumbnail.clone();
    let sent = messages
        .send(u(1), send("img", 2, Content::Media(kind, media)))
        .await
        .unwrap();
    let plain = messages.send(u(1), text("txt", 2, "hi")).await.unwrap();

    let download = messages.download(u(2), "d:1:2", sent.seq).await.unwrap();
    assert!(
        download
            .url
            .starts_with(&format!("http://gateway.test/files/{key}?")),
        "{}",
        download.url
    );
    assert!(
        download.url.contains("type=image%2Fpng"),
        "{}",
        download.url
    );
    let thumbnail_url = download.thumbnail_url.expect("a thumbnail link");
    assert!(thumbnail_url.contains(&thumbnail) && thumbnail_url.contains("type=image%2Fjpeg"));
    assert!(download.expires_at_ms > imesh_kit::ids::unix_ms());

    let outsider = messages
        .download(u(3), "d:1:2", sent.seq)
        .await
        .unwrap_err();
    assert!(matches!(outsider, Error::NotParticipant), "{outsider:?}");
    let text_only = messages
        .download(u(2), "d:1:2", plain.seq)
        .await
        .unwrap_err();
    assert!(matches!(text_only, Error::NoObject), "{text_only:?}");
    let missing = messages.download(u(2), "d:1:2", 99).await.unwrap_err();
    assert!(matches!(missing, Error::NoMessage), "{missing:?}");
}

#[tokio::test]
async fn the_sweep_deletes_objects_no_message_references_once_they_are_old() {
    let (messages, dir) = with_files().await;
    let keys = uploaded(&messages, &dir, 3).await;
    let [sent_key, recalled_key, unused_key] = [&keys[0], &keys[1], &keys[2]];
    messages
        .send(u(1), send("kept", 2, image_of(sent_key, 10)))
        .await
        .unwrap();
    let recalled = messages
        .send(u(1), send("gone", 2, image_of(recalled_key, 10)))
        .await
        .unwrap();
    messages.recall(u(1), "d:1:2", recalled.seq).await.unwrap();

    let now = imesh_kit::ids::unix_ms();
    assert_eq!(
        messages.sweep_files_at(now).await.unwrap(),
        0,
        "nothing is old yet"
    );
    let later = now + messages.files.rules.unreferenced_ttl_secs as i64 * 1000 + 1_000;
    assert_eq!(messages.sweep_files_at(later).await.unwrap(), 2);
    assert!(dir.join(sent_key).exists());
    assert!(!dir.join(recalled_key).exists());
    assert!(!dir.join(unused_key).exists());
    assert_eq!(
        messages.sweep_files_at(later).await.unwrap(),
        0,
        "a second sweep finds none"
    );
    let left = messages
        .files
        .store
        .uploads(&[sent_key, recalled_key, unused_key])
        .await
        .unwrap();
    assert_eq!(
        left.iter().map(|u| &u.key).collect::<Vec<_>>(),
        vec![sent_key]
    );
}

#[tokio::test]
async fn an_edit_that_swaps_the_object_releases_the_old_one() {
    let (messages, dir) = with_files().await;
    let keys = uploaded(&messages, &dir, 2).await;
    let sent = messages
        .send(u(1), send("img", 2, image_of(&keys[0], 10)))
        .await
        .unwrap();
    messages
        .edit(u(1), "d:1:2", sent.seq, Some(image_of(&keys[1], 10)))
        .await
        .unwrap();
    let later = imesh_kit::ids::unix_ms()
        + messages.files.rules.unreferenced_ttl_secs as i64 * 1000
        + 1_000;
    assert_eq!(messages.sweep_files_at(later).await.unwrap(), 1);
    assert!(!dir.join(&keys[0]).exists());
    assert!(dir.join(&keys[1]).exists());
}

#[tokio::test]
async fn a_deployment_without_files_refuses_tickets_downloads_and_references() {
    let (mut messages, _) = messages().await;
    messages.files.blobs = None;
    let err = messages
        .create_upload(u(1), image_upload(10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::FilesOff), "{err:?}");
    let key = "1/0123456789abcdef0123456789abcdef";
    let err = messages
        .send(u(1), send("img", 2, image_of(key, 10)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::FilesOff), "{err:?}");
    let sent = messages.send(u(1), text("t", 2, "hi")).await.unwrap();
    let err = messages
        .download(u(2), "d:1:2", sent.seq)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoObject), "{err:?}");
    assert_eq!(messages.sweep_files().await.unwrap(), 0);
}

#[tokio::test]
async fn a_user_past_their_tickets_a_minute_is_refused_and_others_are_not() {
    let (messages, _) = with_files_limited(RateLimits::unlimited().with_tickets(2)).await;
    let refused = messages.create_upload(u(1), image_upload(0)).await;
    assert!(
        matches!(refused, Err(Error::Invalid { .. })),
        "a bad request takes no budget"
    );
    for _ in 0..2 {
        messages
            .create_upload(u(1), image_upload(10))
            .await
            .unwrap();
    }
    let err = messages
        .create_upload(u(1), image_upload(10))
        .await
        .unwrap_err();
    let Error::RateLimited(limited) = err else {
        panic!("expected a rate limit, got {err:?}");
    };
    assert_eq!(limited.scope, "user_id");
    assert!(limited.retry_after_ms > 0);
    messages
        .create_upload(u(2), image_upload(10))
        .await
        .unwrap();
    messages
        .create_upload(Sender::System, image_upload(10))
        .await
        .unwrap();
}
