//! PostgreSQL's append in one statement ([`With`]), one round trip with no transaction
//! around it: the recipients' heads advanced (and locked until it ends, as
//! [`super::heads`] requires), the events, the entries numbered below the new heads, and
//! the states beside them.

use std::collections::{BTreeMap, HashMap};

use imesh_kit::sql::{Unnest, With};
use sea_orm::{ConnectionTrait, DatabaseBackend::Postgres, DatabaseConnection, DbErr, Statement};

use super::heads;
use crate::domain::StoredEvent;

/// Appends `events`, whose recipients `counts` counts, with `beside` (statements that
/// touch no row twice, see [`super::reads::Marks::disjoint`]); returns each event's seqs
/// by recipient.
pub(super) async fn append(
    db: &DatabaseConnection,
    events: &[StoredEvent],
    counts: &BTreeMap<i64, i64>,
    beside: Vec<Statement>,
) -> Result<Vec<Vec<i64>>, DbErr> {
    let mut with = With::new().part("events", super::insert_events(Postgres, events));
    // Events without recipients (read fanout) advance no head and write no entry.
    let select = match counts.is_empty() {
        true => "SELECT 1 WHERE false",
        false => {
            with = entries(with, events, counts);
            "SELECT user_id, last_seq FROM heads"
        }
    };
    for (i, statement) in beside.into_iter().enumerate() {
        with = with.part(&format!("beside{i}"), statement);
    }
    let advanced = db.query_all_raw(with.select(select)).await?;
    let before = heads::before_advance(&advanced, counts)?;
    Ok(heads::number(events, before).0)
}

/// `with` and the parts advancing the recipients' heads (`heads`) and writing their
/// entries numbered below the new heads.
fn entries(with: With, events: &[StoredEvent], counts: &BTreeMap<i64, i64>) -> With {
    let counts_of: Vec<(i64, i64)> = counts.iter().map(|(u, c)| (*u, *c)).collect();
    let with = with.part("heads", heads::advance_statement(Postgres, &counts_of));
    // Each entry as how far below its recipient's new head it is: numbered from 1 per
    // recipient, in event order, the entry k of a recipient with n is n − k below.
    let (nth, _) = heads::number(events, HashMap::new());
    let entries: Vec<(i64, i64, i64)> = (events.iter().zip(&nth))
        .flat_map(|(e, nth)| {
            (e.recipients.iter().zip(nth)).map(|(user, k)| (*user, counts[user] - k, e.id))
        })
        .collect();
    let below = Unnest::after(with.parameters())
        .bigints("user_id", entries.iter().map(|(user, _, _)| *user))
        .bigints("below", entries.iter().map(|(_, below, _)| *below))
        .bigints("event_pk", entries.iter().map(|(_, _, event)| *event));
    let sql = format!(
        "INSERT INTO inbox (user_id, sync_seq, event_pk) \
         SELECT e.user_id, h.last_seq - e.below, e.event_pk FROM {} \
         JOIN heads h ON h.user_id = e.user_id",
        below.table("e")
    );
    with.numbered("entries", &sql, below.into_values())
}
