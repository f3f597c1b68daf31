#!/usr/bin/env bash
# fuzz.sh - build the GGUF reader's libFuzzer target and run it for a bounded time.
#
#   tests/fuzz.sh                      # 60 s
#   FUZZ_SECONDS=600 tests/fuzz.sh     # longer
#
# WHY: src/gguf/gguf.c parses untrusted model files; unit tests (tests/test_gguf.c)
# cover the defects we thought of, the fuzzer looks for the ones we did not.
#
# WHAT: compiles tests/fuzz_gguf.c with clang -fsanitize=fuzzer,address,undefined
# (UB aborts: -fno-sanitize-recover=all) together with the reader and what it
# links against (util.c, quant.c, quant_iq.c, quant_lowbit.c, quant_grids.c and the x86 kernels), into $FUZZ_BUILD
# (default build-fuzz/). Only gguf.c and util.c carry coverage instrumentation,
# so the fuzzer spends its effort on the reader. The working corpus
# ($FUZZ_BUILD/corpus) starts as a copy of the seeds in tests/data/gguf-corpus
# (*.bin; see gen_seeds.py there) and keeps what the fuzzer finds between runs
# (FUZZ_FRESH=1 starts over). Exits non-zero on any crash, leak, timeout,
# out-of-memory or sanitizer report; the input that caused it is left in
# $FUZZ_BUILD/artifacts/. Crashing inputs worth keeping go, minimised
# (fuzz_gguf -minimize_crash=1 -runs=10000 FILE), into the seed folder.
#
# Environment: FUZZ_SECONDS (60), FUZZ_BUILD (build-fuzz), FUZZ_MAX_LEN (65536: the seeds are < 64 KB),
# FUZZ_FRESH (unset), CLANG (clang, else clang-14).
#
# FUZZ_TARGET=jinja fuzzes the chat-template engine instead (tests/fuzz_jinja.c: a
# template, a NUL, JSON variables), seeded with the real templates of
# tests/data/jinja/templates, corpus and artifacts in $FUZZ_BUILD/jinja-*.
#
# FUZZ_TARGET=grammar fuzzes constrained sampling (tests/fuzz_grammar.c: GBNF grammars walked over a small
# vocabulary, the mask checked against token-by-token answers; JSON Schemas compiled, their grammars parsed),
# seeded with tests/data/grammar-corpus and llama.cpp's grammars, corpus and artifacts in $FUZZ_BUILD/grammar-*.
#
# FUZZ_TARGET=api fuzzes what the server makes of a request body (tests/fuzz_api.c:
# the OpenAI request reader and /v1/jobs over the job queue), in process. The whole
# library and the server's files are built with clang, ASan+UBSan and coverage, by the
# Makefile into $FUZZ_BUILD/lib (minutes the first time); the model is made by mkmodel
# (a qwen3 with a chat template); seeds in tests/data/api-corpus, corpus and
# artifacts in $FUZZ_BUILD/api-*.
#
# FUZZ_TARGET=http fuzzes the HTTP layer over the network (tests/fuzz_http.c:
# request lines, headers, chunked bodies, pieces, half-closes, pipelining)
# against `deltafin serve --jobs --worker` of `make debug` (ASan+UBSan), with
# FUZZ_CLIENTS (3) clients at once: the first half of the time without an API
# key, the second with one and --mem 64M. Fails on a client's finding, a server
# that stops answering, a server that does not exit 0 on SIGTERM or any
# sanitizer report in its log ($FUZZ_BUILD/http-*.log); findings in
# $FUZZ_BUILD/http-artifacts.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECONDS_RUN=${FUZZ_SECONDS:-60}
OUT=${FUZZ_BUILD:-build-fuzz}
MAX_LEN=${FUZZ_MAX_LEN:-65536}
SEEDS=tests/data/gguf-corpus

pick_clang() {
    for c in ${CLANG:-} clang clang-14; do
        command -v "$c" > /dev/null 2>&1 || continue
        # must be able to link a fuzzer (needs libclang-rt for its version)
        if printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){return 0;}\n' |
            "$c" -x c -fsanitize=fuzzer,address,undefined -o "$OUT/.probe" - > /dev/null 2>&1; then
            rm -f "$OUT/.probe"
            echo "$c"
            return 0
        fi
    done
    return 1
}

mkdir -p "$OUT/obj" "$OUT/artifacts" "$OUT/corpus"
if ! CC=$(pick_clang); then
    echo "fuzz.sh: no clang that can build -fsanitize=fuzzer (install clang and libclang-rt-dev)" >&2
    exit 2
fi

# Every folder of src/ is on the include path (as in the Makefile).
SRC_INC=()
for d in src/*/ src/*/*/; do SRC_INC+=("-I${d%/}"); done

