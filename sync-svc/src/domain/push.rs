//! Offline-push decisions: a user's quiet hours and preview policy, and for each message to
//! a user with no live connection whether it is pushed (not muted, not quiet) with what badge.

use std::collections::HashSet;

use super::{Error, Inboxes, invalid};

/// Most targets one decision call names.
pub const MAX_OFFLINE_TARGETS: usize = 500;
const MINUTES_PER_DAY: u16 = 24 * 60;

/// How much an offline push shows of a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Preview {
    /// The sender and the text.
    #[default]
    Full,
    /// The sender only.
    Sender,
    /// Neither.
    Hidden,
}

impl Preview {
    /// The stored (and wire) code; an unknown code reads as the most private.
    pub fn from_code(code: i16) -> Self {
        match code {
            0 => Self::Full,
            1 => Self::Sender,
            _ => Self::Hidden,
        }
    }

    pub fn code(self) -> i16 {
        match self {
            Self::Full => 0,
            Self::Sender => 1,
            Self::Hidden => 2,
        }
    }
}

/// A user's offline-push settings; the default has no quiet hours and full previews.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushSettings {
    /// Quiet hours `[start, end)` in minutes of the user's day, wrapping past midnight when
    /// `end < start`; equal means none.
    pub quiet_start_min: u16,
    pub quiet_end_min: u16,
    pub utc_offset_min: i16,
    pub preview: Preview,
}

impl PushSettings {
    /// Checks the wire values, naming the field at fault.
    pub fn parse(
        quiet_start_min: u32,
        quiet_end_min: u32,
        utc_offset_min: i32,
        preview: i32,
    ) -> Result<Self, Error> {
        let minute = |field, value: u32| {
            u16::try_from(value)
                .ok()
                .filter(|m| *m <= MINUTES_PER_DAY)
                .ok_or_else(|| invalid(field, "must be a minute of the day, 0–1440"))
        };
        let utc_offset_min = i16::try_from(utc_offset_min)
            .ok()
            .filter(|o| (-720..=840).contains(o))
            .ok_or_else(|| invalid("utc_offset_min", "must be -720–840 minutes"))?;
        let preview = match preview {
            0..=2 => Preview::from_code(preview as i16),
            _ => return Err(invalid("preview", "must be FULL, SENDER or HIDDEN")),
        };
        Ok(Self {
            quiet_start_min: minute("quiet_start_min", quiet_start_min)?,
            quiet_end_min: minute("quiet_end_min", quiet_end_min)?,
            utc_offset_min,
            preview,
        })
    }

    /// Whether `now_ms` (UTC) falls in the quiet hours.
    pub fn quiet_at(&self, now_ms: i64) -> bool {
        let (start, end) = (self.quiet_start_min, self.quiet_end_min);
        if start == end {
            return false;
        }
        let local_min = now_ms.div_euclid(60_000) + i64::from(self.utc_offset_min);
        let minute = local_min.rem_euclid(i64::from(MINUTES_PER_DAY)) as u16;
        if start < end {
            (start..end).contains(&minute)
        } else {
            minute >= start || minute < end
        }
    }
}

/// Whether one message to an offline user is pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfflineDecision {
    pub user: i64,
    pub conversation_id: String,
    pub push: bool,
    pub badge: i64,
    pub preview: Preview,
}

impl Inboxes {
    /// Replaces `user`'s push settings.
    pub async fn update_push_settings(
        &self,
        user: i64,
        settings: PushSettings,
    ) -> Result<PushSettings, Error> {
        self.store.set_push_settings(user, &settings).await?;
        Ok(settings)
    }

    /// For each `(user, conversation)` (1–[`MAX_OFFLINE_TARGETS`]), in order: pushed unless
    /// the conversation is muted or the user is in quiet hours at `now_ms`; the badge counts
    /// unread messages outside muted conversations.
    pub async fn offline_targets(
        &self,
        targets: Vec<(i64, String)>,
        now_ms: i64,
    ) -> Result<Vec<OfflineDecision>, Error> {
        if targets.is_empty() || targets.len() > MAX_OFFLINE_TARGETS {
            return Err(invalid(
                "targets",
                format!("must hold 1–{MAX_OFFLINE_TARGETS} targets"),
            ));
        }
        if targets.iter().any(|(user, _)| *user <= 0) {
            return Err(invalid("targets.user_id", "must be user ids"));
        }
        let users: Vec<i64> = targets
            .iter()
            .map(|(u, _)| *u)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let (settings, muted, badges) = futures::try_join!(
            self.store.push_settings(&users),
            self.store.muted_among(&targets),
            self.store.unread_totals(&users),
        )?;
        Ok(targets
            .into_iter()
            .map(|(user, conversation_id)| {
                let settings = settings.get(&user).copied().unwrap_or_default();
                let muted = muted.contains(&(user, conversation_id.clone()));
                OfflineDecision {
                    push: !muted && !settings.quiet_at(now_ms),
                    badge: badges.get(&user).copied().unwrap_or(0),
                    preview: settings.preview,
                    user,
                    conversation_id,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-02 00:00 UTC.
    const MIDNIGHT_MS: i64 = 1_796_169_600_000;

    fn at(hour: i64, minute: i64) -> i64 {
        MIDNIGHT_MS + (hour * 60 + minute) * 60_000
    }

    fn quiet(start: u16, end: u16, offset: i16) -> PushSettings {
        PushSettings {
            quiet_start_min: start,
            quiet_end_min: end,
            utc_offset_min: offset,
            preview: Preview::Full,
        }
    }

    #[test]
    fn quiet_hours_wrap_past_midnight_in_the_users_time() {
        let night = quiet(22 * 60, 7 * 60, 0);
        assert!(night.quiet_at(at(23, 0)));
        assert!(night.quiet_at(at(6, 59)));
        assert!(!night.quiet_at(at(7, 0)));
        assert!(!night.quiet_at(at(12, 0)));
        // UTC+8: 15:00 UTC is 23:00 local.
        let east = quiet(22 * 60, 7 * 60, 480);
        assert!(east.quiet_at(at(15, 0)));
        assert!(!east.quiet_at(at(23, 0)));
        assert!(
            !PushSettings::default().quiet_at(at(3, 0)),
            "none by default"
        );
        assert!(quiet(0, 1440, 0).quiet_at(at(12, 0)), "all day");
    }

    #[test]
    fn bad_settings_name_their_field() {
        let field = |r: Result<PushSettings, Error>| match r {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(PushSettings::parse(1441, 0, 0, 0)), "quiet_start_min");
        assert_eq!(field(PushSettings::parse(0, 2000, 0, 0)), "quiet_end_min");
        assert_eq!(field(PushSettings::parse(0, 0, 900, 0)), "utc_offset_min");
        assert_eq!(field(PushSettings::parse(0, 0, 0, 3)), "preview");
        assert_eq!(
            PushSettings::parse(1320, 420, -300, 1).unwrap(),
            PushSettings {
                quiet_start_min: 1320,
                quiet_end_min: 420,
                utc_offset_min: -300,
                preview: Preview::Sender
            }
        );
    }
}
