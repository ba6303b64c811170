//! Token keys end to end: a deployment that signs tokens with an Ed25519 key lets its
//! users in through the gateway; during a rotation, tokens of the previous key still sign
//! in while its public key is trusted, and are refused once it is retired.

use std::time::Duration;

use imesh_kit::{
    config::{AuthConfig, Secret},
    testing::{PRIVATE_A, PRIVATE_B, PUBLIC_A, PUBLIC_B},
    token::Tokens,
};
use imesh_protos::gateway::server_frame::Body;
use imesh_tests::{INTERNAL_SECRET, Stores, TestCluster};
use tonic::Code;

fn eddsa(private: &str, public: &[&str]) -> AuthConfig {
    AuthConfig {
        internal_secret: Secret::new(INTERNAL_SECRET),
        jwt_private_key: Secret::new(private),
        jwt_public_keys: public.iter().map(|p| (*p).to_owned()).collect(),
        ..AuthConfig::default()
    }
}

/// A token for `user` signed with the previous key, as relation-svc issued it before.
fn signed_with_a(user: i64) -> String {
    let previous = Tokens::new(&eddsa(PRIVATE_A, &[PUBLIC_A]), Duration::from_secs(60)).unwrap();
    previous.issue(user, 0).unwrap().token
}

async fn signs_in(env: &TestCluster, token: &str, device: &str) -> bool {
    let mut d = env.device().await;
    match d.auth_on(token, device, "ios").await {
        Ok(_) => matches!(d.ping().await, Body::Pong(_)),
        Err(e) => {
            assert_eq!(e.code, Code::Unauthenticated as u32, "{e:?}");
            false
        }
    }
}

#[tokio::test]
async fn tokens_of_a_rotated_key_sign_in_until_it_is_retired() {
    let rotating = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.auth = eddsa(PRIVATE_B, &[PUBLIC_A, PUBLIC_B]);
    })
    .await;
    let (user, token) = rotating.user("keyed").await;
    assert!(
        signs_in(&rotating, &token, "d1").await,
        "a token of the new key"
    );
    assert!(
        signs_in(&rotating, &signed_with_a(user), "d2").await,
        "a token of the previous key, still trusted"
    );

    let retired = TestCluster::start_with(Stores::Embedded, |spec| {
        spec.auth = eddsa(PRIVATE_B, &[PUBLIC_B]);
    })
    .await;
    let (user, token) = retired.user("keyed").await;
    assert!(signs_in(&retired, &token, "d1").await);
    assert!(
        !signs_in(&retired, &signed_with_a(user), "d2").await,
        "the previous key is retired"
    );
}