# run_libfuzzer NAME BINARY LOG CORPUS ARTIFACTS [OPTIONS...]: one timed libFuzzer run; exits with its verdict.
run_libfuzzer() {
    local name=$1 bin=$2 log=$3 corpus=$4 art=$5 rc
    shift 5
    set +e
    "$bin" -max_total_time="$SECONDS_RUN" -print_final_stats=1 -artifact_prefix="$art/" "$@" "$corpus" > "$log" 2>&1
    rc=$?
    set -e
    grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$log" || true
    [ $rc -eq 0 ] || { tail -60 "$log"; echo "fuzz.sh: $name FAILED (exit $rc)" >&2; exit 1; }
    echo "fuzz.sh: $name, no crash in ${SECONDS_RUN}s"
    exit 0
}

# A small model with a chat template, for the api and http targets.
chat_model() { # OUT
    [ -x build/mkmodel ] || make -s build/mkmodel
    build/mkmodel -o "$1" --arch qwen3 --type q8_0 \
        --chat-template tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja > /dev/null 2>&1
}

if [ "${FUZZ_TARGET:-gguf}" = api ]; then
    L="$OUT/lib"
    make -s -j2 CC="$CC" MODE=debug BUILD="$L" WARN=-w \
        OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all" \
        "$L/libdeltafin-internal.a" $(for f in oai ollama anthropic embed jobs_api sched pcache opts; do echo "$L/obj/server/$f.o"; done) \
        $(for f in queue job_json config; do echo "$L/obj/jobs/$f.o"; done) > "$OUT/api-build.log" 2>&1 ||
        { tail -20 "$OUT/api-build.log"; exit 1; }
    "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer \
        -fno-sanitize-recover=all -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Iinclude -Iserver -Ijobs \
        -pthread tests/fuzz_api.c "$L"/obj/server/{oai,ollama,anthropic,embed,jobs_api,sched,pcache,opts}.o "$L"/obj/jobs/{queue,job_json,config}.o \
        "$L/libdeltafin-internal.a" -lpcre2-8 -lutf8proc -luring -lm -lcjson -lsqlite3 -o "$OUT/fuzz_api"
    mkdir -p "$OUT/api-corpus" "$OUT/api-artifacts"
    [ -z "${FUZZ_FRESH:-}" ] || rm -f "$OUT"/api-corpus/*
    cp -f tests/data/api-corpus/* "$OUT/api-corpus/"
    chat_model "$OUT/api-model.gguf"
    FUZZ_MODEL="$OUT/api-model.gguf" run_libfuzzer api "$OUT/fuzz_api" "$OUT/fuzz-api.log" "$OUT/api-corpus" \
        "$OUT/api-artifacts" -max_len=16384 -timeout=20 -rss_limit_mb=3072
fi

if [ "${FUZZ_TARGET:-gguf}" = http ]; then
    make -s -j2 debug > "$OUT/http-build.log" 2>&1 || { tail -20 "$OUT/http-build.log"; exit 1; }
    cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wshadow -o "$OUT/fuzz_http" tests/fuzz_http.c
    mkdir -p "$OUT/http-artifacts"
    chat_model "$OUT/http-model.gguf"
    CLIENTS=${FUZZ_CLIENTS:-3}
    HALF=$((SECONDS_RUN / 2))
    fail=0
    for phase in open keyed; do
        W=$(mktemp -d /tmp/deltafin-fuzz-http-XXXXXX)
        PORT=$((20000 + RANDOM % 20000))
        extra=()
        key=
        if [ $phase = keyed ]; then key=fuzzkey; extra=(--api-key "$key" --mem 64M --cors http://localhost:3000); fi
        ASAN_OPTIONS=detect_leaks=1 build-debug/deltafin serve -m "$OUT/http-model.gguf" --port "$PORT" -c 256 \
            --parallel 2 --queue 8 --jobs-db "$W/jobs.db" --worker --prompt-cache-dir "$W/pc" "${extra[@]}" \
            > "$OUT/http-$phase.log" 2>&1 &
        spid=$!
        for _ in $(seq 1 300); do grep -q 'serving' "$OUT/http-$phase.log" && break; sleep 0.1; done
        seed=${FUZZ_SEED:-$RANDOM}
        echo "fuzz.sh: http ($phase): $CLIENTS clients, ${HALF}s, seeds ${seed}1..${seed}$CLIENTS"
        pids=()
        for c in $(seq 1 "$CLIENTS"); do
            "$OUT/fuzz_http" 127.0.0.1 "$PORT" "$HALF" "$seed$c" "$key" "$OUT/http-artifacts" &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || fail=1; done
        kill -TERM "$spid" 2> /dev/null
        wait "$spid" || { echo "fuzz.sh: http ($phase): the server did not exit 0 on SIGTERM" >&2; fail=1; }
        if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$OUT/http-$phase.log"; then
            grep -m3 -A20 -E 'ERROR: |runtime error:' "$OUT/http-$phase.log" >&2
            fail=1
        fi
        rm -rf "$W"
    done
    [ $fail = 0 ] || { echo "fuzz.sh: http FAILED (logs $OUT/http-*.log, findings $OUT/http-artifacts)" >&2; exit 1; }
    echo "fuzz.sh: http, no finding in ${SECONDS_RUN}s"
    exit 0
fi

if [ "${FUZZ_TARGET:-gguf}" = jinja ]; then
    J=(-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Iinclude "${SRC_INC[@]}" "-fsanitize=address,undefined"
        -fno-sanitize-recover=all -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter)
    mkdir -p "$OUT/jinja-corpus" "$OUT/jinja-artifacts"
    "$CC" "${J[@]}" -fsanitize=fuzzer tests/fuzz_jinja.c src/text/jinja.c -lutf8proc -lm -o "$OUT/fuzz_jinja"
    [ -z "${FUZZ_FRESH:-}" ] || rm -f "$OUT"/jinja-corpus/*
    cp -f tests/data/jinja/templates/*.jinja "$OUT/jinja-corpus/"
    run_libfuzzer jinja "$OUT/fuzz_jinja" "$OUT/fuzz-jinja.log" "$OUT/jinja-corpus" "$OUT/jinja-artifacts" \
        -max_len="$MAX_LEN" -timeout=10 -rss_limit_mb=2048
fi

if [ "${FUZZ_TARGET:-gguf}" = grammar ]; then
    J=(-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Iinclude "${SRC_INC[@]}" "-fsanitize=address,undefined"
        -fno-sanitize-recover=all -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter)
    mkdir -p "$OUT/grammar-corpus" "$OUT/grammar-artifacts"
    "$CC" "${J[@]}" -fsanitize=fuzzer tests/fuzz_grammar.c src/text/grammar.c src/text/schema.c src/text/toolcall.c \
        -lcjson -lm -o "$OUT/fuzz_grammar"
    [ -z "${FUZZ_FRESH:-}" ] || rm -f "$OUT"/grammar-corpus/*
    cp -f tests/data/grammar-corpus/* "$OUT/grammar-corpus/"
    for f in .cache/llama/llama.cpp/grammars/*.gbnf; do [ -f "$f" ] && { printf g; cat "$f"; } > "$OUT/grammar-corpus/$(basename "$f")"; done
    run_libfuzzer grammar "$OUT/fuzz_grammar" "$OUT/fuzz-grammar.log" "$OUT/grammar-corpus" "$OUT/grammar-artifacts" \
        -max_len=16384 -timeout=10 -rss_limit_mb=2048
fi

BASE=(-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Iinclude "${SRC_INC[@]}" -pthread
    "-fsanitize=address,undefined" -fno-sanitize-recover=all)
STRICT=(-Wall -Wextra -Werror -Wshadow -Wno-unused-parameter)
# Rebuild an object when its source or any header is newer.
build_obj() { # SRC OBJ FLAGS...
    local src=$1 obj=$2
    shift 2
    if [ ! -f "$obj" ] || [ -n "$(find "$src" src/*/*.h src/*/*/*.h -newer "$obj" 2> /dev/null | head -1)" ]; then
        "$CC" "${BASE[@]}" "$@" -c "$src" -o "$obj"
    fi
}
build_obj src/gguf/gguf.c "$OUT/obj/gguf.o" "${STRICT[@]}" -fsanitize=fuzzer-no-link
build_obj src/base/util.c "$OUT/obj/util.o" "${STRICT[@]}" -fsanitize=fuzzer-no-link
# Not under test: warnings from another compiler must not stop the fuzzer. clang 14
# rejects __builtin_cpu_supports("f16c"); then quant.c is built with that builtin
# reading 0, i.e. with its scalar table, whose name/block/type sizes (all the
# reader uses) are the same as every SIMD table's.
if ! build_obj src/types/quant.c "$OUT/obj/quant.o" -w 2> "$OUT/quant.err"; then
    echo "fuzz.sh: quant.c does not build with $CC as is ($(grep -m1 error: "$OUT/quant.err" || true)); using its scalar table"
    build_obj src/types/quant.c "$OUT/obj/quant.o" -w '-D__builtin_cpu_supports(x)=0'
