//! Accounts: registration, login, profiles, and the admin path of app servers (accounts
//! without passwords, tokens on demand, disabling).

use std::{
    net::IpAddr,
    sync::{Arc, OnceLock},
};

use imesh_kit::{error::StoreError, ids::Snowflake, token::Tokens};

use super::{
    Checker, Error, User, invalid, parse_extra_json,
    throttle::{Attempt, Throttle},
};
use crate::domain::{NewUser, ProfileUpdate, Sessions, UserStore};

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
    /// Told when a user is disabled or enabled, so relation checks see it at once.
    checker: Arc<Checker>,
    sessions: Arc<dyn Sessions>,
    throttle: Throttle,
}

/// Longest avatar URL and extra JSON of a profile.
const MAX_AVATAR_URL: usize = 512;
const MAX_PROFILE_EXTRA: usize = 4096;

impl Accounts {
    pub fn new(
        store: Arc<dyn UserStore>,
        ids: Arc<Snowflake>,
        tokens: Tokens,
        checker: Arc<Checker>,
        sessions: Arc<dyn Sessions>,
        throttle: Throttle,
    ) -> Self {
        Self {
            store,
            ids,
            tokens,
            checker,
            sessions,
            throttle,
        }
    }

    /// A new account; `source` is the end user's address, when the caller knows it
    /// (registrations per address are limited).
    pub async fn register(
        &self,
        username: &str,
        password: &str,
        nickname: &str,
        source: Option<IpAddr>,
    ) -> Result<User, Error> {
        let username = parse_username(username)?;
        let password = parse_password(password)?.to_owned();
        let nickname = parse_nickname(nickname, &username)?;
        self.throttle.register(source).await?;
        let password_hash = tokio::task::spawn_blocking(move || hash_password(&password))
            .await
            .map_err(|e| Error::Hashing(e.to_string()))??;
        self.insert(username, nickname, password_hash).await
    }

    /// Admin: an account nobody can log in to with a password; the app server mints its
    /// tokens with [`Accounts::issue_token`].
    pub async fn create_without_password(
        &self,
        username: &str,
        nickname: &str,
    ) -> Result<User, Error> {
        let username = parse_username(username)?;
        let nickname = parse_nickname(nickname, &username)?;
        self.insert(username, nickname, String::new()).await
    }

    async fn insert(
        &self,
        username: String,
        nickname: String,
        password_hash: String,
    ) -> Result<User, Error> {
        let user = User {
            id: self.ids.next_id()?,
            username,
            nickname,
            created_at_ms: imesh_kit::ids::unix_ms(),
            avatar_url: String::new(),
            extra_json: String::new(),
            disabled: false,
            token_version: 0,
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

    /// A token for the account's password. Failures slow down further attempts on the
    /// account and from `source` ([`Throttle`]). Unknown, passwordless and disabled
    /// accounts are checked against a stand-in hash, so every refusal costs the same
    /// argon2 work and timing does not tell which usernames exist.
    pub async fn login(
        &self,
        username: &str,
        password: &str,
        source: Option<IpAddr>,
    ) -> Result<Login, Error> {
        let username = parse_username(username).map_err(|_| Error::BadCredentials)?;
        let attempt = Attempt {
            username: &username,
            source,
        };
        self.throttle.admit(&attempt).await?;
        let found = self
            .store
            .by_username(&username)
            .await?
            .filter(|found| !found.password_hash.is_empty() && !found.user.disabled);
        let password = password.to_owned();
        let hash = found.as_ref().map(|found| found.password_hash.clone());
        let matches = tokio::task::spawn_blocking(move || {
            verify_password(
                &password,
                hash.as_deref().unwrap_or_else(|| stand_in_hash()),
            )
        })
        .await
        .map_err(|e| Error::Hashing(e.to_string()))?;
        let Some(found) = found.filter(|_| matches) else {
            self.throttle.failed(&attempt).await?;
            return Err(Error::BadCredentials);
        };
        self.throttle.succeeded(&attempt).await?;
        let issued = self
            .tokens
            .issue(found.user.id, found.user.token_version)
            .map_err(Error::Token)?;
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

    pub async fn update_profile(&self, user: i64, update: ProfileUpdate) -> Result<User, Error> {
        let update = ProfileUpdate {
            nickname: match update.nickname {
                Some(raw) if raw.trim().is_empty() => {
                    return Err(invalid("nickname", "must not be empty"));
                }
                Some(raw) => Some(parse_nickname(&raw, "")?),
                None => None,
            },
            avatar_url: update
                .avatar_url
                .map(|u| parse_avatar_url(&u))
                .transpose()?,
            extra_json: update
                .extra_json
                .map(|j| parse_extra_json("extra_json", &j, MAX_PROFILE_EXTRA))
                .transpose()?,
        };
        self.store
            .update_profile(user, &update)
            .await?
            .ok_or(Error::UnknownUser("actor"))
    }

    /// Admin: a token for `user`, no password asked.
    pub async fn issue_token(&self, user: i64) -> Result<imesh_kit::token::Issued, Error> {
        let found = self.store.by_ids(&[user]).await?;
        let Some(user) = found.into_iter().next() else {
            return Err(Error::UnknownUser("user_id"));
        };
        if user.disabled {
            return Err(Error::Precondition("user_id: the user is disabled"));
        }
        self.tokens
            .issue(user.id, user.token_version)
            .map_err(Error::Token)
    }

    /// Admin: disabling moves the token version on, so every earlier token is refused,
    /// and closes the user's open sessions (best effort: a gateway that misses it still
    /// refuses the old token on the next connect).
    pub async fn set_disabled(&self, user: i64, disabled: bool) -> Result<User, Error> {
        let updated = self
            .store
            .set_disabled(user, disabled)
            .await?
            .ok_or(Error::UnknownUser("user_id"))?;
        self.checker.forget(&[user]).await;
        if disabled
            && let Err(e) = self
                .sessions
                .disconnect(user, "session: the account was disabled")
                .await
        {
            tracing::warn!(user, error = %format!("{e:#}"), "closing a disabled user's sessions failed");
        }
        Ok(updated)
    }
}

fn parse_avatar_url(raw: &str) -> Result<String, Error> {
    if raw.is_empty() {
        return Ok(String::new());
    }
    if raw.len() > MAX_AVATAR_URL {
        return Err(invalid(
            "avatar_url",
            format!("must be at most {MAX_AVATAR_URL} bytes"),
        ));
    }
    if !(raw.starts_with("https://") || raw.starts_with("http://"))
        || raw.contains(char::is_whitespace)
    {
        return Err(invalid("avatar_url", "must be an http(s) URL"));
    }
    Ok(raw.to_owned())
}

fn hash_password(password: &str) -> Result<String, Error> {
    use argon2::{Argon2, PasswordHasher};
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| Error::Hashing(e.to_string()))
}

/// The hash of a password nobody knows, made once, with the parameters of every other.
fn stand_in_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| {
        let unguessable = format!("{:032x}", rand::random::<u128>());
        hash_password(&unguessable).expect("argon2 hashes a short password")
    })
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
