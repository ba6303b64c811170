//! The ReceiptBits contract, run against the in-process adapter and real Redis (single node
//! and cluster).

use std::{sync::Arc, time::Duration};

use imesh_kit::testing;

use crate::domain::ports::{ReceiptBits, is_set, set_bit};
use crate::store::{memory, redis};

async fn adapters() -> Vec<(&'static str, Arc<dyn ReceiptBits>)> {
    let mut out: Vec<(&'static str, Arc<dyn ReceiptBits>)> =
        vec![("memory", Arc::new(memory::MemoryBits::default()))];
    for (name, pool) in testing::redis_pools().await {
        out.push((
            name,
            Arc::new(redis::RedisBits::new(pool, Duration::from_secs(60))),
        ));
    }
    out
}

fn conversation() -> String {
    format!("g:{}", testing::random_id())
}

#[tokio::test]
async fn an_arena_reads_as_unbuilt_until_merged_and_merging_keeps_bits_already_set() {
    for (name, bits) in adapters().await {
        let c = conversation();
        assert_eq!(bits.read(&c, 1, 4).await.unwrap(), None, "{name}: new");
        // A read lands before the rebuild: byte 1, bit 1 (0x40).
        assert_eq!(bits.set(&c, &[9]).await.unwrap(), vec![true], "{name}");
        assert_eq!(
            bits.read(&c, 1, 4).await.unwrap(),
            None,
            "{name}: still unbuilt"
        );
        bits.merge(&c, 1, &[0x80, 0, 0x01]).await.unwrap();
        assert_eq!(
            bits.read(&c, 1, 4).await.unwrap(),
            Some(vec![0xC0, 0, 0x01, 0]),
            "{name}: OR-merged, zero past the end"
        );
        assert_eq!(
            bits.set(&c, &[9, 10, 40]).await.unwrap(),
            vec![false, true, true],
            "{name}: set reports which bits were clear"
        );
        let read = bits.read(&c, 1, 5).await.unwrap().unwrap();
        assert!(
            is_set(&read, 1) && is_set(&read, 2) && is_set(&read, 32),
            "{name}"
        );
        assert!(!is_set(&read, 3), "{name}");
        assert_eq!(
            bits.read(&c, 1_000, 3).await.unwrap(),
            Some(vec![0; 3]),
            "{name}: beyond the arena"
        );
    }
}

#[tokio::test]
async fn concurrent_setters_each_see_their_own_bit_as_new_exactly_once() {
    for (name, bits) in adapters().await {
        let c = conversation();
        bits.merge(&c, 1, &[]).await.unwrap();
        let setters = (0..64u64).map(|n| {
            let bits = bits.clone();
            let c = c.clone();
            // Every setter also repeats a bit another one owns.
            tokio::spawn(async move { bits.set(&c, &[8 + n, 8 + (n + 1) % 64]).await.unwrap() })
        });
        let results = futures::future::join_all(setters).await;
        let fresh: usize = results
            .into_iter()
            .map(|r| r.unwrap().into_iter().filter(|f| *f).count())
            .sum();
        assert_eq!(fresh, 64, "{name}: each bit new exactly once");
        let read = bits.read(&c, 1, 8).await.unwrap().unwrap();
        assert_eq!(read, vec![0xFF; 8], "{name}");
    }
}

#[test]
fn bits_count_from_the_most_significant_bit_of_each_byte() {
    let mut bytes = Vec::new();
    assert!(set_bit(&mut bytes, 0));
    assert!(set_bit(&mut bytes, 15));
    assert!(!set_bit(&mut bytes, 15));
    assert_eq!(bytes, vec![0x80, 0x01]);
    assert!(is_set(&bytes, 0) && is_set(&bytes, 15) && !is_set(&bytes, 1));
    assert!(!is_set(&bytes, 99));
}

#[tokio::test]
async fn redis_arenas_expire_whether_a_read_or_a_rebuild_created_them() {
    use fred::prelude::KeysInterface as _;
    for (name, pool) in testing::redis_pools().await {
        let bits = redis::RedisBits::new(pool.clone(), Duration::from_secs(60));
        let (read_first, merged_first) = (conversation(), conversation());
        bits.set(&read_first, &[9]).await.unwrap();
        bits.merge(&merged_first, 1, &[1]).await.unwrap();
        for c in [read_first, merged_first] {
            let ttl: i64 = pool.pttl(crate::keys::receipt_bits(&c)).await.unwrap();
            assert!((1..=60_000).contains(&ttl), "{name}: {ttl} ms");
        }
    }
}
