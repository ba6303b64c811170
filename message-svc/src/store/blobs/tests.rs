//! The object stores' contract against the real thing: the local folder, and S3 through
//! the test S3-compatible server (s3s-fs) with presigned URLs used by a plain HTTP client.

use std::time::Duration;

use imesh_kit::{config::Secret, files::LinkSigner, testing};

use super::*;
use crate::domain::Blobs;

const TTL: Duration = Duration::from_secs(60);

fn key() -> String {
    format!("7/{:032x}", rand::random::<u128>())
}

/// A fresh bucket on the test server, when there is one.
async fn s3_blobs() -> Option<S3Blobs> {
    let server = testing::s3()?;
    let config = S3Config {
        endpoint: server.endpoint,
        bucket: format!("imesh-{}", testing::random_id()),
        access_key: Secret::new(server.access_key),
        secret_key: Secret::new(server.secret_key),
        ..S3Config::default()
    };
    let blobs = S3Blobs::new(&config).unwrap();
    blobs.create_bucket().await.unwrap();
    Some(blobs)
}

#[tokio::test]
async fn s3_takes_a_presigned_upload_of_the_signed_type_and_length_only() {
    let Some(blobs) = s3_blobs().await else {
        return;
    };
    let http = imesh_kit::hooks::http_client("test", "", TTL).unwrap();
    let (key, body) = (key(), vec![42u8; 1500]);
    let (url, headers) = blobs.upload_url(&key, body.len() as i64, "image/png", TTL);
    assert_eq!(headers, vec![("content-type".into(), "image/png".into())]);
    assert_eq!(blobs.size(&key).await.unwrap(), None);

    let wrong_type = http
        .put(&url)
        .header("content-type", "text/html")
        .body(body.clone());
    assert!(wrong_type.send().await.unwrap().status().is_client_error());
    let wrong_length = http
        .put(&url)
        .header("content-type", "image/png")
        .body(vec![1u8; 10]);
    assert!(
        wrong_length
            .send()
            .await
            .unwrap()
            .status()
            .is_client_error()
    );
    let forged = url.replace("X-Amz-Signature=", "X-Amz-Signature=0");
    let forged = http
        .put(&forged)
        .header("content-type", "image/png")
        .body(body.clone());
    assert!(forged.send().await.unwrap().status().is_client_error());
    assert_eq!(
        blobs.size(&key).await.unwrap(),
        None,
        "nothing refused was stored"
    );

    let upload = http
        .put(&url)
        .header("content-type", "image/png")
        .body(body.clone());
    let answer = upload.send().await.unwrap();
    assert!(answer.status().is_success(), "{}", answer.status());
    assert_eq!(blobs.size(&key).await.unwrap(), Some(1500));

    let download = http
        .get(blobs.download_url(&key, "image/png", TTL))
        .send()
        .await
        .unwrap();
    assert!(download.status().is_success(), "{}", download.status());
    let content_type = download.headers()[reqwest::header::CONTENT_TYPE].clone();
    assert_eq!(content_type, "image/png");
    assert_eq!(download.bytes().await.unwrap().as_ref(), body.as_slice());

    blobs.delete(&key).await.unwrap();
    assert_eq!(blobs.size(&key).await.unwrap(), None);
    blobs.delete(&key).await.unwrap();
    let gone = http
        .get(blobs.download_url(&key, "image/png", TTL))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), reqwest::StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_local_store_sizes_and_deletes_files_under_its_folder() {
    let dir = testing::scratch_dir("blobs");
    let config = LocalConfig {
        dir: dir.display().to_string(),
        public_url: "http://gateway.test/files/".into(),
    };
    let signer = LinkSigner::new(&Secret::new("test-internal-secret-0123"));
    let blobs = LocalBlobs::new(&config, signer.clone()).unwrap();
    let key = key();
    assert_eq!(blobs.size(&key).await.unwrap(), None);
    std::fs::create_dir_all(dir.join("7")).unwrap();
    std::fs::write(dir.join(&key), [1u8; 33]).unwrap();
    assert_eq!(blobs.size(&key).await.unwrap(), Some(33));
    blobs.delete(&key).await.unwrap();
    assert_eq!(blobs.size(&key).await.unwrap(), None);
    blobs.delete(&key).await.unwrap();

    let (url, _) = blobs.upload_url(&key, 33, "image/png", TTL);
    let url = reqwest::Url::parse(&url).unwrap();
    assert_eq!(url.path(), format!("/files/{key}"));
    let query: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
    let link = imesh_kit::files::Link {
        access: imesh_kit::files::Access::Upload,
        key: &key,
        expires: query["expires"].parse().unwrap(),
        size: query["size"].parse().unwrap(),
        mime: &query["type"],
    };
    assert_eq!((link.size, link.mime), (33, "image/png"));
    let now = imesh_kit::ids::unix_ms() / 1000;
    assert_eq!(signer.verify(&link, &query["sig"], now), Ok(()));
}
