//! Calls to the company's app server (before-send checks, after-event webhooks): JSON
//! POSTed over HTTPS (rustls, the public roots plus an optional company CA) or plain HTTP,
//! each body signed so the receiver can tell it came from imesh and is fresh:
//!
//! `x-imesh-signature: t=<unix ms>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`
//!
//! The receiver recomputes the HMAC over the timestamp, a dot and the raw body, compares
//! in constant time, and refuses timestamps too far from its clock (replays).

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::HookConfig;

/// The header carrying a body's signature.
pub const SIGNATURE_HEADER: &str = "x-imesh-signature";

/// The signature header's value for `body` sent at `unix_ms`.
pub fn signature(secret: &str, unix_ms: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any size");
    mac.update(unix_ms.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "t={unix_ms},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// An HTTP(S) client trusting the public roots and, when `ca_file` names one, a company CA
/// (PEM); every call and connect bounded by `timeout`. `what` names the setting in errors.
pub fn http_client(
    what: &str,
    ca_file: &str,
    timeout: Duration,
) -> anyhow::Result<reqwest::Client> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if !ca_file.is_empty() {
        let extra = crate::tls::roots(std::path::Path::new(ca_file))
            .with_context(|| format!("{what}.ca_file"))?;
        roots.extend(extra.roots);
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .with_context(|| format!("{what}: building the HTTP client"))
}

/// Whether an endpoint's calls must be signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signing {
    /// A secret of at least 16 characters is required (the app server's hooks).
    Required,
    /// Signed when a secret is set (e.g. a push service on a trusted network).
    Optional,
}

/// Why a POST did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("POST {0}: answered {1}")]
    Refused(String, reqwest::StatusCode),
    #[error("POST {0}: {1}")]
    Failed(String, #[source] reqwest::Error),
}

impl PostError {
    /// A refusal the same request would meet again: a 4xx other than 429.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Refused(_, status)
            if status.is_client_error() && *status != reqwest::StatusCode::TOO_MANY_REQUESTS)
    }
}

/// A (signing) HTTP(S) client of one endpoint.
#[derive(Clone)]
pub struct Hook {
    client: reqwest::Client,
    url: reqwest::Url,
    secret: crate::config::Secret,
}

impl Hook {
    /// The endpoint `config` names; `None` when its URL is empty. `what` names the setting
    /// in errors (e.g. `hooks.before_send`).
    pub fn new(what: &str, config: &HookConfig, signing: Signing) -> anyhow::Result<Option<Self>> {
        if config.url.is_empty() {
            return Ok(None);
        }
        let url: reqwest::Url = config
            .url
            .parse()
            .with_context(|| format!("{what}.url: not a URL"))?;
        anyhow::ensure!(
            matches!(url.scheme(), "https" | "http") && url.host().is_some(),
            "{what}.url: must be an https:// (or http://) URL with a host"
        );
        let secret = config.secret.expose();
        anyhow::ensure!(
            secret.len() >= 16 || (signing == Signing::Optional && secret.is_empty()),
            "{what}.secret: must be at least 16 characters"
        );
        let timeout = Duration::from_millis(config.timeout_ms.max(1));
        let client = http_client(what, &config.ca_file, timeout)?;
        Ok(Some(Self {
            client,
            url,
            secret: config.secret.clone(),
        }))
    }

    /// POSTs `body` (JSON), signed when there is a secret; the answer's body on a 2xx.
    pub async fn post(&self, body: Vec<u8>) -> Result<bytes::Bytes, PostError> {
        let failed = |e| PostError::Failed(self.url.to_string(), e);
        let mut request = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if !self.secret.is_empty() {
            let signed = signature(self.secret.expose(), crate::ids::unix_ms(), &body);
            request = request.header(SIGNATURE_HEADER, signed);
        }
        let response = request.body(body).send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(PostError::Refused(self.url.to_string(), status));
        }
        response.bytes().await.map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_of_the_time_a_dot_and_the_body() {
        // Computed independently: printf '1700000000000.{"a":1}' |
        //   openssl dgst -sha256 -hmac 'k-0123456789abcdef'
        let got = signature("k-0123456789abcdef", 1_700_000_000_000, br#"{"a":1}"#);
        let (time, mac) = got.split_once(",v1=").unwrap();
        assert_eq!(time, "t=1700000000000");
        assert_eq!(
            mac,
            "ce6dc8280b40bc69e882a36bec51c079e535619fd76af10ce38146072e60f137"
        );
        assert_ne!(
            got,
            signature("k-0123456789abcdeX", 1_700_000_000_000, br#"{"a":1}"#),
            "another key signs differently"
        );
        assert_ne!(
            got,
            signature("k-0123456789abcdef", 1_700_000_000_001, br#"{"a":1}"#)
        );
    }

    #[test]
    fn a_hook_needs_an_http_url_and_a_long_enough_secret_and_is_off_without_a_url() {
        let config = |url: &str, secret: &str| HookConfig {
            url: url.into(),
            secret: crate::config::Secret::new(secret),
            ..HookConfig::default()
        };
        assert!(
            Hook::new("h", &config("", ""), Signing::Required)
                .unwrap()
                .is_none()
        );
        let long = "0123456789abcdef";
        for (url, secret, field) in [
            ("ftp://example.com/x", long, "h.url"),
            ("not a url", long, "h.url"),
            ("https://example.com/x", "short", "h.secret"),
        ] {
            let err = Hook::new("h", &config(url, secret), Signing::Required)
                .err()
                .unwrap()
                .to_string();
            assert!(err.starts_with(field), "{url}: {err}");
        }
        assert!(
            Hook::new(
                "h",
                &config("https://example.com/x", long),
                Signing::Required
            )
            .unwrap()
            .is_some()
        );
        let unsigned = config("http://push.internal/x", "");
        assert!(
            Hook::new("h", &unsigned, Signing::Optional)
                .unwrap()
                .is_some()
        );
        assert!(Hook::new("h", &unsigned, Signing::Required).is_err());
    }
}
