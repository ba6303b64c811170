//! Objects in an S3 bucket: presigned URLs (SigV4, signed here without a call) for clients'
//! uploads and downloads, and signed HEAD and DELETE calls of message-svc's own.

use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

use super::S3Config;
use crate::domain::Blobs;

/// How long the URL of one of message-svc's own calls is valid.
const CALL_TTL: Duration = Duration::from_secs(60);

pub struct S3Blobs {
    bucket: Bucket,
    credentials: Credentials,
    client: reqwest::Client,
}

impl S3Blobs {
    pub fn new(config: &S3Config) -> anyhow::Result<Self> {
        let endpoint = config
            .endpoint
            .parse()
            .context("files.s3.endpoint: not a URL")?;
        let style = match config.virtual_host {
            true => UrlStyle::VirtualHost,
            false => UrlStyle::Path,
        };
        anyhow::ensure!(!config.bucket.is_empty(), "files.s3.bucket: must be set");
        let bucket = Bucket::new(
            endpoint,
            style,
            config.bucket.clone(),
            config.region.clone(),
        )
        .context("files.s3.endpoint: must be an http(s) URL with a host")?;
        let timeout = Duration::from_millis(config.timeout_ms.max(1));
        Ok(Self {
            bucket,
            credentials: Credentials::new(config.access_key.expose(), config.secret_key.expose()),
            client: imesh_kit::hooks::http_client("files.s3", &config.ca_file, timeout)?,
        })
    }
}

impl S3Blobs {
    /// Creates the bucket (in us-east-1, or on a server that takes any region): for tests
    /// and first setups; a deployment's bucket is usually made by its operators.
    pub async fn create_bucket(&self) -> anyhow::Result<()> {
        let url = self.bucket.create_bucket(&self.credentials).sign(CALL_TTL);
        self.client.put(url).send().await?.error_for_status()?;
        Ok(())
    }
}

#[async_trait]
impl Blobs for S3Blobs {
    fn upload_url(
        &self,
        key: &str,
        size: i64,
        mime: &str,
        ttl: Duration,
    ) -> (String, Vec<(String, String)>) {
        let mut put = self.bucket.put_object(Some(&self.credentials), key);
        // Signed: S3 refuses a PUT of another type or length.
        put.headers_mut().insert("content-type", mime.to_owned());
        put.headers_mut().insert("content-length", size.to_string());
        let url = put.sign(ttl).to_string();
        (url, vec![("content-type".into(), mime.into())])
    }

    fn download_url(&self, key: &str, mime: &str, ttl: Duration) -> String {
        let mut get = self.bucket.get_object(Some(&self.credentials), key);
        get.query_mut()
            .insert("response-content-type", mime.to_owned());
        get.sign(ttl).to_string()
    }

    async fn size(&self, key: &str) -> anyhow::Result<Option<i64>> {
        let url = self
            .bucket
            .head_object(Some(&self.credentials), key)
            .sign(CALL_TTL);
        let answer = self.client.head(url).send().await?;
        if answer.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let answer = answer.error_for_status()?;
        let length = answer
            .headers()
            .get(reqwest::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .context("HEAD answered without a Content-Length")?;
        Ok(Some(length))
    }

    async fn delete(&self, key: &str) -> anyhow::Result<()> {
        let url = self
            .bucket
            .delete_object(Some(&self.credentials), key)
            .sign(CALL_TTL);
        let answer = self.client.delete(url).send().await?;
        if answer.status() != reqwest::StatusCode::NOT_FOUND {
            answer.error_for_status()?;
        }
        Ok(())
    }
}
