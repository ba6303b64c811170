//! Read-receipt bitmaps: one byte string (an arena) per conversation holding every receipt
//! message's bitmap over the members' map ids in its own slot, so a message costs its
//! bitmap's bytes and nothing per key. Byte 0 marks the arena as built: an arena created
//! by a lone SETBIT (after a flush or an expiry) reads as not built, and the domain
//! rebuilds it from the read watermarks. Bits only ever turn on, so a rebuild merges with
//! OR and loses no concurrent read. Bit `n` is the most significant bit of byte `n / 8`
//! first, as Redis numbers them.
//!
//! Adapters: [`redis`] (deployments) and [`memory`] (the embedded default).

use async_trait::async_trait;
use imesh_kit::error::StoreError;

pub mod memory;
pub mod redis;

/// The value of the built marker in byte 0.
pub const BUILT: u8 = 1;

#[async_trait]
pub trait ReceiptBits: Send + Sync + 'static {
    /// Sets each bit of the conversation's arena; returns, per bit, whether it was clear.
    async fn set(&self, conversation_id: &str, bits: &[u64]) -> Result<Vec<bool>, StoreError>;
    /// Bytes `[start, start + len)` of the arena, zero past its end; `None` while it is
    /// not built.
    async fn read(
        &self,
        conversation_id: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, StoreError>;
    /// ORs `bytes` into the arena from byte `start` and marks it built.
    async fn merge(
        &self,
        conversation_id: &str,
        start: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError>;
}

/// Whether bit `n` of `bytes` (bit 0 leading byte 0) is set; false past the end.
pub fn is_set(bytes: &[u8], n: u64) -> bool {
    bytes
        .get((n / 8) as usize)
        .is_some_and(|b| b & (0x80 >> (n % 8)) != 0)
}

/// Sets bit `n` of `bytes`, growing them with zeros as needed; returns whether it was clear.
pub fn set_bit(bytes: &mut Vec<u8>, n: u64) -> bool {
    let byte = (n / 8) as usize;
    if bytes.len() <= byte {
        bytes.resize(byte + 1, 0);
    }
    let mask = 0x80 >> (n % 8);
    let was_clear = bytes[byte] & mask == 0;
    bytes[byte] |= mask;
    was_clear
}

#[cfg(test)]
mod tests;
