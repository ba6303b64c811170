//! User tokens: HS256 JWTs that relation-svc issues and the gateway verifies locally,
//! by signature. `sub` is the user id, `ver` the user's token version when it was issued
//! (disabling a user moves the version on, which the gateway checks on connect).

use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::config::Secret;

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

#[derive(Clone)]
pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl: Duration,
}

/// A freshly issued token.
pub struct Issued {
    pub token: String,
    pub expires_at_ms: i64,
}

impl Tokens {
    pub fn new(secret: &Secret, ttl: Duration) -> anyhow::Result<Self> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Ok(Self {
            encoding: EncodingKey::from_secret(secret.expose().as_bytes())?,
            decoding: DecodingKey::from_secret(secret.expose().as_bytes())?,
            validation,
            ttl,
        })
    }

    pub fn issue(&self, user_id: i64, version: i64) -> anyhow::Result<Issued> {
        let now = crate::ids::unix_ms() / 1000;
        let exp = now + self.ttl.as_secs() as i64;
        let claims = Claims {
            sub: user_id.to_string(),
            iat: now,
            exp,
            ver: version,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)?;
        Ok(Issued {
            token,
            expires_at_ms: exp * 1000,
        })
    }

    /// The user a token was issued to, and at which token version.
    pub fn verify(&self, token: &str) -> Result<Verified, TokenError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => TokenError::Expired,
                _ => TokenError::Invalid,
            })?;
        let user_id = data
            .claims
            .sub
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .ok_or(TokenError::Invalid)?;
        Ok(Verified {
            user_id,
            version: data.claims.ver,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(secret: &str, ttl_secs: u64) -> Tokens {
        Tokens::new(&Secret::new(secret), Duration::from_secs(ttl_secs)).unwrap()
    }

    #[test]
    fn an_issued_token_verifies_to_its_user() {
        let t = tokens("0123456789abcdef0123", 60);
        let issued = t.issue(77, 3).unwrap();
        assert_eq!(
            t.verify(&issued.token),
            Ok(Verified {
                user_id: 77,
                version: 3
            })
        );
        assert!(issued.expires_at_ms > crate::ids::unix_ms());
    }

    #[test]
    fn foreign_tampered_and_expired_tokens_are_refused() {
        let t = tokens("0123456789abcdef0123", 60);
        let other = tokens("another-secret-0123456", 60).issue(77, 0).unwrap();
        assert_eq!(t.verify(&other.token), Err(TokenError::Invalid));
        assert_eq!(t.verify("not.a.jwt"), Err(TokenError::Invalid));
        let claims = Claims {
            sub: "77".into(),
            iat: 0,
            exp: 1000,
            ver: 0,
        };
        let expired = jsonwebtoken::encode(&Header::default(), &claims, &t.encoding).unwrap();
        assert_eq!(t.verify(&expired), Err(TokenError::Expired));
    }
}
