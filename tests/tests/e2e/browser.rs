//! The browser demo end to end: two users on the page the gateway serves, in headless
//! Chromium driven by Playwright (`web/test/two-users.mjs`), exchange a message and a
//! photo over the embedded default; the unread count, the read state, typing and a group
//! receipt count all change on screen as they should.

use std::{path::PathBuf, time::Duration};

use imesh_protos::group::CreateGroupRequest;
use imesh_tests::{Stores, TestCluster};

#[tokio::test]
async fn two_browser_users_exchange_a_message_and_a_photo_and_see_it_read() {
    let Some(chromium) = imesh_tests::chromium() else {
        return;
    };
    let env = TestCluster::start(Stores::Embedded).await;
    let (alice, alice_token) = env.user("alice").await;
    let (bob, bob_token) = env.user("bob").await;
    let (carol, _) = env.user("carol").await;
    let group = env
        .create_group(
            alice,
            CreateGroupRequest {
                name: "team".into(),
                member_ids: vec![bob, carol],
                ..Default::default()
            },
        )
        .await;
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web");
    let run = tokio::process::Command::new("node")
        .arg("test/two-users.mjs")
        .current_dir(&web)
        .env("GATEWAY", format!("http://{}", env.cluster.addrs.gateway))
        .env("ALICE_TOKEN", &alice_token)
        .env("BOB_TOKEN", &bob_token)
        .env("ALICE", alice.to_string())
        .env("BOB", bob.to_string())
        .env("GROUP", group.to_string())
        .env("CHROMIUM", chromium)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the browser test finishes within 2 minutes")
        .expect("node runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("all seen"), "{stdout}");
}
