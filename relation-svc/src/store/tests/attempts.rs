//! The Attempts contract, run against the in-process adapter and a real Redis.

use std::{sync::Arc, time::Duration};

use imesh_kit::testing;

use crate::domain::Attempts;
use crate::store::{memory::MemoryAttempts, redis::RedisAttempts};

async fn adapters() -> Vec<(&'static str, Arc<dyn Attempts>)> {
    let mut out: Vec<(&'static str, Arc<dyn Attempts>)> =
        vec![("memory", Arc::new(MemoryAttempts::default()))];
    for (name, pool) in testing::redis_pools().await {
        out.push((name, Arc::new(RedisAttempts::new(pool))));
    }
    out
}

fn key(what: &str) -> String {
    format!("test:attempts:{what}:{}", testing::random_id())
}

#[tokio::test]
async fn hits_count_up_within_their_window_and_start_over_after_it() {
    for (name, attempts) in adapters().await {
        let (key, window) = (key("count"), Duration::from_millis(300));
        let first = attempts.hit(&key, window).await.unwrap();
        assert_eq!(first.count, 1, "{name}");
        assert!(
            first.resets_in <= window && first.resets_in > Duration::ZERO,
            "{name}"
        );
        assert_eq!(attempts.hit(&key, window).await.unwrap().count, 2, "{name}");
        let third = attempts.hit(&key, window).await.unwrap();
        assert_eq!(third.count, 3, "{name}");
        // The window runs from the first hit; later hits do not stretch it.
        assert!(third.resets_in <= first.resets_in, "{name}");
        testing::until_async("the window to pass", || async {
            attempts.hit(&key, window).await.unwrap().count == 1
        })
        .await;
    }
}

#[tokio::test]
async fn a_hold_answers_its_time_left_until_it_ends() {
    for (name, attempts) in adapters().await {
        let (short, long, never) = (key("short"), key("long"), key("never"));
        assert_eq!(
            attempts.held(std::slice::from_ref(&short)).await.unwrap(),
            None,
            "{name}"
        );
        attempts
            .hold(&short, Duration::from_millis(200))
            .await
            .unwrap();
        attempts.hold(&long, Duration::from_secs(60)).await.unwrap();
        let both = [short.clone(), long.clone(), never.clone()];
        let left = attempts.held(&both).await.unwrap().unwrap();
        assert!(
            left > Duration::from_secs(50),
            "{name}: the longest hold answers"
        );
        let left = attempts
            .held(std::slice::from_ref(&short))
            .await
            .unwrap()
            .unwrap();
        assert!(left <= Duration::from_millis(200), "{name}");
        testing::until_async("the short hold to end", || async {
            attempts
                .held(&[short.clone(), never.clone()])
                .await
                .unwrap()
                .is_none()
        })
        .await;
    }
}

#[tokio::test]
async fn forgetting_a_counter_starts_it_over() {
    for (name, attempts) in adapters().await {
        let (key, window) = (key("forget"), Duration::from_secs(60));
        attempts.hit(&key, window).await.unwrap();
        attempts.hit(&key, window).await.unwrap();
        attempts.forget(&key).await.unwrap();
        assert_eq!(attempts.hit(&key, window).await.unwrap().count, 1, "{name}");
    }
}
