//! Every service answers health checks and gRPC reflection, as operators' grpcurl expects.

use imesh_tests::{Stores, TestCluster, scrape};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_reflection::pb::v1alpha::{
    ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
    server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
};

#[tokio::test]
async fn every_service_is_serving_and_lists_its_own_api_by_reflection() {
    let env = TestCluster::start(Stores::Embedded).await;
    let a = env.cluster.addrs;
    for (addr, service) in [
        (a.relation, "imesh.relation.v1.RelationService"),
        (a.group, "imesh.group.v1.GroupService"),
        (a.message, "imesh.message.v1.MessageService"),
        (a.sync, "imesh.sync.v1.SyncService"),
        (a.notify, "imesh.notify.v1.NotifyService"),
        (a.gateway_grpc, "imesh.gateway.v1.GatewayService"),
    ] {
        let channel = env.channel(addr);
        for name in ["", service] {
            let status = HealthClient::new(channel.clone())
                .check(HealthCheckRequest {
                    service: name.into(),
                })
                .await
                .unwrap()
                .into_inner()
                .status;
            assert_eq!(
                status,
                ServingStatus::Serving as i32,
                "{service} health of {name:?}"
            );
        }
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut replies = ServerReflectionClient::new(channel)
            .server_reflection_info(futures::stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let Some(MessageResponse::ListServicesResponse(list)) =
            replies.message().await.unwrap().unwrap().message_response
        else {
            panic!("no service list from {service}");
        };
        let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        assert_eq!(
            names,
            vec!["grpc.health.v1.Health".to_owned(), service.to_owned()],
            "{addr}"
        );
    }
}

/// The grpcurl operators use (`IMESH_TEST_GRPCURL`, installed by scripts/test): a real
/// reflection v1alpha client, so `list`, `describe` and calls with the internal credential
/// must work against the running services.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_lists_describes_and_calls_with_the_internal_credential() {
    let Some(grpcurl) = imesh_kit::testing::configured("IMESH_TEST_GRPCURL") else {
        return;
    };
    let env = TestCluster::start(Stores::Embedded).await;
    let relation = env.cluster.addrs.relation.to_string();
    let run = |args: Vec<String>| {
        let output = std::process::Command::new(&grpcurl)
            .args(&args)
            .output()
            .expect("grpcurl runs");
        assert!(
            output.status.success(),
            "grpcurl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let plain = |rest: &[&str]| {
        let mut args = vec!["-plaintext".to_owned()];
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    let listed = tokio::task::block_in_place(|| run(plain(&[&relation, "list"])));
    assert!(
        listed.contains("imesh.relation.v1.RelationService"),
        "{listed}"
    );
    let described = tokio::task::block_in_place(|| {
        run(plain(&[
            &relation,
            "describe",
            "imesh.relation.v1.RelationService",
        ]))
    });
    assert!(described.contains("rpc CheckRelations"), "{described}");
    let health =
        tokio::task::block_in_place(|| run(plain(&[&relation, "grpc.health.v1.Health/Check"])));
    assert!(health.contains("SERVING"), "{health}");
    let header = format!("x-imesh-internal: {}", imesh_tests::INTERNAL_SECRET);
    let body = r#"{"username":"grace","nickname":"Grace"}"#;
    let call = plain(&[
        "-H",
        &header,
        "-d",
        body,
        &relation,
        "imesh.relation.v1.RelationService/CreateUser",
    ]);
    let created = tokio::task::block_in_place(|| run(call));
    assert!(created.contains("\"username\": \"grace\""), "{created}");
}

#[tokio::test]
async fn every_service_counts_its_calls_by_method_and_code_for_prometheus() {
    use imesh_kit::identity::Actor;
    use imesh_protos::relation::LoginRequest;
    let env = TestCluster::start(Stores::Embedded).await;
    env.user("heidi").await;
    let wrong = LoginRequest {
        username: "heidi".into(),
        password: "wrong password".into(),
    };
    let refused = env
        .relation()
        .login(env.caller.request(Actor::System, wrong))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let text = scrape(env.cluster.addrs.relation).await;
    let login = "method=\"/imesh.relation.v1.RelationService/Login\"";
    let count = |code: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("imesh_grpc_requests_total{")
                    && l.contains(login)
                    && l.contains(&format!("code=\"{code}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.to_owned())
    };
    assert_eq!(count("Ok").as_deref(), Some("1"), "{text}");
    assert_eq!(count("Unauthenticated").as_deref(), Some("1"), "{text}");
    assert!(
        text.contains("imesh_grpc_request_duration_seconds_bucket{"),
        "{text}"
    );
    assert!(text.contains("service=\"relation-svc\""), "{text}");
    for addr in [
        env.cluster.addrs.group,
        env.cluster.addrs.message,
        env.cluster.addrs.sync,
        env.cluster.addrs.notify,
    ] {
        let health = HealthCheckRequest {
            service: String::new(),
        };
        HealthClient::new(env.channel(addr))
            .check(health)
            .await
            .unwrap();
        let text = scrape(addr).await;
        let counted = "method=\"/grpc.health.v1.Health/Check\",code=\"Ok\"} 1";
        assert!(text.contains(counted), "{addr}: {text}");
    }
}

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_reports_its_own_work_for_prometheus() {
    use imesh_protos::group::CreateGroupRequest;
    let env = TestCluster::start(Stores::Embedded).await;
    let (alice_id, alice) = env.user("alice").await;
    let (bob_id, bob) = env.user("bob").await;
    let mut sender = env.signed_in(&alice, "phone").await;
    let mut reader = env.signed_in(&bob, "phone").await;
    sender.send_text(bob_id, "m-1", "hello").await;
    reader.next_push().await;
    let create = CreateGroupRequest {
        name: "ops".into(),
        member_ids: vec![bob_id],
        ..Default::default()
    };
    let group = env.create_group(alice_id, create).await;
    sender.send_group_text(group, "g-1", "hi all").await;

    let addrs = env.cluster.addrs;
    let expectations: [(std::net::SocketAddr, &str, &[&str]); 8] = [
        (
            addrs.gateway_grpc,
            "imesh_connections",
            &["service=\"gateway\""],
        ),
        (addrs.gateway_grpc, "imesh_pushes_queued_total", &[]),
        (addrs.message, "imesh_seq_allocations_total", &[]),
        (
            addrs.message,
            "imesh_outbox_relayed_total",
            &["table=\"message_outbox\""],
        ),
        (addrs.sync, "imesh_inbox_fanout_recipients_count", &[]),
        (addrs.notify, "imesh_pushed_connections_total", &[]),
        (
            addrs.notify,
            "imesh_gateway_push_calls_total",
            &["ok=\"true\""],
        ),
        (
            addrs.group,
            "imesh_group_cache_lookups_total",
            &["cache=\"local\""],
        ),
    ];
    for (addr, name, labels) in expectations {
        imesh_tests::eventually(name, std::time::Duration::from_secs(10), || async move {
            let text = scrape(addr).await;
            sample(&text, name, labels).filter(|v| *v >= 1.0)
        })
        .await;
    }
    let gateway = scrape(addrs.gateway_grpc).await;
    assert_eq!(
        sample(&gateway, "imesh_connections", &[]),
        Some(2.0),
        "{gateway}"
    );
    reader.close().await;
    imesh_tests::eventually(
        "a closed connection",
        std::time::Duration::from_secs(10),
        || async {
            let text = scrape(addrs.gateway_grpc).await;
            (sample(&text, "imesh_connections", &[]) == Some(1.0)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn every_internal_api_refuses_a_call_without_the_deployments_credential() {
    use imesh_protos::{
        gateway::{KickRequest, gateway_service_client::GatewayServiceClient},
        group::{MemberIdsRequest, group_service_client::GroupServiceClient},
        message::{ConversationSeqRequest, message_service_client::MessageServiceClient},
        notify::{QueryPresenceRequest, notify_service_client::NotifyServiceClient},
        relation::{GetUsersRequest, relation_service_client::RelationServiceClient},
        sync::{PullRequest, sync_service_client::SyncServiceClient},
    };
    let env = TestCluster::start(Stores::Embedded).await;
    let a = env.cluster.addrs;
    let refusals = [
        RelationServiceClient::new(env.channel(a.relation))
            .get_users(GetUsersRequest::default())
            .await
            .map(drop),
        GroupServiceClient::new(env.channel(a.group))
            .member_ids(MemberIdsRequest::default())
            .await
            .map(drop),
        MessageServiceClient::new(env.channel(a.message))
            .conversation_seq(ConversationSeqRequest::default())
            .await
            .map(drop),
        SyncServiceClient::new(env.channel(a.sync))
            .pull(PullRequest::default())
            .await
            .map(drop),
        NotifyServiceClient::new(env.channel(a.notify))
            .query_presence(QueryPresenceRequest::default())
            .await
            .map(drop),
        GatewayServiceClient::new(env.channel(a.gateway_grpc))
            .kick(KickRequest::default())
            .await
            .map(drop),
    ];
    for (i, refusal) in refusals.into_iter().enumerate() {
        let status = refusal.expect_err("a call without x-imesh-internal");
        assert_eq!(
            status.code(),
            tonic::Code::Unauthenticated,
            "#{i}: {status:?}"
        );
        assert!(
            status.message().contains("x-imesh-internal"),
            "#{i}: {status:?}"
        );
    }
}
