//! Every service answers health checks and gRPC reflection, as operators' grpcurl expects.

use imesh_tests::{Stores, TestCluster};
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
