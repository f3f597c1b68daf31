"""deltafin - Python bindings of libdeltafin (include/deltafin.h), over ctypes.

No compiler is needed: the package loads the shared library (libdeltafin.so.0,
from ``make install`` or ``build/``; ``DELTAFIN_LIB`` names another file) and
calls the C API. Every object frees its C memory when it goes (or on
``close()`` / ``with``). Errors raise :class:`DeltafinError`, carrying the
library's status code (``DF_E_*``) and its message.

    import deltafin
    m = deltafin.Model("stories260K.gguf")
    for piece in m.generate("Once upon a time", max_tokens=32, temp=0):
        print(piece, end="")

The structures below mirror the header's field for field; python/tests checks
their sizes against the C compiler's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import weakref
from typing import Iterator, List, Optional, Sequence

__all__ = ["DeltafinError", "Model", "Session", "Sampler", "plan", "models", "resolve", "version", "library_path"]

DF_OK, DF_E_INPUT, DF_E_NOMEM, DF_E_IO, DF_E_CTX_FULL, DF_E_CANCELLED, DF_E_UNSUPPORTED, DF_E_BUSY = (
    0, -1, -2, -3, -4, -5, -6, -7)
DF_KV_F32, DF_KV_F16 = 0, 1
_ERRLEN = 1024


class DeltafinError(Exception):
    """A call into libdeltafin failed: ``status`` is the library's code (DF_E_*), ``message`` its words."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{message} (status {status})")
        self.status = status
        self.message = message


class _ModelParams(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int), ("use_mmap", ctypes.c_int), ("mem_budget", ctypes.c_uint64),
                ("n_ctx", ctypes.c_int), ("n_batch", ctypes.c_int), ("n_sessions", ctypes.c_int),
                ("kv_type", ctypes.c_int), ("io_threads", ctypes.c_int), ("io_engine", ctypes.c_int),
                ("hot_file", ctypes.c_char_p), ("vocab_only", ctypes.c_int), ("resident_type", ctypes.c_char_p),
                ("spec_k_max", ctypes.c_int), ("mtp", ctypes.c_int), ("mem_reserve", ctypes.c_uint64),
                ("page_cache", ctypes.c_int), ("split_layers", ctypes.c_int),
                ("plan_cb", ctypes.c_void_p), ("plan_ctx", ctypes.c_void_p)]


_ABORT_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _SessionParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_int), ("n_batch", ctypes.c_int), ("kv_type", ctypes.c_int),
                ("abort_cb", _ABORT_CB), ("abort_ctx", ctypes.c_void_p), ("spec_k_max", ctypes.c_int)]


class _SamplerParams(ctypes.Structure):
    _fields_ = [("temp", ctypes.c_float), ("top_k", ctypes.c_int), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_int),
                ("seed", ctypes.c_uint64), ("presence_penalty", ctypes.c_float), ("frequency_penalty", ctypes.c_float)]


class _ModelInfo(ctypes.Structure):
    _fields_ = [("arch", ctypes.c_char_p), ("name", ctypes.c_char_p), ("n_vocab", ctypes.c_int),
                ("n_ctx_train", ctypes.c_int), ("n_embd", ctypes.c_int), ("n_layer", ctypes.c_int),
                ("n_head", ctypes.c_int), ("n_head_kv", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("n_ff", ctypes.c_int), ("n_params", ctypes.c_uint64), ("n_bytes", ctypes.c_uint64),
                ("n_expert", ctypes.c_int), ("n_expert_used", ctypes.c_int), ("n_expert_shared", ctypes.c_int),
                ("n_params_active", ctypes.c_uint64), ("expert_bytes", ctypes.c_uint64),
                ("n_threads", ctypes.c_int), ("packed_bytes", ctypes.c_uint64)]


class _PlanMem(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 32), ("n_layers", ctypes.c_int), ("bytes", ctypes.c_uint64)]


_PLAN_MEM_MAX = 8


