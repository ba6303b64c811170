//! Files end to end: a client asks for an upload ticket, PUTs the bytes straight to the
//! object store (the gateway's `/files` on the embedded default, the S3 server otherwise),
//! sends a message referencing the object, and its peer fetches it through a short-lived
//! link; nobody else may fetch it or reference it, bad uploads are refused, and objects
//! no message references are swept. Runs on every available store set.

use std::time::Duration;

use imesh_protos::{
    gateway::{client_frame, server_frame::Body},
    message::{
        Content, CreateUploadRequest, CreateUploadResponse, GetDownloadRequest, Media, SendRequest,
        UploadKind, UploadTarget, content, send_request::To,
    },
    sync::sync_event::Kind,
};
use imesh_tests::{Device, Stores, TestCluster, eventually};
use tonic::Code;

fn http() -> reqwest::Client {
    imesh_kit::hooks::http_client("test", "", Duration::from_secs(10)).unwrap()
}

fn photo() -> Vec<u8> {
    (0..2048u32).map(|i| (i * 7 % 251) as u8).collect()
}

async fn ticket(device: &mut Device, request: CreateUploadRequest) -> Body {
    let id = device
        .send_frame(client_frame::Body::CreateUpload(request))
        .await;
    device.reply(id).await
}

fn png(size: usize, thumbnail: usize) -> CreateUploadRequest {
    CreateUploadRequest {
        kind: UploadKind::Image as i32,
        mime_type: "image/png".into(),
        size_bytes: size as i64,
        thumbnail_size_bytes: thumbnail as i64,
        thumbnail_mime_type: if thumbnail > 0 {
            "image/jpeg".into()
        } else {
            String::new()
        },
    }
}

/// PUTs `body` as the ticket's target says; the answer's status.
async fn put(target: &UploadTarget, body: Vec<u8>) -> reqwest::StatusCode {
    let mut request = http().put(&target.url).body(body);
    for (name, value) in &target.headers {
        request = request.header(name, value);
    }
    request.send().await.unwrap().status()
}

async fn fetch(url: &str) -> (reqwest::StatusCode, String, Vec<u8>) {
    let answer = http().get(url).send().await.unwrap();
    let status = answer.status();
    let content_type = answer
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, answer.bytes().await.unwrap().to_vec())
}

fn image(object: &UploadTarget, thumbnail: Option<&UploadTarget>, size: usize) -> Content {
    Content {
        kind: Some(content::Kind::Image(Media {
            object_key: object.object_key.clone(),
            thumbnail_key: thumbnail.map(|t| t.object_key.clone()).unwrap_or_default(),
            size_bytes: size as i64,
            mime_type: "image/png".into(),
            width: 32,
            height: 64,
            ..Media::default()
        })),
    }
}

async fn send_image(device: &mut Device, to: i64, client_msg_id: &str, content: Content) -> Body {
    device
        .send(SendRequest {
            client_msg_id: client_msg_id.into(),
            to: Some(To::UserId(to)),
            content: Some(content),
            ..SendRequest::default()
        })
        .await
}

fn targets(upload: &CreateUploadResponse) -> (UploadTarget, Option<UploadTarget>) {
    (upload.object.clone().unwrap(), upload.thumbnail.clone())
}

