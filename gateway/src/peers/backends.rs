//! The services a gateway calls on a user's behalf: one-off calls, and the batched sends and
//! coalesced acks.

use imesh_kit::grpc::Channel;
use imesh_kit::{
    grpc,
    identity::{Actor, Caller},
    token::Verified,
};
use imesh_protos::{
    group::{GroupType, ListMyGroupsRequest, group_service_client::GroupServiceClient},
    message::{
        ClearHistoryRequest, CreateUploadRequest, CreateUploadResponse, DeleteForMeRequest,
        EditRequest, EditResponse, GetDownloadRequest, GetDownloadResponse, HiddenForMe,
        HistoryRequest, HistoryResponse, ListPinsRequest, ListReactorsRequest,
        ListReactorsResponse, PinRequest, PinsResponse, ReactRequest, ReactionsResponse,
        RecallRequest, RecallResponse, SearchRequest, SearchResponse,
        message_service_client::MessageServiceClient,
    },
    notify::{
        Device, OfflineRequest, OnlineRequest, QueryPresenceRequest, QueryPresenceResponse,
        TypingRequest, TypingResponse, notify_service_client::NotifyServiceClient,
    },
    relation::{GetUsersRequest, relation_service_client::RelationServiceClient},
    sync::{
        ConversationRemoved, ConversationSettings, ConversationsRequest, ConversationsResponse,
        MarkReadRequest, MarkReadResponse, PullRequest, PullResponse, PushSettings,
        ReceiptCountsRequest, ReceiptCountsResponse, ReceiptReadersRequest, ReceiptReadersResponse,
        RemoveConversationRequest, UpdateConversationRequest,
        sync_service_client::SyncServiceClient,
    },
};
use tonic::Status;

use crate::{peers::acks::Acks, peers::sends::Sends};

pub struct Backends {
    pub(crate) caller: Caller,
    /// Sends, batched in order (see [`crate::peers::sends`]).
    pub(crate) sends: Sends,
    /// Device acks, coalesced (see [`crate::peers::acks`]).
    pub(crate) acks: Acks,
    pub(crate) relation: RelationServiceClient<Channel>,
    pub(crate) group: GroupServiceClient<Channel>,
    message: MessageServiceClient<Channel>,
    sync: SyncServiceClient<Channel>,
    notify: NotifyServiceClient<Channel>,
}

/// Most super groups one connection follows live (pages of 200 from ListMyGroups).
const MAX_GROUP_PAGES: usize = 50;

impl Backends {
    /// Connects lazily and starts the send batching and the ack writer on the current runtime.
    pub fn new(caller: Caller, config: &crate::Config) -> anyhow::Result<Self> {
        let peers = grpc::Peers::new(&config.grpc)?;
        let message = MessageServiceClient::new(peers.channel(&config.message_addr)?);
        let sync = SyncServiceClient::new(peers.channel(&config.sync_addr)?);
        Ok(Self {
            sends: Sends::spawn(
                peers.keyed(&config.message_addr)?,
                caller.clone(),
                config.send_limits(),
            ),
            acks: Acks::spawn(sync.clone(), caller.clone()),
            caller,
            relation: RelationServiceClient::new(peers.channel(&config.relation_addr)?),
            group: GroupServiceClient::new(peers.channel(&config.group_addr)?),
            message,
            sync,
            notify: NotifyServiceClient::new(peers.channel(&config.notify_addr)?),
        })
    }

