//! The adapters of the domain's [`crate::domain::ReceiptBits`] (its arena layout is
//! described there): [`redis`] (deployments) and [`memory`] (the embedded default).

pub mod memory;
pub mod redis;

#[cfg(test)]
mod tests;
