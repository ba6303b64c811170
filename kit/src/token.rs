//! User tokens: JWTs that relation-svc issues and the gateway verifies locally, by
//! signature. `sub` is the user id, `ver` the user's token version when it was issued
//! (disabling a user moves the version on, which the gateway checks on connect).
//!
//! Keys rotate: a token names its key in the header's `kid` (derived from the key), and a
//! verifier holds several keys: the signing one and those still trusted
//! ([`AuthConfig::jwt_verify_secrets`], [`AuthConfig::jwt_public_keys`]). Tokens are signed
//! with HS256 under [`AuthConfig::jwt_secret`], or with EdDSA (Ed25519) under
//! [`AuthConfig::jwt_private_key`], in which case verifiers need only public keys.

use std::{collections::HashMap, time::Duration};

use anyhow::Context as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::AuthConfig;

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    iat: i64,
    exp: i64,
    #[serde(default)]
    ver: i64,
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    pub user_id: i64,
    pub version: i64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid")]
    Invalid,
}

/// A key that verifies tokens, and how.
#[derive(Clone)]
struct Verifier {
    key: DecodingKey,
    validation: Validation,
}

#[derive(Clone)]
pub struct Tokens {
    /// The newest key, with the header naming it; `None` on a verifier holding only
    /// public keys.
    signing: Option<(EncodingKey, Header)>,
    /// `kid` → key.
    verifying: HashMap<String, Verifier>,
    /// Tokens issued before keys had ids carry none: HS256 under the configured secrets.
    untagged: Vec<String>,
    ttl: Duration,
}

/// A freshly issued token.
pub struct Issued {
    pub token: String,
    pub expires_at_ms: i64,
}

/// A key's id: its algorithm and the start of the SHA-256 of its material.
fn kid(algorithm: &str, material: &[u8]) -> String {
    let digest = Sha256::digest(material);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{algorithm}-{hex}")
}

fn validation(algorithm: Algorithm) -> Validation {
    let mut validation = Validation::new(algorithm);
    validation.leeway = 5;
    validation.set_required_spec_claims(&["exp", "sub"]);
    validation
}

impl Tokens {
    /// Every key `auth` names; signs with the private key if there is one, else with the
    /// secret. Fails on a key that does not parse, or a private key none of the public keys
    /// verifies (verifiers would refuse its tokens).
    pub fn new(auth: &AuthConfig, ttl: Duration) -> anyhow::Result<Self> {
        let mut verifying = HashMap::new();
        let mut untagged = Vec::new();
        let secrets = std::iter::once(&auth.jwt_secret).chain(&auth.jwt_verify_secrets);
        for secret in secrets.filter(|s| !s.is_empty()) {
            let bytes = secret.expose().as_bytes();
            let id = kid("hs", bytes);
            let verifier = Verifier {
                key: DecodingKey::from_secret(bytes)?,
                validation: validation(Algorithm::HS256),
            };
            verifying.insert(id.clone(), verifier);
            untagged.push(id);
        }
        for (i, pem) in auth.jwt_public_keys.iter().enumerate() {
            let key = DecodingKey::from_ed_pem(pem.as_bytes()).with_context(|| {
                format!("auth.jwt_public_keys[{i}]: not an Ed25519 public key PEM")
            })?;
            let verifier = Verifier {
                key,
                validation: validation(Algorithm::EdDSA),
            };
            verifying.insert(kid("ed", pem.trim().as_bytes()), verifier);
        }
        let mut tokens = Self {
            signing: None,
            verifying,
            untagged,
            ttl,
        };
        tokens.signing = if !auth.jwt_private_key.is_empty() {
            let key = EncodingKey::from_ed_pem(auth.jwt_private_key.expose().as_bytes())
                .context("auth.jwt_private_key: not an Ed25519 private key PEM (PKCS#8)")?;
            Some(tokens.public_half(key)?)
        } else if !auth.jwt_secret.is_empty() {
            let bytes = auth.jwt_secret.expose().as_bytes();
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some(kid("hs", bytes));
            Some((EncodingKey::from_secret(bytes)?, header))
        } else {
            None
        };
        Ok(tokens)
    }

    /// The signing key `private` with the header naming its public half among the
    /// verifying keys.
    fn public_half(&self, private: EncodingKey) -> anyhow::Result<(EncodingKey, Header)> {
        let probe = Claims {
            sub: "1".into(),
            iat: 0,
            exp: i64::MAX / 2,
            ver: 0,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &probe, &private)?;
        let kid = self
            .verifying
            .iter()
            .find(|(_, v)| {
                v.validation.algorithms == [Algorithm::EdDSA]
                    && jsonwebtoken::decode::<Claims>(&token, &v.key, &v.validation).is_ok()
            })
            .map(|(kid, _)| kid.clone())
            .context("auth.jwt_public_keys: must hold the public key of auth.jwt_private_key")?;
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid);
        Ok((private, header))
    }

    pub fn issue(&self, user_id: i64, version: i64) -> anyhow::Result<Issued> {
        let (key, header) = self
            .signing
            .as_ref()
            .context("no signing key: set auth.jwt_secret or auth.jwt_private_key")?;
        let now = crate::ids::unix_ms() / 1000;
        let exp = now + self.ttl.as_secs() as i64;
        let claims = Claims {
            sub: user_id.to_string(),
            iat: now,
            exp,
            ver: version,
        };
        let token = jsonwebtoken::encode(header, &claims, key)?;
        Ok(Issued {
            token,
            expires_at_ms: exp * 1000,
        })
    }

    /// The user a token was issued to, and at which token version.
    pub fn verify(&self, token: &str) -> Result<Verified, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Invalid)?;
        let candidates: Vec<&Verifier> = match &header.kid {
            Some(kid) => self.verifying.get(kid).into_iter().collect(),
            None => self
                .untagged
                .iter()
                .filter_map(|kid| self.verifying.get(kid))
                .collect(),
        };
        let mut outcome = Err(TokenError::Invalid);
        for verifier in candidates {
            match jsonwebtoken::decode::<Claims>(token, &verifier.key, &verifier.validation) {
                Ok(data) => {
                    outcome = Ok(data.claims);
                    break;
                }
                Err(e) if *e.kind() == jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                    outcome = Err(TokenError::Expired);
                }
                Err(_) => {}
            }
        }
        let claims = outcome?;
        let user_id = claims
            .sub
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .ok_or(TokenError::Invalid)?;
        Ok(Verified {
            user_id,
            version: claims.ver,
        })
    }
}

#[cfg(test)]
mod tests;
