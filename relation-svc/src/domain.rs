//! Accounts: registration, login and profiles. No tonic or sea-orm types here.

use std::sync::Arc;

use imesh_kit::{error::StoreError, ids::Snowflake, token::Tokens};

use crate::store::{NewUser, UserStore};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub nickname: String,
    pub created_at_ms: i64,
}

/// Everything that can go wrong in an account operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("username: already taken")]
    UsernameTaken,
    #[error("username or password is wrong")]
    BadCredentials,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("hashing a password failed: {0}")]
    Hashing(String),
    #[error("issuing a token failed")]
    Token(#[source] anyhow::Error),
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A checked username: 3–32 of `[a-z0-9_.-]`.
pub fn parse_username(raw: &str) -> Result<String, Error> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c);
    if !(3..=32).contains(&raw.len()) || !raw.chars().all(ok_char) {
        return Err(invalid(
            "username",
            "must be 3–32 characters of a-z, 0-9, '_', '.', '-'",
        ));
    }
    Ok(raw.to_owned())
}

fn parse_password(raw: &str) -> Result<&str, Error> {
    if !(8..=128).contains(&raw.chars().count()) {
        return Err(invalid("password", "must be 8–128 characters"));
    }
    Ok(raw)
}

fn parse_nickname(raw: &str, username: &str) -> Result<String, Error> {
    let nickname = raw.trim();
    match nickname.chars().count() {
        0 => Ok(username.to_owned()),
        1..=64 => Ok(nickname.to_owned()),
        _ => Err(invalid("nickname", "must be at most 64 characters")),
    }
}

pub struct Login {
    pub token: String,
    pub expires_at_ms: i64,
    pub user: User,
}

/// Most ids one GetUsers call may ask for.
pub const MAX_USERS_PER_CALL: usize = 500;

pub struct Accounts {
    store: Arc<dyn UserStore>,
    ids: Arc<Snowflake>,
    tokens: Tokens,
}

impl Accounts {
    pub fn new(store: Arc<dyn UserStore>, ids: Arc<Snowflake>, tokens: Tokens) -> Self {
        Self { store, ids, tokens }
    }

    pub async fn register(
        &self,
        username: &str,
        password: &str,
        nickname: &str,
    ) -> Result<User, Error> {
        let username = parse_username(username)?;
        let password = parse_password(password)?.to_owned();
        let nickname = parse_nickname(nickname, &username)?;
        let password_hash = tokio::task::spawn_blocking(move || hash_password(&password))
            .await
            .map_err(|e| Error::Hashing(e.to_string()))??;
        let user = User {
            id: self.ids.next_id(),
            username,
            nickname,
            created_at_ms: imesh_kit::ids::unix_ms(),
        };
        match self
            .store
            .insert(&NewUser {
                user: user.clone(),
                password_hash,
            })
            .await
        {
            Ok(()) => Ok(user),
            Err(StoreError::Conflict(_)) => Err(Error::UsernameTaken),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn login(&self, username: &str, password: &str) -> Result<Login, Error> {
        let username = parse_username(username).map_err(|_| Error::BadCredentials)?;
        let Some(found) = self.store.by_username(&username).await? else {
            return Err(Error::BadCredentials);
        };
        let password = password.to_owned();
        let hash = found.password_hash;
        let matches = tokio::task::spawn_blocking(move || verify_password(&password, &hash))
            .await
            .map_err(|e| Error::Hashing(e.to_string()))?;
        if !matches {
            return Err(Error::BadCredentials);
        }
        let issued = self.tokens.issue(found.user.id).map_err(Error::Token)?;
        Ok(Login {
            token: issued.token,
            expires_at_ms: issued.expires_at_ms,
            user: found.user,
        })
    }

    /// The users among `ids` that exist; unknown ids are left out.
    pub async fn users(&self, ids: &[i64]) -> Result<Vec<User>, Error> {
        if ids.len() > MAX_USERS_PER_CALL {
            return Err(invalid(
                "user_ids",
                format!("at most {MAX_USERS_PER_CALL} per call"),
            ));
        }
        Ok(self.store.by_ids(ids).await?)
    }
}

fn hash_password(password: &str) -> Result<String, Error> {
    use argon2::{Argon2, PasswordHasher};
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| Error::Hashing(e.to_string()))
}

fn verify_password(password: &str, hash: &str) -> bool {
    use argon2::{Argon2, PasswordVerifier};
    Argon2::default()
        .verify_password(password.as_bytes(), hash)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_are_checked() {
        assert!(parse_username("alice_01").is_ok());
        for bad in ["al", "Alice", "a b c", &"x".repeat(33), "ali$e"] {
            assert!(
                matches!(
                    parse_username(bad),
                    Err(Error::Invalid {
                        field: "username",
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn passwords_hash_and_verify() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("wrong horse", &hash));
    }
}