fi
build_obj src/types/quant_grids.c "$OUT/obj/quant_grids.o" -w   # the i-quants' lookup grids, which quant.c reads
build_obj src/types/quant_iq.c "$OUT/obj/quant_iq.o" -w         # the i-quants' codecs, which quant.c's table takes
build_obj src/types/quant_lowbit.c "$OUT/obj/quant_lowbit.o" -w # the microscaled and 1-2-bit codecs, likewise
build_obj src/types/amx/amx_gemm.c "$OUT/obj/amx_gemm.o" -w    # the AMX table (quant.c fills it) and the tile model
build_obj src/types/amx/amx_model.c "$OUT/obj/amx_model.o" -w
build_obj src/store/wsplan.c "$OUT/obj/wsplan.o" "${STRICT[@]}" -fsanitize=fuzzer-no-link   # the planner (ws_make_plan)
build_obj src/store/wstore.c "$OUT/obj/wstore.o" "${STRICT[@]}" -fsanitize=fuzzer-no-link
build_obj src/store/wsio.c "$OUT/obj/wsio.o" -w
build_obj src/store/requant.c "$OUT/obj/requant.o" -w   # --resident-type sizes, which the planner reads
build_obj src/types/pack.c "$OUT/obj/pack.o" -w         # the packed layouts the store keeps resident matrices in
build_obj src/base/threads.c "$OUT/obj/threads.o" -w    # the pool the store reads and packs with at load
build_obj src/base/outfile.c "$OUT/obj/outfile.o" -w    # the hot file's writer (the store saves through it)
OBJS=("$OUT/obj/gguf.o" "$OUT/obj/util.o" "$OUT/obj/quant.o" "$OUT/obj/quant_iq.o" "$OUT/obj/quant_lowbit.o" "$OUT/obj/quant_grids.o" "$OUT/obj/amx_gemm.o" "$OUT/obj/amx_model.o" "$OUT/obj/wsplan.o" "$OUT/obj/wstore.o" "$OUT/obj/wsio.o" "$OUT/obj/requant.o" "$OUT/obj/pack.o" "$OUT/obj/threads.o" "$OUT/obj/outfile.o")
case "$(uname -m)" in
x86_64)
    build_obj src/types/kern_avx2.c "$OUT/obj/kern_avx2.o" -w -mavx2 -mfma -mf16c
    build_obj src/types/kern_avx512.c "$OUT/obj/kern_avx512.o" -w -mavx512f -mavx512bw -mavx512vl -mavx512dq \
        -mavx512vnni -mavx2 -mfma -mf16c
    build_obj src/types/amx/kern_amx.c "$OUT/obj/kern_amx.o" -w -mamx-tile -mamx-int8 -mamx-bf16 -mf16c
    build_obj src/types/amx/kern_amx_model.c "$OUT/obj/kern_amx_model.o" -w -mf16c   # the x86 AMX code on the tile model
    OBJS+=("$OUT/obj/kern_avx2.o" "$OUT/obj/kern_avx512.o" "$OUT/obj/kern_amx.o" "$OUT/obj/kern_amx_model.o")
    ;;
