"""The Python bindings against the C library (run by tests/cli/python.sh; DELTAFIN_LIB names the library,
DELTAFIN_BIN the deltafin program, DELTAFIN_MODEL stories260K.gguf)."""
import ctypes
import os
import subprocess
import tempfile
import threading

import pytest

import deltafin

MODEL = os.environ.get("DELTAFIN_MODEL", "../shared/models/stories260K.gguf")
BIN = os.environ.get("DELTAFIN_BIN", "build/deltafin")
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def model():
    m = deltafin.Model(MODEL)
    yield m
    m.close()


def run_text(n):
    out = subprocess.run([BIN, "run", "-m", MODEL, "-p", PROMPT, "-n", str(n), "--temp", "0"],
                         capture_output=True, check=True).stdout.decode()
    out = out[:-1] if out.endswith("\n") else out  # run ends its output with a newline
    return out[len(PROMPT):] if out.startswith(PROMPT) else out


def test_structures_match_the_header():
    src = r'''
#include <stdio.h>
#include <stddef.h>
#include "deltafin.h"
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu\n", sizeof(df_model_params), sizeof(df_session_params), sizeof(df_sampler_params),
           sizeof(df_model_info), sizeof(df_plan), offsetof(df_plan, expert_width));
    return 0;
}
'''
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "s.c"), "w") as f:
            f.write(src)
        inc = os.path.join(os.path.dirname(__file__), "..", "..", "include")
        subprocess.run(["cc", "-I", inc, "-o", os.path.join(d, "s"), os.path.join(d, "s.c")], check=True)
        got = subprocess.run([os.path.join(d, "s")], capture_output=True, check=True).stdout.split()
    want = [ctypes.sizeof(deltafin._ModelParams), ctypes.sizeof(deltafin._SessionParams),
            ctypes.sizeof(deltafin._SamplerParams), ctypes.sizeof(deltafin._ModelInfo), ctypes.sizeof(deltafin._Plan),
            deltafin._Plan.expert_width.offset]
    assert [int(x) for x in got] == want


def test_info_and_tokens(model):
    info = model.info
    assert info["arch"] == "llama" and info["n_vocab"] == model.n_vocab > 0
    toks = model.tokenize(PROMPT)
    assert len(toks) > 1
    assert model.detokenize(toks).strip() == PROMPT


def test_generate_is_run_temp_0(model):
    assert "".join(model.generate(PROMPT, max_tokens=60, temp=0)) == run_text(60)


def test_session_logits(model):
    with model.session(n_ctx=64) as s:
        lg = s.decode(model.tokenize(PROMPT))
        assert len(lg) == model.n_vocab and s.pos == len(model.tokenize(PROMPT))
        best = max(range(len(lg)), key=lg.__getitem__)
        first = next(iter(model.generate(PROMPT, max_tokens=1, temp=0)))
        assert model.detokenize([best]) == first
        s.truncate(1)
        assert s.pos == 1


def test_errors_raise(model):
    with pytest.raises(deltafin.DeltafinError) as e:
        deltafin.Model("/nonexistent/model.gguf")
    assert e.value.status < 0 and "nonexistent" in e.value.message
    with model.session(n_ctx=8) as s:
        with pytest.raises(deltafin.DeltafinError) as e:
            s.decode(list(range(1, 20)))  # more than the context
        assert e.value.status == deltafin.DF_E_CTX_FULL
        with pytest.raises(deltafin.DeltafinError):
            s.decode([10 ** 9])  # no such token
    with pytest.raises(ValueError):
        deltafin.Model(MODEL, mem="lots")
    m2 = deltafin.Model(MODEL)
    s2 = m2.session(n_ctx=16)
    with pytest.raises(deltafin.DeltafinError):
        m2.close()  # a session is open
    s2.close()
    m2.close()
    with pytest.raises(deltafin.DeltafinError):
        m2.tokenize("closed")


def test_plan():
    p = deltafin.plan(MODEL, mem="64M", n_ctx=256)
    assert p["budget"] == 64 << 20 and 0 < p["minimum"] <= p["budget"] and p["n_ctx"] == 256
    kv = [m for m in p["memory"] if m["name"] == "KV cache"]  # what a session keeps per layer
    assert len(kv) == 1 and kv[0]["layers"] == p["n_layer"] and 0 < kv[0]["bytes"] < p["session_bytes"]
    assert p["ranks"] == 1 and p["rank"] == 0 and p["n_experts_all"] == 0  # the fields after the list line up


def test_budgeted_model_generates_the_same():
    with deltafin.Model(MODEL, mem="64M", n_ctx=256, hot_file="") as m:
        assert "".join(m.generate(PROMPT, max_tokens=30, temp=0, n_ctx=256)) == run_text(30)
    with deltafin.Model(MODEL, mem="64M", n_ctx=256, hot_file="", page_cache=True) as m:
        assert "".join(m.generate(PROMPT, max_tokens=30, temp=0, n_ctx=256)) == run_text(30)


def test_sessions_in_threads(model):
    want = run_text(30)
    got = [None] * 4

    def work(i):
        got[i] = "".join(model.generate(PROMPT, max_tokens=30, temp=0))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == [want] * 4


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_1000_sessions(model):
    for _ in range(50):  # warm up the allocator
        with model.session(n_ctx=64) as s:
            s.decode([1, 2, 3])
    before = rss_bytes()
    for _ in range(1000):
        with model.session(n_ctx=64) as s:
            s.decode([1, 2, 3])
    grown = rss_bytes() - before
    assert grown < 8 << 20, f"RSS grew {grown} bytes over 1000 sessions"


def test_chat_with_the_models_template():
    mk = os.path.join(os.path.dirname(BIN), "mkmodel")
    tmpl = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "jinja", "templates",
                        "Qwen-Qwen2.5-7B-Instruct.jinja")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "chat.gguf")
        subprocess.run([mk, "-o", path, "--arch", "qwen3", "--type", "q8_0", "--chat-template", tmpl],
                       capture_output=True, check=True)
        with deltafin.Model(path) as m:
            msgs = [{"role": "user", "content": "Hi"}]
            p = m.chat_prompt(msgs)
            assert "<|im_start|>user\nHi<|im_end|>" in p and p.endswith("<|im_start|>assistant\n")
            want = "".join(m.generate(m.tokenize(p, parse_special=True), max_tokens=8, temp=0, stop_at_end=False))
            assert "".join(m.chat(msgs, max_tokens=8, temp=0, stop_at_end=False)) == want
    with deltafin.Model(MODEL) as m, pytest.raises(deltafin.DeltafinError):
        m.chat_prompt([{"role": "user", "content": "Hi"}])  # stories260K has no template


def test_models_of_the_stores(monkeypatch):
    with tempfile.TemporaryDirectory() as home:
        d = os.path.join(home, ".lmstudio", "models", "acme", "tiny-GGUF")
        os.makedirs(d)
        with open(MODEL, "rb") as src, open(os.path.join(d, "tiny-Q8_0.gguf"), "wb") as dst:
            dst.write(src.read())
        monkeypatch.setenv("HOME", home)
        found = deltafin.models()
        assert [f["name"] for f in found] == ["lmstudio:acme/tiny-GGUF/tiny-Q8_0.gguf"]
        assert found[0]["size"] == os.path.getsize(MODEL)
        with deltafin.Model("lmstudio:acme/tiny-GGUF/tiny-Q8_0.gguf") as m:
            assert "".join(m.generate(PROMPT, max_tokens=20, temp=0)) == run_text(20)
        with pytest.raises(deltafin.DeltafinError):
            deltafin.resolve("ollama:absent")
