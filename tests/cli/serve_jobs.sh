#!/usr/bin/env bash
# serve_jobs.sh - `deltafin serve --jobs`: the durable job queue over HTTP
# (server/jobs_api.c, docs/jobs.md), with curl.
#   tests/cli/serve_jobs.sh BUILD_DIR
# Server A runs a worker beside the API (--worker): a greedy job submitted
# with POST /v1/jobs completes with `deltafin run`'s text. Server B has no
# worker, so its jobs stay queued: cancel, and the CLI and the API see the
# same database. Every bad request is a 4xx with an OpenAI-shaped body.
# Stopping server A stops its worker.
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-serve-jobs-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v jq >/dev/null || { echo "SKIPPED: jq not found"; exit 0; }
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4

start() { serve_start "$@"; }
KEY=sekrit
H=(-H "Authorization: Bearer $KEY" -H "Content-Type: application/json")
# req METHOD URL [BODY]: the body, then the HTTP status on the last line
req() { curl -s -w '\n%{http_code}' -X "$1" "${H[@]}" "$U$2" ${3:+-d "$3"}; }
status() { tail -n1 <<< "$1"; }
body() { sed '$d' <<< "$1"; }
# wait_done ID: until the job has ended (done, failed, canceled, expired); prints its state
wait_done() {
    local st=
    for _ in $(seq 1 $((600 * SLOW))); do
        st=$(curl -s "${H[@]}" "$U/v1/jobs/$1" | jq -r .state)
        case "$st" in queued|running) sleep 0.1 ;; *) break ;; esac
    done
    echo "$st"
}

start "$T/a.log" -m "$S" -c 256 --api-key "$KEY" --jobs-db "$T/a.db" --worker
U="http://127.0.0.1:$PORT"
APID=$SPID

