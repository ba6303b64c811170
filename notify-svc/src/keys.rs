//! Every Redis key notify-svc uses. The user or group id is the hash tag, so each one's
//! keys share a Redis Cluster slot.

/// Hash of a user's connected devices: device id → `conn_id|expires_at_ms|platform|gateway`.
pub fn devices(user_id: i64) -> String {
    format!("{{u:{user_id}}}:devices")
}

/// The gateways holding members of a read-fanout group: a sorted set scored by expiry.
pub fn group_gateways(group: i64) -> String {
    format!("{{g:{group}}}:gateways")
}