class _Plan(ctypes.Structure):
    _fields_ = [("budget", ctypes.c_uint64), ("minimum", ctypes.c_uint64), ("session_bytes", ctypes.c_uint64),
                ("scratch_bytes", ctypes.c_uint64), ("overhead_bytes", ctypes.c_uint64),
                ("resident_bytes", ctypes.c_uint64), ("dense_bytes", ctypes.c_uint64),
                ("expert_bytes", ctypes.c_uint64), ("n_dense_streamed", ctypes.c_int), ("n_layer", ctypes.c_int),
                ("dense_slot_bytes", ctypes.c_uint64), ("n_expert_slots", ctypes.c_int),
                ("n_experts_total", ctypes.c_int), ("expert_slot_bytes", ctypes.c_uint64),
                ("n_expert_used", ctypes.c_int), ("n_moe_layers", ctypes.c_int),
                ("dense_layer_bytes", ctypes.c_uint64), ("requant_saved_bytes", ctypes.c_uint64),
                ("n_ctx_train", ctypes.c_int), ("n_ctx", ctypes.c_int), ("n_swa_layers", ctypes.c_int),
                ("swa_window", ctypes.c_int), ("swa_ring", ctypes.c_int), ("n_mem", ctypes.c_int),
                ("mem", _PlanMem * _PLAN_MEM_MAX), ("expert_width", ctypes.c_int), ("hot_known", ctypes.c_int),
                ("hot_share", ctypes.c_double), ("hot_hit_rate", ctypes.c_double),
                ("recall_known", ctypes.c_int), ("lookahead_recall", ctypes.c_double),
                ("n_guessed_layers", ctypes.c_int), ("ranks", ctypes.c_int),
                ("rank", ctypes.c_int), ("n_experts_all", ctypes.c_int), ("layer_lo", ctypes.c_int),
                ("layer_hi", ctypes.c_int), ("carry_floats", ctypes.c_int64)]


class _FoundModel(ctypes.Structure):
    _fields_ = [("store", ctypes.c_char * 16), ("name", ctypes.c_char * 1024), ("path", ctypes.c_char * 4096),
                ("size", ctypes.c_uint64)]


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


def _find_library() -> str:
    env = os.environ.get("DELTAFIN_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "libdeltafin.so.0"),
                 os.path.join(here, "..", "..", "build", "libdeltafin.so.0")):
        if os.path.exists(cand):
            return os.path.abspath(cand)
    found = ctypes.util.find_library("deltafin")
    return found or "libdeltafin.so.0"


_lib_path = _find_library()
_lib = ctypes.CDLL(_lib_path)
_P = ctypes.c_void_p
_ERR = (ctypes.c_char_p, ctypes.c_size_t)


def _sig(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_sig("df_model_default_params", _ModelParams)
_sig("df_model_load", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_ModelParams), ctypes.POINTER(_P), *_ERR)
_sig("df_model_free", None, _P)
_sig("df_model_get_info", None, _P, ctypes.POINTER(_ModelInfo))
_sig("df_model_plan", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_ModelParams), ctypes.POINTER(_Plan), *_ERR)
_sig("df_tokenize", ctypes.c_int, _P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
     ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.POINTER(ctypes.c_int), *_ERR)
_sig("df_token_to_piece", ctypes.c_int, _P, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int)
_sig("df_token_is_eog", ctypes.c_int, _P, ctypes.c_int32)
_sig("df_n_vocab", ctypes.c_int, _P)
_sig("df_session_default_params", _SessionParams)
_sig("df_session_new", ctypes.c_int, _P, ctypes.POINTER(_SessionParams), ctypes.POINTER(_P), *_ERR)
_sig("df_session_free", None, _P)
_sig("df_session_pos", ctypes.c_int, _P)
_sig("df_session_n_ctx", ctypes.c_int, _P)
_sig("df_session_truncate", ctypes.c_int, _P, ctypes.c_int, *_ERR)
_sig("df_decode", ctypes.c_int, _P, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.POINTER(ctypes.c_float),
     ctypes.c_int, *_ERR)
_sig("df_sampler_default_params", _SamplerParams)
_sig("df_sampler_new", _P, ctypes.POINTER(_SamplerParams), ctypes.c_int)
_sig("df_sampler_free", None, _P)
_sig("df_sampler_sample", ctypes.c_int32, _P, ctypes.POINTER(ctypes.c_float))
_sig("df_sampler_accept", None, _P, ctypes.c_int32)
_sig("df_chat_apply_template", ctypes.c_int, _P, ctypes.c_char_p, ctypes.POINTER(_ChatMessage), ctypes.c_int,
     ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), *_ERR)
