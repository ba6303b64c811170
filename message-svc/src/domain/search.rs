//! Search: the text messages a user may read that hold every word of a query, newest first.

use std::collections::{HashMap, HashSet};

use super::{Conversation, Error, Message, Messages, Sender, invalid};

/// Longest query, in characters.
const MAX_QUERY_CHARS: usize = 100;
/// Most words one query holds.
const MAX_TERMS: usize = 8;
/// Most messages one page holds.
const MAX_SEARCH_PAGE: u32 = 50;
/// Most groups a search across a user's conversations covers.
const MAX_SEARCH_GROUPS: usize = 1_000;
/// Store reads one page may take while leaving out what the reader may not see.
const SEARCH_ROUNDS: usize = 4;

/// Where a search looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchScope {
    /// One conversation, within the seq range `(after, up_to]`.
    Conversation {
        conversation_id: String,
        after: i64,
        up_to: i64,
    },
    /// A user's direct and notice conversations, and these groups' conversations.
    User { user: i64, groups: Vec<i64> },
}

/// A page of search results and where the next one starts (0: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPage {
    pub messages: Vec<Message>,
    pub next_before: i64,
}

/// What one reader may see of the conversations a search turns up.
#[derive(Default)]
struct Sight {
    /// Group conversations' seq ranges `(after, until]`; `None`: never a member.
    ranges: HashMap<String, Option<(i64, Option<i64>)>>,
    /// What the reader hid: the cleared seq and the seqs hidden one by one.
    hidden: HashMap<String, (i64, HashSet<i64>)>,
}

impl Messages {
    /// `reader`'s text messages holding every word of `query`, older than `before` (a
    /// msg id; 0 for the newest): in `conversation_id`, or (empty) in all of the user's
    /// conversations.
    pub async fn search(
        &self,
        reader: Sender,
        query: &str,
        conversation_id: &str,
        before: i64,
        limit: u32,
    ) -> Result<SearchPage, Error> {
        let terms = terms(query)?;
        let limit = imesh_kit::page_limit(limit, 20, MAX_SEARCH_PAGE)
            .map_err(|reason| invalid("limit", reason))? as usize;
        if before < 0 {
            return Err(invalid("before_msg_id", "must be a msg id, or 0"));
        }
        let mut sight = Sight::default();
        let scope = if conversation_id.is_empty() {
            let Sender::User(user) = reader else {
                return Err(invalid(
                    "conversation_id",
                    "must be set for the system actor",
                ));
            };
            let groups = self
                .peers
                .groups
                .groups_of(user, MAX_SEARCH_GROUPS)
                .await
                .map_err(Error::Directory)?;
            SearchScope::User { user, groups }
        } else {
            let range = self
                .visible(reader, Conversation::parse(conversation_id)?)
                .await?;
            sight.ranges.insert(conversation_id.to_owned(), Some(range));
            SearchScope::Conversation {
                conversation_id: conversation_id.to_owned(),
                after: range.0,
                up_to: range.1.unwrap_or(i64::MAX),
            }
        };
        let mut found = Vec::new();
        let mut cursor = before;
        let mut exhausted = false;
        for _ in 0..SEARCH_ROUNDS {
            let asked = (limit + 1) as u32;
            let batch = self.store.search(&terms, &scope, cursor, asked).await?;
            exhausted = batch.len() < asked as usize;
            if let Some(last) = batch.last() {
                cursor = last.msg_id;
            }
            for message in batch {
                if self.sees(reader, &message, &mut sight).await? {
                    found.push(message);
                }
            }
            if found.len() > limit || exhausted {
                break;
            }
        }
        let next_before = if found.len() > limit {
            found.truncate(limit);
            found[limit - 1].msg_id
        } else if exhausted {
            0
        } else {
            cursor
        };
        Ok(SearchPage {
            messages: found,
            next_before,
        })
    }

    /// Whether `reader` sees `message` in their view: within a group's range for them, and
    /// not hidden by them.
    async fn sees(
        &self,
        reader: Sender,
        message: &Message,
        sight: &mut Sight,
    ) -> Result<bool, Error> {
        let Sender::User(user) = reader else {
            return Ok(true);
        };
        let id = &message.conversation_id;
        if let Conversation::Group(group) = Conversation::parse(id)? {
            if !sight.ranges.contains_key(id) {
                let range = self
                    .peers
                    .groups
                    .visibility(group, user)
                    .await
                    .map_err(Error::Directory)?;
                sight.ranges.insert(id.clone(), range);
            }
            let within = sight.ranges[id].is_some_and(|(after, until)| {
                message.seq > after && until.is_none_or(|u| message.seq <= u)
            });
            if !within {
                return Ok(false);
            }
        }
        if !sight.hidden.contains_key(id) {
            let hidden = self.store.hidden_for(user, id, 0, i64::MAX).await?;
            sight.hidden.insert(id.clone(), hidden);
        }
        let (cleared, hidden) = &sight.hidden[id];
        Ok(message.seq > *cleared && !hidden.contains(&message.seq))
    }
}

/// The words of a query, without the quotes and operators full-text syntaxes give meaning.
fn terms(query: &str) -> Result<Vec<String>, Error> {
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(invalid(
            "query",
            format!("must be at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    let terms: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    if terms.is_empty() {
        return Err(invalid("query", "must hold a word"));
    }
    if terms.len() > MAX_TERMS {
        return Err(invalid(
            "query",
            format!("must hold at most {MAX_TERMS} words"),
        ));
    }
    Ok(terms)
}
