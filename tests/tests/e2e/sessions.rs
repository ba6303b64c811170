//! The multi-device policy end to end (one session per platform, the default): a second
//! phone of the same user closes the first with a reason, a laptop stays, and the same
//! device reconnecting replaces its own older connection; disabling an account closes all
//! of its sessions.

use imesh_tests::{Device, Stores, TestCluster};
use tonic::Code;

/// The fatal error a replaced session gets before its connection closes.
async fn replaced(device: &mut Device) -> String {
    loop {
        let frame = device
            .read()
            .await
            .expect("an error frame before the close");
        if let Some(imesh_protos::gateway::server_frame::Body::Error(e)) = frame.body {
            assert_eq!((e.code, e.fatal), (Code::Aborted as u32, true), "{e:?}");
            assert!(device.read().await.is_none(), "closed after it");
            return e.message;
        }
    }
}

#[tokio::test]
async fn a_new_login_replaces_the_users_session_on_that_platform_only() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (_, token) = env.user("dana").await;
    let mut phone = env.device().await;
    phone.auth_on(&token, "phone-1", "ios").await.unwrap();
    let mut laptop = env.tcp_device().await;
    laptop.auth_on(&token, "laptop", "macos").await.unwrap();

    let mut second = env.device().await;
    second.auth_on(&token, "phone-2", "ios").await.unwrap();
    assert_eq!(
        replaced(&mut phone).await,
        "session: signed in on another ios device"
    );

    let mut again = env.tcp_device().await;
    again.auth_on(&token, "phone-2", "ios").await.unwrap();
    assert_eq!(
        replaced(&mut second).await,
        "session: this device connected again"
    );

    // The laptop and the newest phone connection serve on.
    assert!(matches!(
        laptop.ping().await,
        imesh_protos::gateway::server_frame::Body::Pong(_)
    ));
    assert!(matches!(
        again.ping().await,
        imesh_protos::gateway::server_frame::Body::Pong(_)
    ));
}

#[tokio::test]
async fn disabling_an_account_closes_its_open_sessions_at_once() {
    let env = TestCluster::start(Stores::Embedded).await;
    let (erin, token) = env.user("erin").await;
    let (_, other_token) = env.user("frank").await;
    let mut phone = env.device().await;
    phone.auth_on(&token, "phone", "android").await.unwrap();
    let mut desktop = env.tcp_device().await;
    desktop.auth_on(&token, "desktop", "windows").await.unwrap();
    let mut bystander = env.signed_in(&other_token, "frank-phone").await;

    let disable = imesh_protos::relation::SetDisabledRequest {
        user_id: erin,
        disabled: true,
    };
    env.relation()
        .set_disabled(
            env.caller
                .request(imesh_kit::identity::Actor::System, disable),
        )
        .await
        .unwrap();
    for device in [&mut phone, &mut desktop] {
        assert_eq!(replaced(device).await, "session: the account was disabled");
    }
    assert!(matches!(
        bystander.ping().await,
        imesh_protos::gateway::server_frame::Body::Pong(_)
    ));
    let mut again = env.device().await;
    let refused = again.auth_on(&token, "phone", "android").await.unwrap_err();
    assert_eq!(refused.code, Code::Unauthenticated as u32, "{refused:?}");
}