_sig("df_chat_template", ctypes.c_char_p, _P)
_sig("df_parse_size", ctypes.c_uint64, ctypes.c_char_p)
_sig("df_models_find", ctypes.c_int, ctypes.POINTER(ctypes.POINTER(_FoundModel)), ctypes.POINTER(ctypes.c_int), *_ERR)
_sig("df_model_resolve", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, *_ERR)
_sig("df_version", ctypes.c_char_p)
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def library_path() -> str:
    """The shared library these bindings loaded."""
    return _lib_path


def version() -> str:
    """libdeltafin's version string."""
    return _lib.df_version().decode()


def _check(rc: int, err: ctypes.Array) -> None:
    if rc != DF_OK:
        raise DeltafinError(rc, err.value.decode(errors="replace") or "failed")


def _size(mem) -> int:
    if mem is None:
        return 0
    if isinstance(mem, int):
        if mem < 0:
            raise ValueError("mem must be >= 0")
        return mem
    n = _lib.df_parse_size(str(mem).encode())
    if n == 0:
        raise ValueError(f"bad size {mem!r} (bytes, or a number with K, M, G or T)")
    return n


def _model_params(mem=None, n_threads: int = 0, n_ctx: int = 0, n_sessions: int = 0, vocab_only: bool = False,
                  hot_file: Optional[str] = None, page_cache: bool = False) -> tuple:
    p = _lib.df_model_default_params()
    p.page_cache = 1 if page_cache else 0
    p.mem_budget = _size(mem)
    p.n_threads = int(n_threads)
    p.n_ctx = int(n_ctx)
    p.n_sessions = int(n_sessions)
    p.vocab_only = 1 if vocab_only else 0
    keep = None
    if hot_file is not None:
        keep = hot_file.encode()
        p.hot_file = keep
    return p, keep


def models() -> List[dict]:
    """The GGUF models in the Hugging Face cache, llama.cpp's cache, LM Studio and Ollama: dicts of store, name (what
    Model() and -m accept: hf:ORG/REPO:FILE, ollama:NAME:TAG, ...), path and size."""
    v = ctypes.POINTER(_FoundModel)()
    n = ctypes.c_int(0)
    err = ctypes.create_string_buffer(_ERRLEN)
    _check(_lib.df_models_find(ctypes.byref(v), ctypes.byref(n), err, _ERRLEN), err)
    try:
        return [{"store": v[i].store.decode(), "name": v[i].name.decode(errors="replace"),
                 "path": os.fsdecode(v[i].path), "size": v[i].size} for i in range(n.value)]
    finally:
        _libc.free(v)


def resolve(name: str) -> str:
    """The file a model name means (hf:ORG/REPO:QUANT, ollama:NAME[:TAG], lmstudio:..., llama.cpp:..., or a path)."""
    out = ctypes.create_string_buffer(4096)
    err = ctypes.create_string_buffer(_ERRLEN)
    _check(_lib.df_model_resolve(os.fsencode(name), out, 4096, err, _ERRLEN), err)
    return os.fsdecode(out.value)


def plan(path: str, mem, n_ctx: int = 0, n_sessions: int = 0) -> dict:
    """What a memory budget buys for the model at path, without loading it: a dict of df_plan's fields
    (budget, minimum, resident_bytes, n_expert_slots, ...). Raises DeltafinError if it cannot run at all."""
    p, _keep = _model_params(mem=mem, n_ctx=n_ctx, n_sessions=n_sessions)
    out = _Plan()
    err = ctypes.create_string_buffer(_ERRLEN)
    _check(_lib.df_model_plan(os.fsencode(resolve(path)), ctypes.byref(p), ctypes.byref(out), err, _ERRLEN), err)
    d = {name: getattr(out, name) for name, _ in _Plan._fields_ if name not in ("n_mem", "mem")}
    d["memory"] = [{"name": m.name.decode(), "layers": m.n_layers, "bytes": m.bytes} for m in out.mem[:out.n_mem]]
    return d


