#!/usr/bin/env bash
# Snapshot interop with Apache ZooKeeper (Debian's 3.8 package), both directions.
#   A. ZooKeeper -> Warden: start ZooKeeper standalone (snapCount=10) on a temp dataDir, write
#      every kind of node with kazoo (and zkCli for container/TTL), dump the tree with kazoo, stop
#      ZooKeeper, then Warden recovers that dataDir (snapshot + log) and must produce the same dump.
#      The newest ZooKeeper snapshot is copied to $OUT/zk-snapshot/ (fixture material).
#   B. Warden -> ZooKeeper: Warden writes a snapshot into an empty dataDir, ZooKeeper starts on
#      it, and kazoo's dump must equal Warden's expected dump (data, ACLs, every Stat field).
# Usage: crates/storage/tests/zk-snapshot-interop.sh [OUT_DIR]   (exit 0 = both directions match)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
CP=$("$ROOT/scripts/zk-classpath")
PY="$ROOT/.venv/bin/python"
TMP=$(mktemp -d)
ZK_PID=
cleanup() {
    if [ -n "$ZK_PID" ]; then kill "$ZK_PID" 2>/dev/null || true; wait "$ZK_PID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

start_zk() { # dataDir port log
    cat > "$TMP/zoo.cfg" <<CFG
tickTime=2000
dataDir=$1
clientPort=$2
clientPortAddress=127.0.0.1
snapCount=10
admin.enableServer=false
4lw.commands.whitelist=*
CFG
    java -Dzookeeper.extendedTypesEnabled=true -cp "$CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$TMP/zoo.cfg" > "$3" 2>&1 &
    ZK_PID=$!
}
stop_zk() { kill "$ZK_PID"; wait "$ZK_PID" 2>/dev/null || true; ZK_PID=; }

# Prints the tree as tests/common/snap.rs `dump` does. Authenticated as the digest user so
# getACL shows digest ids unmasked.
DUMP_PY='
import sys, time
from kazoo.client import KazooClient
def connect(port):
    zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10, auth_data=[("digest", "user:pw")])
    for _ in range(80):
        try:
            zk.start(timeout=2); return zk
        except Exception:
            time.sleep(0.5)
    sys.exit("ZooKeeper did not start")
def dump(zk):
    lines = []
    def walk(p):
        data, s = zk.get(p)
        acls, _ = zk.get_acls(p)
        d = "null" if data is None else data.hex()
        a = ",".join(f"{x.perms}:{x.id.scheme}:{x.id.id}" for x in acls)
        st = [s.czxid, s.mzxid, s.ctime, s.mtime, s.version, s.cversion, s.aversion,
              s.ephemeralOwner, s.dataLength, s.numChildren, s.pzxid]
        lines.append(f"{p}\t{d}\t{a}\t" + " ".join(str(x) for x in st))
        for c in zk.get_children(p):
            walk(p.rstrip("/") + "/" + c)
    walk("/")
    return "".join(sorted(l + "\n" for l in lines))
'

echo "=== A. ZooKeeper writes, Warden reads"
PORT=$((20000 + RANDOM % 20000))
start_zk "$TMP/zkdata" "$PORT" "$TMP/zk-a.out"
"$PY" - "$PORT" "$TMP/zk.dump" <<PYEOF
$DUMP_PY
from kazoo.security import make_digest_acl, make_acl
port, out = sys.argv[1], sys.argv[2]
zk = connect(port)
open_acl = None
zk.create("/app", b"root of app")
zk.create("/app/null", None)
zk.create("/app/empty", b"")
zk.create("/app/bin", bytes([0, 1, 2, 255, 254]))
zk.create("/app/seq-", b"s", sequence=True)
zk.create("/secret", b"digest protected", acl=[make_digest_acl("user", "pw", all=True), make_acl("world", "anyone", read=True)])
zk.create("/iponly", b"ip", acl=[make_acl("ip", "127.0.0.1", read=True, write=True)])
zk.create("/app/eph", b"ephemeral", ephemeral=True)
zk.set("/app", b"updated")
zk.set("/app", b"updated twice")
zk.set_acls("/app/bin", [make_digest_acl("user", "pw", all=True), make_acl("world", "anyone", read=True)])
zk.create("/app/gone"); zk.delete("/app/gone")
print("kazoo writes done")
zk.stop(); zk.close()
PYEOF
java -cp "$CP" org.apache.zookeeper.ZooKeeperMain -server "127.0.0.1:$PORT" create -c /cont c > "$TMP/cli1.out" 2>&1
java -cp "$CP" org.apache.zookeeper.ZooKeeperMain -server "127.0.0.1:$PORT" create -t 3600000 /ttl t > "$TMP/cli2.out" 2>&1
grep -h "Created" "$TMP"/cli*.out || true
"$PY" - "$PORT" "$TMP/zk.dump" <<PYEOF
$DUMP_PY
port, out = sys.argv[1], sys.argv[2]
zk = connect(port)
zk.create("/cont/child", b"in container")
zk.create("/app/eph", b"ephemeral", ephemeral=True)   # this session stays open until ZooKeeper is killed
for i in range(25):                                   # snapCount=10: forces snapshots after the writes above
    zk.create(f"/pad{i}", b"p") if i % 2 == 0 else zk.set("/pad0", str(i).encode())
time.sleep(1)
open(out, "w").write(dump(zk))
print("kazoo dump:", len(open(out).read().splitlines()), "nodes")
stat = zk.command(b"stat"); print(stat.splitlines()[-3:])
PYEOF
stop_zk
ls -l "$TMP/zkdata/version-2"
mkdir -p "$OUT/zk-snapshot"
NEWEST=$(ls "$TMP/zkdata/version-2"/snapshot.* | sort -t. -k2 | tail -n1)
for f in "$TMP"/zkdata/version-2/snapshot.*; do   # newest by zxid
    z=$((16#${f##*snapshot.})); n=$((16#${NEWEST##*snapshot.})); [ "$z" -gt "$n" ] && NEWEST=$f
done
cp "$NEWEST" "$OUT/zk-snapshot/"
echo "newest ZooKeeper snapshot: $NEWEST"
(cd "$ROOT" && WARDEN_ZK_DATADIR="$TMP/zkdata" WARDEN_ZK_DUMP="$TMP/zk.dump" \
    cargo test -q -p warden-storage --test snapshot_interop zookeeper_datadir -- --ignored --nocapture)

echo "=== B. Warden writes, ZooKeeper reads"
rm -rf "$OUT/warden"; mkdir -p "$OUT/warden"
(cd "$ROOT" && WARDEN_SNAP_OUT="$OUT/warden" cargo test -q -p warden-storage --test snapshot_interop write_snapshot -- --ignored --nocapture)
PORT=$((20000 + RANDOM % 20000))
start_zk "$OUT/warden/data" "$PORT" "$TMP/zk-b.out"
"$PY" - "$PORT" "$OUT/warden/zk.dump" <<PYEOF
$DUMP_PY
zk = connect(sys.argv[1])
open(sys.argv[2], "w").write(dump(zk))
print("ZooKeeper served", len(open(sys.argv[2]).read().splitlines()), "nodes from Warden's snapshot")
zk.stop(); zk.close()
PYEOF
stop_zk
grep -iE "snapshot|digest" "$TMP/zk-b.out" | grep -v "^\s*at " | head -20 || true
if diff "$OUT/warden/expected.dump" "$OUT/warden/zk.dump"; then
    echo "MATCH: ZooKeeper serves Warden's snapshot identically (data, ACLs, Stats)"
else
    echo "MISMATCH between Warden's tree and what ZooKeeper served"; exit 1
fi
