//! Objects as files under one folder, which the gateway's `/files` serves: links signed
//! with the key both derive from the internal credential (`imesh_kit::files`).

use std::{io::ErrorKind, path::PathBuf, time::Duration};

use anyhow::Context as _;
use async_trait::async_trait;
use imesh_kit::files::{Access, Link, LinkSigner};

use super::LocalConfig;
use crate::domain::Blobs;

pub struct LocalBlobs {
    dir: PathBuf,
    /// Where the gateway serves the folder; each link appends the key and its signature.
    public_url: reqwest::Url,
    signer: LinkSigner,
}

impl LocalBlobs {
    pub fn new(config: &LocalConfig, signer: LinkSigner) -> anyhow::Result<Self> {
        let mut public_url =
            reqwest::Url::parse(&config.public_url).context("files.local.public_url: not a URL")?;
        anyhow::ensure!(
            !public_url.cannot_be_a_base(),
            "files.local.public_url: must be an http(s) URL such as http://127.0.0.1:8080/files"
        );
        public_url
            .path_segments_mut()
            .expect("checked: a base URL")
            .pop_if_empty();
        Ok(Self {
            dir: PathBuf::from(&config.dir),
            public_url,
            signer,
        })
    }

    fn link(&self, access: Access, key: &str, size: i64, mime: &str, ttl: Duration) -> String {
        let link = Link {
            access,
            key,
            expires: imesh_kit::ids::unix_ms() / 1000 + ttl.as_secs() as i64,
            size,
            mime,
        };
        let mut url = self.public_url.clone();
        url.path_segments_mut()
            .expect("checked: a base URL")
            .extend(key.split('/'));
        url.query_pairs_mut().extend_pairs(self.signer.query(&link));
        url.into()
    }
}

#[async_trait]
impl Blobs for LocalBlobs {
    fn upload_url(
        &self,
        key: &str,
        size: i64,
        mime: &str,
        ttl: Duration,
    ) -> (String, Vec<(String, String)>) {
        let url = self.link(Access::Upload, key, size, mime, ttl);
        (url, vec![("content-type".into(), mime.into())])
    }

    fn download_url(&self, key: &str, mime: &str, ttl: Duration) -> String {
        self.link(Access::Download, key, 0, mime, ttl)
    }

    async fn size(&self, key: &str) -> anyhow::Result<Option<i64>> {
        match tokio::fs::metadata(self.dir.join(key)).await {
            Ok(meta) => Ok(Some(meta.len() as i64)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading the size of object {key}")),
        }
    }

    async fn delete(&self, key: &str) -> anyhow::Result<()> {
        match tokio::fs::remove_file(self.dir.join(key)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting object {key}")),
        }
    }
}