async fn photo_scenario(stores: Stores) {
    let env = TestCluster::start(stores).await;
    let (_, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let (_, carol_token) = env.user("carol").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut b = env.signed_in(&bob_token, "bob-phone").await;
    let mut c = env.signed_in(&carol_token, "carol-phone").await;

    let Body::Upload(upload) = ticket(&mut a, png(2048, 100)).await else {
        panic!("{stores:?}: ticket refused");
    };
    let (object, thumbnail) = targets(&upload);
    let thumbnail = thumbnail.expect("a thumbnail target");
    let forged = UploadTarget {
        url: format!("{}0", object.url),
        ..object.clone()
    };
    assert!(
        put(&forged, photo()).await.is_client_error(),
        "{stores:?}: a forged link"
    );
    let short = put(&object, photo()[..2000].to_vec()).await;
    assert!(
        short.is_client_error(),
        "{stores:?}: {short} for fewer bytes than signed"
    );
    let sent_early = send_image(&mut a, bob, "early", image(&object, None, 2048)).await;
    let Body::Error(early) = sent_early else {
        panic!("{stores:?}: a message referenced an object not uploaded yet");
    };
    assert_eq!(early.code, Code::FailedPrecondition as u32, "{early:?}");
    assert!(
        early.message.starts_with("content.image.object_key:"),
        "{early:?}"
    );

    let stored = put(&object, photo()).await;
    assert!(stored.is_success(), "{stores:?}: upload answered {stored}");
    assert!(put(&thumbnail, vec![9u8; 100]).await.is_success());
    if stores == Stores::Embedded {
        let again = put(&object, photo()).await;
        assert_eq!(
            again,
            reqwest::StatusCode::CONFLICT,
            "an object is written once"
        );
    }

    let Body::SendAck(sent) =
        send_image(&mut a, bob, "photo", image(&object, Some(&thumbnail), 2048)).await
    else {
        panic!("{stores:?}: the image message was refused");
    };
    let pushed = b
        .pushed(|kind| match kind {
            Kind::Message(m) if m.seq == sent.seq => Some(m),
            _ => None,
        })
        .await;
    let Some(content::Kind::Image(media)) = pushed.content.and_then(|c| c.kind) else {
        panic!("{stores:?}: the push carries no image");
    };
    assert_eq!(media.object_key, object.object_key);

    let download = GetDownloadRequest {
        conversation_id: sent.conversation_id.clone(),
        seq: sent.seq,
    };
    let id = b
        .send_frame(client_frame::Body::GetDownload(download.clone()))
        .await;
    let Body::Download(links) = b.reply(id).await else {
        panic!("{stores:?}: the reader's download was refused");
    };
    let (status, content_type, bytes) = fetch(&links.url).await;
    assert!(
        status.is_success(),
        "{stores:?}: download answered {status}"
    );
    assert_eq!(
        (content_type.as_str(), bytes),
        ("image/png", photo()),
        "{stores:?}"
    );
    let (_, thumbnail_type, thumbnail_bytes) = fetch(&links.thumbnail_url).await;
    assert_eq!(
        (thumbnail_type.as_str(), thumbnail_bytes),
        ("image/jpeg", vec![9u8; 100])
    );
    let (status, ..) = fetch(&format!("{}0", links.url)).await;
    assert!(
        status.is_client_error(),
        "{stores:?}: a forged download link"
    );

    let id = c
        .send_frame(client_frame::Body::GetDownload(download))
        .await;
    let Body::Error(outsider) = c.reply(id).await else {
        panic!("{stores:?}: an outsider got a download link");
    };
    assert_eq!(outsider.code, Code::PermissionDenied as u32, "{outsider:?}");
    let Body::Error(theirs) = send_image(&mut c, bob, "theft", image(&object, None, 2048)).await
    else {
        panic!("{stores:?}: carol referenced alice's object");
    };
    assert_eq!(theirs.code, Code::InvalidArgument as u32, "{theirs:?}");
    assert!(
        theirs.message.starts_with("content.image.object_key:"),
        "{theirs:?}"
    );
    let html = CreateUploadRequest {
        mime_type: "text/html".into(),
        ..png(10, 0)
    };
    let Body::Error(refused) = ticket(&mut c, html).await else {
        panic!("{stores:?}: an HTML image ticket was given");
    };
    assert_eq!(refused.code, Code::InvalidArgument as u32);
    assert!(refused.message.starts_with("mime_type:"), "{refused:?}");
    let Body::Error(refused) = ticket(&mut c, png(21 << 20, 0)).await else {
        panic!("{stores:?}: an image over the limit was given a ticket");
    };
    assert!(refused.message.starts_with("size_bytes:"), "{refused:?}");
}

#[tokio::test]
async fn a_photo_goes_up_by_ticket_and_down_to_readers_only() {
    for stores in Stores::available() {
        photo_scenario(stores).await;
    }
}

async fn sweep_scenario(stores: Stores) {
    let env = TestCluster::start_with(stores, |spec| {
        spec.message.files.rules.unreferenced_ttl_secs = 4;
        spec.message.files.sweep_interval_secs = 1;
    })
    .await;
    let blobs = env.files.blobs(&env.auth).unwrap().expect("a file store");
    let (_, alice_token) = env.user("alice").await;
    let (bob, _) = env.user("bob").await;
    let mut a = env.signed_in(&alice_token, "alice-phone").await;
    let mut objects = Vec::new();
    for _ in 0..2 {
        let Body::Upload(upload) = ticket(&mut a, png(16, 0)).await else {
            panic!("{stores:?}: ticket refused");
        };
        let object = upload.object.unwrap();
        assert!(put(&object, vec![1u8; 16]).await.is_success());
        objects.push(object);
    }
    let Body::SendAck(_) = send_image(&mut a, bob, "kept", image(&objects[0], None, 16)).await
    else {
        panic!("{stores:?}: the image message was refused");
    };
    let unused = objects[1].object_key.as_str();
    eventually(
        "the unreferenced object is swept",
        Duration::from_secs(30),
        // A HEAD racing the sweep's DELETE may fail on the S3 server; it asks again.
        async || matches!(blobs.size(unused).await, Ok(None)).then_some(()),
    )
    .await;
    let kept = blobs.size(&objects[0].object_key).await.unwrap();
    assert_eq!(kept, Some(16), "{stores:?}: the referenced object stays");
}

#[tokio::test]
async fn objects_no_message_references_are_swept() {
    for stores in Stores::available() {
        sweep_scenario(stores).await;
    }
}
