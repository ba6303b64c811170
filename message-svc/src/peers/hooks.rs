//! The app server's before-send hook over HTTP(S) ([`imesh_kit::hooks`]): a user's message
//! POSTed as `{"type":"message.before_send","message":{…}}` (the proto3 JSON mapping of
//! `imesh.message.v1.Message`, without msg id or seq), answered with
//! `{"action":"allow"}`, `{"action":"reject","reason":"…"}` or
//! `{"action":"replace","content":{…}}` (an `imesh.message.v1.Content`).

use imesh_kit::hooks::Hook;
use imesh_protos::message as pb;

use crate::domain::{BeforeSend, Message, Verdict};

/// Longest refusal reason passed on to the sender, in characters.
const MAX_REASON: usize = 200;

pub struct AppServerCheck(pub Hook);

#[derive(serde::Deserialize)]
struct Answer {
    action: String,
    #[serde(default)]
    reason: String,
    content: Option<pb::Content>,
}

#[async_trait::async_trait]
impl BeforeSend for AppServerCheck {
    async fn check(&self, message: &Message) -> anyhow::Result<Verdict> {
        let body = serde_json::to_vec(&serde_json::json!({
            "type": "message.before_send",
            "message": crate::api::convert::message_to_proto(message),
        }))?;
        let answer = self.0.post(body).await?;
        let answer: Answer = serde_json::from_slice(&answer)
            .map_err(|e| anyhow::anyhow!("the before-send hook's answer: {e}"))?;
        Ok(match answer.action.as_str() {
            "allow" => Verdict::Allow,
            "reject" => {
                let reason: String = answer.reason.chars().take(MAX_REASON).collect();
                Verdict::Reject(if reason.is_empty() {
                    "no reason given".into()
                } else {
                    reason
                })
            }
            "replace" => {
                let kind = answer.content.and_then(|c| c.kind).ok_or_else(|| {
                    anyhow::anyhow!("the before-send hook's answer: replace without content")
                })?;
                Verdict::Replace(crate::api::convert::content_from_proto(kind))
            }
            other => anyhow::bail!("the before-send hook's answer: unknown action {other:?}"),
        })
    }
}
