//! The in-process [`ReceiptBits`] of the embedded default.

use std::collections::HashMap;

use async_trait::async_trait;
use imesh_kit::error::StoreError;
use parking_lot::Mutex;

use crate::domain::ports::{BUILT, ReceiptBits, set_bit};

#[derive(Default)]
pub struct MemoryBits {
    arenas: Mutex<HashMap<String, Vec<u8>>>,
}

#[async_trait]
impl ReceiptBits for MemoryBits {
    async fn set(&self, conversation_id: &str, bits: &[u64]) -> Result<Vec<bool>, StoreError> {
        let mut arenas = self.arenas.lock();
        let arena = arenas.entry(conversation_id.to_owned()).or_default();
        Ok(bits.iter().map(|n| set_bit(arena, *n)).collect())
    }

    async fn read(
        &self,
        conversation_id: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let arenas = self.arenas.lock();
        let Some(arena) = arenas.get(conversation_id).filter(|a| a[0] == BUILT) else {
            return Ok(None);
        };
        let mut bytes = vec![0; len as usize];
        let start = start as usize;
        if start < arena.len() {
            let end = arena.len().min(start + len as usize);
            bytes[..end - start].copy_from_slice(&arena[start..end]);
        }
        Ok(Some(bytes))
    }

    async fn merge(
        &self,
        conversation_id: &str,
        start: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let mut arenas = self.arenas.lock();
        let arena = arenas.entry(conversation_id.to_owned()).or_default();
        let start = start as usize;
        if arena.len() < start + bytes.len() {
            arena.resize(start + bytes.len(), 0);
        }
        for (at, byte) in arena[start..].iter_mut().zip(bytes) {
            *at |= byte;
        }
        arena[0] = BUILT;
        Ok(())
    }
}
