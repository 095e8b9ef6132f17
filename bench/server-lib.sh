# shellcheck shell=bash
# What bench/server and bench/server-postgres share: servers on loopback, wrk scripts, and one
# measurement of three workloads on the same servers and connections, round by round:
#   healthz   GET /healthz: the HTTP floor, a request that does no work;
#   single    POST /v1/identify, the CLI's report of one fixture host with a fresh Idempotency-Key
#             per request: one visitor, judged, resolved and stored every time;
#   distinct  POST /v1/identify, each request a different generated host (bench/distinct-hosts):
#             every request creates a visitor and its components.
# The ratios to the floor are the figures that count; the machine moves, a ratio in one run less.
# Callers set: bin, work, seconds, connections, threads, rounds; and call bench_cleanup on exit.

servers=()
# Requests of the distinct workload one wrk thread may send in a round before hosts repeat
# (a repeat joins an existing visitor: it is counted and printed, never hidden).
hosts_per_second=${FINGERLY_BENCH_HOSTS_PER_SECOND:-2500}

stop_servers() { for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done; servers=(); }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

# Starts one server on $1 (database) and sets $port. Not in a $(…): the server would inherit the
# substitution's pipe and hold it open, and its pid would be lost with the subshell.
start_server() {
  port=$(free_port)
  # wrk cannot sign (Ed25519): its requests are unsigned, as a third-party client's, which the
  # server then has to be told to accept.
  "$bin/fingerly-server" serve --database "$1" --listen "127.0.0.1:$port" --rate-limit 1000000 --storage-quota 0 \
    --threads "$threads" --connection-limit 1024 --allow-unsigned >/dev/null 2>>"$work/server.log" &
  servers+=($!)
  for _ in $(seq 1 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/healthz', timeout=1)" 2>/dev/null && return
    sleep 0.1
  done
  echo "bench: the server on $1 did not answer /healthz (log: $work/server.log)" >&2
  exit 70
}

# The summary line every script prints: requests/s, p50 and p99 in ms, failures, hosts repeated.
lua_done='
done = function(summary, latency, requests)
  local repeated = 0
  for _, thread in ipairs(threads) do repeated = repeated + (thread:get("repeated") or 0) end
  io.write(string.format("%.1f %.2f %.2f %d %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    repeated))
end'

lua_threads='
threads = {}
local next_thread = 0
function setup(thread)
  next_thread = next_thread + 1
  thread:set("thread_id", next_thread)
  table.insert(threads, thread)
end'

write_healthz_script() { # file
  cat > "$1" <<LUA
$lua_threads
request = function() return wrk.format("GET", "/healthz") end
$lua_done
LUA
}

# $1 file, $2 public key, $3 tag (no two wrk processes share one), $4 the body, or "distinct":
# thread N of the process reads one body a request from \$work/hosts-<tag>-<N>.jsonl.
write_identify_script() {
  cat > "$1" <<LUA
$lua_threads
local source = "$4"
local body, hosts = nil, nil
repeated = 0
function init(args)
  if source == "distinct" then
    hosts = assert(io.open("$work/hosts-$3-" .. thread_id .. ".jsonl", "rb"))
  else
    local file = assert(io.open(source, "rb"))
    body = file:read("*a")
    file:close()
  end
end
local sent = 0
request = function()
  sent = sent + 1
  local payload = body
  if hosts then
    payload = hosts:read("*l")
    if not payload then
      hosts:seek("set", 0)
      payload = hosts:read("*l")
      repeated = repeated + 1
    end
  end
  return wrk.format("POST", "/v1/identify", {
    ["Authorization"] = "Bearer $2",
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = string.format('"bench-$3-%d-%d-%d"', os.time(), thread_id, sent),
  }, payload)
end
$lua_done
LUA
}

# One round of script $1 against the ports given (connections split evenly, one wrk process per
# port): prints "requests/s p50 p99 failures repeated", the sum of the rates and the worst latencies.
wrk_round() {
  local script=$1; shift
  local each=$(( connections / $# )) wrk_threads=1 index=0 pids=()
  [ "$each" -ge 1 ] || each=1
  [ $# -eq 1 ] && [ "$each" -ge 2 ] && wrk_threads=2
  for port in "$@"; do
    index=$((index + 1))
    wrk -t"$wrk_threads" -c"$each" -d"${seconds}s" -s "${script/INDEX/$index}" "http://127.0.0.1:$port" | tail -n 1 \
      > "$work/out-$index" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work"/out-* | awk '{ rps += $1; if ($2 > p50) p50 = $2; if ($3 > p99) p99 = $3; failed += $4; repeated += $5 }
    END { printf "%.0f %.2f %.2f %d %d\n", rps, p50, p99, failed, repeated }'
  rm -f "$work"/out-*
}

# The median line of a file of round lines, by requests/s.
median_round() { sort -n "$1" | sed -n "$(( ($(wc -l < "$1") + 1) / 2 ))p"; }

# Measures one setup: $1 label, $2 database, $3 instances, $4 description. Prints each round, and
# appends to $work/table the medians and their ratios to the floor.
measure() {
  local label=$1 database=$2 instances=$3 description=$4 ports=() public org wrk_threads=1
  org="bench-$label"
  public=$("$bin/fingerly-server" keys add --org "$org" --db "$database" 2>/dev/null | grep -o 'fly_pk_[A-Za-z0-9_-]*' | head -n 1)
  # Made with the key, as the client makes it: the server recomputes the identifiers under the
  # key's organization and refuses a body keyed otherwise (identity_mismatch).
  FINGERLY_STATE_DIR="$work/state" FINGERLY_API_KEY="$public" "$bin/fingerly-identify" --no-submit --request-only \
    --root "$PWD/Tests/Fixtures/hosts/laptop-baremetal" > "$work/body.json"
  [ "$instances" -eq 1 ] && [ "$connections" -ge 2 ] && wrk_threads=2
  for index in $(seq 1 "$instances"); do
    start_server "$database"
    ports+=("$port")
  done
  write_healthz_script "$work/healthz-$label-INDEX.lua"
  for index in $(seq 1 "$instances"); do
    cp "$work/healthz-$label-INDEX.lua" "$work/healthz-$label-$index.lua"
    write_identify_script "$work/single-$label-$index.lua" "$public" "$label-$index" "$work/body.json"
  done
  echo "$description: warm-up round (not counted): identify $(wrk_round "$work/single-$label-INDEX.lua" "${ports[@]}")" >&2
  : > "$work/$label-healthz"; : > "$work/$label-single"; : > "$work/$label-distinct"
  local per_thread=$(( hosts_per_second * seconds / instances / wrk_threads + 1 ))
  for round in $(seq 1 "$rounds"); do
    for index in $(seq 1 "$instances"); do
      local tag="$label-r$round-$index"
      for thread in $(seq 1 "$wrk_threads"); do
        "$PWD/bench/distinct-hosts" "$work/body.json" "$org" "$per_thread" "$work/hosts-$tag-$thread.jsonl"
      done
      write_identify_script "$work/distinct-$label-$index.lua" "$public" "$tag" distinct
    done
    local healthz single distinct
    healthz=$(wrk_round "$work/healthz-$label-INDEX.lua" "${ports[@]}")
    single=$(wrk_round "$work/single-$label-INDEX.lua" "${ports[@]}")
    distinct=$(wrk_round "$work/distinct-$label-INDEX.lua" "${ports[@]}")
    rm -f "$work"/hosts-"$label"-r"$round"-*.jsonl
    echo "$healthz" >> "$work/$label-healthz"; echo "$single" >> "$work/$label-single"; echo "$distinct" >> "$work/$label-distinct"
    echo "$description: round $round (requests/s p50 p99 failures repeated-hosts): healthz $healthz; single $single;" \
      "distinct $distinct" >&2
  done
  local floor
  floor=$(median_round "$work/$label-healthz" | cut -d' ' -f1)
  for workload in healthz single distinct; do
    median_round "$work/$label-$workload" | {
      read -r rps p50 p99 failed repeated
      awk -v d="$description" -v w="$workload" -v r="$rps" -v f="$floor" -v a="$p50" -v b="$p99" -v e="$failed" -v h="$repeated" \
        'BEGIN { printf "%-26s %-9s %9d %6.2f %8s %8s %8d %8d\n", d, w, r, r / f, a, b, e, h }'
    } >> "$work/table"
  done
  stop_servers
}

table_header() {
  printf "%-26s %-9s %9s %6s %8s %8s %8s %8s\n" "setup" "workload" "req/s" "floor" "p50 ms" "p99 ms" "failed" "repeated"
}