# ---- a job through the API, run by the server's worker ----
P="Once upon a time"
run=$("$D" run -m "$S" -p "$P" -n 24 --temp 0 -c 256 2>/dev/null)
want=${run#"$P"}
r=$(req POST /v1/jobs "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0,\"n_ctx\":256,\"priority\":3}")
check "POST /v1/jobs: 200" test "$(status "$r")" = 200
id=$(body "$r" | jq -r .id)
check "... the job's id ($id)" grep -qx '[1-9][0-9]*' <<< "$id"
check "... queued or running, with its fields" test "$(body "$r" | jq -r '[.n_predict, .priority, .temp] | join(",")')" = "24,3,0"
check "... the served model's file" test "$(body "$r" | jq -r .model)" = "$(realpath "$S")"
check "... no page cache: the server has no --page-cache" test "$(body "$r" | jq -r .page_cache)" = false
st=$(wait_done "$id")
check "the worker beside the server runs it: done ($st)" test "$st" = done
r=$(req GET "/v1/jobs/$id")
check "GET /v1/jobs/ID: 200" test "$(status "$r")" = 200
check "... 24 tokens committed" test "$(body "$r" | jq -r .n_done)" = 24
check "... its text is deltafin run's greedy text" test "$(body "$r" | jq -r .text)" = "$want"
check "... events and stats are lists" test "$(body "$r" | jq -r '[(.events|type), (.stats|type)] | join(",")')" = "array,array"
check "the CLI shows the same text" test "$("$D" job "$id" --db "$T/a.db")" = "$want"
r=$(req GET "/v1/jobs/$id/")
check "a trailing slash is the same job" test "$(body "$r" | jq -r .id)" = "$id"

# a chat job for a model without a chat template (stories260K has none): refused when submitted, not failed
# later by the worker
r=$(req POST /v1/jobs '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"seed":7,"temperature":0.5,"mem":"64M"}')
check "POST /v1/jobs with messages, the model without a template: 400" test "$(status "$r")" = 400
check "... naming 'messages' and the template" \
    test "$(body "$r" | jq -r '.error.param + " " + (.error.message | test("chat template") | tostring)')" = "messages true"

# DELETE of an ended job: 409, and it stays done
r=$(req DELETE "/v1/jobs/$id")
check "DELETE of a done job: 409" test "$(status "$r")" = 409
check "... code job_ended" test "$(body "$r" | jq -r .error.code)" = job_ended
check "... it is still done" test "$(curl -s "${H[@]}" "$U/v1/jobs/$id" | jq -r .state)" = done

# ---- bad requests: 4xx with an OpenAI-shaped body ----
bad() { # bad WHAT METHOD URL BODY STATUS [PARAM|CODE]
    local r; r=$(req "$2" "$3" "$4")
    check "$1: $5" test "$(status "$r")" = "$5"
    check "$1: an error object with a message" test "$(body "$r" | jq -r '.error.message | length > 0')" = true
    [ -n "${6:-}" ] && check "$1: names $6" test "$(body "$r" | jq -r "[.error.param, .error.code] | index(\"$6\") != null")" = true
}
bad "not JSON"                POST /v1/jobs '{"prompt":'                            400 invalid_json
bad "a list, not an object"   POST /v1/jobs '[1]'                                   400
bad "no prompt"               POST /v1/jobs '{"max_tokens":3}'                      400 prompt
bad "prompt and messages"     POST /v1/jobs '{"prompt":"x","messages":[]}'          400 messages
bad "prompt not a string"     POST /v1/jobs '{"prompt":5}'                          400 prompt
bad "messages empty"          POST /v1/jobs '{"messages":[]}'                       400 messages
bad "max_tokens 0"            POST /v1/jobs '{"prompt":"x","max_tokens":0}'         400 max_tokens
bad "max_tokens 1.5"          POST /v1/jobs '{"prompt":"x","max_tokens":1.5}'       400 max_tokens
bad "temperature a string"    POST /v1/jobs '{"prompt":"x","temperature":"hot"}'    400 temperature
bad "top_p above 1"           POST /v1/jobs '{"prompt":"x","top_p":2}'              400 top_p
bad "mem not a size"          POST /v1/jobs '{"prompt":"x","mem":"lots"}'           400 mem
bad "ignore_eos not a bool"   POST /v1/jobs '{"prompt":"x","ignore_eos":1}'         400 ignore_eos
bad "page_cache (the operator's)" POST /v1/jobs '{"prompt":"x","page_cache":true}'  400 page_cache
bad "another model"           POST /v1/jobs '{"prompt":"x","model":"gpt-9"}'        404 model_not_found
bad "no such job"             GET /v1/jobs/999999 ''                                404 job_not_found
bad "cancel no such job"      DELETE /v1/jobs/999999 ''                             404 job_not_found
bad "an id that is no number" GET /v1/jobs/abc ''                                   404 not_found
bad "id 0"                    GET /v1/jobs/0 ''                                     404 not_found
bad "an id too large"         GET /v1/jobs/99999999999999999999 ''                  404 not_found
bad "PUT /v1/jobs"            PUT /v1/jobs '{}'                                     405 method_not_allowed
bad "DELETE /v1/jobs"         DELETE /v1/jobs ''                                    405 method_not_allowed
bad "POST /v1/jobs/ID"        POST "/v1/jobs/$id" '{}'                              405 method_not_allowed
r=$(curl -s -w '\n%{http_code}' "$U/v1/jobs")
check "no API key: 401" test "$(status "$r")" = 401
n=$(curl -s "${H[@]}" "$U/v1/jobs" | jq '.data | length')
check "no bad request made a job (1 job)" test "$n" = 1

# ---- server B: no worker, so jobs stay queued ----
start "$T/b.log" -m "$S" -c 256 --api-key "$KEY" --jobs-db "$T/b.db"
U="http://127.0.0.1:$PORT"
r=$(req POST /v1/jobs '{"prompt":"Keep me","max_tokens":5}')
q1=$(body "$r" | jq -r .id)
check "without --worker a job stays queued" test "$(body "$r" | jq -r .state)" = queued
q2=$("$D" submit -m "$S" -p "From the CLI" -n 5 --db "$T/b.db")
r=$(req GET /v1/jobs)
check "GET /v1/jobs: a list of both, the CLI's too" test "$(body "$r" | jq -r '[.object, (.data | map(.id) | join(" "))] | join(":")')" = "list:$q1 $q2"
r=$(req DELETE "/v1/jobs/$q1")
check "DELETE /v1/jobs/ID: 200" test "$(status "$r")" = 200
check "... canceled" test "$(body "$r" | jq -r .state)" = canceled
check "the CLI sees it canceled" contains "$("$D" jobs --db "$T/b.db")" canceled
r=$(req DELETE "/v1/jobs/$q1")
check "DELETE again: 409" test "$(status "$r")" = 409
check "the other job is still queued" test "$(curl -s "${H[@]}" "$U/v1/jobs/$q2" | jq -r .state)" = queued

# ---- a server without --jobs ----
start "$T/c.log" -m "$S" -c 256
r=$(curl -s -w '\n%{http_code}' "http://127.0.0.1:$PORT/v1/jobs")
check "without --jobs: 404" test "$(status "$r")" = 404
check "... saying how to turn it on" contains "$(body "$r" | jq -r .error.message)" "--jobs"

# ---- a chat job on a model with a template: the worker renders the messages and runs them ----
"$B/mkmodel" -o "$T/chat.gguf" --arch qwen3 --type q8_0 \
    --chat-template tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja 2>/dev/null
start "$T/d.log" -m "$T/chat.gguf" -c 256 --api-key "$KEY" --jobs-db "$T/d.db" --worker --page-cache
U="http://127.0.0.1:$PORT"
r=$(req POST /v1/jobs '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"seed":7,"temperature":0.5,"mem":"64M","ignore_eos":true}')
check "POST /v1/jobs with messages: 200" test "$(status "$r")" = 200
cid=$(body "$r" | jq -r .id)
check "... a chat job, its seed and budget, and the server's --page-cache" \
    test "$(body "$r" | jq -r '[.chat, .seed, .mem, .page_cache] | join(",")')" = "1,7,67108864,true"
check "... done by the worker" test "$(wait_done "$cid")" = done
check "... 4 tokens" test "$(curl -s "${H[@]}" "$U/v1/jobs/$cid" | jq -r .n_done)" = 4

# ---- stopping server A stops its worker ----
wpid=$(pgrep -P "$APID" | head -n1)
check "server A has a worker child ($wpid)" test -n "$wpid"
kill -TERM "$APID"
wait "$APID"; rc=$?
check "server A exits 0 on SIGTERM" test "$rc" = 0
check "... and its worker is gone" bash -c "! kill -0 ${wpid:-0} 2>/dev/null"
finish
