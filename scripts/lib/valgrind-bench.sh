# Sourced by scripts/callgrind-per-request and scripts/allocs-per-request: runs a standalone Warden
# server under a valgrind tool while an uninstrumented `warden bench` puts 4 sessions x 10 in flight
# on it for 6 s (2,000 keys of 1 KiB), then stops the server with SIGINT so the tool writes its file.
#
# valgrind_bench TOOL OUT_OPTION WORKLOAD SERVER_BIN BENCH_BIN
#   TOOL        callgrind or dhat
#   OUT_OPTION  the tool's output-file option, e.g. --callgrind-out-file
# Sets $vb_dir (a temporary directory, removed on exit); leaves $vb_dir/tool.out (the tool's file)
# and $vb_dir/out.json (the bench's figures).
valgrind_bench() {
  local tool=$1 out_option=$2 workload=$3 server=$4 bench=$5
  command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
  vb_dir=$(mktemp -d "/tmp/$tool-per-request.XXXX")
  local port=$((20000 + RANDOM % 10000))
  printf 'tickTime=2000\ndataDir=%s/data\nclientPort=%s\nclientPortAddress=127.0.0.1\nforceSync=yes\nmaxClientCnxns=0\n' \
    "$vb_dir" "$port" > "$vb_dir/zoo.cfg"
  valgrind --tool="$tool" "$out_option=$vb_dir/tool.out" "$server" serve "$vb_dir/zoo.cfg" --log warn \
    > "$vb_dir/server.log" 2>&1 &
  vb_pid=$!
  trap 'kill "$vb_pid" 2>/dev/null || true; rm -rf "$vb_dir"' EXIT
  for _ in $(seq 300); do
    python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$port),1); s.sendall(b'ruok'); sys.exit(0 if s.recv(4)==b'imok' else 1)" \
      2>/dev/null && break
    sleep 0.2
  done
  "$bench" bench --servers "127.0.0.1:$port" --sessions 4 --depth 10 --duration 6s --warmup 0s \
    --workload "$workload" --value-size 1024 --keys 2000 --json "$vb_dir/out.json" > /dev/null 2> "$vb_dir/bench.err"
  kill -INT "$vb_pid"
  wait "$vb_pid" || true
}