aarch64)
    build_obj src/types/kern_neon.c "$OUT/obj/kern_neon.o" -w
    OBJS+=("$OUT/obj/kern_neon.o")
    ;;
esac
"$CC" "${BASE[@]}" "${STRICT[@]}" -fsanitize=fuzzer tests/fuzz_gguf.c "${OBJS[@]}" -luring -lpthread -lm -o "$OUT/fuzz_gguf"

# Dictionary: the magic, value-type ids and the keys the reader gives meaning to.
cat > "$OUT/gguf.dict" << 'EOF'
"GGUF"
"general.alignment"
"general.architecture"
"split.no"
"split.count"
"split.tensors.count"
"tokenizer.ggml.tokens"
"\x03\x00\x00\x00"
"\x02\x00\x00\x00"
"\x08\x00\x00\x00"
"\x09\x00\x00\x00"
"\x0c\x00\x00\x00"
"\x00\x00\x00\x00\x00\x00\x00\x80"
"\xff\xff\xff\xff\xff\xff\xff\xff"
EOF

if [ -n "${FUZZ_FRESH:-}" ]; then rm -rf "$OUT/corpus" && mkdir -p "$OUT/corpus"; fi
cp -f "$SEEDS"/*.bin "$OUT/corpus/"

echo "fuzz.sh: $CC, ${SECONDS_RUN}s, corpus $OUT/corpus ($(find "$OUT/corpus" -type f | wc -l) inputs)"
set +e
"$OUT/fuzz_gguf" -max_total_time="$SECONDS_RUN" -max_len="$MAX_LEN" -timeout=10 -rss_limit_mb=2048 \
    -dict="$OUT/gguf.dict" -artifact_prefix="$OUT/artifacts/" -print_final_stats=1 \
    "$OUT/corpus" > "$OUT/fuzz.log" 2>&1
rc=$?
set -e
grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^Done [0-9]+ runs' "$OUT/fuzz.log" || true
if [ $rc -ne 0 ]; then
    tail -60 "$OUT/fuzz.log"
    echo "fuzz.sh: FAILED (exit $rc); log $OUT/fuzz.log, input in $OUT/artifacts/" >&2
    exit 1
fi
echo "fuzz.sh: no crash in ${SECONDS_RUN}s"
