//! The webhook [`Provider`]: each notification is POSTed as JSON to a configured `http://`
//! URL (the company's push service, which holds the device tokens for APNs and FCM).
//! A 2xx answer is success, another 4xx a permanent refusal, anything else is retried.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

use crate::offline::{Notification, Provider, SendError};

pub struct Webhook {
    url: hyper::Uri,
    timeout: Duration,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Webhook {
    /// A webhook at `url`; only `http` URLs (put a TLS-terminating proxy in front of an
    /// `https` receiver).
    pub fn new(url: &str, timeout: Duration) -> anyhow::Result<Self> {
        let url: hyper::Uri = url
            .parse()
            .map_err(|e| anyhow::anyhow!("offline_push.webhook_url: not a URL ({e})"))?;
        if url.scheme_str() != Some("http") || url.host().is_none() {
            anyhow::bail!("offline_push.webhook_url: must be an http:// URL with a host");
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            url,
            timeout,
            client,
        })
    }
}

#[async_trait::async_trait]
impl Provider for Webhook {
    async fn send(&self, notification: &Notification) -> Result<(), SendError> {
        let body = serde_json::to_vec(notification)
            .map_err(|e| SendError::Permanent(format!("encoding: {e}")))?;
        let request = hyper::Request::post(self.url.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| SendError::Permanent(e.to_string()))?;
        let call = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| SendError::Transient(e.to_string()))?;
            let status = response.status();
            // Read the answer to the end so the connection can be reused.
            let _ = response.into_body().collect().await;
            Ok(status)
        };
        let status = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| SendError::Transient(format!("no answer in {:?}", self.timeout)))??;
        if status.is_success() {
            Ok(())
        } else if status.is_client_error() && status != hyper::StatusCode::TOO_MANY_REQUESTS {
            Err(SendError::Permanent(format!("HTTP {status}")))
        } else {
            Err(SendError::Transient(format!("HTTP {status}")))
        }
    }
}
