//! The member-count sweep (seed 000: `member_count` is a redundant counter, calibrated
//! asynchronously). Every change keeps the count in step inside its transaction; the sweep
//! catches what did not: rows edited by hand, restores, bugs.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use super::{Error, Groups};

/// Groups listed per query.
const BATCH: u32 = 200;

/// Recounts every group, one at a time; returns how many counts it corrected.
pub async fn sweep(groups: &Groups, corrected: &Counter) -> Result<u64, Error> {
    let mut fixed = 0;
    let mut after = 0;
    loop {
        let ids = groups.group_ids(after, BATCH).await?;
        let Some(last) = ids.last() else {
            return Ok(fixed);
        };
        after = *last;
        for group_id in ids {
            match groups.recount(group_id).await {
                Ok((stored, counted)) if stored != counted => {
                    tracing::warn!(
                        group_id,
                        stored,
                        counted,
                        "corrected a drifted member count"
                    );
                    corrected.inc();
                    fixed += 1;
                }
                Ok(_) | Err(Error::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Sweeps every `interval`, the first one `interval` after start, until the task is dropped.
pub async fn every(groups: std::sync::Arc<Groups>, interval: Duration, corrected: Counter) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(e) = sweep(&groups, &corrected).await {
            tracing::warn!(error = %e, "the member-count sweep stopped early; it runs again next interval");
        }
    }
}