class _Owned:
    """A C object this Python object owns: freed by close(), at the end of a with block, or when it goes."""
    _h = None

    def _free(self, h) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Free the C object now (later uses raise DeltafinError)."""
        if self._h:
            self._free(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Sampler(_Owned):
    """Token sampling (temperature, top-k, top-p, min-p, repetition penalty, seed); temp <= 0 is greedy."""

    def __init__(self, n_vocab: int, temp: float = 0.8, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 repeat_penalty: float = 1.0, repeat_last_n: int = 64, seed: int = 0):
        p = _lib.df_sampler_default_params()
        p.temp, p.top_k, p.top_p, p.min_p = float(temp), int(top_k), float(top_p), float(min_p)
        p.repeat_penalty, p.repeat_last_n, p.seed = float(repeat_penalty), int(repeat_last_n), int(seed)
        self._h = _lib.df_sampler_new(ctypes.byref(p), int(n_vocab))
        if not self._h:
            raise DeltafinError(DF_E_NOMEM, "out of memory")

    def sample(self, logits) -> int:
        """Choose a token from a ctypes float array of n_vocab logits, and accept it."""
        t = _lib.df_sampler_sample(self._h, logits)
        _lib.df_sampler_accept(self._h, t)
        return int(t)

    def _free(self, h) -> None:
        _lib.df_sampler_free(h)


class Model(_Owned):
    """A loaded GGUF model: a path, or a name of deltafin.models() (ollama:NAME, hf:ORG/REPO:QUANT, ...). mem: a memory
    budget ("12G", or bytes; None: none), within which the weights are
    planned, kept or streamed (docs/memory.md); page_cache: what streams stays in the kernel's page cache, a second
    tier outside the budget (the CLI's --page-cache). Several sessions, in several threads, may share it."""

    def __init__(self, path: str, mem=None, n_threads: int = 0, n_ctx: int = 0, n_sessions: int = 0,
                 vocab_only: bool = False, hot_file: Optional[str] = None, page_cache: bool = False):
        p, self._keep = _model_params(mem, n_threads, n_ctx, n_sessions, vocab_only, hot_file, page_cache)
        h = _P()
        err = ctypes.create_string_buffer(_ERRLEN)
        _check(_lib.df_model_load(os.fsencode(resolve(path)), ctypes.byref(p), ctypes.byref(h), err, _ERRLEN), err)
        self._h = h
        self.path = path
        self._sessions = weakref.WeakSet()

    def close(self) -> None:
        """Free the model; its sessions must have been closed first (each holds a reference to it, so a model
        that is merely dropped goes after them)."""
        if self._h and any(s._h for s in self._sessions):
            raise DeltafinError(DF_E_INPUT, "the model still has open sessions: close them first")
        super().close()

    def _free(self, h) -> None:
        _lib.df_model_free(h)

    def _handle(self):
        if not self._h:
            raise DeltafinError(DF_E_INPUT, "the model is closed")
        return self._h

    @property
    def info(self) -> dict:
        """Facts about the model: arch, name, n_vocab, n_layer, n_embd, n_expert, n_params, ..."""
        i = _ModelInfo()
        _lib.df_model_get_info(self._handle(), ctypes.byref(i))
        d = {name: getattr(i, name) for name, _ in _ModelInfo._fields_}
        d["arch"] = (i.arch or b"").decode()
        d["name"] = (i.name or b"").decode()
        return d

    @property
    def n_vocab(self) -> int:
        return int(_lib.df_n_vocab(self._handle()))

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        """Token ids of text (UTF-8)."""
        b = text.encode()
        err = ctypes.create_string_buffer(_ERRLEN)
        need = ctypes.c_int(0)
        cap = len(b) + 8
        while True:
            out = (ctypes.c_int32 * cap)()
            _check(_lib.df_tokenize(self._handle(), b, len(b), int(add_special), int(parse_special), out, cap,
                                    ctypes.byref(need), err, _ERRLEN), err)
            if need.value <= cap:
                return list(out[:need.value])
            cap = need.value

    def token_bytes(self, token: int) -> bytes:
        """The bytes of one token's text (a piece of a UTF-8 character, possibly)."""
        buf = ctypes.create_string_buffer(256)
        n = _lib.df_token_to_piece(self._handle(), int(token), buf, 256)
        if n > 256:
            buf = ctypes.create_string_buffer(n)
            n = _lib.df_token_to_piece(self._handle(), int(token), buf, n)
        if n < 0:
            raise DeltafinError(DF_E_INPUT, f"bad token id {token}")
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        """The text of tokens (bytes that are not UTF-8 become U+FFFD)."""
        return b"".join(self.token_bytes(t) for t in tokens).decode(errors="replace")

    def is_end(self, token: int) -> bool:
        """Whether token ends a generation (end-of-text, end-of-turn)."""
        return bool(_lib.df_token_is_eog(self._handle(), int(token)))

    def session(self, n_ctx: int = 0, kv_f32: bool = False) -> "Session":
        """A new session (KV cache) of n_ctx tokens (0: the model's, at most 4096)."""
        return Session(self, n_ctx, kv_f32)

    def chat_prompt(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                    template: Optional[str] = None, **variables) -> str:
        """The prompt text of a conversation, rendered with the model's chat template (or template): messages are
        {"role": ..., "content": ...} dicts; other variables (tools=..., enable_thinking=...) go to the template."""
        extra = dict(variables)
        extra["messages"] = list(messages)
        out = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        _check(_lib.df_chat_apply_template(self._handle(), template.encode() if template else None, None, 0,
                                           int(add_generation_prompt), json.dumps(extra).encode(),
                                           ctypes.byref(out), err, _ERRLEN), err)
        try:
            return ctypes.string_at(out).decode(errors="replace")
        finally:
            _libc.free(out)

    def generate(self, prompt, max_tokens: int = 128, temp: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64, seed: int = 0,
                 n_ctx: int = 0, stop_at_end: bool = True) -> Iterator[str]:
        """Generate after prompt (text, or a list of token ids): yields the text as it comes, in pieces that are
        whole UTF-8 characters. temp <= 0 is greedy (the same text as `deltafin run --temp 0`)."""
        toks = self.tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        with self.session(n_ctx) as s:
            smp = Sampler(self.n_vocab, temp, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
            try:
                logits = s._decode_raw(toks)
                pending = b""
                for _ in range(max_tokens):
                    t = smp.sample(logits)
                    if stop_at_end and self.is_end(t):
                        break
                    pending += self.token_bytes(t)
                    cut = _utf8_complete(pending)
                    if cut:
                        yield pending[:cut].decode(errors="replace")
                        pending = pending[cut:]
                    if s.pos >= s.n_ctx:
                        break
                    logits = s._decode_raw([t])
                if pending:
                    yield pending.decode(errors="replace")
            finally:
                smp.close()

    def chat(self, messages: Sequence[dict], **kw) -> Iterator[str]:
        """generate() on the conversation's prompt (the model's chat template)."""
        return self.generate(self.tokenize(self.chat_prompt(messages), parse_special=True), **kw)


def _utf8_complete(b: bytes) -> int:
    """Length of the longest prefix of b that does not end inside a UTF-8 character."""
    n = len(b)
    for back in range(1, min(4, n) + 1):
        c = b[n - back]
        if c & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 1
            return n if back >= need else n - back
    return n


class Session(_Owned):
    """A sequence being decoded: the KV cache and the position. decode() feeds tokens and returns the last
    one's logits (a list of n_vocab floats)."""

    def __init__(self, model: Model, n_ctx: int = 0, kv_f32: bool = False):
        p = _lib.df_session_default_params()
        p.n_ctx = int(n_ctx)
        if kv_f32:
            p.kv_type = DF_KV_F32
        h = _P()
        err = ctypes.create_string_buffer(_ERRLEN)
        _check(_lib.df_session_new(model._handle(), ctypes.byref(p), ctypes.byref(h), err, _ERRLEN), err)
        self._h = h
        self.model = model  # keeps the model alive while the session is
        model._sessions.add(self)
        self._logits = (ctypes.c_float * model.n_vocab)()

    def _free(self, h) -> None:
        _lib.df_session_free(h)

    @property
    def pos(self) -> int:
        return int(_lib.df_session_pos(self._h))

    @property
    def n_ctx(self) -> int:
        return int(_lib.df_session_n_ctx(self._h))

    def _decode_raw(self, tokens: Sequence[int]):
        if not self._h:
            raise DeltafinError(DF_E_INPUT, "the session is closed")
        n = len(tokens)
        arr = (ctypes.c_int32 * max(n, 1))(*tokens)
        err = ctypes.create_string_buffer(_ERRLEN)
        _check(_lib.df_decode(self._h, arr, n, self._logits, 0, err, _ERRLEN), err)
        return self._logits

    def decode(self, tokens: Sequence[int]) -> List[float]:
        """Feed tokens at the current position; the last one's logits."""
        return list(self._decode_raw([int(t) for t in tokens]))

    def logits(self) -> List[float]:
        """The logits of the last decode."""
        return list(self._logits)

    def truncate(self, pos: int) -> None:
        """Forget every token from position pos on."""
        err = ctypes.create_string_buffer(_ERRLEN)
        _check(_lib.df_session_truncate(self._h, int(pos), err, _ERRLEN), err)
