//! The webhook [`Provider`]: each notification is POSTed as JSON to a configured URL (the
//! company's push service, which holds the device tokens for APNs and FCM), over HTTPS or
//! HTTP through the kit's client ([`imesh_kit::hooks`]), signed when a secret is set.
//! A 2xx answer is success, another 4xx (but 429) a permanent refusal, anything else is
//! retried.

use imesh_kit::hooks::{Hook, Signing};

use crate::domain::{
    offline::Config,
    ports::{Notification, Provider, SendError},
};

pub struct Webhook(Hook);

impl Webhook {
    /// The push service `config` names; `None` when its URL is empty.
    pub fn new(config: &Config) -> anyhow::Result<Option<Self>> {
        let hook = imesh_kit::config::HookConfig {
            url: config.webhook_url.clone(),
            secret: config.secret.clone(),
            timeout_ms: config.timeout_ms,
            ca_file: config.ca_file.clone(),
        };
        Ok(Hook::new("offline_push", &hook, Signing::Optional)?.map(Self))
    }
}

#[async_trait::async_trait]
impl Provider for Webhook {
    async fn send(&self, notification: &Notification) -> Result<(), SendError> {
        let body = serde_json::to_vec(notification)
            .map_err(|e| SendError::Permanent(format!("encoding: {e}")))?;
        match self.0.post(body).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(SendError::Permanent(e.to_string())),
            Err(e) => Err(SendError::Transient(e.to_string())),
        }
    }
}
