//! The Redis [`ReceiptBits`]: one string per conversation under its hash tag, one BITFIELD
//! per MarkRead, GETRANGE for counts, and a script that merges a rebuild with BITOP OR.

use std::time::Duration;

use async_trait::async_trait;
use fred::{prelude::*, types::ExpireOptions};
use imesh_kit::error::StoreError;

use crate::domain::ports::{BUILT, ReceiptBits};
use crate::keys;

/// KEYS: arena, scratch. ARGV: start byte, bytes, TTL in ms. Writes the bytes at their
/// offset into the scratch key, ORs it into the arena, marks the arena built.
const MERGE: &str = r"
redis.call('SETRANGE', KEYS[2], ARGV[1], ARGV[2])
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[2])
redis.call('DEL', KEYS[2])
redis.call('SETRANGE', KEYS[1], 0, '\1')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1";

#[derive(Clone)]
pub struct RedisBits {
    pool: Pool,
    /// How long a built arena lives after its last rebuild; reads after that rebuild it.
    ttl: Duration,
}

impl RedisBits {
    pub fn new(pool: Pool, ttl: Duration) -> Self {
        Self { pool, ttl }
    }
}

#[async_trait]
impl ReceiptBits for RedisBits {
    async fn set(&self, conversation_id: &str, bits: &[u64]) -> Result<Vec<bool>, StoreError> {
        if bits.is_empty() {
            return Ok(Vec::new());
        }
        // One BITFIELD sets them all atomically and answers each bit's old value.
        let mut args: Vec<Value> = Vec::with_capacity(1 + bits.len() * 4);
        args.push(keys::receipt_bits(conversation_id).into());
        for n in bits {
            args.extend(["SET".into(), "u1".into(), (*n as i64).into(), 1.into()]);
        }
        // An arena a read creates (before any rebuild) expires too.
        let key = keys::receipt_bits(conversation_id);
        let client = self.pool.next();
        let ttl = self.ttl.as_millis() as i64;
        let (before, expire) = tokio::join!(
            client.custom::<Vec<i64>, _>(fred::cmd!("BITFIELD"), args),
            client.pexpire::<i64, _>(&key, ttl, Some(ExpireOptions::NX)),
        );
        expire?;
        Ok(before?.into_iter().map(|bit| bit == 0).collect())
    }

    async fn read(
        &self,
        conversation_id: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let key = keys::receipt_bits(conversation_id);
        let client = self.pool.next();
        let end = (start + len).saturating_sub(1) as usize;
        let (marker, bytes) = tokio::join!(
            client.getrange::<Vec<u8>, _>(&key, 0, 0),
            client.getrange::<Vec<u8>, _>(&key, start as usize, end),
        );
        if marker?.first() != Some(&BUILT) {
            return Ok(None);
        }
        let mut bytes = bytes?;
        bytes.resize(len as usize, 0);
        Ok(Some(bytes))
    }

    async fn merge(
        &self,
        conversation_id: &str,
        start: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let keys = vec![
            keys::receipt_bits(conversation_id),
            keys::receipt_merge(conversation_id),
        ];
        let args: Vec<Value> = vec![
            (start as i64).into(),
            Value::Bytes(bytes.to_vec().into()),
            (self.ttl.as_millis() as i64).into(),
        ];
        let _: i64 = self.pool.next().eval(MERGE, keys, args).await?;
        Ok(())
    }
}