    /// The read-fanout (super) groups `user` belongs to, whose live events this gateway
    /// subscribes to for the user's connections.
    pub async fn super_groups(&self, user: i64) -> Result<Vec<i64>, Status> {
        let mut groups = Vec::new();
        let mut cursor = 0;
        for _ in 0..MAX_GROUP_PAGES {
            let page = ListMyGroupsRequest { cursor, limit: 200 };
            let request = self.caller.request(Actor::User(user), page);
            let reply = self
                .group
                .clone()
                .list_my_groups(request)
                .await?
                .into_inner();
            groups.extend(
                reply
                    .groups
                    .iter()
                    .filter(|g| g.r#type() == GroupType::Super)
                    .map(|g| g.group_id),
            );
            if reply.next_cursor == 0 {
                break;
            }
            cursor = reply.next_cursor;
        }
        Ok(groups)
    }

    /// Refuses tokens of disabled users and tokens issued before the user's token version
    /// moved on (the JWT itself was already verified locally).
    pub async fn token_current(&self, token: Verified) -> Result<(), Status> {
        let request = self.caller.request(
            Actor::System,
            GetUsersRequest {
                user_ids: vec![token.user_id],
            },
        );
        let users = self
            .relation
            .clone()
            .get_users(request)
            .await?
            .into_inner()
            .users;
        match users.first() {
            Some(user) if !user.disabled && user.token_version == token.version => Ok(()),
            _ => Err(Status::unauthenticated(
                "auth.token: revoked (the account was disabled); log in again",
            )),
        }
    }

    pub async fn pull(&self, user: i64, request: PullRequest) -> Result<PullResponse, Status> {
        Ok(self
            .sync
            .clone()
            .pull(self.caller.request(Actor::User(user), request))
            .await?
            .into_inner())
    }

    pub async fn history(
        &self,
        user: i64,
        request: HistoryRequest,
    ) -> Result<HistoryResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.message.clone().history(request).await?.into_inner())
    }

    pub async fn recall(
        &self,
        user: i64,
        request: RecallRequest,
    ) -> Result<RecallResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.message.clone().recall(request).await?.into_inner())
    }

    pub async fn edit(&self, user: i64, request: EditRequest) -> Result<EditResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.message.clone().edit(request).await?.into_inner())
    }

    pub async fn pin(&self, user: i64, request: PinRequest) -> Result<PinsResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.message.clone().pin(request).await?.into_inner())
    }

    pub async fn list_pins(
        &self,
        user: i64,
        request: ListPinsRequest,
    ) -> Result<PinsResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.message.clone().list_pins(request).await?.into_inner())
    }

    pub async fn delete_for_me(
        &self,
        user: i64,
        request: DeleteForMeRequest,
    ) -> Result<HiddenForMe, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .message
            .clone()
            .delete_for_me(request)
            .await?
            .into_inner())
    }

    pub async fn clear_history(
        &self,
        user: i64,
        request: ClearHistoryRequest,
    ) -> Result<HiddenForMe, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .message
            .clone()
            .clear_history(request)
            .await?
            .into_inner())
    }

    pub async fn react(
        &self,
        user: i64,
        request: ReactRequest,
    ) -> Result<ReactionsResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.message.clone().react(request).await?.into_inner())
    }

    pub async fn list_reactors(
        &self,
        user: i64,
        request: ListReactorsRequest,
    ) -> Result<ListReactorsResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .message
            .clone()
            .list_reactors(request)
            .await?
            .into_inner())
    }

    pub async fn search(
        &self,
        user: i64,
        request: SearchRequest,
    ) -> Result<SearchResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.message.clone().search(request).await?.into_inner())
    }

    pub async fn create_upload(
        &self,
        user: i64,
        request: CreateUploadRequest,
    ) -> Result<CreateUploadResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .message
            .clone()
            .create_upload(request)
            .await?
            .into_inner())
    }

    pub async fn get_download(
        &self,
        user: i64,
        request: GetDownloadRequest,
    ) -> Result<GetDownloadResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .message
            .clone()
            .get_download(request)
            .await?
            .into_inner())
    }

    pub async fn mark_read(
        &self,
        user: i64,
        request: MarkReadRequest,
    ) -> Result<MarkReadResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.sync.clone().mark_read(request).await?.into_inner())
    }

    pub async fn conversations(
        &self,
        user: i64,
        request: ConversationsRequest,
    ) -> Result<ConversationsResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.sync.clone().conversations(request).await?.into_inner())
    }

    pub async fn update_conversation(
        &self,
        user: i64,
        request: UpdateConversationRequest,
    ) -> Result<ConversationSettings, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .sync
            .clone()
            .update_conversation(request)
            .await?
            .into_inner())
    }

    pub async fn remove_conversation(
        &self,
        user: i64,
        request: RemoveConversationRequest,
    ) -> Result<ConversationRemoved, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .sync
            .clone()
            .remove_conversation(request)
            .await?
            .into_inner())
    }

    pub async fn update_push_settings(
        &self,
        user: i64,
        request: PushSettings,
    ) -> Result<PushSettings, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .sync
            .clone()
            .update_push_settings(request)
            .await?
            .into_inner())
    }

    pub async fn receipt_counts(
        &self,
        user: i64,
        request: ReceiptCountsRequest,
    ) -> Result<ReceiptCountsResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .sync
            .clone()
            .receipt_counts(request)
            .await?
            .into_inner())
    }

    pub async fn receipt_readers(
        &self,
        user: i64,
        request: ReceiptReadersRequest,
    ) -> Result<ReceiptReadersResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .sync
            .clone()
            .receipt_readers(request)
            .await?
            .into_inner())
    }

    pub async fn presence(
        &self,
        user: i64,
        request: QueryPresenceRequest,
    ) -> Result<QueryPresenceResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self
            .notify
            .clone()
            .query_presence(request)
            .await?
            .into_inner())
    }

    pub async fn typing(
        &self,
        user: i64,
        request: TypingRequest,
    ) -> Result<TypingResponse, Status> {
        let request = self.caller.request(Actor::User(user), request);
        Ok(self.notify.clone().typing(request).await?.into_inner())
    }

    /// Registers (`fresh`: a new connection) or refreshes a device's presence.
    pub async fn online(
        &self,
        device: Device,
        super_group_ids: Vec<i64>,
        fresh: bool,
    ) -> Result<(), Status> {
        let request = self.caller.request(
            Actor::System,
            OnlineRequest {
                device: Some(device),
                super_group_ids,
                fresh,
            },
        );
        self.notify.clone().online(request).await?;
        Ok(())
    }

    pub async fn offline(&self, device: Device) -> Result<(), Status> {
        let request = self.caller.request(
            Actor::System,
            OfflineRequest {
                device: Some(device),
            },
        );
        self.notify.clone().offline(request).await?;
        Ok(())
    }
}
