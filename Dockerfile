# One image with every imesh binary; each Deployment of the Helm chart runs one of them.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --workspace --exclude imesh-tests --bins \
 && mkdir /out \
 && cp target/release/relation-svc target/release/group-svc target/release/message-svc \
       target/release/sync-svc target/release/notify-svc target/release/gateway \
       target/release/imesh /out/

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin imesh
COPY --from=build /out/ /usr/local/bin/
USER 10001
CMD ["imesh", "up", "--host", "0.0.0.0", "--data", "/tmp/imesh"]
