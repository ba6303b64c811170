use super::*;
use crate::config::Secret;

use crate::testing::{PRIVATE_A, PRIVATE_B, PUBLIC_A, PUBLIC_B};

const SECRET: &str = "0123456789abcdef0123";
const NEW_SECRET: &str = "fedcba9876543210fedc";

fn hs(secret: &str, verify_also: &[&str]) -> Tokens {
    let auth = AuthConfig {
        jwt_secret: Secret::new(secret),
        jwt_verify_secrets: verify_also.iter().map(|s| Secret::new(*s)).collect(),
        ..AuthConfig::default()
    };
    Tokens::new(&auth, Duration::from_secs(60)).unwrap()
}

fn ed(private: &str, public: &[&str]) -> anyhow::Result<Tokens> {
    let auth = AuthConfig {
        jwt_private_key: Secret::new(private),
        jwt_public_keys: public.iter().map(|p| (*p).to_owned()).collect(),
        ..AuthConfig::default()
    };
    Tokens::new(&auth, Duration::from_secs(60))
}

fn user(t: &Tokens, token: &str) -> Result<i64, TokenError> {
    t.verify(token).map(|v| v.user_id)
}

#[test]
fn an_issued_token_verifies_to_its_user() {
    let t = hs(SECRET, &[]);
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
    let t = hs(SECRET, &[]);
    let other = hs("another-secret-0123456", &[]).issue(77, 0).unwrap();
    assert_eq!(t.verify(&other.token), Err(TokenError::Invalid));
    assert_eq!(t.verify("not.a.jwt"), Err(TokenError::Invalid));
    let claims = Claims {
        sub: "77".into(),
        iat: 0,
        exp: 1000,
        ver: 0,
    };
    let (key, header) = t.signing.clone().unwrap();
    let expired = jsonwebtoken::encode(&header, &claims, &key).unwrap();
    assert_eq!(t.verify(&expired), Err(TokenError::Expired));
}

#[test]
fn a_rotated_secret_verifies_old_tokens_until_it_is_retired() {
    let before = hs(SECRET, &[]);
    let old = before.issue(1, 0).unwrap().token;
    // Step 1: every verifier learns the new secret; tokens are still signed with the old.
    let learning = hs(SECRET, &[NEW_SECRET]);
    assert_eq!(user(&learning, &old), Ok(1));
    // Step 2: the new secret signs; the old one only verifies.
    let rotated = hs(NEW_SECRET, &[SECRET]);
    let new = rotated.issue(2, 0).unwrap().token;
    assert_eq!(user(&rotated, &old), Ok(1));
    assert_eq!(user(&rotated, &new), Ok(2));
    assert_eq!(
        user(&learning, &new),
        Ok(2),
        "a verifier of step 1 takes new tokens"
    );
    // Step 3, after the token lifetime: the old secret is retired.
    let retired = hs(NEW_SECRET, &[]);
    assert_eq!(user(&retired, &old), Err(TokenError::Invalid));
    assert_eq!(user(&retired, &new), Ok(2));
}

#[test]
fn tokens_without_a_key_id_verify_under_the_configured_secrets() {
    let t = hs(SECRET, &[]);
    let claims = Claims {
        sub: "5".into(),
        iat: 0,
        exp: i64::MAX / 2,
        ver: 0,
    };
    let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
    let untagged = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap();
    assert_eq!(user(&t, &untagged), Ok(5));
    assert_eq!(
        user(&hs(NEW_SECRET, &[]), &untagged),
        Err(TokenError::Invalid)
    );
}

#[test]
fn eddsa_tokens_verify_with_public_keys_only_and_keys_rotate() {
    let issuer_a = ed(PRIVATE_A, &[PUBLIC_A]).unwrap();
    let token_a = issuer_a.issue(9, 1).unwrap().token;
    let gateway = ed("", &[PUBLIC_A, PUBLIC_B]).unwrap();
    assert_eq!(user(&gateway, &token_a), Ok(9));
    assert!(gateway.issue(9, 1).is_err(), "public keys sign nothing");
    let issuer_b = ed(PRIVATE_B, &[PUBLIC_A, PUBLIC_B]).unwrap();
    let token_b = issuer_b.issue(10, 0).unwrap().token;
    assert_eq!(user(&gateway, &token_b), Ok(10));
    let retired = ed("", &[PUBLIC_B]).unwrap();
    assert_eq!(user(&retired, &token_a), Err(TokenError::Invalid));
    assert_eq!(user(&retired, &token_b), Ok(10));
    assert_eq!(user(&hs(SECRET, &[]), &token_b), Err(TokenError::Invalid));
}

#[test]
fn a_private_key_whose_public_half_is_not_trusted_is_refused_at_start() {
    let err = ed(PRIVATE_A, &[PUBLIC_B]).err().expect("refused");
    assert!(
        err.to_string()
            .starts_with("auth.jwt_public_keys: must hold"),
        "{err}"
    );
    let err = ed("not a key", &[PUBLIC_A]).err().expect("refused");
    assert!(
        err.to_string().starts_with("auth.jwt_private_key:"),
        "{err}"
    );
    let err = ed("", &["not a key"]).err().expect("refused");
    assert!(
        err.to_string().starts_with("auth.jwt_public_keys[0]:"),
        "{err}"
    );
}
