#!/usr/bin/env bash
# Interop check of the txn log format against Apache ZooKeeper (Debian's 3.8 package).
#   1. Starts ZooKeeper standalone on a loopback port with a temp dataDir, does a few writes with
#      kazoo, stops it, and copies ZooKeeper's log file (zero padding cut off) to $OUT/zk-log.
#   2. Optionally (second arg = a log file written by Warden) prints it with ZooKeeper's
#      TxnLogToolkit.
# Usage: crates/storage/tests/zk-interop.sh OUT_DIR [WARDEN_LOG_FILE]
# Then: WARDEN_ZK_LOG=OUT_DIR/zk-log cargo test -p warden-storage --test interop -- --ignored --nocapture
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:?usage: zk-interop.sh OUT_DIR [WARDEN_LOG_FILE]}
mkdir -p "$OUT"
CP=$("$ROOT/scripts/zk-classpath")
PY="$ROOT/.venv/bin/python"
TMP=$(mktemp -d)
PORT=${ZK_PORT:-$((20000 + RANDOM % 20000))}
cat > "$TMP/zoo.cfg" <<CFG
tickTime=2000
dataDir=$TMP/data
clientPort=$PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
CFG
java -cp "$CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$TMP/zoo.cfg" > "$TMP/zk.out" 2>&1 &
ZK_PID=$!
trap 'kill $ZK_PID 2>/dev/null || true' EXIT
"$PY" - "$PORT" <<'PYEOF'
import sys, time
from kazoo.client import KazooClient
port = sys.argv[1]
zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)
for _ in range(60):
    try:
        zk.start(timeout=2)
        break
    except Exception:
        time.sleep(0.5)
else:
    sys.exit("ZooKeeper did not start")
zk.create("/a", b"hello")
zk.create("/a/eph", b"e", ephemeral=True)
zk.create("/a/seq-", b"s", sequence=True)
zk.set("/a", b"world")
zk.create("/b", b"")
zk.delete("/b")
t = zk.transaction()
t.create("/m", b"m1")
t.set_data("/a", b"in-multi")
t.check("/a", 2)
t.results = t.commit()
zk.stop()   # closes the session: closeSession txn deletes /a/eph
zk.close()
print("kazoo writes done")
PYEOF
sleep 1
kill "$ZK_PID"
wait "$ZK_PID" 2>/dev/null || true
trap - EXIT
LOG=$(ls "$TMP"/data/version-2/log.* | head -n1)
echo "ZooKeeper wrote $LOG ($(stat -c %s "$LOG") bytes with padding)"
"$PY" - "$LOG" "$OUT/zk-log" <<'PYEOF'
import sys
data = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(data.rstrip(b"\0"))
print(f"copied {len(data.rstrip(bytes(1)))} bytes to {sys.argv[2]}")
PYEOF
echo "--- TxnLogToolkit on ZooKeeper's own log:"
java -cp "$CP" org.apache.zookeeper.server.persistence.TxnLogToolkit "$OUT/zk-log" 2>/dev/null || true
if [ -n "${2:-}" ]; then
    echo "--- TxnLogToolkit on $2 (written by Warden):"
    java -cp "$CP" org.apache.zookeeper.server.persistence.TxnLogToolkit "$2" 2>/dev/null
fi
rm -rf "$TMP"
