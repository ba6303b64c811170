//! Presence changes for friends: when a user connects or disconnects a device, the user's
//! friends' live devices get a PresenceChanged event (sync_seq 0, never stored) with the
//! platforms still online. Best effort and off the connect path: a lost event is corrected
//! by the next one or by QueryPresence. A device that vanishes without disconnecting (its
//! gateway died) goes offline silently when its route expires.

use std::sync::Arc;

use super::{
    Router,
    ports::{EncodePresence, Friends},
};

/// Most friends told of one change.
pub const MAX_WATCHERS: usize = 5_000;

#[derive(Clone)]
pub struct Watch {
    router: Arc<Router>,
    friends: Arc<dyn Friends>,
    encode: EncodePresence,
}

impl Watch {
    pub fn new(router: Arc<Router>, friends: Arc<dyn Friends>, encode: EncodePresence) -> Self {
        Self {
            router,
            friends,
            encode,
        }
    }

    /// Tells `user`'s friends, in the background, where `user` is online now.
    pub fn changed(&self, user: i64) {
        let watch = self.clone();
        tokio::spawn(async move {
            if let Err(e) = watch.announce(user).await {
                tracing::debug!(user, error = %format!("{e:#}"), "presence change not announced");
            }
        });
    }

    /// Tells `user`'s friends' live devices where `user` is online now; how many devices.
    pub async fn announce(&self, user: i64) -> anyhow::Result<u32> {
        let friends = self.friends.friends(user, MAX_WATCHERS).await?;
        if friends.is_empty() {
            return Ok(0);
        }
        let platforms = self
            .router
            .presence(&[user])
            .await?
            .pop()
            .map(|(_, platforms)| platforms)
            .unwrap_or_default();
        let event = (self.encode)(user, &platforms);
        Ok(self.router.deliver_live(friends, event).await?)
    }
}

#[cfg(test)]
mod tests;
